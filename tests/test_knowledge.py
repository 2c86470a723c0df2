"""The knowledge module: who a question is about, the corpus index, the recall format and the
stored metric on a hand-made corpus."""

from __future__ import annotations

import pytest
import torch

from attnlab.config.settings import ModelConfig
from attnlab.data.datasets import DataError, QAExample
from attnlab.answering.knowledge import (
    CorpusIndex, answer_by_recall, measure_stored, person_of, recall_string, require_person, stored_probes
)
from attnlab.model.gpt import GPT
from attnlab.data.vocab import MASK_CHAR, Vocab
from tests.tiny_runs import memorise

LINES = [
    "Ada Brook. Ada Brook was born in Paris and lived there.",
    "John F. Kennedy. Kennedy was born in Brookline.",
    "Cato Fenn. A painter from Oslo.",
    "Dara Vell. Dara Vell was a singer.",
    "Ada Brook. A second line about another Ada Brook, born in Rome.",
]


def _qa(name: str, place: str) -> QAExample:
    return QAExample(f"Where was {name} born?", place, "dev.tsv", 1)


def test_person_of_reads_the_experiment_question_form():
    assert person_of("Where was John F. Kennedy born?") == "John F. Kennedy"
    assert person_of("  Where was Ada born?  ") == "Ada"
    assert person_of("Who was Ada?") is None
    with pytest.raises(DataError, match=r"dev.tsv:1: the question 'Who was Ada\?' matches no relation"):
        require_person(QAExample("Who was Ada?", "Paris", "dev.tsv", 1))


def test_corpus_index_finds_names_with_full_stops_and_keeps_the_first_line():
    index = CorpusIndex(LINES)
    assert index.line_of("John F. Kennedy") == LINES[1]
    assert index.line_number("John F. Kennedy") == 2
    assert index.line_of("Ada Brook") == LINES[0]  # the first of two lines wins
    assert index.line_of("Nobody") is None and index.line_number("Nobody") is None


def test_recall_string_cuts_the_line_and_appends_the_place():
    line = LINES[0]
    assert recall_string(line, 10) == line[:10] + MASK_CHAR
    assert recall_string(line, 10, "Paris") == line[:10] + MASK_CHAR + "Paris" + MASK_CHAR
    assert recall_string("short.", 100, "X") == "short." + MASK_CHAR + "X" + MASK_CHAR


def test_stored_probes_are_the_line_prefixes_up_to_places_written_in_the_line():
    index = CorpusIndex(LINES)
    examples = [_qa("Ada Brook", "Paris"), _qa("John F. Kennedy", "Brookline"),
                _qa("Cato Fenn", "Oslo"), _qa("Dara Vell", "Lima"), _qa("Nobody", "Paris")]
    probes = stored_probes(index, examples, block_size=128)
    assert probes == [
        ("Ada Brook. Ada Brook was born in ", "Paris"),
        ("John F. Kennedy. Kennedy was born in ", "Brookline"),
        ("Cato Fenn. A painter from ", "Oslo"),
    ]  # Dara Vell's line has no Lima; Nobody has no line
    # A place that ends beyond the block cannot be completed by the model: not a probe.
    assert stored_probes(index, examples[:1], block_size=20) == []


def _model(vocab: Vocab) -> GPT:
    torch.manual_seed(0)
    return GPT(ModelConfig(vocab_size=len(vocab), block_size=80, n_layer=2, n_head=2, n_embd=48, dropout=0.0))


def test_stored_counts_what_a_model_memorised_and_nothing_before():
    index = CorpusIndex(LINES)
    vocab = Vocab.from_text("\n".join(LINES) + "Lima")
    examples = [_qa("Ada Brook", "Paris"), _qa("John F. Kennedy", "Brookline"), _qa("Cato Fenn", "Oslo")]
    model = _model(vocab)
    before = measure_stored(model, vocab, index, examples)
    assert (before.stored, before.total, before.asked) == (0, 3, 3)
    memorise(model, vocab, LINES[:3], steps=300)
    after = measure_stored(model, vocab, index, examples)
    assert (after.stored, after.total) == (3, 3)
    assert str(after) == "3/3 (100.0%)"


def test_answer_by_recall_recalls_the_line_then_reads_the_place():
    lines = [f"{n}. {n} was born in {p}." for n, p in
             [("Ada Brook", "Paris"), ("Bela Kron", "Lima"), ("Cato Fenn", "Oslo")]]
    places = ["Paris", "Lima", "Oslo"]
    vocab = Vocab.from_text("\n".join(lines))
    model = _model(vocab)
    # Recall format: line cut at 60 characters, ⁇, place, ⁇.
    memorise(model, vocab, [recall_string(l, 60, p) for l, p in zip(lines, places)], steps=300)
    answers = answer_by_recall(model, vocab, ["Ada Brook", "Bela Kron", "Cato Fenn"], recall_chars=60)
    assert [a.answer for a in answers] == places
    assert [a.recalled for a in answers] == lines
    assert all(a.complete and 0.5 < a.confidence <= 1.0 for a in answers)
