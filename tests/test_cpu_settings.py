"""attnlab/core/cpu_settings.py: the `attnlab` program's process-wide CPU settings.

Each check runs in a fresh interpreter: the settings are per process (and, for flush-to-zero,
inherited by worker threads only when they are created), so the test process itself is left
alone, as library calls leave it alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from attnlab.core.cpu_settings import _glibc

FAULTS = textwrap.dedent("""
    import resource
    import torch
    from attnlab.core.cpu_settings import keep_freed_memory

    size = 2_000_000

    def faults_for_allocations():
        # Like training steps: many activations alive at once, then freed; sizes change from
        # step to step (here they grow, which defeats glibc's own adaptive threshold).
        global size
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(4):
            size += 20_000
            alive = [torch.ones(size) for _ in range(10)]  # 10 x 8 MB, written
            del alive
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    faults_for_allocations()
    default = faults_for_allocations()
    applied = keep_freed_memory()
    faults_for_allocations()
    kept = faults_for_allocations()
    print(applied, default, kept)
""")

# A tensor of denormal numbers (the bit pattern 1000 read as float32: 1.4e-42), large enough to
# be split over both worker threads; multiplied by 1, it stays denormal unless flushed, on
# every thread that computes part of it.
DENORMALS = textwrap.dedent("""
    import torch
    torch.set_num_threads(2)
    def flushed_everywhere():
        x = torch.full((1_000_000,), 1000, dtype=torch.int32).view(torch.float32)
        return bool((x * 1.0 == 0).all())
""")


def python(code: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.skipif(_glibc() is None, reason="mallopt needs glibc; elsewhere the setting is a no-op")
def test_freed_memory_is_reused() -> None:
    applied, default, kept = python(FAULTS).split()
    assert applied == "True"
    # 4 rounds of 80 MB = 78,000 pages: by default every round's pages are new (mapped, then
    # unmapped when freed); kept, they are reused.
    assert int(default) > 40_000, default
    assert int(kept) < int(default) / 10, (default, kept)


def test_keeping_freed_memory_can_be_switched_off() -> None:
    applied, default, kept = python(FAULTS, {"ATTNLAB_KEEP_FREED_MEMORY": "0"}).split()
    assert applied == "False"
    if _glibc() is not None:
        assert int(kept) > int(default) / 2


def test_denormals_flushed_on_every_thread_when_set_first() -> None:
    code = DENORMALS + textwrap.dedent("""
        from attnlab.core import cpu_settings
        before = flushed_everywhere()
        print(before)
    """)
    assert python(code).split() == ["False"]  # the default: denormals are kept
    code = DENORMALS + textwrap.dedent("""
        from attnlab.core import cpu_settings
        applied = cpu_settings.apply()
        print(applied["flush_denormals"], flushed_everywhere())
    """)
    supported, flushed = python(code).split()
    assert supported == "True" and flushed == "True"


def test_the_program_applies_the_settings_and_no_cpu_settings_does_not(tmp_path) -> None:
    """`attnlab ...` (cli.entry) applies them before any work, --no-fast included (the model's
    path is no process setting); the library's main() does not, nor does --no-cpu-settings."""
    runs = {
        "entry": "from attnlab.cli import entry as run; sys.argv = ['attnlab', 'variants']; run()",
        "main": "from attnlab.cli import main; main(['variants'])",
        "no-fast": (f"from attnlab.cli import entry as run; sys.argv = ['attnlab', 'pretrain', "
                    f"'--preset', 'tiny', '--corpus', 'missing.txt', '--no-fast', '--out-dir', "
                    f"{str(tmp_path)!r}]; run()"),
        "no-cpu-settings": (f"from attnlab.cli import entry as run; sys.argv = ['attnlab', 'pretrain', "
                            f"'--preset', 'tiny', '--corpus', 'missing.txt', '--no-cpu-settings', "
                            f"'--out-dir', {str(tmp_path)!r}]; run()"),
    }
    seen = {}
    for name, call in runs.items():
        code = DENORMALS + "import sys, contextlib, io\n" + textwrap.dedent(f"""
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                {call}
            print(flushed_everywhere())
        """)
        seen[name] = python(code).split()[-1]
    assert seen == {"entry": "True", "main": "False", "no-fast": "True", "no-cpu-settings": "False"}


# ---- AdaptiveThreads: one thread per core the other processes leave free -------------------
def test_threads_follow_the_other_processes_load(monkeypatch):
    import torch

    from attnlab.core.cpu_settings import AdaptiveThreads

    before = torch.get_num_threads()
    adapt = AdaptiveThreads(interval=0.0, max_threads=2)
    adapt.cores = 2
    # (wall s, machine busy s, own CPU s): the machine was busy 1.9 cores' worth in one second,
    # 1.0 of it ours, so another process took a core; then the others went quiet.
    samples = iter([(1.0, 1.9, 1.0), (2.0, 2.95, 1.9)])
    monkeypatch.setattr(adapt, "_sample", lambda: next(samples))
    adapt._last, adapt._wait = (0.0, 0.0, 0.0), 0.0
    try:
        assert adapt.check() == 1 and torch.get_num_threads() == 1
        assert adapt.check() == 2 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_thread_count_bounds():
    from attnlab.core.cpu_settings import AdaptiveThreads

    adapt = AdaptiveThreads(max_threads=4)
    adapt.cores = 4
    assert [adapt.threads_for(x) for x in (0.0, 0.4, 0.6, 2.2, 7.0)] == [4, 4, 3, 2, 1]
    assert adapt.others((0.0, 10.0, 5.0), (2.0, 13.0, 4.0 + 2.0)) == 1.0  # 3 busy s, 1 ours, over 2 s


def test_a_fixed_thread_count_is_kept():
    code = ("from attnlab.core import cpu_settings\n"
            "print(cpu_settings.apply()['adaptive_threads'], cpu_settings.thread_adapter() is None)")
    assert python(code, {"OMP_NUM_THREADS": "1"}).split() == ["False", "True"]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["True", "False"], out.stderr


def test_library_calls_leave_threads_alone():
    from attnlab.core import cpu_settings

    assert cpu_settings.thread_adapter() is None  # this process never called apply()


def test_training_adapts_threads_when_the_program_asks(monkeypatch, tmp_path):
    """Under the `attnlab` program (apply() turned adapting on) each training step checks the
    load; with another process on a core the run continues on one thread."""
    import torch

    from attnlab.core import cpu_settings
    from tests.tiny_runs import train_tiny

    clock = iter(range(10_000))
    # Each sample: a second later, the machine 2 cores busy, this process 1 core of them.
    monkeypatch.setattr(cpu_settings.AdaptiveThreads, "_sample",
                        lambda self: (lambda t: (float(t), 2.0 * t, 1.0 * t))(next(clock)))
    monkeypatch.setattr(cpu_settings, "_adapt_threads", True)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        train_tiny(tmp_path / "run")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_busy_time_of_the_allowed_cores_from_proc_stat():
    from attnlab.core.cpu_settings import busy_seconds

    stat = ("cpu  300 0 100 900 50 0 0 0 0 0\n"
            "cpu0 100 0 50 400 25 0 0 0 0 0\n"  # busy 150 ticks (idle and iowait do not count)
            "cpu1 200 0 50 500 25 10 5 35 0 0\n"  # busy 300: irq, softirq and steal do
            "intr 12345\nctxt 999\n")
    assert busy_seconds(stat, None, 100) == 4.5
    assert busy_seconds(stat, {1}, 100) == 3.0
    assert busy_seconds("intr 1\n", None, 100) is None


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc on this OS: helpers' CPU time is not read")
def test_a_helper_process_s_cpu_time_counts_as_this_process_s_own(monkeypatch):
    """The lab's trace worker is this process's work, not another's load: its CPU seconds are
    added to this process's own; a helper that exited is dropped."""
    from attnlab.core import cpu_settings

    monkeypatch.setattr(cpu_settings, "_family", set())
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                             "while time.process_time() - t < 0.5: pass"])
    cpu_settings.count_as_own(busy.pid)
    tick = os.sysconf("SC_CLK_TCK")
    busy.wait(60)
    assert cpu_settings.family_seconds(tick) == 0.0  # exited (reaped): nothing to read, dropped
    assert busy.pid not in cpu_settings._family
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        cpu_settings.count_as_own(spinner.pid)
        before = cpu_settings.family_seconds(tick)
        time.sleep(0.6)
        assert cpu_settings.family_seconds(tick) > before + 0.2
    finally:
        spinner.kill()
        spinner.wait(60)


def test_small_inference_runs_on_one_thread_and_large_on_the_free_cores(monkeypatch):
    """Issue 49 item 6: a question or a few take one thread; larger work one per core the load
    leaves free; a count the user chose is kept, and the count is restored afterwards."""
    import torch

    from attnlab.core import cpu_settings

    monkeypatch.setattr(cpu_settings, "_cores", lambda: 4)
    monkeypatch.setattr(cpu_settings, "_load_watch", None)  # a one-shot process: nothing measured
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    assert cpu_settings.inference_thread_count(1, load=0.0) == 1
    assert cpu_settings.inference_thread_count(cpu_settings.SMALL_WORK - 1, load=0.0) == 1
    assert cpu_settings.inference_thread_count(1000, load=0.0) == 4
    assert cpu_settings.inference_thread_count(1000, load=1.2) == 3
    assert cpu_settings.inference_thread_count(1000, load=9.0) == 1
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    with cpu_settings.inference_threads(1) as threads:
        assert threads == 1
    assert calls == [1, 4]  # set for the work, then restored
    calls.clear()
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # the user's choice is kept
    with cpu_settings.inference_threads(1) as threads:
        assert threads == 4
    assert calls == []


def test_a_process_that_watches_the_load_answers_on_every_core_the_others_leave(monkeypatch):
    """The server (``watch_load``): a large batch takes each core no other process used over the
    last interval, and none that one did, re-measured once an interval has passed; a small one
    takes one thread, as everywhere."""
    import types

    import torch

    from attnlab.core import cpu_settings

    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    monkeypatch.setenv("ATTNLAB_ADAPTIVE_THREADS", "1")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu_settings, "_load_watch", None)
    samples = iter([(0.0, 0.0, 0.0), (10.0, 10.0, 10.0), (20.0, 32.0, 20.0)])
    monkeypatch.setattr(cpu_settings.AdaptiveThreads, "_sample", lambda self: next(samples))
    clock = [0.0]
    monkeypatch.setattr(cpu_settings, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    assert cpu_settings.watch_load(interval=1.0)
    watch = cpu_settings._load_watch
    watch.cores = 4
    big = cpu_settings.SMALL_WORK
    clock[0] = 10.0  # the others used nothing: every core
    assert cpu_settings.inference_thread_count(big) == 4
    assert cpu_settings.inference_thread_count(big - 1) == 1
    clock[0] = 10.5  # within the interval: the last measure stands
    assert cpu_settings.inference_thread_count(big) == 4
    clock[0] = 20.0  # the others used 1.2 cores' worth over ten seconds: three left
    assert cpu_settings.inference_thread_count(1000) == 3
    assert cpu_settings.inference_thread_count(1) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setattr(cpu_settings, "_load_watch", None)
    assert not cpu_settings.watch_load()  # the user's thread count: nothing watched
