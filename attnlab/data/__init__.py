"""Layer 1, data: the vocabulary, reading the corpus and question files, the course's datasets,
training objectives and batching.

The readers and datasets (``attnlab.data.datasets``) are re-exported here, so
``attnlab.data.NameDataset`` works as it did when ``data`` was a module."""

from .datasets import (
    CharCorruptionDataset, DataError, NameDataset, QAExample, SpanCorruptionDataset, read_corpus, read_qa,
    read_questions, read_text,
)
from .vocab import MASK_CHAR, PAD_CHAR, Vocab

__all__ = [
    "CharCorruptionDataset", "DataError", "NameDataset", "QAExample", "SpanCorruptionDataset", "read_corpus",
    "read_qa", "read_questions", "read_text", "MASK_CHAR", "PAD_CHAR", "Vocab",
]
