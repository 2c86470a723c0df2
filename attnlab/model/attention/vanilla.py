"""Scaled dot-product attention, the course baseline (SPEC section 4, "vanilla")."""

from __future__ import annotations

from .base import DotProductAttention


class VanillaAttention(DotProductAttention):
    name = "vanilla"
    summary = "softmax((X Q_i)(X K_i)^T / sqrt(d/h) + causal mask)(X V_i), heads projected by A"
    expresses = ("any content lookup q_i.k_j, of rank <= d/h per head; order only through the "
                 "absolute position embeddings (and the causal mask)")
    score_cost = "O(T^2 d)"
