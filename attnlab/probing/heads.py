"""Statistics of attention weights, per row and per head: entropy and expected look-back
distance. `attnlab attention` reports them per head, and the shaping losses
(training/shaping.py) are built from them."""

from __future__ import annotations

import torch
from torch import Tensor


def row_entropy(weights: Tensor) -> Tensor:
    """Entropy (nats) of each attention row: (..., S) -> (...).

    Masked keys have weight exactly 0 and contribute 0 log 0 = 0. The log's argument is
    replaced by 1 where the weight is 0, so the gradient there is finite (log 1 + 0 = 0) instead
    of -inf, which softmax's backward would turn into NaN (0 * -inf)."""
    w = weights.float()
    safe = torch.where(w > 0, w, torch.ones_like(w))
    return -(w * safe.log()).sum(-1)


def row_distance(weights: Tensor, power: int = 1) -> Tensor:
    """Expected distance sum_{t2} alpha[t1, t2] |t1 - t2|^power of each row: (..., T, S) -> (..., T).

    The T queries are the last T of the S key positions (T == S in training)."""
    T, S = weights.shape[-2:]
    q = torch.arange(S - T, S, device=weights.device, dtype=torch.float32)[:, None]
    k = torch.arange(S, device=weights.device, dtype=torch.float32)[None, :]
    dist = (q - k).abs() ** power  # (T, S)
    return (weights.float() * dist).sum(-1)


def head_statistics(weights: list[Tensor], valid: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Per-row, per-layer, per-head mean entropy and mean |t1 - t2| over valid queries:
    two tensors (B, L, h). Used by `attnlab attention` and the benchmark."""
    ent = torch.stack([row_entropy(w) for w in weights], 1)  # (B, L, h, T)
    dist = torch.stack([row_distance(w, power=1) for w in weights], 1)
    if valid is None:
        return ent.mean(-1), dist.mean(-1)
    v = valid[:, None, None, :].float()
    n = v.sum(-1).clamp(min=1)
    return (ent * v).sum(-1) / n, (dist * v).sum(-1) / n
