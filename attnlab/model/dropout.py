"""Dropout with a cheaper random mask on CPU (the fast path).

torch's CPU dropout draws its mask element by element from one Mersenne Twister stream on one
core; in a spec-model training step on 2 cores that was 38% of the time (step times with
dropout 0.1 against 0.0, measured while profiling; not a docs/benchmarks.md figure). Here the mask comes from numpy's SFC64 bit generator, 32 random bits per
element, compared with a threshold as one multi-threaded tensor operation:

    drop iff bits < D, with D = round(p * 2^32), so P(drop) = D / 2^32 (within 1.2e-10 of p),
    and kept elements are scaled by 1 / (1 - D / 2^32), so the expectation is exactly x.

The distribution is dropout's (each element kept independently with probability 1 - p); the
masks differ from torch's draw for draw. Each call seeds its generator from torch's CPU
generator, so ``torch.manual_seed``, the RNG state saved in checkpoints, exact resumption and
per-rank streams cover these masks unchanged. On other devices, and on the plain path
(``model.set_fast(False)``, attnlab/model/fastpath.py), this is ``torch.nn.functional.dropout``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .fastpath import FastPath

_BITS = 2**32


def drop_threshold(p: float) -> int:
    """D: an element is dropped when its 32 random bits, read as an unsigned number, are < D."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, got {p}")
    return round(p * _BITS)


def keep_scale(x: Tensor, p: float) -> Tensor:
    """The mask times the rescaling: a tensor like ``x`` holding 0 (dropped) or 1 / (1 - D/2^32),
    drawn from a generator seeded by torch's CPU generator."""
    d = drop_threshold(p)
    if d >= _BITS:
        return torch.zeros_like(x)
    seed = int(torch.randint(0, 2**63 - 1, (), dtype=torch.int64))
    n = x.numel()
    raw = np.random.SFC64(seed).random_raw((n + 1) // 2)  # 64 bits = two elements
    bits = torch.from_numpy(raw.view(np.int32)[:n]).view(x.shape)  # read as signed: - 2^31
    mask = torch.empty(x.shape, dtype=x.dtype)
    torch.ge(bits, d - _BITS // 2, out=mask)  # unsigned bits >= D  <=>  signed >= D - 2^31
    return mask.mul_(_BITS / (_BITS - d))


def dropout(x: Tensor, p: float, training: bool, fast: bool = True) -> Tensor:
    """``F.dropout(x, p, training)``, with the cheaper mask on the fast CPU path."""
    if not training or p == 0.0:
        return x
    if fast and x.device.type == "cpu" and not torch.compiler.is_compiling():
        return x * keep_scale(x, p)
    return F.dropout(x, p, True)


class Dropout(FastPath, nn.Dropout):
    """``nn.Dropout`` that follows the module's fast/plain state (no parameters: checkpoints
    unchanged)."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training, self.fast)
