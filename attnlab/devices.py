"""Where a run computes: the device resolver, the on/off/auto switches and TF32, in one place
for the trainer, the commands and the benchmarks."""

from __future__ import annotations

import torch


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA when there is one, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``; a CUDA
    device on a machine without CUDA is a one-line error, not a crash deep inside torch."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r}: CUDA is not available on this machine")
    return device


def switch(value: str, device: torch.device) -> bool:
    """An on/off/auto setting (compile, amp): auto means on for CUDA."""
    if value not in ("on", "off", "auto"):
        raise ValueError(f"expected on, off or auto, got {value!r}")
    return value == "on" or (value == "auto" and device.type == "cuda")


def allow_tf32(device: torch.device) -> None:
    """TF32 for the fp32 matmuls that autocast leaves on a GPU (a process-wide PyTorch setting)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
