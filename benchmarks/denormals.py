"""What flushing denormals is worth as pretraining goes on (CPU).

As the model learns, attention sharpens and softmax returns probabilities below 1.2e-38
(denormal numbers), which x86 cores process many times slower. The setting is per thread and
inherited by threads when they start, so it can only be compared across processes: this script
runs the same fast-path pretraining (spec model, batch 128, lr 6e-3, seed 0) in two child
processes, one with the `attnlab` program's flush-to-zero and one without (both keep freed
memory), one after the other, and compares their step times early and later in training.

Run: .venv/bin/python benchmarks/denormals.py [--steps 70] [--window 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, report, table  # noqa: E402


def child(steps: int, flush: bool) -> None:
    import torch

    from attnlab.core import cpu_settings
    from attnlab.data.batching import CorruptionBatches
    from attnlab.config.settings import ModelConfig, get_preset
    from attnlab.data.datasets import SpanCorruptionDataset, read_text
    from attnlab.model.gpt import GPT
    from train_speed import fast_step, fast_stepper

    if flush:
        cpu_settings.flush_denormals()  # before any parallel work, as the program does
    cpu_settings.keep_freed_memory()
    cpu = torch.device("cpu")
    dataset = SpanCorruptionDataset(read_text(DATA / "wiki.txt"), 128, seed=0)
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=dataset.vocab_size, **get_preset("spec").model)).train()
    stepper = fast_stepper(model, cpu, buckets=8)
    batches = CorruptionBatches(dataset, 128, cpu, seed=0)
    times, losses = [], []
    for step in range(steps):
        start = time.perf_counter()
        stats = fast_step(stepper, batches, step)
        times.append(time.perf_counter() - start)
        losses.append(float(stats.loss))
    # Denormal attention probabilities at the end, on one batch (0 when they are flushed).
    weights = model.run(batches.batch(steps)[0][:16], need_weights=True)[1]
    tiny = sum(int(((w > 0) & (w < torch.finfo(torch.float32).tiny)).sum()) for w in weights)
    print(json.dumps({"times": times, "losses": losses, "denormal_weights": tiny}))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=70, help="training steps per process")
    ap.add_argument("--window", type=int, default=10, help="steps per reported window")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    ap.add_argument("--child", choices=["flush", "keep"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.steps, args.child == "flush")
        return
    if args.steps < 2 * args.window or args.window < 1:
        ap.error("--steps must be at least twice --window")
    runs = {}
    for mode in ("keep", "flush"):
        print(f"denormals: {args.steps} spec-model steps, denormals {'flushed' if mode == 'flush' else 'kept'}...",
              flush=True)
        out = subprocess.run([sys.executable, __file__, "--child", mode, "--steps", str(args.steps)],
                             capture_output=True, text=True, check=True)
        runs[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    windows = [(0, args.window), (args.steps // 2 - args.window // 2, args.steps // 2 + (args.window + 1) // 2),
               (args.steps - args.window, args.steps)]
    rows = []
    for lo, hi in windows:
        keep = statistics.median(runs["keep"]["times"][lo:hi])
        flush = statistics.median(runs["flush"]["times"][lo:hi])
        rows.append([f"{lo + 1}-{hi}", f"{statistics.mean(runs['flush']['losses'][lo:hi]):.3f}",
                     f"{keep:.2f}", f"{flush:.2f}", f"{keep / flush:.2f}x"])
    text = table(["steps", "loss (flushed run)", "s/step, denormals kept", "s/step, flushed", "kept / flushed"], rows)
    text += "\n\n" + "\n".join([
        f"- spec model, batch 128, 8 length buckets, the fast path, lr 6e-3, seed 0; median step time per window; "
        f"the two runs are separate processes, one after the other (flush-to-zero is inherited by threads "
        f"when they start, so it cannot be switched within one process)",
        f"- denormal attention probabilities on one batch of 16 after the last step: "
        f"{runs['keep']['denormal_weights']:,} with denormals kept, {runs['flush']['denormal_weights']:,} flushed",
        f"- final-window losses: {statistics.mean(runs['keep']['losses'][-args.window:]):.4f} kept, "
        f"{statistics.mean(runs['flush']['losses'][-args.window:]):.4f} flushed",
    ])
    report("denormals", text, write=not args.no_write, title="Flushing denormals during pretraining (benchmarks/denormals.py)")


if __name__ == "__main__":
    main()
