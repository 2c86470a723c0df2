"""When to say "I don't know", as a typed settings object: the policy that the abstention flags
of ``ask``, ``evaluate``, ``calibrate``, ``audit`` and ``serve`` describe, and that
``LoadedModel.ask(abstain=...)`` takes. ``AbstainPolicy.rule`` turns it into the ``Rule`` that
decides (attnlab/trust/abstention.py), fitting the rule on held-out training people where the
policy says so; ``calibrate`` saves the policy with its result (``calibration.json``).

The abstention flags are generated from the fields (``attnlab.cli.trust.add_abstain_flags``:
each field's flag, help and default) and read back into a policy (``policy_from_args``), so the
flags and the saved policy are one definition; the numbers keep their own check when the
command starts (their messages predate the policy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config.settings import DEFAULT_TRAIN, Settings, _f
from ..core import bounds
from ..core.datafiles import resolve
from ..data.subject_orders import recorded_holdout, recorded_order

if TYPE_CHECKING:
    from .abstention import Rule

# The rules themselves (abstention.py, which needs torch) are imported when a rule is made, so
# that the command line builds the abstention flags from this module without torch.
DEFAULT_HOLDOUT = 0.1  # held-out share of the training file when a run records none
# The rule keeps this share of the right answers of people it never trained on: a withheld right answer
# costs a user as much as a wrong one given, and most wrong answers are far less confident.
DEFAULT_KEEP_RIGHT = 0.97

# Each mode and what it does (the help of --abstain, which offers them all but below: that one
# is chosen by giving its threshold, --abstain-below P).
MODE_HELP = {
    "off": "answer every question",
    "below": "withhold answers whose confidence is below `below` (--abstain-below P)",
    "auto": "withhold answers whose name is too unfamiliar to the model for an answer that unlikely (one "
            "threshold on the two together), fitted on training-file people held out from finetuning for the "
            "target keep_right (--keep-right; never on dev or test labels)",
    "names": "only the name check (for a run with no held-out people, whose confidence fit is optimistic)",
    "run": "the run's default: auto when it records people held out from finetuning (finetune "
           "--holdout-fraction), else names; the rule stored with the run (abstention.json, written by finetune "
           "--holdout-fraction and calibrate) is read when it was fitted for these weights and settings",
}
DEFAULT_MODE = "run"  # what ask, evaluate, calibrate, audit, serve and LoadedModel.ask abstain by
MODES = tuple(MODE_HELP)


@dataclass(frozen=True)
class AbstainPolicy(Settings):
    """When an answer is withheld. ``AbstainPolicy()`` is the default of every command and of
    ``LoadedModel.ask`` (mode run); ``AbstainPolicy(mode="below", below=0.8)`` is
    ``--abstain-below 0.8``; ``AbstainPolicy(mode="off")`` answers everything."""

    mode: str = _f(DEFAULT_MODE, "; ".join(f"{mode}: {text}" for mode, text in MODE_HELP.items()),
                   choices=MODES, flag="--abstain")
    below: float | None = _f(None, "withhold every answer whose confidence is below P, a number in [0, 1] "
                             "(default: off; mode below)", bound=bounds.UNIT, flag="--abstain-below", metavar="P")
    keep_right: float = _f(DEFAULT_KEEP_RIGHT, "auto and names: the share of new people's right answers "
                           "that stay answered (fitted on the held-out people)", bound=bounds.UNIT)
    holdout_file: str = _f(DEFAULT_TRAIN.as_written, "auto and names: the training file whose last people "
                           "are held out")
    holdout_fraction: float | None = _f(None, "auto and names: the held-out share of holdout_file, --holdout-file "
                                        "(default: what the run's finetune --holdout-fraction recorded, else "
                                        f"{DEFAULT_HOLDOUT})", bound=bounds.OPEN_UNIT)

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.mode == "below") != (self.below is not None):
            raise ValueError("below is the threshold of mode 'below', and only of it: give both or neither")

    def fraction(self, meta: dict[str, Any]) -> float:
        """The held-out share: ``holdout_fraction``, else what the run's metadata records
        holding out (finetune --holdout-fraction), else DEFAULT_HOLDOUT."""
        return self.holdout_fraction or recorded_holdout(meta) or DEFAULT_HOLDOUT

    def resolved(self, meta: dict[str, Any] | None) -> tuple[AbstainPolicy, str]:
        """This policy with mode run settled for a run whose metadata is ``meta`` (auto when it
        records people held out from finetuning, else names), and why, in words ("" when the
        mode was chosen)."""
        if self.mode != "run":
            return self, ""
        recorded = recorded_holdout(meta or {})
        if recorded > 0:
            return self.replace(mode="auto"), f"it records holding out the last {recorded:.3g} of its training file"
        return self.replace(mode="names"), ("it records no people held out from finetuning, so a confidence "
                                            "threshold could only be fitted on people it trained on (optimistic)")

    def fit_fields(self, meta: dict[str, Any] | None) -> dict[str, Any]:
        """The settings a fitted rule depends on, as a stored fit records them."""
        return {"holdout_file": self.holdout_file, "holdout_fraction": self.fraction(meta or {}),
                "keep_right": self.keep_right, "subject_order": recorded_order(meta or {})}

    def rule(self, model, vocab, meta: dict[str, Any] | None = None, stored: dict[str, Any] | None = None
             ) -> Rule | None:
        """The rule for ``model`` (None: answer everything); auto and names read the rules of
        ``stored`` (the run's abstention.json, trust/stored.py) when they were fitted for these
        weights and settings, else fit them on the last ``fraction(meta)`` of ``holdout_file``."""
        policy = self.resolved(meta)[0]
        if policy.mode not in ("auto", "names"):
            return policy.choose({})
        return policy.choose(policy.fitted(model, vocab, meta, stored))

    def fitted(self, model, vocab, meta: dict[str, Any] | None, stored: dict[str, Any] | None) -> dict[str, Rule]:
        from .stored import matches, stored_rules, weights_digest

        if stored and matches(stored, weights_digest(model), self.fit_fields(meta)):
            return stored_rules(stored)
        from .abstention import fit_rules

        return fit_rules(model, vocab, resolve(self.holdout_file), self.fraction(meta or {}), self.keep_right,
                         order=recorded_order(meta or {}), correct=recorded_holdout(meta or {}) > 0)

    def choose(self, fitted: dict[str, Rule]) -> Rule | None:
        """The policy's rule given the rules ``fit_rules`` fitted (unused for off and below):
        None for off, the threshold for below, the fitted "both" for auto, "name" for names."""
        if self.mode == "off":
            return None
        if self.mode == "below":
            from .abstention import Rule

            return Rule(self.below, None, "--abstain-below")
        return fitted["name" if self.mode == "names" else "both"]
