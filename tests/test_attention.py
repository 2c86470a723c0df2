"""The attention variants and position schemes (issue 3).

Registry-wide tests iterate REGISTRY, so a new variant is covered as soon as it is registered;
its parameter formula must then be written into ``attention_parameters_per_layer`` below, by
hand from the paper, never from the code.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from attnlab.model.attention import REGISTRY, VanillaAttention, merge_query_key, straight_through_argmax
from attnlab.model.checkpoint import load_model, save_checkpoint
from attnlab.config.settings import ModelConfig
from attnlab.model.gpt import GPT
from attnlab.model.positions import sinusoidal_table
from attnlab.data.vocab import Vocab

VOCAB = Vocab.from_text("abcdefghi")  # 11 ids: PAD, MASK and 9 letters
VARIANTS = list(REGISTRY)


def tiny(attention: str = "vanilla", **kw) -> ModelConfig:
    base = dict(vocab_size=len(VOCAB), block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=0.0,
                attention=attention)
    return ModelConfig(**{**base, **kw})


def model_for(config: ModelConfig, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    model = GPT(config).eval()
    # Like a trained model: weights of unit-scale outputs, and random values for the
    # parameters that start at zero (relative biases, merged u, synthesizer b2, biases), which
    # would otherwise hide bugs in how they are indexed. LayerNorms keep their init.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln" not in name and not name.startswith("ln_f"):
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]) if p.ndim > 1 else 0.3)
    return model


def tokens(B: int = 3, T: int = 8, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, len(VOCAB), (B, T), generator=g)


# ---- registry-wide -------------------------------------------------------------------------
def attention_parameters_per_layer(c: ModelConfig) -> int:
    """Per-layer attention parameters of each variant, from its definition (SPEC 4, issue 3)."""
    d, h, T = c.n_embd, c.n_head, c.block_size
    linear = d * d + d  # one d x d projection with bias
    dot_product = 4 * linear  # Q, K, V and the output projection A
    clip = c.rel_clip if c.rel_clip > 0 else T - 1
    formulas = {
        "vanilla": dot_product,
        "rotary": dot_product,  # rotations have no parameters
        "argmax": dot_product,
        # A_i, b_1 (d -> d), B_i: h of (d/h x T), b_2: T, then V and A
        "synthesizer": linear + h * (d // h) * T + T + 2 * linear,
        # pi[i-j] for |i-j| <= clip, per head: (2T-1) h unclipped, (2k+1) h clipped
        "relative": dot_product + (2 * clip + 1) * h,
        # W_h (d x d) and the surviving query-bias term u_h (d) per head, then V and A
        "merged_qk": h * d * d + h * d + 2 * linear,
    }
    if c.attention not in formulas:
        raise AssertionError(f"write the parameter formula of {c.attention!r} into this test")
    return formulas[c.attention]


def total_parameters(c: ModelConfig) -> int:
    d, V, L = c.n_embd, c.vocab_size, c.n_layer
    embeddings = V * d + c.block_size * d  # tokens + learned positions (add mode)
    block = 2 * 2 * d + (d * 4 * d + 4 * d) + (4 * d * d + d)  # two LayerNorms, MLP
    return embeddings + L * (block + attention_parameters_per_layer(c)) + 2 * d + d * V  # ln_f, head


@pytest.mark.parametrize("rel_clip", [0, 3])
@pytest.mark.parametrize("name", VARIANTS)
def test_parameter_counts_match_formulas(name, rel_clip):
    c = tiny(name, rel_clip=rel_clip)
    model = GPT(c)
    assert model.num_parameters(attention_only=True) == c.n_layer * attention_parameters_per_layer(c)
    assert model.num_parameters() == total_parameters(c)


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "none"])
@pytest.mark.parametrize("name", VARIANTS)
def test_output_shapes(name, positions):
    c = tiny(name, positions=positions)
    model = model_for(c)
    idx = tokens(3, 6)
    logits, weights = model.run(idx, need_weights=True)
    assert logits.shape == (3, 6, c.vocab_size)
    assert len(weights) == c.n_layer
    for w in weights:
        assert w.shape == (3, c.n_head, 6, 6)
        torch.testing.assert_close(w.sum(-1), torch.ones(3, c.n_head, 6))
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("name", VARIANTS)
def test_causality(name, fast):
    model = model_for(tiny(name))
    idx = tokens(2, 8)
    t = 5
    changed = idx.clone()
    changed[:, t:] = (changed[:, t:] - 2 + 1) % (len(VOCAB) - 2) + 2  # different future tokens
    model.set_fast(fast)
    a, _ = model.run(idx)
    b, _ = model.run(changed)
    torch.testing.assert_close(a[:, :t], b[:, :t], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, t:], b[:, t:])  # the change is visible from position t on


@pytest.mark.parametrize("name", VARIANTS)
def test_every_parameter_gets_a_gradient(name):
    model = model_for(tiny(name)).train()
    idx = tokens(4, 8)
    targets = torch.roll(idx, -1, dims=1)
    _, loss = model(idx, targets)
    loss.backward()
    silent = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not silent, f"no gradient reaches {silent}"


@pytest.mark.parametrize("name", VARIANTS)
def test_checkpoint_round_trip(name, tmp_path):
    model = model_for(tiny(name, rel_clip=3))
    path = save_checkpoint(tmp_path / "ckpt.safetensors", model, VOCAB)
    loaded, vocab, ckpt = load_model(path)
    assert ckpt.model_config.attention == name and vocab == VOCAB
    idx = tokens()
    torch.testing.assert_close(loaded(idx)[0], model(idx)[0], rtol=0, atol=0)


def permuted_outputs(model: GPT, idx: torch.Tensor, perm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(f(x)[perm], f(x[perm])) along the sequence dimension."""
    out, _ = model.run(idx)
    out_perm, _ = model.run(idx[:, perm])
    return out[:, perm], out_perm


@pytest.mark.parametrize("name", VARIANTS)
def test_bidirectional_permutation_equivariance(name):
    """With --no-causal and --positions none, permuting the input rows permutes the output
    rows exactly for content-only variants; position-dependent ones (synthesizer: B_i indexed
    by position; relative: pi[i-j]; rotary: rotation by position) are not equivariant."""
    model = model_for(tiny(name, causal=False, positions="none"))
    idx = tokens(2, 8)
    perm = torch.tensor([3, 0, 7, 1, 6, 2, 5, 4])
    expected, got = permuted_outputs(model, idx, perm)
    equivariant = torch.allclose(expected, got, atol=1e-5)
    assert equivariant == REGISTRY[name].permutation_equivariant


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
@pytest.mark.parametrize("name", VARIANTS)
def test_absolute_positions_break_equivariance(name, positions):
    model = model_for(tiny(name, causal=False, positions=positions))
    idx = tokens(2, 8)
    expected, got = permuted_outputs(model, idx, torch.tensor([3, 0, 7, 1, 6, 2, 5, 4]))
    assert not torch.allclose(expected, got, atol=1e-3)


def test_causal_model_is_not_equivariant_even_without_positions():
    model = model_for(tiny("vanilla", positions="none"))  # the causal mask orders the rows
    expected, got = permuted_outputs(model, tokens(2, 8), torch.tensor([3, 0, 7, 1, 6, 2, 5, 4]))
    assert not torch.allclose(expected, got, atol=1e-3)


# ---- merged query-key ----------------------------------------------------------------------
def test_merged_qk_conversion_gives_the_same_attention():
    c = tiny("vanilla", causal=True)
    torch.manual_seed(0)
    layer = VanillaAttention(c)
    with torch.no_grad():  # trained-looking weights, nonzero biases
        for p in layer.parameters():
            p.normal_(0.0, 0.5)
    merged = merge_query_key(layer)
    x = torch.randn(3, 8, c.n_embd)
    pos = torch.arange(8)[None]
    y_v, w_v = layer(x, pos, need_weights=True)
    y_m, w_m = merged(x, pos, need_weights=True)
    torch.testing.assert_close(w_m, w_v, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(y_m, y_v, rtol=1e-4, atol=1e-6)
    # W_h = W_Q,h^T W_K,h / sqrt(d/h), built here head by head from the weight matrices
    dh = c.head_dim
    for h in range(c.n_head):
        rows = slice(h * dh, (h + 1) * dh)
        expected = layer.query.weight[rows].T @ layer.key.weight[rows] / math.sqrt(dh)
        torch.testing.assert_close(merged.W[h], expected)
    # the fused path of the merged layer agrees too
    torch.testing.assert_close(merged(x, pos)[0], y_v, rtol=1e-4, atol=1e-6)


# ---- positions -----------------------------------------------------------------------------
@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_concat_positions_have_no_cross_terms(positions):
    """With q = k = z, concatenation gives z_i.z_j = x_i.x_j + p_i.p_j exactly; addition adds
    the cross terms x_i.p_j + p_i.x_j. Uses the model's own embedding code."""
    idx = tokens(2, 8)
    pos = torch.arange(8)[None]
    concat = model_for(tiny(positions=positions, position_mode="concat", position_dim=6))
    z = concat.embed(idx, pos)  # (B, T, d)
    x, p = concat.tok_emb(idx), concat.pos_emb[pos]  # (B, T, d-6), (1, T, 6)
    assert z.shape == (2, 8, 16) and x.shape[-1] == 10
    torch.testing.assert_close(z @ z.transpose(1, 2), x @ x.transpose(1, 2) + p @ p.transpose(1, 2))

    added = model_for(tiny(positions=positions, position_mode="add"))
    z = added.embed(idx, pos)
    x, p = added.tok_emb(idx), added.pos_emb[pos]
    cross = x @ p.transpose(1, 2) + p @ x.transpose(1, 2)
    assert cross.abs().max() > 1e-3
    torch.testing.assert_close(z @ z.transpose(1, 2), x @ x.transpose(1, 2) + p @ p.transpose(1, 2) + cross)


def test_sinusoidal_table_matches_vaswani():
    table = sinusoidal_table(10, 6)
    for pos in (0, 3, 9):
        for i in range(3):
            angle = pos / 10_000 ** (2 * i / 6)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


# ---- relative and rotary -------------------------------------------------------------------
@pytest.mark.parametrize("rel_clip", [0, 2])
def test_relative_scores_are_vanilla_plus_clipped_bias(rel_clip):
    c = tiny("relative", rel_clip=rel_clip, positions="none", causal=False)  # both signs of i-j
    model = model_for(c)
    layer = model.blocks[0].attn
    T, h = c.block_size, c.n_head
    k = rel_clip or T - 1
    assert layer.relative_bias.numel() == (2 * k + 1) * h
    x = torch.randn(2, T, c.n_embd)
    pos = torch.arange(T)[None]
    q, key, scale = layer.queries_keys(x, pos)
    content = q @ key.transpose(-2, -1) * scale  # (B, h, T, T)
    # pi is stored from distance -k to +k; distance i-j maps to column clip(i-j) + k
    bias = torch.empty(h, T, T)
    for i in range(T):
        for j in range(T):
            bias[:, i, j] = layer.relative_bias[:, max(-k, min(k, i - j)) + k]
    expected = torch.softmax(content + bias, -1)
    _, w = layer(x, pos, need_weights=True)
    torch.testing.assert_close(w, expected)


def test_rotary_scores_depend_only_on_relative_position():
    c = tiny("rotary", positions="none", block_size=16)  # room for the shifted positions
    layer = model_for(c).blocks[0].attn
    x = torch.randn(2, 8, c.n_embd)
    pos = torch.arange(8)[None]

    def scores(p):
        q, k, scale = layer.queries_keys(x, p)
        return q @ k.transpose(-2, -1) * scale

    torch.testing.assert_close(scores(pos + 5), scores(pos), rtol=1e-4, atol=1e-5)  # shift-invariant
    same = torch.randn(1, 1, c.n_embd).expand(1, 8, -1)  # one token everywhere
    q, k, scale = layer.queries_keys(same, pos)
    s = (q @ k.transpose(-2, -1) * scale)[0]  # (h, T, T): constant along each diagonal
    torch.testing.assert_close(s[:, 1:, 1:], s[:, :-1, :-1], rtol=1e-4, atol=1e-5)
    assert not torch.allclose(s[:, 0, 0], s[:, 1, 0])  # ... yet it does depend on i - j


# ---- argmax --------------------------------------------------------------------------------
def test_argmax_forward_is_one_hot_and_gradient_is_softmax():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 5, 5, generator=g).masked_fill(~torch.ones(5, 5).tril().bool(), -math.inf)
    upstream = torch.randn(2, 3, 5, 5, generator=g)
    s1 = scores.clone().requires_grad_()
    w = straight_through_argmax(s1)
    one_hot = torch.nn.functional.one_hot(scores.argmax(-1), 5).float()
    assert torch.equal(w.detach(), one_hot)
    (w * upstream).sum().backward()
    s2 = scores.clone().requires_grad_()
    (torch.softmax(s2, -1) * upstream).sum().backward()
    torch.testing.assert_close(s1.grad, s2.grad)


@pytest.mark.parametrize("trained_as", ["vanilla", "rotary", "relative"])
def test_argmax_evaluates_a_dot_product_checkpoint(trained_as, tmp_path):
    model = model_for(tiny(trained_as))
    save_checkpoint(tmp_path / "c.safetensors", model, VOCAB)
    hard, _, _ = load_model(tmp_path / "c.safetensors", attention="argmax")
    expected_name = "argmax" if trained_as == "vanilla" else f"{trained_as}+argmax"
    assert hard.config.attention == expected_name
    idx = tokens(2, 8)
    _, soft_w = model.run(idx, need_weights=True)
    _, hard_w = hard.run(idx, need_weights=True)
    # first layer: same scores, so the one-hot picks the soft weights' maximum
    torch.testing.assert_close(hard_w[0], torch.nn.functional.one_hot(soft_w[0].argmax(-1), 8).float())
    assert all(((w == 0) | (w == 1)).all() for w in hard_w)


def test_unknown_variant_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown attention variant 'nope'"):
        GPT(tiny("nope"))
    with pytest.raises(ValueError, match="unknown attention variant"):
        GPT(tiny("nope+argmax"))


def test_hard_variant_keeps_parameters_and_causality():
    soft = model_for(tiny("rotary"))
    hard = GPT(dataclasses.replace(soft.config, attention="rotary+argmax")).eval()
    hard.load_state_dict(soft.state_dict())
    idx = tokens(2, 8)
    changed = idx.clone()
    changed[:, 6:] = 2
    torch.testing.assert_close(hard(idx)[0][:, :6], hard(changed)[0][:, :6], rtol=0, atol=0)
