"""Splits of the training file by person: the last ``fraction`` of its people may be held out
of finetuning (``--holdout-fraction``), so that quantities fitted on them (the abstention
threshold, trust/abstention.py) see labels the model never trained on. Training keeps the
rest (training/pipeline.py); both read the split here."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from .datasets import QAExample, read_qa


def held_out_people(train_file: str | Path, fraction: float,
                    subject_of: Callable[[QAExample], str] | None = None) -> list[QAExample]:
    """The last ``fraction`` of a labelled training file: the people a run may hold out from
    finetuning (``finetune --holdout-fraction``) so that fitted quantities see unseen labels.
    With ``subject_of`` (a fact set of several relations) the last ``fraction`` of its subjects,
    in order of first appearance, with every question about them."""
    if not 0 < fraction < 1:
        raise ValueError(f"--holdout-fraction must lie in (0, 1), got {fraction}")
    return _split(read_qa(train_file, labelled=True), fraction, subject_of)[1]


def finetuning_people(examples: list[QAExample], fraction: float,
                      subject_of: Callable[[QAExample], str] | None = None) -> list[QAExample]:
    """The training examples left for finetuning when the last ``fraction`` is held out."""
    if fraction == 0:
        return examples
    if not 0 < fraction < 1:
        raise ValueError(f"holdout_fraction must lie in [0, 1), got {fraction}")
    return _split(examples, fraction, subject_of)[0]


def _split(examples: list[QAExample], fraction: float, subject_of: Callable[[QAExample], str] | None
           ) -> tuple[list[QAExample], list[QAExample]]:
    """(kept, held out): the held-out tail is cut by lines, or by subjects with ``subject_of``, so
    that no subject is both trained on and held out."""
    if subject_of is None:
        cut = len(examples) - math.ceil(fraction * len(examples))
        return examples[:cut], examples[cut:]
    subjects = list(dict.fromkeys(subject_of(e) for e in examples))
    held = set(subjects[len(subjects) - math.ceil(fraction * len(subjects)):])
    return [e for e in examples if subject_of(e) not in held], [e for e in examples if subject_of(e) in held]


def mixed_and_other_people(examples: list[QAExample], fraction: float, mix_people: int,
                           subject_of: Callable[[QAExample], str] | None = None
                           ) -> tuple[list[QAExample], list[QAExample]]:
    """A --mix-people recipe's split of the training file, the one place both its stages read:
    the first ``mix_people`` people (every one when 0), whose lines pretraining keeps with
    their place and whom finetuning trains on, and the others (whose lines pretraining leaves
    out). The held-out tail (``fraction``) is in neither. With ``subject_of`` (a fact set of
    several relations) people are subjects: the first ``mix_people`` subjects to appear, with
    every question about them."""
    people = finetuning_people(examples, fraction, subject_of)
    if subject_of is None:
        n = mix_people or len(people)
        return people[:n], people[n:]
    subjects = list(dict.fromkeys(subject_of(e) for e in people))
    chosen = set(subjects[:mix_people or len(subjects)])
    return [e for e in people if subject_of(e) in chosen], [e for e in people if subject_of(e) not in chosen]
