"""benchmarks/grid.sh: one `attnlab compare` process per group, each in its own output directory,
stopped at the deadline, and each group's exit code said (the records it leaves are the
compare command's own, tested in tests/test_comparison.py)."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_grid(tmp_path: Path, seconds: int, *groups: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", str(REPO / "benchmarks" / "grid.sh"), str(tmp_path / "out"),
                           str(tmp_path / "records"), str(seconds), "--preset tiny --seeds 3 --no-scratch --device cpu",
                           *groups], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_each_group_gets_its_own_directory_and_log_and_a_deadline_stops_it(tmp_path):
    # three tiny seeds take about a minute; an unknown variant is refused within seconds
    done = run_grid(tmp_path, 15, "--variants vanilla", "--variants nosuchvariant")
    assert done.returncode == 1  # not every group finished
    lines = done.stdout.splitlines()
    assert lines[0] == "group 0 (--variants vanilla): exit 124"  # stopped at the deadline
    assert lines[1].startswith("group 1 (--variants nosuchvariant): exit ")
    assert lines[1] != "group 1 (--variants nosuchvariant): exit 124"  # refused at once, not stopped
    assert (tmp_path / "out" / "g0.log").is_file() and (tmp_path / "out" / "g1.log").is_file()
    assert "nosuchvariant" in (tmp_path / "out" / "g1.log").read_text()
