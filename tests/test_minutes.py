"""--minutes (attnlab/training/pipeline.py fit_to_minutes): pretraining fitted to a wall budget
on this machine by a few timed steps, which leave the run itself untouched."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from attnlab import cli
from attnlab.model.checkpoint import CHECKPOINT_NAME, load_checkpoint
from attnlab.training import pipeline

BASE = ["--preset", "tiny", "--batch-size", "4", "--epochs", "40", "--log-every", "1", "--device", "cpu",
        "--eval-file", "", "--checkpoint-every", "0", "--no-cpu-settings"]


def _pretrain(tiny_data, run: Path, *extra: str) -> int:
    return cli.main(["pretrain", *BASE, "--corpus", str(tiny_data["corpus"]), "--out-dir", str(run), *extra])


def _weights(run: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(run / CHECKPOINT_NAME), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def _epochs(run: Path) -> float:
    return load_checkpoint(run).meta["train_config"]["epochs"]


@pytest.mark.parametrize("objective", ["span", "lm"])
def test_a_fitted_run_is_the_run_given_its_epochs(tiny_data, tmp_path, objective):
    # the timed steps (real ones here) change nothing: the same weights as --epochs E given directly
    fitted, given = tmp_path / "fitted", tmp_path / "given"
    assert _pretrain(tiny_data, fitted, "--objective", objective, "--minutes", "0.002") == 0
    epochs = _epochs(fitted)
    assert 0 < epochs < 40 and load_checkpoint(fitted).meta["train_config"]["minutes"] == 0.002
    assert _pretrain(tiny_data, given, "--objective", objective, "--epochs", str(epochs)) == 0
    a, b = _weights(fitted), _weights(given)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_fit_is_the_budget_over_the_step_time_and_never_more_than_given(tiny_data, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pipeline, "step_seconds", lambda *a, **k: 0.5)
    run = tmp_path / "run"
    assert _pretrain(tiny_data, run, "--minutes", "0.25", "--max-steps", "1") == 0  # 15 s
    steps_per_epoch = 4  # 13 lines, batch 4
    fitted = int(100 * pipeline.FIT_SHARE * 15 / (0.5 * steps_per_epoch)) / 100
    assert 0 < fitted < 40 and _epochs(run) == pytest.approx(fitted)
    assert f"--minutes 0.25: a step takes 0.500 s here (4 a pass), so {fitted:g} of 40 epochs fit" in capsys.readouterr().out
    # the same command resumes it with the fitted epochs (not the 40 given), and times nothing again
    monkeypatch.setattr(pipeline, "step_seconds", lambda *a, **k: pytest.fail("a resumed run is not re-timed"))
    assert _pretrain(tiny_data, run, "--minutes", "0.25", "--max-steps", "0", "--resume") == 0
    assert _epochs(run) == fitted and load_checkpoint(run).meta["step"] == math.ceil(fitted * steps_per_epoch)
    long = tmp_path / "long"
    monkeypatch.setattr(pipeline, "step_seconds", lambda *a, **k: 1e-6)
    assert _pretrain(tiny_data, long, "--minutes", "10", "--max-steps", "1") == 0
    assert _epochs(long) == 40 and "so 40 of 40 epochs fit (all of them)" in capsys.readouterr().out


def test_the_demo_fits_its_recipe_to_what_is_left_of_its_minutes(tiny_data, tmp_path, monkeypatch):
    from attnlab.config.settings import TrainConfig, get_preset
    from attnlab.experiments import runner

    said = []
    preset = get_preset("demo").pretrain
    assert preset.minutes > 0
    cap = preset.minutes
    # the demo's 15 minutes less what was spent and what follows the pretraining, never above the preset's
    spent = runner.DEMO_MINUTES - runner.AFTER_PRETRAINING_MINUTES - cap + 2  # leaves cap - 2
    fitted = runner.demo_pretraining(preset, tmp_path / "none", spent, said.append)
    assert fitted.minutes == pytest.approx(cap - 2) and fitted.epochs == preset.epochs
    assert said == [f"pretraining fitted to {cap - 2:g} minutes: the demo's 15 less {spent:.1f} spent so far "
                    f"and {runner.AFTER_PRETRAINING_MINUTES:g} for what follows"]
    assert runner.demo_pretraining(preset, tmp_path / "none", 0.2, said.append) == preset  # all of it fits
    late = runner.demo_pretraining(preset, tmp_path / "none", 14.9, said.append)
    assert late.minutes == runner.MIN_PRETRAINING_MINUTES
    plain = TrainConfig(epochs=3)
    assert runner.demo_pretraining(plain, tmp_path / "none", 14.9, said.append) is plain  # no --minutes: as it is
    # a resumed demo keeps the fit its pretraining started with
    monkeypatch.setattr(pipeline, "step_seconds", lambda *a, **k: 0.5)
    run = tmp_path / "pretrain"
    assert _pretrain(tiny_data, run, "--minutes", "0.3", "--max-steps", "1") == 0
    assert runner.demo_pretraining(preset, run, 0.2, said.append).minutes == 0.3


def test_a_preset_that_names_its_minutes_is_fitted_to_them_unless_told_otherwise(tiny_data, tmp_path, monkeypatch,
                                                                                   capsys):
    # cpu5 names its minutes, so `pretrain --preset cpu5` fits itself to this machine; --minutes 0
    # trains the preset's epochs as they are (how a fitted run is repeated on another machine)
    import dataclasses

    from attnlab.config.settings import PRESETS, get_preset

    tiny = get_preset("tiny")
    monkeypatch.setitem(PRESETS, "timed", dataclasses.replace(
        tiny, name="timed", pretrain=dataclasses.replace(tiny.pretrain, epochs=40, minutes=0.25)))
    monkeypatch.setattr(pipeline, "step_seconds", lambda *a, **k: 0.5)
    common = ["pretrain", "--preset", "timed", "--batch-size", "4", "--device", "cpu", "--eval-file", "",
              "--no-cpu-settings", "--max-steps", "1", "--corpus", str(tiny_data["corpus"])]
    assert cli.main([*common, "--out-dir", str(tmp_path / "fitted")]) == 0
    assert "--minutes 0.25: a step takes 0.500 s here" in capsys.readouterr().out
    assert 0 < _epochs(tmp_path / "fitted") < 40
    assert cli.main([*common, "--minutes", "0", "--out-dir", str(tmp_path / "as-is")]) == 0
    assert _epochs(tmp_path / "as-is") == 40 and "--minutes" not in capsys.readouterr().out
    assert 0 < get_preset("cpu5").pretrain.minutes < 5  # finetuning must fit in what is left of the 5
