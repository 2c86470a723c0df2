"""Answers users can trust: held-out people, calibrate, abstention in evaluate and ask, audit."""

from __future__ import annotations

import json
import math

import pytest

import attnlab
from attnlab import cli
from attnlab.trust.policy import AbstainPolicy
from attnlab.trust.stored import FORMAT
from attnlab.trust.audit import corpus_people, invent_people
from attnlab.model.checkpoint import load_checkpoint
from attnlab.data.datasets import documents, read_qa, read_text
from tests.conftest import DATA, PEOPLE, benchmark_fixture
from tests.tiny_runs import ask_rows


def test_finetune_holds_out_the_last_fraction_of_the_training_file(tiny_data, tmp_path, capsys):
    run = tmp_path / "ft"
    assert cli.main(["finetune", "--preset", "tiny", "--corpus", str(tiny_data["corpus"]),
                     "--train-file", str(tiny_data["train"]), "--eval-file", "", "--out-dir", str(run),
                     "--holdout-fraction", "0.25", "--device", "cpu"]) == 0
    assert "(9 questions" in capsys.readouterr().out  # 12 people, the last 3 held out
    assert json.loads((run / "config.json").read_text())["train"]["holdout_fraction"] == 0.25
    assert load_checkpoint(run).meta["train_config"]["holdout_fraction"] == 0.25
    stored = json.loads((run / "abstention.json").read_text())  # fitted on the held-out people, stored
    assert stored["policy"] == {"holdout_file": str(tiny_data["train"]), "holdout_fraction": 0.25, "keep_right": 0.97,
                                "subject_order": "file"}
    assert stored["held_out"]["people"] == 3 and stored["format"] == FORMAT
    # a correction needs right and wrong answers among the held-out people; without both, none
    right = stored["held_out"]["right"]
    assert (stored["correction"] is None) == (right in (0, 3))
    assert stored["correction"] is None or set(stored["correction"]) == {"method", "a", "b", "m"}
    with pytest.raises(SystemExit) as refused:  # the parser checks the flag's bound
        cli.main(["finetune", "--preset", "tiny", "--corpus", str(tiny_data["corpus"]),
                  "--train-file", str(tiny_data["train"]), "--eval-file", "", "--out-dir", str(run),
                  "--holdout-fraction", "1", "--device", "cpu"])
    assert refused.value.code == 2
    assert "argument --holdout-fraction: must be a finite number in [0, 1), got '1'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def recall_run(tmp_path_factory):
    """A tiny recall-format model (lm pretraining with the QA mix, then finetuning) and its data."""
    root = tmp_path_factory.mktemp("trust")
    lines = [f"{n}. {n} was born in {p} and lived there." for n, p in PEOPLE]
    (root / "wiki.txt").write_text("\n".join(lines + ["Where was everyone born? We know."]))
    qa = "".join(f"Where was {n} born?\t{p}\n" for n, p in PEOPLE)
    for name in ("train.tsv", "dev.tsv"):
        (root / name).write_text(qa)
    (root / "questions.tsv").write_text("".join(f"Where was {n} born?\n" for n, _ in PEOPLE))
    common = ["--preset", "tiny", "--qa-format", "recall", "--recall-chars", "40", "--device", "cpu",
              "--corpus", str(root / "wiki.txt")]
    assert cli.main(["pretrain", *common, "--objective", "lm", "--mix-qa", str(root / "train.tsv"),
                     "--mix-ratio", "1", "--epochs", "40", "--batch-size", "4", "--learning-rate", "3e-3", "--held-out", "--eval-file", "",
                     "--out-dir", str(root / "pre")]) == 0
    assert cli.main(["finetune", "--preset", "tiny", "--init", str(root / "pre"), "--corpus", str(root / "wiki.txt"),
                     "--train-file", str(root / "train.tsv"), "--eval-file", "", "--device", "cpu",
                     "--out-dir", str(root / "ft")]) == 0
    return root


def _answers(root):
    from attnlab.model.checkpoint import load_model
    from attnlab.answering.evaluate import answer_questions

    model, vocab, _ = load_model(root / "ft")
    return answer_questions(model, vocab, read_qa(root / "dev.tsv"))


def _between(answers) -> float:
    """A threshold with answers on both sides of it."""
    confidences = sorted({a.confidence for a in answers})
    assert len(confidences) >= 2, "the tiny model gave every answer the same confidence"
    mid = len(confidences) // 2
    return (confidences[mid - 1] + confidences[mid]) / 2


def test_evaluate_abstains_with_an_empty_line_in_input_order(recall_run, capsys):
    answers = _answers(recall_run)
    threshold = _between(answers)
    out = recall_run / "pred.txt"
    assert cli.main(["evaluate", str(recall_run / "ft"), "--eval-file", str(recall_run / "dev.tsv"), "--predictions", str(out),
                     "--abstain-below", str(threshold), "--device", "cpu"]) == 0
    expected = [a.answer if a.confidence >= threshold else "" for a in answers]
    assert "" in expected and any(expected)  # both kinds of line are exercised
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == expected
    text = capsys.readouterr().out
    answered = sum(bool(e) or a.confidence >= threshold for e, a in zip(expected, answers))
    assert f"answered {answered}/12 (" in text and "correct on the answered questions" in text


def test_ask_says_i_dont_know_below_the_threshold(recall_run, capsys):
    answers = _answers(recall_run)
    threshold = _between(answers)
    questions = [a.question for a in answers]
    assert cli.main(["ask", str(recall_run / "ft"), *questions, "--abstain-below", str(threshold),
                     "--evidence", "", "--device", "cpu"]) == 0
    rows = ask_rows(capsys.readouterr().out)
    assert [r["question"] for r in rows] == questions  # input order
    for row, a in zip(rows, answers):
        shown = row["answer"]
        assert shown == (a.answer.strip() if a.confidence >= threshold else "I don't know")


def test_ask_on_stdin_says_i_dont_know_line_by_line(recall_run, capsys, monkeypatch):
    import io
    import sys

    answers = _answers(recall_run)
    threshold = _between(answers)
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{a.question}\n" for a in answers)))
    assert cli.main(["ask", str(recall_run / "ft"), "--abstain-below", str(threshold),
                     "--evidence", "", "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    assert [r["answer"] for r in ask_rows(captured.out)] == [
        a.answer.strip() if a.confidence >= threshold else "I don't know" for a in answers]
    assert f"abstain when confidence < {threshold:.3g}" in captured.err  # the rule, told once
    assert captured.err.count("abstain when") == 1


def test_the_fit_reads_only_held_out_training_labels(recall_run, capsys):
    """calibrate on two files with the same questions but different labels: the fitted rule is
    the same, though the measured accuracy differs; the fit set is the training file's tail."""
    wrong = recall_run / "dev-wrong.tsv"
    wrong.write_text("".join(f"{e.question}\tNowhere\n" for e in read_qa(recall_run / "dev.tsv")))
    rules = []
    for name, f in [("a", recall_run / "dev.tsv"), ("b", wrong)]:
        assert cli.main(["calibrate", str(recall_run / "ft"), "--eval-file", str(f), "--out-dir", str(recall_run / name),
                         "--holdout-file", str(recall_run / "train.tsv"), "--holdout-fraction", "0.25",
                         "--device", "cpu"]) == 0
        out = capsys.readouterr().out
        rules.append([ln for ln in out.splitlines() if ln.startswith("abstain when")])
        assert "ECE (15 equal-width bins)" in out and "AUROC" in out
        low, high = json.loads((recall_run / name / "calibration.json").read_text())["ece_by_chance"]
        assert f"a calibrated confidence scores {low:.3f}-{high:.3f} on these " in out  # beside the ECE
        assert (recall_run / name / "reliability.png").stat().st_size > 0
        assert (recall_run / name / "coverage.png").stat().st_size > 0
    assert rules[0] == rules[1] and len(rules[0]) == 1
    assert "3 held-out people" in rules[0][0]  # the last quarter of 12 training people
    a = json.loads((recall_run / "a" / "calibration.json").read_text())
    b = json.loads((recall_run / "b" / "calibration.json").read_text())
    assert b["right"] == 0 and a["rule"]["confidence"] == b["rule"]["confidence"]
    policy = a["rule"]["policy"]  # the abstention settings, saved with the result
    assert (policy["holdout_fraction"], policy["holdout_file"]) == (0.25, str(recall_run / "train.tsv"))


def test_familiarity_is_the_probability_of_the_whole_name_or_of_its_least_likely_character(recall_run):
    import math

    import torch

    from attnlab.trust.abstention import name_familiarity
    from attnlab.model.checkpoint import load_model

    model, vocab, _ = load_model(recall_run / "ft")
    names = ["Ada Brook", "Fay Dunmore", "Jun Sato"]
    whole = name_familiarity(model, vocab, names)  # padded to the longest
    least = name_familiarity(model, vocab, names, measure="character")
    for name, w, c in zip(names, whole, least):
        ids = torch.tensor([vocab.encode(name + ".")])
        logp = model(ids)[0][0, :-1].log_softmax(-1).gather(1, ids[0, 1:, None])
        assert w == pytest.approx(math.exp(logp.sum().item()), rel=1e-4)
        assert c == pytest.approx(math.exp(logp.min().item()), rel=1e-4)
        assert w < c
    with pytest.raises(ValueError, match="unknown name familiarity measure 'mean'"):
        name_familiarity(model, vocab, names, measure="mean")


def test_a_rule_stored_without_a_measure_reads_the_least_likely_character():
    from attnlab.trust.abstention import Rule
    from attnlab.trust.stored import stored_json, stored_rules

    fit = {"holdout_file": "t.tsv", "holdout_fraction": 0.1, "keep_right": 0.97, "subject_order": "file"}
    text = stored_json("d", fit, {"both": Rule(0.5, 1e-6, "h"), "confidence": Rule(0.4, None, "h")}, None,
                       {"people": 3, "right": 2})
    data = json.loads(text)
    assert data["rules"]["both"]["measure"] == "name" and "measure" not in data["rules"]["confidence"]
    assert stored_rules(data)["both"].measure == "name"
    del data["rules"]["both"]["measure"]  # as the shipped model's file, stored before measures
    old = stored_rules(data)["both"]
    assert old.measure == "character" and "least likely character" in old.describe()
    assert old.answers(0.6, 2e-6) and not old.answers(0.6, 5e-7) and not old.answers(0.3, 2e-6)


def test_audit_reports_invented_against_dev_people(recall_run, capsys):
    out = recall_run / "audit"
    assert cli.main(["audit", str(recall_run / "ft"), "--names", "20", "--out-dir", str(out),
                     "--corpus", str(recall_run / "wiki.txt"), "--eval-file", str(recall_run / "dev.tsv"),
                     "--train-file", str(recall_run / "train.tsv"), "--holdout-file", str(recall_run / "train.tsv"),
                     "--holdout-fraction", "0.25", "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    assert "invented people abstained:" in text and "dev people abstained:" in text and "entropy" in text
    report = json.loads((out / "audit.json").read_text())
    assert report["chosen"]["invented"] == 20 and report["never"]["invented_abstained"] == 0
    assert sum(c for _, c in report["never"]["top_places"]) <= 20
    assert (out / "audit.png").stat().st_size > 0
    assert len((out / "invented.txt").read_text().splitlines()) == 20


def test_an_audit_of_a_fact_set_speaks_of_subjects_and_answers():
    """A learned fact set's subjects are no people and its answers no places: the report says
    subjects, questions and answers; the course's model keeps people and places."""
    from types import SimpleNamespace

    from attnlab.trust.audit import AuditReport, audit_words

    course = SimpleNamespace(config=SimpleNamespace(relations=None))
    firms = SimpleNamespace(config=SimpleNamespace(relations=[["city", "Which city is {subject} based in?"]]))
    assert audit_words(course) == ("people", "people", "places")
    report = AuditReport("a rule", 10, 9, 20, 2, 15, 14)
    text = "\n".join(report.lines(audit_words(firms)))
    assert "invented subjects abstained: 9/10" in text and "dev questions abstained: 2/20" in text
    assert "answers given to the 0 invented subjects" in text and "people" not in text


def test_invented_names_never_appear_in_the_corpus_and_are_seeded():
    docs = documents(read_text(DATA / "wiki.txt"))
    names = invent_people(docs, 300, seed=1)
    assert len(set(names)) == 300
    text = "\n".join(docs)
    assert not [n for n in names if n in text]
    assert invent_people(docs, 300, seed=1) == names and invent_people(docs, 300, seed=2) != names
    firsts = {p.split()[0] for p in corpus_people(docs)}
    assert all(n.split()[0] in firsts for n in names)


@pytest.mark.parametrize("argv, problem", [
    (["evaluate", "RUN", "--abstain-below", "1.5"], "--abstain-below must lie in [0, 1], got 1.5"),
    (["ask", "RUN", "Where was Ada Brook born?", "--abstain-below", "-0.1"], "--abstain-below must lie in [0, 1]"),
    (["evaluate", "RUN", "--abstain-below", "0.5", "--abstain", "auto"], "not both"),
    (["audit", "RUN", "--names", "0"], "--names must be a positive number of people, got 0"),
    (["audit", "RUN", "--names", "-3"], "--names must be a positive number of people"),
    (["calibrate", "RUN", "--eval-file", "QUESTIONS"], "questions.tsv:1: no answer label: calibrate needs"),
])
def test_bad_input_is_a_one_line_error_with_exit_2(recall_run, capsys, argv, problem):
    argv = [str(recall_run / "ft") if a == "RUN" else str(recall_run / "questions.tsv") if a == "QUESTIONS" else a
            for a in argv]
    assert cli.main([*argv, "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and problem in err


def test_name_echo_counts_answers_that_are_a_namesakes_place():
    from attnlab.trust.audit import name_echo

    real = {"Ada Brook": "Paris", "Bela Kron": "Lima", "Cato Fenn": "Oslo"}
    # Ada Kron: namesakes in Paris and Lima; Cato Brook: Oslo and Paris; Bela Fenn: Lima and Oslo
    echo = name_echo(["Ada Kron", "Cato Brook", "Bela Fenn", "Ada Fenn"], ["Lima", "Rome", "Oslo", ""], real)
    assert (echo.echoed, echo.answered) == (2, 3)  # the empty answer (abstained) is not counted
    # shuffled: answers Lima, Rome, Oslo; namesake places {Paris, Lima}, {Oslo, Paris}, {Lima, Oslo}
    # hit 1, 1 and 2 of the 3 answers: (1 + 1 + 2) / 9
    assert echo.chance == pytest.approx(4 / 9)


def test_pretraining_leaves_held_out_people_out_of_the_qa_mix(tiny_data, tmp_path, monkeypatch):
    from attnlab.training import pipeline

    mixed_in = []
    real = pipeline.qa_sequences

    def spy(examples, *rest, **kw):
        mixed_in.extend(e.question for e in examples)
        return real(examples, *rest, **kw)

    monkeypatch.setattr(pipeline, "qa_sequences", spy)  # as pipeline.py imports it
    assert cli.main(["pretrain", "--preset", "tiny", "--objective", "lm", "--qa-format", "recall",
                     "--recall-chars", "40", "--corpus", str(tiny_data["corpus"]), "--mix-qa", str(tiny_data["train"]),
                     "--mix-ratio", "1", "--holdout-fraction", "0.25", "--held-out", "--eval-file", "",
                     "--max-steps", "1", "--out-dir", str(tmp_path / "pre"), "--device", "cpu"]) == 0
    assert mixed_in == [f"Where was {n} born?" for n, _ in PEOPLE[:9]]  # the last 3 of 12 held out


def test_abstain_names_withholds_only_unfamiliar_names(recall_run, capsys):
    out = recall_run / "pred-names.txt"
    assert cli.main(["evaluate", str(recall_run / "ft"), "--eval-file", str(recall_run / "dev.tsv"), "--predictions", str(out),
                     "--abstain", "names", "--holdout-file", str(recall_run / "train.tsv"),
                     "--holdout-fraction", "0.25", "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    assert "abstain when name familiarity <" in text and "confidence <" not in text
    assert len(out.read_text(encoding="utf-8").split("\n")) == 13  # 12 lines, order and count kept


ABSTAINING = ["ask", "evaluate", "calibrate", "audit", "serve"]


@pytest.mark.parametrize("command", ABSTAINING)
def test_the_abstention_flags_are_the_policys_fields(command):
    """One definition (issue 24): every field of AbstainPolicy is a flag with its help and default."""
    import argparse
    import dataclasses

    from attnlab.trust.policy import MODE_HELP, AbstainPolicy

    parser = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    shown = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    for f in dataclasses.fields(AbstainPolicy):
        flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
        if f.name == "mode":  # each mode it offers, as the policy describes it (issue 45: not below's)
            assert all(MODE_HELP[m] in shown[flag].help for m in shown[flag].choices), flag
            assert MODE_HELP["below"] not in shown[flag].help
        else:
            assert f.metadata["help"] in shown[flag].help, flag
        assert shown[flag].default == (None if f.name == "mode" else f.default), flag  # mode: the policy's
    assert shown["--abstain"].choices == ["off", "auto", "names", "run"]  # below: --abstain-below P
    assert "(default: run)" in shown["--abstain"].help  # one default, the policy's, for every command


@pytest.mark.parametrize("argv, policy", [
    (["--abstain-below", "0.3"], dict(mode="below", below=0.3)),
    (["--abstain", "names", "--keep-right", "0.8", "--holdout-file", "t.tsv", "--holdout-fraction", "0.2"],
     dict(mode="names", keep_right=0.8, holdout_file="t.tsv", holdout_fraction=0.2)),
    ([], dict(mode="run")),  # the policy's default: the run's rule (settled by AbstainPolicy.resolved)
])
def test_the_flags_read_back_into_the_policy_calibrate_saves(argv, policy):
    from attnlab.cli.trust import policy_from_args
    from attnlab.trust.policy import AbstainPolicy

    args = cli.build_parser().parse_args(["calibrate", "RUN", *argv])
    assert policy_from_args(args) == AbstainPolicy(**policy)


# ---- the rule stored with the run (issue 49 item 5), Kalai's score, the temperature ------------
def _no_fit(*args, **kwargs):
    raise AssertionError("the rule was fitted again instead of read from abstention.json")


def test_calibrate_stores_the_rule_with_the_run_and_ask_reads_it(recall_run, capsys, monkeypatch):
    from attnlab.trust import abstention
    from attnlab.trust.stored import STORED_NAME

    run, fit = recall_run / "ft", ["--holdout-file", str(recall_run / "train.tsv"), "--holdout-fraction", "0.5"]
    assert cli.main(["calibrate", str(run), "--eval-file", str(recall_run / "dev.tsv"), "--out-dir",
                     str(recall_run / "cal-stored"), "--device", "cpu", *fit]) == 0
    stored = json.loads((run / STORED_NAME).read_text())
    assert stored == json.loads((recall_run / "cal-stored" / STORED_NAME).read_text())
    assert stored["policy"]["holdout_fraction"] == 0.5 and set(stored["rules"]) == {"both", "name", "confidence"}
    report = json.loads((recall_run / "cal-stored" / "calibration.json").read_text())
    assert set(report["kalai"]) == {"0.5", "0.75", "0.9"} and set(report["rule"]["kalai"]) == {"0.5", "0.75", "0.9"}
    capsys.readouterr()
    monkeypatch.setattr(abstention, "fit_rules", _no_fit)
    assert cli.main(["ask", str(run), PEOPLE[0][0], "--evidence", "", "--device", "cpu", *fit]) == 0
    assert "(stored: fitted on" in capsys.readouterr().err
    # the Python API reads the same stored rule, once, with the model
    model = attnlab.load(run)
    policy = AbstainPolicy(holdout_file=str(recall_run / "train.tsv"), holdout_fraction=0.5)
    assert model.rule_for(policy).describe().startswith(cli_rule_text(stored))


def cli_rule_text(stored) -> str:
    from attnlab.trust.abstention import Rule

    return Rule(None, stored["rules"]["name"]["familiarity"]).describe()


def test_a_stored_rule_for_other_weights_or_settings_is_not_used(recall_run, monkeypatch):
    from attnlab.trust import abstention
    from attnlab.trust.stored import matches, weights_digest

    model = attnlab.load(recall_run / "ft")
    fit = AbstainPolicy().fit_fields(model.checkpoint.meta)
    stored = {"weights": weights_digest(model.gpt), "policy": fit}
    assert matches(stored, weights_digest(model.gpt), fit)
    assert not matches({**stored, "weights": "0" * 64}, weights_digest(model.gpt), fit)
    assert not matches(stored, weights_digest(model.gpt), {**fit, "keep_right": 0.5})
    model.stored = {**stored, "weights": "0" * 64, "rules": {}}
    monkeypatch.setattr(abstention, "fit_rules", _no_fit)
    with pytest.raises(AssertionError, match="fitted again"):
        model.rule_for(AbstainPolicy(mode="names"))


def test_the_weights_digest_is_kept_until_a_weight_changes(tiny_config):
    import hashlib

    import torch

    from attnlab.model.gpt import GPT
    from attnlab.trust.stored import weights_digest

    def hashed(model):  # the digest computed from scratch, as the stored file names it
        h = hashlib.sha256()
        for name, tensor in sorted(model.state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().contiguous().numpy().tobytes())
        return h.hexdigest()

    model = GPT(tiny_config)
    first = weights_digest(model)
    assert first == hashed(model) == weights_digest(model)
    with torch.no_grad():  # an in-place edit, as the editors make
        next(model.parameters())[0, 0] += 1.0
    assert weights_digest(model) == hashed(model) != first
    other = GPT(tiny_config)
    other.load_state_dict(model.state_dict())  # weights copied in: the same digest
    assert weights_digest(other) == weights_digest(model)
    with torch.no_grad():
        model.load_state_dict(GPT(tiny_config).state_dict())  # weights replaced wholesale
    assert weights_digest(model) == hashed(model) != weights_digest(other)


def test_a_stored_rule_of_another_format_is_refitted_and_said_so(tmp_path, caplog):
    from attnlab.trust.stored import read_stored

    (tmp_path / "abstention.json").write_text(json.dumps({"format": 1, "temperature": 2.0}))
    assert read_stored(tmp_path) is None
    assert "format 1, this one reads 3 and 4" in caplog.text and "attnlab calibrate" in caplog.text
    (tmp_path / "abstention.json").write_text("{not json")
    assert read_stored(tmp_path) is None  # a damaged file: fitted again, quietly


def test_a_stored_rule_that_does_not_read_is_refitted_and_said_so(tmp_path, caplog):
    from attnlab.trust.stored import FORMAT, read_stored

    good = {"format": FORMAT, "weights": "w", "policy": {}, "correction": None,
            "rules": {"both": {"confidence": 0.5, "familiarity": 1e-6, "how": "h", "measure": "name"}}}
    (tmp_path / "abstention.json").write_text(json.dumps(good))
    assert read_stored(tmp_path) == good
    for damaged in ({"measure": "loudness"}, {"confidence": "high"}):
        rules = {"both": {**good["rules"]["both"], **damaged}}
        (tmp_path / "abstention.json").write_text(json.dumps({**good, "rules": rules}))
        assert read_stored(tmp_path) is None
    assert "cannot be read (unknown name familiarity measure 'loudness'" in caplog.text
    (tmp_path / "abstention.json").write_text(json.dumps({**good, "correction": {"method": "beta calibration"}}))
    assert read_stored(tmp_path) is None  # a correction without its numbers


def test_a_stored_rule_of_the_format_before_joint_thresholds_reads_as_written(tmp_path):
    """A format-3 file (the shipped model's, written before rules held a joint threshold) is
    read, its "both" rule the two thresholds it was stored with; the format written now stores
    the joint threshold and reads it back."""
    from attnlab.trust.abstention import Rule
    from attnlab.trust.stored import FORMAT, read_stored, stored_json, stored_rules

    old = {"format": 3, "weights": "w", "policy": {}, "correction": None,
           "rules": {"both": {"confidence": 0.5, "familiarity": 1e-6, "how": "h", "measure": "name"}}}
    (tmp_path / "abstention.json").write_text(json.dumps(old))
    both = stored_rules(read_stored(tmp_path))["both"]
    assert (both.confidence, both.familiarity, both.joint) == (0.5, 1e-6, None)
    fit = {"holdout_file": "t", "holdout_fraction": 0.1, "keep_right": 0.97, "subject_order": "hashed"}
    data = json.loads(stored_json("w", fit, {"both": Rule(None, None, "h", joint=-2.5)}, None, {}))
    assert data["format"] == FORMAT and data["rules"]["both"]["joint"] == -2.5
    assert data["rules"]["both"]["measure"] == "name"  # the joint check reads the name too
    assert stored_rules(data)["both"].joint == -2.5 and stored_rules(data)["both"].needs_familiarity


def test_the_default_policy_is_settled_by_what_the_run_held_out():
    assert AbstainPolicy().resolved({"train_config": {"holdout_fraction": 0.2}})[0].mode == "auto"
    assert AbstainPolicy().resolved({})[0].mode == "names"
    assert AbstainPolicy(mode="off").resolved({}) == (AbstainPolicy(mode="off"), "")


def test_a_fit_records_the_runs_subject_order_and_one_stored_before_orders_is_of_file_order():
    from attnlab.trust.stored import matches

    assert AbstainPolicy().fit_fields({"train_config": {"holdout_fraction": 0.1, "subject_order": "hashed"}}
                                      )["subject_order"] == "hashed"
    fit = AbstainPolicy(holdout_file="t.tsv").fit_fields({"train_config": {"holdout_fraction": 0.1}})
    assert fit["subject_order"] == "file"  # a run that records no order was trained in the file's
    before = {"weights": "w", "policy": {"holdout_file": "t.tsv", "holdout_fraction": 0.1, "keep_right": 0.97}}
    assert matches(before, "w", fit)  # an older run's stored rule is still read, not refitted each time
    assert not matches(before, "w", {**fit, "subject_order": "hashed"})


def test_kalai_score_rewards_abstaining_over_guessing():
    from attnlab.trust.calibration import kalai_score, kalai_scores

    right, given = [True, True, False, False], [True, True, True, False]
    assert kalai_score(right, given, 0.5) == 2 - 1
    assert kalai_score(right, given, 0.75) == 2 - 3
    assert kalai_score(right, [True] * 4, 0.9) == pytest.approx(2 - 18)
    assert kalai_scores(right) == {"0.5": 0.0, "0.75": -4.0, "0.9": pytest.approx(-16.0)}
    with pytest.raises(ValueError, match="confidence target"):
        kalai_score(right, given, 1.0)


def test_a_correction_fitted_on_overconfident_answers_lowers_the_ece():
    from attnlab.trust.calibration import corrected, expected_calibration_error, fit_correction

    # answers claimed at 0.9 and 0.6 but right half and a fifth as often: overconfident
    conf = [0.9] * 100 + [0.6] * 100
    right = [i % 2 == 0 for i in range(100)] + [i % 5 == 0 for i in range(100)]
    fixed = corrected(conf, fit_correction(conf, right))
    assert fixed[0] == pytest.approx(0.5, abs=0.02) and fixed[-1] == pytest.approx(0.2, abs=0.02)
    assert expected_calibration_error(fixed, right) < 0.02 < expected_calibration_error(conf, right)
    assert corrected([0.5], None) == [0.5]


def test_a_correction_lifts_the_far_too_low_confidence_of_recalled_answers():
    from attnlab.trust.calibration import corrected, expected_calibration_error, fit_correction

    # a recall answer's confidence multiplies two probabilities: right answers at 1e-6
    conf = [1e-6] * 100 + [1e-3] * 100 + [0.9] * 300
    right = [i % 10 < 6 for i in range(100)] + [i % 10 < 8 for i in range(100)] + [i % 20 < 19 for i in range(300)]
    fixed = corrected(conf, fit_correction(conf, right))
    assert expected_calibration_error(fixed, right) < 0.03
    assert expected_calibration_error(conf, right) > 0.3
    assert fixed[0] < fixed[100] < fixed[200]  # still in the order of the confidence


def test_a_correction_recovers_the_beta_calibration_its_answers_were_drawn_from():
    import math
    import random

    from attnlab.trust.calibration import Correction, fit_correction

    truth, rng = Correction(0.5, 1.0, 0.3), random.Random(0)
    conf = [rng.random() ** 3 for _ in range(20_000)]
    right = [rng.random() < truth(c) for c in conf]
    fitted = fit_correction(conf, right)
    assert (fitted.a, fitted.b, fitted.m) == pytest.approx((truth.a, truth.b, truth.m), abs=0.1)
    assert Correction.from_dict(fitted.to_dict()) == fitted and Correction.from_dict(None) is None
    assert math.isclose(truth(1.0), truth(1 - 1e-12)) and 0 < truth(0.0) < 1  # 0 and 1 stay finite


def test_a_correction_never_reverses_the_order_of_the_confidence():
    from attnlab.trust.calibration import fit_correction

    # right more often at LOW confidence: the slope that would reverse the order is dropped
    conf = [0.1] * 100 + [0.5] * 100 + [0.9] * 100
    right = [i % 10 < 8 for i in range(100)] + [i % 10 < 5 for i in range(100)] + [i % 10 < 2 for i in range(100)]
    fitted = fit_correction(conf, right)
    assert fitted.a >= 0 and fitted.b >= 0
    grid = [i / 100 for i in range(1, 100)]
    assert all(fitted(x) <= fitted(y) for x, y in zip(grid, grid[1:]))


def _parts_sample(n: int, seed: int):
    """Recall answers whose recall part decides right from wrong while the read-out part is noise:
    their product, the confidence, ranks them worse than the recall part alone."""
    import math
    import random

    rng = random.Random(seed)
    conf, right, parts = [], [], []
    for _ in range(n):
        recall = -rng.random() * 6  # ln p of the answer's characters as recalled
        read = -rng.random() * 6  # ln p of the read-out: unrelated to rightness here
        ok = rng.random() < 1 / (1 + math.exp(-(2 * recall + 6)))
        parts.append((read, 0.0, recall))
        conf.append(math.exp(read + recall))
        right.append(ok)
    return conf, right, parts


def test_a_correction_weighs_the_confidences_parts_apart_when_answers_have_them():
    from attnlab.trust.calibration import (Correction, PartsCorrection, auroc, corrected, expected_calibration_error,
                                           fit_correction)

    conf, right, parts = _parts_sample(3000, 0)
    weighed, beta = fit_correction(conf, right, parts), fit_correction(conf, right)
    assert isinstance(weighed, PartsCorrection) and isinstance(beta, Correction)
    assert weighed.recall == pytest.approx(2.0, abs=0.3) and weighed.read < 0.3  # the part that tells
    conf, right, parts = _parts_sample(3000, 1)  # judged on answers it was not fitted on
    chance = corrected(conf, weighed, parts)
    assert expected_calibration_error(chance, right) < 0.03 < expected_calibration_error(corrected(conf, beta), right)
    assert auroc(chance, right) > auroc(conf, right) + 0.05  # it ranks them better than the product
    assert Correction.from_dict(weighed.to_dict()) == weighed  # stored and read back as itself
    assert weighed.chance(0.0, (-1.0, 0.0, -1.0)) == weighed.chance(0.0, None)  # never closed: every part floored
    grid = [-8 + i / 4 for i in range(33)]  # it rises with every part
    for k in range(3):
        values = [weighed.chance(0.5, tuple(g if j == k else -0.3 for j in range(3))) for g in grid]
        assert all(x <= y for x, y in zip(values, values[1:]))


def test_a_correction_keeps_beta_calibration_where_weighing_the_parts_predicts_no_better():
    import math

    from attnlab.trust.calibration import Correction, cross_validated_loss, fit_correction

    # parts that hold nothing the product does not: the read-out alone
    conf, right, _ = _parts_sample(600, 3)
    only_read = [(math.log(c), 0.0, 0.0) for c in conf]
    assert isinstance(fit_correction(conf, right, only_read), Correction)
    assert isinstance(fit_correction(conf, right, [None] * len(conf)), Correction)  # answers without parts
    import numpy as np

    assert cross_validated_loss(np.ones((4, 1)), np.ones(4)) == math.inf  # no fold has right and wrong


def test_a_rule_fitted_with_a_correction_thresholds_the_chance_and_is_stored_so():
    from attnlab.trust.abstention import HeldOut, Rule, rules_from
    from attnlab.trust.calibration import fit_correction
    from attnlab.trust.stored import stored_json, stored_rules

    conf, right, parts = _parts_sample(400, 2)
    correction = fit_correction(conf, right, parts)
    rules = rules_from(HeldOut("the held-out", right, conf, [1.0] * len(conf), parts=parts), 0.9, correction)
    rule = rules["confidence"]
    assert rule.chance == correction and rule.describe().startswith("abstain when chance right <")
    chance = [correction.chance(c, p) for c, p in zip(conf, parts)]
    given = [rule.answers(c, 1.0, p) for c, p in zip(conf, parts)]
    assert given == [x >= rule.confidence for x in chance]  # the chance decides, not the confidence
    assert sum(g and r for g, r in zip(given, right)) >= 0.9 * sum(right)
    both = rules["both"]  # every name equally familiar: the joint check answers as the chance does
    assert both.chance == correction and "logit(chance right)" in both.describe()
    assert [both.answers(c, 1.0, p) for c, p in zip(conf, parts)] == given
    text = stored_json("w", {"holdout_file": "t", "holdout_fraction": 0.1, "keep_right": 0.9, "subject_order": "file"},
                       rules, correction, {"people": len(conf), "right": sum(right)})
    back = stored_rules(json.loads(text))
    assert back["both"].chance == correction and back["both"].joint == both.joint
    assert back["confidence"].confidence == rule.confidence
    assert back["name"].chance is None
    older = json.loads(text)  # a rule stored before rules thresholded the chance: the confidence
    del older["rules"]["both"]["score"]
    assert stored_rules(older)["both"].chance is None and Rule(0.5).describe() == "abstain when confidence < 0.5"


def test_a_correction_needs_right_and_wrong_answers():
    from attnlab.trust.calibration import fit_correction

    with pytest.raises(ValueError, match="needs right and wrong answers .* 3 of 3 are right"):
        fit_correction([0.2, 0.5, 0.9], [True] * 3)


def test_evaluate_reports_kalai_beside_accuracy(recall_run, capsys):
    assert cli.main(["evaluate", str(recall_run / "ft"), "--eval-file", str(recall_run / "dev.tsv"), "--predictions",
                     str(recall_run / "pred-kalai.txt"), "--abstain", "off", "--device", "cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    correct, n = out["correct"], out["questions"]
    assert out["kalai"]["0.5"] == correct - (n - correct)


def test_the_readme_question_is_answered_with_the_shipped_rule_without_a_fit(capsys, monkeypatch):
    """Issue 49 item 5: the README's first question is answered under the default rule, which
    ask reads from models/cpu/abstention.json instead of fitting it."""
    from attnlab.trust import abstention

    monkeypatch.setattr(abstention, "fit_rules", _no_fit)
    monkeypatch.setattr(abstention, "held_out_signals", _no_fit)
    assert cli.main(["ask", "models/cpu", "Where was Alfred Mele born?", "--evidence", "", "--json"]) == 0
    captured = capsys.readouterr()
    record = json.loads(captured.out)
    assert record["given"] and record["answer"] == record["model_answer"] == "Detroit"
    assert "(stored: fitted on the last 0.2 of data/birth_places_train.tsv" in captured.err


def test_an_answer_carries_its_chance_of_being_right_from_the_run_s_correction(capsys):
    """Issue 49 item 4: the stored correction is what a user reads, in the API, ask's table and
    ask --json; weights changed since the fit (an edit) show none rather than a stale figure."""
    import torch

    from attnlab.trust.stored import stored_correction

    question = "Where was Alfred Mele born?"
    model = attnlab.load("models/cpu", device="cpu")
    correction = stored_correction(model.stored)
    [answer] = model.ask(question, abstain=None)
    assert answer.chance_right == pytest.approx(correction(answer.confidence))
    assert abs(answer.chance_right - answer.confidence) > 0.01  # the corrected figure, not the raw one
    assert cli.main(["ask", "models/cpu", question, "--evidence", "", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chance_right"] == pytest.approx(answer.chance_right)
    assert cli.main(["ask", "models/cpu", question, "--evidence", ""]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert "chance right" in header and f"{answer.chance_right:.2f}" in row.split()
    with torch.no_grad():
        next(model.gpt.parameters()).view(-1)[0] += 1e-3
    assert model.correction() is None and model.ask(question, abstain=None)[0].chance_right is None


def test_the_page_says_how_often_answers_this_confident_are_right():
    from attnlab.serve.lab import in_words
    from attnlab.trust.abstention import Rule

    rule = Rule(0.5, None, "test")
    assert in_words(rule, 0.7, True, 0.874) == ("sure: at or above this model's threshold 0.50; about 87 in 100 "
                                                "answers this confident are right")
    assert in_words(rule, 0.3, False, None) == "unsure: below this model's threshold 0.50"
    joint = Rule(None, None, "test", joint=-1.0)  # the default rule: the name and the answer together
    assert in_words(joint, 0.7, True, None) == "sure: the name is familiar enough to this model for an answer this likely"
    assert in_words(joint, 0.3, False, 0.3) == ("unsure: the name is too unfamiliar to this model for an answer this "
                                                "unlikely; about 30 in 100 answers this confident are right")


def test_subjects_of_one_word_are_invented_from_halves_of_their_names():
    """A set whose subjects are single words (elements, countries): an invented subject is the
    first half of one name and the second half of another, in no corpus line."""
    from attnlab.trust.audit import name_parts

    docs = ["Hydrogen. It is the lightest.", "Carbon. Coal is mostly carbon.", "Oxygen. We breathe it.",
            "Nitrogen. Most of the air.", "Argon. A noble gas."]
    heads, tails, joiner, recipe = name_parts(docs)
    assert joiner == "" and "Hydr" in heads and "ogen" in tails and "half" in recipe
    names = invent_people(docs, 8, seed=3)
    text = "\n".join(docs)
    assert len(set(names)) == 8 and not [n for n in names if n in text]
    assert all(any(n.startswith(h) and n[len(h):] in tails for h in heads) for n in names)
    with pytest.raises(ValueError, match="too few subjects to recombine.*1 one-word name"):
        invent_people(["Hydrogen. It is the lightest.", "the rest. of it"], 2)


joint_rule_benchmark = benchmark_fixture("joint_rule")


def test_the_benchmarks_two_checks_are_the_rule_the_joint_check_replaced(joint_rule_benchmark):
    """benchmarks/joint_rule.py's baseline: the name check keeping 99.5% of the held-out names,
    then the chance threshold keeping the conformal count raised by the name check's share."""
    from attnlab.trust.abstention import HeldOut, rules_from

    confidence = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05]
    held = HeldOut("ten people", [True] * 9 + [False], confidence, [1.0] * 10)
    rules = rules_from(held, 0.75)
    before = joint_rule_benchmark.two_checks(held, 0.75, None, rules["name"])
    # (0 + 1) / (10 + 1) of real names below the least familiar: ceil((0.75 + 1/11) * 10) = 9 kept
    assert (before.confidence, before.familiarity) == (0.1, rules["name"].familiarity) and before.joint is None


def test_the_benchmarks_yardstick_keeps_exactly_the_share_of_the_answers_it_is_placed_on(joint_rule_benchmark):
    """benchmarks/joint_rule.py's yardstick rows: a threshold placed on dev keeping ceil(keep x
    its right answers), the most wrong answers any threshold on that score could withhold."""
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
    right = [True, False, True, True, False, True, False, True]  # right: 0.9 0.7 0.6 0.4 0.2
    assert joint_rule_benchmark.placed(scores, right, 0.8) == 0.4  # ceil(0.8 x 5) = 4 kept
    assert joint_rule_benchmark.placed(scores, right, 1.0) == 0.2
    assert joint_rule_benchmark.placed(scores, [False] * 8, 0.97) == math.inf  # nothing right: answer nothing


confidence_parts_benchmark = benchmark_fixture("confidence_parts")


def test_the_rule_benchmarks_name_a_pipelines_stage_with_its_run(confidence_parts_benchmark):
    """Runs of one recipe (knowledge.py's RUN/finetune) stay apart in the rule benchmarks' tables."""
    label = confidence_parts_benchmark.run_label
    assert label("runs/k15-s0/finetune") == "k15-s0/finetune" and label("runs/k15-s1/finetune/") == "k15-s1/finetune"
    assert label("models/cpu") == "cpu" and label("runs/firms-joint-s1") == "firms-joint-s1"
