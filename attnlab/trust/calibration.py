"""Does the confidence mean anything? Calibration, ranking and abstention for QA answers.

Every answer carries a confidence (attnlab/answering/evaluate.py: the probability of the greedy answer;
for the recall format attnlab/answering/knowledge.py also multiplies in the probability of the answer's
characters as the model recalled them). Here we measure it against right and wrong answers:

- ECE, the expected calibration error over equal-width confidence bins (Guo et al. 2017, "On
  Calibration of Modern Neural Networks": sum over bins of |bin| / n * |accuracy - mean
  confidence|, bin m holding the confidences in ((m-1)/M, m/M]);
- AUROC of the confidence as a score separating right from wrong answers (the Mann-Whitney
  statistic: the chance that a random right answer is more confident than a random wrong one,
  ties counting one half);
- accuracy at coverage c: answer only the c most confident share of the questions.

Anything fitted (the abstention threshold) is fitted on training-file people held out from
finetuning, the last ``holdout_fraction`` of the training file, never on dev or test labels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..data.splits import finetuning_people, held_out_people  # noqa: F401
from ..core.paths import save_figure
from ..core.plotting import pyplot

N_BINS = 15
COVERAGES = (0.1, 0.3, 0.5, 1.0)


@dataclass(frozen=True)
class Bin:
    low: float
    high: float
    count: int
    mean_confidence: float  # 0 for an empty bin
    accuracy: float  # 0 for an empty bin


def _check(confidence: Sequence[float], correct: Sequence[bool]) -> None:
    if len(confidence) != len(correct):
        raise ValueError(f"{len(confidence)} confidences but {len(correct)} right/wrong marks")
    bad = [c for c in confidence if not 0.0 <= c <= 1.0]
    if bad:
        raise ValueError(f"confidences must lie in [0, 1], got {bad[0]}")


def bin_of(confidence: Sequence[float], n_bins: int = N_BINS) -> np.ndarray:
    """Each confidence's equal-width bin over [0, 1]: bin m holds ((m-1)/M, m/M], the first also 0."""
    return np.maximum(np.ceil(np.asarray(confidence, dtype=np.float64) * n_bins).astype(np.int64) - 1, 0)


def reliability_bins(confidence: Sequence[float], correct: Sequence[bool], n_bins: int = N_BINS) -> list[Bin]:
    """The bins of ``bin_of``, each with its count, mean confidence and accuracy."""
    _check(confidence, correct)
    members: list[list[int]] = [[] for _ in range(n_bins)]
    for i, m in enumerate(bin_of(confidence, n_bins)):
        members[m].append(i)
    bins = []
    for m, idx in enumerate(members):
        n = len(idx)
        mean_conf = sum(confidence[i] for i in idx) / n if n else 0.0
        acc = sum(bool(correct[i]) for i in idx) / n if n else 0.0
        bins.append(Bin(m / n_bins, (m + 1) / n_bins, n, mean_conf, acc))
    return bins


def expected_calibration_error(confidence: Sequence[float], correct: Sequence[bool], n_bins: int = N_BINS) -> float:
    n = len(confidence)
    if n == 0:
        raise ValueError("no answers to measure")
    return sum(b.count / n * abs(b.accuracy - b.mean_confidence) for b in reliability_bins(confidence, correct, n_bins))


# Draws of right/wrong marks behind ece_by_chance: enough for the range's ends (its 2.5th and
# 97.5th percentiles) to serve as a yardstick, not a test to the third decimal, and few enough
# to add nothing noticeable to a report's time.
CHANCE_DRAWS = 400


def ece_by_chance(confidence: Sequence[float], n_bins: int = N_BINS, draws: int = CHANCE_DRAWS,
                  seed: int = 0) -> tuple[float, float]:
    """The range (2.5th to 97.5th percentile) of the ECE a perfectly calibrated confidence scores
    on these answers by chance alone: each answer marked right with probability its confidence,
    ``draws`` times (consistency resampling, Broecker and Smith 2007). ECE is never below zero and
    a few hundred answers in fifteen bins leave it well above, so an ECE inside this range is no
    evidence of miscalibration, and one above it is."""
    _check(confidence, [True] * len(confidence))
    if not confidence:
        raise ValueError("no answers to measure")
    c = np.asarray(confidence, dtype=np.float64)
    in_bin = np.zeros((len(c), n_bins))
    in_bin[np.arange(len(c)), bin_of(c, n_bins)] = 1.0
    marks = (np.random.default_rng(seed).random((draws, len(c))) < c).astype(np.float64)
    # a bin's |count| / n * |accuracy - mean confidence| is |right - sum of confidence| / n
    errors = np.abs(marks @ in_bin - c @ in_bin).sum(axis=1) / len(c)
    low, high = np.percentile(errors, [2.5, 97.5])
    return float(low), float(high)


def auroc(scores: Sequence[float], positive: Sequence[bool]) -> float | None:
    """P(score of a random positive > score of a random negative), ties 1/2; None when there
    are no positives or no negatives (the area is undefined)."""
    pos = [s for s, p in zip(scores, positive) if p]
    neg = [s for s, p in zip(scores, positive) if not p]
    if not pos or not neg:
        return None
    # rank-sum form of the Mann-Whitney U: average ranks for ties
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    rank_sum = sum(r for r, p in zip(ranks, positive) if p)
    u = rank_sum - len(pos) * (len(pos) + 1) / 2
    return u / (len(pos) * len(neg))


def most_confident_first(confidence: Sequence[float]) -> list[int]:
    """Indices by falling confidence; equal confidences keep input order."""
    return sorted(range(len(confidence)), key=lambda i: -confidence[i])


def accuracy_at_coverage(confidence: Sequence[float], correct: Sequence[bool], coverage: float) -> tuple[int, int]:
    """(right, answered) when only the ceil(coverage * n) most confident questions are answered."""
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage must lie in (0, 1], got {coverage}")
    kept = most_confident_first(confidence)[: math.ceil(coverage * len(confidence))]
    return sum(bool(correct[i]) for i in kept), len(kept)


def coverage_curve(confidence: Sequence[float], correct: Sequence[bool]) -> tuple[list[float], list[float]]:
    """Coverage k/n and accuracy of the k most confident answers, for k = 1..n."""
    right, xs, ys = 0, [], []
    n = len(confidence)
    for k, i in enumerate(most_confident_first(confidence), 1):
        right += bool(correct[i])
        xs.append(k / n)
        ys.append(right / k)
    return xs, ys


# ----------------------------------------------------------------------------- abstention


def check_probability(value: float, flag: str) -> float:
    if not 0.0 <= value <= 1.0 or value != value:
        raise ValueError(f"{flag} must lie in [0, 1], got {value}")
    return value


def conformal_count(n_right: int, keep: float) -> int:
    """How many of ``n_right`` held-out right answers a threshold must answer (the k most
    confident) so that a new person's right answer is answered with probability at least
    ``keep``: ceil(keep * (n_right + 1)), at most all of them (split conformal prediction,
    Angelopoulos and Bates 2021, "A gentle introduction to conformal prediction"). The new right
    answer and the held-out ones are exchangeable, so it ranks among the n_right + 1 uniformly
    and clears the k-th most confident held-out one with probability k / (n_right + 1); keeping
    ceil(keep * n_right) would promise ``keep`` of the held-out people only."""
    check_probability(keep, "the share of right answers to keep")
    return min(n_right, math.ceil(keep * (n_right + 1)))


def abstained_predictions(answers: Sequence[str], confidence: Sequence[float], threshold: float) -> list[str]:
    """The answers in input order, with "" where the confidence is below the threshold."""
    return [a if c >= threshold else "" for a, c in zip(answers, confidence)]


# ----------------------------------------------------- the confidence correction and Kalai's score
KALAI_TARGETS = (0.5, 0.75, 0.9)
# Bounds on the confidence inside the logarithms: a greedy answer's probability can be 0 (never
# closed) or round to 1.
_FLOOR = 1e-12


@dataclass(frozen=True)
class Correction:
    """Beta calibration (Kull, Silva Filho and Flach 2017, "Beta calibration: a well-founded and
    easily implemented improvement on logistic calibration for binary classifiers"): the corrected
    confidence is ``sigmoid(a ln c - b ln(1 - c) + m)``. With ``a, b >= 0`` it is monotone, so it
    never changes which answers a confidence threshold keeps, only what the number says. It
    holds temperature scaling of the answer's log-probability (``c ** (1 / T)``) nearly as the
    case ``b = m = 0`` and logistic (Platt) scaling of ``ln c`` as ``b = 0``: a recall answer's
    confidence is a product of two probabilities and can be far below its accuracy, which a
    power alone cannot lift without overshooting the sure answers."""

    a: float
    b: float
    m: float

    def __call__(self, confidence: float) -> float:
        c = min(max(confidence, _FLOOR), 1 - _FLOOR)
        return _sigmoid(self.a * math.log(c) - self.b * math.log1p(-c) + self.m)

    def chance(self, confidence: float, parts: Parts | None = None) -> float:
        """The corrected confidence (the parts are not weighed apart here)."""
        return self(confidence)

    def to_dict(self) -> dict[str, float | str]:
        return {"method": "beta calibration", "a": self.a, "b": self.b, "m": self.m}

    @classmethod
    def from_dict(cls, data: dict | None) -> "Correction | PartsCorrection | None":
        """A stored correction of either kind (None for none)."""
        if not data:
            return None
        if data.get("method") == PartsCorrection.METHOD:
            return PartsCorrection(*(float(data[k]) for k in PartsCorrection.FIELDS))
        return cls(float(data["a"]), float(data["b"]), float(data["m"]))

    def describe(self) -> str:
        return f"beta calibration a={self.a:.3g}, b={self.b:.3g}, m={self.m:.3g}"


Parts = tuple[float, float, float]  # a recall answer's confidence in parts (answering/formats.py Answer.parts)


@dataclass(frozen=True)
class PartsCorrection:
    """Beta calibration with the confidence's parts weighed apart: a recall answer's confidence
    is the product of the answer's probability read out of the recall, the quote's before it,
    and the probability the recall gave the answer's characters, and these are not worth the same
    (an answer the recall wrote surely is right more often than one it wrote hesitantly, however
    sure the read-out). The corrected confidence is ``sigmoid(w_read ln p_read + w_quote ln
    p_quote + w_recall ln p_recall - b ln(1 - c) + m)`` with every weight >= 0, so it rises with
    each part; ranking answers by it can differ from ranking them by the confidence, so a rule
    fitted with it thresholds it (abstention.py). An answer without parts (the direct format)
    is read as all read-out."""

    read: float
    quote: float
    recall: float
    b: float
    m: float
    METHOD = "confidence parts"
    FIELDS = ("read", "quote", "recall", "b", "m")

    def chance(self, confidence: float, parts: Parts | None = None) -> float:
        read, quote, recall, rest = _part_features(confidence, parts)
        return _sigmoid(self.read * read + self.quote * quote + self.recall * recall - self.b * rest + self.m)

    def to_dict(self) -> dict[str, float | str]:
        return {"method": self.METHOD, **{k: getattr(self, k) for k in self.FIELDS}}

    def describe(self) -> str:
        return (f"confidence parts weighed apart: read-out {self.read:.3g}, quote {self.quote:.3g}, recall "
                f"{self.recall:.3g}, b={self.b:.3g}, m={self.m:.3g}")


def _sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z)) if z >= 0 else math.exp(z) / (1 + math.exp(z))


def _part_features(confidence: float, parts: Parts | None) -> tuple[float, float, float, float]:
    """ln p_read, ln p_quote, ln p_recall (each floored) and ln(1 - c), for an answer; an answer
    never closed (confidence 0) has every part at the floor."""
    c = min(max(confidence, _FLOOR), 1 - _FLOOR)
    floor = math.log(_FLOOR)
    if confidence <= 0:
        read, quote, recall = floor, floor, floor
    elif parts is None:
        read, quote, recall = math.log(c), 0.0, 0.0
    else:
        read, quote, recall = (max(p, floor) for p in parts)
    return read, quote, recall, math.log1p(-c)


def corrected(confidence: Sequence[float], correction: Correction | PartsCorrection | None,
              parts: Sequence[Parts | None] | None = None) -> list[float]:
    """Each confidence after ``correction`` (None: unchanged), with each answer's ``parts``
    where the correction weighs them."""
    if correction is None:
        return list(confidence)
    return [correction.chance(c, p) for c, p in zip(confidence, parts or [None] * len(confidence))]


def _beta_features(confidence: Sequence[float]) -> np.ndarray:
    c = np.clip(np.asarray(confidence, dtype=np.float64), _FLOOR, 1 - _FLOOR)
    return np.stack([np.log(c), -np.log1p(-c), np.ones_like(c)], axis=1)


def _logistic_fit(x: np.ndarray, y: np.ndarray, ridge: float) -> np.ndarray:
    """Maximum-likelihood logistic regression (a small ridge on the slopes keeps it finite when
    the classes separate) by Newton's method with step halving: five parameters at most, so
    a library would add nothing but a dependency."""
    w = np.zeros(x.shape[1])
    penalty = np.full(x.shape[1], ridge)
    penalty[-1] = 0.0

    def loss(w: np.ndarray) -> float:
        z = x @ w
        return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * np.sum(penalty * w * w))

    current = loss(w)
    for _ in range(100):
        p = 1 / (1 + np.exp(-(x @ w)))
        grad = x.T @ (p - y) + penalty * w
        hess = (x * (p * (1 - p))[:, None]).T @ x + np.diag(penalty + 1e-9)
        step, scale = np.linalg.solve(hess, grad), 1.0
        while scale > 1e-6 and loss(w - scale * step) > current:
            scale /= 2
        w, before = w - scale * step, current
        current = loss(w)
        if before - current < 1e-10:
            break
    return w


def correctable(correct: Sequence[bool]) -> bool:
    """Whether a correction can be fitted on these answers: some right and some wrong."""
    return any(correct) and not all(correct)


def fit_correction(confidence: Sequence[float], correct: Sequence[bool],
                   parts: Sequence[Parts | None] | None = None) -> Correction | PartsCorrection:
    """A correction fitted by maximum likelihood on right/wrong answers (the training subjects a
    run held out of finetuning, never dev or test): when every answer has its ``parts``, the
    parts weighed apart (PartsCorrection) or beta calibration of their product, whichever
    predicts the answers better under cross-validation on these same answers (CV_FOLDS folds:
    five numbers fitted on a hundred answers can fit noise, where three do not); else beta
    calibration. A weight that comes out negative is dropped and the rest refitted, as Kull et
    al. do, so the correction rises with each."""
    _check(confidence, correct)
    right = [bool(r) for r in correct]
    if not correctable(right):
        raise ValueError("a correction needs right and wrong answers among the held-out questions: "
                         f"{sum(right)} of {len(right)} are right")
    y = np.asarray(right, dtype=np.float64)
    beta = _beta_features(confidence)
    if parts is not None and len(parts) == len(right) and all(p is not None for p in parts):
        rows = [_part_features(c, p) for c, p in zip(confidence, parts)]
        weighed = np.array([[read, quote, recall, -rest, 1.0] for read, quote, recall, rest in rows])
        if cross_validated_loss(weighed, y) < cross_validated_loss(beta, y):
            return PartsCorrection(*_monotone_fit(weighed, y))
    return Correction(*_monotone_fit(beta, y))


CV_FOLDS = 5


def cross_validated_loss(features: np.ndarray, y: np.ndarray, folds: int = CV_FOLDS) -> float:
    """Mean log-loss of the monotone logistic fit of ``features`` on answers it was not fitted on:
    answer i is predicted by a fit on every answer of another fold (i mod ``folds``); a fold
    whose other answers are all right or all wrong is left out (infinite when every fold is)."""
    fold = np.arange(len(y)) % folds
    losses = []
    for k in range(folds):
        train, test = fold != k, fold == k
        if not test.any() or not correctable(list(y[train] > 0.5)):
            continue
        z = features[test] @ np.asarray(_monotone_fit(features[train], y[train]))
        losses.extend(np.logaddexp(0.0, z) - y[test] * z)
    return float(np.mean(losses)) if losses else math.inf


def _monotone_fit(features: np.ndarray, y: np.ndarray) -> list[float]:
    """Logistic weights of ``features`` (the last column the intercept), every slope >= 0: the
    most negative slope is dropped (set to 0) and the rest refitted until none is negative."""
    kept = list(range(features.shape[1]))
    while True:
        w = _logistic_fit(features[:, kept], y, ridge=1e-3)
        slopes = dict(zip(kept[:-1], w[:-1]))
        negative = [i for i, v in slopes.items() if v < 0]
        if not negative:
            break
        kept.remove(min(negative, key=lambda i: slopes[i]))
    full = dict(zip(kept, w))
    return [float(full.get(i, 0.0)) for i in range(features.shape[1])]


def kalai_score(right: Sequence[bool], given: Sequence[bool], target: float) -> float:
    """Kalai et al. (2025)'s scoring at confidence target t: +1 for a right answer, -t/(1-t) for
    a wrong one, 0 for "I don't know", summed. Guessing pays only when the answer is right with
    probability above t, so a model that abstains below t scores best."""
    if not 0 < target < 1:
        raise ValueError(f"a confidence target must lie in (0, 1), got {target}")
    penalty = target / (1 - target)
    return sum((1.0 if r else -penalty) for r, g in zip(right, given) if g)


def kalai_scores(right: Sequence[bool], given: Sequence[bool] | None = None) -> dict[str, float]:
    """``kalai_score`` at each of KALAI_TARGETS (key: the target as written, "0.75"), every
    question answered unless ``given`` says which are."""
    given = [True] * len(right) if given is None else given
    return {f"{t:g}": kalai_score(right, given, t) for t in KALAI_TARGETS}


def chance_text(span: Sequence[float], n: int) -> str:
    """What ece_by_chance's range ``span`` says, for ``n`` answers, in words."""
    return f"a calibrated confidence scores {span[0]:.3f}-{span[1]:.3f} on these {n:,} answers by chance alone"


def kalai_text(scores: dict[str, float], n: int) -> str:
    """One line: each target's score and its share of the questions."""
    return ", ".join(f"t={t}: {s:+.0f} ({s / n:+.3f}/question)" for t, s in scores.items()) if n else "no questions"


# ---------------------------------------------------------------------------------- plots


def plot_reliability(bins: list[Bin], path: str | Path, title: str) -> Path:
    """Accuracy against mean confidence per bin (bar heights), the diagonal of perfect
    calibration, and each bin's number of answers written on its bar."""
    plt = pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 5))
    width = bins[0].high - bins[0].low
    ax.bar([b.low for b in bins], [b.accuracy for b in bins], width=width, align="edge",
           edgecolor="black", color="#4c72b0", label="accuracy in bin")
    ax.plot([0, 1], [0, 1], "--", color="grey", label="perfect calibration")
    filled = [b for b in bins if b.count]
    ax.plot([b.mean_confidence for b in filled], [b.accuracy for b in filled], "o", color="#dd8452",
            label="(mean confidence, accuracy)")
    for b in bins:
        if b.count:
            ax.text(b.low + width / 2, b.accuracy + 0.01, str(b.count), ha="center", va="bottom", fontsize=7)
    return _finish(plt, fig, ax, path, title, limits=(1, 1.08), legend="upper left",
                   labels=("confidence", "accuracy (number of answers above each bar)"))


def plot_coverage(confidence: Sequence[float], correct: Sequence[bool], path: str | Path, title: str,
                  rule_point: tuple[float, float] | None = None) -> Path:
    """Accuracy of the most confident answers against the share of questions answered."""
    plt = pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    xs, ys = coverage_curve(confidence, correct)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.plot(xs, ys, color="#4c72b0", label="answer the most confident share")
    overall = sum(map(bool, correct)) / len(correct)
    ax.axhline(overall, ls="--", color="grey", label=f"answer everything ({overall:.1%})")
    for c in COVERAGES:
        right, n = accuracy_at_coverage(confidence, correct, c)
        ax.plot([n / len(confidence)], [right / n], "o", color="#dd8452")
        ax.annotate(f"{right / n:.1%}", (n / len(confidence), right / n), textcoords="offset points",
                    xytext=(4, 4), fontsize=8)
    if rule_point is not None:
        ax.plot([rule_point[0]], [rule_point[1]], "*", ms=12, color="#c44e52", label="fitted abstention rule")
    return _finish(plt, fig, ax, path, title, limits=(1.02, 1.05), legend="lower left",
                   labels=("coverage (share of questions answered)", "accuracy on answered questions"))


def _finish(plt, fig, ax, path: Path, title: str, *, limits: tuple[float, float], legend: str,
            labels: tuple[str, str]) -> Path:
    """The axes, title and legend both plots share, then the figure written atomically."""
    ax.set_xlim(0, limits[0])
    ax.set_ylim(0, limits[1])
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.set_title(title, fontsize=9)
    ax.legend(loc=legend, fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)
    return path
