"""`attnlab serve`'s web API (attnlab/serve/), through FastAPI's TestClient: each view's numbers
are the library's, bad input is a 4xx with a one-line message, edits never touch a served run
and are saved only as new directories inside the output directory, and concurrent requests
get the answers they would get alone."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from attnlab.trust.calibration import ece_by_chance, expected_calibration_error

pytest.importorskip("fastapi", reason="the serve extra (pip install -e '.[serve]') is not installed")
from fastapi.testclient import TestClient  # noqa: E402

from attnlab.trust.abstention import Rule  # noqa: E402
from attnlab.api import load  # noqa: E402
from attnlab.probing.attention_maps import attention_weights  # noqa: E402
from attnlab.answering.evaluate import Score  # noqa: E402
from attnlab.trust.evidence import CorpusIndex  # noqa: E402
from attnlab.serve.app import RateLimit, create_app  # noqa: E402
from attnlab.serve.lab import MAX_QUESTION_CHARS, AnswerCache  # noqa: E402
from attnlab.data.vocab import MASK_CHAR  # noqa: E402
from tests.serve_lab import SHIPPED, make_lab, tiny  # noqa: E402

RALF = "Where was Ralf Wadephul born?"  # models/cpu answers Berlin, right
BRYAN = "Where was Bryan Dubreuiel born?"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("serve-tiny"))


@pytest.fixture
def lab(tmp_path, tiny_run):
    made = make_lab(tmp_path, tiny_run)
    yield made
    made.close()


@pytest.fixture
def client(lab):
    return TestClient(create_app(lab, rate=0))


@pytest.fixture(scope="module")
def shipped():
    return load(SHIPPED, device="cpu")


def test_ask_answers_with_every_run_as_the_library_does(client, lab, shipped):
    got = client.post("/api/ask", json={"question": RALF})
    assert got.status_code == 200
    answers = got.json()["answers"]
    assert [a["run"] for a in answers] == [0, 1]
    for served, run in zip(answers, lab.runs):
        (expected,) = run.model.ask([RALF], abstain=None)
        assert (served["answer"], served["confidence"], served["recalled"]) == \
            (expected.answer, expected.confidence, expected.recalled)
    assert answers[0]["answer"] == shipped.ask(RALF, abstain=None)[0].answer


def test_runs_can_be_chosen_and_a_name_alone_is_asked_as_the_question(client):
    got = client.post("/api/ask", json={"question": "  Ralf Wadephul ", "runs": [1, 1]}).json()
    assert got["question"] == RALF
    assert [a["run"] for a in got["answers"]] == [1]  # each run answers once


def test_abstention_verdict_follows_the_runs_rule(lab, shipped):
    confidences = sorted(a.confidence for a in shipped.ask([RALF, BRYAN], abstain=None))
    threshold = sum(confidences) / 2  # one answer above, one below
    lab.runs[0].rule = Rule(threshold, None, "test")
    client = TestClient(create_app(lab, rate=0))
    given = {}
    for question in (RALF, BRYAN):
        a = client.post("/api/ask", json={"question": question, "runs": [0]}).json()["answers"][0]
        assert a["given"] == (a["confidence"] >= threshold)
        assert a["abstention"] == lab.runs[0].rule.describe()
        given[question] = a["given"]
    assert sorted(given.values()) == [False, True]


def test_evidence_is_the_corpus_line_that_states_the_answer(client, lab):
    a = client.post("/api/ask", json={"question": RALF, "runs": [0]}).json()["answers"][0]
    found = CorpusIndex(lab.corpus).find(RALF, a["answer"])
    assert a["evidence"]["verdict"] == found.verdict
    assert a["evidence"]["supported"] is True
    assert a["evidence"]["line_number"] == found.supporting[0]
    assert a["answer"] in a["evidence"]["line"] and a["evidence"]["line"].startswith("Ralf Wadephul.")


@pytest.mark.parametrize("body, status, words", [
    ({"question": ""}, 400, "empty question"),
    ({"question": "   "}, 400, "empty question"),
    ({"question": "Where was Zoë 日本 born?"}, 400, "not in the vocabulary"),
    ({"question": f"Where was A{MASK_CHAR} born?"}, 400, "a mark the model uses"),
    ({"question": "x" * (MAX_QUESTION_CHARS + 1)}, 400, f"at most {MAX_QUESTION_CHARS}"),
    ({"question": "Who is Ralf Wadephul?"}, 400, "matches no relation (expected 'Where was {subject} born?')"),
    ({"question": "x" * 10_000}, 413, "larger than"),
    ({}, 422, "question: Field required"),
    ({"question": RALF, "runs": [7]}, 404, "no run 7"),
    ({"question": RALF, "runs": ["a"]}, 422, "malformed request"),
    ({"question": RALF, "runs": [True]}, 422, "runs: Input should be a valid integer"),  # not run 1
    ({"question": RALF, "runs": []}, 400, "no run chosen"),
])
def test_bad_input_is_a_4xx_with_a_one_line_message(client, body, status, words):
    got = client.post("/api/ask", json=body)
    assert got.status_code == status
    message = got.json()["error"]
    assert words in message and "\n" not in message and "Traceback" not in message


@pytest.mark.parametrize("body", [b"not json", b"\xff\xfe", b'{"question": 3}', b"[]", b'{"question": "\xff"}'])
def test_a_body_that_is_not_a_question_is_a_4xx(client, body):
    got = client.post("/api/ask", content=body, headers={"content-type": "application/json"})
    assert 400 <= got.status_code < 500, got.text
    assert got.json()["error"] and "Traceback" not in got.text


def test_a_chunked_body_is_cut_off_at_the_size_limit(client):
    chunks = (b"x" * 1024 for _ in range(10 * 1024))  # 10 MB with no Content-Length: sent chunked
    got = client.post("/api/ask", content=chunks, headers={"content-type": "application/json"})
    assert got.status_code == 413 and "larger than" in got.json()["error"]
    small = client.post("/api/ask", content=iter([b'{"question": ', f'"{RALF}"}}'.encode()]),
                        headers={"content-type": "application/json"})
    assert small.status_code == 200 and small.json()


def test_attention_is_the_libraries_on_the_answers_rows_over_the_recalled_text(client, lab):
    got = client.post("/api/attention", json={"question": RALF, "run": 0}).json()
    model = lab.runs[0].model
    (answer,) = model.ask([RALF], abstain=None)
    text = f"{answer.recalled}{MASK_CHAR}{answer.answer}"
    assert "".join(got["read"]) == answer.recalled and "".join(got["rows"]) == answer.answer
    weights, _ = attention_weights(model.gpt, [model.vocab.encode(text)])
    n, k = len(answer.recalled), len(answer.answer)
    assert len(got["layers"]) == model.config.n_layer
    for served, w in zip(got["layers"], weights):  # row i: the position that writes answer[i]
        assert len(served) == model.config.n_head
        np.testing.assert_allclose(np.array(served), w[0, :, n:n + k, :n].numpy(), atol=1e-4)
    start = answer.recalled.index(answer.answer)
    assert got["span"] == [start, start + k]
    best = got["heads"][0]  # the head that looks most at the copied span, and its share
    share = float(w_share(weights[best["layer"]][0, best["head"], n:n + k, start:start + k]))
    assert best["on_span"] == pytest.approx(share, abs=1e-3)
    assert best["on_span"] == max(h["on_span"] for h in got["heads"])


def test_attention_rows_follow_what_a_recall_model_reads_before_its_answer():
    """After its recall a model of several relations reads the relation's cue, and a quoting
    model its quote, before the answer: the rows that write the answer come after them."""
    from attnlab.answering.formats import Answer
    from attnlab.config.settings import ModelConfig
    from attnlab.serve.lab import _read_after

    relations = (("sea", "Which sea is {subject} in?"), ("capital", "What is the capital of {subject}?"))
    several = ModelConfig(qa_format="recall", relations=relations, quote=True)
    quoted = Answer("q", "Lima", 0.5, True, recalled="Ab. Its capital is Lima.", relation="capital",
                    quoted="Its capital is Lima")
    assert _read_after(several, quoted) == f"capital{MASK_CHAR}Its capital is Lima{MASK_CHAR}"
    plain = Answer("q", "Lima", 0.5, True, recalled="Ab. Born in Lima.", relation="birthplace")
    assert _read_after(ModelConfig(qa_format="recall"), plain) == ""  # one relation, no quote
    direct = ModelConfig(qa_format="direct", relations=relations)
    assert _read_after(direct, Answer("q", "Lima", 0.5, True)) == ""  # a direct model: the question's mark


def w_share(block) -> float:
    return block.sum(-1).mean()


def test_causal_trace_is_the_libraries_and_its_samples_are_bounded(client, lab):
    from attnlab.facts.trace import strongest, trace

    got = client.post("/api/trace", json={"question": RALF, "run": 0, "samples": 1})
    assert got.status_code == 200
    t = trace(lab.runs[0].model.gpt, lab.runs[0].model.vocab, RALF, samples=1)  # attnlab trace's noise and seed
    data = got.json()
    assert data["answer"] == t.point.answer and "".join(data["chars"]) == t.point.context
    assert data["clean"] == pytest.approx(t.clean) and data["corrupted"] == pytest.approx(t.corrupted)
    for kind, matrix in t.recovered.items():
        np.testing.assert_allclose(np.array(data["recovered"][kind]), matrix, atol=1e-5)
    assert data["scale"] == [0.0, pytest.approx(t.clean)]  # never stretched to the largest effect
    kind, (layer, _, value) = max(strongest(t.recovered, list(t.point.context)).items(), key=lambda kv: kv[1][2])
    assert f"at layer {layer}" in data["strongest"] and f"{value:.3f}" in data["strongest"]
    too_many = client.post("/api/trace", json={"question": RALF, "run": 0, "samples": 11})
    assert too_many.status_code == 400 and "samples" in too_many.json()["error"]


def test_dev_view_scores_every_question_with_its_interval(client, lab):
    got = client.get("/api/dev", params={"run": 0}).json()
    answers = lab.runs[0].model.ask([e.question for e in lab.dev_examples], abstain=None)
    assert [r["question"] for r in got["rows"]] == [e.question for e in lab.dev_examples]
    for row, e, a in zip(got["rows"], lab.dev_examples, answers):
        assert (row["gold"], row["answer"], row["right"]) == (e.answer, a.answer, a.answer == e.answer)
    score = Score(sum(r["right"] for r in got["rows"]), len(got["rows"]))
    assert (got["correct"], got["total"], got["text"]) == (score.correct, score.total, score.with_interval())
    assert got["interval"] == pytest.approx(list(score.interval))
    assert sum(b["count"] for b in got["bins"]) == got["total"]
    wrong = score.total - score.correct  # Kalai's score beside the accuracy: +1 right, -t/(1-t) wrong
    assert got["kalai"]["all"]["0.5"] == score.correct - wrong and set(got["kalai"]["rule"]) == {"0.5", "0.75", "0.9"}
    right = [r["right"] for r in got["rows"]]  # the shipped run stores a correction: its ECE beside the raw one
    assert got["ece_corrected"] == pytest.approx(expected_calibration_error([a.chance_right for a in answers], right))
    assert got["ece"] == pytest.approx(expected_calibration_error([a.confidence for a in answers], right))
    # the range a calibrated confidence scores by chance, for the corrected confidence the page shows
    assert got["ece_by_chance"] == pytest.approx(list(ece_by_chance([a.chance_right for a in answers])))
    assert client.get("/api/dev", params={"run": 1}).json()["ece_corrected"] is None  # the tiny run stores none
    assert client.get("/api/dev", params={"run": 9}).status_code == 404


def test_an_edit_changes_a_copy_and_is_saved_as_a_new_run(client, lab, tmp_path):
    before = lab.runs[0].model.ask([RALF], abstain=None)[0]
    weights = {k: v.clone() for k, v in lab.runs[0].model.gpt.state_dict().items()}
    got = client.post("/api/edit", json={"run": 0, "person": "Ralf Wadephul", "place": "Paris"})
    assert got.status_code == 200, got.json()
    edit = got.json()
    assert edit["old_answer"] == before.answer and edit["others"] == len(lab.dev_examples) - 1
    assert edit["others_changed"] == len(edit["changed"])
    assert all(c["before"] != c["after"] for c in edit["changed"])
    now = lab.runs[0].model.gpt.state_dict()
    assert all(v.equal(now[k]) for k, v in weights.items())  # the served run is untouched

    saved = client.post(f"/api/edit/{edit['id']}/save", json={"name": "ralf-paris"})
    assert saved.status_code == 200
    run_dir = tmp_path / "out" / "ralf-paris"
    assert saved.json()["run_dir"] == str(run_dir)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ralf-paris"]
    saved_model = load(run_dir, device="cpu")
    assert saved_model.ask([RALF], abstain=None)[0].answer == edit["new_answer"] == "Paris"
    assert json.loads((run_dir / "edit.json").read_text())["place"] == "Paris"
    # the same record `attnlab edit` writes: the default (gated) method, listed by `attnlab edits`
    (record,) = json.loads((run_dir / "edits.json").read_text())
    assert (record["person"], record["place"], record["method"]) == ("Ralf Wadephul", "Paris", "grace")
    assert record["parameters_added"] == edit["parameters_added"] > 0
    assert saved_model.checkpoint.edits == [record]


def test_an_edit_takes_the_method_asked_for_and_refuses_what_attnlab_edit_refuses(client, lab):
    rome = client.post("/api/edit", json={"run": 0, "person": "Ralf Wadephul", "place": "Paris", "method": "rome"})
    assert rome.status_code == 200 and rome.json()["method"] == "rome" and rome.json()["parameters_added"] == 0
    odd = client.post("/api/edit", json={"run": 1, "person": "Ralf Wadephul", "place": "Paris", "method": "magic"})
    assert odd.status_code == 400 and odd.json()["error"].startswith("unknown edit method 'magic'")
    stranger = client.post("/api/edit", json={"run": 1, "person": "Nobody Atall", "place": "Paris"})
    assert stranger.status_code == 400 and "the model never saw them" in stranger.json()["error"]


def test_an_edit_that_does_not_take_is_a_422_and_keeps_nothing(client, lab, monkeypatch):
    from attnlab.facts import correction
    from attnlab.facts.gated_edit import EditFailed

    def missed(*args, **kwargs):
        raise EditFailed("the grace edit did not take: 'Where was Ralf Wadephul born?' is answered 'Lond'")

    monkeypatch.setattr(correction, "edit_fact", missed)
    kept = dict(lab.edits)
    got = client.post("/api/edit", json={"run": 1, "person": "Ralf Wadephul", "place": "Paris"})
    assert got.status_code == 422 and got.json()["error"].startswith("the grace edit did not take")
    assert dict(lab.edits) == kept


def test_a_save_never_overwrites_nor_leaves_the_output_directory(client, tmp_path):
    edit = client.post("/api/edit", json={"run": 0, "person": "Ralf Wadephul", "place": "Paris"}).json()
    (tmp_path / "out" / "ralf-paris").mkdir(parents=True)
    for name, status in [("ralf-paris", 409), ("../escape", 400), ("a/b", 400), (".hidden", 400), ("", 400),
                         ("x" * 65, 400), ("evil\n", 400)]:
        got = client.post(f"/api/edit/{edit['id']}/save", json={"name": name})
        assert got.status_code == status, name
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ralf-paris"]
    assert not (tmp_path / "escape").exists()


def test_edit_input_is_checked(client):
    empty = client.post("/api/edit", json={"run": 1, "person": " ", "place": "Paris"})
    assert empty.status_code == 400 and empty.json()["error"] == "empty person"
    mark = client.post("/api/edit", json={"run": 1, "person": "Ralf Wadephul", "place": f"Paris{MASK_CHAR}"})
    assert mark.status_code == 400 and "the place contains" in mark.json()["error"]
    unknown = client.post("/api/edit", json={"run": 1, "person": "Ralf Wadephul", "place": "日本"})
    assert unknown.status_code == 400 and "not in the vocabulary" in unknown.json()["error"]
    assert client.post("/api/edit/99/save", json={"name": "x"}).status_code == 404


def test_requests_over_the_rate_limit_are_refused(lab):
    client = TestClient(create_app(lab, rate=2))
    codes = [client.get("/api/runs").status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    assert "at most 2 a minute" in client.get("/api/runs").json()["error"]
    assert client.get("/").status_code == 200  # the page itself is not an API request


def test_the_rate_limit_is_per_client_and_per_minute():
    limit = RateLimit(1)
    assert limit.wait("a", 0.0) == 0 and limit.wait("b", 1.0) == 0
    assert limit.wait("a", 30.0) == pytest.approx(30.0)
    assert limit.wait("a", 60.0) == 0
    assert limit.wait("c", 61.5) == 0
    assert set(limit.seen) == {"a", "c"}  # "b", quiet for a minute, is forgotten


def _same_answers(got: dict, expected: dict) -> None:
    """Answers, verdicts and evidence equal; confidences to float noise (a batch runs other
    matrix shapes than one question alone); either may have come from the answer cache."""
    for g, e in zip(got["answers"], expected["answers"], strict=True):
        assert g["confidence"] == pytest.approx(e["confidence"], rel=1e-4, abs=1e-6)
        assert {**g, "confidence": 0, "cached": None} == {**e, "confidence": 0, "cached": None}


def test_concurrent_requests_get_the_answers_they_get_alone(client, lab):
    questions = [e.question for e in lab.dev_examples[:6]]
    alone = [client.post("/api/ask", json={"question": q}).json() for q in questions]
    with ThreadPoolExecutor(8) as pool:
        dev = pool.submit(client.get, "/api/dev", params={"run": 0})
        together = list(pool.map(lambda q: client.post("/api/ask", json={"question": q}).json(), questions))
        assert dev.result().status_code == 200
    for got, expected in zip(together, alone, strict=True):
        assert got["question"] == expected["question"]
        _same_answers(got, expected)


def test_questions_asked_together_are_answered_in_one_batch(lab, monkeypatch):
    """While the model is busy, questions wait; the next holder of the lock answers them all in
    one call per run, and a bad question among them fails alone."""
    calls = []
    for run in lab.runs:
        ask = run.model.ask
        monkeypatch.setattr(run.model, "ask", lambda qs, ask=ask, **kw: calls.append(len(qs)) or ask(qs, **kw))
    questions = [e.question for e in lab.dev_examples[:5]] + ["Where was 日本 born?"]
    alone = {q: lab.ask(q, [0]) for q in questions[:5]}
    lab.answers = AnswerCache(0)  # every question computed again: this test is about the batch
    calls.clear()

    def ask_one(q):
        try:
            return lab.ask(q, [0])
        except ValueError as e:
            return e

    with ThreadPoolExecutor(6) as pool:
        with lab.lock:  # the model is busy: every request has to wait
            futures = [pool.submit(ask_one, q) for q in questions]
            deadline = time.monotonic() + 60
            while len(lab._waiting) < len(questions) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(lab._waiting) == len(questions)
        results = [f.result(timeout=120) for f in futures]
    assert calls[0] == len(questions)  # one batch, then the retries one by one after the bad question
    assert "is not in the vocabulary" in str(results[-1])
    for q, got in zip(questions[:5], results[:5]):
        _same_answers(got, alone[q])


def test_the_page_and_its_script_are_served(client, lab):
    page = client.get("/")
    assert page.status_code == 200 and 'id="question"' in page.text and "/static/app.js" in page.text
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/static/../lab.py").status_code == 404
    runs = client.get("/api/runs").json()["runs"]
    assert [(r["id"], r["name"]) for r in runs] == [(i, r.name) for i, r in enumerate(lab.runs)]


def test_the_copied_span_of_an_answer_written_in_other_letters_is_those_words():
    from attnlab.serve.lab import copied_span

    recalled = "Madang. Papua New Guinea counts Madang among its provinces (code PG-MPM)."
    assert copied_span(recalled, "Papua New Guinea") == [8, 24]
    start = recalled.index("provinces")
    assert copied_span(recalled, "Province") == [start, start + len("provinces")]
    assert copied_span(recalled, "District") is None and copied_span(None, "Province") is None


def test_an_answer_comes_with_its_copied_span_and_its_verdict_in_words(lab, shipped):
    confidences = sorted(a.confidence for a in shipped.ask([RALF, BRYAN]))
    lab.runs[0].rule = Rule(sum(confidences) / 2, None, "test")
    client = TestClient(create_app(lab, rate=0))
    words = {}
    for question in (RALF, BRYAN):
        a = client.post("/api/ask", json={"question": question, "runs": [0]}).json()["answers"][0]
        start = a["recalled"].find(a["answer"])
        assert a["span"] == ([start, start + len(a["answer"])] if start >= 0 and a["answer"] else None)
        assert a["relation"] == "birthplace"
        chance = f"; about {round(100 * a['chance_right'])} in 100 answers this confident are right"
        words[a["given"]] = a["in_words"], chance
    threshold = f"{lab.runs[0].rule.confidence:.2f}"
    assert words[True][0] == f"sure: at or above this model's threshold {threshold}" + words[True][1]
    assert words[False][0] == f"unsure: below this model's threshold {threshold}" + words[False][1]
    assert client.post("/api/ask", json={"question": RALF, "runs": [1]}).json()["answers"][0]["in_words"] \
        .startswith("no abstention rule")


def test_errors_are_in_plain_words():
    from attnlab.serve.lab import plain

    assert plain("question:1: character '日' (U+65E5) is not in the vocabulary") == \
        "character '日' (U+65E5) is not in the vocabulary"
    assert plain("the input exceeds the model's block_size 192") == \
        "the input is longer than this model can read (192 characters)"


def test_runs_are_compared_with_the_libraries_paired_test(client, lab):
    from attnlab.experiments.comparison import paired_test

    got = client.post("/api/compare", json={"runs": [0, 1]})
    assert got.status_code == 200, got.json()
    first, second = got.json()["runs"]
    dev0, dev1 = lab.dev(0), lab.dev(1)
    assert first["paired"] is None and first["text"] == dev0["text"] and second["relations"] == dev1["relations"]
    expected = paired_test([[r["right"] for r in dev1["rows"]]], [[r["right"] for r in dev0["rows"]]]).to_dict()
    assert second["paired"] == expected
    assert client.post("/api/compare", json={"runs": [0]}).json()["error"] == "choose two or more runs to compare"
    assert client.post("/api/compare", json={"runs": [0, 5]}).status_code == 404


def test_an_edited_copy_can_be_asked_at_once(client, lab):
    edit = client.post("/api/edit", json={"run": 0, "person": "Ralf Wadephul", "place": "Paris"}).json()
    served = client.post(f"/api/edit/{edit['id']}/ask").json()
    assert served["run"] == len(lab.runs) - 1
    assert client.post(f"/api/edit/{edit['id']}/ask").json()["run"] == served["run"]  # served once
    a = client.post("/api/ask", json={"question": RALF, "runs": [0, served["run"]]}).json()["answers"]
    assert a[1]["answer"] == edit["new_answer"] and a[0]["answer"] == lab.runs[0].model.ask([RALF])[0].answer
    assert "edited" in client.get("/api/runs").json()["runs"][-1]["name"]
    assert client.post("/api/edit/99/ask").status_code == 404


def test_dev_rows_carry_their_relation(client):
    got = client.get("/api/dev", params={"run": 1}).json()
    assert {r["relation"] for r in got["rows"]} == {"birthplace"} and set(got["relations"]) == {"birthplace"}


def test_an_edit_names_its_relation_and_refuses_one_the_run_lacks(client):
    wrong = client.post("/api/edit", json={"run": 0, "person": "Ralf Wadephul", "place": "Paris", "relation": "river"})
    assert wrong.status_code == 400 and wrong.json()["error"] == \
        "this run's fact set has no relation 'river' (it has: birthplace)"
    got = client.post("/api/edit", json={"run": 0, "person": "Ralf Wadephul", "place": "Paris",
                                         "relation": "birthplace"}).json()
    assert got["question"] == RALF and got["new_answer"] == "Paris"


def test_a_trace_does_not_hold_asks_back(lab, monkeypatch):
    """While a trace is being computed (in the worker), asks are answered: the lab waits for a
    trace under its own lock, never the one asks take."""
    import threading

    started, release = threading.Event(), threading.Event()
    run = lab._trace_worker.run

    def slow(*args, **kwargs):
        started.set()
        assert release.wait(120)
        return run(*args, **kwargs)

    monkeypatch.setattr(lab._trace_worker, "run", slow)
    worker = threading.Thread(target=lab.trace, args=(RALF, 0, 1))
    worker.start()
    try:
        assert started.wait(120)
        asked = lab.ask(RALF, [0])  # answered while the trace is still running
        assert asked["answers"][0]["answer"] == lab.runs[0].model.ask([RALF])[0].answer
        assert worker.is_alive()
    finally:
        release.set()
        worker.join(300)


def _shown_fields(answer: dict) -> dict:
    return {k: v for k, v in answer.items() if k != "cached"}


def test_an_answer_asked_again_comes_from_the_cache_unchanged(lab, monkeypatch):
    """The second ask of a question (in any wording of the same subject and relation) is the
    first one's answer, confidence, verdict and evidence, marked cached, and costs no model
    call; the first is computed."""
    calls = []
    ask = lab.runs[0].model.ask
    monkeypatch.setattr(lab.runs[0].model, "ask", lambda qs, **kw: calls.append(list(qs)) or ask(qs, **kw))
    first = lab.ask(RALF, [0])["answers"][0]
    again = lab.ask(" Where was  Ralf   Wadephul born? ", [0])["answers"][0]
    assert calls == [[RALF]]  # one model call: the second came from the cache
    assert first["cached"] is False and again["cached"] is True
    assert _shown_fields(again) == {**_shown_fields(first), "question": again["question"]}
    (computed,) = ask([RALF], source="question", abstain=None)
    assert (first["answer"], first["confidence"], first["recalled"]) == \
        (computed.answer, computed.confidence, computed.recalled)


def test_the_cache_never_gives_an_answer_of_another_model_or_rule(lab):
    """An entry holds the model and rule it was computed with: a run whose model or rule is
    replaced computes again; an edited copy is a run of its own; a lab without a cache always
    computes."""
    assert lab.ask(RALF, [0])["answers"][0]["cached"] is False
    assert lab.ask(RALF, [0])["answers"][0]["cached"] is True
    lab.runs[0].rule = Rule(0.5, None, "test")
    fresh = lab.ask(RALF, [0])["answers"][0]
    assert fresh["cached"] is False and fresh["abstention"] == lab.runs[0].rule.describe()
    lab.runs[0].model = load(SHIPPED, device="cpu")  # another model object (the same weights)
    assert lab.ask(RALF, [0])["answers"][0]["cached"] is False
    assert lab.ask(RALF, [1])["answers"][0]["cached"] is False  # run 1's own entry
    lab.answers = AnswerCache(0)
    assert [lab.ask(RALF, [0])["answers"][0]["cached"] for _ in range(2)] == [False, False]


def test_the_cache_keeps_at_most_its_size_and_drops_the_least_recently_asked(lab):
    lab.answers = AnswerCache(2)
    questions = [e.question for e in lab.dev_examples[:3]]
    for q in questions:
        lab.ask(q, [1])
    assert len(lab.answers) == 2
    assert lab.ask(questions[0], [1])["answers"][0]["cached"] is False  # the oldest was dropped
    assert lab.ask(questions[2], [1])["answers"][0]["cached"] is True


def test_one_question_asked_twice_in_a_batch_is_computed_once(lab, monkeypatch):
    calls = []
    ask = lab.runs[0].model.ask
    monkeypatch.setattr(lab.runs[0].model, "ask", lambda qs, **kw: calls.append(list(qs)) or ask(qs, **kw))
    from attnlab.serve.lab import _Asked

    asked = [_Asked(0, RALF), _Asked(0, BRYAN), _Asked(0, "Where was Ralf  Wadephul born?")]
    lab._answer_waiting(asked)
    assert calls == [[RALF, BRYAN]]
    assert asked[2].answer.question == asked[2].question
    assert (asked[2].answer.answer, asked[2].answer.confidence) == (asked[0].answer.answer, asked[0].answer.confidence)


def test_a_trace_runs_in_a_process_of_lower_priority(lab):
    """The scheduler gives the CPU to asks before traces, and a trace's Python never holds the
    server's interpreter lock: it runs in the trace worker's process (Linux niceness)."""
    import os
    import sys

    got = lab.trace(RALF, 0, 1)
    pid, niceness = lab._trace_worker.about()
    assert got["answer"] and pid != os.getpid()
    assert lab._trace_worker._holds[0] == 0  # the run's model stays there for the next trace
    from attnlab.core import cpu_settings

    assert pid in cpu_settings._family  # its CPU time is the server's own, not another's load
    if sys.platform == "linux":
        assert niceness > os.getpriority(os.PRIO_PROCESS, 0)


def test_a_model_the_worker_cannot_load_is_traced_on_a_thread_of_lower_priority(lab, monkeypatch):
    """A model that cannot cross to the worker (an attention class it cannot import) is traced
    in the server's process, on a copy, on a thread the scheduler puts after the asks."""
    import os
    import sys
    import threading

    from attnlab.facts import trace as tracing
    from attnlab.serve.trace_worker import NotPortable

    def refused(run):
        raise NotPortable("a class the worker cannot import")

    seen = []
    real = tracing.trace

    def watched(model, *args, **kwargs):
        seen.append((model, threading.current_thread() is not threading.main_thread(),
                     os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) if sys.platform == "linux" else None))
        return real(model, *args, **kwargs)

    monkeypatch.setattr(lab, "_portable", refused)
    monkeypatch.setattr(tracing, "trace", watched)
    got = lab.trace(RALF, 0, 1)
    assert got["answer"] == real(lab.runs[0].model.gpt, lab.runs[0].model.vocab, RALF, samples=1).point.answer
    model, on_a_thread, niceness = seen[0]
    assert on_a_thread and model is not lab.runs[0].model.gpt
    if sys.platform == "linux":
        assert niceness > os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_a_trace_worker_that_died_is_started_again(lab):
    """A worker killed between traces (out of memory, say) costs nothing but a new start: the
    next trace gives the same answer from a new worker."""
    import os
    import signal

    first = lab.trace(RALF, 0, 1)
    pid, _ = lab._trace_worker.about()
    os.kill(pid, signal.SIGKILL)
    again = lab.trace(RALF, 0, 1)
    assert again["recovered"] == first["recovered"] and lab._trace_worker.about()[0] != pid
