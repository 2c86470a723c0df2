"""Saying "I don't know": when a model's answer is withheld, and how the rule is fitted.

Two signals, both from the model alone (it never reads the corpus at answer time):

- the answer's **confidence** (attnlab/answering/evaluate.py, attnlab/answering/knowledge.py): low when the model
  is unsure of the place;
- the **name familiarity**: the probability the model gives ``NAME.`` read as the opening of a
  corpus line (the product of its characters' probabilities; the first character has no context
  and is not scored). Pretraining reads every corpus person's line, so a name the model has read
  is one it spells out with most of a line's opening probability; an invented name ("Mariano
  Poulet", a first name and a surname of two different people) leaves the names it has read at
  some character and is spelled on against the model's expectation. The whole name's
  probability counts every such surprise; the lowest single character's probability (the
  measure of rules stored before, ``MEASURE_BEFORE``) misses a recombined name whose parts each
  open many real names. The confidence alone cannot tell: the model recalls an invented
  person's line as fluently as a real one's and reads a place out of it (docs/guides/trust.md;
  the measurements are in docs/notebook.md).

A rule answers when confidence >= ``confidence`` and familiarity >= ``familiarity`` (either may
be None: not checked), and, where it has a ``joint`` threshold, when ln(familiarity) +
logit(confidence) reaches it: the name's probability times the odds that the answer is right.
The default rule ("both") is that one joint check. Apart, each check spends its own share of
the right answers it may turn away, and a barely familiar name with a likely answer or a
familiar name with a doubtful one passes both; together the two signals are weighed in their
natural units (log-probability and log-odds) and one conformal count keeps the right answers.
Invented names pass least often that way (docs/notebook.md). ``fit_rules`` sets the thresholds
on training-file people held out from finetuning, never on dev or test labels. A rule fitted with a correction of the confidence
(``chance``: a run that records held-out people) thresholds the corrected confidence, the chance
that the answer is right, instead: a correction that weighs the confidence's parts apart ranks
right and wrong answers better than their product does (trust/calibration.py PartsCorrection).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from .calibration import (Correction, Parts, PartsCorrection, check_probability, conformal_count, correctable,
                          corrected, fit_correction)
from ..data.datasets import QAExample
from ..answering.evaluate import Answer, answer_questions
from ..data.relations import Schema
from ..data.splits import held_out_people, subject_reader
from ..data.subject_orders import DEFAULT_ORDER
from ..model.gpt import GPT
from ..data.vocab import PAD_ID, Vocab

# Familiarity threshold: keep this share of held-out (real) people. The name check is a coarse
# cut (a rare spelling is unfamiliar too), so it drops few real people and leaves the wrong
# answers to the confidence threshold; invented names still fall below it (trust/audit.py).
KNOWN_SHARE = 0.995

# How a name's familiarity is measured: "name", the probability of the whole name; "character",
# the lowest probability of one of its characters (a rule stored without a measure used it).
FAMILIARITY_MEASURES = ("name", "character")
DEFAULT_MEASURE = "name"
MEASURE_BEFORE = "character"


@dataclass(frozen=True)
class Rule:
    confidence: float | None = None  # answer only at this score or above (the confidence, or ``chance``'s)
    familiarity: float | None = None  # answer only people whose name is at least this familiar
    how: str = ""  # where the thresholds came from, in words
    chance: Correction | PartsCorrection | None = None  # threshold the corrected confidence instead
    measure: str = DEFAULT_MEASURE  # how the familiarity is measured (FAMILIARITY_MEASURES)
    joint: float | None = None  # answer only when ln(familiarity) + logit(score) reaches this

    def __post_init__(self):
        if self.measure not in FAMILIARITY_MEASURES:
            raise ValueError(f"unknown name familiarity measure {self.measure!r}; known: "
                             f"{', '.join(FAMILIARITY_MEASURES)}")

    def score(self, confidence: float, parts: Parts | None = None) -> float:
        """What ``confidence`` is compared with: the confidence, or its chance of being right."""
        return confidence if self.chance is None else self.chance.chance(confidence, parts)

    @property
    def scored(self) -> str:
        """The score's name, in words."""
        return "confidence" if self.chance is None else "chance right"

    def answers(self, confidence: float, familiarity: float | None = None, parts: Parts | None = None) -> bool:
        if self.confidence is not None and self.score(confidence, parts) < self.confidence:
            return False
        if self.familiarity is not None and (familiarity is None or familiarity < self.familiarity):
            return False
        if self.joint is not None and (familiarity is None
                                       or joint_score(familiarity, self.score(confidence, parts)) < self.joint):
            return False
        return True

    def describe(self) -> str:
        parts = []
        if self.confidence is not None:
            parts.append(f"{self.scored} < {self.confidence:.3g}")
        if self.familiarity is not None:
            of = "" if self.measure == DEFAULT_MEASURE else " (its least likely character)"
            parts.append(f"name familiarity{of} < {self.familiarity:.3g}")
        if self.joint is not None:
            parts.append(f"ln(name familiarity) + logit({self.scored}) < {self.joint:.3g}")
        text = "abstain when " + " or ".join(parts) if parts else "never abstain"
        return f"{text} ({self.how})" if self.how else text

    @property
    def needs_familiarity(self) -> bool:
        return self.familiarity is not None or self.joint is not None


# Scores are clipped this far from 0 and 1 before their log-odds are taken: an uncorrected
# confidence can round to 1, and its odds would then outweigh any name.
JOINT_CLIP = 1e-6
# Above every joint score: the threshold of a rule with no held-out right answer to keep.
JOINT_ABOVE_ALL = math.nextafter(math.log((1 - JOINT_CLIP) / JOINT_CLIP), math.inf)


def joint_score(familiarity: float, score: float) -> float:
    """ln(familiarity) + logit(score): the name's log-probability plus the answer's log-odds of
    being right (with a correction, its linear predictor); -inf for a name of probability 0."""
    if familiarity <= 0:
        return -math.inf
    p = min(max(score, JOINT_CLIP), 1 - JOINT_CLIP)
    return math.log(familiarity) + math.log(p / (1 - p))


@torch.no_grad()
def name_familiarity(model: GPT, vocab: Vocab, names: Sequence[str], batch_size: int = 256,
                     measure: str = DEFAULT_MEASURE) -> list[float]:
    """For each name, the probability the model gives ``NAME.`` (its characters after the
    first) read from the start of a line: of the whole of it ("name"), or of its least likely
    character ("character")."""
    if measure not in FAMILIARITY_MEASURES:
        raise ValueError(f"unknown name familiarity measure {measure!r}; known: {', '.join(FAMILIARITY_MEASURES)}")
    summary = torch.sum if measure == "name" else torch.min
    device = next(model.parameters()).device
    out: list[float] = []
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(names), batch_size):
            encoded = [vocab.encode(f"{n}.")[: model.config.block_size] for n in names[start:start + batch_size]]
            width = max(len(e) for e in encoded)
            idx = torch.full((len(encoded), width), PAD_ID, dtype=torch.long, device=device)
            for i, e in enumerate(encoded):  # right padding: causal positions never see it
                idx[i, : len(e)] = torch.tensor(e, device=device)
            logits, _ = model(idx)
            logp = logits[:, :-1].float().log_softmax(-1).gather(2, idx[:, 1:, None])[..., 0]
            for i, e in enumerate(encoded):
                scored = logp[i, : len(e) - 1]
                out.append(math.exp(summary(scored).item()) if len(scored) else 1.0)
    finally:
        model.train(was_training)
    return out


@dataclass(frozen=True)
class HeldOut:
    """What the model does on the held-out training people: whether each answer is right, its
    confidence, and the familiarity of each name (the material every fit reads)."""

    source: str  # "the last F of FILE", in words
    right: list[bool]
    confidence: list[float]
    familiarity: list[float]
    unit: str = "people"  # what each answer is of: "questions" for a model of several relations
    parts: list[Parts | None] | None = None  # each confidence in parts (recall answers)
    measure: str = DEFAULT_MEASURE  # how ``familiarity`` was measured
    names: list[str] | None = None  # whose familiarity it is (each question's subject)


def held_out_signals(model: GPT, vocab: Vocab, train_file: str | Path, holdout_fraction: float,
                     *, order: str = DEFAULT_ORDER, batch_size: int = 256) -> HeldOut:
    """Answer the held-out people (the last ``holdout_fraction`` of ``train_file`` in the run's
    subject ``order``, of its subjects for a model of several relations) once."""
    schema = Schema.from_list(model.config.relations)
    people = held_out_people(train_file, holdout_fraction, subject_reader(schema), order=order)
    answers = answer_questions(model, vocab, people, batch_size=batch_size)
    where = "" if order == "file" else " in hashed subject order"
    names = people_of(people, model)
    return HeldOut(f"the last {holdout_fraction:.3g} of {train_file}{where}",
                   [a.answer == e.answer for a, e in zip(answers, people)], [a.confidence for a in answers],
                   name_familiarity(model, vocab, names, batch_size), "questions" if schema.cued else "people",
                   [a.parts for a in answers], names=names)


def fit_rules(model: GPT, vocab: Vocab, train_file: str | Path, holdout_fraction: float, keep_right: float,
              *, order: str = DEFAULT_ORDER, correct: bool = False, batch_size: int = 256) -> dict[str, Rule]:
    """Rules fitted on the held-out training people (the last ``holdout_fraction`` of
    ``train_file`` in the run's subject ``order``): ``rules_from`` their answers, on the
    corrected confidence with ``correct`` (``fitted_on_held_out``)."""
    return fitted_on_held_out(model, vocab, train_file, holdout_fraction, keep_right, order=order, correct=correct,
                              batch_size=batch_size)[0]


def fitted_on_held_out(model: GPT, vocab: Vocab, train_file: str | Path, holdout_fraction: float, keep_right: float,
                       *, order: str = DEFAULT_ORDER, correct: bool = False, batch_size: int = 256
                       ) -> tuple[dict[str, Rule], Correction | PartsCorrection | None, HeldOut]:
    """The rules, the correction of the confidence (with ``correct``, for a run that held these
    people out of finetuning, when some of their answers are right and some wrong; else None)
    and the held-out answers they were fitted on, all from answering the held-out people once."""
    check_probability(keep_right, "--keep-right")
    held = held_out_signals(model, vocab, train_file, holdout_fraction, order=order, batch_size=batch_size)
    correction = fit_correction(held.confidence, held.right, held.parts) if correct and correctable(held.right) else None
    return rules_from(held, keep_right, correction), correction, held


def rules_from(held: HeldOut, keep_right: float, chance: Correction | PartsCorrection | None = None
               ) -> dict[str, Rule]:
    """Rules for the target of answering ``keep_right`` of the right answers of people like the
    held-out ones (``conformal_count`` of the held-out right answers, which promises it for new
    people rather than for these): "confidence" (a confidence threshold alone), "name" (a
    familiarity threshold alone, keeping KNOWN_SHARE of the held-out people, who are all real)
    and "both" (the highest threshold on ln(familiarity) + logit(confidence), joint_score, that
    meets the target). With ``chance`` (the correction fitted on the same people) the thresholds
    are on the corrected confidence."""
    check_probability(keep_right, "--keep-right")
    right, familiar = held.right, held.familiarity
    confidence = corrected(held.confidence, chance, held.parts)
    familiarity_min = sorted(familiar, reverse=True)[math.ceil(KNOWN_SHARE * len(familiar)) - 1]
    needed = conformal_count(sum(right), keep_right)
    source = f"fitted on {held.source}: {len(right)} held-out {held.unit}, {sum(right)} answered correctly"
    how = f"{source}; target: answer {keep_right:.0%} of new people's right answers (the {needed} most confident of those)"
    joint = [joint_score(f, c) for f, c in zip(familiar, confidence)]
    return {
        "confidence": Rule(highest_keeping(confidence, right, needed), None, how, chance),
        "name": Rule(None, familiarity_min, f"fitted on {held.source}: keeps {KNOWN_SHARE:.1%} of its "
                     f"{len(right)} held-out {held.unit} (turns away at most "
                     f"{name_check_share(held, familiarity_min):.1%} of new real names)", measure=held.measure),
        "both": Rule(None, None, f"{source}; target: answer {keep_right:.0%} of new people's right answers (the "
                     f"{needed} with the most familiar names and likeliest answers, together)", chance,
                     held.measure, joint=highest_keeping(joint, right, needed, JOINT_ABOVE_ALL)),
    }


def name_check_share(held: HeldOut, threshold: float) -> float:
    """At most the chance that a new real person's name falls below ``threshold``: (k + 1) / (n + 1)
    with k of the n held-out people below it (split conformal prediction, as for the confidence;
    each person counted once however many questions ask about them)."""
    names = held.names or list(range(len(held.familiarity)))  # unnamed: each answer its own person
    least: dict = {}
    for name, f in zip(names, held.familiarity):
        least[name] = min(f, least.get(name, f))
    return (sum(f < threshold for f in least.values()) + 1) / (len(least) + 1)


def highest_keeping(confidence: Sequence[float], eligible: Sequence[bool], needed: int,
                     above_all: float = 1.0) -> float:
    """The highest threshold under which at least ``needed`` eligible answers reach it
    (``above_all``, above any score, where there are none to keep)."""
    ranked = sorted((c for c, ok in zip(confidence, eligible) if ok), reverse=True)
    if needed == 0:
        return math.nextafter(ranked[0], math.inf) if ranked else above_all
    return ranked[needed - 1]


def decide(model: GPT, vocab: Vocab, rule: Rule, names: Sequence[str], answers: Sequence[Answer],
           batch_size: int = 256) -> list[bool]:
    """Whether each answer (its confidence and parts) is given (True) or withheld (False) under the rule."""
    familiar = (name_familiarity(model, vocab, names, batch_size, rule.measure) if rule.needs_familiarity
                else [None] * len(names))
    return [rule.answers(a.confidence, f, a.parts) for a, f in zip(answers, familiar)]


def decide_answers(model: GPT, vocab: Vocab, rule: Rule, answers: Sequence[Answer], batch_size: int = 256
                   ) -> list[bool]:
    """``decide`` for answers that carry their questions: each one's name is read from its
    question, and only when the rule checks names."""
    asked = [QAExample(a.question, None, "<question>", i + 1) for i, a in enumerate(answers)]
    names = people_of(asked, model) if rule.needs_familiarity else [""] * len(answers)
    return decide(model, vocab, rule, names, answers, batch_size)


def people_of(examples: Sequence[QAExample], model: GPT | None = None) -> list[str]:
    """Who each question asks about, by the relations of ``model``'s fact set (else the course's
    one question); a question no relation matches stands for itself."""
    schema = Schema.from_list(model.config.relations) if model is not None else Schema()
    return [asked.subject if (asked := schema.parse(e.question)) else e.question.strip() for e in examples]
