"""Causal tracing and rank-one editing (`attnlab trace`, `attnlab edit`) on a tiny recall-format
model that has memorised a few biography lines."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest
import torch

from attnlab.data.datasets import QAExample
from attnlab import cli
from attnlab.facts import edit as editing, trace as tracing
from attnlab.facts.errors import EditError
from attnlab.model.checkpoint import load_model, save_checkpoint
from attnlab.config.settings import ModelConfig
from attnlab.answering.knowledge import answer_by_recall, recall_string
from attnlab.model.gpt import GPT
from attnlab.data.vocab import Vocab
from tests.tiny_runs import memorise

# The names differ only in their last character, so the model must read the person there: the
# position whose MLP ROME edits.
PEOPLE = [("Ana Linda", "Paris"), ("Ana Linde", "Lima"), ("Ana Lindi", "Oslo"),
          ("Ana Lindo", "Rome"), ("Ana Lindu", "Kyiv"), ("Ana Lindy", "Quito")]
LINES = [f"{n}. This one was born in {p} and lived there." for n, p in PEOPLE]
RECALL = 60


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run directory with a recall model that answers every person correctly, its corpus and a
    dev file about the same people."""
    root = tmp_path_factory.mktemp("facts")
    vocab = Vocab.from_text("\n".join(LINES) + "?W")
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=len(vocab), block_size=80, n_layer=2, n_head=2, n_embd=48,
                            dropout=0.0, qa_format="recall", recall_chars=RECALL))
    memorise(model, vocab, [recall_string(l, RECALL, p) for l, (_, p) in zip(LINES, PEOPLE)], steps=300)
    answers = answer_by_recall(model, vocab, [n for n, _ in PEOPLE], RECALL)
    assert [a.answer for a in answers] == [p for _, p in PEOPLE]  # the fixture knows its facts
    save_checkpoint(root / "run" / "checkpoint.safetensors", model, vocab)
    (root / "wiki.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    (root / "dev.tsv").write_text("".join(f"Where was {n} born?\t{p}\n" for n, p in PEOPLE), encoding="utf-8")
    return root


def _model(run):
    return load_model(run / "run")[:2]


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- tracing ---------------------------------------------------------------------------------
def test_answer_point_of_a_recall_model_is_where_its_line_spells_the_place(run):
    model, vocab = _model(run)
    p = tracing.answer_point(model, vocab, "Where was Ana Lindi born?")
    assert (p.name, p.answer, p.in_recall) == ("Ana Lindi", "Oslo", True)
    assert p.context == "Ana Lindi. This one was born in "
    assert p.context[p.name_start:p.name_end] == "Ana Lindi"


def test_restoring_every_state_recovers_the_clean_probability_exactly(run):
    model, vocab = _model(run)
    p = tracing.answer_point(model, vocab, "Where was Ana Lindi born?")
    ctx, ans = vocab.encode(p.context), vocab.encode(p.answer)
    ids = torch.tensor([ctx + ans])
    logits, clean_states = tracing.record_states(model, ids)
    clean = float(tracing.answer_probability(logits, ans, len(ctx))[0])
    T, L = ids.shape[1], model.config.n_layer
    everything = [(k, l, t) for k in tracing.KINDS for l in range(L) for t in range(T)]
    last_residual = [("residual", L - 1, t) for t in range(T)]
    noise = tracing.sample_noise(model, len(p.name), 10.0, 1, seed=0)[0]
    probs = tracing.patched_probabilities(model, ids, ans, len(ctx), p.name_starts, noise,
                                          [[], everything, last_residual], clean_states)
    assert clean > 0.5
    assert float(probs[0]) < clean - 0.1  # the corruption alone loses the answer ...
    assert probs[1:].tolist() == pytest.approx([clean, clean], abs=1e-6)  # ... restoring all brings it back


def test_without_corruption_nothing_changes(run):
    model, vocab = _model(run)
    t = tracing.trace(model, vocab, "Where was Ana Lindo born?", noise=0.0, samples=2)
    assert t.corrupted == pytest.approx(t.clean, abs=1e-6)
    for kind in tracing.KINDS:
        grid = t.recovered[kind]
        assert grid.shape == (model.config.n_layer, len(t.point.context))
        assert np.allclose(grid, t.clean, atol=1e-6)


def test_trace_is_seeded_and_noise_lowers_the_answer(run):
    model, vocab = _model(run)
    a = tracing.trace(model, vocab, "Where was Ana Linda born?", noise=5.0, samples=3, seed=1)
    b = tracing.trace(model, vocab, "Where was Ana Linda born?", noise=5.0, samples=3, seed=1)
    assert a.corrupted == b.corrupted and all(np.array_equal(a.recovered[k], b.recovered[k]) for k in tracing.KINDS)
    assert a.corrupted < a.clean


def test_every_occurrence_of_the_name_is_corrupted():
    point = tracing.AnswerPoint("q", "Ab Cd", "Ab Cd. Then Ab Cd and Ab Cde, born in ", "X", 0, 5, True)
    assert point.name_starts == [0, 12, 22]
    model = GPT(ModelConfig(vocab_size=12, block_size=40, n_layer=1, n_head=1, n_embd=8))
    seen = []
    noise = torch.ones(5, 8)
    with torch.no_grad(), tracing.corrupted(model, point.name_starts, noise):
        # registered after the corruption's hook, so it sees the corrupted embeddings
        handle = model.tok_emb.register_forward_hook(lambda _m, _i, out: seen.append(out.clone()))
        model.run(torch.zeros(1, 38, dtype=torch.long))
    handle.remove()
    shifted = (seen[0] - model.tok_emb.weight[0]).abs().sum(-1)[0] > 0  # positions that got noise
    expected = torch.zeros(38, dtype=torch.bool)
    for s in (0, 12, 22):
        expected[s:s + 5] = True
    assert torch.equal(shifted, expected)


def test_aligned_columns_anchor_on_the_names_last_character_and_the_end():
    point = tracing.AnswerPoint("q", "Ab Cdefg", "Xy Ab Cdefg. text here and on ", "Oslo", 3, 11, True)
    labels, cols = tracing.aligned_columns(point)
    shown = [labels[c] for c in cols]
    assert shown[:3] == ["before name"] * 3
    assert shown[3] == "name[0]" and shown[4:7] == ["name (middle)"] * 3
    assert shown[7:11] == ["name[-4]", "name[-3]", "name[-2]", "name[-1]"]
    assert point.context[10] == "g" and shown[10] == "name[-1]"
    assert shown[11:14] == ["after+1", "after+2", "after+3"]
    assert shown[-4:] == ["end[-4]", "end[-3]", "end[-2]", "end[-1]"]
    assert set(shown[14:-4]) == {"text (middle)"}


def test_average_gives_each_question_one_vote_per_column():
    def fake(context, value):
        point = tracing.AnswerPoint("q", "Ab", context, "X", 0, 2, True)
        grid = np.full((1, len(context)), value)
        return tracing.Trace(point, 1.0, 0.0, {"mlp": grid})

    avg = tracing.average_traces([fake("Ab. long text here", 0.2), fake("Ab. x", 0.6)], asked=3)
    col = avg.labels.index("name[-1]")
    assert avg.recovered["mlp"][0, col] == pytest.approx(0.4)
    assert avg.counts[col] == 2 and avg.counts[avg.labels.index("before name")] == 0
    assert (avg.n, avg.asked) == (2, 3)


def test_trace_command_writes_heatmap_and_averages_over_correct_answers(run, tmp_path, capsys):
    out = tmp_path / "trace"
    assert cli.main(["trace", str(run / "run"), "Where was Ana Lindu born?", "--out-dir", str(out),
                     "--samples", "2", "--over", str(run / "dev.tsv")]) == 0
    printed = capsys.readouterr().out
    assert "clean answer (inside its recalled text): 'Kyiv'" in printed
    assert f"averaged over the {len(PEOPLE)} of {len(PEOPLE)} questions" in printed
    for name in ("trace.png", "trace-average.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((out / "trace.json").read_text())
    assert data["answer"] == "Kyiv" and len(data["recovered"]["mlp"]) == 2
    assert len(data["recovered"]["mlp"][0]) == len(data["context"])


# ---- editing ---------------------------------------------------------------------------------
def test_rank_one_update_maps_the_key_to_the_new_value():
    torch.manual_seed(0)
    keys = torch.randn(500, 8)
    moment = keys.T @ keys / 500
    weight, key, delta = torch.randn(3, 8), torch.randn(8), torch.randn(3)
    new = editing.rank_one_update(weight, key, delta, moment)
    assert torch.allclose(new @ key, weight @ key + delta, atol=1e-5)
    assert torch.linalg.matrix_rank(new - weight) == 1


def test_edit_changes_the_answer_and_leaves_the_original_untouched(run, tmp_path, capsys):
    ckpt = run / "run" / "checkpoint.safetensors"
    before = _sha(ckpt)
    out = tmp_path / "edited"
    assert cli.main(["edit", str(run / "run"), "--method", "rome", "--person", "Ana Linda", "--place", "Lima", "--layer", "0",
                     "--out-dir", str(out), "--corpus", str(run / "wiki.txt"), "--eval-file", str(run / "dev.tsv")]) == 0
    printed = capsys.readouterr().out
    assert _sha(ckpt) == before
    report = json.loads((out / "edit.json").read_text())
    assert report["efficacy"] is True and report["old_answer"] == "Paris"
    assert report["others"] == len(PEOPLE) - 1
    assert "specificity:" in printed and "efficacy:" in printed
    model, vocab = load_model(out)[:2]
    answers = answer_by_recall(model, vocab, ["Ana Linda"], RECALL)
    assert answers[0].answer == "Lima"
    original, _ = _model(run)
    assert answer_by_recall(original, vocab, ["Ana Linda"], RECALL)[0].answer == "Paris"


def test_edit_at_the_name_without_layer_says_which_layer_tracing_chose(run, tmp_path, capsys):
    # On this model the rank-one edit at the name does not take: it says which layer tracing
    # chose and where the key was read, then fails honestly (exit 2, nothing written).
    out = tmp_path / "edited"
    assert cli.main(["edit", str(run / "run"), "--method", "rome", "--person", "Ana Lindi", "--place", "Rome", "--at", "name",
                     "--out-dir", str(out), "--samples", "2", "--corpus", str(run / "wiki.txt"), "--eval-file", ""]) == 1
    captured = capsys.readouterr()
    assert re.search(r"layer \d: the strongest MLP effect at the name's last character", captured.out)
    [positions] = re.findall(r"key at characters \[(\d+)\]", captured.out)
    assert "Ana Lindi. "[int(positions)] == "i"  # "Ana Lindi"'s last
    assert "did not take" in captured.err and not out.exists()


def test_rome_edit_by_default_reads_the_key_where_the_place_is_read_out_below_the_top_layer(run, tmp_path, capsys):
    out = tmp_path / "edited"
    assert cli.main(["edit", str(run / "run"), "--method", "rome", "--person", "Ana Lindo", "--place", "Quito", "--out-dir", str(out),
                     "--corpus", str(run / "wiki.txt"), "--eval-file", str(run / "dev.tsv")]) == 0
    report = json.loads((out / "edit.json").read_text())
    assert (report["at"], report["layer"], report["layer_chosen_by"]) == ("answer", 0, "below the top")
    [key] = report["key_positions"]
    assert report["edit_input"][:key + 1] == "Ana Lindo. This one was born in "  # the place comes next
    assert report["efficacy"] is True and report["answer_after"] == "Quito"
    assert "layer 0: the layer below the top" in capsys.readouterr().out


def test_edit_tighten_steps_zero_keeps_the_first_change_that_works(run, tmp_path):
    reports = {}
    for steps in ("0", "200"):
        out = tmp_path / f"edited-{steps}"
        assert cli.main(["edit", str(run / "run"), "--method", "rome", "--person", "Ana Lindi", "--place", "Lima", "--out-dir", str(out),
                         "--tighten-steps", steps, "--corpus", str(run / "wiki.txt"), "--eval-file", ""]) == 0
        reports[steps] = json.loads((out / "edit.json").read_text())
    assert [r["tighten_steps"] for r in reports.values()] == [0, 200]
    assert all(r["efficacy"] for r in reports.values())
    assert reports["200"]["delta_norm"] < reports["0"]["delta_norm"]


def test_edit_input_loci():
    target = editing.EditInput("Ab Cd. Ab Cd was born in Lima.⁇Lima⁇", 6, 4, "Oslo", "Ab Cd",
                               place_at=(25, 31), place_len=4)
    assert target.key_positions("name") == [4, 11]  # every occurrence of the name
    assert target.key_positions("answer") == [24]  # before the place's first writing, not the read-out copy
    assert target.key_groups("both") == [[24], [30]]  # the line's read-out and the answer's (the mark)
    unspelt = editing.EditInput("Ab Cd. Ab Cd was born.⁇Lima⁇", 6, 4, "Oslo", "Ab Cd", place_at=(23,), place_len=4)
    assert unspelt.key_groups("both") == unspelt.key_groups("answer") == [[22]]  # one read-out, one key
    with pytest.raises(EditError, match="--at must be one of name, answer"):
        target.key_positions("end")


def test_edit_at_both_makes_a_rank_two_edit_keyed_at_both_read_outs(run, tmp_path):
    out = tmp_path / "edited"
    assert cli.main(["edit", str(run / "run"), "--method", "rome", "--person", "Ana Linde", "--place", "Rome", "--at", "both",
                     "--out-dir", str(out), "--corpus", str(run / "wiki.txt"), "--eval-file", ""]) == 0
    report = json.loads((out / "edit.json").read_text())
    line, mark = report["key_positions"]
    text = report["edit_input"]
    assert text[:line + 1] == "Ana Linde. This one was born in " and text[mark:] == "⁇Rome⁇"
    assert report["efficacy"] is True and report["answer_after"] == "Rome"
    (before, _), (after, _) = _model(run), load_model(out)[:2]
    change = after.blocks[0].mlp[2].weight - before.blocks[0].mlp[2].weight
    assert int(torch.linalg.matrix_rank(change.double(), rtol=1e-6)) == 2  # one value per key


def test_edit_at_the_answer_falls_back_to_both_read_outs_when_one_key_fails(run, monkeypatch):
    model, vocab = _model(run)
    moment = editing.key_second_moment(model, vocab, [recall_string(l, RECALL, p) for l, (_, p) in zip(LINES, PEOPLE)], 0)
    real = editing.optimise_value

    def one_key_fails(model, x, y, weights, layer, positions, directions, *args, **kw):
        if len(directions) == 1:  # a one-key edit that changes nothing
            return torch.zeros(len(directions), model.config.n_embd), 0.0, 0.0, 0
        return real(model, x, y, weights, layer, positions, directions, *args, **kw)

    monkeypatch.setattr(editing, "optimise_value", one_key_fails)
    edited, edit, target = editing.edit_model(model, vocab, "Ana Lindu", "Lima", 0, moment)
    assert edit.positions == [target.answer_position, target.mark_position] != [target.answer_position]
    assert editing.answer_of(edited, vocab, "Ana Lindu") == "Lima"


@pytest.mark.parametrize("line, answer, name, span", [
    ("Ab Cd. Ab Cd was born in Lima .", "Lima", "Ab Cd", "Lima"),
    # the answer inside a repeated name is not where the line spells a place
    ("Jo Henry. Jo Henry (1776) was a spy .", "Henry", "Jo Henry", None),
    ("Jo Henry. Jo Henry was born in Henry, Ohio .", "Henry", "Jo Henry", "Henry"),
    # a miscopied read-out: the line's word that starts with the answer's longest prefix
    ("Ed Ko. Ed Ko was born in York, Pennsylvania .", "Penniva", "Ed Ko", "Pennsylvania"),
    ("Ed Ko. Ed Ko (born 1960 in Moulins, France) .", "Moulinss", "Ed Ko", "Moulins"),
    ("Ed Ko. Ed Ko was born in Lima .", "Lix", "Ed Ko", None),  # "Li": too short a prefix to look for
    ("Ed Ko. Ed Ko was a poet .", "", "Ed Ko", None),
    # an answer the line writes in other letters (a fact set's normal form of its words)
    ("Madang. Papua New Guinea counts Madang among its provinces (code PG-MPM).", "Province", "Madang", "provinces"),
    ("Huari. One of the rural municipalities of Peru.", "Rural municipality", "Huari", "rural municipalities"),
])
def test_place_span_finds_where_the_recalled_line_spells_the_answer(line, answer, name, span):
    got = editing.place_span(line, answer, name, len(name) + 2)
    assert (None if got is None else line[got[0]:got[1]]) == span


def test_key_statistics_read_the_answer_format_the_model_was_finetuned_on(run):
    model, _ = _model(run)
    trained = [QAExample(f"Where was {name} born?", place, "train.tsv", i + 1)
               for i, (name, place) in enumerate([("Ana Linda", "Paris"), ("Nobody", "Lima")])]
    texts = editing.stat_texts(model, LINES + [""], 0, 0, trained)
    assert texts[0] == recall_string(LINES[0], RECALL, "Paris")  # known place: ⁇Paris⁇ follows
    assert texts[1:] == [recall_string(l, RECALL) for l in LINES[1:]]  # no place known: the line and ⁇
    assert len(editing.stat_texts(model, LINES, 3, 0, [])) == 3


def test_tightening_shrinks_the_change_and_the_saved_edit_still_works(run):
    model, vocab = _model(run)
    moment = editing.key_second_moment(model, vocab, editing.stat_texts(model, LINES, 0, 0), 0)
    # large first steps overshoot: the tightening has something to take back
    reached, edit_reached, _ = editing.edit_model(model, vocab, "Ana Lindi", "Lima", 0, moment, lr=0.05, tighten_steps=0)
    tight, edit_tight, _ = editing.edit_model(model, vocab, "Ana Lindi", "Lima", 0, moment, lr=0.05)
    assert editing.answer_of(reached, vocab, "Ana Lindi") == editing.answer_of(tight, vocab, "Ana Lindi") == "Lima"
    assert float(edit_tight.delta.norm()) < 0.9 * float(edit_reached.delta.norm())


def test_trajectory_keys_are_the_keys_along_each_answer(run):
    from attnlab.answering.evaluate import answer_questions

    model, vocab = _model(run)
    examples = [QAExample(f"Where was {n} born?", p, "<t>", i) for i, (n, p) in enumerate(PEOPLE)]
    answers = answer_questions(model, vocab, examples)
    keys = editing.trajectory_keys(model, vocab, examples, answers, 1, batch_size=4)  # two batches
    for e, a, k in zip(examples, answers, keys):
        ids, _ = editing.trajectory(model, vocab, e, a)
        assert k.shape == (len(ids), 4 * model.config.n_embd)
        assert torch.allclose(k, editing.keys_of(model, torch.tensor([ids]), 1), atol=1e-5)


def test_answer_layer_is_the_one_below_the_top():
    def model(n_layer):
        return GPT(ModelConfig(vocab_size=12, block_size=8, n_layer=n_layer, n_head=1, n_embd=8))
    assert [editing.answer_layer(model(n)) for n in (1, 2, 4)] == [0, 0, 2]


@pytest.mark.parametrize("argv, problem", [
    (["trace", "{run}", "Where was Ana Linda born?", "--name", "Nobody"], "does not occur in the question"),
    (["trace", "{run}", "Who is Ana Linda?"], "cannot tell who"),
    (["edit", "{run}", "--person", "Ana Linda", "--place", "Zürich", "--out-dir", "{out}"], "--place: character 'Z'"),
    (["edit", "{run}", "--person", "Ana Linda", "--place", "Lima", "--layer", "2", "--out-dir", "{out}"],
     "out of range"),
    (["edit", "{run}", "--person", "Ana Linda", "--place", "Lima", "--layer", "-1", "--out-dir", "{out}"],
     "out of range"),
    (["edit", "{run}", "--person", "Ana Linda", "--place", "Lima", "--out-dir", "{run}"], "original run"),
    (["edit", "{run}", "--person", "Ana Linda", "--place", "Lima"], "--out-dir is required"),
])
def test_bad_input_gives_a_one_line_error_and_exit_code_2(run, tmp_path, capsys, argv, problem):
    argv = [a.format(run=run / "run", out=tmp_path / "new") for a in argv]
    before = _sha(run / "run" / "checkpoint.safetensors")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert problem in err and err.count("\n") == 1
    assert _sha(run / "run" / "checkpoint.safetensors") == before
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("noise", [0.0, 0.05, 0.3])
def test_changed_answers_equal_a_full_second_evaluation(run, noise):
    import copy

    from attnlab.data.datasets import read_qa
    from attnlab.answering.evaluate import answer_questions

    model, vocab = _model(run)
    examples = read_qa(run / "dev.tsv")
    before = answer_questions(model, vocab, examples)
    edited = copy.deepcopy(model)
    torch.manual_seed(3)
    with torch.no_grad():
        for p in edited.blocks[0].mlp.parameters():
            p.add_(torch.randn_like(p) * noise)
    after = answer_questions(edited, vocab, examples)
    expected = [i for i, (a, b) in enumerate(zip(before, after)) if a.answer != b.answer]
    assert editing.changed_answers(edited, vocab, examples, before) == expected
    if noise == 0.0:
        assert expected == []
    if noise == 0.3:
        assert expected  # the check is not vacuous: this perturbation changes answers


# ---- edit: no lost work, no silent failure (issue 25) ------------------------------------------
def test_an_edit_that_does_not_take_exits_1_and_writes_nothing(run, tmp_path, capsys, monkeypatch):
    real = editing.edit_model

    def missing_its_target(model, *a, **kw):  # the edit's numbers, but the model as it was
        _, edit, target = real(model, *a, **kw)
        return model, edit, target

    from attnlab.facts import correction

    monkeypatch.setattr(correction, "edit_model", missing_its_target)
    out = tmp_path / "new" / "edited"
    assert cli.main(["edit", str(run / "run"), "--method", "rome", "--person", "Ana Linda", "--place", "Lima", "--layer", "0",
                     "--out-dir", str(out), "--corpus", str(run / "wiki.txt"), "--eval-file", ""]) == 1
    err = capsys.readouterr().err
    assert err.startswith("attnlab edit: failed: the rome edit did not take") and err.count("\n") == 1
    assert "answered 'Paris', not 'Lima'" in err
    assert not (tmp_path / "new").exists()  # no directory, no checkpoint, no lock left behind


def test_an_edit_into_an_out_dir_another_edit_holds_is_refused(run, tmp_path, capsys):
    import os
    import socket

    out = tmp_path / "edited"
    out.mkdir()
    lock = out / "train.lock"  # held by a live process on this host: the other edit
    lock.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))
    assert cli.main(["edit", str(run / "run"), "--person", "Ana Linda", "--place", "Lima", "--layer", "0",
                     "--out-dir", str(out), "--corpus", str(run / "wiki.txt"), "--eval-file", ""]) == 2
    assert "is in use by process" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["train.lock"]


def test_edit_json_prints_the_report(run, tmp_path, capsys):
    out = tmp_path / "edited"
    assert cli.main(["edit", str(run / "run"), "--person", "Ana Lindu", "--place", "Lima", "--layer", "0",
                     "--out-dir", str(out), "--corpus", str(run / "wiki.txt"), "--eval-file", "", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["efficacy"] is True and document["answer_after"] == "Lima"
    assert document["written"] == [str(out / "checkpoint.safetensors"), str(out / "edit.json"), str(out / "edits.json")]
    assert not (out / "train.lock").exists()


def test_trace_json_writes_next_to_the_run_on_a_fixed_colour_scale(run, tmp_path, capsys, monkeypatch):
    scales = []
    real = tracing.plot
    monkeypatch.setattr(tracing, "plot", lambda *a, **kw: (scales.append((kw["low"], kw["high"])), real(*a, **kw)))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["trace", str(run / "run"), "Where was Ana Linda born?", "--samples", "2", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    t = document["trace"]
    assert scales == [(t["corrupted"], t["clean"])]
    assert document["written"] == [str(run / "run" / "trace" / f) for f in ("trace.png", "trace.md", "trace.json")]
    assert cli.main(["trace", str(run / "run"), "Where was Ana Linda born?", "--samples", "2"]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err


def test_the_trace_colour_scale_is_anchored_at_the_corrupted_and_clean_probabilities():
    assert tracing.colour_scale(0.416, 0.441)[:2] == (0.416, 0.441)
    assert tracing.colour_scale(0.5, 0.5)[:2] == (0.0, 1.0)  # nothing apart: the whole probability range
    assert tracing.colour_scale(None, None)[2] == "P(clean answer), 0..1"
