"""Which keys a query may see, written once for attention, generation, packed training and
attention maps. Every mask is bool, True = visible, shaped to broadcast against scores
(B, h, T, S): the T queries are the last T of the S key positions (a KV cache holds the rest).
"""

from __future__ import annotations

import torch
from torch import Tensor


def causal(T: int, S: int, device: torch.device | str = "cpu") -> Tensor:
    """(T, S): query t (the last T of S positions) sees keys up to its own position."""
    return torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T)


def causal_bias(T: int, S: int, device: torch.device | str, dtype: torch.dtype) -> Tensor:
    """(T, S): 0 where ``causal`` allows, -inf elsewhere."""
    return torch.zeros(T, S, device=device, dtype=dtype).masked_fill_(~causal(T, S, device), float("-inf"))


def padded(valid: Tensor, n_queries: int | None = None, *, is_causal: bool = True) -> Tensor:
    """(B, 1, T, S) for rows with padding (``valid`` (B, S) marks real tokens, on either side):
    the last T = ``n_queries`` of S positions see real keys (up to themselves when causal); a
    padded query sees itself, so that no row of scores is all -inf (its output is never used)."""
    S = valid.shape[1]
    T = S if n_queries is None else n_queries
    allowed = valid[:, None, :].expand(-1, T, S)
    if is_causal:
        allowed = allowed & causal(T, S, valid.device)
    return (allowed | _diagonal(T, S, valid.device))[:, None]


def segments(segment_ids: Tensor) -> Tensor:
    """(B, 1, T, T) for packed rows (segment ids (B, T), -1 for padding): a position sees the
    earlier positions of its own segment; a padding position sees only itself."""
    T = segment_ids.shape[1]
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    return ((same & causal(T, T, segment_ids.device)) | _diagonal(T, T, segment_ids.device))[:, None]


def with_bias(bias: Tensor, allowed: Tensor | None, is_causal: bool, T: int, S: int) -> Tensor:
    """An additive score bias with -inf where a key is not visible (``allowed``, or the causal
    mask when there is none and ``is_causal``): the one float mask the fused kernel takes."""
    if allowed is not None:
        bias = bias.masked_fill(~allowed, float("-inf"))
    if is_causal and allowed is None:
        bias = bias.masked_fill(~causal(T, S, bias.device), float("-inf"))
    return bias


def _diagonal(T: int, S: int, device) -> Tensor:
    """(T, S): each of the last T positions sees itself."""
    eye = torch.zeros(T, S, dtype=torch.bool, device=device)
    eye[torch.arange(T), torch.arange(S - T, S)] = True
    return eye
