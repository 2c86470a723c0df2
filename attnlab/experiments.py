"""Experiments made of pipeline stages: `attnlab demo` (the main job) and `attnlab compare`
(every attention variant through the same recipe), on one runner, one results row, one table
and one chart.

A run's row is kept in ``row.json`` in its directory; with ``reuse`` a finished run's row is
read back instead of retrained, so an interrupted experiment continues where it stopped and
runs trained by separate processes (e.g. one per core) are gathered into one table.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .attention import REGISTRY
from .config import DEFAULT_CORPUS, DEFAULT_DEV, DEFAULT_TEST, DEFAULT_TRAIN, ModelConfig, TrainConfig, get_preset
from .evaluate import Score
from .knowledge import Stored
from .pipeline import baseline, evaluate_file, finetune, pretrain, stored_facts

# Rows of models trained by the recipe under test, drawn in colour; references in grey.
TRAINED_KINDS = ("recipe", "variant", "shipped")


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

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "kind": self.kind, "parameters": self.parameters,
                "pretrain_loss": self.pretrain_loss,
                "dev_correct": None if self.dev is None else self.dev.correct,
                "dev_total": None if self.dev is None else self.dev.total,
                "stored": None if self.stored is None else self.stored.stored,
                "stored_total": None if self.stored is None else self.stored.total,
                "stored_asked": None if self.stored is None else self.stored.asked,
                "seconds": self.seconds, "run_dir": self.run_dir}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Row":
        dev = None if d["dev_total"] is None else Score(d["dev_correct"], d["dev_total"])
        stored = None if d["stored_total"] is None else Stored(d["stored"], d["stored_total"], d["stored_asked"])
        return cls(d["model"], d["kind"], dev, stored, d["parameters"], d["pretrain_loss"], d["seconds"], d["run_dir"])

    @property
    def dev_percent(self) -> float | None:
        return None if self.dev is None or not self.dev.total else self.dev.percent


@dataclass
class Runner:
    """Trains and scores the rows of one experiment in ``out``, all on the same data files."""

    out: Path
    corpus: str | Path = DEFAULT_CORPUS
    train_file: str | Path = DEFAULT_TRAIN
    dev_file: str | Path = DEFAULT_DEV
    test_file: str | Path | None = None  # unlabelled: predictions written beside the dev ones
    held_out: tuple[str | Path, ...] = (DEFAULT_DEV, DEFAULT_TEST)  # never mixed into pretraining
    device: str = "auto"
    reuse: bool = False
    log: Callable[[str], None] = print

    def score(self, run: str | Path) -> tuple[Score | None, Stored | None]:
        """Dev extracted (predictions written) and stored; test predictions too."""
        _, dev, _ = evaluate_file(run, self.dev_file, device=self.device, log=self.log)
        if self.test_file is not None:
            evaluate_file(run, self.test_file, device=self.device, log=self.log)
        return dev, stored_facts(run, self.dev_file, self.corpus, device=self.device)

    def baseline(self) -> Row:
        place, base = baseline(self.train_file, self.dev_file)
        self.log(f'always answering "{place}": {base if base is not None else "no labels"} on {self.dev_file}')
        return Row(f'baseline ("{place}")', "baseline", base)

    def scratch(self, label: str, model_config: ModelConfig, config: TrainConfig) -> Row:
        """Finetuned without pretraining: the model never reads the corpus."""
        run = self.out / "scratch"
        return self._reused(run) or self._trained(run, lambda: (finetune(
            self._on_device(config), run_dir=run, corpus=self.corpus, train_file=self.train_file,
            model_config=model_config, log=self.log)[0], None), Row(label, "scratch", run_dir=str(run)), run)

    def recipe(self, label: str, kind: str, model_config: ModelConfig, pretrain_config: TrainConfig,
               finetune_config: TrainConfig, where: Path, shown: Path | None = None) -> Row:
        """Pretrained (in where/pretrain) and finetuned (in where/finetune); the row names
        ``shown`` (default: where) as its run."""

        def train():
            model, _, pre = pretrain(model_config, self._on_device(pretrain_config), corpus=self.corpus,
                                     run_dir=where / "pretrain", log=self.log, mix_qa=self.train_file,
                                     held_out=self.held_out)
            finetune(self._on_device(finetune_config), run_dir=where / "finetune", init=where / "pretrain",
                     corpus=self.corpus, train_file=self.train_file, log=self.log)
            return model, pre.final_loss

        return self._reused(where) or self._trained(where, train, Row(label, kind, run_dir=str(shown or where)),
                                                    where / "finetune")

    def shipped(self, path: str | Path) -> Row:
        dev, stored = self.score(path)
        return Row(f"shipped model ({path})", "shipped", dev, stored, run_dir=str(path))

    def _on_device(self, config: TrainConfig) -> TrainConfig:
        return dataclasses.replace(config, device=self.device)

    def _reused(self, where: Path) -> Row | None:
        saved = where / "row.json"
        if self.reuse and saved.exists():
            self.log(f"reusing the finished run in {where}")
            return Row.from_dict(json.loads(saved.read_text()))
        return None

    def _trained(self, where: Path, train: Callable[[], tuple[Any, float | None]], row: Row, scored: Path) -> Row:
        start = time.perf_counter()
        model, row.pretrain_loss = train()
        row.seconds = time.perf_counter() - start
        row.parameters = model.num_parameters()
        row.dev, row.stored = self.score(scored)
        (where / "row.json").write_text(json.dumps(row.to_dict()) + "\n")
        return row

    def write(self, rows: list[Row], label: str, title: str) -> str:
        """results.md, results.json and dev_accuracy.png in ``out``; returns the table."""
        self.out.mkdir(parents=True, exist_ok=True)
        table = results_table(rows, label)
        (self.out / "results.md").write_text(table + "\n")
        (self.out / "results.json").write_text(json.dumps([r.to_dict() for r in rows], indent=2) + "\n")
        plot_dev_accuracy(rows, self.out / "dev_accuracy.png", title)
        self.log("\n" + table)
        return table


def results_table(rows: list[Row], label: str = "model") -> str:
    lines = [f"| {label} | parameters | pretrain loss | dev extracted (95% CI) | dev stored | time | run |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        params = "-" if r.parameters is None else f"{r.parameters:,}"
        loss = "-" if r.pretrain_loss is None else f"{r.pretrain_loss:.3f}"
        acc = "-" if r.dev is None else r.dev.with_interval()
        stored = "-" if r.stored is None or not r.stored.total else str(r.stored)
        secs = "-" if r.seconds is None else f"{r.seconds:.0f} s"
        lines.append(f"| {r.model} | {params} | {loss} | {acc} | {stored} | {secs} | {r.run_dir} |")
    return "\n".join(lines)


def plot_dev_accuracy(rows: list[Row], path: Path, title: str) -> Path:
    """The dev accuracy chart (``dev_accuracy_figure``) into ``path``."""
    import matplotlib.pyplot as plt

    fig = dev_accuracy_figure(rows, title)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def dev_accuracy_figure(rows: list[Row], title: str):
    """Horizontal bars of dev accuracy, each with its 95% Wilson interval as an error bar and
    its count and interval as a label; the baseline and no-pretraining rows in grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def demo(
    preset_name: str = "demo",
    *,
    out: str | Path = "runs/demo",
    attention: str = "vanilla",
    device: str = "auto",
    shipped: str | Path | None = "models/cpu",
    model_overrides: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
) -> list[Row]:
    """The main job: the baseline, a model that never read the corpus, the preset's recipe
    trained from scratch (pretrain + finetune) and the shipped model, all scored on dev
    (extracted and stored), with test-set predictions from every trained model."""
    preset = get_preset(preset_name)
    run = Runner(Path(out), test_file=DEFAULT_TEST, device=device, log=log)
    model_config = ModelConfig(**{**preset.model, "attention": attention, **(model_overrides or {})})
    log(f"== attnlab demo: preset {preset.name!r} ({preset.description}); outputs in {run.out}")
    log("== 1/4 baseline: the training file's most frequent place")
    rows = [run.baseline()]
    log("== 2/4 finetune without pretraining (the model never reads the corpus)")
    rows.append(run.scratch(f"{attention}, no pretraining", model_config, preset.finetune_scratch))
    log(f"== 3/4 the {preset.name} recipe from scratch: pretrain ({preset.pretrain.objective} objective), then finetune")
    rows.append(run.recipe(f"{attention}, {preset.name} recipe, trained now", "recipe", model_config,
                           preset.pretrain, preset.finetune, run.out, shown=run.out / "finetune"))
    if shipped and Path(shipped).exists():
        log(f"== 4/4 the shipped model {shipped} (trained with the cpu preset; see its provenance.json)")
        rows.append(run.shipped(shipped))
    else:
        log(f"== 4/4 no shipped model at {shipped!r}: skipped")
    run.write(rows, "model", f"dev accuracy on {Path(DEFAULT_DEV).name}, preset {preset.name}")
    log(f"\nextracted: the answer to 'Where was NAME born?' is the dev label; stored: of the dev people "
        f"whose {DEFAULT_CORPUS} line states their place, greedy completion of that line up to the place "
        "gives it. Test predictions: predictions-birth_test_inputs.txt beside each model's dev predictions.")
    return rows


def compare(
    model_config: ModelConfig,
    pretrain_config: TrainConfig,
    finetune_config: TrainConfig,
    scratch_config: TrainConfig,
    *,
    variants: list[str] | None = None,
    corpus: str | Path = DEFAULT_CORPUS,
    train_file: str | Path = DEFAULT_TRAIN,
    dev_file: str | Path = DEFAULT_DEV,
    out: str | Path = "runs/compare",
    device: str = "auto",
    scratch: bool = True,
    reuse: bool = False,
    log: Callable[[str], None] = print,
    preset: str | None = None,  # named in the chart's title
) -> list[Row]:
    """Every variant (default: the whole registry) through pretrain -> finetune -> dev, with
    the same model shape, seeds and data; plus the most-frequent-place baseline and, if
    ``scratch``, vanilla finetuned without pretraining. Writes results.md/.json and a chart."""
    variants = list(variants or REGISTRY)
    unknown = [v for v in variants if v not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(REGISTRY)}")
    run = Runner(Path(out), corpus, train_file, dev_file, held_out=(dev_file, DEFAULT_TEST), device=device,
                 reuse=reuse, log=log)
    run.out.mkdir(parents=True, exist_ok=True)
    log(f"== attnlab compare: {', '.join(variants)}; outputs in {run.out}")
    rows = [run.baseline()]
    if scratch:
        log("== no pretraining: vanilla finetuned from scratch")
        rows.append(run.scratch("vanilla, no pretraining", dataclasses.replace(model_config, attention="vanilla"),
                                scratch_config))
    for i, name in enumerate(variants, 1):
        log(f"== {i}/{len(variants)} {name}: pretrain, finetune, evaluate on {dev_file}")
        rows.append(run.recipe(name, "variant", dataclasses.replace(model_config, attention=name),
                               pretrain_config, finetune_config, run.out / name))
    run.write(rows, "variant", f"dev accuracy on {Path(dev_file).name}" + (f", preset {preset}" if preset else ""))
    log(f"\nwrote {run.out / 'results.md'}, {run.out / 'results.json'} and {run.out / 'dev_accuracy.png'}; "
        f"runs in {run.out}/*/")
    return rows
