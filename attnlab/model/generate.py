"""Batched decoding: greedy, temperature, top-k and top-p sampling, with a KV cache.

Prompts of different lengths share a batch by left padding: each row's positions count from
its own first real token and padded keys are masked out, so a row decodes exactly as it would
alone. With the cache, each new token costs one position's worth of work per layer instead of
a forward pass over the whole sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from ..core.progress import progress_bar
from .attention import KVCache, masks
from ..data.datasets import DataError
from .gpt import GPT, evaluating
from .positions import left_padded_positions
from ..data.vocab import PAD_ID, Vocab


@dataclass
class Generation:
    tokens: list[list[int]]  # new tokens per prompt (stopped rows end at their stop token)
    logprobs: list[list[float]]  # log-probability of each chosen token under the model
    # With ``keep_cache``: per prompt, per layer, the keys and values (h, n, e) of its first n
    # tokens (the prompt and the new tokens but the last, which was never fed), so that a
    # caller reading on from the text need not compute them again.
    kept: list[list[tuple[Tensor, Tensor]]] | None = None


def filter_logits(logits: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Logits (B, V) divided by the temperature, with -inf outside the sampling candidates:
    exactly the ``top_k`` highest (even under ties), then the smallest prefix of the
    remaining tokens, by falling probability, whose mass reaches ``top_p``."""
    logits = logits / temperature
    if top_k > 0:
        keep = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).indices
        logits = torch.full_like(logits, float("-inf")).scatter(-1, keep, logits.gather(-1, keep))
    if 0 < top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        drop = probs.cumsum(-1) - probs >= top_p  # mass before the token already reaches top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits


def _pick(logits: Tensor, temperature: float, top_k: int, top_p: float, generator) -> Tensor:
    """Next token ids (B,) from last-position logits (B, V)."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = filter_logits(logits, temperature, top_k, top_p).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    model: GPT,
    prompts: list[list[int]],
    max_new_tokens: int,
    *,
    temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
    stop_token: int | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    allowed_next: Callable[[list[list[int]]], Tensor | None] | None = None, draft: "Draft | None" = None,
    keep_cache: bool = False,
) -> Generation:
    """Continue each prompt by up to ``max_new_tokens`` tokens (fewer if the block is full).
    Rows stop at ``stop_token`` (kept); decoding ends when every row has stopped.
    ``allowed_next``: (B, V) masks of the tokens each row may choose next, given its tokens so
    far (None: any); ``draft``: guesses checked several a step (``_drafted``), same tokens;
    ``keep_cache``: a drafted decoding returns each row's keys and values (``Generation.kept``)."""
    _check_prompts(prompts, model.config.block_size)
    if draft is not None and temperature <= 0 and use_cache and allowed_next is None and _any_mask(model):
        return _drafted(model, prompts, max_new_tokens, stop_token, draft, keep_cache)
    device = next(model.parameters()).device
    block = model.config.block_size
    # Each row may grow until it fills the block, whatever the other rows' lengths.
    limits = torch.tensor([min(max_new_tokens, block - len(p)) for p in prompts], device=device)
    B, steps = len(prompts), int(limits.max())
    idx, valid = left_padded(prompts, device)
    P = valid.shape[1]
    out, logps, seen, key_buf = _room(valid, steps)
    caches = [KVCache() for _ in model.blocks] if use_cache else None
    done = torch.zeros(B, dtype=torch.bool, device=device)
    step_idx, step_pos, n = idx, key_buf[:, :P], 0
    with evaluating(model):
        for step in range(steps):
            width = P + step
            key_pos = key_buf[:, :width]
            allowed = masks.padded(seen[:, :width], step_idx.shape[1])
            logits, _ = model.run(step_idx, positions=step_pos, allowed=allowed, caches=caches,
                                  key_positions=key_pos)
            last = logits[:, -1].float()
            mask = allowed_next(out[:, :step].tolist()) if allowed_next is not None else None
            nxt = _pick(last if mask is None else last.masked_fill(~mask.to(device), float("-inf")),
                        temperature, top_k, top_p, generator)
            nxt = torch.where(done, torch.full_like(nxt, PAD_ID), nxt)
            out[:, step] = nxt
            logps[:, step] = last.log_softmax(-1).gather(1, nxt[:, None])[:, 0]
            n = step + 1
            if stop_token is not None:
                done |= nxt == stop_token
            done |= limits <= step + 1
            if bool(done.all()):
                break
            new_pos = (key_pos[:, -1:] + 1).clamp(max=block - 1)  # clamped only in finished rows
            key_buf[:, width:width + 1] = new_pos
            if use_cache:
                step_idx, step_pos = nxt[:, None], new_pos
            else:
                step_idx = torch.cat([step_idx, nxt[:, None]], 1)
                step_pos = key_buf[:, :width + 1]
    out, logps = out[:, :n], logps[:, :n]
    return _trimmed(out, logps, limits, stop_token)


def _any_mask(model: GPT) -> bool:
    """Whether every attention layer honours any mask of visible keys (a drafted step hides
    rejected guesses in the middle of a row; a course-interface module cannot)."""
    return all(getattr(m, "any_mask", True) for m in model.modules())


Draft = Callable[[int, list[int]], list[int]]  # (row, its tokens so far) -> the tokens guessed next


@torch.no_grad()
def _drafted(model: GPT, prompts: list[list[int]], max_new_tokens: int, stop_token: int | None,
             draft: Draft, keep_cache: bool = False) -> Generation:
    """Greedy decoding that checks guessed tokens in one pass (speculative decoding with a
    draft that costs nothing to make, such as text looked up in the training corpus).

    Each step feeds every row's last chosen token and the tokens ``draft`` guesses after it;
    the model's own choice at each position is kept while it agrees with the guess, and its
    choice at the first disagreement is the next token. So the tokens are the model's greedy
    choices whatever the draft says; a good draft yields many of them a step, a bad one one
    (as plain decoding). Rows take different numbers of guesses: the cache keeps every
    position fed, and the positions of rejected guesses are masked out of every later step.
    Once half the rows of the batch have finished, the batch (and its cache) keeps only the
    others, so a few rows the draft guesses badly do not carry the whole batch along; with
    ``keep_cache`` a row's real positions are kept as it leaves the batch (``Generation.kept``)."""
    device = next(model.parameters()).device
    block = model.config.block_size
    limits = [min(max_new_tokens, block - len(p)) for p in prompts]
    out: list[list[int]] = [[] for _ in prompts]
    logps: list[list[float]] = [[] for _ in prompts]
    idx, seen = left_padded(prompts, device)
    key_pos = left_padded_positions(seen)
    caches = [KVCache() for _ in model.blocks]
    rows = list(range(len(prompts)))  # the prompt of each row of the batch
    kept: list[list[tuple[Tensor, Tensor]]] = [[] for _ in prompts]
    with evaluating(model):
        logits, _ = model.run(idx, positions=key_pos, allowed=masks.padded(seen), caches=caches,
                              key_positions=key_pos)
        last = logits[:, -1].float().log_softmax(-1)
        for b, r in enumerate(rows):
            _take(out[r], logps[r], [int(last[b].argmax())], last[b:b + 1], limits[r], stop_token)
        nxt_pos = key_pos[:, -1] + 1  # the position of each row's last chosen token
        while True:
            active = [b for b, r in enumerate(rows) if not _finished(out[r], limits[r], stop_token)]
            if not active or 2 * len(active) <= len(rows):
                rows, seen, key_pos, nxt_pos = _compacted(rows, active, seen, key_pos, nxt_pos, caches,
                                                          kept if keep_cache else None)
                active = list(range(len(rows)))
            if not active:
                break
            guesses = {b: draft(rows[b], prompts[rows[b]] + out[rows[b]])[:max(0, limits[rows[b]] - len(out[rows[b]]) - 1)]
                       for b in active}
            feed, real = _round_input(guesses, [out[r][-1] for r in rows], device)
            T = feed.shape[1]
            positions = (nxt_pos[:, None] + torch.arange(T, device=device)).clamp(max=block - 1)
            seen, key_pos = torch.cat([seen, real], 1), torch.cat([key_pos, positions], 1)
            logits, _ = model.run(feed, positions=positions, allowed=masks.padded(seen, T), caches=caches,
                                  key_positions=key_pos)
            scores = logits.float().log_softmax(-1)
            choices = scores.argmax(-1).tolist()
            for b, g in guesses.items():
                c, r = choices[b], rows[b]
                agreed = next((j for j in range(len(g)) if c[j] != g[j]), len(g))
                _take(out[r], logps[r], g[:agreed] + [c[agreed]], scores[b, :agreed + 1], limits[r], stop_token)
                seen[b, seen.shape[1] - T + 1 + agreed:] = False  # the rejected guesses, never seen again
                nxt_pos[b] += agreed + 1
    return Generation(out, logps, kept if keep_cache else None)


def _compacted(rows: list[int], active: list[int], seen: Tensor, key_pos: Tensor, nxt_pos: Tensor,
               caches: list[KVCache], kept: list | None) -> tuple[list[int], Tensor, Tensor, Tensor]:
    """A drafted batch with its ``active`` rows only (their cache too); the keys and values of
    the real positions of the rows leaving go to ``kept`` (when given), by prompt."""
    staying = set(active)
    for b in (b for b in range(len(rows)) if b not in staying) if kept is not None else ():
        kept[rows[b]] = [(c.k[b][:, seen[b]], c.v[b][:, seen[b]]) for c in caches]
    keep = torch.tensor(active, dtype=torch.long, device=seen.device)
    for cache in caches:
        cache.k, cache.v = cache.k[keep], cache.v[keep]
    return [rows[b] for b in active], seen[keep], key_pos[keep], nxt_pos[keep]


def _round_input(guesses: dict[int, list[int]], last: list[int], device) -> tuple[Tensor, Tensor]:
    """What a drafted step feeds (B, 1 + the longest guess): each guessing row's last chosen
    token and its guesses, PAD elsewhere; and which of those positions are real tokens."""
    T = 1 + max(len(g) for g in guesses.values())
    feed = torch.full((len(last), T), PAD_ID, dtype=torch.long, device=device)
    real = torch.zeros(len(last), T, dtype=torch.bool, device=device)
    for b, g in guesses.items():
        feed[b, :1 + len(g)] = torch.tensor([last[b], *g], device=device)
        real[b, :1 + len(g)] = True
    return feed, real


def _take(out: list[int], logps: list[float], chosen: list[int], scores: Tensor, limit: int,
          stop_token: int | None) -> None:
    """Append ``chosen`` (and their log-probabilities from ``scores`` (n, V)) to a row, up to its
    limit and its stop token."""
    for j, token in enumerate(chosen):
        if _finished(out, limit, stop_token):
            return
        out.append(token)
        logps.append(float(scores[j, token]))


def _finished(out: list[int], limit: int, stop_token: int | None) -> bool:
    """Whether a row has its limit of tokens or ends with the stop token."""
    return len(out) >= limit or (stop_token is not None and bool(out) and out[-1] == stop_token)


def _room(valid: Tensor, steps: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Room for every step at once, so a step writes its column instead of copying what came
    before: the new tokens (B, steps), their log-probabilities, which of the prompt and new
    positions are real tokens (B, P + steps: every new one is) and the positions of the prompt
    and new tokens (B, P + steps, the prompt's filled in)."""
    (B, P), device = valid.shape, valid.device
    seen = torch.ones(B, P + steps, dtype=torch.bool, device=device)
    seen[:, :P] = valid
    key_buf = torch.empty(B, P + steps, dtype=torch.long, device=device)
    key_buf[:, :P] = left_padded_positions(valid)
    return (torch.empty(B, steps, dtype=torch.long, device=device), torch.empty(B, steps, device=device),
            seen, key_buf)


def _check_prompts(prompts: list[list[int]], block: int) -> None:
    """Every prompt has a token, and none is longer than the block (ValueError)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    longest = max(len(p) for p in prompts)
    if longest > block:
        raise ValueError(f"a prompt of {longest} tokens exceeds the model's block_size {block}")


def left_padded(prompts: list[list[int]], device: torch.device) -> tuple[Tensor, Tensor]:
    """(B, P) token ids, prompts right-aligned after PAD, and (B, P) which of them are real."""
    longest = max(len(p) for p in prompts)
    idx = torch.full((len(prompts), longest), PAD_ID, dtype=torch.long, device=device)
    valid = torch.zeros(len(prompts), longest, dtype=torch.bool, device=device)
    for b, p in enumerate(prompts):
        idx[b, longest - len(p):] = torch.tensor(p, device=device)
        valid[b, longest - len(p):] = True
    return idx, valid


def _trimmed(out: Tensor, logps: Tensor, limits: Tensor, stop_token: int | None) -> Generation:
    """Each row's tokens up to its limit, or up to and including its stop token."""
    tokens, logprobs = [], []
    for b in range(out.shape[0]):
        row = out[b].tolist()
        n = min(len(row), int(limits[b]))
        if stop_token is not None and stop_token in row[:n]:
            n = row.index(stop_token) + 1
        tokens.append(row[:n])
        logprobs.append(logps[b, :n].tolist())
    return Generation(tokens, logprobs)


def continue_texts(model: GPT, vocab: Vocab, prompts: list[str], *, max_new: int,
                   temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                   batch_size: int = 64, stop: str | None = None, progress: bool = False,
                   source: str = "<prompt>") -> list[str]:
    """The continuation (new characters only) of every prompt; batches share one seeded
    generator, so the same seed and batch size give the same samples."""
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    stop_id = None if stop is None else vocab.encode(stop, source="--stop")[0]
    encoded = [vocab.encode(p, source=source, line=i + 1) for i, p in enumerate(prompts)]
    for i, ids in enumerate(encoded):
        if len(ids) > model.config.block_size:
            raise DataError(source, i + 1, f"the prompt is {len(ids)} characters, more than the model's "
                            f"block_size {model.config.block_size}")
    out: list[str] = []
    starts = range(0, len(encoded), batch_size)
    for s in progress_bar(starts, desc="generate", disable=not progress):
        gen = generate(model, encoded[s : s + batch_size], max_new, temperature=temperature,
                       top_k=top_k, top_p=top_p, stop_token=stop_id, generator=generator)
        out.extend(vocab.decode(t) for t in gen.tokens)
    return out

