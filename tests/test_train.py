"""Training (SPEC section 5): schedule, optimiser groups, checkpoints, resume, determinism."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from attnlab.model.checkpoint import load_checkpoint, load_model, save_checkpoint
from attnlab.config.settings import TrainConfig, get_preset
from attnlab.training.pipeline import finetune, pretrain
from attnlab.training.trainer import lr_at, make_optimizer


def test_learning_rate_at_chosen_token_counts():
    c = TrainConfig(learning_rate=6e-3, warmup_tokens=10_240, lr_floor=0.1)
    final = 200 * 2937 * 128
    assert final == 75_187_200  # SPEC 5
    assert lr_at(0, c, final) == 0.0
    assert lr_at(5_120, c, final) == pytest.approx(3e-3)  # halfway through warmup
    assert lr_at(10_240, c, final) == pytest.approx(6e-3)  # peak
    mid = 10_240 + (final - 10_240) // 2
    assert lr_at(mid, c, final) == pytest.approx(6e-4 + 5.4e-3 * 0.5, rel=1e-6)  # cosine midpoint
    assert lr_at(final, c, final) == pytest.approx(6e-4)  # floor reached at final_tokens
    assert lr_at(3 * final, c, final) == pytest.approx(6e-4)  # and held
    quarter = 10_240 + (final - 10_240) // 4
    assert lr_at(quarter, c, final) == pytest.approx(6e-4 + 5.4e-3 * 0.5 * (1 + math.cos(math.pi / 4)), rel=1e-6)


def test_weight_decay_only_on_weight_matrices(tiny_config):
    from attnlab.model.gpt import GPT

    model = GPT(tiny_config)
    opt = make_optimizer(model, TrainConfig(), torch.device("cpu"))
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in opt.param_groups[0]["params"]}
    plain = {names[id(p)] for p in opt.param_groups[1]["params"]}
    assert opt.param_groups[0]["weight_decay"] == 0.1 and opt.param_groups[1]["weight_decay"] == 0.0
    assert "blocks.0.attn.query.weight" in decayed and "head.weight" in decayed
    assert "blocks.0.attn.query.bias" in plain and "blocks.0.ln1.weight" in plain
    assert "tok_emb.weight" in plain and "pos_emb" in plain
    assert decayed | plain == set(names.values()) and not decayed & plain
    assert opt.defaults["betas"] == (0.9, 0.95)


def _pretrain(tiny_data, tmp_path, name, tiny_config, **train_kw):
    config = TrainConfig(epochs=3, batch_size=4, learning_rate=3e-3, checkpoint_every=0, log_every=1,
                         warmup_tokens=50, seed=0, length_buckets=2, **train_kw)
    return pretrain(tiny_config, config, corpus=tiny_data["corpus"], run_dir=tmp_path / name,
                    log=lambda _m: None)


def test_pretraining_is_bit_identical_for_the_same_seed(tiny_data, tmp_path, tiny_config):
    cfg = dataclasses.replace(tiny_config, dropout=0.1)
    a, _, _ = _pretrain(tiny_data, tmp_path, "a", cfg, max_steps=6)
    b, _, _ = _pretrain(tiny_data, tmp_path, "b", cfg, max_steps=6)
    for (n, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), n


def test_resumed_run_equals_uninterrupted_run(tiny_data, tmp_path, tiny_config):
    cfg = dataclasses.replace(tiny_config, dropout=0.1)  # dropout: the RNG state must resume too
    full, _, full_result = _pretrain(tiny_data, tmp_path, "full", cfg, max_steps=8)
    _pretrain(tiny_data, tmp_path, "cut", cfg, max_steps=3)
    assert load_checkpoint(tmp_path / "cut").meta["step"] == 3
    config = TrainConfig(epochs=3, batch_size=4, learning_rate=3e-3, checkpoint_every=0, log_every=1,
                         warmup_tokens=50, seed=0, length_buckets=2, max_steps=8)
    resumed, _, result = pretrain(cfg, config, corpus=tiny_data["corpus"], run_dir=tmp_path / "cut",
                                  resume=True, log=lambda _m: None)
    assert result.tokens == full_result.tokens
    for (n, p), q in zip(full.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(p, q), n
    # the optimiser state was restored, not restarted
    ckpt = load_checkpoint(tmp_path / "cut")
    assert ckpt.meta["step"] == 8 and ckpt.optimizer_state is not None


def test_metrics_and_checkpoint_interval(tiny_data, tmp_path, tiny_config):
    _pretrain(tiny_data, tmp_path, "m", tiny_config, max_steps=5)
    rows = [json.loads(line) for line in (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert {"loss", "lr", "tokens", "tokens_per_s"} <= rows[0].keys()
    # every target position counts, PAD included: examples x (block 48 - 1); 13 documents in
    # batches of 4 make epochs of 4 + 4 + 4 + 1 examples
    sizes = [4, 4, 4, 1, 4]
    assert [r["tokens"] for r in rows] == [47 * sum(sizes[: i + 1]) for i in range(5)]
    assert rows[-1]["loss"] < rows[0]["loss"]


def test_checkpoint_round_trip_gives_identical_logits(tmp_path, tiny_config):
    from attnlab.model.gpt import GPT
    from attnlab.data.vocab import Vocab

    torch.manual_seed(1)
    model = GPT(dataclasses.replace(tiny_config, vocab_size=8)).eval()
    vocab = Vocab.from_text("abcdef")
    save_checkpoint(tmp_path / "c.safetensors", model, vocab, {"note": "x"})
    loaded, loaded_vocab, ckpt = load_model(tmp_path / "c.safetensors")
    idx = torch.randint(0, 8, (2, 10))
    assert torch.equal(model(idx)[0], loaded(idx)[0])
    assert loaded_vocab == vocab and ckpt.meta["note"] == "x"
    assert not list(tmp_path.glob(".tmp-*")), "temporary files must not be left behind"


def test_damaged_checkpoint_is_a_one_line_error(tmp_path):
    from attnlab.model.checkpoint import CheckpointError

    bad = tmp_path / "checkpoint.safetensors"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(tmp_path)
    assert str(bad) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing")


def test_finetune_from_pretrained_keeps_vocab_and_shape(tiny_data, tmp_path, tiny_config):
    _pretrain(tiny_data, tmp_path, "pre", tiny_config, max_steps=2)
    cfg = TrainConfig(epochs=1, batch_size=4, checkpoint_every=0, warmup_tokens=10, learning_rate=1e-3)
    model, vocab, _ = finetune(cfg, run_dir=tmp_path / "ft", init=tmp_path / "pre",
                               train_file=tiny_data["train"], log=lambda _m: None)
    pre = load_checkpoint(tmp_path / "pre")
    assert vocab == pre.vocab and model.config == pre.model_config
    assert load_checkpoint(tmp_path / "ft").meta["stage"] == "finetune"


def test_presets_hold_the_course_numbers():
    spec = get_preset("spec")
    assert spec.model == dict(block_size=128, n_layer=4, n_head=8, n_embd=256)
    assert (spec.pretrain.epochs, spec.pretrain.batch_size, spec.pretrain.learning_rate) == (650, 128, 6e-3)
    assert (spec.finetune.epochs, spec.finetune.batch_size, spec.finetune.learning_rate) == (10, 256, 6e-4)
    assert (spec.finetune_scratch.epochs, spec.finetune_scratch.batch_size) == (75, 256)
    with pytest.raises(ValueError, match="unknown preset"):
        get_preset("nope")


def test_finetune_keeps_the_pretrained_config_unless_told(tiny_data, tmp_path, tiny_config):
    from attnlab import cli

    _pretrain(tiny_data, tmp_path, "pre", dataclasses.replace(tiny_config, dropout=0.0), max_steps=1)
    base = ["finetune", "--preset", "tiny", "--init", str(tmp_path / "pre"), "--train-file",
            str(tiny_data["train"]), "--eval-file", "", "--max-steps", "1", "--device", "cpu"]
    assert cli.main(base + ["--out-dir", str(tmp_path / "a")]) == 0
    assert load_checkpoint(tmp_path / "a").model_config.dropout == 0.0  # not the preset's default
    assert cli.main(base + ["--out-dir", str(tmp_path / "b"), "--dropout", "0.2"]) == 0
    assert load_checkpoint(tmp_path / "b").model_config.dropout == 0.2
    assert cli.main(base + ["--out-dir", str(tmp_path / "c"), "--n-embd", "64"]) == 2  # shape: refused


def test_each_variant_declares_its_undecayed_parameters(tiny_config):
    """A variant names its own no-decay parameters (Attention.no_decay); the optimiser honours
    them without the model knowing any variant by name."""
    from attnlab.model.attention import REGISTRY
    from attnlab.model.gpt import GPT

    for name, cls in REGISTRY.items():
        model = GPT(dataclasses.replace(tiny_config, attention=name))
        opt = make_optimizer(model, TrainConfig(), torch.device("cpu"))
        names = {id(p): n for n, p in model.named_parameters()}
        plain = {names[id(p)] for p in opt.param_groups[1]["params"]}
        layer_params = dict(model.blocks[0].attn.named_parameters())
        assert all(p in layer_params for p in cls.no_decay), name
        assert {f"blocks.{i}.attn.{p}" for i in range(tiny_config.n_layer) for p in cls.no_decay} <= plain
    assert REGISTRY["relative"].no_decay == ("relative_bias",)
