"""Attention variants. The registry below is the single place a new variant is added.

A name is a registry key (``vanilla``, ``rotary``, ...) or ``NAME+argmax``: that variant's
scores with hard argmax weights (see argmax.py), used to probe a trained checkpoint; or your own
class by path, ``FILE.py:ClassName`` or ``package.module:ClassName`` (see plugin.py).
"""

from __future__ import annotations

from ...config.settings import ModelConfig
from . import masks
from .argmax import HARD_SUFFIX, ArgmaxAttention, hard_variant, straight_through_argmax
from .base import Attention, DotProductAttention, KVCache
from . import plugin
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


def base_name(name: str) -> str:
    """The variant whose scores ``name`` uses: ``rotary`` for ``rotary+argmax``."""
    return name[: -len(HARD_SUFFIX)] if name.endswith(HARD_SUFFIX) else name


def names() -> list[str]:
    """Every name a model's attention can have: the registry's variants, then NAME+argmax of
    each (the choices of the --attention flags)."""
    return [*REGISTRY, *(n + HARD_SUFFIX for n in REGISTRY if n != ArgmaxAttention.name)]


def attention_class(name: str) -> type[Attention]:
    """The class for a registry name or ``NAME+argmax``; one clear error otherwise."""
    base = base_name(name)
    if plugin.is_plugin(base):
        cls = plugin.plugin_class(base)
        if base != name and issubclass(cls, plugin.CourseAttention):
            raise plugin.PluginError(f"{plugin.display(base)}: {HARD_SUFFIX} replaces the softmax of the lab "
                                     "interface; a course-interface module computes its own")
        return hard_variant(cls) if base != name else cls
    try:
        cls = REGISTRY[base]
    except KeyError:
        raise ValueError(
            f"unknown attention variant {name!r}; choose one of {', '.join(REGISTRY)} "
            f"(or NAME{HARD_SUFFIX})"
        ) from None
    return hard_variant(cls) if base != name else cls


def pin(name: str) -> str:
    """A plug-in name with its file's content hash (NAME+argmax keeps its suffix); others as
    they are."""
    base = base_name(name)
    return plugin.pinned(base) + name[len(base):]


def build_attention(config: ModelConfig) -> Attention:
    cls = attention_class(config.attention)
    if not plugin.is_plugin(config.attention) or issubclass(cls, plugin.CourseAttention):
        return cls(config)
    try:  # the user's constructor: its error names the user's line
        return cls(config)
    except Exception as e:  # noqa: BLE001
        source = plugin.source_of(base_name(config.attention))
        raise plugin.PluginError(plugin.user_error(e, source, f"building {cls.__name__}(config)")) from None


def attention_override(stored: str, requested: str) -> str:
    """The variant to build when a checkpoint trained with ``stored`` is evaluated with
    ``--attention requested``: ``argmax`` means "these scores, hard weights", so a rotary
    checkpoint becomes ``rotary+argmax`` rather than silently losing its rotation."""
    if requested != ArgmaxAttention.name:
        return requested
    base = base_name(stored)
    if base in (ArgmaxAttention.name, "vanilla"):
        return ArgmaxAttention.name
    return base + HARD_SUFFIX


__all__ = [
    "REGISTRY", "Attention", "masks", "base_name", "names", "DotProductAttention", "KVCache", "build_attention", "pin",
    "attention_class", "attention_override", "hard_variant", "straight_through_argmax",
    "merge_query_key", "VanillaAttention", "SynthesizerAttention", "RelativeAttention",
    "RotaryAttention", "MergedQKAttention", "ArgmaxAttention", "plugin",
]
