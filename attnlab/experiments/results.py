"""An experiment's results: one ``Row`` per model, results.md (the table and, with a reference
variant, each variant's seeds summarised and tested against it), results.json and the dev
accuracy chart. The runner (attnlab/experiments/runner.py) makes the rows; demo and compare
write them here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..answering.evaluate import Score
from ..answering.knowledge import Stored
from ..core import logs
from ..core.paths import save_figure, write_atomically
from ..core.plotting import pyplot
from . import comparison

# Rows of models trained by the recipe under test, drawn in colour; references in grey.
TRAINED_KINDS = ("recipe", "variant", "shipped")
RESULT_FILES = ("results.md", "results.json", "dev_accuracy.png")  # the experiment's, in its output directory


@dataclass
class Row:
    """One model's line in an experiment's results."""

    model: str
    kind: str  # baseline, scratch (no pretraining), recipe, variant or shipped
    dev: Score | None = None  # extracted: answers that match the label
    stored: Stored | None = None  # of the people whose line states their place
    parameters: int | None = None
    pretrain_loss: float | None = None
    seconds: float | None = None  # training wall time
    run_dir: str = "-"
    # Per dev question, "1" where the answer matched the label: what paired tests compare.
    dev_each: str | None = None
    variant: str | None = None  # rows of one variant trained with several seeds share it
    seed: int | None = None  # the seed of those rows (both stages' seed offset)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "kind": self.kind, "parameters": self.parameters,
                "pretrain_loss": self.pretrain_loss,
                "dev_correct": None if self.dev is None else self.dev.correct,
                "dev_total": None if self.dev is None else self.dev.total,
                "stored": None if self.stored is None else self.stored.stored,
                "stored_total": None if self.stored is None else self.stored.total,
                "stored_asked": None if self.stored is None else self.stored.asked,
                "seconds": self.seconds, "run_dir": self.run_dir, "dev_each": self.dev_each,
                "variant": self.variant, "seed": self.seed}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Row":
        dev = None if d["dev_total"] is None else Score(d["dev_correct"], d["dev_total"])
        stored = None if d["stored_total"] is None else Stored(d["stored"], d["stored_total"], d["stored_asked"])
        return cls(d["model"], d["kind"], dev, stored, d["parameters"], d["pretrain_loss"], d["seconds"], d["run_dir"],
                   d.get("dev_each"), d.get("variant"), d.get("seed"))

    @property
    def dev_percent(self) -> float | None:
        return None if self.dev is None or not self.dev.total else self.dev.percent


def write_results(out: Path, rows: list[Row], label: str, title: str, settings: dict[str, Any], *,
                  reference: str | None = None, dev_file: str | Path = "",
                  log: Callable[[str], None] = logs.note) -> str:
    """results.md, results.json and dev_accuracy.png in ``out``, each recording the
    ``settings``; with a ``reference`` variant, also each variant's seeds summarised and tested
    against it on ``dev_file`` (variant_comparison). Returns the table(s)."""
    out.mkdir(parents=True, exist_ok=True)
    table = results_table(rows, label)
    record: dict[str, Any] = {"settings": settings, "rows": [r.to_dict() for r in rows]}
    if reference is not None:
        compared = variant_comparison(rows, reference, dev_file)
        table += "\n\n" + comparison_table(compared, reference)
        record["comparison"] = comparison_record(compared, reference)
    write_atomically(out / "results.md", results_header(settings) + "\n\n" + table + "\n")
    write_atomically(out / "results.json", json.dumps(record, indent=2) + "\n")
    plot_dev_accuracy(rows, out / "dev_accuracy.png", title)
    logs.results_via(log)("\n" + table)  # the experiment's result: --quiet keeps it
    return table


def results_header(settings: dict[str, Any]) -> str:
    """results.md's first lines: the preset, version and data files, and every setting (as JSON
    in a comment, which renders as nothing)."""
    data = ", ".join(f"{role} {d['path']}" for role, d in settings.get("data", {}).items())
    return (f"Made by attnlab {settings.get('attnlab')} with preset `{settings.get('preset')}`; data: {data}. "
            "Every setting is in results.json.\n"
            f"<!-- settings: {json.dumps(settings, sort_keys=True)} -->")


def results_table(rows: list[Row], label: str = "model") -> str:
    lines = [f"| {label} | parameters | pretrain loss | dev extracted (95% CI) | dev stored | time | run |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        params = "-" if r.parameters is None else f"{r.parameters:,}"
        loss = "-" if r.pretrain_loss is None else f"{r.pretrain_loss:.3f}"
        acc = "-" if r.dev is None else r.dev.with_interval()
        stored = ("-" if r.stored is None or not r.stored.total
                  else Score(r.stored.stored, r.stored.total).with_interval())
        secs = "-" if r.seconds is None else f"{r.seconds:.0f} s"
        lines.append(f"| {r.model} | {params} | {loss} | {acc} | {stored} | {secs} | {r.run_dir} |")
    return "\n".join(lines)


@dataclass
class Compared:
    """One variant over its seeds: the seeds, the accuracy summary, the mean stored fraction
    and the paired test against the reference (None for the reference itself, or when a
    row's per-question answers are unknown)."""

    seeds: list[int | None]
    summary: comparison.Summary
    stored: float | None
    test: comparison.PairedTest | None
    paired_seeds: list[int | None] = field(default_factory=list)  # the seeds the test pairs


def variant_comparison(rows: list[Row], reference: str, dev_file: str | Path) -> dict[str, Compared]:
    """The variant rows (Row.variant set) grouped by variant, in order, each summarised over its
    seeds and tested against ``reference``'s rows of the same seeds on the same questions."""
    groups: dict[str, list[Row]] = {}
    for r in rows:
        if r.variant is not None and r.dev is not None:
            groups.setdefault(r.variant, []).append(r)
    each = {name: [_correct_each(r, dev_file) for r in group] for name, group in groups.items()}
    compared = {}
    for name, group in groups.items():
        known = all(e is not None for e in each[name])
        runs = each[name] if known else [_from_score(r.dev) for r in group]
        stored = [r.stored.stored / r.stored.total for r in group if r.stored is not None and r.stored.total]
        paired = _paired_seeds(group, groups.get(reference, [])) if known and name != reference else []
        test = None
        if paired and all(each[reference][j] is not None for _, j in paired):
            test = comparison.paired_test([each[name][i] for i, _ in paired],
                                          [each[reference][j] for _, j in paired])
        compared[name] = Compared([r.seed for r in group], comparison.summarise(runs),
                                  sum(stored) / len(stored) if stored else None, test,
                                  [group[i].seed for i, _ in paired])
    return compared


def _paired_seeds(group: list[Row], reference: list[Row]) -> list[tuple[int, int]]:
    """(index in group, index in reference) of the seeds both have: a partial grid is tested
    on the seeds it shares with the reference."""
    where = {r.seed: j for j, r in enumerate(reference)}
    return [(i, where[r.seed]) for i, r in enumerate(group) if r.seed in where]


def _correct_each(row: Row, dev_file: str | Path):
    """A row's per-question correctness: recorded in the row, or read from the dev predictions
    its finetuned model wrote (rows finished before attnlab recorded it); None if neither."""
    if row.dev_each is not None:
        return [c == "1" for c in row.dev_each]
    predictions = Path(row.run_dir) / "finetune" / f"predictions-{Path(dev_file).stem}.txt"
    return comparison.read_correctness(predictions, dev_file) if predictions.is_file() else None


def _from_score(dev: Score) -> list[bool]:
    """Correctness with only the count known: enough for the mean and the interval (which do
    not depend on which questions were right), not for a paired test."""
    return [True] * dev.correct + [False] * (dev.total - dev.correct)


def comparison_table(compared: dict[str, Compared], reference: str, label: str = "variant") -> str:
    """One line per variant (or what ``label`` names: the compared models): its seeds' mean with
    the interval, each seed's count, stored, and the paired test against the reference with its
    verdict; a note says which methods."""
    lines = [f"| {label} | seeds | dev extracted, mean over seeds (95% CI) | each seed | dev stored (mean) "
             f"| right only here / only in {reference} | p | verdict vs {reference} |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: | --- |"]
    for name, c in compared.items():
        seeds = ", ".join("-" if s is None else str(s) for s in c.seeds)
        counts = ", ".join(map(str, c.summary.counts)) + f" of {c.summary.total}"
        stored = "-" if c.stored is None else f"{100 * c.stored:.1f}%"
        if c.test is None:
            split, p, verdict = "-", "-", "reference" if name == reference else "no paired answers"
        else:
            split, p, verdict = f"{c.test.combined.wins} / {c.test.combined.losses}", f"{c.test.combined.p:.3g}", c.test.verdict
            if c.paired_seeds != c.seeds:  # a partial grid: the test pairs the seeds both have
                split += f" (seeds {', '.join(map(str, c.paired_seeds))})"
        lines.append(f"| {name} | {seeds} | {c.summary.shown()} | {counts} | {stored} | {split} | {p} | {verdict} |")
    lines += ["", f"95% CI: {comparison.INTERVAL_METHOD}. p: {comparison.TEST_METHOD}, two-sided; "
              f"verdict at p < {comparison.ALPHA} (docs/guides/comparisons.md)."]
    note = comparison.holm_note({name: c.test for name, c in compared.items()}, reference)
    return "\n".join(lines + (["", note] if note else []))


def comparison_record(compared: dict[str, Compared], reference: str) -> dict[str, Any]:
    """The comparison as results.json records it."""
    adjusted = comparison.holm_adjusted({name: c.test for name, c in compared.items()})
    return {"reference": reference, "interval_method": comparison.INTERVAL_METHOD,
            "test_method": comparison.TEST_METHOD, "alpha": comparison.ALPHA,
            "variants": {name: {"seeds": c.seeds, **c.summary.to_dict(), "stored_mean": c.stored,
                                "test": None if c.test is None else {**c.test.to_dict(), "seeds": c.paired_seeds,
                                                                     "p_holm": adjusted[name]}}
                         for name, c in compared.items()}}


def plot_dev_accuracy(rows: list[Row], path: Path, title: str) -> Path:
    """The dev accuracy chart (``dev_accuracy_figure``) into ``path``."""
    plt = pyplot()

    fig = dev_accuracy_figure(rows, title)
    save_figure(fig, path, dpi=120)
    plt.close(fig)
    return path


def dev_accuracy_figure(rows: list[Row], title: str):
    """Horizontal bars of dev accuracy, each with its 95% Wilson interval as an error bar and
    its count and interval as a label; the baseline and no-pretraining rows in grey."""
    plt = pyplot()

    shown = [r for r in rows if r.dev_percent is not None]
    percents = [r.dev.percent for r in shown]
    bounds = [[100 * b for b in r.dev.interval] for r in shown]
    # max(0, ...): at 0/n or n/n rounding can put a bound a hair past the bar's end
    errors = [[max(0.0, p - lo) for p, (lo, _) in zip(percents, bounds)],
              [max(0.0, hi - p) for p, (_, hi) in zip(percents, bounds)]]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(shown) + 1.4), layout="constrained")
    colours = ["tab:blue" if r.kind in TRAINED_KINDS else "tab:gray" for r in shown]
    ax.barh([r.model for r in shown], percents, color=colours, xerr=errors, capsize=3)
    for y, (r, (_, hi)) in enumerate(zip(shown, bounds)):
        ax.text(hi, y, f" {r.dev.with_interval()}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("dev accuracy (%), bars: 95% Wilson interval")
    ax.set_xlim(0, min(100.0, max([10.0] + [hi * 1.9 for _, hi in bounds])))  # room for the labels
    ax.set_title(title)
    return fig
