"""Hard (argmax) attention: each query attends to exactly its highest-scoring visible key.

Forward pass: the weights are ``one_hot(argmax_j s_ij)``, so every head copies one value.
Gradients: argmax is piecewise constant (zero gradient almost everywhere), so training uses a
straight-through estimator: the backward pass pretends the weights were ``softmax(s_i)`` and
passes the softmax's gradient to the scores (Bengio et al. 2013, "straight-through"). The
value and output projections get their exact gradients through the one-hot weights.

``argmax`` itself has the parameters of vanilla attention, so a vanilla checkpoint evaluates
with ``--attention argmax``; ``hard_variant`` gives the same treatment to any other variant
(``rotary+argmax``, ``relative+argmax``, ...) so their checkpoints can be probed the same way.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor

from .base import Attention, DotProductAttention
from .registry import HARD_SUFFIX


def straight_through_argmax(scores: Tensor) -> Tensor:
    """One-hot weights of the row maxima (ties: the first), with the softmax's gradient.

    scores (..., S) masked with -inf -> weights (..., S) whose value is exactly one-hot.
    """
    soft = torch.softmax(scores, dim=-1)
    hard = torch.zeros_like(soft).scatter_(-1, scores.argmax(dim=-1, keepdim=True), 1.0)
    # Parenthesised so the value is exactly one-hot: (soft - soft) is 0, (1 + s) - s need not be 1.
    return hard + (soft - soft.detach())  # value of hard, gradient of soft


class ArgmaxAttention(DotProductAttention):
    name = "argmax"
    summary = "one_hot(argmax_j q_i.k_j) v; backward: straight-through softmax gradient"
    expresses = ("can copy exactly one value per head (sharper than softmax ever is) but cannot "
                 "average: with h heads a position at layer n depends on at most (h+1)^n inputs; "
                 "evaluates any vanilla checkpoint (others: NAME+argmax)")
    score_cost = "O(T^2 d)"
    fusable = False  # the fused kernel can only softmax

    def normalize(self, scores: Tensor) -> Tensor:
        return straight_through_argmax(scores)


@lru_cache(maxsize=None)
def hard_variant(cls: type[Attention]) -> type[Attention]:
    """``cls`` with argmax weights instead of softmax: same parameters, same scores."""
    if issubclass(cls, ArgmaxAttention):
        return cls
    return type(
        f"Hard{cls.__name__}", (cls,),
        {"name": cls.name + HARD_SUFFIX, "fusable": False,
         "summary": f"{cls.name} scores, argmax weights (straight-through gradient)",
         "normalize": lambda self, scores: straight_through_argmax(scores)},
    )
