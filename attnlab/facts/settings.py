"""The settings of tracing and editing as typed objects: each field carries its help text and its
bound or choices (``_f``, as ``ModelConfig`` and ``TrainConfig`` do), the command line's flags
are generated from them (``attnlab.cli.flags.settings_flags``), and they are saved with their
results (``edit.json``, ``trace.json``: ``"settings"``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.settings import Settings, _f
from ..core import bounds

# Defined here, not beside the edits (edit.py, gated_edit.py, which need torch), so that the
# command line builds the edit flags without torch. Where the edit reads its key (edit.py):
LOCI = ("name", "answer", "both")
METHODS = ("grace", "rome", "finetune")  # how an edit is made (gated_edit.py)
DEFAULT_METHOD = "grace"


@dataclass(frozen=True)
class TraceSettings(Settings):
    """Causal tracing (``attnlab trace``, ``LoadedModel.trace``): how the name is corrupted."""

    noise: float = _f(3.0, "noise on the name's embeddings, in standard deviations of the embedding weights",
                      bound=bounds.POSITIVE)
    samples: int = _f(10, "noise samples averaged", bound=bounds.POSITIVE_INT)
    seed: int = _f(0, "noise seed", bound=bounds.SEED)


@dataclass(frozen=True)
class EditSettings(Settings):
    """Correcting one fact (``attnlab edit``, ``LoadedModel.edit``): the method and its knobs."""

    method: str = _f(DEFAULT_METHOD, "grace: gated codebook entries at one layer that fire only near the edited "
                     "person's own text (adds parameters; can be undone); rome: a rank-one change of one MLP's "
                     "output matrix (changes weights; cannot be undone); finetune: that matrix trained on the one question "
                     "until it answers the new place (the baseline, FT-L; changes weights; cannot be undone)",
                     choices=METHODS)
    radius: float = _f(0.5, "grace: each entry's radius as a fraction of the distance from its key to the nearest "
                       "stream state of another person's text", bound=bounds.POSITIVE)
    at: str = _f("answer", "rome: where the key is read: 'answer', the position before the place's first "
                 "character where the model first writes it (where tracing finds the fact in recall-format "
                 "models; where that edit fails and the recalled line spells the place, the edit of 'both'), "
                 "'both', two keys (a rank-two edit): that one and the '⁇' before the answer, or 'name', the "
                 "name's last character (ROME's subject token)", choices=LOCI)
    layer: int | None = _f(None, "grace: the block whose output holds the entries; rome, finetune: the MLP to change "
                           "(default: grace, the top block or the run's codebook layer; rome with --at answer and finetune, "
                           "the layer below the top; rome with --at name, the layer where tracing this question "
                           "finds the strongest MLP effect at the name's last character)", parse=int)
    tighten_steps: int = _f(200, "rome: once the edit works, at most this many steps looking for the smallest "
                            "change that still works (fewer other answers move); 0 stops at the first change "
                            "that works", bound=bounds.NON_NEGATIVE_INT)
    noise: float = _f(3.0, "tracing noise for choosing the layer (--at name)", bound=bounds.POSITIVE)
    samples: int = _f(10, "tracing samples for choosing the layer (--at name)", bound=bounds.POSITIVE_INT)
    seed: int = _f(0, "seed for the noise and the corpus sample", bound=bounds.SEED)
    stat_lines: int = _f(2000, "lines for the key statistics (rome) or the radii (grace) (0 = all)",
                         bound=bounds.NON_NEGATIVE_INT)

    @property
    def trace(self) -> TraceSettings:
        """The tracing that chooses a rome edit's layer at the name."""
        return TraceSettings(self.noise, self.samples, self.seed)
