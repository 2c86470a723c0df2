"""Named hook points: one name for each activation that tracing, editing, attention recording
and ``LoadedModel.run_with_cache`` read or patch, as TransformerLens names its hook points
(``blocks.3.mlp.out``), over the unchanged model: the state-dict keys stay the course's.

| name | the activation | shape |
| --- | --- | --- |
| ``embed`` | the token embeddings (before positions and dropout) | (B, T, C or C - P) |
| ``blocks.L.attn.out`` | block L's attention output, before the residual add | (B, T, C) |
| ``blocks.L.attn.pattern`` | block L's attention weights (read only; the explicit path) | (B, h, T, T) |
| ``blocks.L.mlp.hidden`` | block L's MLP activation, the input of its output matrix (ROME's key) | (B, T, 4C) |
| ``blocks.L.mlp.out`` | block L's MLP output, before dropout and the residual add | (B, T, C) |
| ``blocks.L.resid_post`` | the residual stream after block L | (B, T, C) |

A hook point is read (``HookPoint.read``, ``capturing``) or patched (``HookPoint.patch``: a
function of the activation returns its replacement) through PyTorch forward hooks, so every
attention variant works. Attention patterns exist only when the model runs with
``need_weights=True`` (``GPT.run``); ``capturing`` says whether a set of names needs it.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from .gpt import GPT

# Per block: the point's name after ``blocks.L.`` -> (the block's part, what of it is read).
_BLOCK_POINTS: dict[str, tuple[str, str]] = {
    "attn.out": ("attn", "output"),
    "attn.pattern": ("attn", "weights"),
    "mlp.hidden": ("mlp_proj", "input"),
    "mlp.out": ("mlp", "output"),
    "resid_post": ("", "output"),
}
_NAME = re.compile(r"blocks\.(\d+)\.(.+)")


@dataclass(frozen=True)
class HookPoint:
    """One named activation: the module it is read at and whether it is that module's input,
    output (the first element of a tuple output) or attention weights (the second)."""

    name: str
    module: nn.Module
    what: str  # "output", "input" or "weights"

    def value(self, inputs: tuple, output) -> Tensor:
        """The activation, from a forward hook's arguments."""
        if self.what == "input":
            return inputs[0]
        if self.what == "weights":
            return output[1]
        return output[0] if isinstance(output, tuple) else output

    def read(self, fn: Callable[[Tensor], None]) -> RemovableHandle:
        """Call ``fn`` with the activation on every forward pass until the handle is removed
        (a handle is also a context manager)."""
        def hook(_m, inputs, out) -> None:  # returns None: a read never changes the output
            fn(self.value(inputs, out))

        return self.module.register_forward_hook(hook)

    def patch(self, fn: Callable[[Tensor], Tensor]) -> RemovableHandle:
        """Replace the activation by ``fn(activation)`` on every forward pass. The hook is an
        object holding ``fn``, not a closure, so that a deep copy of the model copies what ``fn``
        is bound to with it (an edit's codebook: attnlab/model/codebook.py)."""
        if self.what == "weights":
            raise ValueError(f"{self.name}: attention patterns are read, not patched")
        if self.what == "input":
            return self.module.register_forward_pre_hook(_InputPatch(fn))
        return self.module.register_forward_hook(_OutputPatch(fn))


@dataclass
class _OutputPatch:
    """A forward hook: the module's output (the first element of a tuple) replaced by fn's."""

    fn: Callable[[Tensor], Tensor]

    def __call__(self, _m, _inputs, out):
        return (self.fn(out[0]), *out[1:]) if isinstance(out, tuple) else self.fn(out)


@dataclass
class _InputPatch:
    """A forward pre-hook: the module's first input replaced by fn's."""

    fn: Callable[[Tensor], Tensor]

    def __call__(self, _m, inputs):
        return (self.fn(inputs[0]), *inputs[1:])


def hook_names(model: GPT) -> list[str]:
    """Every hook point of ``model``, in the order of the forward pass."""
    order = ("attn.out", "attn.pattern", "mlp.hidden", "mlp.out", "resid_post")
    return ["embed"] + [f"blocks.{l}.{p}" for l in range(model.config.n_layer) for p in order]


def hook_point(model: GPT, name: str) -> HookPoint:
    """The hook point called ``name`` (a ValueError listing the names for an unknown one)."""
    if name == "embed":
        return HookPoint(name, model.tok_emb, "output")
    found = _NAME.fullmatch(name)
    if found is None or found.group(2) not in _BLOCK_POINTS:
        raise ValueError(f"unknown hook point {name!r}; the names are 'embed' and 'blocks.L.P' with P one "
                         f"of {', '.join(_BLOCK_POINTS)}")
    layer = int(found.group(1))
    if layer >= model.config.n_layer:
        raise ValueError(f"hook point {name!r}: the model has layers 0..{model.config.n_layer - 1}")
    part, what = _BLOCK_POINTS[found.group(2)]
    block = model.blocks[layer]
    return HookPoint(name, getattr(block, part) if part else block, what)


def needs_weights(names: Iterable[str]) -> bool:
    """Whether reading ``names`` needs the explicit attention path (``need_weights=True``)."""
    return any(n.endswith(".attn.pattern") for n in names)


@contextlib.contextmanager
def capturing(model: GPT, names: Iterable[str]) -> Iterator[dict[str, Tensor]]:
    """Inside the block, the dict holds each named activation of the latest forward pass
    (detached). Run the model with ``need_weights=needs_weights(names)`` to fill patterns."""
    cache: dict[str, Tensor] = {}

    def keep(name: str, value: Tensor | None) -> None:
        if value is not None:  # a pattern of a run without need_weights
            cache[name] = value.detach()

    with contextlib.ExitStack() as stack:
        for point in [hook_point(model, n) for n in names]:
            stack.enter_context(point.read(lambda t, name=point.name: keep(name, t)))
        yield cache
