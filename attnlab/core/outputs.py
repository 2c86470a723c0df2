"""Output files that never replace earlier work by surprise.

A command that writes files checks them here before it does any work: a file that already
exists is refused unless the user said ``--overwrite`` (``refuse_existing``), and a file the
command reads (its question file, the checkpoint it loads) is never an output, overwrite or not
(``refuse_inputs``). The check before the work cannot see a second process that starts at the
same time, so the write itself is exclusive too (``write_new``): the file appears whole, and only
if nothing has appeared at its name meanwhile. Every refusal is a ``PathError`` (one line, exit
code 2 through the command line's error handler) and leaves every file as it was.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Iterable

from .paths import PathError, _temporary_beside, write_atomically

OVERWRITE_HINT = "pass --overwrite to replace it, or choose another path"


def refuse_existing(files: Iterable[str | os.PathLike], overwrite: bool) -> None:
    """Refuse the first of ``files`` that exists, unless ``overwrite``."""
    if overwrite:
        return
    for f in files:
        if os.path.lexists(f):
            raise PathError(f, f"already exists; {OVERWRITE_HINT}")


def refuse_inputs(output: str | os.PathLike, inputs: dict[str, str | os.PathLike | None], what: str) -> None:
    """Refuse ``output`` when it is one of the files the command reads (``inputs``: its flag or
    role -> path; a directory stands for the checkpoint inside it)."""
    out = Path(output)
    if not out.exists():
        return
    for role, path in inputs.items():
        if path is None or not os.path.exists(path):
            continue
        candidates = [Path(path)] + ([Path(path) / "checkpoint.safetensors"] if Path(path).is_dir() else [])
        if any(c.exists() and os.path.samefile(out, c) for c in candidates):
            raise PathError(out, f"{what} is the {role} this command reads; choose another path")


def write_output(path: str | os.PathLike, data: str | bytes, overwrite: bool) -> Path:
    """``write_atomically`` when the user allowed replacing ``path``, else ``write_new``."""
    return write_atomically(path, data) if overwrite else write_new(path, data)


def write_new(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` to ``path``, which must not exist, through a complete temporary file that
    is then linked to ``path`` (a link never replaces a file): a process that wrote ``path``
    meanwhile keeps its file, and this one gets a ``PathError``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with _temporary_beside(path) as tmp:
        with open(tmp, "xb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        _link_new(tmp, path)
    return path


def _link_new(tmp: Path, path: Path) -> None:
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise PathError(path, "was written by another process meanwhile; it is kept, this output is not") from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV):
            raise
        # A file system without hard links: an exclusive create, then the rename over it.
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            raise PathError(path, "was written by another process meanwhile; it is kept, this output is not") from None
        os.replace(tmp, path)
