"""benchmarks/knowledge_studies.py (issue 47, item 2): the study script's bookkeeping on tiny sets
with seconds-long runs: the cells of each row, the ledger that lets a study resume without
redoing finished cells, the table (each unmeasured cell 'not run' with its command), the 95%
intervals, the questions each Part 3.2 row makes from the people, and the generated section.
No test asserts an accuracy: the tiny runs know nothing."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("faker", reason="the synth extra (Faker) is not installed")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import knowledge_studies as ks  # noqa: E402

ROWS = ["3.1-single", "3.2-compare-steps", "3.3-bits-L1W32-E25"]
TINY = ["--tiny", "--people", "8", "--capacity-people", "8", "--minutes", "0.05", "--seeds", "0", "1"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    assert ks.main(["--rows", *ROWS, "--out", str(out), *TINY]) == 0
    return out


def settings(out: Path) -> ks.Settings:
    return ks.Settings(people=8, minutes=0.05, capacity_people=8, out=out, tiny=True)


def test_each_row_read_out_and_seed_is_one_recorded_cell(study):
    ledger = ks.read_ledger(study / "ledger.json")
    expected = {ks.cell_key(ks.ROWS_BY_KEY[r], readout, seed, settings(study))
                for r in ROWS for readout in ks.ROWS_BY_KEY[r].readouts for seed in (0, 1)}
    assert set(ledger) == expected and len(expected) == 8  # single: 2 read-outs; compare, bits: 1
    single = ledger[ks.cell_key(ks.ROWS_BY_KEY["3.1-single"], "recall", 0, settings(study))]
    assert single["dev"]["total"] == 2 * 6 and single["train"]["total"] == 4 * 6  # 8 people: 2 dev, 4 train
    assert set(single["relations"]) == {"birth-date", "birth-city", "university", "major", "employer", "work-city"}
    compare = ledger[ks.cell_key(ks.ROWS_BY_KEY["3.2-compare-steps"], "direct", 0, settings(study))]
    dev = ks.compare_questions(ks.people_of(next((study / "data").glob("people8_seed0_multi5*"))), "dev", True, 0)
    verdicts = [line.rsplit("; ", 1)[-1] for line in dev.splitlines()]  # a Yes/No question's baseline
    assert compare["dev"]["most_frequent"] == max(verdicts.count("Yes"), verdicts.count("No"))
    assert "most_frequent" not in single["dev"]
    pooled = ks.accuracy_text([compare])
    assert f"the commonest answer every time {compare['dev']['most_frequent']}/{compare['dev']['total']}" in pooled
    bits = ledger[ks.cell_key(ks.ROWS_BY_KEY["3.3-bits-L1W32-E25"], "bits", 1, settings(study))]
    assert bits["values"] == 8 * 7 and bits["parameters"] > 0 and 0 <= bits["picked"] <= bits["values"]  # a date: 3 values
    assert bits["measure"] == ks.BITS_MEASURE and bits["people_scored"] == 8


def test_a_second_run_skips_recorded_cells_and_runs_only_the_missing_one(study, monkeypatch, capsys):
    ledger = ks.read_ledger(study / "ledger.json")
    missing = ks.cell_key(ks.ROWS_BY_KEY["3.2-compare-steps"], "direct", 1, settings(study))
    kept = {k: v for k, v in ledger.items() if k != missing}
    (study / "ledger.json").write_text(json.dumps(kept))
    ran = []

    def fake(row, readout, seed, s):
        ran.append((row.key, readout, seed))
        return {"dev": {"correct": 1, "total": 4}, "train": {"correct": 2, "total": 8}}

    monkeypatch.setattr(ks, "run_cell", fake)
    assert ks.main(["--rows", *ROWS, "--out", str(study), *TINY]) == 0
    assert ran == [("3.2-compare-steps", "direct", 1)]
    after = ks.read_ledger(study / "ledger.json")
    assert set(after) == set(ledger) and after[missing]["dev"] == {"correct": 1, "total": 4}
    assert all(after[k] == v for k, v in kept.items())  # finished cells untouched
    assert capsys.readouterr().out.count("recorded, skipped") == len(kept)


def test_the_table_has_every_row_and_says_how_to_run_what_is_not_recorded(study):
    text = ks.section_text(ks.read_ledger(study / "ledger.json"), [0, 1], settings(study))
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`3." in line]
    assert len(rows) == len(ks.ROWS)
    mixed = next(r for r in rows if "`3.1-mixed`" in r)
    assert "not run: `.venv/bin/python benchmarks/knowledge_studies.py --rows 3.1-mixed --seeds 0 1 2" in mixed
    inverse = next(r for r in rows if "`3.2-inverse`" in r)
    assert "n/a: the read-out recalls a document" in inverse
    single = next(r for r in rows if "`3.1-single`" in r)
    assert single.count("/24 = ") == 2 and "seeds' 95% interval" in single  # 2 seeds x 12 questions, both read-outs
    assert "bits a parameter" in next(r for r in rows if "`3.3-bits-L1W32-E25`" in r)


def test_augmented_rows_hold_the_single_rows_text_so_a_budget_gives_them_its_passes():
    """An augmented set of a fifth of the people (five biographies each) is the single set's size;
    the cell's key names the people it ran with, and the rows at full count keep their keys."""
    at = ks.Settings(people=1000, minutes=10)
    same_text = ks.ROWS_BY_KEY["3.1-augmented-same-text"]
    assert same_text.people(at) == 200 and same_text.data == ks.AUGMENTED
    assert ks.cell_key(same_text, "recall", 0, at) == "3.1-augmented-same-text/recall/N200-M10/seed0"
    assert ks.cell_key(ks.ROWS_BY_KEY["3.1-augmented"], "recall", 0, at) == "3.1-augmented/recall/N1000-M10/seed0"
    assert ks.ROWS_BY_KEY["3.1-celebrities"].people(at) == 333  # half of them augmented
    assert all(ks.ROWS_BY_KEY[k].people(at) == 200 for k in ("3.2-inverse", "3.2-compare", "3.2-compare-steps"))
    assert ks.ROWS_BY_KEY["3.3-bits-L1W32-E25"].people(at) == at.capacity_people


def test_list_prints_one_command_per_row(capsys):
    assert ks.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":", 1)[0] for line in lines] == [r.key for r in ks.ROWS]
    assert all(f"--rows {r.key} --seeds 0 1 2 " in line and line.endswith("--write") for r, line in zip(ks.ROWS, lines))


def test_intervals_pool_counts_with_wilson_and_seeds_with_t():
    results = [{"dev": {"correct": c, "total": 100}, "train": {"correct": 50, "total": 50}} for c in (40, 50, 60)]
    text = ks.accuracy_text(results)
    assert text.startswith("150/300 = 50.0% (95% CI 44.4-55.6); seeds 40.0, 50.0, 60.0")
    half = 4.303 * 10 / math.sqrt(3)  # t(0.975, 2 df) x sd / sqrt(n)
    assert f"(seeds' 95% interval {50 - half:.1f}-{50 + half:.1f})" in text and text.endswith("trained-on questions 100%")
    assert ks.seeds_interval([0.5]) is None
    one = ks.bits_text([{"bits_per_parameter": 0.25, "parameters": 1000, "exposures": 25, "picked": 30,
                         "values": 120, "bits_vs_even": -500.0}])
    assert one.startswith("0.250 bits a parameter (1,000 parameters, 25 exposures)") and "seeds' 95%" not in one
    assert one.endswith("likeliest of its pool 30/120 = 25.0% (95% CI 18.1-33.4%); against an even pool -0.500 a parameter")


def test_part_3_2_questions_come_from_the_people_of_each_half(study):
    folder = next((study / "data").glob("people8_seed0_multi5*"))
    people = ks.people_of(folder)
    where = {p["name"]: p["split"] for p in people}
    inverse = [line.split("\t") for line in ks.inverse_questions(people, "train").splitlines()]
    assert inverse and all(where[name] == "train" and q.startswith("Who was born on ") for q, name in inverse)
    steps = [line.split("\t") for line in ks.compare_questions(people, "dev", True, 0).splitlines()]
    plain = ks.compare_questions(people, "dev", False, 0).splitlines()
    assert len(steps) == len(plain) > 0
    for question, answer in steps:
        a, b, verdict = answer.split("; ")
        assert verdict == ("Yes" if int(a) < int(b) else "No") and a != b
        names = question[len("Was "):-1].split(" born in an earlier year than ")
        assert all(where[n] == "dev" for n in names)


def test_the_celebrity_row_trains_on_celebrities_and_asks_about_the_minority(tmp_path):
    from attnlab.data.synth import BiosOptions, generate, write

    folder = write(generate(BiosOptions(people=16, seed=2, multi=2, celebrities=0.5)), tmp_path / "set")
    derived = ks.minority_set(folder, tmp_path / "work")
    group = {p["name"]: p["group"] for p in ks.people_of(folder)}
    for split, expected in (("train", "celebrity"), ("dev", "plain"), ("test", "plain")):
        lines = (derived / f"{split}.tsv").read_text().splitlines()
        subjects = {next(n for n in group if n in line.split("\t")[0]) for line in lines}
        assert lines and {group[s] for s in subjects} == {expected}, split


def test_write_puts_the_table_in_its_own_section_of_the_guide(study, tmp_path, monkeypatch):
    guide = tmp_path / "guide.md"
    guide.write_text("# Knowledge studies\n\nprose kept\n")
    monkeypatch.setattr(ks, "GUIDE", guide)
    assert ks.main(["--table", "--rows", *ROWS, "--out", str(study), *TINY, "--write", "--note", "a smoke run"]) == 0
    text = guide.read_text()
    name = "knowledge-studies-N8-M0_05-C8-tiny"
    assert text.startswith("# Knowledge studies\n\nprose kept\n") and f"<!-- {name}:start -->" in text
    assert "a smoke run" in text and "`3.1-mixed`" in text


def test_the_ledger_is_the_committed_record_unless_a_run_is_tiny_or_names_its_own(tmp_path):
    """A study's counts outlive the session's runs/ folder: they go to the committed record."""
    assert ks.Settings().ledger_path() == ks.LEDGER and ks.LEDGER.parent.name == "records"
    assert settings(tmp_path).ledger_path() == tmp_path / "ledger.json"
    assert ks.Settings(ledger=tmp_path / "mine.json").ledger_path() == tmp_path / "mine.json"


def test_pool_probabilities_read_from_the_cached_context_match_each_candidate_run_whole():
    """Candidates scored on the context's cached keys and values get the log-probabilities of
    running context + candidate through the model whole, normalised over the candidates."""
    import torch

    from attnlab.config.settings import ModelConfig
    from attnlab.model.gpt import GPT

    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=20, block_size=32, n_layer=2, n_head=2, n_embd=16, dropout=0.0)).eval()
    context, candidates = [3, 5, 7, 2, 9], [[4, 6], [8], [4, 6, 11, 12], [13, 2, 2]]
    with torch.no_grad():
        cached = ks.pool_log_probs(model, context, candidates)
        whole = []
        for c in candidates:
            logp = model.run(torch.tensor([context + c]))[0][0].log_softmax(-1)
            whole.append(sum(float(logp[len(context) + j - 1, t]) for j, t in enumerate(c)))
    norm = torch.logsumexp(torch.tensor(whole), 0).item()
    assert cached == pytest.approx([w - norm for w in whole], abs=1e-5)


def test_the_bits_measure_counts_what_a_model_says_of_each_person_beyond_what_it_says_of_anyone(tmp_path, monkeypatch):
    """Every value of the scored people (a birth date as month, day and year) is scored among
    its pool: a model that says the same of everyone stores 0 bits however it spreads its
    probability (against an even pool it pays for preferring some values); a model sure of each
    true value stores, per value, log2 of how rare the value is among the people scored."""
    from collections import Counter

    from attnlab.data.datasets import documents, read_text
    from attnlab.data.synth import BiosOptions, generate, write
    from attnlab.data.vocab import Vocab

    folder = write(generate(BiosOptions(people=12, seed=4)), tmp_path / "set")
    docs = documents(read_text(folder / "corpus.txt"))
    vocab, people = Vocab.from_text("\n".join(docs)), ks.people_of(folder)
    pools = ks.value_pools(people)
    assert [len(pools[k]) for k in ("month", "day", "year")] == [12, 28, 200]
    model = type("Stub", (), {"config": type("C", (), {"block_size": 512})})()
    spans = {doc[:start]: (pool, value, doc[start:start + len(value) + 1])  # the text before, the value
             for doc, person in zip(docs, people) for pool, start, value in ks.value_spans(doc, person, 0)}
    assert len(spans) == 12 * 7

    def skewed(model, context, candidates):  # the same for everyone: the first value likelier
        weights = [2.0] + [1.0] * (len(candidates) - 1)
        return [math.log(w / sum(weights)) for w in weights]

    def sure(model, context, candidates):
        truth = spans[vocab.decode(context)][2]
        return [0.0 if vocab.decode(c) == truth else -1e9 for c in candidates]

    monkeypatch.setattr(ks, "pool_log_probs", skewed)
    found = ks.knowledge_bits(model, vocab, people, docs, sample=6, seed=1)
    assert found.people == 6 and found.values == 6 * 7 and found.bits == pytest.approx(0.0, abs=1e-9)
    assert found.bits_vs_even < 0
    monkeypatch.setattr(ks, "pool_log_probs", sure)
    found = ks.knowledge_bits(model, vocab, people, docs)
    rarity = sum(-math.log2(n / 12) for pool in pools
                 for n in Counter(v for (p, v, _) in spans.values() if p == pool).values() for _ in range(n))
    assert found.values == found.picked == 12 * 7 and found.bits == pytest.approx(rarity)


def test_the_recall_cells_keep_the_recipe_the_ledger_was_recorded_with(study):
    # `learn` mixes swapped copies into pretraining now; the study's recorded recall cells were
    # trained without them, so its recipe leaves them out and the ledger holds one recipe
    from attnlab.data import factset
    from attnlab.experiments.learn import recipe_for

    facts = factset.load(next(p.parent for p in study.rglob("facts.toml")))
    assert recipe_for(facts, 0.05).pretrain.read_out_swaps > 0
    assert ks.study_recipe(facts, settings(study), 0).pretrain.read_out_swaps == 0


def test_a_comparison_by_recall_compares_the_years_read_out_of_each_person(tmp_path):
    """The compare row's recall cell: each person's birth date asked of the recall model, the two
    years compared by the program; an unreadable year gives no verdict."""
    from types import SimpleNamespace

    from attnlab.data.relations import Schema

    schema = Schema.from_list([["birth-date", "When was {subject} born?"]])
    said = {"Ann Lee": "May 2, 1961", "Bo Wu": "June 1, 2001", "Cy Ng": "in spring"}

    class Model:
        def ask(self, questions, abstain):
            return [SimpleNamespace(answer=said[q[len("When was "):-len(" born?")]]) for q in questions]

    pairs = [["Was Ann Lee born in an earlier year than Bo Wu?", "1961; 2001; Yes"],
             ["Was Bo Wu born in an earlier year than Ann Lee?", "2001; 1961; No"],
             ["Was Ann Lee born in an earlier year than Bo Wu?", "1961; 1999; Yes"],  # right verdict, wrong year
             ["Was Cy Ng born in an earlier year than Ann Lee?", "1950; 1961; Yes"]]  # no year read: wrong
    assert ks.compare_by_recall(Model(), schema, pairs) == {"correct": 3, "total": 4, "whole_answer_correct": 2,
                                                            "both_years_read": 3, "most_frequent": 3}


def test_the_compare_row_s_recall_cell_reuses_or_trains_the_same_text_recall_model(tmp_path):
    study = tmp_path / "study"
    assert ks.main(["--rows", "3.2-compare", "--readouts", "recall", "--out", str(study), *TINY[:-1], "0"]) == 0
    ledger = ks.read_ledger(study / "ledger.json")
    at = settings(study)
    compare = ledger[ks.cell_key(ks.ROWS_BY_KEY["3.2-compare"], "recall", 0, at)]
    same_text = ks.cell_key(ks.ROWS_BY_KEY["3.1-augmented-same-text"], "recall", 0, at)
    assert same_text in ledger  # the model it needed was trained, and that cell recorded
    people = ks.people_of(next((study / "data").glob("people8_seed0_multi5*")))
    assert compare["dev"]["total"] == len(ks.compare_questions(people, "dev", True, 0).splitlines())
    assert 0 <= compare["dev"]["whole_answer_correct"] <= compare["dev"]["correct"] + compare["dev"]["total"]
    del ledger[ks.cell_key(ks.ROWS_BY_KEY["3.2-compare"], "recall", 0, at)]
    (study / "ledger.json").write_text(json.dumps(ledger))
    trained = study / "runs" / ks.cell_key(ks.ROWS_BY_KEY["3.1-augmented-same-text"], "recall", 0, at,
                                           measure=False) / "checkpoint.safetensors"
    before = trained.stat().st_mtime_ns
    assert ks.main(["--rows", "3.2-compare", "--readouts", "recall", "--out", str(study), *TINY[:-1], "0"]) == 0
    assert trained.stat().st_mtime_ns == before  # reused, not trained again
    assert ks.read_ledger(study / "ledger.json")[ks.cell_key(ks.ROWS_BY_KEY["3.2-compare"], "recall", 0, at)] \
        ["dev"] == compare["dev"]
