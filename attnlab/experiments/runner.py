"""The runner behind `attnlab demo` (attnlab/experiments/demo.py) and `attnlab compare`
(attnlab/experiments/compare.py): it trains and scores the rows of one experiment from pipeline
stages; the rows, tables and chart are attnlab/experiments/results.py's.

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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..answering.evaluate import Score
from ..answering.knowledge import Stored
from ..config.settings import DEFAULT_CORPUS, DEFAULT_DEV, DEFAULT_TEST, DEFAULT_TRAIN, ModelConfig, TrainConfig
from ..core import logs
from ..core.paths import write_atomically
from ..data.datasets import read_qa
from ..model.checkpoint import CHECKPOINT_NAME, remove_stale_temp_files
from ..training.pipeline import baseline, evaluate_file, finetune_in, pretrain_in, stored_facts
from ..training.rundir import Run
from . import records as records_module
from .comparison import correctness
from .provenance import check_settings, stage_settings
from .results import RESULT_FILES, Row, write_results

ROW_FILES = ("row.json", "settings.json", "stages.json")  # a row's record, in its directory
RUN_FILES = (CHECKPOINT_NAME, "metrics.jsonl", "config.json")  # a training stage's, in its run directory


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: damaged ({e}); start over with --overwrite") from None


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(value) + "\n")  # a kill -9 or a full disk leaves the earlier one whole


@dataclass
class Stage:
    """One stage of a row: its name, its run directory, its configs as given (``fit_as`` names
    it to Runner.fit: pretrain, finetune, or scratch) and its training in the opened run
    (returning the model and the TrainResult)."""

    name: str  # pretrain or finetune: the checkpoint's stage
    run_dir: Path
    model_config: ModelConfig | None  # None: finetuning from the pretrained model in ``init``
    config: TrainConfig
    train: Callable[[Run], tuple[Any, Any]]
    fit_as: str = ""  # default: the name


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
    # A stage's config (stage: pretrain, finetune, or scratch: a row of finetuning alone) as it
    # trains, fitted to the experiment's time when it has one (compare.Budget.fit); the rows'
    # settings record the configs as given.
    fit: Callable[[str, Path, TrainConfig], TrainConfig] = lambda _stage, _run_dir, config: config

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

        def train(run: Run):
            model, _, result = finetune_in(run, corpus=self.corpus, train_file=self.train_file)
            return model, result

        return self._row(where, {**self.settings, "model": model_config.to_dict()},
                         Row(label, "scratch", run_dir=str(where)),
                         [Stage("finetune", where, model_config, config, train, fit_as="scratch")], scored=where)

    def recipe(self, label: str, kind: str, model_config: ModelConfig, pretrain_config: TrainConfig,
               finetune_config: TrainConfig, where: Path, shown: Path | None = None) -> Row:
        """Pretrained (in where/pretrain) and finetuned (in where/finetune); the row names
        ``shown`` (default: where) as its run."""

        def pretrained(run: Run):
            model, _, result = pretrain_in(run, corpus=self.corpus, mix_qa=self.train_file, held_out=self.held_out)
            return model, result

        def finetuned(run: Run):
            model, _, result = finetune_in(run, init=where / "pretrain", corpus=self.corpus,
                                           train_file=self.train_file)
            return model, result

        stages = [Stage("pretrain", where / "pretrain", model_config, pretrain_config, pretrained),
                  Stage("finetune", where / "finetune", None, finetune_config, finetuned)]
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

    def _train(self, stage: Stage, resume: bool) -> tuple[Any, Any]:
        """A stage trained in its run, opened here (rundir.Run.open) with its config fitted to the
        experiment's time (``fit``) and on the runner's device."""
        config = dataclasses.replace(self.fit(stage.fit_as or stage.name, stage.run_dir, stage.config),
                                     device=self.device)
        with Run.open(stage.run_dir, stage.name, stage.model_config, config, resume=resume, log=self.log) as run:
            return stage.train(run)

    def _row(self, where: Path, settings: dict[str, Any], row: Row, stages: list[Stage], scored: Path) -> Row:
        """The row kept from ``where`` (resume, reuse), or its stages trained (each finished one
        recorded in stages.json, skipped when the row continues) and the model scored."""
        kept = self.kept(where, settings)
        if kept is not None:
            return kept
        self._begin(where, settings, [stage.run_dir for stage in stages])
        done = _read_json(where / "stages.json") if (where / "stages.json").exists() else {}
        for stage in stages:
            if stage.name in done:
                self.log(f"keeping the finished {stage.name} stage in {stage.run_dir}")
                continue
            # Only a stage with a checkpoint resumes; the others start afresh, into directories
            # that hold no checkpoint (start() refused or removed them, _begin() refuses them).
            resume = self.resume and (stage.run_dir / CHECKPOINT_NAME).exists()
            start = time.perf_counter()
            model, result = self._train(stage, resume)
            done[stage.name] = {"final_loss": result.final_loss, "seconds": time.perf_counter() - start,
                          "parameters": model.num_parameters()}
            _write_json(where / "stages.json", done)
        row.pretrain_loss = done.get("pretrain", {}).get("final_loss")
        row.seconds = sum(stage["seconds"] for stage in done.values())  # of the sessions that finished them
        row.parameters = done[stages[-1].name]["parameters"]
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
        """The experiment's results in ``out`` (results.write_results), recording ``settings``
        (default: the runner's)."""
        return write_results(self.out, rows, label, title, self.settings if settings is None else settings,
                             reference=reference, dev_file=self.dev_file, log=self.log)
