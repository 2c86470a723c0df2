"""--tensorboard: the metrics rows of metrics.jsonl also as TensorBoard scalars next to it, and a
one-line error when the optional package is missing."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from attnlab import cli
from tests.conftest import DATA
from tests.tiny_runs import train_tiny

HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="the optional tensorboard package is not installed "
                    "(pip install -e '.[test]' installs it, as CI does)")
def test_event_files_hold_the_metrics_rows(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = train_tiny(tmp_path / "run", "--tensorboard", "--eval-file", str(DATA / "birth_dev.tsv"), "--eval-every", "2")
    assert list(run.glob("events.out.tfevents.*")), "no event file next to metrics.jsonl"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    events = EventAccumulator(str(run))
    events.Reload()
    steps = [r for r in rows if "loss" in r]
    evals = [r for r in rows if "dev_total" in r]
    loss = events.Scalars("train/loss")
    assert [e.step for e in loss] == [r["step"] for r in steps]
    assert [e.value for e in loss] == pytest.approx([r["loss"] for r in steps])
    assert [e.value for e in events.Scalars("train/lr")] == pytest.approx([r["lr"] for r in steps])
    accuracy = events.Scalars("eval/dev_accuracy")
    assert evals and [e.step for e in accuracy] == [r["step"] for r in evals]
    assert [e.value for e in accuracy] == pytest.approx([r["dev_correct"] / r["dev_total"] for r in evals])


def test_without_the_flag_no_event_files_are_written(tmp_path):
    run = train_tiny(tmp_path / "run")
    assert (run / "metrics.jsonl").is_file() and not list(run.glob("events.out.tfevents.*"))


def test_a_missing_tensorboard_package_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as if absent
    code = cli.main(["pretrain", "--preset", "tiny", "--max-steps", "2", "--device", "cpu", "--tensorboard",
                     "--out-dir", str(tmp_path / "run"), "--eval-file", "", "--corpus", str(DATA / "wiki.txt")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert err == ("attnlab pretrain: error: --tensorboard needs the tensorboard package: "
                   "pip install 'attnlab[tensorboard]' (or pip install tensorboard)")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # it stopped before training
