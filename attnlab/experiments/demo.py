"""`attnlab demo`, the main job: the baseline, a model that never read the corpus, the preset's
recipe trained now (its pretraining fitted to what is left of DEMO_MINUTES) and the shipped
model, all on the runner (attnlab/experiments/runner.py)."""

from __future__ import annotations

import dataclasses
import json
import shlex
import time
from pathlib import Path
from typing import Any, Callable

from ..config.settings import DEFAULT_CORPUS, DEFAULT_DEV, DEFAULT_TEST, DEFAULT_TRAIN, ModelConfig, TrainConfig, get_preset
from ..core import datafiles, logs
from ..model.attention import plugin
from ..model.checkpoint import CHECKPOINT_NAME, load_checkpoint
from .provenance import experiment_settings
from .results import Row
from .runner import Runner

DEMO_MINUTES = 15.0  # what `attnlab demo` takes at most on a 2-core CPU, every row included
# What the demo does after the recipe's pretraining: its finetuning and the scoring of it and of
# the shipped model (dev, stored, test predictions), on a slow 2-core CPU.
AFTER_PRETRAINING_MINUTES = 2.5
MIN_PRETRAINING_MINUTES = 1.0  # however slow the rest was, the recipe gets this much


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
