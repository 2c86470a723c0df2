"""The documented extension points of DotProductAttention do what they say (issue 48, item 5).

A subclass that overrides ``queries_keys``, ``score_bias`` or ``normalize`` must compute its own
function on every path: the fused fast path, the plain path and KV-cache decoding. Each hook's
override is checked against vanilla with the same weights (it must differ) and against itself
across paths (they must agree), and decoding one position from the cache must equal the full
forward's last position.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from attnlab.config.settings import ModelConfig
from attnlab.model.attention import DotProductAttention, KVCache, VanillaAttention, masks

ATOL, RTOL = 1e-5, 1e-4


class DoubledQueries(DotProductAttention):
    """queries_keys: queries scaled by 3 (a sharper softmax than vanilla's)."""

    def queries_keys(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, float]:
        q, k = self.split_heads(self.query(x)), self.split_heads(self.key(x))
        return 3.0 * q, k, 1.0 / math.sqrt(self.head_dim)


class DistanceBias(DotProductAttention):
    """score_bias: -0.7 |i - j| (ALiBi-like)."""

    def score_bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return -0.7 * (q_pos[:, :, None] - k_pos[:, None, :]).abs()[:, None].float()


class TemperedSoftmax(DotProductAttention):
    """normalize: softmax at temperature 1/3."""

    def normalize(self, scores: Tensor) -> Tensor:
        return torch.softmax(3.0 * scores, dim=-1)


HOOKS = {"queries_keys": DoubledQueries, "score_bias": DistanceBias, "normalize": TemperedSoftmax}


def config() -> ModelConfig:
    return ModelConfig(vocab_size=30, block_size=16, n_layer=1, n_head=2, n_embd=16, dropout=0.0)


def layer_pair(cls: type) -> tuple[DotProductAttention, DotProductAttention]:
    """The variant and vanilla with the same random weights (std 0.3: peaked attention)."""
    torch.manual_seed(0)
    mine, vanilla = cls(config()).eval(), VanillaAttention(config()).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in mine.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    vanilla.load_state_dict(mine.state_dict())
    return mine, vanilla


def decode_last(layer: DotProductAttention, x: Tensor) -> Tensor:
    """The last position's output, decoded from a cache of the others."""
    T = x.shape[1]
    pos = torch.arange(T)[None]
    cache = KVCache()
    layer(x[:, :-1], pos[:, :-1], cache=cache)
    allowed = masks.causal(1, T)[None, None]
    out, _ = layer(x[:, -1:], pos[:, -1:], allowed=allowed, cache=cache, key_positions=pos)
    return out[:, 0]


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_an_overridden_hook_changes_every_path(hook: str) -> None:
    mine, vanilla = layer_pair(HOOKS[hook])
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(2))
    pos = torch.arange(9)[None]
    outputs = {}
    for fast in (True, False):
        outputs[fast] = mine.set_fast(fast)(x, pos)[0]
        reference = vanilla.set_fast(fast)(x, pos)[0]
        assert not torch.allclose(outputs[fast], reference, atol=1e-3), f"{hook} ignored (fast={fast})"
        decoded = decode_last(mine, x)
        assert not torch.allclose(decoded, decode_last(vanilla, x), atol=1e-3), f"{hook} ignored in decoding"
        torch.testing.assert_close(decoded, outputs[fast][:, -1], atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(outputs[True], outputs[False], atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_an_overridden_hook_reaches_the_weights_maps(hook: str) -> None:
    """need_weights takes the explicit path: its weights are the override's too."""
    mine, vanilla = layer_pair(HOOKS[hook])
    x = torch.randn(1, 7, 16, generator=torch.Generator().manual_seed(3))
    pos = torch.arange(7)[None]
    _, w_mine = mine(x, pos, need_weights=True)
    _, w_vanilla = vanilla(x, pos, need_weights=True)
    assert not torch.allclose(w_mine, w_vanilla, atol=1e-3)


def test_normalize_override_refuses_the_fused_kernel() -> None:
    assert not TemperedSoftmax(config()).fuses()
    assert DoubledQueries(config()).fuses() and DistanceBias(config()).fuses()
    assert VanillaAttention(config()).fuses()
