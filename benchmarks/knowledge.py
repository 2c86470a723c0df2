"""Knowledge on a CPU: train a recipe end to end (pretrain + finetune + dev evaluation), time
it, report extracted (dev accuracy, 95% Wilson interval) and stored facts, compare with the
shipped model's provenance, optionally ship the result, and draw learning curves.

    .venv/bin/python benchmarks/knowledge.py --preset cpu --out runs/knowledge-cpu --write
    .venv/bin/python benchmarks/knowledge.py --preset cpu --out runs/knowledge-cpu --ship models/cpu
    .venv/bin/python benchmarks/knowledge.py --curves runs/knowledge-cpu:cpu runs/knowledge-quick:course \\
        --plot docs/learning_curves.png
    .venv/bin/python benchmarks/knowledge.py --errors runs/knowledge-cpu15/finetune:cpu15
    .venv/bin/python benchmarks/knowledge.py --open-book RUN:LABEL ... --eval-file runs/p/holdout.tsv

Training runs through the same entry point as the `attnlab` program (process CPU settings
applied first), one stage after another, so the wall time is the pipeline's. Run it alone on
the machine: another busy process cuts CPU training throughput several-fold.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

import torch
from _common import REPO, count_with_interval, open_book_right, report, table

sys.path.insert(0, str(REPO))

from attnlab import cli
from attnlab.core import cpu_settings  # noqa: E402
from attnlab.model.checkpoint import load_model  # noqa: E402
from attnlab.data.datasets import documents, read_qa, read_text  # noqa: E402
from attnlab.answering.evaluate import evaluate  # noqa: E402
from attnlab.answering.knowledge import (CorpusIndex, answer_by_recall, measure_stored,  # noqa: E402
                                        require_person)
from attnlab.experiments.comparison import TEST_METHOD, compare_models, holm_note  # noqa: E402

DEV = "data/birth_dev.tsv"
TRAIN = "data/birth_places_train.tsv"
CORPUS = "data/wiki.txt"


def stage_commands(preset: str, out: Path, eval_every: int = 0, minutes: float = 0, seed: int = 0
                   ) -> list[list[str]]:
    every = ["--eval-every", str(eval_every)] if eval_every else []
    fit = ["--minutes", f"{minutes:g}"] if minutes else []
    seeded = ["--seed", str(seed)] if seed else []  # both stages: another seed of the whole recipe
    return [
        ["pretrain", "--preset", preset, "--out-dir", str(out / "pretrain"), *every, *fit, *seeded],
        ["finetune", "--preset", preset, "--init", str(out / "pretrain"), "--out-dir", str(out / "finetune"),
         "--eval-file", "", *seeded],
    ]


def command_lines(stages: list[list[str]]) -> list[str]:
    """The stages as shell lines a user can paste: an empty argument stays ''."""
    return [shlex.join(["attnlab", *argv]) for argv in stages]


def stage_seconds(run: Path) -> float:
    """A stage's training wall seconds as its metrics.jsonl recorded them, the evaluations
    during training left out (so a resumed or re-scored pipeline still reports the time its
    training took: elapsed_s starts again at each resume, so each process's part is added)."""
    earlier, seconds, evaluated, last = 0.0, 0.0, 0.0, 0.0
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        elapsed = row.get("elapsed_s", 0.0)
        if elapsed < last:  # a resumed process's first row
            earlier, seconds, evaluated = earlier + seconds, 0.0, 0.0
        seconds = max(seconds, elapsed - evaluated)
        evaluated += row.get("eval_s", 0.0)  # a scored row's elapsed_s is taken before its own evaluation
        last = elapsed
    return earlier + seconds


def evaluation_seconds(run: Path) -> float:
    """The wall seconds of the evaluations a stage's metrics.jsonl has recorded so far."""
    metrics = run / "metrics.jsonl"
    rows = metrics.read_text().splitlines() if metrics.is_file() else []
    return sum(json.loads(line).get("eval_s", 0.0) for line in rows)


def run_pipeline(preset: str, out: Path, resume: bool, eval_every: int = 0, minutes: float = 0, seed: int = 0
                 ) -> tuple[float, float | None]:
    """Train every stage (stages already finished are resumed, i.e. kept); returns the training
    stages' wall seconds as their metrics recorded them (the training loops), and the stage
    commands' whole wall seconds (preparing the data and timing steps included, evaluations
    left out), or None when a stage ran in an earlier process."""
    commands, whole, runs = 0.0, True, []
    for argv in stage_commands(preset, out, eval_every, minutes, seed):
        run = Path(argv[argv.index("--out-dir") + 1])
        runs.append(run)
        done = (run / "checkpoint.safetensors").exists()
        if done and not resume:
            raise SystemExit(f"error: {out} already holds runs; pass --resume to continue or use another --out")
        whole, evaluated, start = whole and not done, evaluation_seconds(run), time.perf_counter()
        if cli.main(argv + (["--resume"] if done else [])) != 0:
            raise SystemExit(f"error: `attnlab {' '.join(argv)}` failed")
        commands += time.perf_counter() - start - (evaluation_seconds(run) - evaluated)
    return sum(stage_seconds(run) for run in runs), commands if whole else None


def score_run(run: Path, eval_file: str = DEV) -> dict:
    return answer_run(run, eval_file)[0]


def answer_run(run: Path, eval_file: str = DEV) -> tuple[dict, list[bool]]:
    """The run's scores and, per question of ``eval_file``, whether it answered right (for the
    paired tests of --ablation)."""
    model, vocab, _ = load_model(run)
    examples = read_qa(eval_file, labelled=True)
    start = time.perf_counter()
    answers, result = evaluate(model, vocab, examples)
    seconds = time.perf_counter() - start
    stored = measure_stored(model, vocab, CorpusIndex(documents(read_text(CORPUS))), examples)
    return ({"dev_correct": result.correct, "dev_total": result.total, "stored": stored.stored,
             "stored_total": stored.total, "eval_seconds": round(seconds, 1)},
            [a.answer == e.answer for a, e in zip(answers, examples)])


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def train_and_report(args) -> None:
    out = Path(args.out)
    cpu_settings.apply()
    cpu_start = time.process_time()
    seconds, command_seconds = run_pipeline(args.preset, out, args.resume, args.eval_every, args.minutes, args.seed)
    cpu_seconds = time.process_time() - cpu_start
    scores = score_run(out / "finetune")
    total = seconds  # training only: the evaluations are left out, and said so
    row = {"preset": args.preset, "wall_s": round(total, 1),
           "command_wall_s": None if command_seconds is None else round(command_seconds, 1),
           "cpu_s": round(cpu_seconds, 1),
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "threads": torch.get_num_threads(), **scores}
    (out / "result.json").write_text(json.dumps(row, indent=2) + "\n")
    rows = [[f"{args.preset} (this run, {out})", count_with_interval(scores["dev_correct"], scores["dev_total"]),
             count_with_interval(scores["stored"], scores["stored_total"]), f"{total / 60:.1f} min",
             "-" if command_seconds is None else f"{command_seconds / 60:.1f} min",
             f"{cpu_seconds / 60:.1f} min", f"{row['peak_rss_mb']:.0f} MB"]]
    shipped = Path(args.ship or "models/cpu") / "provenance.json"
    if shipped.is_file():
        p = json.loads(shipped.read_text())
        rows.append([f"shipped model ({shipped.parent})", count_with_interval(p["dev_correct"], p["dev_total"]),
                     count_with_interval(p["stored"], p["stored_total"]), f"{p['wall_s'] / 60:.1f} min", "-", "-", "-"])
    text = table(["model", "dev extracted (exact match)", "dev stored (line completion)",
                  "training wall time (pretrain + finetune)", "the two commands' wall time", "CPU time",
                  "peak memory"], rows)
    commands = "; ".join(command_lines(stage_commands(args.preset, out, args.eval_every, args.minutes, args.seed)))
    text += (f"\n\n- stages: `{commands}`, then dev evaluation ({scores['eval_seconds']} s, not in the wall time; "
             f"neither are evaluations during training); training wall time: the training loops as their "
             "metrics recorded them; the commands' wall time adds preparing the data and the timed steps of "
             f"--minutes ('-': a stage ran in an earlier process); torch threads {row['threads']}; peak memory "
             "is the process's peak resident set"
             "\n- stored: people whose gold place is written in their wiki.txt line; the model's greedy "
             "completion of that line up to the place must reproduce it"
             "\n- 95% intervals: Wilson score intervals of the binomial proportion")
    report(f"knowledge_{args.preset}", text, write=args.write, title=f"Knowledge on a CPU: preset {args.preset} "
           "(benchmarks/knowledge.py)")
    if args.ship:
        from attnlab.model.shipped import ship

        # the commands that reproduce the model: the learning curve's evaluations left out
        reproduce = stage_commands(args.preset, out, minutes=args.minutes, seed=args.seed)
        provenance = {"commands": command_lines(reproduce),
                      "commit": _commit(), "preset": args.preset, **row,
                      "measured_on": "2-core CPU, alone on the machine (benchmarks/knowledge.py)"}
        print(f"shipped to {ship(out / 'finetune', args.ship, provenance)}")


def _curve(run: Path) -> list[tuple[float, float, float]]:
    """(training wall minutes, dev %, stored %) from a run's metrics.jsonl rows with scores;
    wall minutes leave the evaluations out (runs from before train_wall_s: CPU minutes)."""
    points = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "dev_correct" in r:
            minutes = r.get("train_wall_s", r["train_cpu_s"]) / 60
            points.append((minutes, 100 * r["dev_correct"] / r["dev_total"],
                           100 * r["stored"] / max(1, r["stored_total"])))
    return points


def minutes_to(points: list[tuple[float, float, float]], percent: float) -> float | None:
    """The first logged minute at which dev accuracy reached ``percent`` (None: never)."""
    return next((m for m, dev, _ in points if dev >= percent), None)


def recorded_curve(spec: str) -> tuple[str, list[tuple[float, float, float]]]:
    """'LABEL=MIN,DEV;MIN,DEV;...' (dev as a count of 500): a curve measured before and written
    down (e.g. in an issue), drawn beside the runs measured now and named as such."""
    label, _, points = spec.partition("=")
    curve = []
    for point in points.split(";"):
        minutes, dev = point.split(",")
        curve.append((float(minutes), 100 * float(dev) / 500, float("nan")))
    return label, curve


def plot_curves(specs: list[str], path: str, recorded: list[str] = ()) -> None:
    from attnlab.core.plotting import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10.5, 4.6), dpi=100)
    curves = []
    for spec in specs:
        run, _, label = spec.partition(":")
        pre = _curve(Path(run) / "pretrain")
        if not pre:
            raise SystemExit(f"error: {run}/pretrain/metrics.jsonl has no scored rows (train with --eval-every)")
        curves.append((label or run, pre))
        line, = ax.plot([p[0] for p in pre], [p[1] for p in pre], marker="o", label=f"{label or run}: dev")
        ax.plot([p[0] for p in pre], [p[2] for p in pre], ls="--", color=line.get_color(),
                label=f"{label or run}: stored")
    for spec in recorded:
        label, pre = recorded_curve(spec)
        curves.append((label, pre))
        ax.plot([p[0] for p in pre], [p[1] for p in pre], marker="s", ls=":", label=f"{label}: dev")
    ax.axhline(5.0, color="grey", lw=1, ls=":", label='baseline "London" (5.0%)')
    ax.set_xlabel("training wall minutes on 2 threads, alone (evaluation excluded)")
    ax.set_ylabel("% of dev people")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title("Time to knowledge: dev accuracy (and stored facts) while pretraining")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"wrote {path}")
    rows = []
    for label, pre in curves:
        reached = [minutes_to(pre, p) for p in (10, 30, 60, 80)]
        rows.append([label] + ["-" if m is None else f"{m:.1f}" for m in reached])
    print(table(["recipe", "minutes to 10% dev", "30%", "60%", "80%"], rows))


def training_cpu_minutes(metrics: list[dict]) -> str:
    """The run's training CPU minutes as its metrics logged them; "-" where no row has them (a
    finetuning stage, a shipped model), not a zero that reads as a free run."""
    cpu = [r["train_cpu_s"] for r in metrics if "train_cpu_s" in r]
    return f"{max(cpu) / 60:.1f}" if cpu else "-"


def ablation(specs: list[str], eval_file: str, out: str | None, write: bool) -> None:
    """The probes' table: each run's final checkpoint scored on ``eval_file`` (held-out training
    people when choosing a recipe) with today's read-out, beside its settings and its curve, and
    compared with the first probe (the reference) on the same questions by the paired test."""
    rows, scores, right = [], {}, {}
    for spec in specs:
        run, _, label = spec.partition(":")
        score, right[run] = answer_run(Path(run), eval_file)
        scores[run] = score
        metrics = _metrics(Path(run))
        curve = [f"{r['dev_correct']}" for r in metrics if "dev_correct" in r]
        rows.append([label or run, count_with_interval(score["dev_correct"], score["dev_total"]),
                     count_with_interval(score["stored"], score["stored_total"]), " / ".join(curve),
                     training_cpu_minutes(metrics)])
    reference = next(iter(right))
    compared = compare_models({r: [a] for r, a in right.items()}, reference)
    for row, (run, (_, test)) in zip(rows, compared.items()):
        scores[run]["paired_test"] = None if test is None else test.to_dict()
        row += ["reference"] if test is None else [f"{test.combined.wins}/{test.combined.losses}, "
                                                   f"p={test.combined.p:.2g}, {test.verdict}"]
    text = table(["probe", f"extracted ({Path(eval_file).name})", "stored", "extracted while training "
                  "(at each --eval-every)", "training CPU-min (1 thread)",
                  f"vs {rows[0][0]}: right only here / only there, p"], rows)
    text += ("\n\n- extracted and stored of the final checkpoint, scored now (copy read-out); the curve is "
             "what training logged (with the read-out of the code that trained it)"
             "\n- 95% intervals: Wilson score intervals"
             f"\n- p: {TEST_METHOD}, against the first probe on the same questions, two-sided; the verdict "
             "at p < 0.05 (docs/guides/comparisons.md)")
    labels = {run: row[0] for run, row in zip(right, rows)}
    note = holm_note({labels[run]: test for run, (_, test) in compared.items()}, rows[0][0])
    text += f"\n- {note}" if note else ""
    if out:
        Path(out).write_text(json.dumps(scores, indent=2) + "\n")
    report("knowledge_ablation", text, write=write, title="Knowledge recipes: the ablation probes "
           "(benchmarks/knowledge.py --ablation)")


def error_kinds(run: Path, eval_file: str) -> dict[str, int]:
    """Where a recall model's answers go wrong, by the person's corpus line: the gold place not
    in it, written beyond the recalled characters, recalled exactly up to the place but read out
    wrong (split by READ_OUT_KINDS), or recalled wrong."""
    model, vocab, _ = load_model(run)
    examples = read_qa(eval_file, labelled=True)
    index = CorpusIndex(documents(read_text(CORPUS)))
    names = [require_person(e) for e in examples]
    answers = answer_by_recall(model, vocab, names, model.config.recall_chars)
    kinds = dict.fromkeys(ERROR_KINDS + READ_OUT_KINDS, 0)
    for ex, name, got in zip(examples, names, answers):
        line = index.line_of(name) or ""
        kind = _error_kind(ex.answer, got, line, len(name) + 1, model.config.recall_chars)
        kinds[kind] += 1
        if kind == ERROR_KINDS[3]:
            kinds[read_out_kind(ex.answer, got.answer, line, line.find(ex.answer, len(name) + 1))] += 1
    return kinds


ERROR_KINDS = ("right", "place not in the person's line", "place beyond the recalled characters",
               "recalled exactly up to the place, read out wrong", "recalled wrong")
# the read-out errors, split by how the answer sits beside the label in the line
READ_OUT_KINDS = ("the B of 'A, B', labelled A", "the A of 'A, B', labelled B", "another span")
_PLACE = r"[A-Z][\w.'-]*(?: [A-Z][\w.'-]*)*"


def _error_kind(gold: str, got, line: str, after_name: int, recall_chars: int) -> str:
    at = line.find(gold, after_name)
    if got.answer == gold:
        return ERROR_KINDS[0]
    if at < 0:
        return ERROR_KINDS[1]
    end = at + len(gold)
    if end > recall_chars:
        return ERROR_KINDS[2]
    return ERROR_KINDS[3] if got.recalled[:end] == line[:end] else ERROR_KINDS[4]


def _comma_pair(line: str, at: int, end: int) -> tuple[re.Match | None, re.Match | None]:
    """The places just after ``line[at:end]`` (", B") and just before it ("A, "), if any."""
    return re.match(f", ({_PLACE})", line[end:]), re.search(f"({_PLACE}), $", line[:at])


def read_out_kind(gold: str, answer: str, line: str, at: int) -> str:
    """Which place of a comma pair such as "Chicago, Illinois" the label and the answer are
    (``at``: where the label stands in the line), or another span altogether."""
    after, before = _comma_pair(line, at, at + len(gold))
    if answer and after and after.group(1).startswith(answer):
        return READ_OUT_KINDS[0]
    if answer and before and before.group(1).endswith(answer):
        return READ_OUT_KINDS[1]
    return READ_OUT_KINDS[2]


def label_convention(train_file: str, index: CorpusIndex) -> tuple[int, int]:
    """Training people whose line states their place as one of a comma pair "A, B": how many
    labels name A, and how many name B."""
    first = second = 0
    for ex in read_qa(train_file, labelled=True):
        name = require_person(ex)
        line = index.line_of(name) or ""
        at = line.find(ex.answer, len(name) + 1)
        if at < 0:
            continue
        after, before = _comma_pair(line, at, at + len(ex.answer))
        first += after is not None and before is None
        second += before is not None and after is None
    return first, second


def errors_table(specs: list[str], eval_file: str, write: bool) -> None:
    runs = [(spec.partition(":")[0], spec.partition(":")[2] or spec.partition(":")[0]) for spec in specs]
    counts = [error_kinds(Path(run), eval_file) for run, _ in runs]
    rows = [[kind] + [str(c[kind]) for c in counts] for kind in ERROR_KINDS]
    at = ERROR_KINDS.index(ERROR_KINDS[3]) + 1
    rows[at:at] = [["- of which " + kind] + [str(c[kind]) for c in counts] for kind in READ_OUT_KINDS]
    first, second = label_convention(TRAIN, CorpusIndex(documents(read_text(CORPUS))))
    text = table(["answers of " + Path(eval_file).name] + [label for _, label in runs], rows)
    text += ("\n\n- copy read-out; the line is the person's own corpus line (data/wiki.txt)"
             f"\n- the labels' convention: of the {first + second} training people whose line states their "
             f"place as one of a comma pair 'A, B', {first} are labelled A and {second} B")
    report("knowledge_errors", text, write=write, title="Where recall answers go wrong "
           "(benchmarks/knowledge.py --errors)")


def open_book_table(specs: list[str], eval_file: str, write: bool) -> None:
    """Read-out alone: each person's own line given in place of the recall (on people a model
    never trained on, the read-out skill without memory)."""
    examples = read_qa(eval_file, labelled=True)
    index = CorpusIndex(documents(read_text(CORPUS)))
    rows = []
    for spec in specs:
        run, _, label = spec.partition(":")
        model, vocab, _ = load_model(Path(run))
        rows.append([label or run, count_with_interval(sum(open_book_right(model, vocab, index, examples)), len(examples))])
    text = table(["model", f"place read out of the person's own line ({Path(eval_file).name})"], rows)
    text += "\n\n- copy read-out; 95% intervals: Wilson score intervals"
    report("knowledge_open_book", text, write=write, title="Reading the place out of a given line "
           "(benchmarks/knowledge.py --open-book)")


def _metrics(run: Path) -> list[dict]:
    """The run's metrics.jsonl records; none for a shipped model (weights and provenance only)."""
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu", help="recipe to train (default: cpu)")
    parser.add_argument("--out", default=None, help="directory for the runs (default: runs/knowledge-PRESET)")
    parser.add_argument("--resume", action="store_true", help="continue runs already in --out")
    parser.add_argument("--seed", type=int, default=0,
                        help="the seed of both stages (attnlab pretrain/finetune --seed): another run of the recipe")
    parser.add_argument("--minutes", type=float, default=0, metavar="M",
                        help="fit the pretraining into M minutes on this machine (attnlab pretrain --minutes)")
    parser.add_argument("--eval-every", type=int, default=0, metavar="STEPS",
                        help="score dev every STEPS pretraining steps for the learning curve (left out of the time)")
    parser.add_argument("--ship", default=None, metavar="DIR", help="ship the finetuned model there (e.g. models/cpu)")
    parser.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    parser.add_argument("--curves", nargs="*", default=None, metavar="OUT[:LABEL]",
                        help="instead of training: draw the learning curves of runs made by this script")
    parser.add_argument("--plot", default="docs/learning_curves.png", help="PNG for --curves")
    parser.add_argument("--recorded", nargs="*", default=[], metavar="LABEL=MIN,DEV;...",
                        help="--curves: also draw curves measured earlier (dev as a count of 500)")
    parser.add_argument("--ablation", nargs="*", default=None, metavar="RUN[:LABEL]",
                        help="instead of training: score these probe runs' checkpoints on --eval-file, "
                             "each compared with the first by the paired test")
    parser.add_argument("--errors", nargs="*", default=None, metavar="RUN[:LABEL]",
                        help="instead of training: count where these runs' answers on --eval-file go wrong")
    parser.add_argument("--open-book", nargs="*", default=None, metavar="RUN[:LABEL]",
                        help="instead of training: score reading the place out of each person's own line")
    parser.add_argument("--eval-file", default=DEV,
                        help="labelled file for --ablation, --errors and --open-book (default: dev)")
    parser.add_argument("--json", default=None, metavar="FILE", help="--ablation: also write the scores as JSON")
    args = parser.parse_args()
    if args.errors is not None:
        errors_table(args.errors, args.eval_file, args.write)
        return
    if args.open_book is not None:
        open_book_table(args.open_book, args.eval_file, args.write)
        return
    if args.ablation is not None:
        ablation(args.ablation, args.eval_file, args.json, args.write)
        return
    if args.curves is not None:
        plot_curves(args.curves, args.plot, args.recorded)
        return
    args.out = args.out or f"runs/knowledge-{args.preset}"
    train_and_report(args)


if __name__ == "__main__":
    main()
