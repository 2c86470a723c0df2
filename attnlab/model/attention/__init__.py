"""Attention variants. The registry (registry.py, which needs no torch) is the single place a
new variant is added; ``REGISTRY`` here maps each name to its class.

A name is a registry key (``vanilla``, ``rotary``, ...) or ``NAME+argmax``: that variant's
scores with hard argmax weights (see argmax.py), used to probe a trained checkpoint; or your own
class by path, ``FILE.py:ClassName`` or ``package.module:ClassName`` (see plugin.py).
"""

from __future__ import annotations

import importlib
import typing

from ...config.settings import ModelConfig
from .registry import HARD, HARD_SUFFIX, VARIANTS, base_name, names

if typing.TYPE_CHECKING:  # what type checkers and editors see
    from . import masks
    from .argmax import ArgmaxAttention, hard_variant, straight_through_argmax
    from . import plugin
    from .base import Attention, DotProductAttention, KVCache
    from .merged_qk import MergedQKAttention, merge_query_key
    from .relative import RelativeAttention
    from .rotary import RotaryAttention
    from .synthesizer import SynthesizerAttention
    from .vanilla import VanillaAttention

# The classes and helpers, imported with torch when first used (PEP 562), so that the registry's
# names (registry.py) are read without torch: name -> the module that defines it.
_DEFINED_IN = {
    **{spec.partition(":")[2]: spec.partition(":")[0] for spec in VARIANTS.values()},
    "hard_variant": ".argmax", "straight_through_argmax": ".argmax", "merge_query_key": ".merged_qk",
    "Attention": ".base", "DotProductAttention": ".base", "KVCache": ".base",
}


def __getattr__(name: str) -> typing.Any:
    if name in globals():  # imported already (a call from this module)
        return globals()[name]
    if name == "REGISTRY":
        value: typing.Any = _registry()
    elif name in ("masks", "plugin"):
        value = importlib.import_module(f".{name}", __name__)
    elif name in _DEFINED_IN:
        value = getattr(importlib.import_module(_DEFINED_IN[name], __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # imported once
    return value


def _registry() -> dict[str, type[Attention]]:
    """REGISTRY: registry name -> the variant's class, in VARIANTS' order."""
    registry = {}
    for name, spec in VARIANTS.items():
        module, _, cls = spec.partition(":")
        registry[name] = getattr(importlib.import_module(module, __name__), cls)
    return registry


def attention_class(name: str) -> type[Attention]:
    """The class for a registry name, ``NAME+argmax`` or a plug-in's path; one clear error
    otherwise."""
    base = base_name(name)
    plugin = __getattr__("plugin")
    if plugin.is_plugin(base):
        cls = plugin.plugin_class(base)
        if base != name and issubclass(cls, plugin.CourseAttention):
            raise plugin.PluginError(f"{plugin.display(base)}: {HARD_SUFFIX} replaces the softmax of the lab "
                                     "interface; a course-interface module computes its own")
        return __getattr__("hard_variant")(cls) if base != name else cls
    try:
        cls = __getattr__("REGISTRY")[base]
    except KeyError:
        raise ValueError(
            f"unknown attention variant {name!r}; choose one of {', '.join(VARIANTS)} "
            f"(or NAME{HARD_SUFFIX})"
        ) from None
    return __getattr__("hard_variant")(cls) if base != name else cls


def pin(name: str) -> str:
    """A plug-in name with its file's content hash (NAME+argmax keeps its suffix); others as
    they are."""
    base = base_name(name)
    return __getattr__("plugin").pinned(base) + name[len(base):]


def build_attention(config: ModelConfig) -> Attention:
    cls = attention_class(config.attention)
    plugin = __getattr__("plugin")
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
    if requested != HARD:
        return requested
    base = base_name(stored)
    if base in (HARD, "vanilla"):
        return HARD
    return base + HARD_SUFFIX


__all__ = [
    "REGISTRY", "Attention", "masks", "base_name", "names", "DotProductAttention", "KVCache", "build_attention", "pin",
    "plugin",
    "attention_class", "attention_override", "hard_variant", "straight_through_argmax",
    "merge_query_key", "VanillaAttention", "SynthesizerAttention", "RelativeAttention",
    "RotaryAttention", "MergedQKAttention", "ArgmaxAttention",
]
