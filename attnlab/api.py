"""The Python API: ``attnlab.load(path)`` gives a trained model ready to answer.

    model = attnlab.load("runs/finetune-vanilla")      # a run directory or a checkpoint file
    model.ask(["Where was Ada Lovelace born?"])        # [Answer(question, answer, confidence, ...)]

Answers come from the same code as ``attnlab ask`` and ``attnlab evaluate``
(``evaluate.answer_questions``), in the model's own answer format: ``direct``, or ``recall``
(attnlab/answering/knowledge.py), where each answer also carries what the model recalled of the person.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Iterable

import torch

from .model.checkpoint import Checkpoint, load_model
from .config.settings import DEFAULT_TRAIN, ModelConfig, TrainConfig
from .data.datasets import DataError, QAExample
from .answering.evaluate import Answer, answer_questions
from .trust.abstention import DEFAULT_HOLDOUT, DEFAULT_KEEP_RIGHT, Rule, decide, fit_rules, people_of
from .model.gpt import GPT
from .data.vocab import Vocab


@dataclass
class LoadedModel:
    """A trained GPT with what answering needs: its vocabulary and its configs."""

    gpt: GPT
    vocab: Vocab
    checkpoint: Checkpoint  # weights, configs and training metadata as stored

    @property
    def config(self) -> ModelConfig:
        return self.gpt.config

    @property
    def train_config(self) -> TrainConfig | None:
        """The configuration of the run that wrote the checkpoint (None if it recorded none)."""
        stored = self.checkpoint.meta.get("train_config")
        return None if stored is None else TrainConfig.from_dict(stored)

    @property
    def device(self) -> torch.device:
        return next(self.gpt.parameters()).device

    def ask(self, questions: Iterable[str] | str, *, batch_size: int = 256, source: str = "<ask>",
            first_line: int = 1, abstain: Rule | None = None) -> list[Answer]:
        """Greedy answers, in order, each with its confidence (``Answer.confidence``: the
        probability of the answer and its closing mark) and, for a recall model, what it
        recalled. A bad question raises an error naming ``source`` and its line: VocabError
        for an unknown character, DataError when a recall model is not asked "Where was NAME
        born?".

        ``abstain``: a ``Rule`` (``attnlab.trust.abstention``) under which an answer may be
        withheld, as ``attnlab ask --abstain`` does: ``Rule(confidence=0.8)`` or
        ``model.abstention_rule()``; a withheld answer comes back with ``answer`` "" and
        ``withheld`` holding what the model would have said."""
        if isinstance(questions, str):
            questions = [questions]
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        questions = list(questions) if isinstance(questions, Iterable) and not isinstance(questions, bytes) else None
        if questions is None:
            raise TypeError("ask takes a question (str) or a list of them")
        for i, q in enumerate(questions):
            _check_question(q, source, first_line + i)
        examples = [QAExample(q.strip(), None, source, first_line + i) for i, q in enumerate(questions)]
        with torch.no_grad():
            answers = answer_questions(self.gpt, self.vocab, examples, batch_size=batch_size)
        return answers if abstain is None else self._withhold(answers, examples, abstain, batch_size)

    def _withhold(self, answers: list[Answer], examples: list[QAExample], rule: Rule, batch_size: int) -> list[Answer]:
        """The answers with those the rule withholds emptied (``withheld`` keeps them)."""
        names = people_of(examples) if rule.needs_familiarity else [""] * len(examples)
        given = decide(self.gpt, self.vocab, rule, names, [a.confidence for a in answers], batch_size)
        return [a if ok else replace(a, answer="", withheld=a.answer) for a, ok in zip(answers, given)]

    def abstention_rule(self, train_file: str | os.PathLike | None = None, *, holdout_fraction: float | None = None,
                        keep_right: float = DEFAULT_KEEP_RIGHT, kind: str = "both") -> Rule:
        """The rule ``ask --abstain auto`` fits, for ``ask(..., abstain=rule)``: thresholds on
        the name's familiarity and the answer's confidence ("both"; "name" or "confidence"
        alone), fitted on the last ``holdout_fraction`` of ``train_file`` (default: the
        course's training file, and the share the run recorded holding out, else 0.1) so that
        ``keep_right`` of the people it answers correctly are still answered.
        ``Rule(confidence=0.8)`` is ``--abstain-below 0.8``."""
        recorded = float((self.checkpoint.meta.get("train_config") or {}).get("holdout_fraction") or 0.0)
        fraction = holdout_fraction or recorded or DEFAULT_HOLDOUT
        return fit_rules(self.gpt, self.vocab, train_file or DEFAULT_TRAIN, fraction, keep_right)[kind]


def _check_question(question: Any, source: str, line: int) -> None:
    """A question is a non-empty line of text (DataError naming ``source`` and its line)."""
    if not isinstance(question, str):
        raise TypeError(f"{source}:{line}: a question must be a str, got {type(question).__name__}")
    if not question.strip():
        raise DataError(source, line, "empty question")
    if "\n" in question.strip() or "\r" in question.strip():
        raise DataError(source, line, "a question is one line; this one holds a line break")


def load(path: str | os.PathLike, device: str = "auto", **overrides: Any) -> LoadedModel:
    """The model of a run directory or checkpoint file, in eval mode on ``device`` (cpu, cuda or
    auto). ``overrides`` change config fields that add no parameters (e.g. attention="argmax")."""
    from .core.datafiles import resolve as found  # models/NAME from any directory, as on the command line

    return LoadedModel(*load_model(found(path), device, **overrides))
