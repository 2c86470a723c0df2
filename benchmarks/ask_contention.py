"""Asking a question when another process holds a core.

Two measures, each alone and beside a process that keeps one core busy (a pure Python loop),
and their ratio (busy / alone):

- ``command``: the wall time of ``attnlab ask models/cpu "Where was Alfred Mele born?"`` with
  its default abstention (the rule stored with the model, models/cpu/abstention.json);
- ``one question``: the wall time of one ``model.ask(question)`` in a loaded model (the Python
  API's one-question call; the web page answers through it), the median of ``--calls`` calls.

Each under two thread settings: ``by work`` (what attnlab does: attnlab/core/cpu_settings.py
``inference_threads``, one thread for a few questions) and ``one per core`` (torch's default,
ATTNLAB_ADAPTIVE_THREADS=0). Run on a shared machine the numbers carry its other load too; the
ratio is what the benchmark is for.

Run: .venv/bin/python benchmarks/ask_contention.py [--repeats 3] [--calls 20] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, report, table  # noqa: E402

QUESTION = "Where was Alfred Mele born?"
SETTINGS = {"by work": {}, "one per core": {"ATTNLAB_ADAPTIVE_THREADS": "0"}}


def one_question(calls: int) -> None:
    """Load the shipped model, then time ``calls`` one-question asks; print the median (s)."""
    import attnlab

    model = attnlab.load("models/cpu")
    model.ask(QUESTION)  # the first call reads the stored rule
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        model.ask(QUESTION)
        times.append(time.perf_counter() - start)
    print(json.dumps({"seconds": statistics.median(times)}))


def timed(env_extra: dict[str, str], argv: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(env_extra)
    start = time.perf_counter()
    out = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - start
    return json.loads(out.strip().splitlines()[-1])["seconds"] if argv[1] == __file__ else wall


def measure(kind: str, setting: str, busy: bool, calls: int) -> float:
    argv = ([sys.executable, "-m", "attnlab", "ask", "models/cpu", QUESTION] if kind == "command" else
            [sys.executable, __file__, "--one-question", "--calls", str(calls)])
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        if busy:
            time.sleep(1.0)  # let the loop take its core
        return timed(SETTINGS[setting], argv)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--write", action="store_true", help="write the docs/benchmarks.md section")
    p.add_argument("--one-question", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one_question:
        return one_question(args.calls)
    runs: dict[tuple, list[float]] = {}
    load_before = os.getloadavg()[0]
    for _ in range(args.repeats):  # round-robin: a drifting machine affects every cell alike
        for kind in ("command", "one question"):
            for setting in SETTINGS:
                for busy in (False, True):
                    seconds = measure(kind, setting, busy, args.calls)
                    runs.setdefault((kind, setting, busy), []).append(seconds)
                    print(f"{kind}, {setting}, {'busy' if busy else 'alone'}: {seconds:.3f} s", file=sys.stderr, flush=True)
    rows = []
    for kind in ("command", "one question"):
        for setting in SETTINGS:
            alone, busy = (statistics.median(runs[(kind, setting, b)]) for b in (False, True))
            rows.append([kind, setting, f"{alone:.3f}", f"{busy:.3f}", f"{busy / alone:.2f}"])
    text = (table(["measure", "threads", "alone (s)", "beside a busy core (s)", "ratio"], rows)
            + f"\n\nMedians of {args.repeats} runs each (one question: the median of {args.calls} calls per run); "
            f"{os.cpu_count()} cores; 1-minute load average {load_before:.1f} before and {os.getloadavg()[0]:.1f} "
            "after (above the core count: other processes held every core, alone included).")
    report("ask_contention", text, write=args.write, title="Asking next to a busy core (benchmarks/ask_contention.py)")


if __name__ == "__main__":
    main()
