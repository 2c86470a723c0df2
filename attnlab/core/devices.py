"""Where a run computes: the device resolver, the on/off/auto switches and TF32, in one place
for the trainer, the commands and the benchmarks."""

from __future__ import annotations

import torch


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA when there is one, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``; a
    device this machine does not have is a one-line error (``check_device``), not a crash deep
    inside torch."""
    if check_device(name) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def check_device(name: str) -> str:
    """``name`` if this machine has that device (auto, cpu, cuda, cuda:N, or mps where there is
    one); else a ValueError saying why. The command line checks --device with it as it parses."""
    if name == "auto":
        return name
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"device {name!r} is not a device name; use cpu, cuda, cuda:N or auto") from None
    if device.type == "cpu":
        return name
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r}: CUDA is not available on this machine")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(f"device {name!r}: this machine has {count} CUDA device(s), cuda:0..cuda:{count - 1}")
        return name
    if device.type == "mps" and torch.backends.mps.is_available():
        return name
    raise ValueError(f"device {name!r} is not available on this machine; use cpu, cuda, cuda:N or auto")


def switch(value: str, device: torch.device) -> bool:
    """An on/off/auto setting (compile, amp): auto means on for CUDA."""
    if value not in ("on", "off", "auto"):
        raise ValueError(f"expected on, off or auto, got {value!r}")
    return value == "on" or (value == "auto" and device.type == "cuda")


def allow_tf32(device: torch.device, amp: bool) -> None:
    """TF32 for the fp32 matmuls that bf16 autocast leaves on a GPU; with autocast off the run
    asked for float32, so TF32 (10-bit mantissas in the matmul inputs) is turned off. A
    process-wide PyTorch setting, hence set both ways: an earlier run in the same process may
    have turned it on."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = amp
        torch.backends.cudnn.allow_tf32 = amp


def fast_bfloat16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 matrices in hardware: a GPU, or a CPU with
    AVX512-BF16 or AMX (read from /proc/cpuinfo's flags). Elsewhere (AVX2 CPUs, most laptops)
    torch emulates bfloat16 matmuls, several times slower than float32."""
    if device.type != "cpu":
        return device.type == "cuda"
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux lists them (empty where there is no /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()
