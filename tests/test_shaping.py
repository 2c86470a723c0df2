"""Attention-shaping losses (attnlab.training.shaping): the formulas against independent computations,
their bounds, their gradients, padding, every variant, and lambda = 0 changing nothing."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.model.attention import REGISTRY
from attnlab.data.batching import Batches
from attnlab.config.settings import ModelConfig, TrainConfig
from attnlab.model.gpt import GPT
from attnlab.training.pipeline import _loss_fn
from attnlab.probing.heads import head_statistics, row_distance, row_entropy
from attnlab.training.shaping import focus_loss, near_loss, shaping_loss_fn
from attnlab.training.rundir import Run
from attnlab.training.trainer import Plan, default_loss, train
from attnlab.data.vocab import PAD_ID, Vocab

V = 12


def tiny(attention: str = "vanilla", n_layer: int = 2, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(ModelConfig(vocab_size=V, block_size=16, n_layer=n_layer, n_head=2, n_embd=16,
                           dropout=0.0, attention=attention))


def causal_softmax(scores: torch.Tensor) -> torch.Tensor:
    T = scores.shape[-1]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)


# ---- the entropy -----------------------------------------------------------------------------
def test_entropy_of_one_hot_is_zero_and_of_uniform_is_log_t():
    one_hot = torch.zeros(5, 9)
    one_hot[torch.arange(5), torch.tensor([0, 3, 8, 2, 5])] = 1.0
    assert torch.equal(row_entropy(one_hot), torch.zeros(5))
    for t in (1, 2, 7, 9):
        row = torch.zeros(9)
        row[:t] = 1.0 / t  # uniform over t positions, zeros (masked) elsewhere
        assert row_entropy(row).item() == pytest.approx(math.log(t), abs=1e-6)


def test_entropy_gradient_through_masked_softmax_is_finite():
    scores = torch.randn(2, 3, 6, 6, requires_grad=True)
    weights = causal_softmax(scores)
    focus_loss([weights, weights]).sum().backward()
    assert torch.isfinite(scores.grad).all()
    # masked (future) keys have no influence at all
    upper = ~torch.ones(6, 6, dtype=torch.bool).tril()
    assert torch.equal(scores.grad[..., upper], torch.zeros_like(scores.grad[..., upper]))
    assert scores.grad.abs().sum() > 0


def _focus_by_hand(weights: list[torch.Tensor], valid: torch.Tensor) -> list[float]:
    """(1 / (K T_b L)) sum_{l,k,t1 valid} -sum_t2 a log a, with plain Python loops."""
    out = []
    B, K, T, _ = weights[0].shape
    for b in range(B):
        total, count = 0.0, 0
        for w in weights:
            for k in range(K):
                for t1 in range(T):
                    if not valid[b, t1]:
                        continue
                    count += 1
                    total -= sum(float(a) * math.log(float(a)) for a in w[b, k, t1] if a > 0)
        out.append(total / count)
    return out


def _near_by_hand(weights: list[torch.Tensor], valid: torch.Tensor, cap: float) -> list[float]:
    out = []
    B, K, T, _ = weights[0].shape
    for b in range(B):
        total, count = 0.0, 0
        for w in weights[:-1]:  # layers 0 .. L-2
            for k in range(K):
                for t1 in range(T):
                    if not valid[b, t1]:
                        continue
                    count += 1
                    total += min(cap, sum(float(w[b, k, t1, t2]) * (t1 - t2) ** 2 for t2 in range(T)))
        out.append(total / count)
    return out


def test_losses_equal_the_formulas_with_padding_excluded():
    torch.manual_seed(1)
    weights = [causal_softmax(torch.randn(3, 2, 7, 7) * 2) for _ in range(3)]
    valid = torch.tensor([[True] * 7, [True] * 4 + [False] * 3, [True] * 1 + [False] * 6])
    assert focus_loss(weights, valid).tolist() == pytest.approx(_focus_by_hand(weights, valid), rel=1e-5)
    assert near_loss(weights, valid, 5.0).tolist() == pytest.approx(_near_by_hand(weights, valid, 5.0), rel=1e-5)


def test_near_ignores_the_last_layer_and_is_zero_with_one_layer():
    torch.manual_seed(2)
    a, b, c = (causal_softmax(torch.randn(1, 2, 6, 6)) for _ in range(3))
    assert torch.equal(near_loss([a, b]), near_loss([a, c]))
    assert not torch.equal(near_loss([a, c]), near_loss([b, c]))
    assert near_loss([a]).tolist() == [0.0]


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 48), cap=st.floats(0.5, 100.0), sharp=st.floats(0.0, 20.0),
       seed=st.integers(0, 2**16))
def test_near_never_exceeds_its_cap(T, cap, sharp, seed):
    g = torch.Generator().manual_seed(seed)
    weights = [causal_softmax(torch.randn(2, 2, T, T, generator=g) * sharp) for _ in range(3)]
    # the worst case too: every query attends to the farthest key
    far = torch.zeros(2, 2, T, T)
    far[..., 0] = 1.0
    for ws in (weights, [far, far, far]):
        assert near_loss(ws, None, cap).max().item() <= cap * (1 + 1e-6)


def test_distance_is_the_expected_offset():
    w = torch.zeros(4, 4)
    w[3, 0] = 0.5
    w[3, 2] = 0.5
    assert row_distance(w)[3].item() == pytest.approx(0.5 * 3 + 0.5 * 1)
    assert row_distance(w, power=2)[3].item() == pytest.approx(0.5 * 9 + 0.5 * 1)


def test_head_statistics_are_per_layer_and_head():
    torch.manual_seed(3)
    weights = [causal_softmax(torch.randn(2, 2, 5, 5)) for _ in range(2)]
    valid = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    ent, dist = head_statistics(weights, valid)  # (B, L, h)
    for b in range(2):
        n = int(valid[b].sum())
        for l, w in enumerate(weights):
            for k in range(2):
                e = sum(-sum(float(a) * math.log(float(a)) for a in w[b, k, t] if a > 0) for t in range(n)) / n
                d = sum(sum(float(w[b, k, t, s]) * abs(t - s) for s in range(5)) for t in range(n)) / n
                assert ent[b, l, k].item() == pytest.approx(e, rel=1e-5)
                assert dist[b, l, k].item() == pytest.approx(d, rel=1e-5)


# ---- the loss function in a model -------------------------------------------------------------
@pytest.mark.parametrize("attention", sorted(REGISTRY))
@pytest.mark.parametrize("name", ["focus", "near"])
def test_shaping_loss_is_differentiable_for_every_variant(attention, name):
    model = tiny(attention)
    x = torch.randint(2, V, (3, 10))
    x[1, 6:] = PAD_ID
    y = torch.randint(2, V, (3, 10))
    loss_sum, extras = shaping_loss_fn(name, 0.5, near_max=4.0)(model, x, y)
    assert set(extras) == {name, f"{name}_unweighted"}
    assert extras[name].item() == pytest.approx(0.5 * extras[f"{name}_unweighted"].item())
    assert not extras[f"{name}_unweighted"].requires_grad  # logged only, no gradient
    # the CE part is the plain loss's
    plain, _ = default_loss(model, x, y)
    assert loss_sum.item() == pytest.approx(plain.item(), rel=1e-5)
    model.zero_grad()
    extras[name].backward()
    grads = [p.grad for b in model.blocks for p in b.attn.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert sum(g.abs().sum() for g in grads) > 0


def test_padded_rows_get_the_loss_of_the_row_alone():
    model = tiny()
    short = torch.randint(2, V, (1, 6))
    padded = torch.cat([short, torch.full((1, 4), PAD_ID)], 1)
    y = torch.randint(2, V, (1, 10))
    for name in ("focus", "near"):
        fn = shaping_loss_fn(name, 1.0)
        alone = fn(model, short, y[:, :6])[1][name]
        with_pad = fn(model, padded, y)[1][name]
        assert with_pad.item() == pytest.approx(alone.item(), rel=1e-5)


def test_packed_rows_take_the_shaping_loss_with_each_line_kept_to_itself():
    """The lm objective packs lines into rows and the trainer passes their segment ids: the
    shaping loss function must accept them (it once crashed at the first step) and compute
    the cross-entropy of the packed forward pass, not of attention across lines."""
    model = tiny()
    x = torch.randint(2, V, (2, 10))
    y = torch.randint(2, V, (2, 10))
    segments = torch.tensor([[0] * 4 + [1] * 6, [0] * 7 + [1] * 3])
    plain_ce, _ = default_loss(model, x, y, segments)
    unpacked_ce, _ = default_loss(model, x, y)
    for name in ("focus", "near"):
        ce, extras = shaping_loss_fn(name, 1.0)(model, x, y, segments)
        assert ce.item() == pytest.approx(plain_ce.item(), rel=1e-5)
        assert ce.item() != pytest.approx(unpacked_ce.item(), rel=1e-5)
        assert torch.isfinite(extras[name])


def test_unknown_loss_is_refused():
    with pytest.raises(ValueError, match="unknown attention-shaping loss"):
        shaping_loss_fn("far", 1.0)


# ---- training ------------------------------------------------------------------------------------
class _Fixed(Batches):
    """Random sequences with a PAD tail, the same for every run with the same seed."""

    def __init__(self, seed: int = 0):
        super().__init__(32, 8, "cpu", seed)
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(2, V, (32, 12), generator=g)
        self.x[::2, 8:] = PAD_ID
        self.y = torch.roll(self.x, -1, 1)

    def batch(self, step: int, rank: int = 0):
        i = self.indices(step)
        return self.x[i], self.y[i]


def _train(tmp_path, loss_fn, name):
    model = tiny(seed=5)
    config = TrainConfig(epochs=1, batch_size=8, learning_rate=1e-2, checkpoint_every=0, log_every=1,
                         device="cpu", compile="off", amp="off", warmup_tokens=0)
    vocab = Vocab.from_text("abcdefghij")
    with Run.open(tmp_path / name, "train", model.config, config, log=lambda _m: None) as run:
        train(model, _Fixed(), run, Plan(vocab, final_tokens=10_000, loss_fn=loss_fn, desc=name))
    return model, [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]


def test_lambda_zero_trains_bit_identically_and_lambda_logs(tmp_path):
    plain, _ = _train(tmp_path, default_loss, "plain")
    for name in ("focus", "near"):
        zero = _loss_fn(TrainConfig(attn_loss=name, attn_loss_weight=0.0))
        assert zero is default_loss and shaping_loss_fn(name, 0.0) is default_loss
        shaped0, _ = _train(tmp_path, zero, f"{name}0")
        for (k, a), b in zip(plain.state_dict().items(), shaped0.state_dict().values()):
            assert torch.equal(a, b), k
        # and a non-zero weight does change training, and is logged every step
        shaped, records = _train(tmp_path, _loss_fn(TrainConfig(attn_loss=name, attn_loss_weight=0.3)), name)
        assert any(not torch.equal(a, b) for a, b in zip(plain.state_dict().values(), shaped.state_dict().values()))
        assert len(records) == 4
        for r in records:
            assert r[name] == pytest.approx(0.3 * r[f"{name}_unweighted"], rel=1e-3, abs=1e-5)


def test_wrappers_are_reached_through():
    from attnlab.training.shaping import unwrap

    from types import SimpleNamespace

    model = tiny()
    # DistributedDataParallel keeps the model in .module, torch.compile in ._orig_mod
    assert unwrap(SimpleNamespace(module=SimpleNamespace(_orig_mod=model))) is model
    with pytest.raises(TypeError, match="need a GPT"):
        unwrap(torch.nn.Linear(2, 2))
