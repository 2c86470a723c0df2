"""Muon's Newton-Schulz precision (attnlab/training/muon.py): torch's own step where bfloat16 is
fast, the same algorithm in float32 where the CPU would emulate bfloat16."""

from __future__ import annotations

import torch

from attnlab.core import devices
from attnlab.training import muon as muon_module
from attnlab.training.muon import Muon
from attnlab.training.trainer import make_optimizer
from attnlab.config.settings import TrainConfig
from attnlab.model.gpt import GPT


def _weights(seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(16, 48, generator=g), torch.randn(48, 16, generator=g), torch.randn(24, 24, generator=g)]


def _steps(optimizer_of, seed: int = 0, steps: int = 3) -> list[torch.Tensor]:
    params = [torch.nn.Parameter(w.clone()) for w in _weights(seed)]
    opt = optimizer_of(params)
    g = torch.Generator().manual_seed(seed + 1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
    return [p.detach() for p in params]


KW = dict(lr=0.02, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")


def test_the_bfloat16_path_is_torchs_own_step_to_the_bit():
    ours = _steps(lambda ps: Muon(ps, ns_dtype=torch.bfloat16, **KW))
    torchs = _steps(lambda ps: torch.optim.Muon(ps, **KW))
    assert all(torch.equal(a, b) for a, b in zip(ours, torchs))


def test_the_float32_path_is_the_same_algorithm_rounded_less():
    ours = _steps(lambda ps: Muon(ps, ns_dtype=torch.float32, **KW))
    torchs = _steps(lambda ps: torch.optim.Muon(ps, **KW))
    exact = _steps(lambda ps: Muon(ps, ns_dtype=torch.float64, **KW))
    start = _weights()
    for o, t, e, w in zip(ours, torchs, exact, start):
        moved = (e - w).norm()
        assert (o - e).norm() < 1e-4 * moved  # float32: next to the float64 iteration
        assert (t - e).norm() < 0.05 * moved  # bfloat16 (torch): the same steps, rounded more
        assert (o - e).norm() < (t - e).norm()
    for nesterov in (True, False):  # the momentum buffer is the only state, as torch's
        params = [torch.nn.Parameter(w.clone()) for w in _weights()]
        opt = Muon(params, ns_dtype=torch.float32, nesterov=nesterov, **KW)
        for p in params:
            p.grad = torch.ones_like(p)
        opt.step()
        ref = torch.optim.Muon([torch.nn.Parameter(w.clone()) for w in _weights()], nesterov=nesterov, **KW)
        assert opt.state_dict()["param_groups"][0].keys() == ref.state_dict()["param_groups"][0].keys()
        assert all(torch.equal(s["momentum_buffer"], torch.full_like(p, 0.05)) for p, s in
                   ((p, opt.state[p]) for p in params))


def test_orthogonalise_never_changes_its_input():
    g = torch.randn(8, 20)
    kept = g.clone()
    muon_module.orthogonalise(g, (3.4445, -4.7750, 2.0315), 5, 1e-7, torch.float32)
    assert torch.equal(g, kept)


def test_the_precision_follows_the_cpus_bfloat16_support(monkeypatch, tiny_config):
    model = GPT(tiny_config)
    for flags, dtype in [({"avx2", "fma"}, torch.float32), ({"avx512f", "avx512_bf16"}, torch.bfloat16),
                         ({"amx_bf16", "amx_tile"}, torch.bfloat16)]:
        monkeypatch.setattr(devices, "cpu_flags", lambda flags=flags: flags)
        _, muon = make_optimizer(model, TrainConfig(optimizer="muon"), torch.device("cpu")).optimizers
        assert isinstance(muon, torch.optim.Muon) and muon.ns_dtype == dtype, flags
    assert devices.fast_bfloat16(torch.device("cuda"))


def test_cpu_flags_reads_this_machines_cpuinfo():
    flags = devices.cpu_flags()
    try:
        text = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:
        assert flags == set()
        return
    line = next(l for l in text.splitlines() if l.startswith("flags"))
    assert flags == set(line.split(":", 1)[1].split()) and flags
