"""Batches for the trainer: whole-dataset tensors on the training device, indexed per step.

A batch depends only on (seed, step, rank): the epoch's order comes from a generator seeded
with (seed, epoch) and the span corruption from one seeded with (seed, step, rank). Under
several processes, rank r of W takes the r-th contiguous share of the step's global batch
(``shard_rows``), so the union over ranks is exactly the global batch. So a run
resumed at step s sees exactly the batches an uninterrupted run would, with no data-loader state
to save, and no host-to-device copy or per-example Python work happens per step.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .datasets import NameDataset, SpanCorruptionDataset, corrupt_batch, trim_batch
from .vocab import PAD_ID


def _seeded(device: torch.device, *parts: int) -> torch.Generator:
    g = torch.Generator(device=device)
    seed = 0
    for p in parts:  # a simple, stable mix of the parts into one 63-bit seed
        seed = (seed * 1_000_003 + int(p) + 0x9E3779B9) % (2**63 - 1)
    g.manual_seed(seed)
    return g


def shard_rows(t: Tensor, rank: int, world_size: int) -> Tensor:
    """Rank ``rank``'s contiguous share of ``t``'s rows (sizes differ by at most one; a share
    may be empty when a batch has fewer rows than there are ranks)."""
    if world_size == 1:
        return t
    return t.tensor_split(world_size)[rank]


class Batches:
    """Base: a dataset of ``n`` items, shuffled each epoch, ``batch_size`` per step."""

    def __init__(self, n: int, batch_size: int, device: torch.device | str, seed: int):
        if n == 0:
            raise ValueError("the training set is empty")
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.device = torch.device(device)
        self._order: tuple[int, Tensor] | None = None

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.n / self.batch_size)  # the last batch of an epoch may be short

    def indices(self, step: int) -> Tensor:
        epoch, i = divmod(step, self.steps_per_epoch)
        if self._order is None or self._order[0] != epoch:
            g = _seeded(torch.device("cpu"), self.seed, epoch)
            self._order = (epoch, torch.randperm(self.n, generator=g).to(self.device))
        return self._order[1][i * self.batch_size : (i + 1) * self.batch_size]

    def batch(self, step: int, rank: int = 0, world_size: int = 1, shared_stream: bool = False) -> tuple[Tensor, Tensor]:
        """Rank ``rank``'s share of step ``step``'s global batch (all of it when world_size is 1)."""
        raise NotImplementedError


class CorruptionBatches(Batches):
    """Span-corruption batches made on the device by the tensor implementation."""

    def __init__(self, dataset: SpanCorruptionDataset, batch_size: int, device, seed: int):
        super().__init__(len(dataset), batch_size, device, seed)
        docs, lengths = dataset.doc_tensor()
        self.docs, self.lengths = docs.to(self.device), lengths.to(self.device)
        self.block_size = dataset.block_size

    def batch(self, step: int, rank: int = 0, world_size: int = 1, shared_stream: bool = False) -> tuple[Tensor, Tensor]:
        """By default each rank corrupts only its own documents, with its own stream seeded
        with (seed, step, rank). ``shared_stream``: every rank corrupts the whole global batch
        with rank 0's stream and keeps its share, so the union of the shares is the 1-process
        batch bit for bit (W times the batch-making work; for exact comparisons)."""
        index = self.indices(step)
        if world_size > 1 and shared_stream:
            g = _seeded(self.device, self.seed, step, 0)
            x, y = corrupt_batch(self.docs, self.lengths, index, self.block_size, g)
            return shard_rows(x, rank, world_size), shard_rows(y, rank, world_size)
        g = _seeded(self.device, self.seed, step, rank)
        return corrupt_batch(self.docs, self.lengths, shard_rows(index, rank, world_size), self.block_size, g)


class QABatches(Batches):
    """Question-answer batches from the stacked NameDataset tensors."""

    def __init__(self, dataset: NameDataset, batch_size: int, device, seed: int):
        super().__init__(len(dataset), batch_size, device, seed)
        x, y = dataset.tensors()
        self.x, self.y = x.to(self.device), y.to(self.device)

    def batch(self, step: int, rank: int = 0, world_size: int = 1, shared_stream: bool = False) -> tuple[Tensor, Tensor]:
        idx = shard_rows(self.indices(step), rank, world_size)  # no randomness: shares always exact
        return self.x[idx], self.y[idx]


class PackedBatches(Batches):
    """Rows of sequences packed side by side (attnlab/data/objectives.py): a batch is (x, y,
    segments); the model keeps attention inside each segment. Rows are fixed once packed and
    shuffled each epoch, so a batch still depends only on (seed, step, rank)."""

    def __init__(self, rows, batch_size: int, device, seed: int):
        super().__init__(len(rows), batch_size, device, seed)
        self.x, self.y = rows.x.to(self.device), rows.y.to(self.device)
        self.segments = rows.segments.to(self.device)

    def batch(self, step: int, rank: int = 0, world_size: int = 1, shared_stream: bool = False):
        idx = shard_rows(self.indices(step), rank, world_size)
        return self.x[idx], self.y[idx], self.segments[idx]


def length_buckets(x: Tensor, y: Tensor, buckets: int) -> list[tuple[Tensor, Tensor]]:
    """Split a batch into ``buckets`` micro-batches of similar length, each trimmed to its
    longest example. Exact for causal models: the loss is a sum over the same targets, and
    trimmed (all-PAD-target) positions cannot influence kept ones."""
    if buckets <= 1:
        return [trim_batch(x, y)]
    lengths = (y != PAD_ID).int().cumsum(1).argmax(1)  # last non-PAD target per row
    order = lengths.argsort()
    return [trim_batch(x[part], y[part]) for part in order.chunk(buckets) if len(part)]
