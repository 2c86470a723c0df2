"""Presets: the defaults are recipes that know on a CPU, --help lists every preset readably,
`finetune --init RUN` continues with the run's own recipe, retired names still work."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

from attnlab import cli
from attnlab.model.checkpoint import CHECKPOINT_NAME, load_checkpoint, save_checkpoint
from attnlab.cli import flags
from attnlab.cli.training import run_recipe
from attnlab.config.settings import DEFAULT_PRESET, PRESETS, get_preset
from tests.conftest import DATA
from tests.tiny_runs import train_tiny


def _help(*argv: str) -> str:
    buf = io.StringIO()
    with pytest.raises(SystemExit), redirect_stdout(buf):
        cli.main([*argv, "--help"])
    return buf.getvalue()


def test_the_default_recipes_are_the_ones_that_know():
    assert DEFAULT_PRESET == "cpu15"
    for name in ("cpu15", "cpu5", "demo"):
        p = get_preset(name)
        assert p.pretrain.optimizer == "muon" and p.pretrain.objective == "lm"
        assert p.model["qa_format"] == "recall" and p.pretrain.mix_ratio > 0
    assert get_preset("cpu5").pretrain.epochs < get_preset("demo").pretrain.epochs < get_preset("cpu15").pretrain.epochs
    assert "course" in get_preset("spec").description and "GPU" in get_preset("spec").expected


def test_the_default_recipe_holds_out_people_for_its_confidence():
    # the same share held out in both stages: finetuning never sees them, pretraining reads their
    # lines as it reads dev's, so `calibrate` fits the correction and the rule on unseen labels,
    # enough of them (as many as the shipped model's) for the correction to settle
    from attnlab.data.datasets import read_qa
    from attnlab.data.splits import finetuning_people, held_out_people

    cpu15 = get_preset("cpu15")
    fraction = cpu15.finetune.holdout_fraction
    assert 0 < cpu15.pretrain.holdout_fraction == fraction
    assert len(held_out_people(DATA / "birth_places_train.tsv", fraction)) >= 400
    kept = finetuning_people(read_qa(DATA / "birth_places_train.tsv", labelled=True), fraction)
    assert len(kept) > cpu15.finetune.mix_people  # some people are left to teach the read-out
    assert get_preset("cpu60").finetune.holdout_fraction > 0


@pytest.mark.parametrize("command, preset", [("pretrain", "cpu15"), ("compare", "cpu15"), ("demo", "demo")])
def test_commands_default_to_a_knowledge_preset(command, preset):
    assert f"(default: {preset}); one of {', '.join(PRESETS)}" in " ".join(_help(command).split())
    text = " ".join(_help(command, "--help-all").split())
    assert f"(default: {preset}); one of:" in text


def test_help_lists_each_preset_on_its_own_line_with_size_and_time():
    text = _help("pretrain", "--help-all")
    for name, p in PRESETS.items():
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(f"{name}: "))
        assert p.description.split()[0] in line
    joined = " ".join(text.split())
    assert "4 layers x 128 wide; 15 minutes on 2 CPU cores" in joined


def test_every_run_records_its_preset(tmp_path):
    run = train_tiny(tmp_path / "run")
    assert load_checkpoint(run).meta["train_config"]["preset"] == "tiny"
    assert run_recipe(str(run)) == "tiny"


def test_finetune_from_a_run_continues_with_its_recipe(tmp_path, capsys):
    run = train_tiny(tmp_path / "run")
    code = cli.main(["finetune", "--init", str(run), "--max-steps", "1", "--eval-file", "",
                     "--out-dir", str(tmp_path / "ft")])
    assert code == 0
    config = load_checkpoint(tmp_path / "ft").meta["train_config"]
    assert config["preset"] == "tiny"
    assert config["learning_rate"] == get_preset("tiny").finetune.learning_rate


def test_a_shipped_model_without_a_record_uses_its_provenance(tmp_path, capsys):
    # a model trained before runs recorded their preset (as models/cpu was until 2026-11-25)
    ckpt = load_checkpoint(train_tiny(tmp_path / "run"))
    meta = {**ckpt.meta, "train_config": {k: v for k, v in ckpt.meta["train_config"].items() if k != "preset"}}
    shipped = tmp_path / "shipped"
    save_checkpoint(shipped / CHECKPOINT_NAME, ckpt.build_model(), ckpt.vocab, meta)
    (shipped / "provenance.json").write_text(json.dumps({"preset": "cpu"}))
    assert run_recipe(str(shipped)) == "cpu"  # provenance.json says so
    (shipped / "provenance.json").unlink()
    assert run_recipe(str(shipped)) == DEFAULT_PRESET
    assert "does not record its preset" in capsys.readouterr().err


def test_a_renamed_preset_still_works_with_a_note(monkeypatch, capsys):
    monkeypatch.setitem(flags.RENAMED_PRESETS, "fast", "cpu15")
    assert flags.resolve_preset("fast") == "cpu15"
    assert "now called 'cpu15'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["pretrain", "--preset", "nope"])
    assert "argument --preset: invalid choice: 'nope'" in capsys.readouterr().err
