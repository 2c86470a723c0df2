"""Muon's Newton-Schulz precision on this CPU: one training step of a knowledge preset's model
(forward, backward, AdamW + Muon) with the iteration in bfloat16 (torch.optim.Muon's own) and
in float32 (attnlab/training/muon.py), the two alternating step by step in one run, with the
bfloat16 and float32 matmul peaks of this machine beside them. The trainer picks bfloat16 only
where the CPU multiplies it in hardware (AVX512-BF16 or AMX; attnlab.core.devices.fast_bfloat16).

Run: .venv/bin/python benchmarks/muon_precision.py [--preset cpu15] [--steps 10] [--write]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_description, matmul_peak, report, table, timed  # noqa: E402

from attnlab.core import cpu_settings  # noqa: E402
from attnlab.core.devices import fast_bfloat16  # noqa: E402
from attnlab.config.settings import ModelConfig, get_preset  # noqa: E402
from attnlab.model.gpt import GPT, lm_loss  # noqa: E402
from attnlab.training.trainer import make_optimizer  # noqa: E402


def step_function(preset: str, dtype: torch.dtype, seed: int = 0):
    """One training step (batch and learning rate of the preset) with Muon's iteration in ``dtype``."""
    p = get_preset(preset)
    config = ModelConfig(**p.model)
    torch.manual_seed(seed)
    model = GPT(config)
    opt = make_optimizer(model, p.pretrain, torch.device("cpu"))
    opt.optimizers[1].ns_dtype = dtype
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(1, config.vocab_size, (p.pretrain.batch_size, config.block_size), generator=g)

    def step():
        loss = lm_loss(model(x)[0], x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cpu15")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per precision (after one warm-up each)")
    parser.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = parser.parse_args(argv)
    cpu_settings.apply()
    cpu = torch.device("cpu")
    paths = {"bfloat16 (torch.optim.Muon)": step_function(args.preset, torch.bfloat16),
             "float32 (attnlab's Muon)": step_function(args.preset, torch.float32)}
    times: dict[str, list[float]] = {name: [] for name in paths}
    for fn in paths.values():
        fn()  # warm-up
    for _ in range(args.steps):  # alternating, so a busy moment hits both
        for name, fn in paths.items():
            times[name].append(timed(fn, cpu)[0])
    medians = {name: statistics.median(t) for name, t in times.items()}
    bf16, fp32 = medians.values()
    rows = [[name, f"{m:.3f}", f"{min(times[name]):.3f}"] for name, m in medians.items()]
    peaks = {d: matmul_peak(cpu, n=1024, seconds=1.0, dtype=d) / 1e9 for d in (torch.float32, torch.bfloat16)}
    text = "\n".join([
        f"- command: `.venv/bin/python benchmarks/muon_precision.py --preset {args.preset} --steps {args.steps}`",
        f"- machine: {machine_description(cpu)}",
        f"- matmul peak (1024^3): float32 {peaks[torch.float32]:.1f} GFLOP/s, bfloat16 {peaks[torch.bfloat16]:.1f} GFLOP/s; "
        f"hardware bfloat16 (AVX512-BF16 or AMX): {'yes' if fast_bfloat16(cpu) else 'no'}, so the trainer uses "
        f"{'bfloat16' if fast_bfloat16(cpu) else 'float32'}",
        "",
        table(["Newton-Schulz precision", "s/step (median)", "best step"], rows),
        "",
        f"- model and batch: the `{args.preset}` preset's (batch {get_preset(args.preset).pretrain.batch_size}, "
        f"full-length rows); {args.steps} steps each, alternating, after one warm-up",
        f"- float32 / bfloat16 step time: **{fp32 / bf16:.2f}x** (below 1: float32 is faster here)",
    ])
    report("muon_precision", text, write=args.write, title="Muon's Newton-Schulz precision (benchmarks/muon_precision.py)")


if __name__ == "__main__":
    main()
