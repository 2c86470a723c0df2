"""benchmarks/editing.py keeps a long run's results as it goes (runs/editing/NAME.partial.json),
so that an interrupted run goes on where it stopped, and only under the same settings."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture()
def editing(tmp_path, monkeypatch):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        module = importlib.import_module("editing")
        monkeypatch.setattr(module, "CURVES", tmp_path)
        yield module
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_a_partial_run_goes_on_only_under_the_same_settings(editing, tmp_path, capsys):
    args = editing.parse_args(["--method", "rome", "--n", "50"])
    partial = editing.Partial("single-rome", editing.run_key(args))
    assert partial.load() == {}  # nothing yet
    partial.save(done=2, results=[{"efficacy": True}, {"efficacy": False}], rows=[["a"], ["b"]])
    again = editing.Partial("single-rome", editing.run_key(editing.parse_args(["--method", "rome", "--n", "50"])))
    assert again.load()["results"] == [{"efficacy": True}, {"efficacy": False}]
    assert "going on from 2 edits done" in capsys.readouterr().out
    other = editing.Partial("single-rome", editing.run_key(editing.parse_args(["--method", "rome", "--seed", "1"])))
    assert other.load() == {} and "other settings; starting afresh" in capsys.readouterr().out
    again.finish()
    assert not (tmp_path / "single-rome.partial.json").exists()


def test_single_edits_skip_the_edits_a_partial_run_has_done(editing, monkeypatch):
    args = editing.parse_args(["--method", "finetune", "--n", "2"])
    partial = editing.Partial("single-finetune", editing.run_key(args))
    partial.save(done=1, results=[{"efficacy": True}], rows=[["first"]])

    def refuse(*a, **k):  # every edit still to do would call the editor; the first must not
        raise AssertionError("the editor was called for an edit already done")

    results, rows = editing.single_edits(refuse, None, None, [], [], [(0, "Lima")], None, partial=partial)
    assert results == [{"efficacy": True}] and rows == [["first"]]


def test_a_disabled_partial_writes_nothing(editing, tmp_path):
    partial = editing.Partial("single-grace", {}, enabled=False)
    partial.save(done=1, results=[], rows=[])
    assert partial.load() == {} and list(tmp_path.iterdir()) == []
