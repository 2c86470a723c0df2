"""Span-corruption throughput (SPEC 3): examples per second made by the per-example Python
reference (``SpanCorruptionDataset[i]``, stacked like a DataLoader batch) against the batched
tensor version (``corrupt_batch`` on the whole corpus held as one tensor).

Run: .venv/bin/python benchmarks/data_speed.py [--examples 4096] [--batch-size 128] [--device auto]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, report, resolve_device, table, timed  # noqa: E402

from attnlab.data.datasets import SpanCorruptionDataset, corrupt_batch, read_text  # noqa: E402


def reference(dataset: SpanCorruptionDataset, order: list[int], batch_size: int) -> int:
    """Per-example corruption, batches stacked as default_collate would; returns examples made."""
    for i in range(0, len(order), batch_size):
        items = [dataset[j] for j in order[i : i + batch_size]]
        torch.stack([x for x, _ in items]), torch.stack([y for _, y in items])
    return len(order)


def batched(docs, lengths, order: torch.Tensor, batch_size: int, block: int, g: torch.Generator) -> int:
    for i in range(0, len(order), batch_size):
        corrupt_batch(docs, lengths, order[i : i + batch_size], block, g)
    return len(order)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--examples", type=int, default=4096, help="examples made by each way")
    ap.add_argument("--batch-size", type=int, default=128, help="examples per batch")
    ap.add_argument("--block-size", type=int, default=128, help="span-corruption block size")
    ap.add_argument("--device", default="auto", help="device of the batched version: cpu, cuda, cuda:N or auto")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = ap.parse_args(argv)
    device = resolve_device(args.device)
    corpus = DATA / "wiki.txt"
    dataset = SpanCorruptionDataset(read_text(corpus), args.block_size, seed=0)
    print(f"data_speed: {args.examples:,} span-corrupted examples (block {args.block_size}, batch "
          f"{args.batch_size}) from {corpus} ({len(dataset):,} documents); batched version on {device}")
    g_order = torch.Generator().manual_seed(0)
    order = torch.randint(0, len(dataset), (args.examples,), generator=g_order)
    docs, lengths = (t.to(device) for t in dataset.doc_tensor())
    g = torch.Generator(device=device).manual_seed(0)
    batched(docs, lengths, order[: args.batch_size].to(device), args.batch_size, args.block_size, g)  # warm-up

    t_ref, n = timed(lambda: reference(dataset, order.tolist(), args.batch_size), torch.device("cpu"))
    t_bat, _ = timed(lambda: batched(docs, lengths, order.to(device), args.batch_size, args.block_size, g), device)
    rows = [
        ["per-example reference (SpanCorruptionDataset[i] + stack)", "cpu", f"{t_ref:.3f}", f"{n / t_ref:,.0f}"],
        [f"corrupt_batch (tensor ops, batch {args.batch_size})", str(device), f"{t_bat:.3f}", f"{n / t_bat:,.0f}"],
    ]
    text = table(["way", "device", "seconds", "examples/s"], rows)
    text += (f"\n\n- {n:,} examples each; corrupt_batch is {t_ref / t_bat:.0f}x faster. One training step of "
             f"the spec run (batch 128) needs 128 examples: {128 / (n / t_ref) * 1e3:.1f} ms by the reference, "
             f"{128 / (n / t_bat) * 1e3:.2f} ms batched")
    report("data_speed", text, write=not args.no_write, device=device, title="Span-corruption speed (benchmarks/data_speed.py)")


if __name__ == "__main__":
    main()
