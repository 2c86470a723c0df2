"""Experiments made of pipeline stages: `attnlab demo` (the main job) and `attnlab compare`
(every attention variant through the same recipe), on one runner, one results row, one table
and one chart.

Each trained row has a directory that says how far it got: ``settings.json`` (written when its
training starts: preset, model and training configs, data files with their sha256, attnlab
version), ``stages.json`` (each finished stage: final loss, time, parameters) and, once scored,
``row.json`` (the row with its settings). A new experiment refuses an output directory that
already holds an experiment's files. ``resume`` keeps finished rows and continues an
interrupted stage from its checkpoint; ``reuse`` keeps finished rows (so runs trained by
separate processes, e.g. one per core, are gathered into one table) and refuses unfinished
ones; ``overwrite`` removes the earlier experiment's files and starts over. A kept row or a
continued stage must have been made with this run's settings: a difference is an error naming
the setting and both values. results.md and results.json record the settings too.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from .._version import __version__
from ..core import bounds, datafiles, logs
from ..model.attention import REGISTRY, attention_class, pin, plugin
from ..model.checkpoint import CHECKPOINT_NAME, load_checkpoint, remove_stale_temp_files
from ..config.settings import (
    DEFAULT_CORPUS, DEFAULT_DEV, DEFAULT_TEST, DEFAULT_TRAIN, ModelConfig, TrainConfig, get_preset
)
from ..answering.evaluate import Score
from ..answering.knowledge import Stored
from ..core.paths import file_sha256, save_figure, write_atomically
from . import comparison
from . import records as records_module
from .comparison import correctness
# NOT_RESULTS: training settings that change how a run is logged or saved, not what it trains
from .records import NOT_RESULTS, TRAIN_STAGES, as_before
from ..data.datasets import read_qa
from ..training.pipeline import baseline, evaluate_file, finetune, pretrain, stored_facts
from ..core.plotting import pyplot

# Rows of models trained by the recipe under test, drawn in colour; references in grey.
TRAINED_KINDS = ("recipe", "variant", "shipped")
ROW_FILES = ("row.json", "settings.json", "stages.json")  # a row's record, in its directory
RUN_FILES = (CHECKPOINT_NAME, "metrics.jsonl", "config.json")  # a training stage's, in its run directory
RESULT_FILES = ("results.md", "results.json", "dev_accuracy.png")  # the experiment's, in its output directory
DEMO_MINUTES = 15.0  # what `attnlab demo` takes at most on a 2-core CPU, every row included
# What the demo does after the recipe's pretraining: its finetuning and the scoring of it and of
# the shipped model (dev, stored, test predictions), on a slow 2-core CPU.
AFTER_PRETRAINING_MINUTES = 2.5
MIN_PRETRAINING_MINUTES = 1.0  # however slow the rest was, the recipe gets this much


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


def experiment_settings(preset: str | None, model_config: ModelConfig, pretrain_config: TrainConfig,
                        finetune_config: TrainConfig, scratch_config: TrainConfig,
                        data: dict[str, Any]) -> dict[str, Any]:
    """What an experiment's rows are made with: the preset's name, the model config, the three
    training configs (the device left out: it may change), each data file's path and sha256,
    and the attnlab version (recorded, not compared)."""
    configs = dict(zip(TRAIN_STAGES, (pretrain_config, finetune_config, scratch_config)))
    return {"preset": preset, "model": model_config.to_dict(),
            **{stage: stage_settings(c) for stage, c in configs.items()},
            "data": {role: data_file(path) for role, path in data.items()}, "attnlab": __version__}


def stage_settings(config: TrainConfig) -> dict[str, Any]:
    """A training stage's config as settings record it: the device left out (it may change)."""
    return {k: v for k, v in config.to_dict().items() if k != "device"}


def data_file(path: Any) -> dict[str, Any]:
    """A data file as recorded in settings: where it was read and what it held."""
    p = Path(path)
    return {"path": str(p), "sha256": file_sha256(p) if p.is_file() else None}


def settings_differences(stored: dict[str, Any], current: dict[str, Any],
                         prefix: str = "") -> list[tuple[str, str, str]]:
    """(setting, stored value, current value) for every setting that differs, in the order of
    ``current``; data files compare by content, logging and checkpoint cadence not at all."""
    differences = []
    for key in [*current, *(k for k in stored if k not in current)]:
        name, old, new = f"{prefix}{key}", stored.get(key, _UNSET), current.get(key, _UNSET)
        if name == "attnlab" or (prefix.rstrip(".") in TRAIN_STAGES and key in NOT_RESULTS):
            continue
        if prefix.rstrip(".") in TRAIN_STAGES and all(v is _UNSET or as_before(key, v) for v in (old, new)):
            continue  # an option added since, at the value that trains as before it existed
        if _is_data_file(old) and _is_data_file(new):
            if old["sha256"] != new["sha256"]:
                differences.append((name, _shown_file(old), _shown_file(new)))
        elif isinstance(old, dict) and isinstance(new, dict):
            differences += settings_differences(old, new, f"{name}.")
        elif old != new:
            differences.append((name, _shown(old), _shown(new)))
    return differences


_UNSET = object()


def _is_data_file(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"path", "sha256"}


def _shown_file(value: dict[str, Any]) -> str:
    return f"{value['path']} (sha256 {str(value['sha256'])[:12]})" if value["sha256"] else f"{value['path']} (missing)"


def _shown(value: Any) -> str:
    return "(not set)" if value is _UNSET else repr(value)


def check_settings(source: Path, stored: dict[str, Any] | None, current: dict[str, Any]) -> None:
    """A one-line error if what ``source`` records was made with other settings than ``current``."""
    if not isinstance(stored, dict):
        raise ValueError(f"{source}: records no settings (written before attnlab recorded them), so it cannot "
                         "be checked against this run: start over with --overwrite")
    differences = settings_differences(stored, current)
    if differences:
        shown = "; ".join(f"{name} was {old} there, {new} now" for name, old, new in differences[:3])
        more = f" (and {len(differences) - 3} more)" if len(differences) > 3 else ""
        raise ValueError(f"{source}: made with other settings than this run: {shown}{more}; run with the "
                         "settings it was made with, or start over with --overwrite")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: damaged ({e}); start over with --overwrite") from None


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(value) + "\n")  # a kill -9 or a full disk leaves the earlier one whole


# One stage of a row: its name, its run directory and its training, given whether to resume.
Stage = tuple[str, Path, Callable[[bool], tuple[Any, Any]]]


@dataclass
class Runner:
    """Trains and scores the rows of one experiment in ``out``, all on the same data files and
    ``settings`` (experiment_settings; each row's model config replaces the "model" entry)."""

    out: Path
    corpus: str | Path = DEFAULT_CORPUS
    train_file: str | Path = DEFAULT_TRAIN
    dev_file: str | Path = DEFAULT_DEV
    test_file: str | Path | None = None  # unlabelled: predictions written beside the dev ones
    held_out: tuple[str | Path, ...] = (DEFAULT_DEV, DEFAULT_TEST)  # never mixed into pretraining
    device: str = "auto"
    reuse: bool = False  # keep finished rows (row.json)
    resume: bool = False  # keep finished rows and continue interrupted stages from their checkpoints
    overwrite: bool = False  # remove the earlier experiment's files and start over
    settings: dict[str, Any] = field(default_factory=dict)
    log: Callable[[str], None] = logs.note

    def start(self, row_dirs: list[Path]) -> None:
        """Before any work: without resume, reuse or overwrite, an ``out`` that already holds
        the files of an experiment (in these rows' directories) is refused; with overwrite they
        are removed. The temporary files of checkpoint writes cut short are removed."""
        if self.overwrite and (self.resume or self.reuse):
            raise ValueError("--overwrite starts over: it cannot be combined with --resume or --reuse")
        found = [p for p in self._files(row_dirs) if p.exists()]
        if found and self.overwrite:
            for p in found:
                p.unlink()
            self.log(f"starting over in {self.out}: removed {len(found)} files of the earlier experiment")
        elif found and not (self.resume or self.reuse):
            shown = ", ".join(str(p) for p in found[:2]) + (f" and {len(found) - 2} more" if len(found) > 2 else "")
            raise ValueError(f"{self.out}: already holds an experiment's files ({shown}); continue it with "
                             "--resume or start over with --overwrite")
        for d in row_dirs:
            for run_dir in self._run_dirs(d):
                if run_dir.is_dir():
                    remove_stale_temp_files(run_dir)

    def _files(self, row_dirs: list[Path]) -> list[Path]:
        files = [self.out / name for name in RESULT_FILES]
        for d in row_dirs:
            files += [d / name for name in ROW_FILES]
            files += [run_dir / name for run_dir in self._run_dirs(d) for name in RUN_FILES]
        return files

    @staticmethod
    def _run_dirs(where: Path) -> list[Path]:
        """Where a row's stages train: the row directory itself (no pretraining) or its
        pretrain/ and finetune/."""
        return [where, where / "pretrain", where / "finetune"]

    def score(self, run: str | Path) -> tuple[Score | None, Stored | None, str | None]:
        """Dev extracted (predictions written), stored, and each dev question's correctness as
        a 0/1 string (None without labels); test predictions too."""
        answers, dev, _ = evaluate_file(run, self.dev_file, device=self.device, log=self.log)
        if self.test_file is not None:
            evaluate_file(run, self.test_file, device=self.device, log=self.log)
        each = None
        if dev is not None:
            labels = [e.answer for e in read_qa(self.dev_file)]
            each = "".join("1" if c else "0" for c in correctness([a.answer for a in answers], labels))
        return dev, stored_facts(run, self.dev_file, self.corpus, device=self.device), each

    def baseline(self) -> Row:
        place, base = baseline(self.train_file, self.dev_file)
        self.log(f'always answering "{place}": {base if base is not None else "no labels"} on {self.dev_file}')
        return Row(f'baseline ("{place}")', "baseline", base)

    def scratch(self, label: str, model_config: ModelConfig, config: TrainConfig) -> Row:
        """Finetuned without pretraining: the model never reads the corpus."""
        where = self.out / "scratch"

        def train(resume: bool):
            model, _, result = finetune(self._on_device(config), run_dir=where, corpus=self.corpus,
                                        train_file=self.train_file, model_config=model_config, resume=resume,
                                        log=self.log)
            return model, result

        return self._row(where, {**self.settings, "model": model_config.to_dict()},
                         Row(label, "scratch", run_dir=str(where)), [("finetune", where, train)], scored=where)

    def recipe(self, label: str, kind: str, model_config: ModelConfig, pretrain_config: TrainConfig,
               finetune_config: TrainConfig, where: Path, shown: Path | None = None) -> Row:
        """Pretrained (in where/pretrain) and finetuned (in where/finetune); the row names
        ``shown`` (default: where) as its run."""

        def pretrained(resume: bool):
            model, _, result = pretrain(model_config, self._on_device(pretrain_config), corpus=self.corpus,
                                        run_dir=where / "pretrain", resume=resume, log=self.log,
                                        mix_qa=self.train_file, held_out=self.held_out)
            return model, result

        def finetuned(resume: bool):
            model, _, result = finetune(self._on_device(finetune_config), run_dir=where / "finetune",
                                        init=where / "pretrain", corpus=self.corpus, train_file=self.train_file,
                                        resume=resume, log=self.log)
            return model, result

        stages: list[Stage] = [("pretrain", where / "pretrain", pretrained),
                               ("finetune", where / "finetune", finetuned)]
        return self._row(where, self.recipe_settings(model_config, pretrain_config, finetune_config),
                         Row(label, kind, run_dir=str(shown or where)), stages, scored=where / "finetune")

    def recipe_settings(self, model_config: ModelConfig, pretrain_config: TrainConfig,
                        finetune_config: TrainConfig) -> dict[str, Any]:
        """What a recipe row records as its settings: the experiment's, with this row's model
        and the stages' own configs (a seeded row's differ from the experiment's in their seed)."""
        return {**self.settings, "model": model_config.to_dict(),
                "pretrain": stage_settings(pretrain_config), "finetune": stage_settings(finetune_config)}

    def shipped(self, path: str | Path) -> Row:
        dev, stored, each = self.score(path)
        return Row(f"shipped model ({path})", "shipped", dev, stored, run_dir=str(path), dev_each=each)

    def _on_device(self, config: TrainConfig) -> TrainConfig:
        return dataclasses.replace(config, device=self.device)

    def _row(self, where: Path, settings: dict[str, Any], row: Row, stages: list[Stage], scored: Path) -> Row:
        """The row kept from ``where`` (resume, reuse), or its stages trained (each finished one
        recorded in stages.json, skipped when the row continues) and the model scored."""
        kept = self.kept(where, settings)
        if kept is not None:
            return kept
        self._begin(where, settings, [run_dir for _, run_dir, _ in stages])
        done = _read_json(where / "stages.json") if (where / "stages.json").exists() else {}
        for name, run_dir, train in stages:
            if name in done:
                self.log(f"keeping the finished {name} stage in {run_dir}")
                continue
            # Only a stage with a checkpoint resumes; the others start afresh, into directories
            # that hold no checkpoint (start() refused or removed them, _begin() refuses them).
            resume = self.resume and (run_dir / CHECKPOINT_NAME).exists()
            start = time.perf_counter()
            model, result = train(resume)
            done[name] = {"final_loss": result.final_loss, "seconds": time.perf_counter() - start,
                          "parameters": model.num_parameters()}
            _write_json(where / "stages.json", done)
        row.pretrain_loss = done.get("pretrain", {}).get("final_loss")
        row.seconds = sum(stage["seconds"] for stage in done.values())  # of the sessions that finished them
        row.parameters = done[stages[-1][0]]["parameters"]
        row.dev, row.stored, row.dev_each = self.score(scored)
        _write_json(where / "row.json", {**row.to_dict(), "settings": settings})
        return row

    def kept(self, where: Path, settings: dict[str, Any]) -> Row | None:
        """With resume or reuse, the finished row in ``where`` (its settings checked), else None."""
        saved = where / "row.json"
        if not (self.reuse or self.resume) or not saved.exists():
            return None
        stored = _read_json(saved)
        check_settings(saved, stored.get("settings"), settings)
        if (problem := records_module.row_problem(stored)) is not None:
            raise ValueError(f"{saved}: damaged: {problem}; start over with --overwrite")
        self.log(f"reusing the finished run in {where}")
        return Row.from_dict(stored)

    def _begin(self, where: Path, settings: dict[str, Any], run_dirs: list[Path]) -> None:
        """A row's training starts (settings.json written) or, with resume, continues: its
        recorded settings must be this run's."""
        recorded = where / "settings.json"
        checkpoints = [d / CHECKPOINT_NAME for d in run_dirs if (d / CHECKPOINT_NAME).exists()]
        started = recorded.exists() or (where / "stages.json").exists() or checkpoints
        if started and not self.resume:
            raise ValueError(f"{where}: holds an unfinished run ({(checkpoints or [recorded])[0]}): continue it "
                             "with --resume or start over with --overwrite")
        if recorded.exists():
            check_settings(recorded, _read_json(recorded), settings)
            self.log(f"continuing the unfinished run in {where}")
        elif started:
            raise ValueError(f"{checkpoints[0] if checkpoints else where / 'stages.json'}: no settings.json records "
                             "how this run was made, so it cannot be continued safely: start over with --overwrite")
        else:
            _write_json(recorded, settings)

    def write(self, rows: list[Row], label: str, title: str, settings: dict[str, Any] | None = None,
              reference: str | None = None) -> str:
        """results.md, results.json and dev_accuracy.png in ``out``, each recording the
        settings (default: the runner's); with a ``reference`` variant, also each variant's
        seeds summarised and tested against it (variant_comparison). Returns the table(s)."""
        settings = self.settings if settings is None else settings
        self.out.mkdir(parents=True, exist_ok=True)
        table = results_table(rows, label)
        record: dict[str, Any] = {"settings": settings, "rows": [r.to_dict() for r in rows]}
        if reference is not None:
            compared = variant_comparison(rows, reference, self.dev_file)
            table += "\n\n" + comparison_table(compared, reference)
            record["comparison"] = comparison_record(compared, reference)
        write_atomically(self.out / "results.md", results_header(settings) + "\n\n" + table + "\n")
        write_atomically(self.out / "results.json", json.dumps(record, indent=2) + "\n")
        plot_dev_accuracy(rows, self.out / "dev_accuracy.png", title)
        logs.results_via(self.log)("\n" + table)  # the experiment's result: --quiet keeps it
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


def demo(
    preset_name: str = "demo",
    *,
    out: str | Path = "runs/demo",
    attention: str = "vanilla",
    device: str = "auto",
    shipped: str | Path | None = "models/cpu",
    model_overrides: dict[str, Any] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] = logs.note,
) -> list[Row]:
    """The main job: the baseline, a model that never read the corpus, the preset's recipe
    trained from scratch (pretrain + finetune) and the shipped model, all scored on dev
    (extracted and stored), with test-set predictions from every trained model. ``resume``
    continues an interrupted demo in ``out``; ``overwrite`` starts over there."""
    preset = get_preset(preset_name)
    model_config = ModelConfig(**{**preset.model, "attention": attention, **(model_overrides or {})})
    data = {"corpus": DEFAULT_CORPUS, "train": DEFAULT_TRAIN, "dev": DEFAULT_DEV, "test": DEFAULT_TEST}
    settings = experiment_settings(preset.name, model_config, preset.pretrain, preset.finetune,
                                   preset.finetune_scratch, data)
    run = Runner(Path(out), test_file=DEFAULT_TEST, device=device, resume=resume, overwrite=overwrite,
                 settings=settings, log=log)
    run.start([run.out / "scratch", run.out])
    log(f"== attnlab demo: preset {preset.name!r} ({preset.description}); outputs in {run.out}")
    try:
        rows = _demo_rows(run, preset, model_config, shipped)
    except KeyboardInterrupt:
        log(f"demo interrupted: finished stages are kept in {run.out}; continue with: "
            f"{demo_command(preset.name, run.out, attention, device, shipped)}")
        raise
    run.write(rows, "model", f"dev accuracy on {Path(DEFAULT_DEV).name}, preset {preset.name}")
    logs.results_via(log)(f"\nextracted: the answer to 'Where was NAME born?' is the dev label; stored: of the dev people "
        f"whose {DEFAULT_CORPUS} line states their place, greedy completion of that line up to the place "
        "gives it. Test predictions: predictions-birth_test_inputs.txt beside each model's dev predictions.")
    return rows


def _demo_rows(run: Runner, preset, model_config: ModelConfig, shipped: str | Path | None) -> list[Row]:
    log, attention, started = run.log, plugin.label(model_config.attention), time.monotonic()
    log("== 1/4 baseline: the training file's most frequent place")
    rows = [run.baseline()]
    log("== 2/4 finetune without pretraining (the model never reads the corpus)")
    rows.append(run.scratch(f"{attention}, no pretraining", model_config, preset.finetune_scratch))
    log(f"== 3/4 the {preset.name} recipe from scratch: pretrain ({preset.pretrain.objective} objective), then finetune")
    pretraining = demo_pretraining(preset.pretrain, run.out / "pretrain", (time.monotonic() - started) / 60, log)
    rows.append(run.recipe(f"{attention}, {preset.name} recipe, trained now", "recipe", model_config,
                           pretraining, preset.finetune, run.out, shown=run.out / "finetune"))
    if shipped and Path(shipped).exists():
        log(f"== 4/4 the shipped model {shipped} ({_shipped_recipe(shipped)}; see its provenance.json)")
        rows.append(run.shipped(shipped))
    else:
        log(f"== 4/4 no shipped model at {shipped!r}: skipped")
    return rows


def demo_pretraining(config: TrainConfig, run_dir: Path, spent: float, log: Callable[[str], None] = logs.note
                     ) -> TrainConfig:
    """The demo recipe's pretraining, fitted (``--minutes``) to what is left of DEMO_MINUTES after
    the ``spent`` minutes and AFTER_PRETRAINING_MINUTES, never more than its preset's minutes; a
    resumed demo keeps the fit its pretraining started with. A preset without minutes runs as it is."""
    if not config.minutes:
        return config
    ckpt = run_dir / CHECKPOINT_NAME
    if ckpt.exists():
        return dataclasses.replace(config, minutes=load_checkpoint(ckpt, training_state=False).meta["train_config"]["minutes"])
    left = round(max(MIN_PRETRAINING_MINUTES, DEMO_MINUTES - spent - AFTER_PRETRAINING_MINUTES), 1)
    if left >= config.minutes:
        return config
    log(f"pretraining fitted to {left:g} minutes: the demo's {DEMO_MINUTES:g} less {spent:.1f} spent so far and "
        f"{AFTER_PRETRAINING_MINUTES:g} for what follows")
    return dataclasses.replace(config, minutes=left)


def _shipped_recipe(shipped: str | Path) -> str:
    """How a shipped model was trained, as its provenance.json names it."""
    provenance = Path(shipped) / "provenance.json"
    try:
        preset = json.loads(provenance.read_text(encoding="utf-8")).get("preset")
    except (OSError, ValueError):
        preset = None
    return f"trained with the {preset} preset" if preset else "its recipe is not recorded"


def demo_command(preset: str, out: Path, attention: str, device: str, shipped: str | Path | None) -> str:
    """The `attnlab demo --resume` command that continues this demo (options at their defaults
    left out; --data-dir given when data files are read from one)."""
    words = ["attnlab", "demo", "--resume", "--preset", preset, "--out-dir", str(out)]
    if attention != "vanilla":
        words += ["--attention", attention]
    if device != "auto":
        words += ["--device", device]
    if not shipped or str(shipped) not in ("models/cpu", datafiles.resolved_text("models/cpu")):
        words += ["--shipped", str(shipped or "")]
    if datafiles.data_dir_override() is not None:
        words += ["--data-dir", str(datafiles.data_dir_override())]
    return shlex.join(words)


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
    resume: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] = logs.note,
    preset: str | None = None,  # named in the chart's title
    seeds: int = 1,
    reference: str | None = None,
    records: str | Path | None = None,
    gather: bool = False,
    only_seeds: Sequence[int] | None = None,
) -> list[Row]:
    """Every variant (default: the whole registry) through pretrain -> finetune -> dev, with the
    same model shape, seeds and data; plus the most-frequent-place baseline and, if ``scratch``,
    vanilla finetuned without pretraining. Each variant is trained ``seeds`` times (seed k: both
    stages' seeds plus k, in VARIANT/seed-K/ when seeds > 1) and compared with ``reference``
    (default: vanilla if chosen, else the first variant) on the same questions. Writes
    results.md/.json and a chart. ``reuse`` keeps finished rows, ``resume`` also continues
    interrupted ones, ``overwrite`` starts over. ``records``: attnlab/experiments/records.py.
    ``gather`` trains nothing: the table of the records and the rows finished in ``out``.
    ``only_seeds``: train only these k (the scratch row with k = 0) and gather the others."""
    variants = [pin(v) for v in (variants or REGISTRY)]  # your own attention: its file, pinned
    reference = _check_variants(variants, reference, seeds)
    trained = _trained_seeds(seeds, only_seeds, gather)
    scratch_trained = scratch and 0 in trained
    pretrain_config = equal_passes(pretrain_config, log)
    data = {"corpus": corpus, "train": train_file, "dev": dev_file, "test": DEFAULT_TEST}  # test: held out
    settings = experiment_settings(preset, model_config, pretrain_config, finetune_config, scratch_config, data)
    run = Runner(Path(out), corpus, train_file, dev_file, held_out=(dev_file, DEFAULT_TEST), device=device,
                 reuse=reuse or gather, resume=resume, overwrite=overwrite, settings=settings, log=log)
    # gathering touches no run directory: other processes may be training in them
    run.start(([run.out / "scratch"] if scratch_trained else [])
              + [seed_dir(run.out / plugin.dirname(name), k, seeds) for name in variants for k in trained])
    run.out.mkdir(parents=True, exist_ok=True)
    log(f"== attnlab compare: {', '.join(map(plugin.label, variants))}; outputs in {run.out}")
    try:
        rows = _compare_rows(run, model_config, pretrain_config, finetune_config, scratch_config, variants,
                             scratch_trained, seeds, records, trained)
    except KeyboardInterrupt:
        log(f"compare interrupted: finished stages are kept in {run.out}; continue with the same command "
            "plus --resume (in place of --overwrite or --reuse)")
        raise
    # Rows differ in their attention only: the results name the variants instead.
    model = {k: v for k, v in settings["model"].items() if k != "attention"}
    _write_comparison(run, rows, f"dev accuracy on {Path(dev_file).name}" + (f", preset {preset}" if preset else ""),
                      {**settings, "model": model, "variants": variants, "scratch": scratch, "seeds": seeds,
                       "reference": plugin.label(reference)})
    return rows


def _write_comparison(run: Runner, rows: list[Row], title: str, settings: dict[str, Any]) -> None:
    run.write(rows, "variant", title, settings=settings, reference=settings["reference"])
    logs.results_via(run.log)(f"\nwrote {run.out / 'results.md'}, {run.out / 'results.json'} and "
                              f"{run.out / 'dev_accuracy.png'}; runs in {run.out}/*/")


def equal_passes(config: TrainConfig, log: Callable[[str], None] = logs.note) -> TrainConfig:
    """A comparison's pretraining: its epochs as given, never fitted to --minutes (a fit follows
    the speed of its own moment and machine, so compared runs would differ in passes)."""
    if not config.minutes:
        return config
    log(f"every run trains the {config.epochs:g} epochs given, not fitted to --minutes {config.minutes:g}: "
        "a fit follows the machine's speed at that moment, so compared runs would differ in passes")
    return dataclasses.replace(config, minutes=0.0)


def _trained_seeds(seeds: int, only_seeds: Sequence[int] | None, gather: bool) -> list[int]:
    """The seed indices this run trains: none when gathering, else ``only_seeds`` (each checked
    to be one of the run's 0..seeds-1) or all of them."""
    if only_seeds is None:
        return [] if gather else list(range(seeds))
    if gather:
        raise ValueError("--only-seeds names seeds to train, and --gather trains none: give one of them")
    outside = sorted({k for k in only_seeds if not 0 <= k < seeds})
    if outside:
        raise ValueError(f"--only-seeds {','.join(map(str, outside))}: with --seeds {seeds} the seed indices "
                         f"are 0 to {seeds - 1}")
    return sorted(set(only_seeds))


def _check_variants(variants: list[str], reference: str | None, seeds: int) -> str:
    """The reference variant, after refusing unknown variants, a variant named twice, a reference
    not among them and a seed count outside 1..100."""
    unknown = [v for v in variants if v not in REGISTRY and not plugin.is_plugin(v)]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(REGISTRY)} "
                         "(or your own: FILE.py:ClassName)")
    twice = sorted({v for v in variants if variants.count(v) > 1})
    if twice:
        raise ValueError(f"the variants name {', '.join(twice)} more than once; name each variant once")
    for v in variants:
        if plugin.is_plugin(v):
            attention_class(v)  # a bad plug-in is refused before anything trains
    if (problem := bounds.COMPARE_SEEDS.problem(seeds)) is not None:
        raise ValueError(f"the number of seeds {problem}")
    if reference and plugin.is_plugin(reference):
        reference = pin(reference)
    reference = reference or ("vanilla" if "vanilla" in variants else variants[0])
    if reference not in variants:
        raise ValueError(f"the reference variant {reference!r} is not among the variants trained "
                         f"({', '.join(variants)})")
    return reference


def seed_dir(variant_dir: Path, k: int, seeds: int) -> Path:
    """Where seed k of a variant trains: VARIANT/ with one seed (as before seeds existed),
    VARIANT/seed-K/ with several (benchmarks/shaping.py lays out its settings alike and finds a
    compare run's seeds by it)."""
    return variant_dir if seeds == 1 else variant_dir / f"seed-{k}"


def _compare_rows(run: Runner, model_config: ModelConfig, pretrain_config: TrainConfig,
                  finetune_config: TrainConfig, scratch_config: TrainConfig, variants: list[str],
                  scratch: bool, seeds: int, records: str | Path | None,
                  trained: Sequence[int]) -> list[Row]:
    rows = [run.baseline()]
    if scratch:
        run.log("== no pretraining: vanilla finetuned from scratch")
        rows.append(run.scratch("vanilla, no pretraining", dataclasses.replace(model_config, attention="vanilla"),
                                scratch_config))
    # Seed-major: every variant's seed 0 before any seed 1, so that a grid cut short (or built
    # up over days) is balanced across the variants. The rows are listed variant by variant.
    done: dict[tuple[str, int], Row] = {}
    for k in range(seeds):
        for i, name in enumerate(variants, 1):
            seed = pretrain_config.seed + k
            shown = f", seed {seed}" if seeds > 1 else ""
            gather = k not in trained
            run.log(f"== {i}/{len(variants)} {plugin.label(name)}{shown}" + ("" if gather else
                    f": pretrain, finetune, evaluate on {run.dev_file}"))
            row = _variant_row(run, plugin.label(name) + shown, dataclasses.replace(model_config, attention=name),
                               _seeded(pretrain_config, k), _seeded(finetune_config, k),
                               seed_dir(run.out / plugin.dirname(name), k, seeds), records, gather)
            if row is not None:
                done[name, k] = row
    missing = [f"{name} seed {pretrain_config.seed + k}" for k in range(seeds) for name in variants
               if (name, k) not in done]
    if missing:
        run.log(f"missing (neither a record nor a finished run): {', '.join(missing)}")
    return rows + [done[name, k] for name in variants for k in range(seeds) if (name, k) in done]


def _variant_row(run: Runner, label: str, model_config: ModelConfig, pretrain_config: TrainConfig,
                 finetune_config: TrainConfig, where: Path, records: str | Path | None,
                 gather: bool) -> Row | None:
    """One (variant, seed): from its record when ``records`` holds one made with these settings,
    else the finished row in ``where`` or (unless ``gather``) trained now; a row that has no
    record yet leaves one. None: gathering, and neither exists."""
    variant, seed = model_config.attention, pretrain_config.seed
    settings = run.recipe_settings(model_config, pretrain_config, finetune_config)
    recorded = records and records_module.find(records, variant, seed, settings, questions=len(read_qa(run.dev_file)))
    if recorded:
        run.log(f"reusing the record {records_module.record_path(records, variant, seed, settings)} "
                f"(made with these settings and attnlab {settings.get('attnlab')})")
        return Row.from_dict(recorded["row"])
    if gather:
        row = run.kept(where, settings)
    else:
        row = run.recipe(label, "variant", model_config, pretrain_config, finetune_config, where)
    if row is None:
        return None
    row.variant, row.seed = plugin.label(variant), seed
    if records:
        predictions = records_module.read_predictions(where / "finetune" / f"predictions-{Path(run.dev_file).stem}.txt")
        path = records_module.save(records, variant, seed, row.to_dict(), settings, predictions)
        run.log(f"recorded {label} in {path}")
    return row


def _seeded(config: TrainConfig, k: int) -> TrainConfig:
    """Seed k of a stage: its seed plus k (k = 0: the config itself)."""
    return dataclasses.replace(config, seed=config.seed + k) if k else config
