"""A generated bios set is a fact set like any other (issue 47, item 4): a model learned on one
answers through `ask`, is traced by `trace`, is refused by `edit` exactly as any model of
several relations is, and is served by `attnlab serve`'s API. Seconds-long runs that know
nothing: the tests check the plumbing, never an answer."""

from __future__ import annotations

import dataclasses
import json

import pytest

pytest.importorskip("faker", reason="the synth extra (Faker) is not installed")
pytest.importorskip("fastapi", reason="the serve extra (pip install -e '.[serve]') is not installed")

from fastapi.testclient import TestClient  # noqa: E402

from attnlab import cli  # noqa: E402
from attnlab.api import load  # noqa: E402
from attnlab.data import factset  # noqa: E402
from attnlab.data.datasets import read_corpus, read_qa  # noqa: E402
from attnlab.data.synth import BiosOptions, generate, write  # noqa: E402
from attnlab.experiments.learn import learn, recipe_for  # noqa: E402
from attnlab.serve.app import create_app  # noqa: E402
from attnlab.serve.lab import Lab, Run  # noqa: E402

RELATIONS = {"birth-date", "birth-city", "university", "major", "employer", "work-city"}


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    root = tmp_path_factory.mktemp("bios")
    folder = write(generate(BiosOptions(people=8, seed=4, multi=2, permute=True)), root / "set")
    facts = factset.load(folder)
    recipe = recipe_for(facts, 0.1)
    # a short recall keeps trace's grid small; the model knows nothing either way
    model = dataclasses.replace(recipe.model, n_layer=1, n_head=2, n_embd=32, recall_chars=40, block_size=128)
    recipe = dataclasses.replace(recipe, model=model,
                                 pretrain=dataclasses.replace(recipe.pretrain, minutes=0, epochs=1, max_steps=2),
                                 finetune=dataclasses.replace(recipe.finetune, max_steps=2))
    learn(folder, root / "run", minutes=0.1, device="cpu", recipe=recipe, log=lambda m: None)
    return facts, root / "run"


def first_dev(facts) -> tuple[str, str]:
    example = read_qa(facts.dev, labelled=True)[0]
    return example.question, facts.schema.require(example).subject


def test_ask_parses_each_relation_of_the_set(learned, capsys):
    facts, run = learned
    questions = [e.question for e in read_qa(facts.dev, labelled=True)[:6]]
    capsys.readouterr()
    assert cli.main(["ask", str(run), *questions, "--json", "--abstain", "off"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["relation"] for r in rows} == RELATIONS and all(r["problem"] is None for r in rows)


def test_trace_corrupts_the_subject_of_a_bios_question(learned, tmp_path, capsys):
    facts, run = learned
    question, subject = first_dev(facts)
    capsys.readouterr()
    assert cli.main(["trace", str(run), question, "--samples", "1", "--json", "--out-dir", str(tmp_path / "t")]) == 0
    written = json.loads(capsys.readouterr().out)["written"]
    assert sorted(p.rsplit("/", 1)[1] for p in written) == ["trace.json", "trace.md", "trace.png"]
    traced = json.loads((tmp_path / "t" / "trace.json").read_text())
    assert traced["name"] == subject and traced["context"].startswith(subject)  # the subject the set names


def test_edit_refuses_it_as_any_model_of_several_relations_and_writes_nothing(learned, tmp_path, capsys):
    facts, run = learned
    _, subject = first_dev(facts)
    code = cli.main(["edit", str(run), "--person", subject, "--place", "Boston", "--out-dir", str(tmp_path / "e")])
    assert code == 2 and "answers several relations" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()


def test_serve_answers_traces_and_scores_it(learned, tmp_path):
    facts, run = learned
    question, subject = first_dev(facts)
    model = load(run, device="cpu")
    lab = Lab([Run(str(run), model)], read_corpus(facts.corpus).split("\n"), read_qa(facts.dev, labelled=True),
              tmp_path / "out", stat_lines=20)
    client = TestClient(create_app(lab, rate=0))
    asked = client.post("/api/ask", json={"question": question})
    assert asked.status_code == 200
    (answer,) = asked.json()["answers"]
    assert answer["answer"] == model.ask([question], abstain=None)[0].answer  # the served run has no rule
    traced = client.post("/api/trace", json={"question": question, "run": 0, "samples": 1})
    assert traced.status_code == 200 and subject in "".join(traced.json()["chars"])
    dev = client.get("/api/dev", params={"run": 0}).json()
    assert dev["total"] == len(read_qa(facts.dev, labelled=True))
    edit = client.post("/api/edit", json={"run": 0, "person": subject, "place": "Boston"})
    assert 400 <= edit.status_code < 500 and "several relations" in edit.json()["error"]


def test_a_lab_of_two_fact_sets_answers_a_question_with_the_runs_that_can_be_asked_it(learned, tmp_path):
    """The bios run beside the shipped model (the course's birthplace question): each run answers
    its own set's questions and says why it was not asked the other's; a question neither run
    can be asked is refused."""
    from attnlab.serve.lab import Facts

    from tests.conftest import DATA, REPO

    facts, run = learned
    question, _ = first_dev(facts)
    shipped = REPO / "models" / "cpu"
    lab = Lab([Run(str(run), load(run, device="cpu")),
               Run(str(shipped), load(shipped, device="cpu"), facts=Facts.load(DATA))],
              read_corpus(facts.corpus).split("\n"), read_qa(facts.dev, labelled=True), tmp_path / "out", stat_lines=20)
    client = TestClient(create_app(lab, rate=0))
    bios, course = client.post("/api/ask", json={"question": question}).json()["answers"]
    assert "answer" in bios and "problem" not in bios
    assert "answer" not in course and "matches no relation" in course["problem"] and course["name"] == str(shipped)
    both = client.post("/api/ask", json={"question": "Where was Ralf Wadephul born?"}).json()["answers"]
    assert both[1]["answer"] == "Berlin"  # the bios set's birth-city question is the course's too
    refused = client.post("/api/ask", json={"question": "What colour is the sky?"})
    assert 400 <= refused.status_code < 500 and "matches no relation" in refused.json()["error"]
