"""The fast/plain switch, held by the modules that have two implementations (attention,
dropout) and set once for a whole model, like ``.train()``: ``model.set_fast(False)``.

Fast: fused ``scaled_dot_product_attention`` where the variant allows it, one product for q, k
and v, and on CPU cheap dropout masks (attnlab/model/dropout.py). Plain: explicit softmax attention,
separate projections and torch's dropout. Both compute the same function (tests/test_fastpath.py);
no forward signature carries the choice, so every caller (training, evaluation, generation,
attention maps) follows the model's state.
"""

from __future__ import annotations

from torch import nn


class FastPath:
    """Mixin for an ``nn.Module`` that reads ``self.fast``."""

    fast: bool = True

    def set_fast(self, on: bool = True):
        return set_fast(self, on)


def set_fast(module: nn.Module, on: bool = True) -> nn.Module:
    """Set the path of ``module`` and every submodule that has one; returns ``module``."""
    for m in module.modules():
        if isinstance(m, FastPath):
            m.fast = bool(on)
    return module
