"""Splits of the training file by person: the last ``fraction`` of its people may be held out
of finetuning (``--holdout-fraction``), so that quantities fitted on them (the abstention
threshold, trust/abstention.py) see labels the model never trained on. Training keeps the
rest (training/pipeline.py); both read the split here."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from .datasets import QAExample, read_qa


def held_out_people(train_file: str | Path, fraction: float) -> list[QAExample]:
    """The last ``fraction`` of a labelled training file: the people a run may hold out from
    finetuning (``finetune --holdout-fraction``) so that fitted quantities see unseen labels."""
    if not 0 < fraction < 1:
        raise ValueError(f"--holdout-fraction must lie in (0, 1), got {fraction}")
    examples = read_qa(train_file, labelled=True)
    return examples[len(examples) - math.ceil(fraction * len(examples)):]


def finetuning_people(examples: list[QAExample], fraction: float) -> list[QAExample]:
    """The training examples left for finetuning when the last ``fraction`` is held out."""
    if fraction == 0:
        return examples
    if not 0 < fraction < 1:
        raise ValueError(f"holdout_fraction must lie in [0, 1), got {fraction}")
    return examples[: len(examples) - math.ceil(fraction * len(examples))]


def mixed_and_other_people(examples: list[QAExample], fraction: float, mix_people: int,
                           subject_of: Callable[[QAExample], str] | None = None
                           ) -> tuple[list[QAExample], list[QAExample]]:
    """A --mix-people recipe's split of the training file, the one place both its stages read:
    the first ``mix_people`` people (every one when 0), whose lines pretraining keeps with
    their place and whom finetuning trains on, and the others (whose lines pretraining leaves
    out). The held-out tail (``fraction``) is in neither. With ``subject_of`` (a fact set of
    several relations) people are subjects: the first ``mix_people`` subjects to appear, with
    every question about them."""
    people = finetuning_people(examples, fraction)
    if subject_of is None:
        n = mix_people or len(people)
        return people[:n], people[n:]
    subjects = list(dict.fromkeys(subject_of(e) for e in people))
    chosen = set(subjects[:mix_people or len(subjects)])
    return [e for e in people if subject_of(e) in chosen], [e for e in people if subject_of(e) not in chosen]
