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


@pytest.mark.parametrize("gold, answer, kind", [
    ("Paris", "France", 0),  # the line says "Paris, France", labelled Paris, answered France
    ("France", "Paris", 1),  # labelled France, answered Paris
    ("Paris", "Ann", 2),  # a span that is not the label's neighbour
    ("Paris", "", 2),  # nothing read
])
def test_read_out_errors_are_split_by_the_comma_pair(knowledge, gold, answer, kind):
    assert knowledge.read_out_kind(gold, answer, LINE, LINE.find(gold)) == knowledge.READ_OUT_KINDS[kind]


def test_label_convention_counts_which_place_of_a_comma_pair_the_labels_name(knowledge, tmp_path):
    corpus = ("Ann Lee. Ann Lee was born in Paris, France.\n"
              "Bo Ray. Bo Ray was born in Lyon, France.\n"
              "Cy Dee. Cy Dee was born in Oslo, Norway.\n"
              "Di Eng. Di Eng was born in Rome.\n")
    train = tmp_path / "train.tsv"
    train.write_text("Where was Ann Lee born?\tParis\nWhere was Bo Ray born?\tFrance\n"
                     "Where was Cy Dee born?\tOslo\nWhere was Di Eng born?\tRome\n")
    index = knowledge.CorpusIndex(knowledge.documents(corpus))
    assert knowledge.label_convention(str(train), index) == (2, 1)  # Di Eng's "Rome." is no pair
