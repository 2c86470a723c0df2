"""The attention registry's names, without torch: each variant's registry name and the module
and class that define it (the package imports them when first used), and the ``NAME+argmax``
names. The command line lists them (--attention's choices, --help) before any torch import."""

from __future__ import annotations

# registry name -> "module:Class" (relative to attnlab.model.attention), in the order listed;
# the one place a new variant is added (tests/test_attention.py checks each class's name)
VARIANTS = {
    "vanilla": ".vanilla:VanillaAttention",
    "synthesizer": ".synthesizer:SynthesizerAttention",
    "relative": ".relative:RelativeAttention",
    "rotary": ".rotary:RotaryAttention",
    "merged_qk": ".merged_qk:MergedQKAttention",
    "argmax": ".argmax:ArgmaxAttention",
}
HARD = "argmax"  # the hard variant: NAME+argmax is NAME's scores with its weights
HARD_SUFFIX = "+" + HARD


def base_name(name: str) -> str:
    """The variant whose scores ``name`` uses: ``rotary`` for ``rotary+argmax``."""
    return name[: -len(HARD_SUFFIX)] if name.endswith(HARD_SUFFIX) else name


def names() -> list[str]:
    """Every name a model's attention can have: the registry's variants, then NAME+argmax of
    each (the choices of the --attention flags)."""
    return [*VARIANTS, *(n + HARD_SUFFIX for n in VARIANTS if n != HARD)]
