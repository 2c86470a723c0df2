"""The Python API: attnlab.load gives a ready model that answers in one call, as `attnlab ask`
does; the README's example runs as written."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

import attnlab
from attnlab import cli
from attnlab.data.datasets import DataError
from attnlab.model.shipped import ship
from attnlab.data.vocab import VocabError
from tests.conftest import REPO
from tests.tiny_runs import ask_rows, train_tiny

QUESTIONS = ["Where was Ralf Wadephul born?", "Where was Joseph Baggaley born?"]


@pytest.fixture(scope="module", params=["recall", "direct"])
def run(request, tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp(request.param) / "run", recall=request.param == "recall")


def _readme_api_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S)
    found = [b for b in blocks if "attnlab.load(" in b]
    assert len(found) == 1, "the README should have one attnlab.load example"
    return found[0]


def test_the_readme_example_runs_against_a_trained_model(run, tmp_path, monkeypatch):
    ship(run, tmp_path / "models" / "cpu", {"command": "test"})  # where the example looks
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_readme_api_example(), "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    for question, line in zip(QUESTIONS, lines):
        assert re.fullmatch(re.escape(question) + r" -> .* \(confidence [01]\.\d\d\)", line)
    model = attnlab.load(run)
    assert lines[2] == f"{model.config.qa_format} {model.train_config.learning_rate}"


def test_ask_abstains_by_default_as_the_ask_command_does(run, capsys):
    """One default (issue 49): model.ask and `attnlab ask` withhold the same answers."""
    model = attnlab.load(run, device="cpu")
    answers = model.ask(QUESTIONS)
    capsys.readouterr()
    assert cli.main(["ask", str(run), *QUESTIONS, "--evidence", "", "--device", "cpu"]) == 0
    printed = ask_rows(capsys.readouterr().out)
    assert [p["answer"] for p in printed] == [a.answer.strip() or "I don't know" for a in answers]
    assert model.rule_for() is model.rule_for()  # fitted (or read) once, kept with the model


def test_ask_answers_as_the_ask_command_does(run, capsys):
    model = attnlab.load(run, device="cpu")
    answers = model.ask(QUESTIONS, abstain=None)
    assert [a.question for a in answers] == QUESTIONS
    assert all(0.0 <= a.confidence <= 1.0 for a in answers)
    assert (answers[0].recalled is not None) == (model.config.qa_format == "recall")
    capsys.readouterr()
    assert cli.main(["ask", str(run), *QUESTIONS, "--evidence", "", "--device", "cpu", "--abstain", "off"]) == 0
    printed = ask_rows(capsys.readouterr().out)
    assert [(p["question"], p["answer"], p["confidence"]) for p in printed] == [
        (a.question, a.answer.strip(), f"{a.confidence:.2f}") for a in answers]


def test_a_checkpoint_file_loads_like_its_run_directory(run):
    from_dir, from_file = attnlab.load(run), attnlab.load(run / "checkpoint.safetensors")
    assert from_dir.config == from_file.config and from_dir.vocab.to_list() == from_file.vocab.to_list()
    assert from_dir.ask(QUESTIONS[0]) == from_file.ask([QUESTIONS[0]])
    assert not from_dir.gpt.training


def test_a_bad_question_is_an_error_naming_it(run):
    model = attnlab.load(run)
    with pytest.raises(VocabError, match=r"^<ask>:2: character '☃'"):
        model.ask([QUESTIONS[0], "Where was Ada ☃ born?"])
    if model.config.qa_format == "recall":  # it needs a person to recall
        with pytest.raises(DataError, match=r"^<ask>:1: the question 'Who is Ada\?' matches no relation"):
            model.ask(["Who is Ada?"])
        lenient = model.ask(["Who is Ada?", QUESTIONS[0]], strict=False)
        assert lenient[0].answer == "" and lenient[0].problem.startswith("I can't parse this")
        assert lenient[1].problem is None and lenient[1].relation == "birthplace"


def test_one_loader_for_the_api_and_the_commands(run):
    """attnlab.load wraps model.checkpoint.load_model, which resolves device "auto" itself."""
    from attnlab.core.devices import resolve_device
    from attnlab.model.checkpoint import load_model

    gpt, vocab, checkpoint = load_model(run, device="auto")
    assert next(gpt.parameters()).device == resolve_device("auto") and not gpt.training
    loaded = attnlab.load(run)
    assert loaded.vocab.itos == vocab.itos and loaded.checkpoint.meta == checkpoint.meta
    assert all(a.equal(b) for a, b in zip(loaded.gpt.state_dict().values(), gpt.state_dict().values()))


def test_ask_can_abstain_from_python(run):
    """Abstention is in the library: a Rule withholds answers, as `ask --abstain-below` does."""
    from attnlab.trust.abstention import Rule

    model = attnlab.load(run)
    plain = model.ask(QUESTIONS, abstain=None)
    assert [a.answer for a in model.ask(QUESTIONS, abstain=Rule(confidence=0.0))] == [a.answer for a in plain]
    withheld = model.ask(QUESTIONS, abstain=Rule(confidence=1.01))  # no answer is that sure
    assert [a.answer for a in withheld] == ["", ""] and [a.withheld for a in withheld] == [a.answer for a in plain]
    for wrong in (False, 0.8, "off"):  # not a rule: said so before any model work, not deep in it
        with pytest.raises(TypeError, match="abstain takes None \\(answer everything\\), a Rule or an AbstainPolicy"):
            model.ask(QUESTIONS, abstain=wrong)


def test_the_fitted_rule_is_the_one_ask_fits(run, capsys):
    model = attnlab.load(run)
    rule = model.abstention_rule()
    assert rule.joint is not None and rule.needs_familiarity  # "both", as --abstain auto
    assert cli.main(["ask", str(run), QUESTIONS[0], "--abstain", "auto"]) == 0
    assert rule.describe() in capsys.readouterr().err
    assert model.abstention_rule(kind="confidence").familiarity is None


def test_ask_takes_an_abstention_policy(run):
    """A policy (attnlab/trust/policy.py) is what the abstention flags say; ask fits its rule."""
    from attnlab.trust.policy import AbstainPolicy

    model = attnlab.load(run)
    plain = model.ask(QUESTIONS, abstain=None)
    strict = model.ask(QUESTIONS, abstain=AbstainPolicy(mode="below", below=1.0))
    assert [a.withheld or a.answer for a in strict] == [a.answer for a in plain]
    assert all(a.answer == "" for a, p in zip(strict, plain) if p.confidence < 1.0)
    auto = model.ask(QUESTIONS, abstain=AbstainPolicy(mode="auto"))
    assert auto == model.ask(QUESTIONS, abstain=model.abstention_rule())  # the rule ask --abstain auto fits
    assert model.ask(QUESTIONS, abstain=AbstainPolicy(mode="off")) == plain
    with pytest.raises(ValueError, match="below is the threshold of mode 'below'"):
        AbstainPolicy(below=0.5)
    with pytest.raises(ValueError, match="keep_right must be a finite number in"):
        AbstainPolicy(mode="auto", keep_right=2.0)
