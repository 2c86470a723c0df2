"""The model object of the Python API (issue 24, item 3): ``evaluate``, ``generate``, ``trace``,
``edit``, ``save`` and ``run_with_cache`` give what the commands give (each is the library call
its command makes), an edit leaves the original model as it was, a save never replaces a file
unasked, activations are read by hook-point name, and the documented examples run as written."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest
import torch

import attnlab
from attnlab import cli
from attnlab.answering.evaluate import wilson_interval
from attnlab.core.paths import PathError
from attnlab.data.datasets import DataError
from attnlab.data.vocab import visible
from attnlab.facts.settings import EditSettings, TraceSettings
from attnlab.facts.trace import record_states
from attnlab.model.hooks import hook_point
from tests.conftest import REPO
from tests.test_facts import PEOPLE, run  # noqa: F401  (run: test_facts's fixture, a model that knows PEOPLE)

QUESTION = "Where was Ana Linda born?"


def _model(run):
    return attnlab.load(run / "run", device="cpu")


# ---- evaluate, generate, trace: what the commands give -----------------------------------------
def test_evaluate_scores_a_file_with_its_interval(run, tmp_path):
    model = _model(run)
    result = model.evaluate(run / "dev.tsv")
    n = len(PEOPLE)
    assert [a.answer for a in result.answers] == [p for _, p in PEOPLE]  # the fixture knows them all
    assert (result.score.correct, result.score.total, result.accuracy) == (n, n, 1.0)
    assert result.interval == wilson_interval(n, n) and result.interval[0] < 1.0
    assert str(result).endswith(f"{n}/{n} (100.0%) [95% CI {100 * result.interval[0]:.1f}-100.0%]")
    assert model.evaluate(run / "dev.tsv", limit=2).score.total == 2
    questions = tmp_path / "questions.txt"
    questions.write_text(QUESTION + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="questions.txt"):  # no labels: nothing to score
        model.evaluate(questions)


def test_generate_continues_as_the_generate_command(run, capsys):
    model = _model(run)
    prompt = "Ana Lindo. This"
    greedy = model.generate(prompt, max_new=20)
    assert greedy == " one was born in Rome"[:20]  # what the fixture memorised
    sampled = model.generate(prompt, max_new=20, temperature=1.5, seed=3)
    capsys.readouterr()
    assert cli.main(["generate", str(run / "run"), prompt, "--max-new", "20", "--temperature", "1.5",
                     "--seed", "3", "--device", "cpu"]) == 0
    assert f"[1] {visible(prompt)} | {visible(sampled)}" in capsys.readouterr().out.splitlines()
    assert model.generate(prompt, max_new=20, stop="b") == " one was b"


def test_trace_is_the_trace_command(run, tmp_path):
    model = _model(run)
    t = model.trace(QUESTION, samples=2)
    assert cli.main(["trace", str(run / "run"), QUESTION, "--samples", "2", "--out-dir", str(tmp_path)]) == 0
    written = json.loads((tmp_path / "trace.json").read_text())
    assert written["settings"] == TraceSettings(samples=2).to_dict() == {"noise": 3.0, "samples": 2, "seed": 0}
    assert (written["answer"], written["clean"], written["corrupted"]) == (t.point.answer, t.clean, t.corrupted)
    assert written["recovered"] == {k: v.tolist() for k, v in t.recovered.items()}
    only_mlp = model.trace(QUESTION, samples=2, kinds=("mlp",))
    assert list(only_mlp.recovered) == ["mlp"] and (only_mlp.recovered["mlp"] == t.recovered["mlp"]).all()


# ---- edit and save ------------------------------------------------------------------------------
def test_edit_returns_a_new_model_as_the_edit_command_makes_it(run, tmp_path):
    model = _model(run)
    before = {k: v.clone() for k, v in model.gpt.state_dict().items()}
    fixed = model.edit("Ana Linda", "Lima", corpus=run / "wiki.txt", train_file=None, eval_file=run / "dev.tsv")
    assert fixed.ask(QUESTION)[0].answer == "Lima" and model.ask(QUESTION)[0].answer == "Paris"
    assert model.edits == [] and model.edit_report is None  # the original is untouched
    assert all(torch.equal(before[k], v) for k, v in model.gpt.state_dict().items())
    report = fixed.edit_report
    assert report["efficacy"] is True and report["others"] == len(PEOPLE) - 1
    assert report["settings"] == EditSettings().to_dict() and fixed.edits[0]["method"] == "grace"
    out = tmp_path / "edited"
    assert cli.main(["edit", str(run / "run"), "--person", "Ana Linda", "--place", "Lima", "--out-dir", str(out),
                     "--corpus", str(run / "wiki.txt"), "--train-file", "", "--eval-file", str(run / "dev.tsv")]) == 0
    by_command = json.loads((out / "edit.json").read_text())
    for key in ("layer", "key_positions", "radii", "steps", "edit_input", "others_changed", "settings"):
        assert by_command[key] == report[key], key
    rome = model.edit("Ana Lindo", "Quito", corpus=run / "wiki.txt", train_file=None, method="rome", layer=0)
    assert rome.ask("Where was Ana Lindo born?")[0].answer == "Quito" and rome.edit_report["method"] == "rome"
    with pytest.raises(ValueError, match="radius must be a finite number > 0"):
        model.edit("Ana Lindo", "Quito", corpus=run / "wiki.txt", train_file=None, radius=0)


def test_save_is_atomic_and_never_replaces_a_checkpoint_unasked(run, tmp_path):
    model = _model(run)
    fixed = model.edit("Ana Lindi", "Rome", corpus=run / "wiki.txt", train_file=None)
    path = fixed.save(tmp_path / "fixed")
    assert path == tmp_path / "fixed" / "checkpoint.safetensors"
    again = attnlab.load(path)
    assert again.ask("Where was Ana Lindi born?")[0].answer == "Rome" and again.edits == fixed.edits
    assert again.checkpoint.meta["edit"]["place"] == "Rome"
    saved = path.read_bytes()
    with pytest.raises(PathError, match="already exists; pass overwrite=True"):
        model.save(tmp_path / "fixed")
    assert path.read_bytes() == saved  # refused: the edited model is still there
    model.save(path, overwrite=True)
    assert attnlab.load(path).ask("Where was Ana Lindi born?")[0].answer == "Oslo"
    assert sorted(p.name for p in path.parent.iterdir()) == ["checkpoint.safetensors"]  # no temporary file


# ---- activations by hook-point name ---------------------------------------------------------------
def test_run_with_cache_reads_every_named_activation(run):
    model = _model(run)
    gpt, text = model.gpt, "Ana Lindu. This one"
    logits, cache = model.run_with_cache(text)
    assert set(cache) == set(model.hook_names)
    ids = torch.tensor([model.vocab.encode(text)])
    last = f"blocks.{gpt.config.n_layer - 1}.resid_post"
    assert torch.allclose(gpt.head(gpt.ln_f(cache[last])), logits, atol=1e-5)  # the stream the head reads
    _, weights = gpt.run(ids, need_weights=True)
    assert all(torch.equal(cache[f"blocks.{l}.attn.pattern"], w) for l, w in enumerate(weights))
    _, states = record_states(gpt, ids)  # tracing reads the same points (on the fast path: no patterns)
    _, fast = model.run_with_cache(text, [f"blocks.1.{p}" for p in ("resid_post", "mlp.out", "attn.out")])
    for kind, point in (("residual", "resid_post"), ("mlp", "mlp.out"), ("attention", "attn.out")):
        assert torch.equal(fast[f"blocks.1.{point}"][0], states[(kind, 1)])
        assert torch.allclose(cache[f"blocks.1.{point}"], fast[f"blocks.1.{point}"], atol=1e-5)
    hidden = cache["blocks.0.mlp.hidden"]
    assert hidden.shape == (1, ids.shape[1], 4 * gpt.config.n_embd)
    assert torch.allclose(gpt.blocks[0].mlp_proj(hidden), cache["blocks.0.mlp.out"], atol=1e-6)
    _, some = model.run_with_cache(text, ["embed"])
    assert list(some) == ["embed"] and some["embed"].shape[:2] == ids.shape
    with pytest.raises(ValueError, match="unknown hook point 'blocks.0.mlp'"):
        model.run_with_cache(text, ["blocks.0.mlp"])
    with pytest.raises(ValueError, match="the model has layers 0..1"):
        hook_point(gpt, "blocks.2.resid_post")


def test_a_patched_hook_point_changes_the_run_and_is_removed_after(run):
    model = _model(run)
    gpt, ids = model.gpt, torch.tensor([model.vocab.encode("Ana Lindu. This one")])
    clean = gpt.run(ids)[0]
    with hook_point(gpt, "blocks.1.mlp.out").patch(torch.zeros_like):
        patched = gpt.run(ids)[0]
    assert not torch.allclose(patched, clean) and torch.equal(gpt.run(ids)[0], clean)
    with pytest.raises(ValueError, match="read, not patched"):
        hook_point(gpt, "blocks.0.attn.pattern").patch(torch.zeros_like)


# ---- the documented examples ------------------------------------------------------------------
def _documented_examples() -> list[str]:
    text = (REPO / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    section = text.split("\n## The model object\n")[1].split("\n## ")[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_documented_model_methods_run_against_the_shipped_model(tmp_path, monkeypatch):
    """docs/reference/api.md, "The model object": one session, in order; models/ and data/ are
    found from any directory, runs/ is written into this one."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for i, block in enumerate(_documented_examples(), 1):
            exec(compile(block, f"docs/reference/api.md, example {i}", "exec"), namespace)
    lines = out.getvalue().splitlines()
    assert len(_documented_examples()) == 5 and len(lines) == 8
    assert re.fullmatch(r"\d+\.\d% right, 95% interval \d+\.\d%-\d+\.\d%", lines[0])
    assert re.fullmatch(r"""(['"]).+\1""", lines[1])  # the continuation, quoted
    model = namespace["model"]
    answer = model.ask("Where was Alfred Mele born?")[0].answer
    assert lines[2].startswith(answer) and re.search(r"clean \d\.\d{3}, corrupted \d\.\d{3}$", lines[2])
    assert lines[3] == f"({model.config.n_layer}, {len(namespace['t'].point.context)})"
    assert lines[4] == f"Paris / before: {answer}" and answer != "Paris"
    assert lines[5] == "True grace" and lines[6] == "Paris"
    assert (tmp_path / "runs" / "mele-in-paris" / "checkpoint.safetensors").exists()
    T, C, h = len("Alfred Mele. "), model.config.n_embd, model.config.n_head
    assert lines[7] == f"(1, {T}, {model.config.vocab_size}) (1, {T}, {C}) (1, {h}, {T}, {T})"


# ---- settings objects make the flags ----------------------------------------------------------
@pytest.mark.parametrize("command, cls", [("trace", TraceSettings), ("edit", EditSettings)])
def test_the_flags_of_trace_and_edit_are_made_from_their_settings(command, cls):
    parser = next(a for a in cli.build_parser()._actions if a.dest == "command").choices[command]
    actions = {a.dest: a for a in parser._actions}
    for f in cls.__dataclass_fields__.values():
        action = actions[f.name]
        assert action.option_strings == ["--" + f.name.replace("_", "-")] and action.default == f.default
        assert action.help == f.metadata["help"] and action.choices == f.metadata.get("choices")
        if "bound" in f.metadata:
            assert action.type.bound == f.metadata["bound"]
    parsed = parser.parse_args(["run", "--samples", "3"] + (["--method", "rome"] if command == "edit" else []))
    from attnlab.cli.flags import settings_from

    settings = settings_from(parsed, cls)
    assert settings.samples == 3 and (command == "trace" or settings.method == "rome")
    with pytest.raises(ValueError, match="samples must be an integer >= 1, got 0"):
        cls(samples=0)
