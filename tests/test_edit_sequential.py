"""benchmarks/edit_sequential.py's bookkeeping (issue 49, item 2): which subjects are edited and
watched, and a short run's curve on a tiny memorised model."""

from __future__ import annotations

import random

from attnlab.data import factset as factsets
from tests.conftest import benchmark_fixture
from tests.test_edit_oracle import memorising_trainer, tiny_set  # noqa: F401  (tiny_set: a fixture)

sequential = benchmark_fixture("edit_sequential")


def _two_relations(tmp_path):
    root = tmp_path / "isles"
    root.mkdir()
    isles = ["Ara", "Bel", "Cor", "Dun", "Eth", "Fal"]
    seas = {i: ["North Sea", "South Sea"][k % 2] for k, i in enumerate(isles)}
    towns = {i: f"{i}town" for i in isles}
    (root / "corpus.txt").write_text("\n".join(f"{i}. It lies in the {seas[i]}. Its capital is {towns[i]}." for i in isles))
    rows = lambda part: "".join(f"Which sea is {i} in?\t{seas[i]}\nWhat is the capital of {i}?\t{towns[i]}\n" for i in part)  # noqa: E731
    (root / "train.tsv").write_text(rows(isles[:4]))
    (root / "dev.tsv").write_text(rows(isles[4:]))
    (root / "facts.toml").write_text('name = "isles"\n[[relation]]\nname = "sea"\nquestion = "Which sea is {subject} in?"\n'
                                     '[[relation]]\nname = "capital"\nquestion = "What is the capital of {subject}?"\n')
    return factsets.load(root)


def test_the_plan_edits_one_relation_and_watches_the_others(sequential, tmp_path):
    facts = _two_relations(tmp_path)
    p, answers, _ = sequential.plan(facts, "capital", 3, 1, seed=0, spellable=lambda a: True)
    subjects = [s for s, _, _, _ in p.edits]
    assert len(set(subjects)) == 3 and sum(dev for *_, dev in p.edits) == 1
    assert all(r == "capital" for _, r, _, _ in p.edits)
    assert [q.question for q in p.questions] == [f"What is the capital of {s}?" for s in subjects]
    # the other relation of each edited subject, in edit order, and the dev subject never edited
    assert [q.question for q in p.other_relations] == [f"Which sea is {s} in?" for s in subjects]
    assert p.other_of == [0, 1, 2] and p.other_names == ["sea"] * 3
    unedited = ({"Eth", "Fal"} - set(subjects)).pop()
    assert sorted(q.question for q in p.others) == sorted([f"Which sea is {unedited} in?",
                                                            f"What is the capital of {unedited}?"])
    only, _, _ = sequential.plan(facts, "capital", 2, 1, seed=0, spellable=lambda a: True, known={"Ara", "Bel", "Eth"})
    assert {s for s, *_ in only.edits} <= {"Ara", "Bel", "Eth"}  # --known-only: subjects the model answers right
    sequential.new_answers(p, answers, [type("A", (), {"answer": "x"})()] * 3, random.Random(0))
    gold = {q.question: q.answer for q in p.questions}
    assert all(place in answers and place != gold[q.question] for (_, _, place, _), q in zip(p.edits, p.questions))


def test_a_short_run_measures_each_curve_point(sequential, tiny_set, tmp_path):  # noqa: F811
    run = memorising_trainer(tiny_set, tmp_path / "run")
    out = sequential.main(["--run", str(run), "--facts", str(tiny_set), "--n", "4", "--dev-subjects", "2",
                           "--curve-every", "2", "--radius-lines", "0", "--no-write"])
    assert [c["edits"] for c in out["curve"]] == [2, 4]
    for c in out["curve"]:
        assert c["applied"] + c["refused"] == c["edits"] and c["holding"] <= c["applied"]
        assert c["others"] == 2 and c["other_relation"] == 0  # two dev subjects never edited; one relation
        assert c["checkpoint_bytes"] > 0 and c["load_seconds"] > 0
    assert len(out["refused"]) == out["curve"][-1]["refused"] == sum(out["reasons"].values())
    assert "target (issue 49)" in sequential.summary(out)
