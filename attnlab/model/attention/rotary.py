"""Rotary position embedding (Su et al. 2021): queries and keys are rotated, pair of
coordinates by pair, by an angle proportional to their position, so that q_i.k_j depends on the
positions only through i - j."""

from __future__ import annotations


import torch
from torch import Tensor

from ...config.settings import ModelConfig
from .base import DotProductAttention


def rotation_tables(n_positions: int, e: int, base: float = 10_000.0) -> tuple[Tensor, Tensor]:
    """cos and sin of the angle t * base^(-2i/e) for every position t and pair i: (n, e/2) each.

    The angles of positions.sinusoidal_table, kept apart as cos and sin (rotate needs them
    separately, not interleaved into one table) and computed as base ** (-2i/e), which rounds
    differently in float32 from that table's exp form (4 of the 8 frequencies differ in the
    last bit at e = 16): sharing it would change a rotary model's numbers."""
    freqs = base ** (-torch.arange(0, e, 2, dtype=torch.float32) / e)  # (e/2,)
    angles = torch.arange(n_positions, dtype=torch.float32)[:, None] * freqs
    return angles.cos(), angles.sin()


def rotate(t: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each coordinate pair (2i, 2i+1) of t (..., T, e) by the angles whose cos and sin
    (broadcastable to (..., T, e/2)) are given."""
    pairs = t.unflatten(-1, (-1, 2))
    x1, x2 = pairs[..., 0], pairs[..., 1]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class RotaryAttention(DotProductAttention):
    name = "rotary"
    summary = "softmax(R_i q_i . R_j k_j / sqrt(d/h)), R_t a rotation by angle t * theta"
    # The rotation has no parameters, but the model still adds its --positions table (learned
    # by default); `--positions none` gives the course's RoPE model (issue 16 leaves the default).
    expresses = ("content lookup whose match is modulated by the offset i-j; the rotation adds no "
                 "parameters and no absolute-position preference (the model's --positions table "
                 "still does unless --positions none)")
    score_cost = "O(T^2 d) (+ O(T d) rotation)"
    permutation_equivariant = False  # queries and keys are rotated by their positions

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        if self.head_dim % 2:
            raise ValueError(f"rotary attention needs an even head width, got {self.head_dim}")
        # Angles depend only on the position: computed once, looked up per call.
        for name, table in self.tables().items():
            self.register_buffer(name, table, persistent=False)

    def tables(self) -> dict[str, Tensor]:
        """The rotation's cos and sin tables (no weights: a loaded model computes them too,
        GPT.from_state)."""
        cos, sin = rotation_tables(self.config.block_size, self.head_dim)
        return {"cos": cos, "sin": sin}

    def with_positions(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        cos = self.cos[positions][:, None].to(q.dtype)  # (B|1, 1, T, e/2)
        sin = self.sin[positions][:, None].to(q.dtype)
        qk = rotate(torch.stack([q, k]), cos, sin)  # both in one pass: (2, B, h, T, e)
        return qk[0], qk[1]
