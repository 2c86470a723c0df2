"""Answers users can trust: held-out people, calibrate, abstention in evaluate and ask, audit."""

from __future__ import annotations

import json

from attnlab import cli
from attnlab.checkpoint import load_checkpoint


def test_finetune_holds_out_the_last_fraction_of_the_training_file(tiny_data, tmp_path, capsys):
    run = tmp_path / "ft"
    assert cli.main(["finetune", "--preset", "tiny", "--corpus", str(tiny_data["corpus"]),
                     "--train-file", str(tiny_data["train"]), "--eval-file", "", "--run-dir", str(run),
                     "--holdout-fraction", "0.25", "--device", "cpu"]) == 0
    assert "(9 questions" in capsys.readouterr().out  # 12 people, the last 3 held out
    assert json.loads((run / "config.json").read_text())["train"]["holdout_fraction"] == 0.25
    assert load_checkpoint(run).meta["train_config"]["holdout_fraction"] == 0.25
    assert cli.main(["finetune", "--preset", "tiny", "--corpus", str(tiny_data["corpus"]),
                     "--train-file", str(tiny_data["train"]), "--eval-file", "", "--run-dir", str(run),
                     "--holdout-fraction", "1", "--device", "cpu"]) == 2
    assert "holdout_fraction must lie in [0, 1)" in capsys.readouterr().err
