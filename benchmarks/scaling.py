"""Training throughput with 1 vs N local processes (DistributedDataParallel, gloo on CPU).

    python benchmarks/scaling.py                      # quick-preset model, 30 steps, 1 and 2 processes
    python benchmarks/scaling.py --steps 10 --preset tiny

For each process count it starts `torchrun --nproc-per-node N` on this very file (worker mode),
pretrains for a fixed number of steps at the same *global* batch, and reads the trainer's own
token count and loop time from rank 0. Each process gets ``--threads`` torch threads (default
1, one core each, the CPU stand-in for "one GPU per process"), so N processes use N times the
compute of one: the speed-up shows how well data parallelism scales out. Results go into docs/benchmarks.md between the scaling markers; the rest of
that file is left as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def worker(args: argparse.Namespace) -> None:
    """Runs under torchrun: one data-parallel training run; rank 0 prints a JSON line."""
    import dataclasses

    import torch

    from attnlab.core import distributed
    from attnlab.config.settings import ModelConfig, get_preset
    from attnlab.training.pipeline import pretrain

    torch.set_num_threads(args.threads)
    env, device = distributed.setup("cpu")
    preset = get_preset(args.preset)
    train = dataclasses.replace(preset.pretrain, batch_size=args.batch_size, max_steps=args.steps,
                                checkpoint_every=0, log_every=10**9, device=device, seed=0)
    try:
        _, _, result = pretrain(ModelConfig(**preset.model), train, corpus=args.corpus,
                                run_dir=args.run_dir, log=lambda _m: None)
    finally:
        distributed.teardown()
    if env.is_main:
        print("RESULT " + json.dumps({"processes": env.world_size, "steps": result.steps,
                                      "tokens": result.tokens, "seconds": result.seconds,
                                      "tokens_per_s": result.tokens_per_second}), flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(n: int, args: argparse.Namespace) -> dict:
    threads = args.threads
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(n),
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}",
               __file__, "--worker", "--threads", str(threads), "--preset", args.preset,
               "--steps", str(args.steps), "--batch-size", str(args.batch_size),
               "--corpus", str(args.corpus), "--run-dir", tmp]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
        wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"scaling: the {n}-process run failed:\n{proc.stderr[-2000:]}")
    line = next(s for s in proc.stdout.splitlines() if s.startswith("RESULT "))
    return dict(json.loads(line[len("RESULT "):]), threads=threads, wall_s=wall)


def section(rows: list[dict], args: argparse.Namespace, cores: int) -> str:
    base = rows[0]["tokens_per_s"]
    lines = [
        "## Scaling: data-parallel training on several processes",
        "",
        f"`python benchmarks/scaling.py --preset {args.preset} --steps {args.steps} "
        f"--batch-size {args.batch_size}` on {platform.processor() or platform.machine()}, "
        f"{cores} CPU cores, torch gloo backend ({time.strftime('%Y-%m-%d')}). Global batch "
        f"{args.batch_size} in every row (each process takes 1/N of it); {args.threads} torch "
        "thread(s) per process, so N processes use N cores. Tokens/s counts every target position of the global batch, as "
        "the learning-rate schedule does, over the training loop only (start-up excluded).",
        "",
        "| processes | threads each | steps | tokens/s | speed-up | loop time | wall time incl. start-up |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(f"| {r['processes']} | {r['threads']} | {r['steps']} | {r['tokens_per_s']:,.0f} | "
                     f"{r['tokens_per_s'] / base:.2f}x | {r['seconds']:.1f} s | {r['wall_s']:.1f} s |")
    lines += [
        "",
        "The gap to an N-fold speed-up is the gradient all-reduce (gloo, through shared memory "
        "and loopback TCP), the per-step synchronisation, and smaller per-process matrix products. "
        "The machine's cores are shared with other work, so single runs are noisy. Multi-GPU and multi-node runs (NCCL) are untested here: no GPU was available in this "
        "session.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--preset", default="quick", help="model shape and pretraining settings")
    p.add_argument("--steps", type=int, default=30, help="optimiser steps per run")
    p.add_argument("--batch-size", type=int, default=32, help="global batch size (the same for every run)")
    p.add_argument("--processes", default="1,2", help="comma-separated process counts to compare")
    p.add_argument("--corpus", type=Path, default=REPO / "data" / "wiki.txt", help="pretraining corpus")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks.md", help="file that gets the Scaling section")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--run-dir", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    cores = os.cpu_count() or 1
    counts = [int(c) for c in args.processes.split(",")]
    rows = []
    from tqdm.auto import tqdm

    for n in tqdm(counts, desc="scaling runs"):
        print(f"scaling: {n} process(es), {args.steps} steps of global batch {args.batch_size} "
              f"({args.preset} model)", flush=True)
        rows.append(launch(n, args))
        print(f"  {rows[-1]['tokens_per_s']:,.0f} tokens/s", flush=True)
    text = section(rows, args, cores)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import replace_section

    replace_section("scaling", text, path=Path(args.out))
    print(text)
    print(f"scaling: wrote the Scaling section of {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
