"""Helpers shared by the benchmark scripts: machine description, timing, tables, and the
sections of docs/benchmarks.md.

Each benchmark owns one section of docs/benchmarks.md, delimited by ``<!-- NAME:start -->`` and
``<!-- NAME:end -->``; ``write_section`` replaces that section (or appends it, creating the file
if needed) and leaves every other section untouched. A section states the command that produced
it, the machine, the date and the torch version, so numbers are never quoted without context.

Use from a script in benchmarks/ with ``from _common import ...`` (the script's folder is on
``sys.path``) or from elsewhere with ``from benchmarks._common import ...``.
"""

from __future__ import annotations

import datetime
import fcntl
import os
import platform
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # the checkout's attnlab, not another install of it
    sys.path.insert(0, str(REPO))

from attnlab.core.devices import resolve_device  # noqa: E402,F401  (the scripts import it from here)

BENCHMARKS_MD = REPO / "docs" / "benchmarks.md"
DATA = REPO / "data"
_TITLE = "# Benchmarks\n\nEach section is written by the script named in it; re-run the command to refresh it.\n"


# ----------------------------------------------------------------------------- the machine


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_description(device: torch.device | str = "cpu") -> str:
    """One line: CPU (cores, torch threads), GPU if used, OS, Python, torch."""
    device = torch.device(device)
    parts = [f"{cpu_name()}, {os.cpu_count()} CPU cores visible, torch threads {torch.get_num_threads()}"]
    if device.type == "cuda":
        parts.append(f"GPU {torch.cuda.get_device_name(device)}")
    parts.append(f"{platform.system()} {platform.release()}")
    parts.append(f"Python {platform.python_version()}, torch {torch.__version__}")
    return "; ".join(parts)


# -------------------------------------------------------------------------------- timing


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device) -> tuple[float, object]:
    """(seconds, result) of one call, with the device synchronised on both sides."""
    sync(device)
    start = time.perf_counter()
    result = fn()
    sync(device)
    return time.perf_counter() - start, result


def matmul_peak(device: torch.device, n: int = 2048, seconds: float = 2.0,
                dtype: torch.dtype = torch.float32) -> float:
    """Measured peak FLOP/s: repeated n x n @ n x n products (2 n^3 FLOPs each), best of a
    few timed rounds after a warm-up. This, not a datasheet number, is the denominator of our
    utilisation figures: it is what this machine, with these threads, actually reaches."""
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    a @ b  # warm-up
    t, _ = timed(lambda: a @ b, device)
    reps = max(1, int(seconds / 3 / max(t, 1e-6)))
    best = float("inf")
    for _ in range(3):
        t, _ = timed(lambda: [a @ b for _ in range(reps)], device)
        best = min(best, t / reps)
    return 2 * n**3 / best


# -------------------------------------------------------------------------------- output


def count_with_interval(k: int, n: int) -> str:
    """``k/n (p%, 95% CI low-high%)`` with the Wilson score interval: how every benchmark
    quotes a count out of n questions."""
    from attnlab.answering.evaluate import wilson_interval

    low, high = wilson_interval(k, n)
    return f"{k}/{n} ({100 * k / max(1, n):.1f}%, 95% CI {100 * low:.1f}-{100 * high:.1f}%)"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-markdown table (also readable as plain text in a terminal)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    fmt = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    lines = [fmt(cells[0]), "| " + " | ".join("-" * w for w in widths) + " |"]
    return "\n".join(lines + [fmt(r) for r in cells[1:]])


# ----------------------------------------------------------------------------- measures


def open_book_right(model, vocab, index, examples) -> list[bool]:
    """Open-book read-out, scored: per labelled example, whether the place the model reads out
    of the person's own corpus line (``read_out_given_lines``) is the gold one. The one scorer
    of benchmarks/knowledge.py --open-book and benchmarks/read_out.py."""
    from attnlab.answering.knowledge import read_out_given_lines

    answers = read_out_given_lines(model, vocab, index, examples)
    return [a.answer == e.answer for a, e in zip(answers, examples)]


def command_line(argv: list[str] | None = None, script: str | Path | None = None) -> str:
    """How a benchmark script was invoked, relative to the repository root where possible: this
    process's own command line, or (for a ``main(argv)`` called from Python) the script and
    arguments given."""
    script = Path(script or sys.argv[0]).resolve()
    try:
        script = script.relative_to(REPO)
    except ValueError:
        pass
    return shlex.join([".venv/bin/python", str(script), *(sys.argv[1:] if argv is None else argv)])


def write_section(name: str, body: str, *, device: torch.device | str = "cpu",
                  path: Path = BENCHMARKS_MD, title: str | None = None) -> Path:
    """Replace (or append) the section ``name`` of ``path`` with ``body`` under a header that
    states the command, machine, date and torch version. Other sections are kept verbatim."""
    header = "\n".join([
        f"## {title or name}",
        "",
        f"- command: `{command_line()}`",
        f"- machine: {machine_description(device)}",
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- torch: {torch.__version__}",
        "",
    ])
    return replace_section(name, f"{header}\n{body.rstrip()}", path=path)


def report(name: str, text: str, *, write: bool, title: str, device: torch.device | str = "cpu") -> None:
    """Print a benchmark's text and, if ``write``, put it in its section of docs/benchmarks.md."""
    print(text)
    if write:
        path = write_section(name, text, device=device, title=title)
        print(f"wrote the {name} section of {path}")


def replace_section(name: str, body: str, *, path: Path = BENCHMARKS_MD) -> Path:
    """Put ``body`` between the markers of section ``name`` of ``path`` (appending the section
    if it is missing), keeping every other section verbatim."""
    if not re.fullmatch(r"[A-Za-z0-9_\-]+", name):
        raise ValueError(f"section name {name!r}: use letters, digits, '_' and '-' only")
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    section = f"{start}\n{body.rstrip()}\n{end}"
    # Several benchmarks may finish at once: hold a lock over the read-modify-write.
    with open(Path(tempfile.gettempdir()) / "attnlab-benchmarks.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        text = path.read_text(encoding="utf-8") if path.exists() else _TITLE
        if start in text and end in text and text.index(start) < text.index(end):
            before, rest = text.split(start, 1)
            after = rest.split(end, 1)[1]
            text = before + section + after
        else:
            text = text.rstrip("\n") + "\n\n" + section + "\n"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)  # atomic: a reader never sees half a file
    return path
