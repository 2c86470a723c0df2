"""No surprises, no lost work (issue 25): no command overwrites a file without --overwrite or
writes over what it reads; outputs go next to the run they describe; --json prints one
parseable document; a run lock is never left empty."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from attnlab import cli
from attnlab.core import outputs
from attnlab.training import rundir
from attnlab.core.paths import PathError
from tests.conftest import DATA
from tests.tiny_runs import ask_rows, train_tiny


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A seconds-long recall-format run on the real data files."""
    return train_tiny(tmp_path_factory.mktemp("surprises") / "run")


@pytest.fixture
def questions(tmp_path) -> Path:
    path = tmp_path / "dev.tsv"
    path.write_text("Where was Ada Lovelace born?\tLondon\nWhere was Alan Turing born?\tLondon\n", encoding="utf-8")
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _evaluate(run: Path, questions: Path, *extra: str) -> int:
    return cli.main(["evaluate", str(run), "--eval-file", str(questions), "--device", "cpu", *extra])


# ---- evaluate: predictions ---------------------------------------------------------------------
def test_a_second_evaluate_to_the_same_file_is_refused_and_the_first_is_unchanged(run, questions, tmp_path, capsys):
    out = tmp_path / "pred.txt"
    assert _evaluate(run, questions, "--predictions", str(out)) == 0
    out.write_text("earlier work\n")
    assert _evaluate(run, questions, "--predictions", str(out), "--abstain", "names") == 2
    err = capsys.readouterr().err
    assert f"{out}: already exists; pass --overwrite" in err and err.count("\n") == 1
    assert out.read_text() == "earlier work\n"
    assert _evaluate(run, questions, "--predictions", str(out), "--overwrite") == 0
    assert out.read_text() != "earlier work\n"


def test_the_default_predictions_file_is_not_replaced_either(run, questions, capsys):
    """The default file may already hold these very predictions (learn writes a run's dev
    predictions there, and its suggested evaluate reads the same file): it is kept as it is and
    the command succeeds; other predictions there are refused, after decoding, and kept."""
    default = run / "predictions-dev.txt"
    default.unlink(missing_ok=True)
    assert _evaluate(run, questions) == 0
    assert default.exists()
    before = _sha(default)
    capsys.readouterr()
    assert _evaluate(run, questions) == 0
    assert f"predictions already in {default}" in capsys.readouterr().out
    assert _sha(default) == before
    default.write_text("earlier work\n" * len(questions.read_text().splitlines()))
    assert _evaluate(run, questions) == 2
    err = capsys.readouterr().err
    assert f"{default}: already exists and holds other predictions; pass --overwrite" in err and err.count("\n") == 1
    assert default.read_text().startswith("earlier work\n")
    default.unlink()


@pytest.mark.parametrize("target", ["checkpoint", "questions"])
def test_evaluate_never_writes_over_a_file_it_reads_even_with_overwrite(run, questions, target, capsys):
    path = run / "checkpoint.safetensors" if target == "checkpoint" else questions
    before = _sha(path)
    assert _evaluate(run, questions, "--predictions", str(path), "--overwrite") == 2
    assert "this command reads; choose another path" in capsys.readouterr().err
    assert _sha(path) == before


def test_write_new_keeps_a_file_that_appeared_meanwhile(tmp_path):
    path = tmp_path / "out.txt"
    outputs.write_new(path, "first\n")
    with pytest.raises(PathError, match="written by another process meanwhile"):
        outputs.write_new(path, "second\n")
    assert path.read_text() == "first\n"
    assert os.listdir(tmp_path) == ["out.txt"]  # no temporary file left


# ---- outputs next to the run -------------------------------------------------------------------
def test_a_shipped_models_outputs_go_beside_its_models_directory_not_the_current_one(tmp_path, monkeypatch):
    from attnlab.model.shipped import output_dir

    shipped = tmp_path / "checkout" / "models" / "m"
    shipped.mkdir(parents=True)
    (shipped / "provenance.json").write_text("{}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert output_dir(Path("../checkout/models/m")) == tmp_path / "checkout" / "runs" / "m"


def test_plot_writes_into_the_run_and_refuses_to_replace_an_image(run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may land here
    assert cli.main(["plot", str(run)]) == 0
    image = run / "plots" / "curves.png"
    assert str(image) in capsys.readouterr().out
    assert image.stat().st_size > 0 and not (tmp_path / "runs").exists()
    before = _sha(image)
    assert cli.main(["plot", str(run)]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert _sha(image) == before
    assert cli.main(["plot", str(run), "--overwrite"]) == 0


def test_calibrate_writes_into_the_run_says_which_rule_and_refuses_a_second_time(run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["calibrate", str(run), "--eval-file", str(DATA / "birth_dev.tsv"), "--device", "cpu",
                     "--json"]) == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    out = run / "calibrate"
    assert document["written"] == [str(out / f) for f in ("reliability.png", "coverage.png", "calibration.json",
                                                          "abstention.json", "answers.tsv")]
    assert {"total", "right", "ece", "auroc", "accuracy_at_coverage", "rule", "kalai", "ece_corrected"} <= document.keys()
    # the tiny run held no one out of finetuning: the name rule, and the reason, are told
    assert "--abstain names (the default for" in captured.err and "no people held out" in captured.err
    assert not (tmp_path / "runs").exists()
    before = _sha(out / "calibration.json")
    assert cli.main(["calibrate", str(run), "--eval-file", str(DATA / "birth_dev.tsv"), "--device", "cpu"]) == 2
    assert "reliability.png: already exists; pass --overwrite" in capsys.readouterr().err
    assert _sha(out / "calibration.json") == before


# ---- the run lock ------------------------------------------------------------------------------
def test_a_lock_that_cannot_be_written_is_removed_not_left_empty(tmp_path, monkeypatch):
    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rundir.os, "fsync", full_disk)
    with pytest.raises(rundir.RunDirError, match="cannot write the lock file .No space left on device"):
        with rundir.claim(tmp_path / "run"):
            pass
    assert not (tmp_path / "run" / rundir.LOCK_NAME).exists()
    monkeypatch.undo()
    with rundir.claim(tmp_path / "run"):  # the next run is not refused as "in use"
        assert (tmp_path / "run" / rundir.LOCK_NAME).exists()


# ---- --json ------------------------------------------------------------------------------------
def test_evaluate_json_is_one_document_with_the_documented_keys(run, questions, tmp_path, capsys):
    out = tmp_path / "pred.txt"
    assert _evaluate(run, questions, "--predictions", str(out), "--json", "--abstain-below", "0.5") == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert {"checkpoint", "eval_file", "questions", "correct", "accuracy", "interval_95", "abstention",
            "written"} <= document.keys()
    assert document["questions"] == 2 and document["written"] == [str(out)]
    assert {"rule", "answered", "questions", "answered_correct"} <= document["abstention"].keys()
    assert "correct" in captured.err  # the human lines went to stderr


def test_evaluate_keeps_the_course_metric_and_reports_abstention_beside_it(run, tmp_path, capsys):
    dev = tmp_path / "dev.tsv"
    dev.write_text("".join(line + "\n" for line in (DATA / "birth_dev.tsv").read_text().splitlines()[:8]))
    raw, default = tmp_path / "raw.txt", tmp_path / "default.txt"
    assert _evaluate(run, dev, "--predictions", str(raw), "--abstain", "off", "--json") == 0
    off = json.loads(capsys.readouterr().out)
    assert off["abstention"] is None
    assert _evaluate(run, dev, "--predictions", str(default), "--json") == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    # the course's metric: every question answered, the same predictions and score as --abstain off
    assert default.read_bytes() == raw.read_bytes() and len(default.read_text().splitlines()) == 8
    assert (document["correct"], document["questions"]) == (off["correct"], 8)
    figures = document["abstention"]
    assert {"rule", "questions", "answered", "abstained", "answered_correct"} <= figures.keys()
    assert figures["answered"] + figures["abstained"] == 8 and 0 <= figures["answered_correct"] <= figures["answered"]
    assert "abstain when name familiarity <" in figures["rule"]  # the run's rule: it held no one out
    assert (f"answered {figures['answered']}/8 (" in captured.err and f"abstained {figures['abstained']}/8" in captured.err
            and "correct on the answered questions, " in captured.err and "Kalai score under the rule: t=0.5: " in captured.err
            and "; the predictions answer every question" in captured.err)


def test_evaluate_says_when_the_runs_rule_cannot_be_fitted(run, questions, tmp_path, capsys):
    assert _evaluate(run, questions, "--predictions", str(tmp_path / "p.txt"),
                     "--holdout-file", str(tmp_path / "missing.tsv")) == 0
    out = capsys.readouterr().out
    assert "correct; predictions written to" in out
    assert f"abstention figures not measured: {tmp_path / 'missing.tsv'}" in out


def test_ask_json_prints_one_object_per_question(run, capsys):
    questions = ["Where was Ada Lovelace born?", "Where was Alan Turing born?"]
    assert cli.main(["ask", str(run), *questions, "--device", "cpu", "--json", "--abstain-below", "0.99"]) == 0
    lines = capsys.readouterr().out.splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["question"] for r in records] == questions
    for r in records:
        assert {"question", "answer", "given", "model_answer", "confidence", "complete", "evidence",
                "recalled"} <= r.keys()
        assert (r["answer"] is None) == (not r["given"]) == (r["confidence"] < 0.99)


def test_ask_json_on_stdin_streams_json_lines(run, capsys, monkeypatch):
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.StringIO("Where was Ada Lovelace born?\n\nWhere was Alan Turing born?\n"))
    assert cli.main(["ask", str(run), "--device", "cpu", "--json", "--evidence", ""]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == 2 and all(r["evidence"] is None and r["given"] for r in records)


def test_json_turns_undefined_numbers_into_null():
    from attnlab.cli.results import dumps

    assert json.loads(dumps({"auroc": float("nan"), "loss": [1.0, float("inf")]})) == {"auroc": None,
                                                                                         "loss": [1.0, None]}


def test_audit_json_and_its_default_directory(run, capsys):
    assert cli.main(["audit", str(run), "--names", "5", "--device", "cpu", "--json",
                     "--eval-file", str(DATA / "birth_dev.tsv")]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {"confidence", "name", "both", "chosen", "never", "name_echo", "written"} <= document.keys()
    assert document["chosen"]["invented"] == 5
    assert all(Path(p).parent == run / "audit" and Path(p).exists() for p in document["written"])


# ---- progress in logs --------------------------------------------------------------------------
def test_progress_off_a_terminal_is_plain_lines_without_carriage_returns(monkeypatch):
    import io

    from attnlab.core import progress

    quick = io.StringIO()  # not a terminal
    assert sum(progress.progress_bar(range(50), desc="answering", file=quick)) == sum(range(50))
    assert quick.getvalue() == ""  # done before the first progress line was due
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)  # as if every step took long
    log = io.StringIO()
    assert sum(progress.progress_bar(range(50), desc="answering", file=log, leave=False)) == sum(range(50))
    text = log.getvalue()
    assert chr(13) not in text and text.endswith(chr(10))
    assert text.splitlines()[-1].startswith("answering: 100%") and "50/50" in text


def test_pretrain_into_a_log_file_has_no_carriage_returns(tmp_path, capsys):
    train_tiny(tmp_path / "run")
    assert "\r" not in capsys.readouterr().err


# ---- summaries ---------------------------------------------------------------------------------
def test_pretrain_ends_with_a_summary_of_loss_dev_time_outputs_and_next_command(tmp_path, questions, capsys):
    run = train_tiny(tmp_path / "run", "--eval-file", str(questions), "--eval-every", "2")
    lines = capsys.readouterr().out.splitlines()
    end = lines[lines.index(next(ln for ln in lines if ln.startswith("pretraining done:"))):]
    assert end[0].startswith("pretraining done: 4 steps,") and "final loss" in end[0] and "wall time" in end[0]
    assert re.match(r"dev at step 4: [0-2]/2 \([0-9.]+%\) \[95% CI [0-9.]+-[0-9.]+%\] answered correctly", end[1])
    assert "stored" in end[1]
    assert end[2] == f"outputs: {run / 'checkpoint.safetensors'}, {run / 'metrics.jsonl'}, {run / 'config.json'}"
    assert end[3] == f"next: attnlab finetune --init {run} --out-dir {run}-finetuned"


def test_finetune_ends_with_a_summary_and_its_dev_score(tiny_data, tmp_path, capsys):
    run = tmp_path / "ft"
    assert cli.main(["finetune", "--preset", "tiny", "--corpus", str(tiny_data["corpus"]), "--device", "cpu",
                     "--train-file", str(tiny_data["train"]), "--eval-file", str(tiny_data["dev"]),
                     "--out-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert "\nfinetuning done: " in out and "\ndev: " in out and "/12 (" in out
    assert f'next: attnlab ask {run} "Where was Ada Lovelace born?"' in out


# ---- --max-steps -------------------------------------------------------------------------------
@pytest.mark.parametrize("objective", ["lm", "span"])
def test_max_steps_stops_inside_the_full_schedule_for_every_objective(tiny_data, tmp_path, objective):
    """The learning rates of a run stopped by --max-steps are the first ones of the whole run."""
    def lrs(name: str, *extra: str) -> list[float]:
        assert cli.main(["pretrain", "--preset", "tiny", "--objective", objective, "--corpus", str(tiny_data["corpus"]),
                         "--epochs", "4", "--batch-size", "2", "--warmup-tokens", "10", "--log-every", "1",
                         "--eval-file", "", "--device", "cpu", "--out-dir", str(tmp_path / name), *extra]) == 0
        rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        return [r["lr"] for r in rows if "lr" in r]

    full, stopped = lrs("full"), lrs("stopped", "--max-steps", "3")
    assert len(stopped) == 3 and len(full) > 6
    assert stopped == full[:3]
    assert stopped[-1] > full[-1]  # still high: the decay belongs to the whole run


# ---- flags that only matter with another flag --------------------------------------------------
def test_mix_qa_without_a_mix_ratio_is_an_error_not_silently_inert(tiny_data, tmp_path, capsys):
    code = cli.main(["pretrain", "--preset", "tiny", "--objective", "lm", "--corpus", str(tiny_data["corpus"]),
                     "--mix-qa", str(tiny_data["train"]), "--held-out", "--eval-file", "", "--device", "cpu",
                     "--out-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"--mix-qa {tiny_data['train']} mixes nothing without --mix-ratio > 0 (preset tiny: 0)" in err
    assert not (tmp_path / "run").exists()


def test_compare_with_no_variant_named_is_an_error_not_every_variant(tiny_data, tmp_path, capsys):
    code = cli.main(["compare", "--preset", "tiny", "--variants", " , ", "--out-dir", str(tmp_path / "c"),
                     "--corpus", str(tiny_data["corpus"]), "--train-file", str(tiny_data["train"]),
                     "--eval-file", str(tiny_data["dev"]), "--device", "cpu"])
    assert code == 2 and "names no variant" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_compare_json_lists_the_rows_and_files(tiny_data, tmp_path, capsys):
    out = tmp_path / "c"
    assert cli.main(["compare", "--preset", "tiny", "--variants", "vanilla", "--no-scratch", "--max-steps", "2",
                     "--n-layer", "1", "--n-embd", "16", "--block-size", "48", "--out-dir", str(out),
                     "--corpus", str(tiny_data["corpus"]), "--train-file", str(tiny_data["train"]),
                     "--eval-file", str(tiny_data["dev"]), "--device", "cpu", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [r["kind"] for r in document["rows"]] == ["baseline", "variant"]
    assert document["written"] == [str(out / f) for f in ("results.md", "results.json", "dev_accuracy.png")]
    assert all(Path(f).exists() for f in document["written"])


def test_attention_draws_into_the_run_and_refuses_to_replace_its_heatmaps(run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["attention", str(run), "Ada", "--device", "cpu"]) == 0
    heatmap = run / "attention" / "layer0.png"
    assert heatmap.stat().st_size > 0 and not (tmp_path / "runs").exists()
    before = _sha(heatmap)
    assert cli.main(["attention", str(run), "Bob", "--device", "cpu"]) == 2
    assert f"{heatmap}: already exists; pass --overwrite" in capsys.readouterr().err
    assert _sha(heatmap) == before
    assert cli.main(["attention", str(run), "Bob", "--device", "cpu", "--overwrite"]) == 0
    assert _sha(heatmap) != before


# ---- abstention by default ---------------------------------------------------------------------
def test_ask_says_i_dont_know_by_default_where_the_runs_rule_abstains(capsys):
    shipped = Path(__file__).resolve().parents[1] / "models" / "cpu"
    question = "Where was Albert Einstein born?"  # not in the corpus: the model makes a place up
    assert cli.main(["ask", str(shipped), question, "--device", "cpu", "--evidence", ""]) == 0
    captured = capsys.readouterr()
    (row,) = ask_rows(captured.out)
    assert (row["question"], row["answer"]) == (question, "I don't know") and row["note"].startswith("withheld: ")
    # the shipped model holds out the last fifth of its training file: the fitted rule, named
    assert f"--abstain auto (the default for {shipped}: it records holding out" in captured.err
    assert cli.main(["ask", str(shipped), question, "--device", "cpu", "--evidence", "", "--abstain", "off"]) == 0
    raw = capsys.readouterr()
    assert ask_rows(raw.out)[0]["answer"] != "I don't know" and "abstain" not in raw.err


# ---- bounds and typos, checked before any work -------------------------------------------------
@pytest.mark.parametrize("argv, problem", [
    (["pretrain", "--preset", "tiny", "--objective", "lm", "--mix-ratio", "1e6"],
     "argument --mix-ratio: must be a finite number in [0, 100], got '1e6'"),
    (["audit", "{run}", "--names", "3000000"], "--names must be at most 100,000 (minutes of decoding on a CPU already), got 3000000"),
    (["ask", "{run}", "Where was Ada\nLovelace born?"], "<argument>:1: a question is one line"),
])
def test_out_of_bounds_and_multi_line_input_is_refused_before_any_work(run, tmp_path, capsys, argv, problem):
    argv = [a.format(run=run) for a in argv] + ["--device", "cpu"]
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse's own refusal
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and problem in err and err.count("\n") == 1


def test_an_unknown_top_level_setting_in_a_config_file_is_an_error(tiny_data, tmp_path, capsys):
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"corpsu": str(tiny_data["corpus"]), "train": {"epochs": 1}}))
    with pytest.raises(SystemExit) as refused:
        cli.main(["pretrain", "--preset", "tiny", "--config", str(settings), "--out-dir", str(tmp_path / "r")])
    assert refused.value.code == 2
    assert f"{settings}: unknown setting 'corpsu'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_data_dir_redirects_data_files_but_not_an_output_path(run, tmp_path, monkeypatch):
    data = tmp_path / "elsewhere"
    data.mkdir()
    (data / "dev.tsv").write_text("Where was Ada Lovelace born?\tLondon\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["evaluate", str(run), "--data-dir", str(data), "--eval-file", "data/dev.tsv",
                     "--predictions", "data/pred.txt", "--device", "cpu"]) == 0
    assert (tmp_path / "data" / "pred.txt").is_file() and not (data / "pred.txt").exists()


@pytest.mark.parametrize("questions, kwargs, error, words", [
    ("", {}, ValueError, "<ask>:1: empty question"),
    (["Where was Ada born?", "  "], {}, ValueError, "<ask>:2: empty question"),
    (None, {}, TypeError, "a question (str) or a list of them"),
    (5, {}, TypeError, "a question (str) or a list of them"),
    (b"Where was Ada born?", {}, TypeError, "a question (str) or a list of them"),
    ([b"Where was Ada born?"], {}, TypeError, "<ask>:1: a question must be a str, got bytes"),
    ("Where was Ada born?", {"batch_size": 0}, ValueError, "batch_size must be a positive integer, got 0"),
    ("Where was Ada born?", {"batch_size": True}, ValueError, "batch_size must be a positive integer, got True"),
    ("Where was Ada\nLovelace born?", {}, ValueError, "<ask>:1: a question is one line"),
])
def test_the_api_refuses_what_is_no_question_with_a_clear_error(run, questions, kwargs, error, words):
    import attnlab

    model = attnlab.load(run, device="cpu")
    with pytest.raises(error) as refused:
        model.ask(questions, **kwargs)
    assert words in str(refused.value)


# ---- loading checks what the weights mean ------------------------------------------------------
def _saved_tiny(tmp_path: Path, poison: bool = False) -> Path:
    import torch

    from attnlab.model.checkpoint import save_checkpoint
    from attnlab.config.settings import ModelConfig
    from attnlab.model.gpt import GPT
    from attnlab.data.vocab import Vocab

    vocab = Vocab.from_text("abc ?")
    model = GPT(ModelConfig(vocab_size=len(vocab), block_size=8, n_layer=1, n_head=1, n_embd=8))
    if poison:
        with torch.no_grad():
            model.head.weight[0, 0] = float("nan")
    return save_checkpoint(tmp_path / "run" / "checkpoint.safetensors", model, vocab)


def test_a_checkpoint_whose_vocabulary_was_altered_is_refused(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import save_file

    from attnlab.model.checkpoint import CheckpointError, load_checkpoint

    path = _saved_tiny(tmp_path)
    with safe_open(str(path), framework="pt") as f:
        tensors, metadata = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    header = json.loads(metadata["attnlab"])
    header["vocab"][2], header["vocab"][3] = header["vocab"][3], header["vocab"][2]  # same size, other meaning
    save_file(tensors, str(path), metadata={"attnlab": json.dumps(header)})
    with pytest.raises(CheckpointError, match="metadata .* does not match the checksum"):
        load_checkpoint(path)


def test_non_finite_weights_with_a_valid_checksum_are_refused(tmp_path, capsys):
    from attnlab.model.checkpoint import CheckpointError, load_checkpoint

    path = _saved_tiny(tmp_path, poison=True)
    with pytest.raises(CheckpointError, match="tensor model.head.weight holds NaN or infinite values"):
        load_checkpoint(path)
    assert cli.main(["ask", str(path.parent), "Where was a born?", "--abstain", "off", "--evidence", ""]) == 2
    assert "NaN or infinite" in capsys.readouterr().err


# ---- clearer messages --------------------------------------------------------------------------
def test_bad_utf8_on_stdin_is_named_as_such(run, capsys, monkeypatch):
    import io
    import sys

    raw = io.BytesIO(b"Where was Ada Lovelace born?\nWhere was J\xf6rg born?\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape"))
    assert cli.main(["ask", str(run), "--device", "cpu", "--abstain", "off", "--evidence", ""]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == "attnlab ask: error: <stdin>:2: not UTF-8 text (attnlab reads questions as UTF-8)"
    assert len(ask_rows(captured.out)) == 1  # the good line was answered (after the table's header)


def test_ctrl_c_while_starting_exits_130_without_a_traceback(monkeypatch, capsys):
    def interrupted(**_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "main", interrupted)
    assert cli.entry() == 130
    assert "Traceback" not in capsys.readouterr().err


def test_ctrl_c_while_the_program_loads_torch_exits_130_without_a_traceback():
    """A real SIGINT to `python -m attnlab` a moment after it starts, while it imports (torch
    takes seconds to load): the package face imports nothing heavy, and __main__ catches it."""
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import REPO

    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    assert "torch" not in subprocess.run([sys.executable, "-c", "import sys, attnlab; print(sorted(sys.modules))"],
                                         env=env, capture_output=True, text=True, check=True).stdout
    def as_from_a_terminal():
        # a process started in the background may inherit SIGINT ignored or blocked (Python then
        # keeps it ignored): the child gets what a program started from a terminal has
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    proc = subprocess.Popen([sys.executable, "-m", "attnlab", "variants"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_terminal)
    # Ctrl-C again every 0.2 s until it stops (a single early signal can land where the
    # interpreter or an extension's import does not turn it into KeyboardInterrupt)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    # 130: KeyboardInterrupt caught by __main__; -SIGINT: stopped before Python took the signal
    assert proc.returncode in (130, -signal.SIGINT) and "Traceback" not in err, (proc.returncode, err)


def test_the_api_loads_the_shipped_model_from_any_directory(tmp_path, monkeypatch):
    import attnlab

    monkeypatch.chdir(tmp_path)
    model = attnlab.load("models/cpu", device="cpu")
    assert model.config.qa_format == "recall"


def test_a_wrong_data_dir_variable_is_named_when_a_data_file_is_missing(tmp_path, capsys, monkeypatch):
    from attnlab.core import datafiles

    monkeypatch.setenv(datafiles.DATA_DIR_ENV, str(tmp_path / "nowhere"))
    assert cli.main(["baseline"]) == 2
    err = capsys.readouterr().err
    assert f"--train-file does not exist (data/ files are read from {tmp_path / 'nowhere'}, set by " \
           f"${datafiles.DATA_DIR_ENV})" in err


def test_ask_takes_its_questions_after_its_options_too(run, capsys):
    question = "Where was Ada Lovelace born?"
    assert cli.main(["ask", str(run), "--json", "--abstain", "off", question, "--evidence", ""]) == 0
    assert json.loads(capsys.readouterr().out)["question"] == question
