"""benchmarks/knowledge.py's error breakdown: each wrong recall answer is put in the one kind
that explains it (the figures in docs/guides/knowledge.md come from it)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from attnlab.answering.knowledge import RecallAnswer

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def knowledge():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("knowledge")
    finally:
        sys.path.remove(str(BENCHMARKS))


LINE = "Ann Lee. Ann Lee was born in Paris, France, and later lived in a very long street name."


@pytest.mark.parametrize("answer, recalled, recall_chars, gold, kind", [
    ("Paris", LINE, 60, "Paris", 0),
    ("London", LINE, 60, "Rome", 1),  # Rome is not in the line
    ("Paris", LINE, 30, "France", 2),  # France ends after the 30 recalled characters
    ("France", LINE, 60, "Paris", 3),  # the line was recalled exactly; the wrong place was read
    ("Lyon", "Ann Lee. Ann Lee was born in Lyon.", 60, "Paris", 4),  # the recall itself went wrong
])
def test_each_answer_gets_the_kind_that_explains_it(knowledge, answer, recalled, recall_chars, gold, kind):
    got = RecallAnswer(answer, 0.5, True, recalled)
    assert knowledge._error_kind(gold, got, LINE, len("Ann Lee."), recall_chars) == knowledge.ERROR_KINDS[kind]
