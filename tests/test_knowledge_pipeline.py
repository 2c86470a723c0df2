"""The knowledge training path end to end on tiny data: lm pretraining with mixed recall-format
QA, learning-curve rows in metrics.jsonl, recall finetuning, `evaluate --stored`, the mixing
guard and the cpu preset."""

from __future__ import annotations

import json

import pytest

from attnlab import cli
from attnlab.config.settings import get_preset
from attnlab.data.datasets import read_qa
from attnlab.answering.evaluate import wilson_interval
from tests.tiny_runs import ask_rows

RECALL = ["--preset", "tiny", "--objective", "lm", "--qa-format", "recall", "--recall-chars", "40",
          "--device", "cpu"]


def _pretrain(tiny_data, run_dir, *extra: str) -> int:
    return cli.main(["pretrain", *RECALL, "--corpus", str(tiny_data["corpus"]),
                     "--mix-qa", str(tiny_data["train"]), "--held-out", "--eval-file", str(tiny_data["dev"]),
                     "--out-dir", str(run_dir), *extra])


def test_lm_pretraining_with_recall_mixing_logs_learning_curves_and_answers(tiny_data, tmp_path, capsys):
    run = tmp_path / "pre"
    assert _pretrain(tiny_data, run, "--mix-ratio", "1", "--epochs", "4", "--eval-every", "2",
                     "--batch-size", "4") == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    curve = [r for r in rows if "dev_correct" in r]
    # 12 recall examples (~47 characters) replace 12 of the 13 lines; two never fit one 80-wide
    # row, so 13 rows, batch 4: 4 steps an epoch, 16 in all, scored every 2 steps.
    assert [r["step"] for r in curve] == list(range(2, 17, 2))
    for r in curve:
        assert r["dev_total"] == 12 and r["stored_total"] == 12 and 0 <= r["stored"] <= 12
        assert r["train_cpu_s"] > 0
    assert curve[-1]["train_cpu_s"] >= curve[0]["train_cpu_s"]
    # training wall time leaves the evaluations out: it grows by less than the elapsed time
    for a, b in zip(curve, curve[1:]):
        assert 0 <= b["train_wall_s"] - a["train_wall_s"] <= b["elapsed_s"] - a["elapsed_s"] - a["eval_s"] + 0.01
        assert b["train_wall_s"] <= b["elapsed_s"] - sum(r["eval_s"] for r in curve if r["step"] < b["step"]) + 0.01
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["objective"] == "lm" and config["model"]["qa_format"] == "recall"

    ft = tmp_path / "ft"
    assert cli.main(["finetune", "--preset", "tiny", "--init", str(run), "--corpus", str(tiny_data["corpus"]),
                     "--train-file", str(tiny_data["train"]), "--eval-file", "", "--out-dir", str(ft),
                     "--device", "cpu"]) == 0
    capsys.readouterr()
    assert cli.main(["evaluate", str(ft), "--eval-file", str(tiny_data["dev"]), "--stored",
                     "--corpus", str(tiny_data["corpus"]), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "extracted (answered correctly)" in out and "of the 12 people whose place the line states" in out
    predictions = (ft / "predictions-dev.txt").read_text().splitlines()
    assert len(predictions) == 12
    correct = sum(p == e.answer for p, e in zip(predictions, read_qa(tiny_data["dev"])))
    low, high = wilson_interval(correct, 12)  # its value on known counts: test_evaluate.py
    printed = f"{correct}/12 ({100 * correct / 12:.1f}%) [95% CI {100 * low:.1f}-{100 * high:.1f}%]"
    assert f"{tiny_data['dev']}: {printed} correct;" in out and f"extracted (answered correctly) {printed};" in out


def test_mixing_people_asked_in_dev_is_a_one_line_error(tiny_data, tmp_path, capsys):
    code = cli.main(["pretrain", *RECALL, "--corpus", str(tiny_data["corpus"]), "--mix-qa", str(tiny_data["train"]),
                     "--held-out", str(tiny_data["dev"]), "--mix-ratio", "1", "--out-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert f"{tiny_data['train']}:1: 'Where was Ada Brook born?' is also asked in {tiny_data['dev']} line 1" in err
    assert not (tmp_path / "r" / "checkpoint.safetensors").exists()


def test_mix_ratio_needs_the_lm_objective(tiny_data, tmp_path, capsys):
    code = cli.main(["pretrain", "--preset", "tiny", "--objective", "span", "--mix-ratio", "1",
                     "--corpus", str(tiny_data["corpus"]), "--out-dir", str(tmp_path / "r"), "--device", "cpu"])
    assert code == 2 and "mix_ratio needs the lm objective" in capsys.readouterr().err


def test_the_cpu_preset_is_the_recall_recipe():
    preset = get_preset("cpu")
    assert preset.model["qa_format"] == "recall"
    assert preset.pretrain.objective == "lm" and preset.pretrain.mix_ratio > 0
    assert preset.pretrain.eval_every > 0  # its learning curve is recorded as it trains


def test_a_shipped_model_is_used_as_a_run_directory_and_never_written_into(tiny_data, tmp_path, monkeypatch, capsys):
    import hashlib

    from attnlab.model.shipped import ship

    run = tmp_path / "pre"
    assert _pretrain(tiny_data, run, "--mix-ratio", "1", "--epochs", "1") == 0
    shipped = ship(run, tmp_path / "models" / "tiny", {"command": "test", "dev_accuracy": None})
    files = sorted(p.name for p in shipped.iterdir())
    assert files == ["checkpoint.safetensors", "provenance.json"]
    from attnlab.model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(shipped)
    assert ckpt.optimizer_state is None and ckpt.rng_state is None  # weights only
    digest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in shipped.iterdir()}
    monkeypatch.chdir(tmp_path)
    assert cli.main(["evaluate", str(shipped), "--eval-file", str(tiny_data["dev"]), "--device", "cpu"]) == 0
    assert (tmp_path / "runs" / "tiny" / "predictions-dev.txt").is_file()
    capsys.readouterr()
    assert cli.main(["ask", str(shipped), "Where was Ada Brook born?", "--evidence", str(tiny_data["corpus"]),
                     "--device", "cpu", "--abstain", "off"]) == 0
    assert ask_rows(capsys.readouterr().out)[0]["recalled"].startswith("'Ada Brook.")  # the recall starts from the name
    assert cli.main(["finetune", "--preset", "tiny", "--init", str(shipped), "--corpus", str(tiny_data["corpus"]),
                     "--train-file", str(tiny_data["train"]), "--eval-file", "", "--out-dir", "runs/ft",
                     "--device", "cpu"]) == 0
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in shipped.iterdir()} == digest
    with pytest.raises(FileExistsError, match="already shipped"):
        ship(run, shipped, {})


def test_demo_scores_every_row_extracted_and_stored_with_intervals(tmp_path, monkeypatch, capsys):
    from tests.conftest import REPO

    monkeypatch.chdir(REPO)  # the demo reads data/ as the README's commands do
    from attnlab.experiments.demo import demo

    out = tmp_path / "demo"
    pre = tmp_path / "shipped-from"
    assert cli.main(["pretrain", "--preset", "tiny", "--out-dir", str(pre), "--max-steps", "3", "--device", "cpu"]) == 0
    from attnlab.model.shipped import ship

    shipped = ship(pre, tmp_path / "models" / "m", {"command": "test"})
    rows = demo("tiny", out=out, device="cpu", shipped=shipped, log=lambda _m: None)
    assert [r.model.split(" (")[0].split(",")[0] for r in rows] == ["baseline", "vanilla", "vanilla", "shipped model"]
    assert rows[0].dev.correct == 25 and rows[0].stored is None
    for r in rows[1:]:
        assert r.dev.total == 500 and r.stored.asked == 500 and 0 < r.stored.total <= 500
    table = (out / "results.md").read_text()
    assert "25/500 (5.0%) [95% CI 3.4-7.3%]" in table and "dev stored" in table
    stored = rows[1].stored
    assert f"| {stored} [95% CI " in table  # the stored count carries its interval too
    assert (out / "finetune" / "predictions-birth_test_inputs.txt").read_text().count("\n") == 437


def test_the_demo_names_the_shipped_models_recipe_from_its_provenance(tmp_path):
    from attnlab.experiments.demo import _shipped_recipe

    (tmp_path / "provenance.json").write_text('{"preset": "cpu60"}')
    assert _shipped_recipe(tmp_path) == "trained with the cpu60 preset"
    (tmp_path / "provenance.json").write_text("not json")
    assert _shipped_recipe(tmp_path) == "its recipe is not recorded"
