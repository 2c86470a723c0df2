"""The GPT of SPEC section 4: interface, initialisation, loss masking, determinism."""

from __future__ import annotations

import torch

from attnlab import GPT, GPTConfig
from attnlab.model.gpt import lm_loss


def test_course_constructor_defaults_are_the_spec_preset():
    config = GPTConfig(256, 128)
    assert (config.n_layer, config.n_head, config.n_embd, config.attention) == (4, 8, 256, "vanilla")
    model = GPT(GPTConfig(256, 128, n_layer=1, n_head=2, n_embd=16))
    idx = torch.randint(0, 256, (3, 10))
    logits, loss = model(idx)
    assert logits.shape == (3, 10, 256) and loss is None
    _, loss = model(idx, idx)
    assert loss.ndim == 0 and torch.isfinite(loss)


def test_initialisation_follows_spec(tiny_config):
    torch.manual_seed(0)
    model = GPT(tiny_config.__class__(**{**tiny_config.to_dict(), "n_embd": 64, "vocab_size": 200}))
    w = model.blocks[0].attn.query.weight
    assert abs(float(w.detach().std()) - 0.02) < 0.003
    assert float(model.blocks[0].attn.query.bias.detach().abs().max()) == 0.0
    assert torch.equal(model.blocks[0].ln1.weight, torch.ones(64))
    assert model.head.bias is None


def test_pad_targets_are_ignored_by_the_loss():
    logits = torch.randn(2, 5, 7)
    targets = torch.tensor([[3, 4, 0, 0, 0], [0, 0, 1, 2, 0]])
    keep = targets != 0
    expected = torch.nn.functional.cross_entropy(logits[keep], targets[keep])
    assert torch.allclose(lm_loss(logits, targets), expected)


def test_same_seed_same_weights_and_different_seed_differs(tiny_config):
    from attnlab.training.pipeline import build_model

    a, b, c = build_model(tiny_config, 3), build_model(tiny_config, 3), build_model(tiny_config, 4)
    for (n, p), q, r in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
        assert torch.equal(p, q), n
    assert any(not torch.equal(p, r) for p, r in zip(a.state_dict().values(), c.state_dict().values()))


def test_sequence_longer_than_block_is_a_clear_error(tiny_config):
    model = GPT(tiny_config)
    try:
        model(torch.zeros(1, tiny_config.block_size + 1, dtype=torch.long))
    except ValueError as e:
        assert "block_size" in str(e)
    else:
        raise AssertionError("expected a ValueError")
