"""benchmarks/learn_factsets.py: its table pools seeds per relation beside the baseline and the
reference without pretraining, from the runs' results.json."""

from __future__ import annotations

import sys
from pathlib import Path

from attnlab.data import factset

from .test_factsets import write_set

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import learn_factsets  # noqa: E402


def result(country: int, river: int, total: int = 50) -> dict:
    base = {"answer": "Orna", "correct": 5, "total": total}
    rel = {"country": {"correct": country, "total": total, "baseline": base},
           "river": {"correct": river, "total": total, "baseline": base}}
    return {"relations": rel, "overall": {"correct": country + river, "total": 2 * total,
                                          "baseline": {"correct": 10, "total": 2 * total}}}


def test_the_table_pools_seeds_per_relation(tmp_path):
    facts = factset.load(write_set(tmp_path / "towns"))
    rows = learn_factsets.rows_for(facts, [result(40, 30), result(44, 34)], result(1, 0))
    assert [r[1] for r in rows] == ["country", "river", "all"]
    country, river, overall = rows
    assert country[4] == "40, 44" and country[5].startswith("84/100 (84.0%")
    assert river[3].startswith("0/50 (0.0%") and overall[5].startswith("148/200 (74.0%")
    assert country[2].startswith("5/50 (10.0%")


def test_the_all_row_carries_each_seeds_calibration_error(tmp_path):
    facts = factset.load(write_set(tmp_path / "towns"))
    calibrated = {**result(40, 30), "calibration": {"bins": 15, "ece": 0.391, "correction": {"a": 0.1},
                                                    "ece_corrected": 0.048}}
    raw_only = {**result(44, 34), "calibration": {"bins": 15, "ece": 0.2}}
    rows = learn_factsets.rows_for(facts, [calibrated, raw_only], None)
    assert rows[-1][6] == "0.391 -> 0.048, 0.200" and rows[0][6] == ""
    assert learn_factsets.rows_for(facts, [result(1, 1)], None)[-1][6] == "-"  # runs from before it was reported
