"""One variant under several settings, each from its own `attnlab compare` run: position schemes
(`--positions none`, `--position-mode concat`, ...) or anything else a compare run was made with.
For each variant found in every run, the runs' rows of that variant are compared with the first
run's (the reference) on the same dev questions and seeds: mean with the 95% interval, each
seed's count, and the paired exact McNemar test (attnlab/experiments/comparison.py).

    attnlab compare --preset cpu5 --variants vanilla,rotary,relative --seeds 3 --no-scratch \\
        --records benchmarks/records/compare --gather --out-dir runs/g-learned
    attnlab compare --preset cpu5 --variants vanilla,rotary,relative --positions none --seeds 3 \\
        --no-scratch --records benchmarks/records/compare --gather --out-dir runs/g-nopos
    python benchmarks/schemes.py runs/g-learned:learned runs/g-nopos:none
    python benchmarks/schemes.py runs/s15-learned:plain runs/s15-focus:focus --label setting   # losses

Prints one table per variant (markdown, to quote with the commands above).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnlab.experiments.results import Row, comparison_table, variant_comparison  # noqa: E402


def read_rows(results: Path) -> list[Row]:
    """The variant rows of a compare run's results.json (its directory or the file)."""
    path = results / "results.json" if results.is_dir() else results
    if not path.is_file():
        raise SystemExit(f"error: {path}: no results.json (run `attnlab compare ... --gather` there first)")
    return [Row.from_dict(r) for r in json.loads(path.read_text())["rows"] if r.get("variant")]


def scheme_tables(runs: dict[str, list[Row]], dev_file: str, column: str = "scheme") -> dict[str, str]:
    """Per variant found in every run: the table of its runs, each labelled by its scheme (what
    ``column`` names the first column: a scheme, a loss setting), tested against the first run's."""
    labels = list(runs)
    variants = [v for v in dict.fromkeys(r.variant for r in runs[labels[0]])
                if all(any(r.variant == v for r in rows) for rows in runs.values())]
    tables = {}
    for variant in variants:
        rows = []
        for label, found in runs.items():
            for r in found:
                if r.variant == variant:
                    r.variant = label  # the compared "models" are the schemes
                    rows.append(r)
        tables[variant] = comparison_table(variant_comparison(rows, labels[0], dev_file), labels[0],
                                           label=column)
    return tables


def parse_run(text: str) -> tuple[str, Path]:
    path, _, label = text.rpartition(":")
    if not path or not label:
        raise SystemExit(f"error: {text!r}: give RUN:LABEL (a compare run's directory and its scheme's name)")
    return label, Path(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN:LABEL", help="compare output directories; the first is the reference")
    p.add_argument("--eval-file", default="data/birth_dev.tsv", help="the dev file the runs were scored on")
    p.add_argument("--label", default="scheme",
                   help="what the runs differ in, the first column's heading (default: scheme; e.g. setting "
                        "for runs made with --attn-loss)")
    args = p.parse_args(argv)
    if len(args.runs) < 2:
        p.error("give at least two runs to compare")
    runs = {label: read_rows(path) for label, path in map(parse_run, args.runs)}
    for variant, text in scheme_tables(runs, args.eval_file, args.label).items():
        print(f"\n### {variant}\n\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
