"""The order in which a run takes the people of its training file (``TrainConfig.subject_order``),
and what a run records of how it split them (the order, the share held out), without importing
torch: the configs and the command line's --help read the names here, and
data/splits.py cuts every split in this order.

``file`` takes the people in the training file's order (the last held out of finetuning, the
first mixed into pretraining); ``hashed`` in an order fixed by a hash of each subject, the same
whatever order the file lists them in. A file sorted by answer or by relation (an export of a
table) then gives a sample of its subjects where ``file`` gives a slice (the towns of the last
countries held out, those of the first teaching the answer format), which teaches and calibrates
on subjects unlike the rest. ``attnlab learn`` uses ``hashed``; runs that record no order were
trained with ``file``.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    from .datasets import QAExample

SUBJECT_ORDERS = ("file", "hashed")
DEFAULT_ORDER = "file"  # what a run that records no order was trained with


def in_order(examples: Sequence[QAExample], subject_of: Callable[[QAExample], str] | None,
             order: str) -> list[QAExample]:
    """``examples`` with their people in ``order``: as the file lists them, or by a hash of each
    subject (``subject_of``; of each question when None, one question a person), a subject's
    questions kept together and in the file's order."""
    if order == "file":
        return list(examples)
    if order != "hashed":
        raise ValueError(f"subject_order must be one of {', '.join(SUBJECT_ORDERS)}, got {order!r}")
    key = subject_of or (lambda e: e.question)
    return sorted(examples, key=lambda e: hashlib.blake2b(key(e).encode("utf-8"), digest_size=8).digest())


def recorded_order(meta: dict) -> str:
    """The subject order a run's metadata records training with (DEFAULT_ORDER when none)."""
    return (meta.get("train_config") or {}).get("subject_order") or DEFAULT_ORDER


def recorded_holdout(meta: dict) -> float:
    """The share of its training file a run's metadata records holding out from finetuning, in
    that order (0: none)."""
    return float((meta.get("train_config") or {}).get("holdout_fraction") or 0.0)
