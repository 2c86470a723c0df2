"""Training curves (`attnlab plot`, attnlab/cli/experiments.py) of one or several runs on shared axes.

Reads each run's metrics.jsonl (attnlab/training/trainer.py writes a row every --log-every steps with
loss, lr and tokens_per_s, and with --eval-every a row with dev_correct/dev_total) and draws
loss, learning rate, tokens/s and, where any run logged it, dev accuracy with its 95% Wilson
interval, all against tokens seen, one colour per run.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data.datasets import DataError
from ..core.paths import save_figure
from ..core.plotting import pyplot

METRICS_NAME = "metrics.jsonl"

# (metrics key, y-axis label, log scale): the panels drawn for every run
CURVES = [("loss", "loss (cross-entropy, nats)", True), ("lr", "learning rate", False),
          ("tokens_per_s", "tokens/s", False)]
DEV_LABEL = "dev accuracy (%, 95% CI)"
X_LABEL = "tokens seen"


@dataclass
class RunMetrics:
    name: str
    steps: list[dict[str, Any]] = field(default_factory=list)  # rows with a loss
    evals: list[dict[str, Any]] = field(default_factory=list)  # rows with dev_correct/dev_total


def metrics_path(run: str | Path) -> Path:
    """A run directory's metrics.jsonl, or the file itself."""
    path = Path(run)
    path = path / METRICS_NAME if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no metrics here (training writes RUN_DIR/{METRICS_NAME})")
    return path


def read_metrics(run: str | Path) -> RunMetrics:
    path = metrics_path(run)
    name = path.parent.name if path.name == METRICS_NAME else path.stem
    metrics = RunMetrics(name)
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(str(path), number, f"not a JSON object ({e.msg})") from None
        if not isinstance(row, dict) or "tokens" not in row:
            raise DataError(str(path), number, "a metrics row needs a 'tokens' field")
        problem = _row_problem(row)
        if problem:
            raise DataError(str(path), number, problem)
        if "loss" in row:
            metrics.steps.append(row)
        if "dev_correct" in row and "dev_total" in row:
            metrics.evals.append(row)
    if not metrics.steps and not metrics.evals:
        raise DataError(str(path), None, "no metrics rows")
    return metrics


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _row_problem(row: dict[str, Any]) -> str | None:
    """What makes a metrics row undrawable: a non-number where a number is drawn (a curve's
    value may be null: no point), or a dev count that is no count."""
    if not _number(row["tokens"]):
        return f"'tokens' must be a number, got {row['tokens']!r}"
    for key, _, _ in CURVES:
        if row.get(key) is not None and not _number(row[key]):
            return f"'{key}' must be a number or null, got {row[key]!r}"
    if "dev_correct" in row and "dev_total" in row:
        correct, total = row["dev_correct"], row["dev_total"]
        counts = all(isinstance(v, int) and not isinstance(v, bool) for v in (correct, total))
        if not counts or not 0 <= correct <= total or total == 0:
            return f"dev_correct/dev_total must be counts with 0 <= correct <= total > 0, got {correct!r}/{total!r}"
    return None


def training_figure(runs: list[RunMetrics]):
    """The figure: one panel per curve (plus dev accuracy where logged), x shared (tokens)."""
    plt = pyplot()
    import matplotlib.ticker

    from ..answering.evaluate import wilson_interval

    with_dev = any(r.evals for r in runs)
    panels = len(CURVES) + with_dev
    fig, axes = plt.subplots(panels, 1, figsize=(8, 2.6 * panels), sharex=True, squeeze=False,
                             layout="constrained")
    axes = axes[:, 0]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, run in enumerate(runs):
        colour = colours[i % len(colours)]
        for ax, (key, _, _) in zip(axes, CURVES):
            rows = [r for r in run.steps if r.get(key) is not None]
            ax.plot([r["tokens"] for r in rows], [r[key] for r in rows], color=colour, label=run.name)
        if with_dev and run.evals:
            ax = axes[-1]
            x = [r["tokens"] for r in run.evals]
            acc = [100 * r["dev_correct"] / r["dev_total"] for r in run.evals]
            bounds = [wilson_interval(r["dev_correct"], r["dev_total"]) for r in run.evals]
            # max(0, ...): at 0/n or n/n rounding can put a bound a hair past the point
            below = [max(0.0, a - 100 * lo) for a, (lo, _) in zip(acc, bounds)]
            above = [max(0.0, 100 * hi - a) for a, (_, hi) in zip(acc, bounds)]
            ax.errorbar(x, acc, yerr=[below, above], marker="o", capsize=3, color=colour, label=run.name)
    for ax, (_, label, log_scale) in zip(axes, CURVES):
        ax.set_ylabel(label)
        if log_scale:
            ax.set_yscale("log")
            plain = matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v:g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
    if with_dev:
        axes[-1].set_ylabel(DEV_LABEL)
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[-1].set_xlabel(X_LABEL)
    return fig


def run_labels(runs: list[str | Path]) -> list[str]:
    """Each run's legend label: its directory's name, with as many parent directories as it
    takes to tell runs of the same name apart (runs/a/pretrain and runs/b/pretrain: a/pretrain,
    b/pretrain); the same run given twice keeps its own label, numbered."""
    parts = [_label_parts(r) for r in runs]
    depth = [1] * len(parts)
    while True:
        labels = ["/".join(p[-d:]) for p, d in zip(parts, depth)]
        clash = [i for i, label in enumerate(labels) if depth[i] < len(parts[i])
                 and any(other == label and parts[j] != parts[i] for j, other in enumerate(labels))]
        if not clash:
            break
        for i in clash:
            depth[i] += 1
    seen: dict[str, int] = {}
    numbered = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        numbered.append(f"{label} ({seen[label]})" if labels.count(label) > 1 else label)
    return numbered


def _label_parts(run: str | Path) -> list[str]:
    """The directories of a run's path, to its name (a metrics file: its run directory's, or its stem)."""
    path = metrics_path(run).resolve()
    named = path.parent if path.name == METRICS_NAME else path.with_suffix("")
    return [p for p in named.parts if p not in ("/", "")] or [named.name]


def plot_runs(runs: list[str | Path], out: str | Path) -> Path:
    """Draw the runs' training curves into ``out`` (PNG, or any format matplotlib knows), each
    labelled by its run directory's name (``run_labels``)."""
    plt = pyplot()

    metrics = [read_metrics(r) for r in runs]
    for m, label in zip(metrics, run_labels(runs)):
        m.name = label
    fig = training_figure(metrics)
    out = save_figure(fig, out, dpi=100)
    plt.close(fig)
    return out
