"""torchrun / DistributedDataParallel helpers, kept out of the model and the trainer's logic.

Under torchrun the environment carries RANK, LOCAL_RANK and WORLD_SIZE (and MASTER_ADDR/PORT
from its rendezvous); the process group is NCCL on CUDA and gloo on CPU. Outside torchrun
everything here is a no-op, so the single-process path pays nothing.

How a step is split (data parallelism, PyTorch's DDP): every rank holds a full copy of the
model; the step's global batch is cut into W contiguous shares (``batching.shard_rows``); each rank computes
gradients on its share and DDP averages them with an all-reduce during the last backward pass,
so every rank applies the same optimiser step. Only rank 0 writes files.
"""

from __future__ import annotations

import contextlib
import gc
import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

import torch
import torch.distributed as tdist
from torch import Tensor, nn

from . import logs

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class DistEnv:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def environment() -> DistEnv:
    """The current process's place in the job (from torchrun's variables)."""
    if tdist.is_available() and tdist.is_initialized():
        return DistEnv(tdist.get_rank(), int(os.environ.get("LOCAL_RANK", 0)), tdist.get_world_size())
    return DistEnv()


def setup(device: str = "auto") -> tuple[DistEnv, str]:
    """Initialise the process group if launched by torchrun; return the env and the device.

    On CUDA each process takes the GPU of its LOCAL_RANK (one process per GPU)."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return DistEnv(), device
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    backend = "nccl" if use_cuda else "gloo"
    if not tdist.is_initialized():
        tdist.init_process_group(backend=backend)
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    elif device == "auto":
        device = "cpu"
    env = environment()
    if env.is_main and env.world_size > 1:
        logs.note(f"distributed: {env.world_size} processes ({tdist.get_backend()} backend); "
                  "rank 0 logs and writes files")
    return env, device


def teardown() -> None:
    if tdist.is_available() and tdist.is_initialized():
        # DDP wrappers sit in reference cycles: collect them while the group and the
        # interpreter are alive. Left to interpreter shutdown, gloo's threads could still hold
        # their work and abort the process ("terminate called without an active exception")
        # after all the work was done.
        gc.collect()
        tdist.destroy_process_group()


@contextlib.contextmanager
def session(device: str = "auto"):
    """``setup`` on entry, ``teardown`` on the way out, whatever happens: (env, device)."""
    try:
        yield setup(device)
    finally:
        teardown()


def wrap(model: nn.Module, device: torch.device, env: DistEnv) -> nn.Module:
    """DistributedDataParallel around ``model`` for W > 1 (it broadcasts rank 0's weights at
    construction, so every replica starts equal); the model itself otherwise."""
    if env.world_size == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def maybe_no_sync(model: nn.Module, sync: bool):
    """Skip DDP's gradient all-reduce on accumulation micro-steps: gradients accumulate locally
    and the last micro-step's backward reduces the sum once."""
    if sync or not hasattr(model, "no_sync"):
        return contextlib.nullcontext()
    return model.no_sync()


def all_reduce_sum(t: Tensor, env: DistEnv) -> Tensor:
    """Sum of ``t`` over ranks (a new tensor; ``t`` itself for one process)."""
    if env.world_size == 1:
        return t
    t = t.clone()
    tdist.all_reduce(t, op=tdist.ReduceOp.SUM)
    return t


def all_gather_objects(obj: Any, env: DistEnv) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order, on every rank."""
    if env.world_size == 1:
        return [obj]
    out: list[Any] = [None] * env.world_size
    tdist.all_gather_object(out, obj)
    return out


def barrier(env: DistEnv) -> None:
    if env.world_size > 1:
        tdist.barrier()


# ---- random-number state in checkpoints ---------------------------------------------------
# Each rank has its own dropout stream (seeded with seed + rank). A checkpoint keeps all of
# them: rank 0's under the usual names ("cpu", "cuda"), rank r's as "cpu@r", "cuda@r", so a
# resumed W-process run continues every stream where it stopped.
def gather_rng_states(local: dict[str, Tensor], env: DistEnv) -> dict[str, Tensor]:
    """All ranks' RNG states in one dict (collective: every rank must call it)."""
    if env.world_size == 1:
        return local
    states = all_gather_objects({k: v.cpu() for k, v in local.items()}, env)
    merged: dict[str, Tensor] = {}
    for rank, state in enumerate(states):
        for name, value in state.items():
            merged[name if rank == 0 else f"{name}@{rank}"] = value
    return merged


def rng_state_for(saved: dict[str, Tensor] | None, rank: int) -> dict[str, Tensor] | None:
    """Rank ``rank``'s saved RNG states, or None when the checkpoint has none for it (e.g. it
    was written by a run with fewer processes)."""
    if not saved:
        return None
    if rank == 0:
        return {k: v for k, v in saved.items() if "@" not in k}
    suffix = f"@{rank}"
    mine = {k[: -len(suffix)]: v for k, v in saved.items() if k.endswith(suffix)}
    return mine or None


# ---- sharded evaluation ---------------------------------------------------------------------
def sharded_map(
    fn: Callable[[list[T]], list[R]],
    items: Sequence[T],
    env: DistEnv,
    *,
    key: Callable[[T], Any] | None = None,
    chunk: int = 1,
) -> list[R]:
    """``fn`` applied to ``items`` split across ranks; every rank gets all results, in input order.

    Items are stably sorted by ``key`` and cut into chunks of ``chunk``; chunk k goes to rank
    k mod W (long and short chunks spread evenly). When ``fn`` itself sorts by the same key and
    batches by ``chunk`` (as evaluate.answer_questions does), every rank decodes exactly the
    batches a single process would, so the results are identical, not merely close."""
    if env.world_size == 1:
        return fn(list(items))
    order = sorted(range(len(items)), key=(lambda i: key(items[i])) if key else None)
    chunks = [order[i : i + chunk] for i in range(0, len(order), chunk)]
    mine = [i for c in chunks[env.rank :: env.world_size] for i in c]
    results = fn([items[i] for i in mine]) if mine else []
    out: list[Any] = [None] * len(items)
    for indices, values in all_gather_objects((mine, results), env):
        for i, v in zip(indices, values):
            out[i] = v
    return out
