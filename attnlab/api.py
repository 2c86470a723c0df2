"""The Python API: ``attnlab.load(path)`` gives a trained model ready to answer.

    model = attnlab.load("runs/finetune-vanilla")      # a run directory or a checkpoint file
    model.ask(["Where was Ada Lovelace born?"])        # [Answer(question, answer, confidence, ...)]

Answers come from the same code as ``attnlab ask`` and ``attnlab evaluate``
(``evaluate.answer_questions``), in the model's own answer format: ``direct``, or ``recall``
(attnlab/knowledge.py), where each answer also carries what the model recalled of the person.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable

import torch

from .checkpoint import Checkpoint, load_checkpoint
from .config import ModelConfig, TrainConfig
from .data import DataError, QAExample
from .devices import resolve_device
from .evaluate import Answer, answer_questions
from .model import GPT
from .vocab import Vocab


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
            first_line: int = 1) -> list[Answer]:
        """Greedy answers, in order, each with its confidence (``Answer.confidence``: the
        probability of the answer and its closing mark) and, for a recall model, what it
        recalled. A bad question raises an error naming ``source`` and its line: VocabError
        for an unknown character, DataError when a recall model is not asked "Where was NAME
        born?"."""
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
            return answer_questions(self.gpt, self.vocab, examples, batch_size=batch_size)


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
    from .datafiles import resolve as found  # models/NAME from any directory, as on the command line

    checkpoint = load_checkpoint(found(path), training_state=False)  # answering needs no optimiser state
    gpt = checkpoint.build_model(**overrides).to(resolve_device(device))
    gpt.eval()
    return LoadedModel(gpt, checkpoint.vocab, checkpoint)
