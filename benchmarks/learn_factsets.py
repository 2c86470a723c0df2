"""Fact sets learned in a budget: `attnlab learn DIR --minutes M` on each fact set and seed, with
the reference without pretraining, every relation's dev accuracy beside its most-frequent-answer
baseline, counts out of N with 95% intervals, seeds pooled.

    .venv/bin/python benchmarks/factsets.py towns --out runs/sets/towns
    .venv/bin/python benchmarks/factsets.py species --out runs/sets/species
    .venv/bin/python benchmarks/learn_factsets.py runs/sets/towns runs/sets/species data --minutes 15 \\
        --seeds 0 --out runs/bench-learn --write

Each run is its own `attnlab learn` process, one after another, so each has the machine to
itself (run nothing else meanwhile: --minutes fits pretraining to the pace it measures, and a
shared core slows it several-fold). A run whose results.json exists is kept, so an interrupted
benchmark continues where it stopped; --rescore refits a kept run's abstention rule and confidence
correction and scores it again, without training (after a change to either). --write puts the
table in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from _common import REPO, count_with_interval, report, table

from attnlab.data import factset
from attnlab.experiments import learn


def run_learn(facts: Path, out: Path, minutes: float, seed: int, pretrained: bool, rescore: bool = False) -> dict:
    """One `attnlab learn` (kept if already done, and then with ``rescore`` its rule, correction
    and scores brought up to date), its results.json."""
    results = out / "results.json"
    if results.is_file() and rescore:
        return learn.rescore(out)
    if not results.is_file():
        command = [sys.executable, "-m", "attnlab", "learn", str(facts), "--minutes", str(minutes),
                   "--seed", str(seed), "--out-dir", str(out), "--overwrite"]
        if not pretrained:
            command.append("--no-pretraining")
        print("$", " ".join(command), flush=True)
        subprocess.run(command, check=True, cwd=REPO)
    return json.loads(results.read_text(encoding="utf-8"))


def pooled(runs: list[dict], relation: str | None) -> tuple[int, int]:
    """Correct answers and questions over seeds, for a relation or all of them."""
    rows = [r["overall"] if relation is None else r["relations"][relation] for r in runs]
    return sum(r["correct"] for r in rows), sum(r["total"] for r in rows)


def rows_for(facts: factset.FactSet, learned: list[dict], scratch: dict | None) -> list[list[str]]:
    rows = []
    for relation in [*facts.schema.names, None]:
        base = (learned[0]["overall"] if relation is None else learned[0]["relations"][relation])["baseline"]
        seeds = ", ".join(str((r["overall"] if relation is None else r["relations"][relation])["correct"])
                          for r in learned)
        no_pre = count_with_interval(*pooled([scratch], relation)) if scratch else "-"
        rows.append([facts.name, relation or "all", count_with_interval(base["correct"], base["total"]), no_pre,
                     seeds, count_with_interval(*pooled(learned, relation)),
                     calibration_cell(learned) if relation is None else ""])
    return rows


def calibration_cell(learned: list[dict]) -> str:
    """Each seed's dev ECE, raw -> after the correction fitted on held-out training subjects."""
    cells = []
    for r in learned:
        c = r.get("calibration") or {}
        if "ece" in c:
            after = f" -> {c['ece_corrected']:.3f}" if "ece_corrected" in c else ""
            cells.append(f"{c['ece']:.3f}{after}")
    return ", ".join(cells) or "-"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="+", type=Path, help="fact-set folders")
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--no-scratch", action="store_true", help="skip the reference without pretraining")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-learn"))
    parser.add_argument("--rescore", action="store_true",
                        help="refit and rescore runs already done (their training is kept)")
    parser.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = parser.parse_args(argv)
    rows, machines = [], set()
    for folder in args.sets:
        facts = factset.load(folder)
        learned = [run_learn(folder, args.out / f"{facts.name}-{args.minutes:g}m-seed{s}", args.minutes, s, True,
                             args.rescore) for s in args.seeds]
        scratch = None if args.no_scratch else run_learn(
            folder, args.out / f"{facts.name}-{args.minutes:g}m-scratch", args.minutes, args.seeds[0], False)
        machines.update(r["machine"] for r in learned)
        rows += rows_for(facts, learned, scratch)
    text = table(["fact set", "relation", "most frequent answer", "no pretraining", "learned, each seed",
                  f"learned in {args.minutes:g} minutes (seeds pooled)", "ECE, raw -> corrected"], rows)
    text += (f"\n\nMachine: {'; '.join(sorted(machines))}. Dev questions; 95% Wilson intervals. ECE: 15 "
             "equal-width bins over all dev answers; the correction (beta calibration) is fitted on the "
             "training subjects `learn` held out of finetuning.")
    report(f"learn-factsets-{args.minutes:g}m", text, write=args.write, title=f"Fact sets learned in {args.minutes:g} minutes")


if __name__ == "__main__":
    main()
