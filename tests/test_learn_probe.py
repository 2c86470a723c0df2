"""benchmarks/learn_probe.py: a probe changes exactly the recipe fields it names, refuses the ones
that do not exist, and its one-line summary carries every relation's count."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from attnlab.data import factset
from attnlab.experiments import learn

from .test_factsets import write_set

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import learn_probe  # noqa: E402


def test_a_probe_changes_the_fields_it_names_and_nothing_else(tmp_path):
    recipe = learn.recipe_for(factset.load(write_set(tmp_path / "towns")), 5)
    changes = learn_probe.parse_changes(["finetune.epochs=3", "finetune.replay_lines=true", "pretrain.seed=7"])
    probe = learn_probe.changed_recipe(recipe, changes, pretrain_passes=35)
    assert (probe.finetune.epochs, probe.finetune.replay_lines, probe.pretrain.seed) == (3, True, 7)
    assert (probe.pretrain.epochs, probe.pretrain.minutes) == (35, 0.0)
    assert probe.finetune.learning_rate == recipe.finetune.learning_rate and probe.model == recipe.model
    deeper = learn_probe.changed_recipe(recipe, learn_probe.parse_changes(["model.n_layer=5", "model.attention=rotary"]))
    assert (deeper.model.n_layer, deeper.model.attention) == (5, "rotary")
    assert deeper.model.recall_chars == recipe.model.recall_chars and deeper.pretrain == recipe.pretrain


def test_malformed_or_unknown_changes_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="expected STAGE.FIELD=VALUE"):
        learn_probe.parse_changes(["epochs=3"])
    with pytest.raises(SystemExit, match="not a training setting"):
        learn_probe.changed_recipe(learn.recipe_for(factset.load(write_set(tmp_path / "towns")), 5), {
            "pretrain": {}, "finetune": {"epoks": "3"}, "recipe": {}})
    with pytest.raises(SystemExit, match="not a model setting"):
        learn_probe.changed_recipe(learn.recipe_for(factset.load(write_set(tmp_path / "towns")), 5), {
            "pretrain": {}, "finetune": {}, "recipe": {}, "model": {"n_layers": "5"}})
    with pytest.raises(SystemExit, match="no such constant"):
        learn_probe.set_recipe_constants({"NOT_A_CONSTANT": "1"})


def test_a_constant_decided_by_a_rule_is_set_as_a_boolean(monkeypatch):
    monkeypatch.setattr(learn, "QUOTE", None)  # None: the recipe's rule decides
    learn_probe.set_recipe_constants({"QUOTE": "1"})
    assert learn.QUOTE is True
    learn_probe.set_recipe_constants({"QUOTE": "0"})
    assert learn.QUOTE is False


def test_the_summary_names_each_relation_with_its_count():
    results = {"relations": {"country": {"correct": 40, "total": 50, "ci95": [66.9, 88.8]},
                             "river": {"correct": 30, "total": 50, "ci95": [46.2, 72.4]}},
               "overall": {"correct": 70, "total": 100}}
    line = learn_probe.summary("finetune.epochs=3", results)
    assert line == "finetune.epochs=3 | country 40/50 (66.9-88.8) | river 30/50 (46.2-72.4) | all 70/100"



def test_a_wrong_answer_is_told_misread_or_not_recalled():
    import read_or_recall

    assert read_or_recall.failure_kind("Orna", "Ardale. The Orna flows.", "Orna") == "right"
    assert read_or_recall.failure_kind("Zarn", "Ardale. Trades with Zarn; the Orna flows.", "Orna") == "misread"
    assert read_or_recall.failure_kind("Zarn", "Ardale. Trades with Zarn.", "Orna") == "not recalled"
    assert read_or_recall.failure_kind("Orn", "Ardale. The Ornate hall.", "Orn") == "right"
    assert read_or_recall.failure_kind("Zarn", "Ardale. The Ornate hall.", "Orn") == "not recalled"


def test_a_probes_seed_reaches_both_stages_and_learn(tmp_path, monkeypatch, capsys):
    calls = {}

    def fake_learn(facts_dir, out_dir, **kwargs):
        calls.update(kwargs)
        return {"relations": {}, "overall": {"correct": 0, "total": 0}}

    monkeypatch.setattr(learn, "learn", fake_learn)
    learn_probe.main([str(write_set(tmp_path / "towns")), "--out", str(tmp_path / "run"), "--minutes", "5",
                      "--seed", "2"])
    assert calls["seed"] == 2
    assert (calls["recipe"].pretrain.seed, calls["recipe"].finetune.seed) == (2, 2)
    assert capsys.readouterr().out.startswith("seed=2 |")


def test_a_probe_that_sets_the_depth_keeps_it(tmp_path, monkeypatch):
    """learn's fit may take fewer layers on a slow machine (FEWER_LAYERS_BELOW); a probe that
    names model.n_layer measures that depth, so the rule is off unless the probe sets it too."""
    monkeypatch.setattr(learn, "FEWER_LAYERS_BELOW", learn.FEWER_LAYERS_BELOW)
    monkeypatch.setattr(learn, "learn", lambda *a, **k: {"relations": {}, "overall": {"correct": 0, "total": 0}})
    facts = str(write_set(tmp_path / "towns"))
    learn_probe.main([facts, "--out", str(tmp_path / "a"), "--minutes", "5", "--set", "model.n_layer=2"])
    assert learn.FEWER_LAYERS_BELOW == 0
    learn_probe.main([facts, "--out", str(tmp_path / "b"), "--minutes", "5", "--set", "model.n_layer=2",
                      "--set", "recipe.FEWER_LAYERS_BELOW=30"])
    assert learn.FEWER_LAYERS_BELOW == 30
