"""Batched decoding with the KV cache (issue 4 "Speed") against independent references.

The reference is the course's sampling loop: one prompt, no padding, no cache, the whole
sequence through ``model(idx)`` at every step and the argmax of the last position. Batched
left-padded decoding, with and without the cache, must give exactly its greedy tokens for
every attention variant.
"""

from __future__ import annotations

import pytest
import torch

from attnlab.model.attention import REGISTRY
from attnlab.config.settings import ModelConfig
from attnlab.model.generate import generate
from attnlab.model.gpt import GPT

VARIANTS = sorted(REGISTRY)
VOCAB = 24
BLOCK = 16
# Different lengths in one batch, so most rows are left-padded.
PROMPTS = [[5, 9, 3], [7], [2, 4, 6, 8, 10, 12, 14], [11, 11, 3, 20, 21]]


def make_model(variant: str, seed: int = 0) -> GPT:
    """A tiny model with N(0, 0.5) weights (LayerNorms left at 1 and 0, whose random biases
    would add one input-independent favourite token): peaked, well separated logits that
    depend on the prompt, so greedy choices are not decided by rounding, and non-zero
    position biases (relative, synthesizer)."""
    torch.manual_seed(seed)
    model = GPT(ModelConfig(vocab_size=VOCAB, block_size=BLOCK, n_layer=2, n_head=2, n_embd=16,
                            dropout=0.0, attention=variant))
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.startswith("ln") and ".ln" not in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return model.eval()


@torch.no_grad()
def course_loop(model: GPT, prompt: list[int], steps: int, stop: int | None = None) -> list[int]:
    """Reference greedy decoding: one unpadded prompt, the full forward pass every step."""
    idx = torch.tensor([prompt])
    out: list[int] = []
    for _ in range(steps):
        logits, _ = model(idx)
        nxt = int(logits[0, -1].argmax())
        out.append(nxt)
        if nxt == stop:
            break
        idx = torch.cat([idx, torch.tensor([[nxt]])], 1)
    return out


@pytest.fixture(scope="module", params=VARIANTS)
def model(request) -> GPT:
    return make_model(request.param)


def test_batched_cached_and_uncached_match_the_course_loop(model: GPT) -> None:
    steps = BLOCK - max(map(len, PROMPTS))  # the longest prompt fills the block exactly
    expected = [course_loop(model, p, steps) for p in PROMPTS]
    cached = generate(model, PROMPTS, steps, use_cache=True)
    uncached = generate(model, PROMPTS, steps, use_cache=False)
    assert cached.tokens == expected
    assert uncached.tokens == expected
    # Log-probabilities: of the chosen token under the reference's softmax.
    for p, toks, lps in zip(PROMPTS, cached.tokens, cached.logprobs):
        seq = torch.tensor([p + toks])
        ref = model(seq)[0][0, len(p) - 1 : -1].log_softmax(-1)
        torch.testing.assert_close(torch.tensor(lps), ref.gather(1, torch.tensor(toks)[:, None])[:, 0],
                                   atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(torch.tensor(lps), torch.tensor(uncached.logprobs[PROMPTS.index(p)]),
                                   atol=1e-5, rtol=1e-5)


def test_batched_equals_one_prompt_at_a_time(model: GPT) -> None:
    batched = generate(model, PROMPTS, 6)
    for p, toks in zip(PROMPTS, batched.tokens):
        assert generate(model, [p], 6).tokens == [toks]
    # ...also when the batch is in another order (rows do not interact).
    reordered = generate(model, PROMPTS[::-1], 6)
    assert reordered.tokens == batched.tokens[::-1]


def test_stop_token_ends_each_row_on_its_own(model: GPT) -> None:
    free = [course_loop(model, p, 8) for p in PROMPTS]
    stop = free[0][2]  # row 0 emits it at step 3 (perhaps earlier); other rows may never
    got = generate(model, PROMPTS, 8, stop_token=stop)
    for toks, lps, ref in zip(got.tokens, got.logprobs, free):
        assert toks == (ref[: ref.index(stop) + 1] if stop in ref else ref)
        assert len(lps) == len(toks)
    assert len(got.tokens[0]) <= 3  # row 0 did stop; the others went on as they would alone


def test_decoding_ends_when_every_row_has_stopped() -> None:
    model = make_model("vanilla")
    first = [course_loop(model, [p[0]], 1)[0] for p in PROMPTS]
    # Stop on the token that a one-token prompt produces first: that row stops at once.
    got = generate(model, [[PROMPTS[0][0]]], 10, stop_token=first[0])
    assert got.tokens == [[first[0]]]


def test_max_new_tokens_is_capped_at_block_size(model: GPT) -> None:
    """A row continues until its sequence fills the block; a longer prompt in the same batch
    does not shorten a shorter one's budget."""
    long_prompt = list(range(2, 2 + BLOCK - 3))  # leaves room for 3 new tokens
    got = generate(model, [long_prompt, [5, 9]], 100)
    assert len(got.tokens[0]) == 3 and len(got.tokens[1]) == BLOCK - 2
    assert got.tokens == [course_loop(model, long_prompt, 3), course_loop(model, [5, 9], BLOCK - 2)]
    assert generate(model, [list(range(2, 2 + BLOCK))], 5).tokens == [[]]  # a full block: nothing


def test_bad_prompts_are_one_clear_error() -> None:
    model = make_model("vanilla")
    with pytest.raises(ValueError, match="at least one token"):
        generate(model, [[3], []], 4)
    with pytest.raises(ValueError, match="exceeds the model's block_size"):
        generate(model, [list(range(2, 2 + BLOCK + 1))], 4)


def test_generate_restores_training_mode_and_is_deterministic() -> None:
    model = make_model("rotary").train()
    a = generate(model, PROMPTS, 5)
    assert model.training
    b = generate(model, PROMPTS, 5, use_cache=False)
    assert a.tokens == b.tokens  # dropout 0 and eval mode inside: no randomness in greedy


def test_sampling_with_the_cache_matches_without() -> None:
    """Temperature sampling draws from the same distributions with and without the cache, so
    the same generator seed gives the same tokens."""
    model = make_model("relative")
    kw = dict(temperature=0.8, top_k=5, top_p=0.9)
    a = generate(model, PROMPTS, 6, generator=torch.Generator().manual_seed(3), **kw)
    b = generate(model, PROMPTS, 6, use_cache=False, generator=torch.Generator().manual_seed(3), **kw)
    assert a.tokens == b.tokens


@torch.no_grad()
def growing_loop(model: GPT, prompts: list[list[int]], max_new: int, stop_token=None, allowed_next=None):
    """The decoding loop as it was before its buffers were preallocated: every step concatenates
    the new token, its log-probability, the valid-key row and the key positions onto what came
    before, and the stacked query/key/value weights are made anew. Kept as the reference the
    faster loop must equal bit for bit."""
    from attnlab.data.vocab import PAD_ID
    from attnlab.model.attention import KVCache, masks
    from attnlab.model.generate import left_padded, _pick, _trimmed
    from attnlab.model.positions import left_padded_positions

    block = model.config.block_size
    limits = torch.tensor([min(max_new, block - len(p)) for p in prompts])
    B = len(prompts)
    idx, valid = left_padded(prompts, torch.device("cpu"))
    positions = left_padded_positions(valid)
    caches = [KVCache() for _ in model.blocks]
    out, logps = torch.empty(B, 0, dtype=torch.long), torch.empty(B, 0)
    done = torch.zeros(B, dtype=torch.bool)
    step_idx, step_pos, key_pos = idx, positions, positions
    for step in range(int(limits.max())):
        for b in model.blocks:
            b.attn.__dict__.pop("_stack", None)
        allowed = masks.padded(valid, step_idx.shape[1])
        logits, _ = model.run(step_idx, positions=step_pos, allowed=allowed, caches=caches, key_positions=key_pos)
        last = logits[:, -1].float()
        mask = allowed_next(out.tolist()) if allowed_next is not None else None
        nxt = _pick(last if mask is None else last.masked_fill(~mask, float("-inf")), 0.0, 0, 1.0, None)
        nxt = torch.where(done, torch.full_like(nxt, PAD_ID), nxt)
        out = torch.cat([out, nxt[:, None]], 1)
        logps = torch.cat([logps, last.log_softmax(-1).gather(1, nxt[:, None])], 1)
        if stop_token is not None:
            done |= nxt == stop_token
        done |= limits <= step + 1
        if bool(done.all()):
            break
        new_pos = (key_pos[:, -1:] + 1).clamp(max=block - 1)
        valid = torch.cat([valid, torch.ones(B, 1, dtype=torch.bool)], 1)
        key_pos = torch.cat([key_pos, new_pos], 1)
        step_idx, step_pos = nxt[:, None], new_pos
    return _trimmed(out, logps, limits, stop_token)


def test_decoding_equals_the_growing_loop_bit_for_bit(model: GPT) -> None:
    """Preallocated buffers and the kept weight stack change no token and no log-probability,
    with stop tokens, rows of different lengths and a constraint on the next token."""
    def odd_after_even(chosen: list[list[int]]) -> torch.Tensor:  # depends on what was chosen so far
        mask = torch.ones(len(chosen), VOCAB, dtype=torch.bool)
        for row, so_far in enumerate(chosen):
            if so_far and so_far[-1] % 2 == 0:
                mask[row, ::2] = False
        return mask

    stop = course_loop(model, PROMPTS[0], 8)[2]
    for kw in ({}, {"stop_token": stop}, {"allowed_next": odd_after_even}, {"stop_token": stop, "allowed_next": odd_after_even}):
        new, old = generate(model, PROMPTS, 9, **kw), growing_loop(model, PROMPTS, 9, **kw)
        assert (new.tokens, new.logprobs) == (old.tokens, old.logprobs), kw


def test_kept_weight_stack_follows_weights_changed_in_place() -> None:
    """Decoding after a weight is changed in place (an optimiser step, load_state_dict) reads
    the new weights, exactly as a model built with them does."""
    model, other = make_model("vanilla", seed=0), make_model("vanilla", seed=3)
    before = generate(model, PROMPTS, 6)
    with torch.no_grad():
        model.blocks[0].attn.key.weight.mul_(-1.0)
    fresh = make_model("vanilla", seed=0)  # never decoded before the change
    with torch.no_grad():
        fresh.blocks[0].attn.key.weight.mul_(-1.0)
    after = generate(model, PROMPTS, 6)
    assert after.logprobs != before.logprobs
    assert after.logprobs == generate(fresh, PROMPTS, 6).logprobs
    model.load_state_dict(other.state_dict())
    assert generate(model, PROMPTS, 6).logprobs == generate(other, PROMPTS, 6).logprobs


def _drafts(truth: dict[int, list[int]]):
    """Drafts for rows whose greedy continuation is ``truth[row]`` (prompt included): right,
    wrong throughout, and right for two tokens then wrong."""
    def right(row, ids):
        return truth[row][len(ids):len(ids) + 5]

    def wrong(row, ids):
        return [(t + 1) % VOCAB for t in truth[row][len(ids):len(ids) + 4]]

    def half(row, ids):
        guess = truth[row][len(ids):len(ids) + 5]
        return guess[:2] + [(t + 1) % VOCAB for t in guess[2:]]
    return {"right": right, "wrong": wrong, "half": half}


@pytest.mark.parametrize("kind", ["right", "wrong", "half"])
def test_a_draft_changes_no_token_whatever_it_guesses(model: GPT, kind: str) -> None:
    """Speculative decoding (``draft``) keeps the model's greedy tokens and their
    log-probabilities, with a stop token and rows that fill the block, for every variant."""
    steps = BLOCK - max(map(len, PROMPTS))
    free = generate(model, PROMPTS, steps)
    stop = free.tokens[0][2]
    plain = generate(model, PROMPTS, steps + 3, stop_token=stop)
    truth = {b: p + t for b, (p, t) in enumerate(zip(PROMPTS, plain.tokens))}
    drafted = generate(model, PROMPTS, steps + 3, stop_token=stop, draft=_drafts(truth)[kind])
    assert drafted.tokens == plain.tokens
    for got, ref in zip(drafted.logprobs, plain.logprobs):
        torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), atol=1e-5, rtol=1e-5)


def test_a_good_draft_takes_fewer_steps_and_a_bad_one_no_more() -> None:
    model = make_model("vanilla")
    steps = BLOCK - max(map(len, PROMPTS))
    plain = generate(model, PROMPTS, steps)
    truth = {b: p + t for b, (p, t) in enumerate(zip(PROMPTS, plain.tokens))}
    calls = []
    run = model.run
    model.run = lambda *a, **k: calls.append(1) or run(*a, **k)
    try:
        for kind in ("right", "wrong"):
            calls.clear()
            generate(model, PROMPTS, steps, draft=_drafts(truth)[kind])
            if kind == "right":  # five guessed a step, each right: the prompt, then a step per six
                assert len(calls) <= 1 + -(-steps // 6)
            else:  # one token a step, as without a draft
                assert len(calls) == steps
    finally:
        del model.run


def test_finished_rows_leave_the_drafted_batch_and_the_rest_decode_on() -> None:
    """Rows of different lengths fill the block at different steps: once half have finished,
    the batch keeps only the others, which still decode exactly as plain decoding does."""
    model = make_model("rotary")
    plain = generate(model, PROMPTS, BLOCK)
    truth = {b: p + t for b, (p, t) in enumerate(zip(PROMPTS, plain.tokens))}
    sizes = []
    run = model.run
    model.run = lambda idx, **k: sizes.append(idx.shape[0]) or run(idx, **k)
    try:
        drafted = generate(model, PROMPTS, BLOCK, draft=_drafts(truth)["wrong"])
    finally:
        del model.run
    assert drafted.tokens == plain.tokens
    assert sizes[0] == len(PROMPTS) and sizes[-1] < len(PROMPTS) // 2 + 1
