"""attnlab: pretrain, finetune and probe small character-level transformers.

The course's public names are kept so people coming from the CS224N assignment find them:
``GPT``, ``GPTConfig``, ``CharCorruptionDataset``, ``NameDataset``.
"""

from .api import LoadedModel, load
from .config import GPTConfig, ModelConfig, TrainConfig, get_preset
from .data import CharCorruptionDataset, NameDataset, SpanCorruptionDataset
from .model import GPT
from .vocab import MASK_CHAR, PAD_CHAR, Vocab

__version__ = "0.1.0"

__all__ = [
    "load", "LoadedModel", "GPT", "GPTConfig", "ModelConfig", "TrainConfig", "get_preset", "CharCorruptionDataset",
    "NameDataset", "SpanCorruptionDataset", "Vocab", "PAD_CHAR", "MASK_CHAR",
]
