"""The machinery every attention variant shares.

A variant says only what the course material says differs: how query-side and key-side vectors
are made (``queries_keys``), an optional additive score bias (``score_bias``), and how scores
become weights (``normalize``, softmax unless overridden). Everything else lives here once:
value and output projections, masking, dropout, the fused fast path and the KV cache.

Shapes: B batch, h heads, T query length, S key length, e query/key width, dh value width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...config.settings import ModelConfig
from ..dropout import Dropout
from ..fastpath import FastPath
from . import masks


@dataclass
class KVCache:
    """Keys and values of the positions decoded so far, for one layer."""

    k: Tensor | None = None  # (B, h, S, e)
    v: Tensor | None = None  # (B, h, S, dh)
    # Preallocated storage, grown by doubling, that k and v are views of: appending a step
    # writes only the new positions instead of copying the whole cache (torch.cat per step
    # copies every earlier position again: quadratic in the decoded length).
    _kbuf: Tensor | None = field(default=None, repr=False)
    _vbuf: Tensor | None = field(default=None, repr=False)

    def extend(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if k.requires_grad or v.requires_grad:  # autograd: no in-place writes into saved views
            if self.k is not None:
                k, v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
            self.k, self.v = k, v
            return k, v
        old, new = self.length, k.shape[2]
        buf = self._kbuf
        if buf is None or buf.shape[2] < old + new or buf.shape[:2] != k.shape[:2] or (
            buf.dtype != k.dtype or (self.k is not None and self.k.data_ptr() != buf.data_ptr())
        ):  # first step, full, or k/v replaced from outside: (re)allocate and copy what is kept
            cap = max(64, 2 * (old + new))
            kbuf = k.new_empty(k.shape[0], k.shape[1], cap, k.shape[3])
            vbuf = v.new_empty(v.shape[0], v.shape[1], cap, v.shape[3])
            if self.k is not None:
                kbuf[:, :, :old], vbuf[:, :, :old] = self.k, self.v
            self._kbuf, self._vbuf = kbuf, vbuf
        self._kbuf[:, :, old : old + new] = k
        self._vbuf[:, :, old : old + new] = v
        self.k, self.v = self._kbuf[:, :, : old + new], self._vbuf[:, :, : old + new]
        return self.k, self.v

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on (what a caller appended to score and no
        longer needs); the storage is kept for the next append."""
        if self.k is not None and length < self.length:
            self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]


class Attention(FastPath, nn.Module):
    """Multi-head attention with the parts that vary left to subclasses; ``self.fast`` (set with
    ``set_fast``, attnlab/model/fastpath.py) picks the fused or the explicit path."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""  # one line: what the variant computes (`attnlab variants`)
    expresses: ClassVar[str] = ""  # what it can and cannot express (for `attnlab variants`)
    score_cost: ClassVar[str] = "O(T^2 d)"  # cost of the score computation in sequence length T
    # The fused kernel computes softmax(q k^T * scale + bias) v; variants that normalise
    # differently (argmax) must take the explicit path.
    fusable: ClassVar[bool] = True
    # Whether the scores depend on content only (no position enters the layer), so that with
    # --positions none and --no-causal the whole network is permutation-equivariant.
    permutation_equivariant: ClassVar[bool] = True
    # Whether the layer honours any mask of visible keys (``allowed``); decoding with a draft
    # (model/generate.py) hides rejected guesses in the middle of a row's keys.
    any_mask: ClassVar[bool] = True
    # This variant's parameters (names within the layer) exempt from weight decay, besides
    # biases and other vectors (the optimiser never decays those): GPT.no_weight_decay.
    no_decay: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.value = nn.Linear(config.n_embd, config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_drop = Dropout(config.dropout)
        self.resid_drop = Dropout(config.dropout)

    # ---- what a variant defines -------------------------------------------------------------
    def queries_keys(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, float]:
        """Return (q (B,h,T,e), k (B,h,T,e) or broadcastable, scale) for input x (B,T,C)."""
        raise NotImplementedError

    def score_bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """Additive bias broadcastable to (B, h, T, S) from positions (B,T), (B,S); or None."""
        return None

    def normalize(self, scores: Tensor) -> Tensor:
        """Scores (masked with -inf) to attention weights along the last dimension."""
        return torch.softmax(scores, dim=-1)

    def projections(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor, float]:
        """(q, k, v (B,h,T,dh), scale); a variant may compute them together on the fast path."""
        q, k, scale = self.queries_keys(x, positions)
        return q, k, self.split_heads(self.value(x)), scale

    # ---- shared ---------------------------------------------------------------------------
    def fuses(self) -> bool:
        """Whether the fused kernel computes this layer: it can only softmax, so a class that
        overrides ``normalize`` (however declared) takes the explicit path, never vanilla's."""
        return self.fusable and overrides(type(self), "normalize", Attention) is None

    def split_heads(self, t: Tensor) -> Tensor:
        B, T, _ = t.shape
        return t.view(B, T, self.n_head, -1).transpose(1, 2)  # (B, h, T, .)

    def forward(
        self,
        x: Tensor,
        positions: Tensor,
        *,
        allowed: Tensor | None = None,
        cache: KVCache | None = None,
        key_positions: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B,T,C), positions (B,T) or (1,T).

        ``allowed`` (B|1, 1, T, S) bool says which keys each query may see; None means the
        plain case: T == S and causal iff the config is. ``key_positions`` (B|1, S) are the
        positions of all keys (cached + new) for position-dependent biases.
        Returns the output (B,T,C) and, if asked, the attention weights (B,h,T,S).
        """
        B, T, C = x.shape
        q, k, v, scale = self.projections(x, positions)
        if k.shape[0] != B or k.shape[1] != self.n_head:
            k = k.expand(B, self.n_head, -1, -1)
        if cache is not None:
            k, v = cache.extend(k, v)
        S = k.shape[2]
        if key_positions is None:
            key_positions = positions
        bias = self.score_bias(positions, key_positions)
        causal = self.config.causal and allowed is None
        if allowed is None and causal and T != S:
            raise ValueError("a cached forward pass needs an explicit mask")
        p_drop = self.attn_drop.p if self.training else 0.0
        # The fused kernel drops attention weights with torch's own per-element mask; on CPU
        # that mask costs more than the kernel saves, so training with dropout there takes the
        # explicit path with the cheap mask (attnlab.dropout).
        fused = self.fast and self.fuses() and not need_weights and not (p_drop and x.device.type == "cpu")

        if fused:
            mask = allowed
            if bias is not None:
                mask = masks.with_bias(bias, allowed, causal, T, S)
                causal = False
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=p_drop, is_causal=causal, scale=scale
            )
            weights = None
        else:
            weights = self.normalize(self._scores(q, k, scale, bias, allowed, causal))
            y = self.attn_drop(weights) @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.resid_drop(self.proj(y)), weights

    def _scores(self, q: Tensor, k: Tensor, scale: float, bias: Tensor | None, allowed: Tensor | None,
                causal: bool) -> Tensor:
        """q k^T * scale + bias, masked with -inf where a key is not visible: (B, h, T, S);
        k has q's batch and head dimensions (forward expands it)."""
        B, h, T, _ = q.shape
        S = k.shape[2]
        if self.fast and bias is None and allowed is None:
            # The plain case in one product: baddbmm adds the (T, S) 0/-inf causal mask while it
            # scales q k^T, sparing two passes over the scores forward and backward.
            add = masks.causal_bias(T, S, q.device, q.dtype) if causal else q.new_zeros(())
            return torch.baddbmm(
                add, q.reshape(B * h, T, -1), k.reshape(B * h, S, -1).transpose(1, 2), alpha=scale,
            ).view(B, h, T, S)
        scores = (q @ k.transpose(-2, -1)) * scale
        if bias is not None:
            scores = scores + bias
        if allowed is None and causal:
            allowed = masks.causal(T, S, q.device)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        return scores



class DotProductAttention(Attention):
    """Separate query and key projections per head, scaled by 1/sqrt(d/h) (SPEC section 4)."""

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.query = nn.Linear(config.n_embd, config.n_embd)
        self.key = nn.Linear(config.n_embd, config.n_embd)

    def with_positions(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Where a subclass lets positions into the per-head queries and keys (rotary)."""
        return q, k

    def queries_keys(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, float]:
        q, k = self.with_positions(self.split_heads(self.query(x)), self.split_heads(self.key(x)), positions)
        return q, k, 1.0 / math.sqrt(self.head_dim)

    def projections(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor, float]:
        if not self.fast or overrides(type(self), "queries_keys", DotProductAttention) is not None:
            # A subclass's own queries_keys is the definition: the stacked product below
            # computes DotProductAttention's, so it would silently give vanilla's queries.
            return super().projections(x, positions)
        # One product against the stacked query, key and value weights instead of three: fewer,
        # larger matrix products (about 5% of a spec-model CPU training step in an A/B run).
        weight, bias = self._stacked()
        q, k, v = (self.split_heads(t) for t in F.linear(x, weight, bias).split(self.config.n_embd, dim=-1))
        q, k = self.with_positions(q, k, positions)
        return q, k, v, 1.0 / math.sqrt(self.head_dim)


    def _stacked(self) -> tuple[Tensor, Tensor]:
        """The query, key and value weights and biases stacked. Under no_grad the stack is kept
        while the six tensors are the same and unmodified (their version counters), so decoding
        does not copy them again at every token; with gradients it is made anew (autograd
        flows through the concatenation)."""
        parts = (self.query.weight, self.key.weight, self.value.weight, self.query.bias, self.key.bias,
                 self.value.bias)
        if torch.is_grad_enabled() or any(t.is_inference() for t in parts):  # inference tensors have no versions
            return torch.cat(parts[:3]), torch.cat(parts[3:])
        stamp = tuple((t.data_ptr(), t._version, t.dtype, t.device) for t in parts)
        kept = self.__dict__.get("_stack")
        if kept is None or kept[0] != stamp:
            kept = (stamp, torch.cat(parts[:3]), torch.cat(parts[3:]))
            self.__dict__["_stack"] = kept
        return kept[1], kept[2]

def overrides(cls: type, hook: str, base: type) -> type | None:
    """The class below ``base`` in ``cls``'s method order that redefines ``hook``; None when
    ``cls`` uses ``base``'s (or an ancestor's) own."""
    for klass in cls.__mro__:
        if klass is base:
            return None
        if hook in vars(klass):
            return klass
    return None
