"""torchrun / DistributedDataParallel helpers, kept out of the model and the trainer's logic.

Under torchrun the environment carries RANK, LOCAL_RANK and WORLD_SIZE; the process group is
NCCL on CUDA and gloo on CPU. Outside torchrun everything here is a no-op.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch
import torch.distributed as tdist
from torch import Tensor, nn


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
    """Initialise the process group if launched by torchrun; return the env and the device."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return DistEnv(), device
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if not tdist.is_initialized():
        tdist.init_process_group(backend="nccl" if use_cuda else "gloo")
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    elif device == "auto":
        device = "cpu"
    return environment(), device


def teardown() -> None:
    if tdist.is_available() and tdist.is_initialized():
        tdist.destroy_process_group()


def wrap(model: nn.Module, device: torch.device, env: DistEnv) -> nn.Module:
    if env.world_size == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def shard(t: Tensor, env: DistEnv) -> Tensor:
    """This rank's contiguous share of a global batch (first dimension)."""
    if env.world_size == 1:
        return t
    return t.tensor_split(env.world_size)[env.rank]


def maybe_no_sync(model: nn.Module, sync: bool):
    """Skip DDP's gradient all-reduce on accumulation micro-steps."""
    if sync or not hasattr(model, "no_sync"):
        return contextlib.nullcontext()
    return model.no_sync()


def all_reduce_sum(t: Tensor, env: DistEnv) -> Tensor:
    if env.world_size == 1:
        return t
    t = t.clone()
    tdist.all_reduce(t, op=tdist.ReduceOp.SUM)
    return t


def barrier(env: DistEnv) -> None:
    if env.world_size > 1:
        tdist.barrier()
