"""Run directories you can trust (issue 12, items 2 and 3): a run is never overwritten by
accident, one directory holds one run at a time (a lock file), config.json and metrics.jsonl
describe exactly one run, a resumed run is the checkpoint's run, and a diverged run stops
without saving its broken weights."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlab import cli
from attnlab.training import pipeline
from attnlab.model.checkpoint import TEMP_PATTERN, load_checkpoint
from attnlab.config.settings import TrainConfig
from attnlab.training.rundir import LOCK_NAME, RunDirError

# Tiny runs on the 13-line tiny corpus: 4 examples a step, a few steps.
BASE = ["--preset", "tiny", "--batch-size", "4", "--epochs", "5", "--log-every", "1", "--device", "cpu",
        "--eval-file", ""]
LM = ["--objective", "lm"]  # packed rows: one loss call per step


def _pretrain(tiny_data, run: Path, *extra: str) -> int:
    return cli.main(["pretrain", *BASE, "--corpus", str(tiny_data["corpus"]), "--out-dir", str(run), *extra])


def _files(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run.iterdir())}


def _error(capsys) -> str:
    """The one error line on stderr (the progress bar writes there too)."""
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("attnlab ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _strict_rows(run: Path) -> list[dict]:
    """metrics.jsonl as strict JSON: a bare NaN or Infinity fails."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return [json.loads(line, parse_constant=refuse) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_second_run_into_a_used_directory_is_refused_and_changes_nothing(tiny_data, tmp_path, capsys):
    run = tmp_path / "run"
    assert _pretrain(tiny_data, run, "--max-steps", "2") == 0
    before = _files(run)
    assert sorted(before) == ["checkpoint.safetensors", "config.json", "metrics.jsonl"]  # the lock is gone
    capsys.readouterr()
    assert _pretrain(tiny_data, run, "--max-steps", "3", "--seed", "1") == 2
    err = _error(capsys)
    assert f"{run} already holds a run" in err and "--resume" in err and "--overwrite" in err
    assert _files(run) == before  # checkpoint bytes, metrics and config.json untouched
    with pytest.raises(SystemExit) as e:  # one or the other
        _pretrain(tiny_data, run, "--resume", "--overwrite")
    assert e.value.code == 2


def test_overwrite_replaces_the_run(tiny_data, tmp_path):
    run = tmp_path / "run"
    assert _pretrain(tiny_data, run, "--max-steps", "3") == 0
    assert _pretrain(tiny_data, run, "--max-steps", "2", "--seed", "1", "--overwrite") == 0
    assert [r["step"] for r in _strict_rows(run)] == [1, 2]  # restarted, not appended
    ckpt = load_checkpoint(run)
    assert ckpt.meta["step"] == 2 and ckpt.meta["train_config"]["seed"] == 1
    assert json.loads((run / "config.json").read_text())["train"]["seed"] == 1


def test_the_library_functions_follow_the_same_rules(tiny_data, tmp_path, tiny_config):
    config = TrainConfig(batch_size=4, max_steps=1, log_every=1, checkpoint_every=0, device="cpu")
    quiet = dict(corpus=tiny_data["corpus"], run_dir=tmp_path / "run", log=lambda _m: None)
    pipeline.pretrain(tiny_config, config, **quiet)
    with pytest.raises(RunDirError, match="already holds a run"):
        pipeline.pretrain(tiny_config, config, **quiet)
    rotary = dataclasses.replace(tiny_config, attention="rotary")
    with pytest.raises(RunDirError, match="--attention rotary contradicts the checkpoint's vanilla"):
        pipeline.pretrain(rotary, dataclasses.replace(config, max_steps=2), resume=True, **quiet)
    pipeline.pretrain(rotary, config, overwrite=True, **quiet)
    assert load_checkpoint(tmp_path / "run").model_config.attention == "rotary"


@pytest.mark.parametrize("host", ["this", "other"])
def test_a_directory_in_use_is_refused(tiny_data, tmp_path, capsys, host):
    run = tmp_path / "run"
    run.mkdir()
    lock = {"pid": os.getpid(), "host": socket.gethostname() if host == "this" else "elsewhere.example"}
    (run / LOCK_NAME).write_text(json.dumps(lock))
    assert _pretrain(tiny_data, run, "--max-steps", "1") == 2
    err = _error(capsys)
    where = "on this host" if host == "this" else "on host elsewhere.example"
    assert f"{run} is in use by process {os.getpid()} {where}" in err
    assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME]  # nothing written, the lock kept
    assert json.loads((run / LOCK_NAME).read_text()) == lock


def test_a_stale_lock_is_taken_over_with_a_note(tiny_data, tmp_path, capsys):
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # its pid now names no process (reaped)
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_NAME).write_text(json.dumps({"pid": ended.pid, "host": socket.gethostname()}))
    assert _pretrain(tiny_data, run, "--max-steps", "1") == 0
    out = capsys.readouterr().out
    assert f"note: {run / LOCK_NAME} was left by process {ended.pid}, which no longer runs" in out
    assert not (run / LOCK_NAME).exists() and load_checkpoint(run).meta["step"] == 1


def test_a_dead_holders_half_written_checkpoint_is_removed_when_its_lock_is_taken_over(tiny_data, tmp_path):
    # The killed process started after this one (a long-lived Python session resuming it), so its
    # temporary file is newer than this process: the lock, not the file's age, says it is dead.
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_NAME).write_text(json.dumps({"pid": ended.pid, "host": socket.gethostname()}))
    half = run / TEMP_PATTERN.replace("*", "half")
    half.write_bytes(b"cut short")
    assert _pretrain(tiny_data, run, "--max-steps", "1") == 0
    assert not half.exists() and not list(run.glob(".tmp-*"))


def test_resume_refuses_another_stages_run(tiny_data, tmp_path, capsys):
    pre, ft = tmp_path / "pre", tmp_path / "ft"
    assert _pretrain(tiny_data, pre, "--max-steps", "1") == 0
    assert cli.main(["finetune", *BASE, "--init", str(pre), "--train-file", str(tiny_data["train"]),
                     "--max-steps", "1", "--out-dir", str(ft)]) == 0
    # a finetuning run resumes without repeating --init: the checkpoint records it
    assert cli.main(["finetune", *BASE, "--train-file", str(tiny_data["train"]), "--max-steps", "2",
                     "--out-dir", str(ft), "--resume"]) == 0
    assert load_checkpoint(ft).meta["step"] == 2 and load_checkpoint(ft).meta["init"] == str(pre)
    capsys.readouterr()
    assert cli.main(["finetune", *BASE, "--train-file", str(tiny_data["train"]), "--out-dir", str(pre),
                     "--resume"]) == 2
    assert f"{pre / 'checkpoint.safetensors'} is a pretrain run's checkpoint, not a finetune run's" in _error(capsys)
    assert _pretrain(tiny_data, ft, "--resume") == 2
    assert f"{ft / 'checkpoint.safetensors'} is a finetune run's checkpoint, not a pretrain run's" in _error(capsys)


def test_a_run_that_fails_before_its_first_step_writes_nothing(tiny_data, tmp_path, capsys):
    run = tmp_path / "new" / "run"
    # the dev file asks the people mixed in: refused after the data are read, before training
    assert _pretrain(tiny_data, run, *LM, "--mix-ratio", "1", "--mix-qa", str(tiny_data["train"]),
                     "--held-out", str(tiny_data["dev"])) == 2
    assert "is also asked in" in _error(capsys)  # the mixing guard's message
    assert not (tmp_path / "new").exists()  # no config.json, no lock, not even the directory


def test_resume_with_a_contradicting_flag_names_the_flag_and_both_values(tiny_data, tmp_path, capsys):
    run = tmp_path / "run"
    assert _pretrain(tiny_data, run, "--attention", "rotary", "--max-steps", "2") == 0
    before = _files(run)
    capsys.readouterr()
    assert _pretrain(tiny_data, run, "--resume", "--attention", "vanilla", "--learning-rate", "0.01",
                     "--max-steps", "4") == 2
    err = capsys.readouterr().err.strip().splitlines()
    ckpt = run / "checkpoint.safetensors"
    assert err == [f"attnlab pretrain: error: --attention vanilla contradicts the checkpoint's rotary ({ckpt})",
                   f"attnlab pretrain: error: --learning-rate 0.01 contradicts the checkpoint's 0.003 ({ckpt})"]
    assert _files(run) == before  # config.json and metrics untouched


def test_resume_rebuilds_the_checkpoints_model_and_equals_an_uninterrupted_run(tiny_data, tmp_path):
    cut, straight = tmp_path / "cut", tmp_path / "straight"
    assert _pretrain(tiny_data, cut, "--attention", "rotary", "--dropout", "0.1", "--max-steps", "2") == 0
    assert _pretrain(tiny_data, cut, "--resume", "--max-steps", "4") == 0  # no --attention: the checkpoint's
    assert _pretrain(tiny_data, straight, "--attention", "rotary", "--dropout", "0.1", "--max-steps", "4") == 0
    resumed, whole = load_checkpoint(cut), load_checkpoint(straight)
    assert resumed.model_config.attention == "rotary" and resumed.model_config.dropout == 0.1
    assert resumed.meta["step"] == 4
    for name, value in whole.model_state.items():
        assert torch.equal(resumed.model_state[name], value), name
    assert json.loads((cut / "config.json").read_text())["model"]["attention"] == "rotary"


def test_a_max_steps_before_the_checkpoints_step_is_refused(tiny_data, tmp_path, capsys):
    run = tmp_path / "run"
    assert _pretrain(tiny_data, run, "--max-steps", "3") == 0
    before = _files(run)
    capsys.readouterr()
    assert _pretrain(tiny_data, run, "--resume", "--max-steps", "2") == 2
    err = _error(capsys)
    assert "--max-steps 2 ends the run at step 2, before the checkpoint's step 3" in err
    assert _files(run) == before and load_checkpoint(run).meta["step"] == 3


def test_resume_on_other_data_is_refused(tiny_data, tmp_path, capsys):
    run = tmp_path / "run"
    assert _pretrain(tiny_data, run, "--max-steps", "1") == 0
    other = tmp_path / "other.txt"
    other.write_text(tiny_data["corpus"].read_text() + "\nOne more line.", encoding="utf-8")
    capsys.readouterr()
    assert cli.main(["pretrain", *BASE, "--corpus", str(other), "--out-dir", str(run), "--resume"]) == 2
    assert (f"--corpus {other} contradicts the checkpoint's {tiny_data['corpus']} (other contents)"
            in _error(capsys))
    moved = tmp_path / "moved.txt"  # the same contents elsewhere are the same data
    moved.write_bytes(tiny_data["corpus"].read_bytes())
    assert cli.main(["pretrain", *BASE, "--corpus", str(moved), "--out-dir", str(run), "--resume",
                     "--max-steps", "2"]) == 0


def _failing_loss(after: int, failure):
    """The LM loss, until its ``after``-th call; then ``failure(loss)``."""
    calls = []

    def loss_fn(model, x, y, *segments):
        loss, extras = pipeline.default_loss(model, x, y, *segments)
        calls.append(1)
        return (failure(loss) if len(calls) > after else loss), extras

    return loss_fn


def test_metrics_have_no_duplicate_steps_after_a_crash_and_resume(tiny_data, tmp_path, monkeypatch):
    run = tmp_path / "run"

    def crash(loss):
        raise RuntimeError("the machine went down")

    with monkeypatch.context() as m:  # steps 1-3 logged, a checkpoint at step 2, then a crash
        m.setattr(pipeline, "_loss_fn", lambda config: _failing_loss(3, crash))
        with pytest.raises(RuntimeError, match="went down"):
            _pretrain(tiny_data, run, *LM, "--max-steps", "6", "--checkpoint-every", "2")
    assert [r["step"] for r in _strict_rows(run)] == [1, 2, 3] and not (run / LOCK_NAME).exists()
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "lo')  # a row torn by the crash
    assert _pretrain(tiny_data, run, *LM, "--resume", "--max-steps", "6") == 0
    assert [r["step"] for r in _strict_rows(run)] == [1, 2, 3, 4, 5, 6]
    assert load_checkpoint(run).meta["step"] == 6


@pytest.mark.parametrize("log_every, found", [
    ("1", "the loss became nan by step 4"),  # seen in the step's logged loss
    ("5", "the weights are no longer finite at step 4"),  # not logged before the checkpoint: its check
])
def test_a_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tiny_data, tmp_path, monkeypatch, capsys,
                                                                     log_every, found):
    run = tmp_path / "run"
    monkeypatch.setattr(pipeline, "_loss_fn", lambda config: _failing_loss(3, lambda loss: loss * float("nan")))
    assert _pretrain(tiny_data, run, *LM, "--max-steps", "6", "--checkpoint-every", "2",
                     "--log-every", log_every) == 1  # the run failed its goal (issue 25: exit 1, not bad input)
    err = _error(capsys)
    assert f"{run}: training diverged: {found}" in err
    assert f"the last good checkpoint (step 2) stays in {run / 'checkpoint.safetensors'}" in err
    ckpt = load_checkpoint(run)
    assert ckpt.meta["step"] == 2 and all(torch.isfinite(v).all() for v in ckpt.model_state.values())
    rows = _strict_rows(run)  # valid JSON: a NaN loss is null
    if log_every == "1":
        assert [r["step"] for r in rows] == [1, 2, 3, 4] and rows[-1]["loss"] is None
    assert not (run / LOCK_NAME).exists()
