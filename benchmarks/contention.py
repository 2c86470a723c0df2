"""Training throughput when another process takes one of the cores.

On a 2-core laptop a second busy process (a browser tab, a test run, another training) is
normal. PyTorch's CPU kernels run on an OpenMP team with one thread per core; between
parallel regions GNU OpenMP's threads spin-wait for work (OMP_WAIT_POLICY unset: spin for a
while, then sleep), and at every region's barrier the team waits for its slowest thread. With
one core taken, one thread of two shares its core with the other process, so each of the
thousands of small regions in a training step waits for a time slice of the scheduler
(milliseconds), and throughput collapses.

Each setting below is one training process (``--worker``: the trainer's own step,
attnlab.training.trainer.train_step, on the preset's model and the lm or span batches, at a constant
learning rate) timed alone and next to a process that keeps one core busy (``--hog``: a pure
Python loop). Settings:

- ``default``: what `attnlab` did before this benchmark: torch's default threads (one per core);
- ``1 thread``: torch.set_num_threads(1);
- ``passive``: one thread per core with OMP_WAIT_POLICY=PASSIVE (threads sleep at once
  instead of spinning when they have no work);
- ``adaptive``: what `attnlab` does now (attnlab/core/cpu_settings.py ``threads_for_load``), one
  thread per idle core, chosen at start and re-checked every few seconds.

The "kept" column is the throughput with one core busy over the throughput of one thread on
an idle machine; issue 12's target is at least 0.5 for the default.

Run: .venv/bin/python benchmarks/contention.py [--seconds 20] [--repeats 3] [--models quick,spec] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, report, table  # noqa: E402

SETTINGS = {  # name: (environment, worker flags)
    "default": ({}, []),
    "1-thread": ({}, ["--threads", "1"]),
    "passive": ({"OMP_WAIT_POLICY": "PASSIVE"}, []),
    "adaptive": ({}, ["--adaptive"]),
}


def worker(args: argparse.Namespace) -> None:
    """Train for ``args.seconds`` after a warm-up; print one JSON line with tokens/s."""
    import torch

    from attnlab.core import cpu_settings
    from attnlab.data.batching import CorruptionBatches
    from attnlab.config.settings import TrainConfig, get_preset
    from attnlab.data.datasets import SpanCorruptionDataset, read_text
    from attnlab.model.gpt import GPT
    from attnlab.training.trainer import make_optimizer, prepare_step, train_step

    cpu_settings.apply()
    if args.threads:
        torch.set_num_threads(args.threads)
    preset = get_preset(args.model)
    from attnlab.config.settings import ModelConfig

    text = read_text(REPO / "data" / "wiki.txt")
    config = ModelConfig(**preset.model)
    dataset = SpanCorruptionDataset(text, config.block_size)
    config = ModelConfig(**{**preset.model, "vocab_size": dataset.vocab_size})
    torch.manual_seed(0)
    model = GPT(config).train()
    train_config = TrainConfig(warmup_tokens=0, final_tokens=2**62, batch_size=preset.pretrain.batch_size)
    device = torch.device("cpu")
    stepper = prepare_step(model, make_optimizer(model, train_config, device), train_config,
                           final_tokens=train_config.final_tokens)
    batches = CorruptionBatches(dataset, train_config.batch_size, device, seed=0)
    adapt = cpu_settings.AdaptiveThreads() if args.adaptive else None
    for step in range(2):  # warm-up
        train_step(stepper, batches, step, 0)
    tokens, step, start = 0, 2, time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        tokens += train_step(stepper, batches, step, 0).batch_tokens
        step += 1
        if adapt is not None:
            adapt.check()
    seconds = time.perf_counter() - start
    print(json.dumps({"tokens_per_s": tokens / seconds, "steps": step - 2, "threads": torch.get_num_threads()}))


def hog() -> None:
    """Keep one core busy until killed."""
    while True:
        pass


def measure(model: str, setting: str, seconds: float, busy: bool) -> dict:
    env_extra, flags = SETTINGS[setting]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    env.update(env_extra)
    hog_process = subprocess.Popen([sys.executable, __file__, "--hog"]) if busy else None
    try:
        if busy:
            time.sleep(1.0)  # let the hog take its core
        out = subprocess.run([sys.executable, __file__, "--worker", "--model", model, "--seconds", str(seconds),
                              *flags], env=env, capture_output=True, text=True, check=True).stdout
    finally:
        if hog_process is not None:
            hog_process.kill()
            hog_process.wait()
    return json.loads(out.strip().splitlines()[-1])


def measured(model: str, settings: list[str], seconds: float, repeats: int) -> dict:
    """Each (setting, busy) ``repeats`` times, round-robin (a drifting machine then affects all
    alike); the run with the median tokens/s of each (of an even count, the higher)."""
    runs: dict[tuple[str, bool], list[dict]] = {}
    for _ in range(repeats):
        for s in settings:
            for busy in (False, True):
                runs.setdefault((s, busy), []).append(measure(model, s, seconds, busy))
    return {key: sorted(r, key=lambda x: x["tokens_per_s"])[len(r) // 2] for key, r in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="quick,spec", help="presets whose models to train")
    parser.add_argument("--seconds", type=float, default=20.0, help="timed training per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="measurements of each; the median is shown")
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated settings to measure")
    parser.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--hog", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", default="quick", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--adaptive", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hog:
        return hog()
    if args.worker:
        return worker(args)
    settings = [s for s in SETTINGS if s in args.settings.split(",")] or list(SETTINGS)
    rows = []
    for model in args.models.split(","):
        results = measured(model, settings, args.seconds, args.repeats)
        one_core = results.get(("1-thread", False), {}).get("tokens_per_s")
        for s in settings:
            alone, busy = results[(s, False)], results[(s, True)]
            kept = f"{busy['tokens_per_s'] / one_core:.2f}" if one_core else "-"
            rows.append([model, s, f"{alone['tokens_per_s']:,.0f}", f"{busy['tokens_per_s']:,.0f}",
                         f"{busy['tokens_per_s'] / alone['tokens_per_s']:.2f}", kept,
                         f"{alone['threads']}/{busy['threads']}"])
    text = table(["model", "setting", "tokens/s alone", "tokens/s, one core busy", "busy/alone",
                  "kept (busy / 1 thread alone)", "threads alone/busy"], rows)
    text += (f"\n\nEach figure: the median of {args.repeats} runs (round-robin; of an even count, the higher) of {args.seconds:.0f} s of training (trainer's step, span batches, the preset's "
             f"batch size) after 2 warm-up steps, one process at a time; 'one core busy': a pure-Python "
             f"loop in another process. Target (issue 12): kept >= 0.5.")
    report("contention", text, write=args.write, title="Training next to a busy core")


if __name__ == "__main__":
    main()
