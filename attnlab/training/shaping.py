"""Attention-shaping losses, built from the attention statistics of probing/heads.py (SPEC section 7:
"attention-shaping losses (head entropy, robust distance penalty)").

With alpha[l, k, t1, :] the attention distribution of layer l, head k and query position t1:

* focus = (1 / (K T L)) sum_{l,k,t1} H(alpha[l,k,t1,:]): the mean entropy of the attention
  rows. Adding lambda * focus to the LM loss rewards heads that look at few positions.
* near = (1 / (K T (L-1))) sum_{k,t1} sum_{l <= L-2} min(L_max, sum_{t2} alpha[l,k,t1,t2] (t1-t2)^2):
  the expected squared distance each query looks back, capped per row at L_max so that one
  far-looking row costs at most L_max and the penalty's maximum does not grow with T. As in the
  course formula the last layer (l = L-1) is left out: the lower layers are pushed to build
  local features while the last layer stays free to fetch from anywhere (in the QA task, to
  reach back from the answer to the name in the question). With one layer the sum is empty
  and near is 0.

Padding. Batches are trimmed to their longest row, so shorter rows still carry PAD *inputs*
at their end. A query position counts iff its input token is not PAD: a PAD position lies after
the row's text, so under causal masking its attention influences no loss, and counting it
would make the loss depend on how a batch happens to be padded or bucketed. We do *not* drop
positions whose *target* is PAD: in finetuning those are the question positions, whose
attention feeds every later layer at the answer positions. T in the formulas is therefore each
row's count of real positions; the loss is the mean over rows (the trainer's extras are
per-example means).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from ..model.gpt import GPT, lm_loss, packed_rows
from ..probing.heads import row_distance, row_entropy
from .trainer import default_loss
from ..data.vocab import PAD_ID

SHAPING_LOSSES = ("focus", "near")


# ---- the losses' average over layers, heads and real positions --------------------------------
def _masked_mean(values: Tensor, valid: Tensor | None) -> Tensor:
    """Per-row mean of values (B, L, h, T) over layers, heads and valid queries -> (B,)."""
    if valid is None:
        return values.mean(dim=(1, 2, 3))
    v = valid[:, None, None, :].to(values.dtype)  # (B, 1, 1, T)
    count = v.sum(-1).clamp(min=1) * values.shape[1] * values.shape[2]  # (B, 1, 1) -> K L T_b
    return (values * v).sum(dim=(1, 2, 3)) / count[:, 0, 0]


def focus_loss(weights: list[Tensor], valid: Tensor | None = None) -> Tensor:
    """Mean attention entropy per row (B,): weights are per-layer (B, h, T, T), valid (B, T)."""
    return _masked_mean(torch.stack([row_entropy(w) for w in weights], 1), valid)


def near_loss(weights: list[Tensor], valid: Tensor | None = None, near_max: float = 16.0) -> Tensor:
    """Robust locality penalty per row (B,) over all layers but the last (see module doc)."""
    lower = weights[:-1]
    if not lower:  # a single layer: the sum over l <= L-2 is empty
        return torch.zeros(weights[0].shape[0], device=weights[0].device)
    capped = torch.stack([row_distance(w, power=2).clamp(max=near_max) for w in lower], 1)
    return _masked_mean(capped, valid)


# ---- the training loss ------------------------------------------------------------------------
def unwrap(model: nn.Module) -> GPT:
    """The GPT inside torch.compile and DistributedDataParallel wrappers."""
    while not isinstance(model, GPT):
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if inner is None:
            raise TypeError(f"attention-shaping losses need a GPT, got {type(model).__name__}")
        model = inner
    return model


def run_with_weights(model: nn.Module, x: Tensor, segments: Tensor | None = None
                     ) -> tuple[Tensor, list[Tensor]]:
    """Logits and per-layer attention weights through the explicit attention path; with
    ``segments`` (packed rows, as GPT.forward takes them) each line attends only within itself.

    The fused kernel never materialises the weights, so this bypasses a torch.compile wrapper
    (the explicit path runs eagerly). Under DistributedDataParallel the call is bracketed by
    DDP's own pre/post-forward steps so that gradients are still all-reduced, exactly what
    ``DDP.forward`` does around ``module.forward``."""
    gpt = unwrap(model)
    packed = packed_rows(segments)
    ddp = model if hasattr(model, "_pre_forward") and hasattr(model, "_post_forward") else None
    if ddp is None:
        return gpt.run(x, need_weights=True, **packed)
    (x,), _ = ddp._pre_forward(x)
    out = gpt.run(x, need_weights=True, **packed)
    return ddp._post_forward(out)


def shaping_loss_fn(name: str, weight: float, *, near_max: float = 16.0) -> Callable:
    """A trainer loss_fn(model, x, y, segments=None) -> (summed CE, extras) adding ``weight`` * the shaping loss.

    extras = {name: weight * loss, name + "_unweighted": loss.detach()}, both per-example means.
    The trainer adds every extra to the loss and logs it in metrics.jsonl; the unweighted one is
    detached, so it is logged but contributes no gradient. With weight 0 this returns the plain
    loss function itself, so lambda = 0 trains bit-identically to no shaping."""
    if name not in SHAPING_LOSSES:
        raise ValueError(f"unknown attention-shaping loss {name!r}; choose none, {' or '.join(SHAPING_LOSSES)}")
    if weight == 0:
        return default_loss
    if near_max <= 0:
        raise ValueError(f"near_max must be positive, got {near_max}")

    def loss_fn(model: nn.Module, x: Tensor, y: Tensor, segments: Tensor | None = None
                ) -> tuple[Tensor, dict[str, Tensor]]:
        logits, weights = run_with_weights(model, x, segments)
        valid = x != PAD_ID  # (B, T): real input positions (see module doc)
        if name == "focus":
            per_row = focus_loss(weights, valid)
        else:
            per_row = near_loss(weights, valid, near_max)
        term = per_row.mean()
        return lm_loss(logits, y, reduction="sum"), {name: weight * term,
                                                      f"{name}_unweighted": term.detach()}

    return loss_fn
