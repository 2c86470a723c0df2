"""`attnlab compare --minutes M`: every run it trains (variants x seeds, the no-pretraining row;
pretraining and finetuning) is fitted into M minutes in total (issue 46, item 4). The tests check
the split each run is given, not wall time."""

from __future__ import annotations

import json

import pytest

from attnlab.config.settings import TrainConfig
from attnlab.experiments import compare
from attnlab.experiments.learn import after_pretraining
from attnlab.model.checkpoint import load_checkpoint
from tests.test_variants import run_cli, write_data


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_each_run_gets_an_equal_share_of_what_is_left_and_its_stages_fit_inside_it(tmp_path):
    clock = Clock()
    budget = compare.Budget(2.0, runs=3, began=clock.now, clock=clock)
    config = TrainConfig()
    scratch = budget.fit("scratch", tmp_path / "scratch", config).minutes  # 2 minutes over 3 runs
    assert scratch == round(compare.FINETUNE_SHARE * 2 / 3, 2)
    clock.now += 30  # the scratch row ended early: the two runs left share 1.5 minutes
    share = 0.75
    pre = budget.fit("pretrain", tmp_path / "a" / "pretrain", config).minutes
    assert pre == round(share - after_pretraining(share), 2) and 0 < pre < share
    clock.now += 60 * pre
    fine = budget.fit("finetune", tmp_path / "a" / "finetune", config).minutes
    assert fine == round(compare.FINETUNE_SHARE * (share - pre), 2)
    assert pre + fine <= share  # the rest of the share is for scoring
    clock.now = 1000.0 + 30 + 60 * share  # the second run starts where the first one's share ends
    last = budget.fit("pretrain", tmp_path / "b" / "pretrain", config).minutes
    assert last == round(share - after_pretraining(share), 2)
    assert budget.started == 3 and budget.run_end == clock.now + 60 * share  # ends at the budget's end
    assert budget.run_end == pytest.approx(1000.0 + 60 * 2.0)


def test_a_run_out_of_time_still_gets_a_few_steps(tmp_path):
    clock = Clock()
    budget = compare.Budget(1.0, runs=2, began=clock.now, clock=clock)
    clock.now += 5 * 60  # far past the budget
    assert budget.fit("pretrain", tmp_path / "p", TrainConfig()).minutes == compare.MIN_STAGE_MINUTES
    assert budget.fit("finetune", tmp_path / "f", TrainConfig()).minutes == compare.MIN_STAGE_MINUTES


class EveryShareUsed(compare.Budget):
    """A clock at which each stage takes all the time it is given: the next run starts where the
    last one's share ends, so that every share is the same (minutes / runs)."""

    def __init__(self, minutes: float, runs: int):
        self.t, self.given = 0.0, []
        super().__init__(minutes, runs, began=0.0, clock=lambda: self.t)

    def fit(self, stage, run_dir, config):
        if stage != "finetune" and self.started:
            self.t = self.run_end
        fitted = super().fit(stage, run_dir, config)
        self.given.append((stage, run_dir, fitted.minutes))
        self.t += 60 * fitted.minutes
        return fitted


def test_compare_minutes_hands_every_run_its_share(tmp_path, capsys, monkeypatch):
    budgets = []
    monkeypatch.setattr(compare, "Budget", lambda minutes, runs: budgets.append(EveryShareUsed(minutes, runs))
                        or budgets[-1])
    paths = write_data(tmp_path)
    out = tmp_path / "compare"
    argv = ["compare", "--preset", "tiny", "--variants", "vanilla,rotary", "--seeds", "2", "--minutes", "10",
            "--max-steps", "2", "--n-layer", "1", "--n-embd", "16", "--block-size", "48", "--batch-size", "4",
            "--corpus", str(paths["corpus"]), "--train-file", str(paths["train"]),
            "--eval-file", str(paths["dev"]), "--out-dir", str(out), "--device", "cpu"]
    assert run_cli(argv) == 0
    assert "--minutes 10: 5 runs to train share them, about 2.00 minutes each" in capsys.readouterr().out
    share = 10 / 5  # 2 variants x 2 seeds and the scratch row
    pre = round(share - after_pretraining(share), 2)
    fine = round(compare.FINETUNE_SHARE * (share - pre), 2)
    runs = [out / "scratch"] + [out / v / f"seed-{k}" for k in (0, 1) for v in ("vanilla", "rotary")]  # seed-major
    expected = [("scratch", runs[0], round(compare.FINETUNE_SHARE * share, 2))]
    expected += [step for run in runs[1:]
                 for step in (("pretrain", run / "pretrain", pre), ("finetune", run / "finetune", fine))]
    assert budgets[0].given == expected
    assert pre + fine <= share and sum(m for _, _, m in expected) <= 10  # scoring takes the rest
    for _, run_dir, minutes in expected:  # and each run trained with what it was given
        assert load_checkpoint(run_dir, training_state=False).meta["train_config"]["minutes"] == minutes
    settings = json.loads((out / "results.json").read_text())["settings"]
    assert settings["pretrain"]["minutes"] == 10  # the rows record the budget, not their share of it


def test_without_minutes_compare_trains_the_epochs_given(tmp_path, capsys):
    paths = write_data(tmp_path)
    out = tmp_path / "compare"
    argv = ["compare", "--preset", "tiny", "--variants", "vanilla", "--no-scratch", "--max-steps", "1",
            "--n-layer", "1", "--n-embd", "16", "--block-size", "48", "--batch-size", "4",
            "--corpus", str(paths["corpus"]), "--train-file", str(paths["train"]),
            "--eval-file", str(paths["dev"]), "--out-dir", str(out), "--device", "cpu"]
    assert run_cli(argv) == 0
    assert "runs to train share them" not in capsys.readouterr().out
    for stage in ("pretrain", "finetune"):
        assert load_checkpoint(out / "vanilla" / stage, training_state=False).meta["train_config"]["minutes"] == 0
