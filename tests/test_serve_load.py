"""benchmarks/serve_load.py's bookkeeping (issue 50, item 5): the CPU each process used over a
phase, and a phase's row."""

from __future__ import annotations

import os
import sys
import time

import pytest

from tests.conftest import benchmark_fixture

serve_load = benchmark_fixture("serve_load")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, which only Linux has")
def test_a_process_cpu_seconds_grow_with_its_work_and_a_missing_one_has_none(serve_load):
    before = serve_load.cpu_seconds(os.getpid())
    until = time.process_time() + 0.3
    while time.process_time() < until:
        pass
    assert serve_load.cpu_seconds(os.getpid()) - before >= 0.2
    assert serve_load.cpu_seconds(2**22 + 12345) == 0.0  # past the largest pid Linux hands out


def test_a_phase_row_gives_rates_latencies_and_each_process_share_of_the_cores(serve_load):
    result = {"elapsed": 10.0, "latencies": [0.1 * k for k in range(1, 101)], "errors": ["500 x"],
              "traces": [3.0, 4.0], "cached": [True] * 25 + [False] * 75, "server_cores": 1.234,
              "client_cores": 0.5}
    row = serve_load.row("asks alone", 30, result)
    assert row == ["asks alone", 30, "10.0", 100, "10.0", "5050", "10000", 1, "25%", "2", "1.23", "0.50"]
