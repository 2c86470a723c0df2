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

from ..core.progress import progress_bar
from ..data.datasets import DataError, QAExample
from ..model.generate import generate
from .knowledge import answer_by_recall, require_person
from ..model.gpt import GPT
from ..core.paths import write_atomically
from ..data.vocab import MASK_CHAR, MASK_ID, Vocab

MAX_NEW_CHARS = 32


@dataclass(frozen=True)
class Answer:
    question: str
    answer: str
    confidence: float  # probability of the whole greedy completion up to the closing MASK
    complete: bool  # the model closed its answer with MASK within the budget
    recalled: str | None = None  # recall format: what the model wrote of the person first
    withheld: str | None = None  # an abstaining ask: the answer it withheld (answer is then "")


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


def extract_answer(completion: str) -> str:
    """The text between the first and second MASK of a completion (SPEC 6)."""
    parts = completion.split(MASK_CHAR)
    return parts[1] if len(parts) > 1 else ""


def answer_questions(
    model: GPT,
    vocab: Vocab,
    examples: list[QAExample],
    *,
    batch_size: int = 256,
    max_new: int = MAX_NEW_CHARS,
    use_cache: bool = True,
    progress: bool = False,
) -> list[Answer]:
    """Greedy answers for every question, in input order, in the model's answer format
    (``qa_format``). Questions are batched by length so little padding is decoded; a row stops
    at its closing MASK."""
    if model.config.qa_format == "recall":
        return _answers_by_recall(model, vocab, examples, batch_size, max_new)
    prompts = [vocab.encode(e.question + MASK_CHAR, source=e.source, line=e.line) for e in examples]
    for e, prompt in zip(examples, prompts):
        if len(prompt) > model.config.block_size:  # a question the model cannot even read
            raise DataError(e.source, e.line, f"the question and its mark are {len(prompt)} characters, "
                            f"more than the model's block_size {model.config.block_size}")
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    answers: list[Answer | None] = [None] * len(prompts)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    for chunk in progress_bar(batches, desc="answering", disable=not progress, leave=False):
        gen = generate(model, [prompts[i] for i in chunk], max_new, stop_token=MASK_ID, use_cache=use_cache)
        for i, toks, lps in zip(chunk, gen.tokens, gen.logprobs):
            complete = bool(toks) and toks[-1] == MASK_ID
            text = extract_answer(examples[i].question + MASK_CHAR + vocab.decode(toks))
            answers[i] = Answer(examples[i].question, text, math.exp(sum(lps)), complete)
    return answers  # type: ignore[return-value]


def _answers_by_recall(model: GPT, vocab: Vocab, examples: list[QAExample], batch_size: int,
                       max_new: int) -> list[Answer]:
    names = [require_person(e) for e in examples]
    for name, e in zip(names, examples):
        vocab.encode(name, source=e.source, line=e.line)  # a clear error for an unknown character
    recalled = answer_by_recall(model, vocab, names, model.config.recall_chars,
                                batch_size=batch_size, max_answer_chars=max_new)
    return [Answer(e.question, r.answer, r.confidence, r.complete, r.recalled)
            for e, r in zip(examples, recalled)]


def score(predictions: list[str], examples: list[QAExample]) -> Score | None:
    """Exact-match accuracy, or None when the examples have no labels."""
    if any(e.answer is None for e in examples):
        return None
    return Score(sum(p == e.answer for p, e in zip(predictions, examples)), len(examples))


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

    return write_output(path, "".join(p.replace("\n", " ") + "\n" for p in predictions), overwrite)


@torch.no_grad()
def evaluate(
    model: GPT, vocab: Vocab, examples: list[QAExample], *, batch_size: int = 256,
    use_cache: bool = True, progress: bool = False,
) -> tuple[list[Answer], Score | None]:
    answers = answer_questions(model, vocab, examples, batch_size=batch_size, use_cache=use_cache,
                               progress=progress)
    return answers, score([a.answer for a in answers], examples)
