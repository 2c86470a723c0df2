"""merged_qk trains like vanilla: its matrix is trained scaled by 1/d, so that one AdamW step
moves the attention scores about as far as a vanilla layer's step does (trained unscaled, they
moved ~40 times further at d = 128, the softmax saturated and the cpu recipe stalled at loss
0.975: docs/notebook.md, 2026-11-25)."""

from __future__ import annotations

import dataclasses

import torch

from attnlab.model.attention import MergedQKAttention
from attnlab.config.settings import ModelConfig, TrainConfig
from attnlab.model.gpt import GPT, lm_loss
from attnlab.training.trainer import make_optimizer
from tests.conftest import DATA

T = 32


def _model(attention: str, d: int = 128, vocab: int = 40, block: int = T, unscaled: bool = False) -> GPT:
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=vocab, block_size=block, n_layer=1, n_head=d // 32, n_embd=d, dropout=0.0,
                            attention=attention))
    if unscaled:  # W trained as itself, as before the fix (the same initial W)
        for block_ in model.blocks:
            with torch.no_grad():
                block_.attn.W_scaled.mul_(block_.attn.w_scale)
            block_.attn.w_scale = 1.0
    return model


def _score_step(model: GPT) -> float:
    """The std over causal (query, key) pairs of how far one AdamW step (learning rate 3e-3, as
    the cpu recipe) moves the first layer's attention scores, on that layer's same input."""
    attn = model.blocks[0].attn
    seen = {}
    attn.register_forward_pre_hook(lambda module, args: seen.update(x=args[0].detach()))

    def scores() -> torch.Tensor:
        with torch.no_grad():
            q, k, scale = attn.queries_keys(seen["x"], torch.arange(T)[None])
            return (q @ k.transpose(-2, -1)) * scale

    ids = torch.randint(0, 40, (8, T + 1), generator=torch.Generator().manual_seed(1))
    loss = lm_loss(model.run(ids[:, :-1])[0], ids[:, 1:])
    before = scores()
    optimizer = make_optimizer(model, dataclasses.replace(TrainConfig(), learning_rate=3e-3), torch.device("cpu"))
    loss.backward()
    optimizer.step()
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    return (scores() - before)[..., causal].std().item()


def test_one_step_moves_merged_qk_scores_about_as_far_as_vanillas():
    vanilla = _score_step(_model("vanilla"))
    merged = _score_step(_model("merged_qk"))
    unscaled = _score_step(_model("merged_qk", unscaled=True))
    assert vanilla / 4 < merged < 4 * vanilla  # measured: 0.064 against vanilla's 0.029
    assert unscaled > 10 * vanilla  # what stalled it: 1.23, 42 times vanilla's step


def test_a_tiny_merged_qk_models_loss_falls_like_vanillas_on_the_same_data():
    lines = [line[:49] for line in (DATA / "wiki.txt").read_text().splitlines() if len(line) > 49][:16]
    chars = sorted(set("".join(lines)))
    ids = torch.tensor([[chars.index(c) for c in line] for line in lines])

    def losses(attention: str) -> list[float]:
        model = _model(attention, d=64, vocab=len(chars), block=48)
        optimizer = make_optimizer(model, dataclasses.replace(TrainConfig(), learning_rate=3e-3), torch.device("cpu"))
        out = []
        for _ in range(80):
            loss = lm_loss(model.run(ids[:, :-1])[0], ids[:, 1:])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            out.append(loss.item())
        return out

    vanilla, merged = losses("vanilla"), losses("merged_qk")
    assert abs(merged[0] - vanilla[0]) < 0.05  # the same start: the initial scores match vanilla's
    assert vanilla[-1] < 0.1 * vanilla[0]  # memorised
    assert merged[-1] < 0.1 * merged[0] and merged[-1] < 2 * vanilla[-1] + 0.02


def test_a_checkpoint_holding_the_unscaled_matrix_loads_as_the_same_attention():
    config = ModelConfig(vocab_size=40, block_size=T, n_layer=1, n_head=2, n_embd=64, dropout=0.0,
                         attention="merged_qk")
    torch.manual_seed(0)
    layer = MergedQKAttention(config)
    with torch.no_grad():
        layer.W_scaled.normal_()
        layer.u.normal_()
    old = {("W" if k == "W_scaled" else k): (layer.W if k == "W_scaled" else v) for k, v in layer.state_dict().items()}
    loaded = MergedQKAttention(config)
    loaded.load_state_dict(old)
    x, pos = torch.randn(2, 8, 64), torch.arange(8)[None]
    torch.testing.assert_close(loaded.W, layer.W)
    torch.testing.assert_close(loaded(x, pos)[0], layer(x, pos)[0])


def test_a_checkpoint_file_written_before_the_scaling_loads_as_the_same_model(tmp_path):
    from attnlab.model.checkpoint import load_model, save_checkpoint
    from attnlab.data.vocab import Vocab

    vocab = Vocab.from_text("abcdefgh ")
    model = _model("merged_qk", d=64, vocab=len(vocab), block=16).eval()
    with torch.no_grad():
        model.blocks[0].attn.W_scaled.normal_()
    state = model.state_dict()
    old = {k.removesuffix("_scaled"): (model.blocks[0].attn.W if k.endswith("W_scaled") else v)
           for k, v in state.items()}
    model.state_dict = lambda: old  # written as the code before the scaling wrote it
    path = save_checkpoint(tmp_path / "old.safetensors", model, vocab)
    loaded, _, _ = load_model(path)
    idx = torch.randint(0, len(vocab), (2, 16), generator=torch.Generator().manual_seed(2))
    del model.state_dict
    torch.testing.assert_close(loaded(idx)[0], model(idx)[0])
