"""Gated edits (`attnlab edit --method grace`, the default), the edited checkpoint format,
`attnlab edits` and `attnlab edit --undo`, on the tiny recall model of test_facts.py."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import attnlab
from attnlab import cli
from attnlab.facts import gated_edit as gated_editing
from attnlab.model.checkpoint import FORMAT, FORMAT_EDITED, CheckpointError, load_checkpoint, load_model
from attnlab.model.codebook import codebook_of
from attnlab.data.datasets import read_qa
from attnlab.facts.edit import EditInput, completes_with, stat_texts, trajectory
from attnlab.answering.evaluate import answer_questions
from tests.test_facts import LINES, PEOPLE, _sha, run  # noqa: F401  (run: the module's fixture)
from tests.tiny_runs import ask_rows


def _edit(run, out, person, place, *extra, source=None):
    return cli.main(["edit", str(source or run / "run"), "--person", person, "--place", place, "--out-dir", str(out),
                     "--corpus", str(run / "wiki.txt"), "--train-file", "", "--eval-file", "", *extra])


def _predictions(path, run) -> list[tuple]:
    """Every dev answer of a run, as bytes-comparable tuples (answer, confidence, recalled text)."""
    model, vocab, _ = load_model(path)
    return [(a.answer, a.confidence, a.recalled) for a in answer_questions(model, vocab, read_qa(run / "dev.tsv"))]


def _format(path) -> str:
    with safe_open(str(path / "checkpoint.safetensors"), framework="pt") as f:
        return json.loads(f.metadata()["attnlab"])["format"]


def test_a_gated_edit_changes_the_person_and_no_other_answer_bit_for_bit(run, tmp_path):
    out = tmp_path / "edited"
    assert _edit(run, out, "Ana Linda", "Lima") == 0
    original, vocab, _ = load_model(run / "run")
    edited, _, ckpt = load_model(out)
    examples = read_qa(run / "dev.tsv")
    before, after = answer_questions(original, vocab, examples), answer_questions(edited, vocab, examples)
    assert after[0].answer == "Lima" and before[0].answer == "Paris"
    book = codebook_of(edited)
    for example, old, new in zip(examples[1:], before[1:], after[1:]):
        assert (new.answer, new.confidence, new.recalled) == (old.answer, old.confidence, old.recalled)
        ids, _ = trajectory(original, vocab, example, old)
        x = torch.tensor([ids])
        with torch.no_grad():
            from attnlab.model.codebook import captured

            with captured(edited) as store:
                logits = edited.run(x)[0]
            assert not book.gate(store[0])[1].any()  # the gate stays closed along the whole answer
            assert torch.equal(logits, original.run(x)[0])  # and the model is the original there
    assert ckpt.edits[0]["person"] == "Ana Linda" and ckpt.edits[0]["method"] == "grace"
    assert sorted(ckpt.model_state) == sorted(load_checkpoint(run / "run").model_state)  # weights kept, tensors added
    assert all(torch.equal(ckpt.model_state[k], v) for k, v in load_checkpoint(run / "run").model_state.items())


def test_edited_run_records_its_edits_and_loads_everywhere(run, tmp_path, capsys):
    out = tmp_path / "edited"
    assert _edit(run, out, "Ana Lindi", "Kyiv") == 0
    report = json.loads((out / "edit.json").read_text())
    [record] = json.loads((out / "edits.json").read_text())
    assert record == {"id": 1, "person": "Ana Lindi", "old_answer": "Oslo", "place": "Kyiv", "method": "grace",
                      "layer": 1, "parameters_added": report["parameters_added"]}
    entries = len(report["key_positions"]) + len(report["line_key_positions"])
    assert record["parameters_added"] == entries * (2 * 48 + 1) > 0
    # The corpus line says what the recall says up to the place: the same states, no entry of its own.
    assert report["line_prompt"] == "Ana Lindi. This one was born in " and report["line_key_positions"] == []
    assert _format(out) == FORMAT_EDITED and _format(run / "run") == FORMAT
    capsys.readouterr()
    assert cli.main(["edits", str(out)]) == 0
    assert "| 1 | Ana Lindi | Oslo | Kyiv | grace | 1 |" in capsys.readouterr().out
    assert attnlab.load(out, device="cpu").ask("Where was Ana Lindi born?")[0].answer == "Kyiv"  # the Python API
    assert cli.main(["ask", str(out), "--abstain", "off", "Where was Ana Lindi born?"]) == 0  # the CLI's loading
    assert ask_rows(capsys.readouterr().out)[0]["answer"] == "Kyiv"


def test_sequential_edits_all_hold_and_undo_gives_byte_identical_predictions(run, tmp_path, capsys):
    a, ab, b, undo_a, undo_b = (tmp_path / n for n in ("a", "ab", "b", "undo-a", "undo-b"))
    assert _edit(run, a, "Ana Linda", "Lima") == 0
    assert _edit(run, ab, "Ana Lindo", "Quito", source=a) == 0
    assert _edit(run, b, "Ana Lindo", "Quito") == 0
    both = _predictions(ab, run)
    assert [p[0] for p in both] == ["Lima", "Lima", "Oslo", "Quito", "Kyiv", "Quito"]  # the earlier edit holds
    assert cli.main(["edit", str(ab), "--undo", "1", "--out-dir", str(undo_a)]) == 0
    assert cli.main(["edit", str(ab), "--undo", "2", "--out-dir", str(undo_b)]) == 0
    assert _predictions(undo_a, run) == _predictions(b, run)  # as if edit 1 had never been made
    assert _predictions(undo_b, run) == _predictions(a, run)
    assert [r["id"] for r in json.loads((undo_a / "edits.json").read_text())] == [2]
    only = tmp_path / "none"
    assert cli.main(["edit", str(a), "--undo", "1", "--out-dir", str(only)]) == 0
    assert _predictions(only, run) == _predictions(run / "run", run)
    assert _format(only) == FORMAT  # no edit left: an unedited checkpoint again


def test_a_failed_edit_exits_non_zero_with_one_line_and_writes_nothing(run, tmp_path, capsys, monkeypatch):
    def no_change(model, x, y, positions, **kw):
        return torch.zeros(len(positions), model.config.n_embd), 0, 1.0, 1.0

    monkeypatch.setattr(gated_editing, "optimise_values", no_change)
    before = _sha(run / "run" / "checkpoint.safetensors")
    out = tmp_path / "new"
    assert _edit(run, out, "Ana Linde", "Rome") == 1  # a missed goal, not bad input (exit 2)
    err = capsys.readouterr().err
    assert "did not take" in err and "'Lima'" in err and err.count("\n") == 1
    assert not out.exists() and _sha(run / "run" / "checkpoint.safetensors") == before


@pytest.mark.parametrize("argv, problem", [
    (["--person", "Ana Lina", "--place", "Lima"], "never saw them"),
    (["--person", "Ana Linda", "--place", "Zürich"], "--place: character 'Z'"),
    (["--person", "Ana Linda", "--place", "Lima", "--undo", "1"], "takes no --person"),
    (["--undo", "1"], "has no edit 1 (its edits: none)"),
    (["--person", "Ana Linda"], "--place is required"),
])
def test_bad_edit_requests_get_a_clear_message(run, tmp_path, capsys, argv, problem):
    out = tmp_path / "new"
    assert cli.main(["edit", str(run / "run"), *argv, "--out-dir", str(out), "--corpus", str(run / "wiki.txt"),
                     "--eval-file", ""]) == 2
    err = capsys.readouterr().err
    assert problem in err and err.count("\n") == 1
    assert not out.exists()


def test_a_second_edit_of_the_same_person_is_refused_and_rome_edits_cannot_be_undone(run, tmp_path, capsys):
    first, rome = tmp_path / "first", tmp_path / "rome"
    assert _edit(run, first, "Ana Lindu", "Oslo") == 0
    assert _edit(run, tmp_path / "again", "Ana Lindu", "Lima", source=first) == 2
    assert "already edited (edit 1: 'Kyiv' -> 'Oslo'); undo it first" in capsys.readouterr().err
    assert _edit(run, rome, "Ana Lindy", "Lima", "--method", "rome", "--layer", "0", source=first) == 0
    assert [r["method"] for r in json.loads((rome / "edits.json").read_text())] == ["grace", "rome"]
    assert cli.main(["edit", str(rome), "--undo", "2", "--out-dir", str(tmp_path / "u")]) == 2
    assert "cannot be undone" in capsys.readouterr().err


def _rewrite(src, dst, change_header=None, drop=()):
    with safe_open(str(src / "checkpoint.safetensors"), framework="pt") as f:
        header = json.loads(f.metadata()["attnlab"])
        tensors = {k: f.get_tensor(k) for k in f.keys() if k not in drop}
    if change_header:
        change_header(header)
    dst.mkdir()
    save_file(tensors, str(dst / "checkpoint.safetensors"), metadata={"attnlab": json.dumps(header)})
    return dst


def test_format_versions_are_checked_with_a_clear_error(run, tmp_path):
    out = tmp_path / "edited"
    assert _edit(run, out, "Ana Linda", "Lima") == 0
    newer = _rewrite(out, tmp_path / "newer", lambda h: h.update(format="attnlab-checkpoint-3"))
    with pytest.raises(CheckpointError, match="unknown checkpoint format 'attnlab-checkpoint-3' .*reads "
                                              "attnlab-checkpoint-1 and attnlab-checkpoint-2"):
        load_model(newer)
    old = _rewrite(out, tmp_path / "old", lambda h: h.update(format=FORMAT))
    with pytest.raises(CheckpointError, match="format attnlab-checkpoint-1 holds no edits, but the file has edit tensors"):
        load_model(old)
    orphan = _rewrite(out, tmp_path / "orphan", lambda h: h["edits"].update(records=[{"id": 7}]))
    with pytest.raises(CheckpointError, match="belong to edits \\[1\\] that edits.records does not list"):
        load_model(orphan)
    torn = _rewrite(out, tmp_path / "torn", drop=("edit.radii",))
    with pytest.raises(CheckpointError, match="codebook tensors missing \\['radii'\\]"):
        load_model(torn)
    assert load_checkpoint(run / "run").edits == []  # a format-1 checkpoint loads unchanged


# ---- the corpus line: where the fact is read outside the model's own recall ------------------
def _input(recalled_before: str, old: str, name: str = "Ana Linda") -> EditInput:
    """An edit input whose recalled line spells the new place "Lima" after ``recalled_before``."""
    text = recalled_before + "Lima and lived there.⁇Lima⁇"
    return EditInput(text, len(name) + 1, len(name) - 1, old, name, place_at=(len(recalled_before), len(text) - 5),
                     place_len=4)


def test_line_prompt_is_where_the_corpus_line_states_the_place_the_model_read():
    line = "Ana Linda. That one (born 1901) was born in Paris and lived there."
    # The line spells the old answer: up to there.
    assert gated_editing.line_prompt(line, _input("Ana Linda. This one was born in ", "Paris"), 100) == \
        "Ana Linda. That one (born 1901) was born in "
    # It does not (the model answered wrongly), but it says what the recall said before the
    # place: aligned (the gold place is never asked for).
    assert gated_editing.line_prompt(line, _input("Ana Linda. This one was born in ", "Oslo"), 100) == \
        "Ana Linda. That one (born 1901) was born in "
    assert gated_editing.line_prompt(line, _input("Ana Linda. Moved to ", "Oslo"), 100) is None  # no such place
    assert gated_editing.line_prompt(line, _input("Ana Linda. This one was born in ", "Paris"), 46) is None  # past the block
    assert gated_editing.line_prompt(None, _input("Ana Linda. This one was born in ", "Paris"), 100) is None


def _tiny_edit(run, line):
    model, vocab, _ = load_model(run / "run")
    negatives = gated_editing.Negatives.of(model, vocab, stat_texts(model, LINES, 0, 0),
                                           gated_editing.gated_layer(model))
    return model, vocab, gated_editing.gated_edit(model, vocab, "Ana Linda", "Lima", negatives, owner=1, line=line)


def test_a_corpus_line_unlike_the_recall_gets_entries_of_its_own_and_completes_with_the_new_place(run):
    # The person's corpus line as the model does not recall it (other words before the place):
    # the edit input's keys are far from its states, so without the line the edit does not
    # reach it, and with it the line's own entries do, every other answer unchanged.
    line = "Ana Linda. This one lived in Paris and was born there."
    prompt = "Ana Linda. This one lived in "
    model, vocab, (edited, g) = _tiny_edit(run, line)
    assert g.line_prompt == prompt and g.line_positions and g.positions
    assert all(len(prompt) - 1 <= p < len(prompt) + 3 for p in g.line_positions)  # at the place's characters
    assert completes_with(edited, vocab, prompt, "Lima")
    assert not completes_with(_tiny_edit(run, None)[2][0], vocab, prompt, "Lima")  # the edit input alone misses it
    examples = read_qa(run / "dev.tsv")
    before, after = answer_questions(model, vocab, examples), answer_questions(edited, vocab, examples)
    assert after[0].answer == "Lima"
    assert [(a.answer, a.confidence, a.recalled) for a in after[1:]] == \
        [(a.answer, a.confidence, a.recalled) for a in before[1:]]
    assert g.parameters_added == (len(g.positions) + len(g.line_positions)) * (2 * 48 + 1)
