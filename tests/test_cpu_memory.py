"""attnlab/cpu_memory.py: freed memory is reused instead of being faulted in again."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from attnlab.cpu_memory import _glibc

PROBE = textwrap.dedent("""
    import os, resource, sys
    import torch
    from attnlab.cpu_memory import keep_freed_memory

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


def probe(env: dict[str, str] | None = None) -> tuple[bool, int, int]:
    import os

    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
                         env={**os.environ, **(env or {})})
    applied, default, kept = out.stdout.split()
    return applied == "True", int(default), int(kept)


@pytest.mark.skipif(_glibc() is None, reason="mallopt needs glibc; elsewhere the setting is a no-op")
def test_freed_memory_is_reused() -> None:
    applied, default, kept = probe()
    assert applied
    # 4 rounds of 80 MB = 78,000 pages: by default every round's pages are new (mapped, then
    # unmapped when freed); kept, they are reused.
    assert default > 40_000, default
    assert kept < default / 10, (default, kept)


def test_can_be_switched_off() -> None:
    applied, default, kept = probe({"ATTNLAB_KEEP_FREED_MEMORY": "0"})
    assert not applied
    if _glibc() is not None:
        assert kept > default / 2
