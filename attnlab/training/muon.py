"""Muon (``torch.optim.Muon``) with its Newton-Schulz iteration in the precision the hardware
multiplies fast. torch runs the iteration in bfloat16, which GPUs and CPUs with AVX512-BF16 or
AMX multiply natively; an AVX2 CPU emulates it, and there the iteration took most of a training
step (docs/benchmarks.md, "Muon's Newton-Schulz precision"). Where bfloat16 is slow it runs in
float32 instead: the same algorithm, rounded less. Where it is fast torch's own step runs, so
results there are torch's to the bit. The state dict is torch's (checkpoints load either way).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


class Muon(torch.optim.Muon):
    """``torch.optim.Muon`` whose orthogonalisation runs in ``ns_dtype`` (bfloat16: torch's own)."""

    def __init__(self, params, *, ns_dtype: torch.dtype = torch.bfloat16, **kwargs):
        super().__init__(params, **kwargs)
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure=None):
        if self.ns_dtype == torch.bfloat16:
            return super().step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, buffers = [], [], []
            self._init_group(group, params, grads, buffers)
            for param, grad, buf in zip(params, grads, buffers):
                _muon_update(param, grad, buf, group, self.ns_dtype)
        return loss


def _muon_update(param: Tensor, grad: Tensor, buf: Tensor, group: dict, dtype: torch.dtype) -> None:
    """One parameter's step, as torch's ``_single_tensor_muon`` takes it."""
    momentum, lr = group["momentum"], float(group["lr"])
    buf.lerp_(grad, 1 - momentum)
    update = grad.lerp(buf, momentum) if group["nesterov"] else buf
    update = orthogonalise(update, group["ns_coefficients"], group["ns_steps"], group["eps"], dtype)
    param.mul_(1 - lr * group["weight_decay"])
    param.add_(update.to(param.dtype), alpha=-lr * lr_ratio(group["adjust_lr_fn"], param.shape))


def orthogonalise(grad: Tensor, coefficients: tuple[float, float, float], steps: int, eps: float,
                  dtype: torch.dtype) -> Tensor:
    """torch's quintic Newton-Schulz iteration (``_zeropower_via_newtonschulz``) in ``dtype``;
    ``grad`` is never modified."""
    a, b, c = coefficients
    x = grad.to(dtype, copy=True)
    tall = grad.size(0) > grad.size(1)
    if tall:
        x = x.T
    x.div_(x.norm().clamp(min=eps))  # spectral norm at most 1
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


def lr_ratio(adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """torch's scaling of Muon's learning rate by the matrix's shape."""
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    return 1.0
