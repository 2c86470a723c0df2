"""Rotary position embedding (Su et al. 2021): queries and keys are rotated, pair of
coordinates by pair, by an angle proportional to their position, so that q_i.k_j depends on the
positions only through i - j."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..config import ModelConfig
from .base import DotProductAttention


def rotate(t: Tensor, positions: Tensor, base: float = 10_000.0) -> Tensor:
    """Rotate t (B, h, T, e) by its positions (B|1, T); e must be even."""
    e = t.shape[-1]
    freqs = base ** (-torch.arange(0, e, 2, device=t.device, dtype=torch.float32) / e)  # (e/2,)
    angles = positions.to(torch.float32)[:, None, :, None] * freqs  # (B|1, 1, T, e/2)
    cos, sin = angles.cos().to(t.dtype), angles.sin().to(t.dtype)
    x1, x2 = t[..., 0::2], t[..., 1::2]
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return out.flatten(-2)


class RotaryAttention(DotProductAttention):
    name = "rotary"
    summary = "softmax(R_i q_i . R_j k_j / sqrt(d/h)), R_t a rotation by angle t * theta"
    expresses = ("content lookup whose match is modulated by the offset i-j, with no position "
                 "parameters; no absolute-position preference of its own")
    score_cost = "O(T^2 d) (+ O(T d) rotation)"
    permutation_equivariant = False  # queries and keys are rotated by their positions

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        if self.head_dim % 2:
            raise ValueError(f"rotary attention needs an even head width, got {self.head_dim}")

    def queries_keys(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, float]:
        q, k, _ = super().queries_keys(x, positions)
        return rotate(q, positions), rotate(k, positions), 1.0 / math.sqrt(self.head_dim)
