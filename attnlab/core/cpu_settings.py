"""Process-wide CPU settings the `attnlab` program applies before it starts any work: flush
denormals, keep freed memory, and adapt the thread count to the other processes' load
(``AdaptiveThreads``, at the end of this module).

They are properties of the process, not of a model, so the library never changes them behind a
caller's back: the command line applies them (unless given --no-cpu-settings),
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

import contextlib
import ctypes
import ctypes.util
import os
import time
from typing import Iterator

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


def busy_seconds(proc_stat: str, cores: set[int] | None, tick: int) -> float | None:
    """Busy CPU seconds so far of ``cores`` (None: all) from /proc/stat's per-core lines
    ("cpuN user nice system idle iowait irq softirq steal ...", in clock ticks; proc(5)):
    everything but idle and iowait. None if no such line is there."""
    total, seen = 0, False
    for line in proc_stat.splitlines():
        name, *fields = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit()) or (cores is not None and int(name[3:]) not in cores):
            continue
        user, nice, system, _idle, _iowait, irq, softirq, steal = ([int(v) for v in fields[:8]] + [0] * 8)[:8]
        total, seen = total + user + nice + system + irq + softirq + steal, True
    return total / tick if seen else None


# Helper processes of this one (the lab's trace worker): their CPU time counts as this process's
# own, since their work is this process's, not another's load on the cores.
_family: set[int] = set()


def count_as_own(pid: int) -> None:
    """Count the CPU time of helper process ``pid`` as this process's own (``AdaptiveThreads``)."""
    _family.add(pid)


def family_seconds(tick: int) -> float:
    """CPU seconds so far of the helper processes still running (Linux /proc/PID/stat)."""
    total = 0.0
    for pid in list(_family):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after the command name, from field 3 on
        except (OSError, IndexError):
            _family.discard(pid)  # gone
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime and stime, fields 14 and 15
    return total


_adapt_threads = False


def adapt_threads() -> bool:
    """Let training runs adapt torch's thread count to the other processes' load
    (``AdaptiveThreads``); True if allowed (not when the user fixed OMP_NUM_THREADS)."""
    global _adapt_threads
    _adapt_threads = AdaptiveThreads.enabled()
    return _adapt_threads


def thread_adapter() -> "AdaptiveThreads | None":
    """For a training loop on the CPU: an ``AdaptiveThreads`` to ``check()`` every step if the
    program turned adapting on (``apply``), else None (library calls leave threads alone)."""
    return AdaptiveThreads() if _adapt_threads else None


def apply() -> dict[str, bool]:
    """The process settings; which of them took effect."""
    return {"flush_denormals": flush_denormals(), "keep_freed_memory": keep_freed_memory(),
            "adaptive_threads": adapt_threads()}


class AdaptiveThreads:
    """One torch thread per core that no other process is using, re-checked every
    ``interval`` seconds while a run goes on (``check()`` once per training step).

    Why: torch's CPU kernels run on an OpenMP team of one thread per core, and every parallel
    region ends at a barrier that waits for the slowest thread. When another process takes a
    core, the thread that shares it waits for time slices at each of the thousands of small
    regions of a step: a quick-model run fell from 27,000 to 8,900 tokens/s, below the 22,900
    that one thread gives (docs/benchmarks.md "Training next to a busy core"). Dropping that thread
    keeps the one-core speed; when the core is free again the thread comes back.

    The other processes' load is the busy CPU time of the cores this process may run on (Linux
    /proc/stat: user, nice, system, irq, softirq and a virtual machine's steal time) less this
    process's own CPU time and its helpers' (``count_as_own``), over the last interval. Where /proc/stat does not exist nothing changes. A user who fixes
    the thread count (OMP_NUM_THREADS, torch.set_num_threads before the run) keeps it:
    ``enabled()`` says whether adapting is allowed.
    """

    def __init__(self, interval: float = 2.0, max_threads: int | None = None):
        self.max_threads = max_threads or torch.get_num_threads()
        # The cores this process may run on (a container or taskset may allow fewer than exist).
        self._allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        self.cores = len(self._allowed) if self._allowed else os.cpu_count() or 1
        self.interval = interval
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last = self._sample()
        self._wait = min(interval, 0.5)  # the first look comes soon: a run should start right
        self._free = self.max_threads  # the last measure's threads (free_threads)

    @staticmethod
    def enabled() -> bool:
        return "OMP_NUM_THREADS" not in os.environ and os.environ.get("ATTNLAB_ADAPTIVE_THREADS", "1") != "0"

    def _sample(self) -> tuple[float, float, float] | None:
        """(wall clock, busy CPU seconds of the cores this process may use, this process's
        CPU seconds); None where /proc/stat cannot be read."""
        try:
            with open("/proc/stat") as f:
                busy = busy_seconds(f.read(), self._allowed, self._tick)
        except (OSError, ValueError):
            return None
        if busy is None:
            return None
        return time.monotonic(), busy, time.process_time() + family_seconds(self._tick)

    def others(self, before: tuple[float, float, float], after: tuple[float, float, float]) -> float:
        """Cores' worth of CPU time other processes used between two samples."""
        wall = max(after[0] - before[0], 1e-9)
        return max(0.0, (after[1] - before[1]) - (after[2] - before[2])) / wall

    def threads_for(self, others: float) -> int:
        """One thread per core the others leave free (a core counts as taken from 0.5 on)."""
        return max(1, min(self.max_threads, self.cores - int(others + 0.5)))

    def check(self) -> int:
        """Re-set torch's thread count if an interval has passed; the count in use."""
        if self._last is None or time.monotonic() - self._last[0] < self._wait:
            return torch.get_num_threads()
        threads = self.free_threads()
        if threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        return threads

    def free_threads(self) -> int:
        """Threads for the cores the others left free over the last interval, measured again
        when an interval has passed since the last measure (torch's count is not touched)."""
        if self._last is None:
            return self.max_threads
        if time.monotonic() - self._last[0] >= self._wait:
            sample, self._wait = self._sample(), self.interval
            if sample is not None:
                self._free = self.threads_for(self.others(self._last, sample))
                self._last = sample
        return self._free


# ---- inference: threads by the work's size and the machine's load --------------------------------
SMALL_WORK = 64  # questions answered together: below this, one thread (benchmarks/serve_load.py --server-threads)


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def inference_thread_count(items: int, load: float | None = None) -> int:
    """Threads for answering ``items`` questions.

    Small work (under SMALL_WORK questions) runs on one thread everywhere: its matrices are too
    small for a second thread to pay for the work of splitting them, and a second core is then
    left to whatever else runs (a server's traces and training jobs, its clients). Larger work
    takes one thread per core the other processes leave free (a core another process holds is
    never shared: a thread that shares it stalls every parallel region at its barrier, as
    AdaptiveThreads says): in a long-running process that watches the load (``watch_load``: the
    server) as measured over the last second, elsewhere (a one-shot command, a library call) by
    the 1-minute load average (``load``)."""
    if items < SMALL_WORK:
        return 1
    if _load_watch is not None and load is None:
        return max(1, min(torch.get_num_threads(), _load_watch.free_threads()))
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return max(1, min(torch.get_num_threads(), _cores() - int(load + 0.5)))


_load_watch: "AdaptiveThreads | None" = None


def watch_load(interval: float = 1.0) -> bool:
    """From now on, measure the other processes' load between inference calls, so that each
    call's threads follow it (``inference_thread_count``); for a process that answers for a
    long time, where a measure over the last ``interval`` seconds is at hand. Only while the
    thread count is left to attnlab (``AdaptiveThreads.enabled``); True if watching."""
    global _load_watch
    if AdaptiveThreads.enabled() and _load_watch is None:
        _load_watch = AdaptiveThreads(interval=interval)
    return _load_watch is not None


@contextlib.contextmanager
def inference_threads(items: int) -> Iterator[int]:
    """Answer ``items`` questions with ``inference_thread_count`` threads, then restore the
    count; only while the thread count is torch's untouched default (no OMP_NUM_THREADS, no
    torch.set_num_threads by the caller, ATTNLAB_ADAPTIVE_THREADS not 0), so a count the user
    chose is kept. Yields the count in use."""
    before = torch.get_num_threads()
    threads = inference_thread_count(items) if AdaptiveThreads.enabled() and before == _cores() else before
    if threads != before:
        torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        if threads != before:
            torch.set_num_threads(before)
