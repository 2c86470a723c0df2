"""Loop detection for generated text (SPEC section 7: "the deterministic loops of
zero-temperature generation").

Greedy decoding is a deterministic function of the context; once the recent context repeats,
the continuation tends to repeat with it. We call a continuation *periodic from s with period p*
when every character from position s on equals the one p positions later,

    seq[i] == seq[i + p]   for all s <= i < n - p,

and the periodic tail seq[s:] is long enough to be a loop rather than a coincidence: at least
``min_repeats`` full periods and at least ``min_length`` items. The reported loop is the one with
the smallest such p (the primitive period: any multiple of p is a period too) and, for that p,
the earliest start s. No such p means the continuation does not (yet) loop.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Loop:
    period: int  # p: smallest period of the tail
    start: int  # s: earliest index from which the sequence is p-periodic to its end
    length: int  # n - s: items in the periodic tail

    @property
    def repeats(self) -> float:
        return self.length / self.period

    def describe(self, text: Sequence | None = None) -> str:
        unit = ""
        if isinstance(text, str):
            unit = f" {text[self.start:self.start + self.period]!r}"
        return (f"loops with period {self.period}{unit} from position {self.start} "
                f"({self.repeats:.1f} repetitions)")


def periodic_start(seq: Sequence, period: int) -> int:
    """The earliest s such that seq[s:] has the given period (len(seq) - period at worst)."""
    n = len(seq)
    i = n - period - 1
    while i >= 0 and seq[i] == seq[i + period]:
        i -= 1
    return max(i + 1, 0) if n > period else 0


def find_loop(seq: Sequence, *, min_repeats: float = 3.0, min_length: int = 12,
              max_period: int | None = None) -> Loop | None:
    """The loop the sequence ends in (see module doc), or None."""
    if min_repeats < 1 or min_length < 1:
        raise ValueError("min_repeats and min_length must be at least 1")
    n = len(seq)
    longest = int(n // min_repeats) if max_period is None else min(max_period, n)
    for p in range(1, longest + 1):
        s = periodic_start(seq, p)
        tail = n - s
        if tail >= min_repeats * p and tail >= min_length:
            return Loop(period=p, start=s, length=tail)
    return None


@dataclass
class LoopReport:
    """How often a set of continuations loops, and with which periods."""

    total: int = 0
    looping: int = 0
    periods: Counter | None = None
    starts: list[int] | None = None

    def add(self, loop: Loop | None) -> None:
        self.periods = self.periods if self.periods is not None else Counter()
        self.starts = self.starts if self.starts is not None else []
        self.total += 1
        if loop is not None:
            self.looping += 1
            self.periods[loop.period] += 1
            self.starts.append(loop.start)

    def summary(self) -> str:
        if not self.total:
            return "no continuations"
        lines = [f"{self.looping}/{self.total} continuations loop "
                 f"({100.0 * self.looping / self.total:.1f}%)"]
        if self.looping:
            starts = sorted(self.starts or [])
            lines.append(f"loop onset (position in the continuation): median {starts[len(starts) // 2]}, "
                         f"min {starts[0]}, max {starts[-1]}")
            lines.append("period histogram:")
            width = max(self.periods.values())
            for p in sorted(self.periods):
                c = self.periods[p]
                bar = "#" * max(1, round(40 * c / width))
                lines.append(f"  period {p:>3}: {c:>5}  {bar}")
        return "\n".join(lines)


@dataclass(frozen=True)
class LoopSurvey:
    """How greedy continuations of prompts loop: ``report`` over all of them, and the first
    looping ones as (prompt, continuation, loop)."""

    report: LoopReport
    examples: list[tuple[str, str, Loop]]


def survey_loops(model, vocab, prompts: list[str], *, max_new: int, batch_size: int = 64, show: int = 5,
                 source: str = "<prompt>", **loop_options) -> LoopSurvey:
    """Greedy continuations (SPEC 7) of ``prompts``, each checked for a loop (``find_loop``
    with ``loop_options``); the first ``show`` looping ones are kept as examples."""
    from ..model.generate import continue_texts

    texts = continue_texts(model, vocab, prompts, max_new=max_new, temperature=0.0, batch_size=batch_size,
                           progress=True, source=source)
    report, examples = LoopReport(), []
    for prompt, text in zip(prompts, texts):
        loop = find_loop(text, **loop_options)
        report.add(loop)
        if loop is not None and len(examples) < show:
            examples.append((prompt, text, loop))
    return LoopSurvey(report, examples)
