"""The speed paths compute what the plain paths compute (issue 4 "Speed").

- fused ``scaled_dot_product_attention`` (``set_fast(True)``) against the explicit
  ``softmax(q k^T * scale + bias + mask) v`` (``set_fast(False)``), for every registered variant;
- length-bucketed, trimmed micro-batches against the full padded batch (loss and gradients);
- the device-dependent switches (bf16 autocast, fused AdamW, seeded generators) on CPU.

Tolerance: fp32 on CPU, both paths do the same arithmetic in a different order, so results
agree to about 1e-6 of their scale. We allow 1e-4 relative plus 1e-5 of the largest entry of
the tensor (``close``): a gradient that is zero in exact arithmetic (e.g. the key bias, which
the softmax cancels) is rounding noise in both paths and has no meaningful relative error.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F

from attnlab.model.attention import REGISTRY, build_attention
from attnlab.data.batching import CorruptionBatches, QABatches, length_buckets
from attnlab.config.settings import ModelConfig, TrainConfig
from attnlab.data.datasets import SpanCorruptionDataset
from attnlab.model.gpt import GPT, lm_loss
from attnlab.training.rundir import Run
from attnlab.training.trainer import Plan, default_loss, make_optimizer, train
from attnlab.data.vocab import PAD_ID, Vocab

ATOL, RTOL = 1e-5, 1e-4
VARIANTS = sorted(REGISTRY)
TEXT = "\n".join(
    "".join(chr(ord("a") + (7 * i + 3 * j) % 26) for j in range(8 + 5 * i)) for i in range(12)
)


def close(actual: torch.Tensor, expected: torch.Tensor, what: str = "", scale: float = 0.0) -> None:
    scale = max(1.0, scale, float(expected.abs().max()))
    torch.testing.assert_close(actual, expected, atol=ATOL * scale, rtol=RTOL,
                               msg=lambda m: f"{what}: {m}" if what else m)


def tiny(attention: str = "vanilla", causal: bool = True, **kw) -> ModelConfig:
    return ModelConfig(vocab_size=30, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.0,
                       attention=attention, causal=causal, **kw)


def randomise(module: torch.nn.Module, seed: int, std: float = 0.3) -> None:
    """Replace every parameter by N(0, std): zero-initialised biases (relative, synthesizer)
    would otherwise hide a wrongly applied bias, and larger weights give peaked attention."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std)


def random_allowed(B: int, T: int, S: int, seed: int) -> torch.Tensor:
    """(B, 1, T, S) random visibility with at least one visible key per query (a row with no
    visible key is NaN in both paths and is never produced by the model's callers)."""
    g = torch.Generator().manual_seed(seed)
    allowed = torch.rand(B, 1, T, S, generator=g) < 0.5
    allowed[..., torch.arange(T), torch.arange(S - T, S)] = True
    return allowed


# ------------------------------------------------------------------ attention layer, per variant


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "explicit-mask"])
def test_fused_attention_matches_explicit(variant: str, causal: bool, masked: bool) -> None:
    torch.manual_seed(0)
    layer = build_attention(tiny(variant, causal)).eval()
    randomise(layer, seed=1)
    B, T = 3, 11
    x = torch.randn(B, T, 16, generator=torch.Generator().manual_seed(2), requires_grad=True)
    positions = torch.arange(T)[None]
    allowed = random_allowed(B, T, T, seed=3) if masked else None

    fast, _ = layer.set_fast(True)(x, positions, allowed=allowed)
    plain, weights = layer.set_fast(False)(x, positions, allowed=allowed, need_weights=True)
    torch.testing.assert_close(fast, plain, atol=ATOL, rtol=RTOL)

    # The explicit path is the reference: its weights must respect the mask it was given.
    visible = allowed if masked else (
        torch.ones(T, T, dtype=torch.bool).tril() if causal else torch.ones(T, T, dtype=torch.bool)
    )
    assert bool((weights.masked_select(~visible.expand_as(weights)) == 0).all())
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, layer.n_head, T))

    g_fast = torch.autograd.grad(fast.square().sum(), [x, *layer.parameters()], allow_unused=True)
    g_plain = torch.autograd.grad(plain.square().sum(), [x, *layer.parameters()], allow_unused=True)
    # Rounding noise scales with the largest gradient of the layer, not with each tensor's own.
    scale = max(float(g.abs().max()) for g in g_plain if g is not None)
    for a, b in zip(g_fast, g_plain):
        assert (a is None) == (b is None)
        if a is not None:
            close(a, b, scale=scale)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_one_product_scores_match_explicit(variant: str, causal: bool) -> None:
    """The fast path's explicit attention (taken for attention maps, shaping losses and CPU
    training with dropout) scores with one baddbmm; weights, output and gradients match the
    plain q k^T * scale + mask."""
    layer = build_attention(tiny(variant, causal)).eval()
    randomise(layer, seed=11)
    x = torch.randn(3, 10, 16, generator=torch.Generator().manual_seed(12), requires_grad=True)
    positions = torch.arange(10)[None]
    outs = {fast: layer.set_fast(fast)(x, positions, need_weights=True) for fast in (True, False)}
    for a, b in zip(outs[True], outs[False]):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=RTOL)
    grads = {fast: torch.autograd.grad(outs[fast][0].square().sum(), [x, *layer.parameters()],
                                       allow_unused=True) for fast in (True, False)}
    scale = max(float(g.abs().max()) for g in grads[False] if g is not None)
    for a, b in zip(grads[True], grads[False]):
        assert (a is None) == (b is None)
        if a is not None:
            close(a, b, scale=scale)


@pytest.mark.parametrize("variant", VARIANTS)
def test_fused_attention_matches_explicit_with_cache(variant: str) -> None:
    """Decoding shapes: T new queries against S > T cached + new keys, per-row positions."""
    torch.manual_seed(0)
    layer = build_attention(tiny(variant)).eval()
    randomise(layer, seed=4)
    B, P, T = 2, 6, 2
    gen = torch.Generator().manual_seed(5)
    x0, x1 = torch.randn(B, P, 16, generator=gen), torch.randn(B, T, 16, generator=gen)
    pos0 = torch.tensor([[0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5]])  # row 0 left-padded by 2
    pos1 = pos0[:, -1:] + torch.arange(1, T + 1)
    keys = torch.cat([pos0, pos1], 1)
    outs = {}
    for fast in (True, False):
        from attnlab.model.attention import KVCache

        cache = KVCache()
        layer.set_fast(fast)
        first = random_allowed(B, P, P, seed=6)
        layer(x0, pos0, allowed=first, cache=cache, key_positions=pos0)
        allowed = random_allowed(B, T, P + T, seed=7)
        outs[fast], _ = layer(x1, pos1, allowed=allowed, cache=cache, key_positions=keys)
    torch.testing.assert_close(outs[True], outs[False], atol=ATOL, rtol=RTOL)


# ------------------------------------------------------------------------------ whole model


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_model_fast_matches_plain(variant: str, causal: bool) -> None:
    torch.manual_seed(0)
    model = GPT(tiny(variant, causal))
    randomise(model, seed=8, std=0.2)
    idx = torch.randint(2, 30, (4, 13), generator=torch.Generator().manual_seed(9))
    targets = torch.randint(0, 30, (4, 13), generator=torch.Generator().manual_seed(10))

    grads = {}
    logits = {}
    for fast in (True, False):
        model.zero_grad(set_to_none=True)
        out, _ = model.set_fast(fast).run(idx)
        lm_loss(out, targets).backward()
        logits[fast] = out.detach()
        grads[fast] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    torch.testing.assert_close(logits[True], logits[False], atol=ATOL, rtol=RTOL)
    assert grads[True].keys() == grads[False].keys() and grads[True]
    scale = max(float(g.abs().max()) for g in grads[False].values())
    for name in grads[True]:
        close(grads[True][name], grads[False][name], name, scale=scale)


# ---------------------------------------------------------------- trimming and length buckets


def padded_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A span-corruption batch (B=10, T=15) whose rows have very different lengths."""
    data = SpanCorruptionDataset(TEXT, 16, seed=seed)
    xs, ys = zip(*(data[i % len(data)] for i in range(10)))
    return torch.stack(xs), torch.stack(ys)


@pytest.mark.parametrize("variant", ["vanilla", "relative", "synthesizer"])
def test_length_buckets_are_exact(variant: str) -> None:
    """Sum of micro-batch losses / global target count == full padded batch mean loss, and the
    same for the gradients, for a causal model (trimmed positions only predict PAD)."""
    vocab = Vocab.from_text(TEXT)
    torch.manual_seed(0)
    model = GPT(dataclasses.replace(tiny(variant), vocab_size=len(vocab)))
    randomise(model, seed=11, std=0.2)
    x, y = padded_batch(seed=12)
    assert (y == PAD_ID).any(1).all() and (y[:, -1] == PAD_ID).all(), "the batch must have padding"

    model.zero_grad(set_to_none=True)
    full = lm_loss(model(x)[0], y)  # the plain computation: padded width, mean over targets
    full.backward()
    reference = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    n_targets = (y != PAD_ID).sum()
    for buckets in (1, 2, 3, 10):
        micro = length_buckets(x, y, buckets)
        assert sum(len(xm) for xm, _ in micro) == len(x)
        assert max(xm.shape[1] for xm, _ in micro) < x.shape[1], "trimming must drop columns"
        # every real target is kept exactly once
        assert sum(int((ym != PAD_ID).sum()) for _, ym in micro) == int(n_targets)
        model.zero_grad(set_to_none=True)
        total = torch.zeros(())
        for xm, ym in micro:
            loss_sum, _ = default_loss(model, xm, ym)
            (loss_sum / n_targets).backward()
            total += loss_sum.detach()
        torch.testing.assert_close(total / n_targets, full.detach(), atol=ATOL, rtol=RTOL)
        for name, g in reference.items():
            close(model.get_parameter(name).grad, g, f"buckets={buckets} {name}")


class _Rows:
    """What QABatches needs from a dataset: a length and the stacked tensors."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x, self.y


def _fixed_batches(x: torch.Tensor, y: torch.Tensor) -> QABatches:
    """The same rows at every step (one batch per epoch; only their order changes)."""
    return QABatches(_Rows(x, y), len(x), "cpu", seed=0)


def _train_steps(model: GPT, x, y, tmp_path, name: str, **config) -> tuple[GPT, list[float]]:
    model = copy.deepcopy(model)
    cfg = TrainConfig(epochs=3, batch_size=len(x), checkpoint_every=0, log_every=1, device="cpu",
                      warmup_tokens=0, **config)
    with Run.open(tmp_path / name, "train", model.config, cfg, log=lambda s: None) as run:
        result = train(model, _fixed_batches(x, y), run, Plan(Vocab.from_text(TEXT), final_tokens=10_000))
    return model, [h["loss"] for h in result.history]


def test_trainer_buckets_match_untrimmed_training(tmp_path) -> None:
    """Three optimiser steps through ``train``: trim=False vs 3 length buckets give the same
    logged losses and the same weights (Adam amplifies gradient differences only near zero)."""
    vocab = Vocab.from_text(TEXT)
    torch.manual_seed(0)
    model = GPT(dataclasses.replace(tiny(), vocab_size=len(vocab)))
    x, y = padded_batch(seed=13)
    plain = copy.deepcopy(model)
    cfg = TrainConfig(epochs=3, batch_size=len(x), checkpoint_every=0, log_every=1, device="cpu",
                      warmup_tokens=0, length_buckets=1)
    with Run.open(tmp_path / "plain", "train", plain.config, cfg, log=lambda s: None) as run:
        r_plain = train(plain, _fixed_batches(x, y), run, Plan(vocab, final_tokens=10_000, trim=False))
    bucketed, losses = _train_steps(model, x, y, tmp_path, "buckets", length_buckets=3)
    assert losses == pytest.approx([h["loss"] for h in r_plain.history], abs=1e-4)
    for (name, a), b in zip(plain.named_parameters(), bucketed.parameters()):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3, msg=lambda m, name=name: f"{name}: {m}")


# ------------------------------------------------------------ device-dependent paths, on CPU


def test_amp_on_cpu_trains_in_bf16(tmp_path) -> None:
    """TrainConfig(amp="on") on CPU runs the forward pass under bf16 autocast (the CUDA switch,
    exercised on CPU): logits come out bf16, the loss is computed in fp32 and stays finite and
    close to the fp32 run's."""
    vocab = Vocab.from_text(TEXT)
    torch.manual_seed(0)
    model = GPT(dataclasses.replace(tiny(), vocab_size=len(vocab)))
    x, y = padded_batch(seed=14)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss = model(x, y)
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    fp32_loss = model(x, y)[1]
    assert abs(float(loss.detach()) - float(fp32_loss.detach())) < 0.05
    _, amp_losses = _train_steps(model, x, y, tmp_path, "amp", amp="on")
    _, fp32_losses = _train_steps(model, x, y, tmp_path, "fp32", amp="off")
    assert all(torch.isfinite(torch.tensor(amp_losses)))
    assert amp_losses == pytest.approx(fp32_losses, abs=0.05)


def test_bad_switch_value_is_one_clear_error(tmp_path) -> None:
    x, y = padded_batch(seed=15)
    with pytest.raises(ValueError, match="on, off, auto"):
        _train_steps(GPT(tiny()), x, y, tmp_path, "bad", amp="yes")


def test_cuda_optimizer_settings_are_fused_and_match_foreach() -> None:
    """make_optimizer picks fused AdamW for CUDA and foreach otherwise. Fused AdamW also runs on
    CPU tensors, so the CUDA choice is exercised here: one step equals the foreach step."""
    torch.manual_seed(0)
    model = GPT(tiny())
    x = torch.randint(2, 30, (4, 12), generator=torch.Generator().manual_seed(16))
    models = []
    for device in ("cuda", "cpu"):
        m = copy.deepcopy(model)
        opt = make_optimizer(m, TrainConfig(), torch.device(device))
        assert opt.defaults["fused"] is (True if device == "cuda" else None)
        assert opt.defaults["foreach"] is (None if device == "cuda" else True)
        for _ in range(2):
            opt.zero_grad()
            m(x, x)[1].backward()
            opt.step()
        models.append(m)
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)  # different arithmetic order
    # weight decay only on matrices (SPEC 5): no 1-d parameter in the decayed group
    groups = make_optimizer(model, TrainConfig(), torch.device("cpu")).param_groups
    assert all(p.ndim >= 2 for p in groups[0]["params"]) and groups[0]["weight_decay"] == 0.1
    assert groups[1]["weight_decay"] == 0.0


def test_seeded_batches_depend_only_on_seed_step_rank() -> None:
    """Batches made on the device with torch.Generator(device=...): the same (seed, step, rank)
    gives the same batch, another step or rank another one."""
    data = SpanCorruptionDataset(TEXT, 16, seed=0)
    a = CorruptionBatches(data, 4, "cpu", seed=3)
    b = CorruptionBatches(data, 4, torch.device("cpu"), seed=3)
    for step in (0, 1, 7):
        for xa, xb in zip(a.batch(step), b.batch(step)):
            assert torch.equal(xa, xb)
    assert not torch.equal(a.batch(0)[0], a.batch(1)[0])
    assert not torch.equal(a.batch(0, rank=0)[0], a.batch(0, rank=1)[0])


def test_every_caller_follows_the_models_path(monkeypatch) -> None:
    """``set_fast`` is model state: generation and attention maps take the fused kernel only
    when the model is on the fast path (the maps need weights, so they never do)."""
    from attnlab.probing.attention_maps import attention_weights
    from attnlab.model.generate import generate

    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr("attnlab.model.attention.base.F.scaled_dot_product_attention",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    torch.manual_seed(0)
    model = GPT(tiny("vanilla", True)).eval()
    fast = generate(model, [[3, 4, 5], [6]], 4)
    assert calls
    calls.clear()
    plain = generate(model.set_fast(False), [[3, 4, 5], [6]], 4)
    assert calls == [] and plain.tokens == fast.tokens
    attention_weights(model, [[3, 4, 5]])
    assert calls == [] and model.fast is False and all(not b.attn.fast for b in model.blocks)


def test_tf32_follows_autocast_on_a_gpu_and_leaves_the_cpu_alone() -> None:
    """--amp off asks for float32: TF32 (a process-wide flag an earlier run may have set) is
    turned off for it, on for bf16 autocast; a CPU run touches neither flag."""
    from attnlab.core.devices import allow_tf32
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        allow_tf32(torch.device("cuda"), amp=True)
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        allow_tf32(torch.device("cuda"), amp=False)
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        allow_tf32(torch.device("cpu"), amp=True)
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
