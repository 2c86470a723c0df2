"""Hard (argmax) attention: each query attends to exactly its highest-scoring visible key.

It has the parameters of vanilla attention, so any vanilla checkpoint can be evaluated with
``--attention argmax``. Trainable with a straight-through estimator: the forward pass uses the
one-hot weights, the backward pass the softmax's gradient (argmax itself has zero gradient).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import DotProductAttention


class ArgmaxAttention(DotProductAttention):
    name = "argmax"
    summary = "one_hot(argmax_j q_i.k_j) v, straight-through softmax gradient"
    expresses = ("routes one value per head and query: with k heads a position at layer n "
                 "depends on at most (k+1)^n inputs; cannot average")
    score_cost = "O(T^2 d)"
    fusable = False

    def normalize(self, scores: Tensor) -> Tensor:
        soft = torch.softmax(scores, dim=-1)
        hard = torch.zeros_like(soft).scatter_(-1, scores.argmax(dim=-1, keepdim=True), 1.0)
        return hard + soft - soft.detach()  # value of hard, gradient of soft
