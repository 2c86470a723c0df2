"""--minutes (attnlab/training/pipeline.py fit_to_minutes): pretraining fitted to a wall budget
on this machine by a few timed steps, which leave the run itself untouched."""

from __future__ import annotations

import json
import math
import time
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
    # (a run this short ends before its first re-fit, which would move its schedule's length)
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
    began = time.perf_counter()
    assert _pretrain(tiny_data, run, "--minutes", "0.25", "--max-steps", "1") == 0  # 15 s
    took = time.perf_counter() - began  # bounds what preparing the data took, however slow the machine
    steps_per_epoch = 4  # 13 lines, batch 4

    def fit(seconds_left: float) -> float:
        return math.floor(100 * seconds_left / (0.5 * steps_per_epoch)) / 100

    # the budget counts from the start of the command: what preparing the data took is not left
    fitted = _epochs(run)
    assert fit(pipeline.FIT_SHARE * 15 - took) <= fitted <= fit(pipeline.FIT_SHARE * 15) and 0 < fitted < 40
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
    from attnlab.experiments import demo as runner

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
    assert 0 < get_preset("cpu15").pretrain.minutes < 15  # and of the 15
    assert 0 < get_preset("cpu60").pretrain.minutes < 60  # and of the shipped model's hour


# ---- the re-fit as the run goes (attnlab/training/deadline.py) ---------------------------------
def _timed(deadline, first_step: int = 0):
    """A deadline whose warm-up step is ``first_step`` and whose clock starts at the next one, at
    moment 0 with no evaluation yet."""
    assert not deadline.due(first_step, 1000, -1.0, 0.0)  # the warm-up step is not timed
    assert not deadline.due(first_step + 1, 1000, 0.0, 0.0)  # the clock starts
    return deadline


def test_a_re_fit_ends_the_run_at_the_deadline_at_its_own_pace():
    from attnlab.training.deadline import REFIT_EVERY, REFIT_FIRST, Deadline

    d = _timed(Deadline(end=300.0, most_steps=1000))
    first = 1 + REFIT_FIRST
    assert not d.due(first - 1, 1000, 49.0, 0.0) and d.due(first, 1000, 50.0, 0.0)
    assert not d.due(first + 1, 1000, 51.0, 0.0) and d.due(first + REFIT_EVERY, 1000, 60.0, 0.0)
    # 50 steps in 50 s: 1 s a step, 250 s left, so 250 steps more
    assert d.steps_for(first, 50.0, 0.0) == first + 250 and d.pace == 1.0
    # evaluations are not training: 20 s of them slow no step, and move the deadline by 20 s
    assert d.steps_for(first, 70.0, 20.0) == first + 250
    # slower steps: 2 s a step, 200 s left, 100 steps more
    assert d.steps_for(first, 100.0, 0.0) == first + 100 and d.refits == 3
    # never more than the epochs given, and at least one more step when the time is up
    assert d.steps_for(first, 0.5, 0.0) == 1000
    assert d.steps_for(first, 400.0, 0.0) == first + 1


def test_the_first_re_fit_alone_tells_its_length_to_on_first_refit_which_may_stop_the_run():
    from attnlab.training.deadline import REFIT_FIRST, Deadline

    told = []
    d = _timed(Deadline(end=300.0, most_steps=1000, on_first_refit=told.append))
    first = 1 + REFIT_FIRST
    assert d.steps_for(first, 50.0, 0.0) == first + 250 and told == [first + 250]  # at the run's own pace
    d.steps_for(first, 100.0, 0.0)
    assert told == [first + 250]  # later re-fits are not told

    class Stop(Exception):
        pass

    def stop(steps):
        raise Stop(steps)

    d = _timed(Deadline(end=300.0, most_steps=1000, on_first_refit=stop))
    with pytest.raises(Stop):
        d.steps_for(first, 50.0, 0.0)


def test_no_re_fit_in_the_runs_last_tenth_nor_before_its_first_timed_steps():
    from attnlab.training.deadline import REFIT_EVERY, REFIT_FIRST, REFIT_UNTIL, Deadline

    d = _timed(Deadline(end=1e9, most_steps=10 ** 6), first_step=100)  # a resumed process starts late
    assert not any(d.due(step, 10 ** 6, 1.0, 0.0) for step in range(102, 101 + REFIT_FIRST))
    assert d.due(101 + REFIT_FIRST, 10 ** 6, 1.0, 0.0)
    late = 101 + REFIT_EVERY * math.ceil((REFIT_UNTIL * 1000 - 101) / REFIT_EVERY)  # a re-fit step past 90% of 1000
    assert not d.due(late, 1000, 1.0, 0.0) and d.due(late, 2000, 1.0, 0.0)


@pytest.mark.parametrize("steps_per_epoch", [1, 3, 4, 7, 97, 1181])
def test_re_fitted_epochs_give_back_their_steps(steps_per_epoch):
    from attnlab.config.settings import TrainConfig
    from attnlab.training.deadline import epochs_for
    from attnlab.training.trainer import total_steps

    for steps in [1, 2, 5, 33, 999, 12345, 47011]:
        assert total_steps(TrainConfig(epochs=epochs_for(steps, steps_per_epoch)), steps_per_epoch) == steps


def test_a_slower_run_than_its_timed_steps_is_cut_to_its_minutes_and_anneals_over_what_it_trains(
        tiny_data, tmp_path, monkeypatch, capsys):
    import time

    from attnlab.training import deadline, trainer

    # the timed steps say the run is fast (all 40 epochs fit); its own steps are slow (a shared
    # CPU): the re-fit shortens the run, and the learning rate still ends at its floor
    monkeypatch.setattr(pipeline, "step_seconds", lambda *a, **k: 1e-6)
    monkeypatch.setattr(deadline, "REFIT_FIRST", 5)
    real_step = trainer.train_step

    def slow_step(*args, **kwargs):
        time.sleep(0.02)
        return real_step(*args, **kwargs)

    monkeypatch.setattr(trainer, "train_step", slow_step)
    run = tmp_path / "run"
    assert _pretrain(tiny_data, run, "--objective", "lm", "--minutes", "0.02", "--learning-rate", "1e-3",
                     "--warmup-tokens", "0") == 0
    said = capsys.readouterr().out
    assert "so 40 of 40 epochs fit (all of them)" in said and "re-fitted" in said
    meta = load_checkpoint(run).meta
    epochs, steps = meta["train_config"]["epochs"], meta["step"]
    assert epochs < 40 and steps == math.ceil(epochs * 4) < 160
    assert f"-> {epochs:g} epochs" in said
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    # the schedule anneals over the steps trained: the last one's rate is near the floor (0.1 x peak),
    # where the 160 steps first fitted would have left it near the peak
    assert rows[-1]["step"] == steps and 1e-4 <= rows[-1]["lr"] < 2e-4
    model = json.loads((run / "config.json").read_text())["model"]
    assert meta["final_tokens"] == steps * meta["train_config"]["batch_size"] * model["block_size"]
    # the same command resumes it as it stands: complete, with the last fit's epochs, nothing re-timed
    monkeypatch.setattr(pipeline, "step_seconds", lambda *a, **k: pytest.fail("a resumed run is not re-timed"))
    assert _pretrain(tiny_data, run, "--objective", "lm", "--minutes", "0.02", "--learning-rate", "1e-3",
                     "--warmup-tokens", "0", "--resume") == 0
    assert load_checkpoint(run).meta["step"] == steps
