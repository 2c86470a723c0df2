"""Statistics for comparing trained models on the same questions, over several seeds.

Input: for each model, one per-question correctness array per seed (1 = the answer matched the
label), all over the same questions in the same order, seed k of every model trained with the
same seed. Output, per model:

- the mean dev accuracy over seeds and each seed's count;
- a 95% interval for that mean that counts both sources of noise, the questions (a different
  500 people would give another accuracy) and the seeds (another initialisation and data order
  would too): a crossed bootstrap, which resamples the questions and, independently, the seeds
  in each replicate (the same questions are asked of every seed, so they are resampled once per
  replicate, not once per seed) and takes the 2.5th and 97.5th percentiles of the replicate
  means. With one seed it is the question bootstrap alone; with few seeds the seed part is
  underestimated (two seeds have only three distinct resamples);
- a paired test against a reference model on the same questions: per seed, the exact McNemar
  test (of the questions exactly one of the two answers right, how many went each way; under
  no difference each goes either way with probability 1/2). Seeds are combined by the
  stratified exact test: under no difference every seed's split is Binomial(n_k, 1/2), so the
  totals over seeds are Binomial(sum n_k, 1/2), and the combined p-value is the two-sided exact
  binomial test of the summed counts (the seeds weighted by their discordant questions, as the
  Mantel-Haenszel test weighs strata). It treats the seeds as given: the interval, not the
  test, is what speaks for other seeds;
- a verdict: "better" or "worse" when the combined p-value is below ``ALPHA`` (0.05, two-sided;
  no correction for testing several models against one reference), else
  "no detectable difference";
- for a table of several models tested against one reference, Holm's adjusted p-values
  (``holm``): a verdict whose adjusted p is below ``ALPHA`` keeps the chance of any spurious
  verdict in the whole table under ``ALPHA``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

ALPHA = 0.05
LEVEL = 0.95
REPLICATES = 4000
BOOTSTRAP_SEED = 0  # the interval is reproducible: the same inputs give the same bounds

INTERVAL_METHOD = ("crossed bootstrap over questions and seeds (percentile, "
                   f"{REPLICATES} replicates)")
TEST_METHOD = "exact McNemar per seed, seeds combined by the stratified exact (binomial) test"


@dataclass(frozen=True)
class McNemar:
    """The questions exactly one of the two models got right: ``wins`` (the model, not the
    reference), ``losses`` (the reference, not the model); ``p`` the two-sided exact p-value."""

    wins: int
    losses: int
    p: float

    @property
    def discordant(self) -> int:
        return self.wins + self.losses


@dataclass(frozen=True)
class PairedTest:
    """A model against the reference, seed by seed and combined."""

    per_seed: tuple[McNemar, ...]
    combined: McNemar
    verdict: str  # better, worse or no detectable difference

    def to_dict(self) -> dict:
        return {"method": TEST_METHOD, "wins": self.combined.wins, "losses": self.combined.losses,
                "p": self.combined.p, "verdict": self.verdict, "alpha": ALPHA,
                "per_seed": [{"wins": m.wins, "losses": m.losses, "p": m.p} for m in self.per_seed]}


@dataclass(frozen=True)
class Summary:
    """One model's accuracy over its seeds: each seed's count, the mean and its interval."""

    counts: tuple[int, ...]
    total: int  # questions per seed
    mean: float  # fraction correct, averaged over seeds
    interval: tuple[float, float]  # fractions

    def to_dict(self) -> dict:
        return {"counts": list(self.counts), "total": self.total, "mean": self.mean,
                "interval": list(self.interval), "interval_method": INTERVAL_METHOD, "level": LEVEL}

    def shown(self) -> str:
        """e.g. 41.3% [95% CI 36.0-46.9%]"""
        low, high = self.interval
        return f"{100 * self.mean:.1f}% [95% CI {100 * low:.1f}-{100 * high:.1f}%]"


def binomial_two_sided(k: int, n: int) -> float:
    """The two-sided exact binomial p-value of k successes in n trials with probability 1/2:
    the probability of a split at least as uneven as (k, n - k). n = 0 gives 1."""
    if not 0 <= k <= n:
        raise ValueError(f"k must be within 0..n, got k={k}, n={n}")
    tail = min(k, n - k)
    mass = sum(math.comb(n, i) for i in range(tail + 1))
    return min(1.0, 2 * mass / 2**n)


def mcnemar(model: Sequence, reference: Sequence) -> McNemar:
    """The exact McNemar test of two correctness arrays over the same questions."""
    a, b = _correctness(model, "model"), _correctness(reference, "reference")
    if a.shape != b.shape:
        raise ValueError(f"the two runs answered different numbers of questions ({a.size} and {b.size})")
    wins, losses = int(np.sum(a & ~b)), int(np.sum(~a & b))
    return McNemar(wins, losses, binomial_two_sided(wins, wins + losses))


def paired_test(model_runs: Sequence[Sequence], reference_runs: Sequence[Sequence],
                alpha: float = ALPHA) -> PairedTest:
    """Seed k of the model against seed k of the reference; the per-seed exact McNemar tests and
    their stratified combination, with the verdict."""
    if len(model_runs) != len(reference_runs) or not model_runs:
        raise ValueError(f"a paired test needs the same seeds on both sides, got {len(model_runs)} "
                         f"and {len(reference_runs)} runs")
    per_seed = tuple(mcnemar(m, r) for m, r in zip(model_runs, reference_runs))
    wins, losses = sum(m.wins for m in per_seed), sum(m.losses for m in per_seed)
    combined = McNemar(wins, losses, binomial_two_sided(wins, wins + losses))
    return PairedTest(per_seed, combined, verdict(combined, alpha))


def verdict(test: McNemar, alpha: float = ALPHA) -> str:
    if test.p >= alpha or test.wins == test.losses:
        return "no detectable difference"
    return "better" if test.wins > test.losses else "worse"


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given. With m tests, the i-th smallest
    p is multiplied by m - i + 1 (i from 1), capped at 1 and never below an adjusted p that ranks
    before it; rejecting where the adjusted p < alpha holds the family-wise error at alpha
    whatever the tests' dependence (Holm 1979; uniformly less strict than Bonferroni's m x p)."""
    if any(not 0.0 <= p <= 1.0 for p in pvalues):
        raise ValueError(f"p-values must lie in [0, 1], got {list(pvalues)}")
    m = len(pvalues)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def holm_adjusted(tests: dict[str, PairedTest | None]) -> dict[str, float]:
    """Each model's combined p-value, Holm-adjusted over the tests made (None: no test, the
    reference)."""
    tested = {name: t.combined.p for name, t in tests.items() if t is not None}
    return dict(zip(tested, holm(list(tested.values()))))


def holm_note(tests: dict[str, PairedTest | None], reference: str, alpha: float = ALPHA) -> str:
    """The line under a table of several tests against one reference: each Holm-adjusted p,
    with the verdict where it stands corrected; empty with fewer than two tests."""
    adjusted = holm_adjusted(tests)
    if len(adjusted) < 2:
        return ""
    shown = ", ".join(f"{name} {p:.3g}" + (f" ({tests[name].verdict})" if p < alpha else "")
                      for name, p in adjusted.items())
    return (f"Holm-adjusted p over the {len(adjusted)} tests against {reference} (a verdict that stands with "
            f"the chance of any spurious one in the table kept under {alpha}): {shown}.")


def summarise(runs: Sequence[Sequence], replicates: int = REPLICATES, seed: int = BOOTSTRAP_SEED) -> Summary:
    """Each seed's count, the mean accuracy over seeds and its crossed-bootstrap interval."""
    matrix = _matrix(runs)
    low, high = crossed_bootstrap(matrix, replicates, seed)
    return Summary(tuple(int(c) for c in matrix.sum(axis=1)), matrix.shape[1], float(matrix.mean()), (low, high))


def crossed_bootstrap(matrix: np.ndarray, replicates: int = REPLICATES, seed: int = BOOTSTRAP_SEED,
                      level: float = LEVEL) -> tuple[float, float]:
    """Percentile interval of the mean of a (seeds, questions) 0/1 matrix, resampling the
    questions (shared by all seeds) and the seeds independently in every replicate."""
    seeds, questions = matrix.shape
    if questions == 0:
        return (0.0, 1.0)
    rng = np.random.default_rng(seed)
    # resampling as multiplicities: how often each question / seed is drawn in a replicate
    question_weights = rng.multinomial(questions, np.full(questions, 1 / questions), size=replicates)
    seed_weights = rng.multinomial(seeds, np.full(seeds, 1 / seeds), size=replicates)
    per_seed = question_weights @ matrix.T.astype(float) / questions  # (replicates, seeds)
    means = (per_seed * seed_weights).sum(axis=1) / seeds
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def compare_models(runs: dict[str, Sequence[Sequence]], reference: str,
                   alpha: float = ALPHA) -> dict[str, tuple[Summary, PairedTest | None]]:
    """Every model's summary and, except the reference's own, its paired test against it."""
    if reference not in runs:
        raise ValueError(f"the reference {reference!r} is not among the models ({', '.join(runs)})")
    return {name: (summarise(r), None if name == reference else paired_test(r, runs[reference], alpha))
            for name, r in runs.items()}


def _correctness(values: Sequence, what: str) -> np.ndarray:
    a = np.asarray(values)
    if a.ndim != 1 or not np.isin(a, (0, 1)).all():
        raise ValueError(f"the {what}'s correctness must be one 0/1 (or True/False) value per question")
    return a.astype(bool)


def _matrix(runs: Sequence[Sequence]) -> np.ndarray:
    rows = [_correctness(r, "run") for r in runs]
    if not rows or len({r.size for r in rows}) != 1:
        raise ValueError("a summary needs at least one run, every run over the same questions")
    return np.stack(rows).astype(np.int64)


def correctness(predictions: Sequence[str], labels: Sequence[str]) -> np.ndarray:
    """Per question, whether the prediction is exactly the label (what evaluation scores)."""
    if len(predictions) != len(labels):
        raise ValueError(f"{len(predictions)} predictions for {len(labels)} labelled questions")
    return np.array([p == label for p, label in zip(predictions, labels)], dtype=bool)


def read_correctness(predictions_file: str | Path, labelled_file: str | Path) -> np.ndarray:
    """Per question of a labelled QA file, whether the predictions file (one answer a line, as
    `attnlab evaluate` writes it) answered it right."""
    from ..data.datasets import read_qa

    examples = read_qa(labelled_file, labelled=True)
    lines = Path(predictions_file).read_text(encoding="utf-8").splitlines()
    if len(lines) != len(examples):
        raise ValueError(f"{predictions_file}: {len(lines)} predictions for the {len(examples)} questions "
                         f"of {labelled_file}")
    return correctness(lines, [e.answer for e in examples])
