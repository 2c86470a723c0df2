"""Two process-wide CPU settings the `attnlab` program applies before it starts any work.

Both are properties of the process, not of a model, so the library never changes them behind a
caller's back: the command line applies them (unless a training command is given --no-fast),
and so does benchmarks/train_speed.py; from Python call ``apply()`` first thing.

Flush denormals. As pretraining sharpens attention, softmax gives probabilities below 1.2e-38
(exp of scores more than 87 below the row's maximum), and x86 cores compute with such
denormal numbers many times slower: a spec-model step went from 1.1 s to 2.4 s within 70 steps
on this CPU. With flush-to-zero they are 0, which they are to within 1.2e-38 anyway. The
setting is per thread and threads inherit it when created, so it must come before torch starts
its pool of worker threads; set later it reaches the calling thread only.

Keep freed memory. PyTorch's CPU tensors come straight from malloc. glibc serves large
requests with fresh mmap'd pages and gives freed ones back, so a training step faults in and
zeroes its activations anew: 100,000-150,000 page faults per spec-model step. On the virtual
machines this project runs on a page fault is expensive and its cost drifts with the host's
load (writing into new memory measured 0.8 GB/s, into reused memory 7.7 GB/s). ``mallopt``
makes glibc serve requests up to 32 MiB (its maximum) from the heap, grow the heap in 64 MiB
steps and never trim it, so after the first step activations reuse memory the process already
has; the cost is a resident size that stays at its peak. Only where the C library is glibc;
ATTNLAB_KEEP_FREED_MEMORY=0 leaves malloc alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

import torch

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # glibc's malloc.h
_MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc's ceiling on 64-bit systems
_kept = False


def _glibc():
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "gnu_get_libc_version") else None
    except OSError:
        return None


def keep_freed_memory() -> bool:
    """Apply the malloc settings once per process; True if they are in effect."""
    global _kept
    if _kept:
        return True
    if os.environ.get("ATTNLAB_KEEP_FREED_MEMORY", "1") == "0":
        return False
    libc = _glibc()
    if libc is None:
        return False
    _kept = (libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) == 1
             and libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1
             and libc.mallopt(_M_TOP_PAD, 64 * 2**20) == 1)
    return _kept


def flush_denormals() -> bool:
    """Flush denormal floats to zero on this thread and the worker threads started after it;
    True where the CPU supports it."""
    return bool(torch.set_flush_denormal(True))


def apply() -> dict[str, bool]:
    """Both settings; which of them took effect."""
    return {"flush_denormals": flush_denormals(), "keep_freed_memory": keep_freed_memory()}
