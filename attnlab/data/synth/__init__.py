"""Synthetic fact sets made to order (text only, no model): ``bios``, bioS-like biographies of
invented people with the augmentations of Allen-Zhu and Li's Physics of Language Models 3.1
(attnlab/data/synth/bios.py; `attnlab synth bios`, docs/guides/synthetic-bios.md)."""

from .bios import Bios, BiosOptions, Person, SynthError, generate, write

__all__ = ["Bios", "BiosOptions", "Person", "SynthError", "generate", "write"]
