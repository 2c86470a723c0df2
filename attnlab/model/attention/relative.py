"""Relative position attention: a learned scalar bias per head and distance, pi[i-j], added
to the dot-product scores before the softmax (Shaw et al. 2018, as the course presents it).

Unclipped, every distance -(T-1)..(T-1) has its own bias: (2T-1)*h parameters per layer.
With ``rel_clip = k`` distances are clamped to [-k, k]: (2k+1)*h parameters.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...config.settings import ModelConfig
from .base import DotProductAttention


class RelativeAttention(DotProductAttention):
    name = "relative"
    summary = "softmax(q_i.k_j / sqrt(d/h) + pi_h[clip(i-j)])"
    expresses = ("content lookup plus a learned per-head preference for each offset i-j (e.g. "
                 "'the previous token'); shift-invariant; offsets beyond k share a bias")
    score_cost = "O(T^2 d) (+ O(T^2 h) bias lookup)"
    permutation_equivariant = False  # pi[i-j] depends on where the rows are
    no_decay = ("relative_bias",)  # a table of scores, like the position tables: never decayed

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.max_distance = config.rel_clip if config.rel_clip > 0 else config.block_size - 1
        # Biases start at zero: at initialisation the variant equals vanilla without positions.
        self.relative_bias = nn.Parameter(torch.zeros(config.n_head, 2 * self.max_distance + 1))

    def score_bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = (q_pos[:, :, None] - k_pos[:, None, :]).clamp(-self.max_distance, self.max_distance)
        return self.relative_bias[:, distance + self.max_distance].transpose(0, 1)  # (B|1, h, T, S)
