"""Knowledge on a CPU: train a recipe end to end (pretrain + finetune + dev evaluation), time
it, report extracted (dev accuracy, 95% Wilson interval) and stored facts, compare with the
shipped model's provenance, optionally ship the result, and draw learning curves.

    .venv/bin/python benchmarks/knowledge.py --preset cpu --out runs/knowledge-cpu --write
    .venv/bin/python benchmarks/knowledge.py --preset cpu --out runs/knowledge-cpu --ship models/cpu
    .venv/bin/python benchmarks/knowledge.py --curves runs/knowledge-cpu:cpu runs/knowledge-quick:course \\
        --plot docs/learning_curves.png

Training runs through the same entry point as the `attnlab` program (process CPU settings
applied first), one stage after another, so the wall time is the pipeline's. Run it alone on
the machine: another busy process cuts CPU training throughput several-fold.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

from _common import REPO, report, table

sys.path.insert(0, str(REPO))

from attnlab import cli
from attnlab.core import cpu_settings  # noqa: E402
from attnlab.model.checkpoint import load_model  # noqa: E402
from attnlab.data.datasets import documents, read_qa, read_text  # noqa: E402
from attnlab.answering.evaluate import evaluate, wilson_interval  # noqa: E402
from attnlab.answering.knowledge import CorpusIndex, measure_stored  # noqa: E402

DEV = "data/birth_dev.tsv"
CORPUS = "data/wiki.txt"


def stage_commands(preset: str, out: Path) -> list[list[str]]:
    return [
        ["pretrain", "--preset", preset, "--out-dir", str(out / "pretrain")],
        ["finetune", "--preset", preset, "--init", str(out / "pretrain"), "--out-dir", str(out / "finetune"),
         "--eval-file", ""],
    ]


def stage_seconds(run: Path) -> float:
    """A stage's training wall seconds as its metrics.jsonl recorded them (so a resumed or
    re-scored pipeline still reports the time its training took)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return max(r.get("elapsed_s", 0.0) for r in rows)


def run_pipeline(preset: str, out: Path, resume: bool) -> float:
    """Train every stage (stages already finished are resumed, i.e. kept); returns the training
    stages' wall seconds."""
    for argv in stage_commands(preset, out):
        done = (Path(argv[argv.index("--out-dir") + 1]) / "checkpoint.safetensors").exists()
        if done and not resume:
            raise SystemExit(f"error: {out} already holds runs; pass --resume to continue or use another --out")
        if cli.main(argv + (["--resume"] if done else [])) != 0:
            raise SystemExit(f"error: `attnlab {' '.join(argv)}` failed")
    return sum(stage_seconds(Path(argv[argv.index("--out-dir") + 1])) for argv in stage_commands(preset, out))


def score_run(run: Path) -> dict:
    model, vocab, _ = load_model(run)
    examples = read_qa(DEV, labelled=True)
    start = time.perf_counter()
    _, result = evaluate(model, vocab, examples)
    seconds = time.perf_counter() - start
    stored = measure_stored(model, vocab, CorpusIndex(documents(read_text(CORPUS))), examples)
    return {"dev_correct": result.correct, "dev_total": result.total, "stored": stored.stored,
            "stored_total": stored.total, "eval_seconds": round(seconds, 1)}


def _pct(k: int, n: int) -> str:
    low, high = wilson_interval(k, n)
    return f"{k}/{n} ({100 * k / n:.1f}%, 95% CI {100 * low:.1f}-{100 * high:.1f}%)"


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def train_and_report(args) -> None:
    out = Path(args.out)
    cpu_settings.apply()
    seconds = run_pipeline(args.preset, out, args.resume)
    scores = score_run(out / "finetune")
    total = seconds + scores["eval_seconds"]
    row = {"preset": args.preset, "wall_s": round(total, 1), **scores}
    (out / "result.json").write_text(json.dumps(row, indent=2) + "\n")
    rows = [[f"{args.preset} (this run, {out})", _pct(scores["dev_correct"], scores["dev_total"]),
             _pct(scores["stored"], scores["stored_total"]), f"{total / 60:.1f} min"]]
    shipped = Path(args.ship or "models/cpu") / "provenance.json"
    if shipped.is_file():
        p = json.loads(shipped.read_text())
        rows.append([f"shipped model ({shipped.parent})", _pct(p["dev_correct"], p["dev_total"]),
                     _pct(p["stored"], p["stored_total"]), f"{p['wall_s'] / 60:.1f} min"])
    text = table(["model", "dev extracted (exact match)", "dev stored (line completion)",
                  "pipeline wall time"], rows)
    commands = "; ".join(shlex.join(["attnlab", *a]) for a in stage_commands(args.preset, out))  # "" stays ''
    text += (f"\n\n- stages: `{commands}`, then dev evaluation ({scores['eval_seconds']} s)"
             "\n- stored: people whose gold place is written in their wiki.txt line; the model's greedy "
             "completion of that line up to the place must reproduce it"
             "\n- 95% intervals: Wilson score intervals of the binomial proportion")
    report(f"knowledge_{args.preset}", text, write=args.write, title=f"Knowledge on a CPU: preset {args.preset} "
           "(benchmarks/knowledge.py)")
    if args.ship:
        from attnlab.model.shipped import ship

        provenance = {"commands": ["attnlab " + " ".join(a) for a in stage_commands(args.preset, out)],
                      "commit": _commit(), "preset": args.preset, **row,
                      "measured_on": "2-core CPU, alone on the machine (benchmarks/knowledge.py)"}
        print(f"shipped to {ship(out / 'finetune', args.ship, provenance)}")


def _curve(run: Path) -> list[tuple[float, float, float]]:
    """(training CPU minutes, dev %, stored %) from a run's metrics.jsonl rows with scores."""
    points = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "dev_correct" in r:
            points.append((r["train_cpu_s"] / 60, 100 * r["dev_correct"] / r["dev_total"],
                           100 * r["stored"] / max(1, r["stored_total"])))
    return points


def plot_curves(specs: list[str], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for spec in specs:
        run, _, label = spec.partition(":")
        pre = _curve(Path(run) / "pretrain")
        if not pre:
            raise SystemExit(f"error: {run}/pretrain/metrics.jsonl has no scored rows (train with --eval-every)")
        line, = ax.plot([p[0] for p in pre], [p[1] for p in pre], marker="o", label=f"{label or run}: dev accuracy")
        ax.plot([p[0] for p in pre], [p[2] for p in pre], ls="--", color=line.get_color(),
                label=f"{label or run}: stored")
        result = Path(run) / "result.json"
        if result.is_file():  # the finetuned model's final score, at pretraining + finetuning CPU time
            r = json.loads(result.read_text())
            ft = json.loads((Path(run) / "finetune" / "metrics.jsonl").read_text().splitlines()[-1])
            x = pre[-1][0] + ft.get("train_cpu_s", 0) / 60
            ax.plot([x], [100 * r["dev_correct"] / r["dev_total"]], marker="*", ms=14, color=line.get_color(),
                    ls="none", label=f"{label or run}: after finetuning")
    ax.axhline(5.0, color="grey", lw=1, ls=":", label='baseline "London" (5.0%)')
    ax.set_xlabel("training CPU minutes (process CPU time; evaluation excluded)")
    ax.set_ylabel("% of dev people")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title("Dev accuracy (extracted) and stored facts while pretraining")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu", help="recipe to train (default: cpu)")
    parser.add_argument("--out", default=None, help="directory for the runs (default: runs/knowledge-PRESET)")
    parser.add_argument("--resume", action="store_true", help="continue runs already in --out")
    parser.add_argument("--ship", default=None, metavar="DIR", help="ship the finetuned model there (e.g. models/cpu)")
    parser.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    parser.add_argument("--curves", nargs="*", default=None, metavar="OUT[:LABEL]",
                        help="instead of training: draw the learning curves of runs made by this script")
    parser.add_argument("--plot", default="docs/learning_curves.png", help="PNG for --curves")
    args = parser.parse_args()
    if args.curves is not None:
        plot_curves(args.curves, args.plot)
        return
    args.out = args.out or f"runs/knowledge-{args.preset}"
    train_and_report(args)


if __name__ == "__main__":
    main()
