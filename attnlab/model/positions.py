"""Position numbers and tables: the sinusoidal table, and the positions of packed and padded rows.

Each row position's number is what the position embeddings and the position-dependent
attention variants (relative, rotary, synthesizer) look up.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def sinusoidal_table(n_positions: int, width: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Fixed sin/cos position table of Vaswani et al. 2017: (n_positions, width), row i holding
    sin(i w_m) at 2m and cos(i w_m) at 2m + 1, w_m = 10000^(-2m/width)."""
    pos = torch.arange(n_positions, dtype=dtype)[:, None]
    inv = torch.exp(-math.log(10_000.0) * torch.arange(0, width, 2, dtype=dtype) / width)
    table = torch.zeros(n_positions, width, dtype=dtype)
    table[:, 0::2] = torch.sin(pos * inv)
    table[:, 1::2] = torch.cos(pos * inv)[:, : width // 2]
    return table


def segment_positions(segments: Tensor) -> Tensor:
    """(B, T): each position's offset from the start of its segment (a run of equal ids)."""
    T = segments.shape[1]
    at = torch.arange(T, device=segments.device).expand_as(segments)
    starts = torch.ones_like(segments, dtype=torch.bool)
    starts[:, 1:] = segments[:, 1:] != segments[:, :-1]
    return at - torch.where(starts, at, torch.zeros_like(at)).cummax(dim=1).values


def left_padded_positions(valid: Tensor) -> Tensor:
    """(B, T): positions counted from each row's first real token (left padding gets 0)."""
    return (valid.long().cumsum(1) - 1).clamp(min=0)
