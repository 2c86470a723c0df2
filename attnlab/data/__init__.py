"""Layer 1, data: the vocabulary, reading the corpus and question files, the course's datasets,
training objectives and batching.

The readers and datasets (``attnlab.data.datasets``) are re-exported here, so
``attnlab.data.NameDataset`` works as it did when ``data`` was a module. They are imported when
first used (attnlab/core/lazy.py), so that a torch-free module of the package (``format_names``)
is read without importing torch (the command line's --help)."""

from __future__ import annotations

import typing as _typing

from ..core.lazy import exports as _exports

__all__ = [
    "CharCorruptionDataset", "DataError", "NameDataset", "QAExample", "SpanCorruptionDataset", "read_corpus",
    "read_qa", "read_questions", "read_text", "MASK_CHAR", "PAD_CHAR", "Vocab",
]
# public name -> the module that defines it
_PUBLIC = {name: ".vocab" if name in ("MASK_CHAR", "PAD_CHAR", "Vocab") else ".datasets" for name in __all__}
__getattr__, __dir__ = _exports(__name__, _PUBLIC, __all__)

if _typing.TYPE_CHECKING:  # what type checkers and editors see
    from .datasets import (
        CharCorruptionDataset, DataError, NameDataset, QAExample, SpanCorruptionDataset, read_corpus, read_qa,
        read_questions, read_text,
    )
    from .vocab import MASK_CHAR, PAD_CHAR, Vocab
