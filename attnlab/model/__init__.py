"""Layer 3, the model: the GPT (``gpt``), the attention registry and its variants
(``attention/``), position schemes, dropout and the fast path, decoding, checkpoints and the
shipped model.

``attnlab.model.GPT`` works as it did when ``model`` was a module; it is imported when first
used (attnlab/core/lazy.py), so that the attention registry's names are read without torch."""

from __future__ import annotations

import typing as _typing

from ..core.lazy import exports as _exports

__all__ = ["GPT", "Block"]
__getattr__, __dir__ = _exports(__name__, {"GPT": ".gpt", "Block": ".gpt"}, __all__)

if _typing.TYPE_CHECKING:  # what type checkers and editors see
    from .gpt import GPT, Block
