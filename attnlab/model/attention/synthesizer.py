"""Dense synthesizer attention (Tay et al. 2020) as the course defines it (SPEC section 4).

Each position's score row is synthesised from that position alone:
``softmax(ReLU(X A_i + b_1) B_i + b_2 + causal mask)(X V_i)``, with ``B_i`` (d/h x block_size)
sliced to the keys present. There is no query-key dot product: the score of key j depends on
j only through its position, never on its content.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...config.settings import ModelConfig
from .base import Attention


class SynthesizerAttention(Attention):
    name = "synthesizer"
    summary = "softmax(ReLU(X A_i + b_1) B_i + b_2 + causal mask)(X V_i)"
    expresses = ("a learned distribution over absolute key positions chosen by the query's "
                 "content: cannot look a key up by its content; nothing beyond block_size")
    score_cost = "O(T^2 d) (one d/h x T product per head)"
    permutation_equivariant = False  # B_i and b_2 are indexed by absolute key position

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.w1 = nn.Linear(config.n_embd, config.n_embd)  # all heads' A_i and b_1
        # B_i per head, one column per key position; N(0, 0.02) like every weight (SPEC 4).
        self.w2 = nn.Parameter(torch.randn(config.n_head, self.head_dim, config.block_size) * 0.02)
        self.b2 = nn.Parameter(torch.zeros(config.block_size))

    def queries_keys(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, float]:
        q = self.split_heads(torch.relu(self.w1(x)))  # (B, h, T, dh)
        # The "key" of position j is column j of B_i: (B|1, h, T, dh)
        k = self.w2.permute(0, 2, 1)[:, positions].permute(1, 0, 2, 3)
        return q, k, 1.0

    def score_bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.b2[k_pos][:, None, None, :]  # (B|1, 1, 1, S)
