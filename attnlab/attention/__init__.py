"""Attention variants. The registry below is the single place a new variant is added."""

from __future__ import annotations

from ..config import ModelConfig
from .argmax import ArgmaxAttention
from .base import Attention, DotProductAttention, KVCache
from .merged_qk import MergedQKAttention, merge_query_key
from .relative import RelativeAttention
from .rotary import RotaryAttention
from .synthesizer import SynthesizerAttention
from .vanilla import VanillaAttention

REGISTRY: dict[str, type[Attention]] = {
    cls.name: cls
    for cls in (
        VanillaAttention,
        SynthesizerAttention,
        RelativeAttention,
        RotaryAttention,
        MergedQKAttention,
        ArgmaxAttention,
    )
}


def build_attention(config: ModelConfig) -> Attention:
    try:
        cls = REGISTRY[config.attention]
    except KeyError:
        raise ValueError(
            f"unknown attention variant {config.attention!r}; choose one of {', '.join(REGISTRY)}"
        ) from None
    return cls(config)


__all__ = [
    "REGISTRY", "Attention", "DotProductAttention", "KVCache", "build_attention",
    "merge_query_key", "VanillaAttention", "SynthesizerAttention", "RelativeAttention",
    "RotaryAttention", "MergedQKAttention", "ArgmaxAttention",
]
