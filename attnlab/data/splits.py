"""Splits of the training file by person: a ``fraction`` of its people may be held out of
finetuning (``--holdout-fraction``), so that quantities fitted on them (the abstention
threshold, trust/abstention.py) see labels the model never trained on, and a recipe may mix only
its first people into pretraining (``--mix-people``). Training keeps the rest
(training/pipeline.py); every stage reads the split here, in the run's subject order
(data/subject_orders.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from .datasets import QAExample, read_qa
from .relations import Schema
from .subject_orders import DEFAULT_ORDER, in_order

SubjectOf = Callable[[QAExample], str] | None


def subject_reader(schema: Schema) -> SubjectOf:
    """For a fact set of several relations, who a training question is about (a recipe counts
    subjects, each with all its questions); None for one relation (one question a person: the
    file's lines are its people)."""
    return (lambda e: schema.require(e).subject) if schema.cued else None


def held_out_people(train_file: str | Path, fraction: float, subject_of: SubjectOf = None, *,
                    order: str = DEFAULT_ORDER) -> list[QAExample]:
    """The held-out ``fraction`` of a labelled training file (the last of its people in
    ``order``): the people a run may hold out from finetuning (``finetune --holdout-fraction``)
    so that fitted quantities see unseen labels. With ``subject_of`` (a fact set of several
    relations) a fraction of its subjects, with every question about them."""
    if not 0 < fraction < 1:
        raise ValueError(f"--holdout-fraction must lie in (0, 1), got {fraction}")
    return _split(read_qa(train_file, labelled=True), fraction, subject_of, order)[1]


def finetuning_people(examples: list[QAExample], fraction: float, subject_of: SubjectOf = None, *,
                      order: str = DEFAULT_ORDER) -> list[QAExample]:
    """The training examples left for finetuning when ``fraction`` is held out, in ``order``."""
    if fraction == 0:
        return in_order(examples, subject_of, order)
    if not 0 < fraction < 1:
        raise ValueError(f"holdout_fraction must lie in [0, 1), got {fraction}")
    return _split(examples, fraction, subject_of, order)[0]


def _split(examples: list[QAExample], fraction: float, subject_of: SubjectOf, order: str
           ) -> tuple[list[QAExample], list[QAExample]]:
    """(kept, held out), both in ``order``: the held-out tail is cut by lines, or by subjects with
    ``subject_of``, so that no subject is both trained on and held out."""
    examples = in_order(examples, subject_of, order)
    if subject_of is None:
        cut = len(examples) - math.ceil(fraction * len(examples))
        return examples[:cut], examples[cut:]
    subjects = list(dict.fromkeys(subject_of(e) for e in examples))
    held = set(subjects[len(subjects) - math.ceil(fraction * len(subjects)):])
    return [e for e in examples if subject_of(e) not in held], [e for e in examples if subject_of(e) in held]


def mixed_and_other_people(examples: list[QAExample], fraction: float, mix_people: int,
                           subject_of: SubjectOf = None, *, order: str = DEFAULT_ORDER
                           ) -> tuple[list[QAExample], list[QAExample]]:
    """A --mix-people recipe's split of the training file, the one place both its stages read:
    the first ``mix_people`` people in ``order`` (every one when 0), whose lines pretraining keeps
    with their place and whom finetuning trains on, and the others (whose lines pretraining
    leaves out), both in that order. The held-out people (``fraction``) are in neither. With
    ``subject_of`` (a fact set of several relations) people are subjects, with every question
    about them."""
    people = finetuning_people(examples, fraction, subject_of, order=order)
    if subject_of is None:
        n = mix_people or len(people)
        return people[:n], people[n:]
    subjects = list(dict.fromkeys(subject_of(e) for e in people))
    chosen = set(subjects[:mix_people or len(subjects)])
    return [e for e in people if subject_of(e) in chosen], [e for e in people if subject_of(e) not in chosen]
