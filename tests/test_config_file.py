"""--config FILE: a run's config.json gives the next run its settings, flags given on the
command line override them; `attnlab --version`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import attnlab
from attnlab import cli
from tests.conftest import DATA


def _pretrain(run_dir, *flags):
    return cli.main(["pretrain", "--preset", "tiny", "--device", "cpu", "--out-dir", str(run_dir),
                     "--corpus", str(DATA / "wiki.txt"), "--eval-file", "",
                     "--held-out", str(DATA / "birth_dev.tsv"), *flags])


def _config(run_dir):
    return json.loads((run_dir / "config.json").read_text())


def test_a_runs_config_round_trips_and_flags_override_it(tmp_path):
    first = tmp_path / "first"
    assert _pretrain(first, "--n-embd", "24", "--n-head", "3", "--learning-rate", "0.002", "--seed", "3",
                     "--max-steps", "2", "--objective", "lm", "--qa-format", "recall", "--recall-chars", "30") == 0
    again = tmp_path / "again"
    assert _pretrain(again, "--config", str(first / "config.json")) == 0
    assert _config(again) == _config(first)  # the same run, from its file alone
    changed = tmp_path / "changed"
    assert _pretrain(changed, "--config", str(first / "config.json"), "--learning-rate", "0.004",
                     "--seed", "0") == 0  # 0 is the preset's seed: given, it still wins
    expected = _config(first)
    expected["train"].update(learning_rate=0.004, seed=0)
    assert _config(changed) == expected


def test_toml_works_too_and_the_preset_fills_the_rest(tmp_path):
    settings = tmp_path / "settings.toml"
    settings.write_text('[model]\nn_embd = 48\n\n[train]\nlearning_rate = 0.005\nmax_steps = 1\n')
    assert _pretrain(tmp_path / "run", "--config", str(settings)) == 0
    config = _config(tmp_path / "run")
    assert config["model"]["n_embd"] == 48 and config["train"]["learning_rate"] == 0.005
    assert config["model"]["n_layer"] == attnlab.get_preset("tiny").model["n_layer"]


def test_finetuning_from_init_takes_the_training_settings_not_the_model(tmp_path):
    pre = tmp_path / "pre"
    assert _pretrain(pre, "--max-steps", "1", "--n-embd", "24", "--n-head", "3") == 0
    settings = tmp_path / "ft.json"
    settings.write_text(json.dumps({"model": {"n_embd": 64}, "train": {"max_steps": 1, "learning_rate": 7e-4},
                                    "train_file": str(DATA / "birth_places_train.tsv")}))
    assert cli.main(["finetune", "--preset", "tiny", "--init", str(pre), "--config", str(settings),
                     "--eval-file", "", "--out-dir", str(tmp_path / "ft"), "--device", "cpu"]) == 0
    config = _config(tmp_path / "ft")
    assert config["model"]["n_embd"] == 24 and config["train"]["learning_rate"] == 7e-4
    assert config["train_file"] == str(DATA / "birth_places_train.tsv")


def test_commands_without_init_take_the_model_of_a_finetuning_config(tmp_path):
    from attnlab.cli.flags import with_config_file

    settings = tmp_path / "config.json"
    settings.write_text(json.dumps({"stage": "finetune", "init": "runs/pre", "model": {"n_embd": 48},
                                    "train": {"device": "cuda:3", "seed": 5}}))
    parser = cli.build_parser()
    argv = ["compare", "--config", str(settings), "--seed", "6"]
    args = with_config_file(parser, argv, parser.parse_args(argv))
    assert (args.n_embd, args.seed, args.device) == (48, 6, "auto")  # the device stays the machine's


@pytest.mark.parametrize("content, problem", [
    ('{"train": {"learning_rat": 1}}', ": unknown setting train.learning_rat"),
    ('{"train": {\n"seed": }', ":2: not valid JSON"),
])
def test_a_bad_config_file_is_a_one_line_error(tmp_path, capsys, content, problem):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(SystemExit) as exit_:
        _pretrain(tmp_path / "run", "--config", str(bad))
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"attnlab pretrain: error: {bad}{problem}")
    assert not (tmp_path / "run").exists()


def test_version():
    out = subprocess.run([sys.executable, "-m", "attnlab", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout == f"attnlab {attnlab.__version__}\n"
