"""Scaled dot-product attention, the course baseline (SPEC section 4, "vanilla")."""

from __future__ import annotations

from .base import DotProductAttention


class VanillaAttention(DotProductAttention):
    name = "vanilla"
    summary = "softmax((X Q_i)(X K_i)^T / sqrt(d/h) + causal mask)(X V_i), heads projected by A"
    expresses = "content- and position-dependent scores (positions only through the embeddings)"
    score_cost = "O(T^2 d)"
