"""Keep freed memory in the process instead of handing it back to the operating system.

PyTorch's CPU tensors come straight from malloc. glibc serves large requests (above 128 KiB,
adjusted upwards as it goes) with fresh mmap'd pages and gives freed ones back, so every
training step faults in and zeroes its activations anew: 100,000-150,000 page faults per
spec-model step here. On the virtual machines this project runs on a page fault is expensive
and its cost drifts with the host's load (writing into new memory measured 0.8 GB/s against
7.7 GB/s into reused memory), which made up to 7% of a step (BENCHMARKS.md).

``keep_freed_memory`` tells glibc, through ``mallopt``, to serve requests up to 32 MiB (its
maximum) from the heap, to grow the heap in 64 MiB steps and never to trim it: after the first
step, activations reuse memory the process already has. The cost is a resident size that stays
at its peak. It only applies where the C library is glibc; set ATTNLAB_KEEP_FREED_MEMORY=0 to
leave malloc alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # glibc's malloc.h
_MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc's ceiling on 64-bit systems
_applied = False


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
    """Apply the settings once per process; True if they are in effect."""
    global _applied
    if _applied:
        return True
    if os.environ.get("ATTNLAB_KEEP_FREED_MEMORY", "1") == "0":
        return False
    libc = _glibc()
    if libc is None:
        return False
    ok = (libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) == 1
          and libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1
          and libc.mallopt(_M_TOP_PAD, 64 * 2**20) == 1)
    _applied = ok
    return ok
