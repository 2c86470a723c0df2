"""The fast path's dropout (attnlab/model/dropout.py): dropout's distribution from cheaper random bits.

Statistical checks use bounds of 6 standard errors: with fixed seeds they are deterministic,
and a correct implementation would fail one with probability about 2e-9 per check.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

import attnlab.model.dropout as dropout_module
from attnlab.model.attention import build_attention
from attnlab.config.settings import ModelConfig, TrainConfig
from attnlab.model.dropout import Dropout, drop_threshold, dropout, keep_scale
from attnlab.model.gpt import GPT
from attnlab.training.pipeline import pretrain

P = 0.1
P_EFF = drop_threshold(P) / 2**32  # the probability actually used
SCALE = 1 / (1 - P_EFF)


def sigma(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n)


def test_threshold_rounds_p_to_32_bits() -> None:
    assert abs(P_EFF - P) < 2**-32
    assert drop_threshold(0.0) == 0 and drop_threshold(1.0) == 2**32 and drop_threshold(0.5) == 2**31
    with pytest.raises(ValueError, match="between 0 and 1"):
        drop_threshold(1.5)


def test_drop_rate_and_rescaling() -> None:
    torch.manual_seed(0)
    x = torch.full((1_000_003,), 2.0)  # odd size: the last 64-bit draw is half used
    y = dropout(x, P, training=True)
    dropped = y == 0
    rate = float(dropped.double().mean())
    assert abs(rate - P_EFF) < 6 * sigma(P, x.numel()), rate
    kept = y[~dropped]
    assert torch.equal(kept, torch.full_like(kept, 2.0 * SCALE))  # every kept element, exactly
    for p in (0.3, 0.5, 0.9):  # other rates too (the threshold is signed-shifted: check both halves)
        rate = float((dropout(torch.ones(400_000), p, True) == 0).double().mean())
        assert abs(rate - p) < 6 * sigma(p, 400_000), (p, rate)


def test_elements_are_independent() -> None:
    """Each position is dropped at the same rate, and pairs (including the two halves of one
    64-bit draw, and the same position in consecutive calls) are dropped independently."""
    torch.manual_seed(1)
    n, width = 20_000, 64
    masks = torch.stack([dropout(torch.ones(width), P, True) == 0 for _ in range(n)]).double()
    per_position = masks.mean(0)
    assert float((per_position - P_EFF).abs().max()) < 6 * sigma(P, n)
    both = P_EFF**2
    adjacent = masks[:, 0::2] * masks[:, 1::2]  # halves of one draw
    assert abs(float(adjacent.mean()) - both) < 6 * sigma(both, adjacent.numel())
    shifted = masks[:, :-1] * masks[:, 1:]
    assert abs(float(shifted.mean()) - both) < 6 * sigma(both, shifted.numel())
    consecutive = masks[:-1] * masks[1:]  # call t and call t+1
    assert abs(float(consecutive.mean()) - both) < 6 * sigma(both, consecutive.numel())


def test_masks_follow_torch_seed() -> None:
    x = torch.ones(4, 1000)
    torch.manual_seed(5)
    a, b = dropout(x, P, True), dropout(x, P, True)
    torch.manual_seed(5)
    assert torch.equal(dropout(x, P, True), a)  # same seed, same mask: resumable, reproducible
    assert not torch.equal(a, b)  # each call draws a new mask
    torch.manual_seed(6)
    assert not torch.equal(dropout(x, P, True), a)


def test_identity_and_extremes() -> None:
    x = torch.randn(3, 5)
    assert dropout(x, P, training=False) is x
    assert dropout(x, 0.0, training=True) is x
    assert torch.equal(dropout(x, 1.0, training=True), torch.zeros_like(x))
    module = Dropout(P).eval()
    assert module(x) is x


def test_gradient_is_the_mask_times_the_scale() -> None:
    torch.manual_seed(2)
    x = torch.randn(50, 40, requires_grad=True)
    y = dropout(x, P, True)
    g = torch.randn_like(y)
    y.backward(g)
    kept = (y != 0).float()
    torch.testing.assert_close(x.grad, g * kept * SCALE)
    torch.testing.assert_close(y.detach(), x.detach() * kept * SCALE)


def test_plain_path_is_torch_dropout() -> None:
    x = torch.randn(6, 300)
    torch.manual_seed(3)
    expected = F.dropout(x, P, True)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, P, True, fast=False), expected)
    torch.manual_seed(3)
    assert torch.equal(Dropout(P).train().set_fast(False)(x), expected)


def test_keep_scale_matches_dtype_and_shape() -> None:
    x = torch.ones(3, 7, 5, dtype=torch.bfloat16)
    m = keep_scale(x, P)
    assert m.shape == x.shape and m.dtype == x.dtype
    assert set(m.unique().tolist()) <= {0.0, float(torch.tensor(SCALE, dtype=torch.bfloat16))}


# --------------------------------------------------------------- in the model, fast vs plain


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "plain"])
def test_attention_with_dropout_has_the_eval_output_as_expectation(fast: bool) -> None:
    """Attention and residual dropout are linear in their masks, so averaged over masks the
    training-mode output is the eval-mode output, on both paths: the fast path's masks have
    the plain path's expectation. 4,000 copies of one input in a batch draw 4,000 masks."""
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=30, block_size=16, n_layer=1, n_head=2, n_embd=16, dropout=0.3)
    layer = build_attention(config)
    x = torch.randn(1, 9, 16).expand(4000, -1, -1)
    positions = torch.arange(9)[None]
    with torch.no_grad():
        expected, _ = layer.eval()(x[:1], positions)
        samples, _ = layer.train().set_fast(fast)(x, positions)
    mean, se = samples.mean(0), samples.std(0) / math.sqrt(len(samples))
    assert float(((mean - expected[0]).abs() - 6 * se).max()) < 1e-6
    assert float(samples.std(0).mean()) > 0.01  # the masks did vary


def test_fast_cpu_training_uses_the_cheap_masks(monkeypatch) -> None:
    """On CPU the fast path never calls torch's per-element dropout (nor SDPA with dropout);
    the plain path does."""
    calls = []
    real = F.dropout
    monkeypatch.setattr(dropout_module.F, "dropout", lambda *a, **k: calls.append(1) or real(*a, **k))
    real_sdpa = F.scaled_dot_product_attention

    def sdpa(*args, dropout_p=0.0, **kw):
        assert dropout_p == 0.0, "fused attention with dropout on CPU"
        return real_sdpa(*args, dropout_p=dropout_p, **kw)

    monkeypatch.setattr("attnlab.model.attention.base.F.scaled_dot_product_attention", sdpa)
    config = ModelConfig(vocab_size=30, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.1)
    model = GPT(config).train()
    idx = torch.randint(1, 30, (3, 12))
    model(idx)
    assert calls == []
    model.set_fast(False)
    model(idx)
    assert len(calls) == 1 + 2 * 3  # embedding + per layer: attention, residual, MLP


def test_training_fast_and_plain_reach_the_same_loss(tiny_data, tmp_path, tiny_config) -> None:
    """Speed does not change results: the same run with the fast path (cheap masks, one-product
    attention, buckets) and the plain path ends at the same loss within dropout's noise."""
    cfg = dataclasses.replace(tiny_config, dropout=0.1)
    losses = {}
    for fast in (True, False):
        config = TrainConfig(epochs=40, batch_size=8, learning_rate=3e-3, checkpoint_every=0,
                             log_every=1, warmup_tokens=100, seed=0, fast=fast)
        _, _, result = pretrain(cfg, config, corpus=tiny_data["corpus"], run_dir=tmp_path / str(fast),
                                log=lambda _m: None)
        first = result.history[0]["loss"]
        losses[fast] = sum(r["loss"] for r in result.history[-20:]) / 20
        assert losses[fast] < 0.8 * first  # it learned something
    assert abs(losses[True] - losses[False]) < 0.05 * losses[False], losses
