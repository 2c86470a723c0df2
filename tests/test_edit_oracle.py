"""benchmarks/edit_oracle.py's bookkeeping (issue 49, item 1): the edited fact set it writes, and
a whole run on a tiny set with a seconds-long trainer that memorises the set it is given (so the
oracle really holds the new answers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnlab.config.settings import ModelConfig
from attnlab.data import factset as factsets
from attnlab.data.corpus import recall_string
from attnlab.data.datasets import read_qa, read_text
from attnlab.data.vocab import Vocab
from attnlab.model.checkpoint import save_checkpoint
from attnlab.model.gpt import GPT
from tests.conftest import benchmark_fixture
from tests.tiny_runs import memorise

oracle = benchmark_fixture("edit_oracle")
TOWNS = ["Paris", "Lima", "Oslo", "Rome", "Kyiv", "Bern"]
PEOPLE = [f"{first} {last}" for first, last in zip(
    ["Ada", "Bela", "Cato", "Dara", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea"],
    ["Brook", "Kron", "Fenn", "Vell", "Marsh", "Dunn", "Pell", "Roe", "Lind", "Sato", "Odell", "Quist"])]


@pytest.fixture()
def tiny_set(tmp_path) -> Path:
    root = tmp_path / "set"
    root.mkdir()
    born = {p: TOWNS[i % len(TOWNS)] for i, p in enumerate(PEOPLE)}
    (root / "corpus.txt").write_text("\n".join(f"{p}. {p} was born in {born[p]}." for p in PEOPLE) + "\n")
    (root / "train.tsv").write_text("".join(f"Where was {p} born?\t{born[p]}\n" for p in PEOPLE[:8]))
    (root / "dev.tsv").write_text("".join(f"Where was {p} born?\t{born[p]}\n" for p in PEOPLE[8:]))
    (root / "facts.toml").write_text('name = "tiny"\n[[relation]]\nname = "birthplace"\n'
                                     'question = "Where was {subject} born?"\n')
    return root


def test_the_edited_set_changes_the_requested_lines_and_answers_only(oracle, tiny_set, tmp_path):
    facts = factsets.load(tiny_set)
    requests = oracle.choose_requests(facts, 2, 1, seed=0, relation="birthplace")
    assert [r.dev for r in requests] == [True, True, False]
    assert all(r.new != r.old and r.new in TOWNS for r in requests)
    out = oracle.write_edited_set(facts, requests, tmp_path / "edited")
    edited = factsets.load(out)  # a valid fact set
    before, after = read_text(facts.corpus).split("\n"), read_text(edited.corpus).split("\n")
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after) and len(changed) == 3
    for r in requests:
        line = next(b for a, b in changed if a.startswith(r.subject + ". "))
        assert line == f"{r.subject}. {r.subject} was born in {r.new}."
    new = {r.subject: r.new for r in requests}
    for role in ("train", "dev"):
        for e_before, e_after in zip(read_qa(facts.files[role]), read_qa(edited.files[role])):
            subject = e_before.question[len("Where was "):-len(" born?")]
            assert e_after.answer == new.get(subject, e_before.answer)
    dev_subjects = {e.question for e in read_qa(edited.dev)}
    assert all((f"Where was {r.subject} born?" in dev_subjects) == r.dev for r in requests)


def memorising_trainer(facts_dir: Path, run_dir: Path) -> Path:
    """A stand-in for `attnlab learn`: a tiny recall-format model that memorises the set's
    corpus lines and, for its training subjects, the answers after them."""
    facts = factsets.load(facts_dir)
    docs = [d for d in read_text(facts.corpus).split("\n") if d]
    answers = {e.question[len("Where was "):-len(" born?")]: e.answer for e in read_qa(facts.train, labelled=True)}
    vocab = Vocab.from_text("\n".join(docs) + facts.vocabulary_text() + "".join(TOWNS))
    config = ModelConfig(vocab_size=len(vocab), block_size=64, n_layer=2, n_head=2, n_embd=48, dropout=0.0,
                         qa_format="recall", recall_chars=40, answer_chars=8)
    model = GPT(config)
    texts = [recall_string(d, 40, answers.get(d.split(". ")[0])) for d in docs]
    memorise(model, vocab, texts, steps=150)
    save_checkpoint(run_dir / "checkpoint.safetensors", model, vocab, meta={})
    return run_dir


def test_a_whole_run_compares_each_editor_with_the_oracle_subject_by_subject(oracle, tiny_set, tmp_path):
    out = tmp_path / "oracle-run"
    record = oracle.main(["--facts", str(tiny_set), "--k", "2", "--train-subjects", "1", "--others", "5",
                          "--out", str(out), "--no-write", "--stat-lines", "0"], trainer=memorising_trainer)
    saved = json.loads((out / "report.json").read_text())
    assert saved["requests"] == record["requests"] and len(saved["requests"]) == 3
    result = saved["result"]
    assert result["others"] == 5 and result["other_relations"] == 0  # one relation: none to watch
    for who in ("oracle", *oracle.METHODS):
        rows = result[who]["probes"]
        assert len(rows) == 3
        assert all(set(row) == {"question", "own line", "paraphrase 1", "paraphrase 2"} for row in rows)
        assert all(c in ("new", "old", "other", "-") for row in rows for c in row.values())
    for method in oracle.METHODS:
        m = result[method]
        assert 0 <= m["refused"] <= 3
        assert 0 <= m["others_as_base"] <= 5 * 3 and 0 <= m["others_as_oracle"] <= 5 * 3
    for kind in ("base", "oracle"):
        assert (out / kind / "checkpoint.safetensors").exists()
    assert (out / "edited-set" / "facts.toml").exists()
    text = oracle.summary(result, [oracle.Request(**r) for r in saved["requests"]], saved["setup"])
    assert "agrees with the oracle" in text and "95% CI" in text
