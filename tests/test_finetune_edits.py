"""Plain finetuning on the one question (`attnlab edit --method finetune`, the baseline), on the
tiny recall model of test_facts.py: it takes, it is recorded like the other methods, it adds no
parameters, it changes only the one MLP output matrix it trains (FT-L), it fails honestly, and it
cannot be undone (it changed the weights, as rome does)."""

from __future__ import annotations

import functools
import json

import pytest
import torch

from attnlab import cli
from attnlab.facts import correction
from attnlab.facts.finetune_edit import finetune_edit
from attnlab.facts.gated_edit import EditFailed
from attnlab.model.checkpoint import load_checkpoint, load_model
from attnlab.data.datasets import read_qa
from attnlab.answering.evaluate import answer_questions
from tests.test_facts import _sha, run  # noqa: F401  (run: the module's fixture)
from tests.test_gated_edits import _edit


def test_finetuning_stops_at_the_first_check_that_answers_the_new_place_and_leaves_the_original(run):
    model, vocab, _ = load_model(run / "run")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    edited, f = finetune_edit(model, vocab, "Ana Linda", "Lima", None, steps=100, check_every=2)
    [now] = answer_questions(edited, vocab, read_qa(run / "dev.tsv")[:1])
    assert now.answer == "Lima" and f.target.old_answer == "Paris"
    assert f.steps % 2 == 0 and f.steps < 100 and f.loss_after < f.loss_before
    if f.steps > 2:  # it stopped at the first check that answers: the checks before did not
        with pytest.raises(EditFailed):
            finetune_edit(model, vocab, "Ana Linda", "Lima", None, steps=f.steps - 2, check_every=2)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())  # the original is untouched
    assert sorted(edited.state_dict()) == sorted(before)  # no parameter added


def test_finetuning_one_layer_changes_only_that_mlp_output_matrix(run):
    model, vocab, _ = load_model(run / "run")
    edited, f = finetune_edit(model, vocab, "Ana Linda", "Lima", 0, lr=3e-3)
    [now] = answer_questions(edited, vocab, read_qa(run / "dev.tsv")[:1])
    assert now.answer == "Lima"
    moved = {k for k, v in model.state_dict().items() if not torch.equal(edited.state_dict()[k], v)}
    assert moved and moved <= {"blocks.0.mlp.2.weight", "blocks.0.mlp.2.bias"}  # mlp_proj, the MLP output


def test_a_finetune_edit_is_recorded_like_the_others_and_adds_no_parameters(run, tmp_path, capsys):
    out = tmp_path / "edited"
    assert _edit(run, out, "Ana Lindi", "Kyiv", "--method", "finetune") == 0
    [record] = json.loads((out / "edits.json").read_text())
    assert record == {"id": 1, "person": "Ana Lindi", "old_answer": "Oslo", "place": "Kyiv", "method": "finetune",
                      "layer": 0, "parameters_added": 0}  # the layer rome edits: below the top of 2
    report = json.loads((out / "edit.json").read_text())
    assert report["efficacy"] is True and report["steps"] >= 1 and report["settings"]["method"] == "finetune"
    edited, vocab, ckpt = load_model(out)
    original = load_checkpoint(run / "run")
    assert sorted(ckpt.model_state) == sorted(original.model_state)  # the same tensors, no codebook
    assert any(not torch.equal(ckpt.model_state[k], v) for k, v in original.model_state.items())  # weights moved
    [now] = answer_questions(edited, vocab, [e for e in read_qa(run / "dev.tsv") if "Ana Lindi" in e.question])
    assert now.answer == "Kyiv"
    capsys.readouterr()
    assert cli.main(["edits", str(out)]) == 0
    assert "| 1 | Ana Lindi | Oslo | Kyiv | finetune | 0 | 0 |" in capsys.readouterr().out


def test_a_finetune_edit_that_does_not_take_exits_1_with_one_line_and_writes_nothing(run, tmp_path, capsys,
                                                                                   monkeypatch):
    monkeypatch.setattr(correction, "finetune_edit", functools.partial(finetune_edit, lr=0.0, steps=4))
    before = _sha(run / "run" / "checkpoint.safetensors")
    out = tmp_path / "new"
    assert _edit(run, out, "Ana Linde", "Rome", "--method", "finetune") == 1  # a missed goal, not bad input
    err = capsys.readouterr().err
    assert "the finetune edit of 'Ana Linde' did not take: after 4 steps" in err and err.count("\n") == 1
    assert not out.exists() and _sha(run / "run" / "checkpoint.safetensors") == before


def test_a_finetune_edit_cannot_be_undone(run, tmp_path, capsys):
    first, tuned = tmp_path / "first", tmp_path / "tuned"
    assert _edit(run, first, "Ana Lindu", "Oslo") == 0
    assert _edit(run, tuned, "Ana Lindy", "Lima", "--method", "finetune", source=first) == 0
    assert [r["method"] for r in json.loads((tuned / "edits.json").read_text())] == ["grace", "finetune"]
    capsys.readouterr()
    assert cli.main(["edit", str(tuned), "--undo", "2", "--out-dir", str(tmp_path / "u")]) == 2
    err = capsys.readouterr().err
    assert "edit 2 (finetune) changed the model's weights and cannot be undone" in err and err.count("\n") == 1
    assert not (tmp_path / "u").exists()


def test_finetune_raises_edit_failed_when_its_steps_run_out(run):
    model, vocab, _ = load_model(run / "run")
    with pytest.raises(EditFailed, match="after 2 steps the model answers 'Paris', not 'Lima'; nothing written"):
        finetune_edit(model, vocab, "Ana Linda", "Lima", 0, lr=0.0, steps=2)
