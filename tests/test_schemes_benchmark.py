"""benchmarks/schemes.py: one variant under several settings (each its own compare run),
tested against the first run's rows on the same questions and seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnlab.experiments import comparison
from tests.conftest import benchmark_fixture

schemes = benchmark_fixture("schemes")


def _row(variant: str, seed: int, each: str) -> dict:
    return {"model": f"{variant}, seed {seed}", "kind": "variant", "parameters": 1, "pretrain_loss": 0.1,
            "dev_correct": each.count("1"), "dev_total": len(each), "stored": None, "stored_total": None,
            "stored_asked": None, "seconds": 1.0, "run_dir": "-", "dev_each": each, "variant": variant, "seed": seed}


def _results(where: Path, rows: list[dict]) -> Path:
    where.mkdir(parents=True)
    baseline = {**_row("x", 0, "1000"), "kind": "baseline", "variant": None, "seed": None}
    (where / "results.json").write_text(json.dumps({"rows": [baseline, *rows]}))
    return where


def test_each_variant_is_tested_against_the_first_runs_rows_of_the_same_seeds(schemes, tmp_path, capsys):
    learned = _results(tmp_path / "learned", [_row("vanilla", 0, "111111110000"), _row("vanilla", 1, "111111100000"),
                                              _row("rotary", 0, "111100000000")])
    none = _results(tmp_path / "none", [_row("vanilla", 0, "000000000000"), _row("vanilla", 1, "100000000000")])
    assert schemes.main([f"{learned}:learned", f"{none}:none"]) == 0
    out = capsys.readouterr().out
    assert "### vanilla" in out and "### rotary" not in out  # rotary is not in every run
    expected = comparison.paired_test([[c == "1" for c in e] for e in ("000000000000", "100000000000")],
                                      [[c == "1" for c in e] for e in ("111111110000", "111111100000")])
    line = next(t for t in out.splitlines() if t.startswith("| none |"))
    assert f"| 0 / 14 | {expected.combined.p:.3g} | worse |" in line and "0, 1 of 12" in line
    assert "| scheme | seeds |" in out and "| learned | 0, 1 |" in out
    # the first column says what the runs differ in: a loss setting instead of a scheme
    assert schemes.main([f"{learned}:none", f"{none}:focus", "--label", "setting"]) == 0
    out = capsys.readouterr().out
    assert "| setting | seeds |" in out and "| scheme |" not in out and "| focus | 0, 1 |" in out


def test_a_run_without_results_or_a_label_is_refused(schemes, tmp_path):
    with pytest.raises(SystemExit, match="no results.json"):
        schemes.main([f"{tmp_path}:a", f"{tmp_path}:b"])
    with pytest.raises(SystemExit, match="give RUN:LABEL"):
        schemes.main(["runs/x", "runs/y:b"])
