"""Key-free ("merged query-key") attention from the course material: per head one d x d
matrix W with scores x_i^T W x_j, instead of separate query and key projections.

A vanilla layer is exactly such a layer with W = W_Q^T W_K / sqrt(d/h); its query bias adds
a term u.x_j with u = W_K^T b_Q / sqrt(d/h) that survives the softmax, kept here as ``u``
(the terms that depend on i alone cancel in the softmax). ``merge_query_key`` converts.
Parameters: J^2 per head for W against 2 I J for W_Q and W_K (J = d, I = d/h).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ...config.settings import ModelConfig
from .base import Attention, DotProductAttention


class MergedQKAttention(Attention):
    name = "merged_qk"
    summary = "softmax(x_i^T W_h x_j + u_h.x_j), one d x d matrix W_h per head"
    expresses = ("any bilinear score x_i^T W x_j of rank up to d (vanilla: <= d/h); everything "
                 "vanilla expresses, at d^2 parameters per head instead of 2 d^2/h")
    score_cost = "O(T^2 d h) (keys are full width d in every head)"
    # ``u`` (h, d) is a matrix, so the optimiser decays it, though it is the image of vanilla's
    # query bias, which is not decayed. Kept so: exempting it changes merged_qk's training, and
    # that change has not been measured (issue 16 asks for a quick-preset comparison first).
    no_decay = ()

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        d, h = config.n_embd, config.n_head
        # W = W_scaled / d, trained as W_scaled. AdamW moves every entry of the trained matrix by
        # about the learning rate per step whatever its gradient's size, and a score sums d^2 of
        # them, so trained as W itself the scores jumped ~d times further per step than a vanilla
        # layer's: the softmax saturated (attention entropy near zero) and training stalled
        # (docs/notebook.md, 2026-11-25, "why merged_qk stalled"). Divided by d, an entry's step
        # moves a score about as far as a step of W_Q or W_K does.
        self.w_scale = 1.0 / d
        # W's std 0.02^2 makes the initial scores match a vanilla layer initialised N(0, 0.02).
        self.W_scaled = nn.Parameter(torch.randn(h, d, d) * (0.02**2 / self.w_scale))
        self.u = nn.Parameter(torch.zeros(h, d))
        self._register_load_state_dict_pre_hook(self._from_unscaled)

    @property
    def W(self) -> Tensor:
        """The merged matrices, (h, d, d): score x_i^T W_h x_j."""
        return self.W_scaled * self.w_scale

    def _from_unscaled(self, state_dict, prefix, *args) -> None:
        """A state dict written before W was trained scaled holds W itself: convert it."""
        converted = scaled_state(state_dict, self.config.n_embd)
        state_dict.clear()
        state_dict.update(converted)

    def queries_keys(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, float]:
        # x scaled before the product: (B, T, d) values rather than (B, h, T, d)
        q = torch.einsum("btc,hcd->bhtd", x * self.w_scale, self.W_scaled) + self.u[None, :, None, :]
        k = x[:, None]  # (B, 1, T, d): every head compares against the raw input
        return q, k, 1.0

    @torch.no_grad()
    def load_from_dot_product(self, layer: DotProductAttention) -> "MergedQKAttention":
        """Set W_h = W_Q,h^T W_K,h / sqrt(d/h) (and u_h) from a vanilla layer; copy V and A."""
        h, dh = self.n_head, self.head_dim
        d = self.config.n_embd
        wq = layer.query.weight.view(h, dh, d)  # rows of head h: q_h = W_Q,h x + b_Q,h
        wk = layer.key.weight.view(h, dh, d)
        bq = layer.query.bias.view(h, dh)
        scale = 1.0 / math.sqrt(dh)
        self.W_scaled.copy_(torch.einsum("hic,hid->hcd", wq, wk) * (scale / self.w_scale))
        self.u.copy_(torch.einsum("hi,hid->hd", bq, wk) * scale)
        self.value.load_state_dict(layer.value.state_dict())
        self.proj.load_state_dict(layer.proj.state_dict())
        return self


def scaled_state(state: dict[str, Tensor], n_embd: int) -> dict[str, Tensor]:
    """A model state with every merged matrix stored as W itself (``...attn.W``, written
    before W was trained scaled by 1/d) stored as W_scaled = d W instead; other states as they
    are."""
    return {(k + "_scaled" if _unscaled(k) else k): (v * n_embd if _unscaled(k) else v) for k, v in state.items()}


def _unscaled(key: str) -> bool:
    return key == "W" or key.endswith(".W")


def merge_query_key(layer: DotProductAttention, config: ModelConfig | None = None) -> MergedQKAttention:
    """Convert a trained dot-product layer into the equivalent merged-QK layer."""
    merged = MergedQKAttention(config or layer.config).to(layer.query.weight.device)
    return merged.load_from_dot_product(layer)
