"""`attnlab export RUN --to transformer-lens OUT` (attnlab/interop/tlens.py): the exported
TransformerLens model's logits equal the lab's on the dev questions for the variants it can
express, the others are refused in one line, and TransformerLens's hooks (and nnsight) patch an activation
to the probability the lab's own trace gives (examples/interop/patching.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab import cli
from attnlab.config.settings import ModelConfig
from attnlab.data.datasets import read_corpus, read_questions
from attnlab.data.vocab import MASK_CHAR, PAD_CHAR, Vocab
from attnlab.interop import tlens
from attnlab.model import codebook
from attnlab.model.checkpoint import save_checkpoint
from attnlab.model.gpt import GPT
from tests.conftest import DATA, REPO
from tests.tiny_runs import train_tiny

# What TransformerLens can express, each a tiny run: the recall format with learned positions;
# rotary without a position table; the direct format with sinusoidal positions concatenated
# and an output temperature (folded into the unembedding).
RUNS = {
    "vanilla": (),
    "rotary": ("--attention", "rotary", "--positions", "none"),
    "direct-concat": ("--positions", "sinusoidal", "--position-mode", "concat", "--logit-scale", "2.0"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    return {name: train_tiny(base / name, *extra, recall=name != "direct-concat") for name, extra in RUNS.items()}


def _loader(out: Path):
    """The exported folder's own load.py, imported from its path."""
    spec = importlib.util.spec_from_file_location(f"tl_load_{abs(hash(out))}", out / "load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dev_texts(model) -> list[str]:
    questions = read_questions(DATA / "birth_dev.tsv", labelled=True)
    lines = read_corpus(DATA / "wiki.txt").split("\n")
    return tlens.check_texts(model.gpt, model.vocab, questions, lines)


@pytest.mark.parametrize("name", list(RUNS))
def test_the_exported_model_gives_the_labs_logits_on_the_dev_questions(name, runs, tmp_path, capsys):
    out = tmp_path / "tl"
    assert cli.main(["export", str(runs[name]), "--to", "transformer-lens", str(out), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["max_logit_difference"] <= 1e-5 and document["texts"] == 500
    assert sorted(p.name for p in out.iterdir()) == sorted(tlens.FILES)
    loader = _loader(out)
    bridge = loader.load(out)  # as a user loads it: TransformerLens and the folder, no attnlab
    model = attnlab.load(runs[name], device="cpu")
    texts = _dev_texts(model)
    worst, positions = tlens.logit_difference(model.gpt, bridge, model.vocab, texts)
    assert positions == sum(map(len, texts)) and worst <= 1e-5
    text = texts[0]
    assert loader.decode(loader.encode(text, out)[0], out) == text
    assert torch.equal(loader.encode(text, out), torch.tensor([model.vocab.encode(text)]))


def test_the_python_call_gives_a_bridge_with_transformer_lens_hooks(runs):
    model = attnlab.load(runs["vanilla"], device="cpu")
    bridge = model.to_transformer_lens()
    ids = torch.tensor([model.vocab.encode("Where was Ada Lovelace born?" + MASK_CHAR)])
    logits, cache = bridge.run_with_cache(ids)
    ours, lab_cache = model.run_with_cache("Where was Ada Lovelace born?" + MASK_CHAR, ["blocks.1.resid_post"])
    assert (logits - ours).abs().max() <= 1e-5
    assert (cache["blocks.1.hook_resid_post"] - lab_cache["blocks.1.resid_post"]).abs().max() <= 1e-5


def _saved(tmp_path: Path, **changes) -> Path:
    """An untrained model of the tiny shape with ``changes``, saved as a run."""
    config = ModelConfig(**{**dict(vocab_size=40, block_size=48, n_layer=2, n_head=2, n_embd=16, dropout=0.0),
                            **changes})
    vocab = Vocab([PAD_CHAR, MASK_CHAR, *(chr(c) for c in range(ord("A"), ord("A") + 38))])
    run = tmp_path / "run"
    save_checkpoint(run / "checkpoint.safetensors", GPT(config), vocab, meta={})
    return run


@pytest.mark.parametrize("changes, why", [
    ({"attention": "synthesizer"}, "synthesizer attention has no TransformerLens form"),
    ({"attention": "merged_qk"}, "merged_qk attention has no TransformerLens form"),
    ({"attention": "relative"}, "relative attention has no TransformerLens form"),
    ({"attention": "argmax"}, "argmax attention has no TransformerLens form"),
    ({"attention": "rotary+argmax"}, "rotary+argmax attention has no TransformerLens form"),
    ({"attention": "rotary"}, "rotary attention beside a learned position table"),
])
def test_what_transformer_lens_cannot_express_is_refused_in_one_line(changes, why, tmp_path, capsys):
    run, out = _saved(tmp_path, **changes), tmp_path / "tl"
    assert cli.main(["export", str(run), "--to", "transformer-lens", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnlab export: error: ") and why in err and err.count("\n") == 1
    assert not out.exists()


def test_your_own_attention_and_gated_edits_are_refused():
    config = ModelConfig(vocab_size=40, block_size=48, n_layer=2, n_head=2, n_embd=16, dropout=0.0,
                         attention=f"{REPO}/examples/attention/rotary.py:RotaryAttention", positions="none")
    with pytest.raises(tlens.ExportError, match="your own attention .*rotary.py:RotaryAttention"):
        tlens.to_transformer_lens(GPT(config))
    edited = GPT(ModelConfig(vocab_size=40, block_size=48, n_layer=2, n_head=2, n_embd=16, dropout=0.0))
    codebook.attach(edited, 1).add(torch.zeros(1, 16), torch.ones(1, 16), torch.ones(1), owner=1)
    with pytest.raises(tlens.ExportError, match="1 gated-edit entries"):
        tlens.to_transformer_lens(edited)


def test_logits_that_differ_fail_and_write_nothing(runs, tmp_path, monkeypatch, capsys):
    mapped = tlens.tl_weights

    def off_by_a_little(model):  # a mapping error: the final LayerNorm's bias moved
        weights = mapped(model)
        weights["ln_final.bias"] = weights["ln_final.bias"] + 1e-3
        return weights

    monkeypatch.setattr(tlens, "tl_weights", off_by_a_little)
    out = tmp_path / "tl"
    assert cli.main(["export", str(runs["vanilla"]), str(out)]) == 1
    assert "logits differ from the lab's" in capsys.readouterr().err
    assert not out.exists()


def test_an_existing_export_is_kept_unless_overwrite(runs, tmp_path, capsys):
    out = tmp_path / "tl"
    out.mkdir()
    (out / "config.json").write_text("mine")
    assert cli.main(["export", str(runs["vanilla"]), str(out)]) == 2
    assert "already exists" in capsys.readouterr().err and (out / "config.json").read_text() == "mine"
    assert not (out / "weights.safetensors").exists()
    assert cli.main(["export", str(runs["vanilla"]), str(out), "--overwrite"]) == 0
    assert json.loads((out / "config.json").read_text())["n_layers"] == 2


def test_transformer_lens_and_nnsight_patching_give_the_labs_trace():
    """The documented example: a corrupted run with one clean hidden state restored, done with
    TransformerLens's hooks and with nnsight, gives the probability `attnlab trace` gives."""
    spec = importlib.util.spec_from_file_location("patching_example", REPO / "examples/interop/patching.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    model = attnlab.load("models/cpu", device="cpu")
    question = "Where was Alfred Mele born?"
    point = example.answer_point(model.gpt, model.vocab, question)
    result = example.patched(model, question, layer=1, position=point.name_last)
    by_nnsight = example.patched_nnsight(model, question, layer=1, position=point.name_last)
    for run in ("clean", "corrupted", "restored"):
        assert result["transformer_lens"][run] == pytest.approx(result["lab"][run], abs=1e-5), run
        assert by_nnsight[run] == pytest.approx(result["lab"][run], abs=1e-5), run
    # the experiment is not vacuous: the noise takes the answer away
    assert result["lab"]["corrupted"] < result["lab"]["clean"] / 2


@pytest.mark.parametrize("changes", [
    {"causal": False},  # an encoder: bidirectional attention
    {"positions": "none"},  # vanilla without positions: a zero position table
    {"positions": "sinusoidal"},  # the table copied in as weights
    {"attention": "rotary", "positions": "none", "causal": False},
], ids=str)
def test_every_expressible_shape_maps_exactly(changes):
    torch.manual_seed(0)
    config = ModelConfig(**{**dict(vocab_size=40, block_size=48, n_layer=2, n_head=2, n_embd=16, dropout=0.0),
                            **changes})
    model = GPT(config).eval()
    vocab = Vocab([PAD_CHAR, MASK_CHAR, *(chr(c) for c in range(ord("A"), ord("A") + 38))])
    texts = ["ABCDEFG", "HIJ" * 16, "KLMNOPQRSTU" + MASK_CHAR]
    exact, rounded, positions = tlens.compare(model, vocab, tlens.tl_config(config), tlens.tl_weights(model), texts)
    assert positions == sum(map(len, texts)) and exact <= 1e-10 and rounded <= 1e-5
