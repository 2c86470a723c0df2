"""benchmarks/shaping.py: each setting's configs (the preset's, its loss, seed k, the epochs as
given) and the 'none' rows taken from a compare run only when its settings are those."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch

from attnlab.config.settings import ModelConfig, get_preset
from attnlab.experiments.provenance import stage_settings
from tests.conftest import benchmark_fixture

shaping = benchmark_fixture("shaping")


def _args(shaping, *extra):
    return shaping.parse_args(["--preset", "cpu5", "--seeds", "3", "--device", "cpu", *extra])


def test_a_setting_trains_the_presets_epochs_with_its_loss_and_seed(shaping):
    preset = get_preset("cpu5")
    assert preset.pretrain.minutes > 0  # a fitted preset: the comparison trains its epochs instead
    pre, fin = shaping.stage_configs("focus:0.02", 2, _args(shaping), preset)
    assert (pre.attn_loss, pre.attn_loss_weight, fin.attn_loss, fin.attn_loss_weight) == ("focus", 0.02, "focus", 0.02)
    assert pre.seed == preset.pretrain.seed + 2 and fin.seed == preset.finetune.seed + 2
    assert pre.minutes == 0 and pre.epochs == preset.pretrain.epochs and fin.epochs == preset.finetune.epochs


def test_none_is_taken_from_a_compare_run_only_if_made_with_its_settings(shaping, tmp_path):
    preset, args = get_preset("cpu5"), _args(shaping, "--none-from", str(tmp_path / "vanilla"))
    model = ModelConfig(**{**preset.model, "attention": "vanilla"})
    run = tmp_path / "vanilla" / "seed-1"
    run.mkdir(parents=True)
    pre, fin = shaping.stage_configs("none", 1, args, preset)
    settings = {"preset": "cpu5", "model": model.to_dict(), "pretrain": stage_settings(pre),
                "finetune": stage_settings(fin), "attnlab": "0"}
    (run / "settings.json").write_text(json.dumps(settings))
    shaping.check_none_run(run, 1, args, preset, model)  # seed 1's settings: taken
    with pytest.raises(ValueError, match="pretrain.seed was 1 there, 2 now"):
        shaping.check_none_run(run, 2, args, preset, model)
    (run / "settings.json").write_text(json.dumps({**settings, "pretrain": {**settings["pretrain"], "epochs": 30}}))
    with pytest.raises(ValueError, match="pretrain.epochs was 30 there, 24 now"):
        shaping.check_none_run(run, 1, args, preset, model)


def test_none_from_a_single_seed_run_is_checked_too(shaping, tmp_path):
    preset = get_preset("cpu5")
    args = shaping.parse_args(["--preset", "cpu5", "--device", "cpu", "--none-from", str(tmp_path / "vanilla")])
    model = ModelConfig(**{**preset.model, "attention": "vanilla"})
    run = tmp_path / "vanilla"  # one seed: the variant's own directory, as compare lays it out
    run.mkdir()
    pre, fin = shaping.stage_configs("none", 0, args, preset)
    settings = {"model": model.to_dict(), "pretrain": {**stage_settings(pre), "epochs": 30},
                "finetune": stage_settings(fin)}
    (run / "settings.json").write_text(json.dumps(settings))
    with pytest.raises(SystemExit, match="--none-from: .*pretrain.epochs was 30 there, 24 now"):
        shaping.setting_rows("none", args, preset, model, questions=[])


def test_the_section_names_the_command_as_typed_and_tests_each_setting_against_none(shaping):
    argv = ["--preset", "cpu5", "--seeds", "2", "--settings", "none", "focus:0.02", "--out", "runs/my shaping"]
    args = shaping.parse_args(argv)
    heads = torch.tensor([1.0, 2.0])
    none = [[True] * 10 + [False] * 10, [True] * 10 + [False] * 10]
    focus = [[True] * 20, [True] * 20]  # right wherever none was wrong: 20 one-sided disagreements
    results = {s: dict(runs=runs, pretrain_ce=0.5, finetune_ce=0.25, seconds=60.0, entropy=heads, distance=heads)
               for s, runs in (("none", none), ("focus:0.02", focus))}
    lines = shaping.section(args, argv, get_preset("cpu5"), results, n_questions=20).splitlines()
    command = next(line for line in lines if line.startswith("`.venv/bin/python "))
    assert shlex.split(command.strip("`")) == [".venv/bin/python", "benchmarks/shaping.py", *argv]
    none_row = next(line for line in lines if line.startswith("| none |"))
    focus_row = next(line for line in lines if line.startswith("| focus:0.02 |"))
    assert "| reference |" in none_row and "10, 10 of 20" in none_row
    p_value = f"{2 * 0.5 ** 20:.3g}"  # 20 disagreements over the two seeds, all one way: exact, two-sided
    assert "20, 20 of 20" in focus_row and f"| {p_value} | better |" in focus_row and "| 60 s |" in focus_row
    assert not any("Holm" in line for line in lines)  # one test: nothing to correct


def test_a_section_of_several_settings_ends_with_holm_adjusted_p_values(shaping):
    argv = ["--preset", "cpu5", "--settings", "none", "focus:0.02", "near:0.005"]
    heads = torch.tensor([1.0])
    runs = {"none": [[True] * 10 + [False] * 10], "focus:0.02": [[True] * 20],  # 10 wins: p = 2 / 2**10
            "near:0.005": [[True] * 11 + [False] * 9]}  # 1 win: p = 1
    results = {s: dict(runs=r, pretrain_ce=0.5, finetune_ce=0.25, seconds=60.0, entropy=heads, distance=heads)
               for s, r in runs.items()}
    text = shaping.section(shaping.parse_args(argv), argv, get_preset("cpu5"), results, n_questions=20)
    assert text.splitlines()[-1] == (f"Holm-adjusted p over the 2 tests against none (a verdict that stands with the "
                                     f"chance of any spurious one in the table kept under 0.05): focus:0.02 "
                                     f"{2 * 2 * 0.5 ** 10:.3g} (better), near:0.005 1.")
