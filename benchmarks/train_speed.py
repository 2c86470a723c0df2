"""Pretraining throughput: the course's plain path against ours, side by side in one run.

(a) course-style: per-example Python span corruption (``SpanCorruptionDataset[i]``, stacked
    like a DataLoader with default collation), every example at the full padded length 127,
    explicit attention and torch's dropout (``set_fast(False)``), torch's default AdamW (a
    per-parameter loop on CPU);
(b) fast path (``set_fast(True)``): ``corrupt_batch`` on the whole dataset held as tensors
    (``CorruptionBatches``), length-bucketed trimmed micro-batches, query/key/value in one
    product, fused SDPA (on CPU with dropout: one-baddbmm attention and numpy dropout masks,
    attnlab/model/dropout.py), foreach/fused AdamW (``make_optimizer``), the trainer's bf16 autocast /
    torch.compile switches when asked.

Both paths run under the `attnlab` program's CPU process settings (attnlab/core/cpu_settings.py),
applied before any work; ``--no-process-settings`` leaves them out.

(b) is the trainer's own step, ``attnlab.training.trainer.train_step`` (summed CE / target count, clip 1.0,
at a constant learning rate here: no warmup, no decay); (a) takes the same step by hand. Tokens
are counted as the course counts them: ``batch * 127`` per step, padding included (SPEC 5).

Model FLOPs utilisation (MFU) is hardware utilisation over the work each path actually does:
a row of T positions costs T (6 N + 12 L T d) FLOPs, with N the parameters that take part in
matrix products (all but the token/position embedding tables), L layers, d the width: 6 N per
position for forward+backward of the weight products and 12 L T d for the score and value
products q k^T and a v over the full T x T square both paths compute (the PaLM appendix B
estimate). T is 127 for the course-style path and each micro-batch's trimmed length for the
fast path. MFU = those FLOPs / step time / the peak, a large fp32 matmul measured in the same
run. (Counting padded positions as work done would put the fast path above 100%.)

Run: .venv/bin/python benchmarks/train_speed.py [--steps 4] [--model spec|quick] [--device auto]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, matmul_peak, report, resolve_device, table, timed  # noqa: E402

from attnlab.core import cpu_settings  # noqa: E402
from attnlab.data.batching import Batches, CorruptionBatches  # noqa: E402
from attnlab.config.settings import ModelConfig, TrainConfig, get_preset  # noqa: E402
from attnlab.data.datasets import SpanCorruptionDataset, read_text  # noqa: E402
from attnlab.core.devices import switch  # noqa: E402
from attnlab.model.gpt import GPT, lm_loss  # noqa: E402
from attnlab.training.trainer import Stepper, make_optimizer, prepare_step, train_step  # noqa: E402

COURSE_TOKENS_PER_S = 4_400  # the course code on this 2-core CPU (issue 4)
TARGET_RATIO = 3.0


def matmul_parameters(model: GPT) -> int:
    """Parameters that take part in matrix products: all but the embedding tables."""
    n = model.num_parameters() - model.tok_emb.weight.numel()
    if isinstance(model.pos_emb, torch.nn.Parameter):
        n -= model.pos_emb.numel()
    return n


def row_flops(model: GPT, rows: int, T: int) -> float:
    """Training FLOPs of ``rows`` rows of T positions: rows T (6 N + 12 L T d) (module docstring)."""
    c = model.config
    return rows * T * (6 * matmul_parameters(model) + 12 * c.n_layer * T * c.n_embd)


def course_step(model: GPT, opt, dataset: SpanCorruptionDataset, order: torch.Tensor, step: int,
                batch_size: int) -> int:
    """One step of the course's loop; returns the counted tokens (every position is run)."""
    idx = order[step * batch_size : (step + 1) * batch_size].tolist()
    items = [dataset[i] for i in idx]  # per-example Python corruption (SPEC 3 reference)
    x = torch.stack([a for a, _ in items])  # (B, 127): default_collate
    y = torch.stack([b for _, b in items])
    logits, _ = model.run(x)  # the model is set_fast(False)
    loss = lm_loss(logits, y)
    model.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return y.numel()


class StepStats(NamedTuple):
    counted: int  # tokens as the course counts them
    positions: int  # positions the model actually ran
    flops: float  # their training FLOPs (row_flops)
    loss: Tensor | None = None  # the step's loss (fast path; a tensor: no device sync)


def fast_stepper(model: GPT, device: torch.device, buckets: int, amp: str = "off", compile: str = "off") -> Stepper:
    """The trainer's step for ``model`` at a constant learning rate of 6e-3 (no warmup, and a
    decay horizon no benchmark reaches), ``buckets`` length buckets, the fast path."""
    config = TrainConfig(length_buckets=buckets, amp=amp, compile=compile, warmup_tokens=0, final_tokens=2**62)
    return prepare_step(model, make_optimizer(model, config, device), config, final_tokens=config.final_tokens)


def fast_step(stepper: Stepper, batches: Batches, step: int) -> StepStats:
    """One step exactly as the trainer takes it (attnlab.training.trainer.train_step)."""
    out = train_step(stepper, batches, step, tokens=0)
    flops = sum(row_flops(stepper.model, *shape) for shape in out.shapes)
    positions = sum(rows * width for rows, width in out.shapes)
    return StepStats(out.batch_tokens, positions, flops, out.loss_sum / out.n_targets)


def build_paths(args: argparse.Namespace, dataset: SpanCorruptionDataset, config: ModelConfig,
                device: torch.device) -> tuple[dict[str, dict], GPT]:
    """The paths to time, each a step function of the step number; and the fast path's model."""
    T = config.block_size - 1
    paths: dict[str, dict] = {}
    if not args.skip_course:  # (a) the course's path
        torch.manual_seed(0)
        model = GPT(config).to(device).train().set_fast(False)
        opt = torch.optim.AdamW(model.parameters(), lr=6e-3, betas=(0.9, 0.95), weight_decay=0.1)
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))
        order = order.repeat(1 + (args.steps + 1) * args.batch_size // len(dataset))
        flops = row_flops(model, args.batch_size, T)

        def course(s, model=model, opt=opt, order=order, flops=flops):
            counted = course_step(model, opt, dataset, order, s, args.batch_size)
            return StepStats(counted, counted, flops)

        paths["course"] = dict(step=course)
    torch.manual_seed(0)  # (b) the fast path
    model = GPT(dataclasses.replace(config)).to(device).train()
    stepper = fast_stepper(model, device, args.buckets, args.amp, args.compile)
    batches = CorruptionBatches(dataset, args.batch_size, device, seed=0)
    paths["fast"] = dict(step=lambda s: fast_step(stepper, batches, s))
    return paths, model


def time_alternating(paths: dict[str, dict], steps: int, device: torch.device, compiled: bool) -> None:
    """One warm-up step each, then ``steps`` timed steps, the paths alternating (a, b, a, b,
    ...): on a shared machine whose speed drifts, each ratio then compares steps taken under
    the same conditions. Each path gathers its times, counted and processed tokens, FLOPs."""
    for name, path in paths.items():  # warm-up (and compilation)
        t0, _ = timed(lambda: path["step"](0), device)
        if name == "fast" and compiled:
            print(f"torch.compile + first step: {t0:.1f} s")
        path.update(times=[], counted=0, processed=0, flops=0.0)
    for s in tqdm(range(1, steps + 1), desc="steps (both paths)", leave=False):
        for path in paths.values():
            t, stats = timed(lambda: path["step"](s), device)
            path["times"].append(t)
            path["counted"] += stats.counted
            path["processed"] += stats.positions
            path["flops"] += stats.flops


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--steps", type=int, default=4, help="timed optimiser steps per path (after 1 warm-up step)")
    ap.add_argument("--batch-size", type=int, default=128, help="examples per step (the course: 128)")
    ap.add_argument("--model", choices=["spec", "quick"], default="spec", help="model shape preset")
    ap.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    ap.add_argument("--buckets", type=int, default=4, help="length buckets of the fast path")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = torch's default)")
    ap.add_argument("--amp", choices=["on", "off", "auto"], default="auto", help="bf16 autocast for the fast path (auto: on for CUDA)")
    ap.add_argument("--compile", choices=["on", "off", "auto"], default="auto", help="torch.compile the fast path's model (auto: on for CUDA)")
    ap.add_argument("--skip-course", action="store_true", help="time the fast path only")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    ap.add_argument("--no-process-settings", action="store_true",
                    help="leave out the attnlab program's CPU settings (flush denormals, keep freed memory)")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1:
        ap.error("--steps and --batch-size must be at least 1")
    # Before any parallel work, as the program does: worker threads inherit flush-to-zero.
    settings = {} if args.no_process_settings else cpu_settings.apply()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    amp, compile_ = switch(args.amp, device), switch(args.compile, device)

    corpus = DATA / "wiki.txt"
    print(f"train_speed: {args.model} model, batch {args.batch_size}, {args.steps} timed steps per path "
          f"on {device} ({torch.get_num_threads()} threads); corpus {corpus}")
    dataset = SpanCorruptionDataset(read_text(corpus), 128, seed=0)
    shape = get_preset(args.model).model
    config = ModelConfig(vocab_size=dataset.vocab_size, **shape)  # dropout 0.1 as trained
    T = config.block_size - 1
    peak = matmul_peak(device)
    print(f"measured fp32 matmul peak: {peak / 1e9:,.1f} GFLOP/s")

    paths, model = build_paths(args, dataset, config, device)
    time_alternating(paths, args.steps, device, compile_)

    # On CPU with dropout the fast path computes attention explicitly (attnlab/model/dropout.py).
    attention = ("one-baddbmm attention, numpy dropout masks" if device.type == "cpu" and config.dropout
                 else "fused SDPA")
    labels = {
        "course": "(a) course-style: per-example corruption, padded 127, explicit attention, AdamW loop",
        "fast": (f"(b) fast: corrupt_batch, {args.buckets} length buckets, {attention}, "
                 f"{'fused' if device.type == 'cuda' else 'foreach'} AdamW"
                 + (", bf16 autocast" if amp else "") + (", torch.compile" if compile_ else "")),
    }
    rows, results = [], {}
    for name, path in paths.items():
        times = path["times"]
        step_s = statistics.median(times)
        tps = args.batch_size * T / step_s
        results[name] = tps
        rows.append([labels[name], f"{tps:,.0f}", f"{args.batch_size * T / min(times):,.0f}",
                     f"{tps * path['processed'] / path['counted']:,.0f}", f"{step_s:.2f}",
                     f"{100 * path['flops'] / sum(times) / peak:.1f}%"])
    processed, counted = paths["fast"]["processed"], paths["fast"]["counted"]

    headers = ["path", "counted tokens/s (median step)", "best step", "positions run/s", "s/step (median)", "MFU"]
    out = table(headers, rows)
    notes = [
        "",
        f"- model: {args.model} ({model.num_parameters():,} parameters; {config.n_layer} layers, "
        f"{config.n_head} heads, width {config.n_embd}, block {config.block_size}, dropout {config.dropout}), "
        f"batch {args.batch_size}, {args.steps} timed steps per path after 1 warm-up step, the two paths' "
        "steps alternating; tokens/s from the median step time (robust to a busy machine), 'best step' "
        "from the fastest",
        f"- counted tokens = batch x {T} per step (the course's count, padding included); positions run = "
        f"what the model actually processed after trimming ({100 * processed / max(counted, 1):.0f}% of counted)",
        f"- MFU: FLOPs of the positions each path computes, T (6 N + 12 L T d) per row of T (N = "
        f"{matmul_parameters(model):,} non-embedding parameters; T = {T} for (a), each micro-batch's "
        f"trimmed length for (b)), over the step time and the peak = measured fp32 2048^3 matmul = "
        f"{peak / 1e9:,.1f} GFLOP/s",
    ]
    if settings:
        notes.append(f"- process settings of the `attnlab` program, for both paths alike (attnlab/core/cpu_settings.py): "
                     + ", ".join(f"{k.replace('_', ' ')}: {'on' if v else 'unavailable'}" for k, v in settings.items()))
    if "course" in results:
        ratio = results["fast"] / results["course"]
        notes.append(f"- fast / course-style in this run: **{ratio:.2f}x**")
    target = TARGET_RATIO * COURSE_TOKENS_PER_S
    notes.append(f"- target: >= {TARGET_RATIO:g} x the course code's {COURSE_TOKENS_PER_S:,} tokens/s = "
                 f"{target:,.0f} counted tokens/s; fast path: {results['fast']:,.0f} "
                 f"({'met' if results['fast'] >= target else 'not met'})")
    text = out + "\n" + "\n".join(notes)
    report("train_speed", text, write=not args.no_write, device=device, title="Training speed (benchmarks/train_speed.py)")


if __name__ == "__main__":
    main()
