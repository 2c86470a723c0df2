"""--minutes inside the run: the steps left are re-fitted, as the run goes, to the time left at
the pace of the run's own steps. A fit made from a few timed steps before the run is not enough
on a shared or virtual CPU: its speed drifts while a run goes on (docs/notebook.md has
the measurements), so a run fitted once overruns or stops early. The trainer asks ``due`` before
each step and, when it says so, takes ``steps_for`` as the run's new length (its schedule
follows it: the lm objective anneals over the run itself)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

# The first re-fit waits for this many timed steps (the fit made before the run holds until
# then); re-fits follow every REFIT_EVERY steps and stop before the last REFIT_UNTIL share of the
# run, so its anneal is not moved under it.
REFIT_FIRST = 50
REFIT_EVERY = 10
REFIT_UNTIL = 0.9


@dataclass
class Deadline:
    """When a run's training should end, and how far a re-fit may take it.

    ``end`` is a time.perf_counter() moment; evaluations move it later by their own time (they
    are not training). ``most_steps``: the run's steps at its given epochs, never exceeded.
    ``tokens_per_step``: the run anneals over itself (the lm objective), so its final_tokens
    are its whole steps times this; 0 keeps them (span's schedule is the course's). ``timed_pace``:
    the seconds a step the fit before the run measured (for the log). ``on_first_refit``: told the
    run's length at its first re-fit, the first made at its own pace; it may raise to stop the
    run there, before its first checkpoint wherever checkpoints lie more than REFIT_FIRST steps
    apart (learn's pretraining writes one every 500)."""

    end: float
    most_steps: int
    tokens_per_step: int = 0
    timed_pace: float = 0.0
    on_first_refit: Callable[[int], None] | None = None
    refits: int = 0
    pace: float = 0.0  # seconds a step this run has taken so far (evaluations excluded)
    # the first step of this process (a warm-up, not timed); (step, moment, evaluation seconds) when timing began
    _warm_step: int | None = field(default=None, init=False, repr=False)
    _clock: tuple[int, float, float] | None = field(default=None, init=False, repr=False)

    def due(self, step: int, steps: int, now: float, eval_seconds: float) -> bool:
        """Whether to re-fit before step ``step`` of a run now ``steps`` long (``eval_seconds``:
        the evaluations' wall seconds in this process so far)."""
        if self._warm_step is None:
            self._warm_step = step
            return False
        if self._clock is None:
            self._clock = (step, now, eval_seconds)
            return False
        timed = step - self._clock[0]
        return timed >= REFIT_FIRST and timed % REFIT_EVERY == 0 and step < REFIT_UNTIL * steps

    def steps_for(self, step: int, now: float, eval_seconds: float) -> int:
        """The run's length that ends it at ``end`` at this run's pace so far: at least one step
        more than ``step``, at most ``most_steps``."""
        first, began, evaluated = self._clock
        self.pace = (now - began - (eval_seconds - evaluated)) / (step - first)
        left = self.end + eval_seconds - now
        self.refits += 1
        steps = min(self.most_steps, step + max(1, math.floor(left / self.pace)))
        if self.refits == 1 and self.on_first_refit is not None:
            self.on_first_refit(steps)
        return steps

    def summary(self, given_epochs: float, fitted_epochs: float) -> str:
        """What the re-fits made of the run, for its log."""
        return (f"--minutes: re-fitted {self.refits} times to this run's own pace ({self.pace:.3f} s a step; "
                f"the timed steps said {self.timed_pace:.3f}): {given_epochs:g} -> {fitted_epochs:g} epochs")


def epochs_for(steps: int, steps_per_epoch: int) -> float:
    """Epochs whose ceiling in steps (trainer.total_steps) is ``steps``: rounded down to six
    decimals, so the stored epochs give back the same steps when a run is resumed."""
    return math.floor(1e6 * steps / steps_per_epoch) / 1e6
