"""attnlab: pretrain, finetune and probe small character-level transformers.

The package is built in layers (docs/architecture.md; tests/test_structure.py checks them):
core, data, config, model, then answering/probing/explore, training/trust/facts, then
experiments and the API, then the command line.

The course's public names are kept so people coming from the CS224N assignment find them:
``GPT``, ``GPTConfig``, ``CharCorruptionDataset``, ``NameDataset``.

The names below are imported when first used (PEP 562), not with the package: ``attnlab`` itself
imports no torch, so the program (``python -m attnlab``, the ``attnlab`` command) can catch a
Ctrl-C while torch loads and end quietly (attnlab/__main__.py).
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from ._version import __version__

# public name -> the module that defines it
_PUBLIC = {
    "load": ".api", "LoadedModel": ".api",
    "GPT": ".model.gpt",
    "GPTConfig": ".config.settings", "ModelConfig": ".config.settings", "TrainConfig": ".config.settings",
    "get_preset": ".config.settings",
    "CharCorruptionDataset": ".data.datasets", "NameDataset": ".data.datasets",
    "SpanCorruptionDataset": ".data.datasets",
    "Vocab": ".data.vocab", "PAD_CHAR": ".data.vocab", "MASK_CHAR": ".data.vocab",
}

__all__ = [
    "load", "LoadedModel", "GPT", "GPTConfig", "ModelConfig", "TrainConfig", "get_preset", "CharCorruptionDataset",
    "NameDataset", "SpanCorruptionDataset", "Vocab", "PAD_CHAR", "MASK_CHAR",
]


def __getattr__(name: str) -> _typing.Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'attnlab' has no attribute {name!r}")
    value = getattr(_importlib.import_module(_PUBLIC[name], __name__), name)
    globals()[name] = value  # imported once
    return value


def __dir__() -> list[str]:
    """The public names and the version: no helper of this module, no subpackage."""
    return sorted([*__all__, "__version__"])


if _typing.TYPE_CHECKING:  # what type checkers and editors see
    from .api import LoadedModel, load
    from .config.settings import GPTConfig, ModelConfig, TrainConfig, get_preset
    from .data.datasets import CharCorruptionDataset, NameDataset, SpanCorruptionDataset
    from .data.vocab import MASK_CHAR, PAD_CHAR, Vocab
    from .model.gpt import GPT
