"""attnlab: pretrain, finetune and probe small character-level transformers.

The package is built in layers (docs/architecture.md; tests/test_structure.py checks them):
core, data, config, model, then answering/probing/explore, training/trust/facts, then
experiments and the API, then the command line.

The course's public names are kept so people coming from the CS224N assignment find them:
``GPT``, ``GPTConfig``, ``CharCorruptionDataset``, ``NameDataset``.
"""

from .api import LoadedModel, load
from .config.settings import GPTConfig, ModelConfig, TrainConfig, get_preset
from .data.datasets import CharCorruptionDataset, NameDataset, SpanCorruptionDataset
from .model.gpt import GPT
from .data.vocab import MASK_CHAR, PAD_CHAR, Vocab

from ._version import __version__

__all__ = [
    "load", "LoadedModel", "GPT", "GPTConfig", "ModelConfig", "TrainConfig", "get_preset", "CharCorruptionDataset",
    "NameDataset", "SpanCorruptionDataset", "Vocab", "PAD_CHAR", "MASK_CHAR",
]
