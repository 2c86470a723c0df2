"""Evaluation (SPEC section 6): batched greedy answers, exact-match accuracy, the
most-frequent-place baseline, prediction files, and a confidence for every answer.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from ..data.datasets import QAExample
from ..data.relations import Schema
from ..data.vocab import Vocab
from ..model.generate import Draft
from ..model.gpt import GPT
from .formats import MAX_NEW_CHARS, Answer, answer_format, extract_answer  # noqa: F401 (their home was here)


@dataclass(frozen=True)
class Score:
    correct: int
    total: int

    @property
    def percent(self) -> float:
        return 100.0 * self.correct / self.total if self.total else 0.0

    def __str__(self) -> str:
        return f"{self.correct}/{self.total} ({self.percent:.1f}%)"

    @property
    def interval(self) -> tuple[float, float]:
        """95% Wilson score interval of the accuracy, as fractions."""
        return wilson_interval(self.correct, self.total)

    def with_interval(self) -> str:
        low, high = self.interval
        return f"{self} [95% CI {100 * low:.1f}-{100 * high:.1f}%]"


def wilson_interval(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (Wilson 1927); unlike the normal
    approximation it stays inside [0, 1] and is sensible at k = 0 or k = n. z: 95% by default."""
    if n <= 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def answer_questions(
    model: GPT,
    vocab: Vocab,
    examples: list[QAExample],
    *,
    batch_size: int = 256,
    max_new: int | None = None,
    use_cache: bool = True,
    progress: bool = False,
    strict: bool = True,
    draft: Draft | None = None,
) -> list[Answer]:
    """Greedy answers for every question, in input order, in the model's answer format
    (``qa_format``, attnlab/answering/formats.py). Questions are batched by length so little
    padding is decoded; a row stops at its closing MASK. The answer budget is the model's
    ``answer_chars`` unless ``max_new`` is given; with ``strict=False`` a question no relation
    matches gets an empty answer stating its problem instead of an error. ``draft`` speeds a
    recall model's recall up (answering/drafts.py) without changing what it recalls."""
    return answer_format(model.config.qa_format).answer(model, vocab, examples, batch_size=batch_size,
                                                        max_new=max_new, use_cache=use_cache, progress=progress,
                                                        strict=strict, draft=draft)


def score(predictions: list[str], examples: list[QAExample]) -> Score | None:
    """Exact-match accuracy, or None when the examples have no labels."""
    if any(e.answer is None for e in examples):
        return None
    return Score(sum(p == e.answer for p, e in zip(predictions, examples)), len(examples))


def score_by_relation(predictions: list[str], examples: list[QAExample], schema: Schema) -> dict[str, Score]:
    """Exact-match accuracy of each relation's questions (labelled examples only), in the
    schema's order; relations with no question are left out."""
    groups: dict[str, list[int]] = {name: [] for name in schema.names}
    for i, e in enumerate(examples):
        asked = schema.parse(e.question, bare_subject=False)
        if asked is not None and e.answer is not None:
            groups[asked.relation.name].append(i)
    return {name: Score(sum(predictions[i] == examples[i].answer for i in rows), len(rows))
            for name, rows in groups.items() if rows}


def most_frequent_by_relation(train: list[QAExample], schema: Schema) -> dict[str, str]:
    """Each relation's most frequent training answer (its baseline)."""
    out = {}
    for name in schema.names:
        mine = [e for e in train if (a := schema.parse(e.question, bare_subject=False)) and a.relation.name == name]
        if mine:
            out[name] = most_frequent_place(mine)
    return out


def baseline_answers(train: list[QAExample], examples: list[QAExample], schema: Schema
                     ) -> tuple[dict[str, str], list[str]]:
    """Each relation's most frequent training answer, and the baseline's answer to each of
    ``examples``: its relation's ("" for a question no relation matches)."""
    common = most_frequent_by_relation(train, schema)
    asked = [schema.parse(e.question, bare_subject=False) for e in examples]
    return common, [common.get(a.relation.name, "") if a else "" for a in asked]


def most_frequent_place(train: list[QAExample]) -> str:
    """The most common place in a training file (ties: the first to appear)."""
    places = [e.answer for e in train if e.answer is not None]
    if not places:
        raise ValueError("the training file has no labelled examples")
    return Counter(places).most_common(1)[0][0]


def write_predictions(path: str | os.PathLike, predictions: list[str], *, overwrite: bool = True) -> Path:
    """One answer per line in input order, written atomically: a failed write (a full disk)
    leaves the earlier predictions as they were and no temporary file (paths.py); without
    ``overwrite`` an existing file is kept and refused (outputs.write_new)."""
    from ..core.outputs import write_output

    return write_output(path, predictions_text(predictions), overwrite)


def predictions_text(predictions: list[str]) -> str:
    """A predictions file's text: one answer a line, in input order."""
    return "".join(p.replace("\n", " ") + "\n" for p in predictions)


@torch.no_grad()
def evaluate(
    model: GPT, vocab: Vocab, examples: list[QAExample], *, batch_size: int = 256,
    use_cache: bool = True, progress: bool = False,
) -> tuple[list[Answer], Score | None]:
    answers = answer_questions(model, vocab, examples, batch_size=batch_size, use_cache=use_cache,
                               progress=progress)
    return answers, score([a.answer for a in answers], examples)
