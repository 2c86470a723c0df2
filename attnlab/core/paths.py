"""Files a command reads and writes, checked before any work is done, and output files written
atomically.

A command calls ``input_file`` for each file it will read and ``output_dir`` / ``output_file``
for each place it will write, before it trains or loads anything, so that a directory given as
a file, an unreadable file, an output path that is a file or a read-only directory is a
one-line error (``PathError``, exit code 2 through the command line's error handler) and nothing
has been written. ``write_atomically`` writes through a temporary file in the same directory
and a rename, so an interrupted or failed write (a full disk) leaves the old file as it was and
no temporary file behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from pathlib import Path
from typing import Any, Iterator

from . import logs


class PathError(ValueError):
    """A path that cannot be used as asked: ``path: problem``, one line."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):
        return (type(self), (self.path, self.problem))


def input_file(path: str | os.PathLike, what: str, *, required: bool = True) -> Path:
    """``path`` if it is a readable file; ``what`` names it in the error (e.g. '--corpus').
    ``required=False``: a file the command reads only in some cases may be missing (the
    command says so if it turns out to need it), but what is there must be a readable file."""
    p = Path(path)
    if not required and not os.path.lexists(p):
        return p
    if p.is_dir():
        raise PathError(p, f"{what} is a directory, not a file")
    try:
        with open(p, "rb"):
            pass
    except FileNotFoundError:
        from .datafiles import redirect_note

        raise PathError(p, f"{what} does not exist{redirect_note(p)}") from None
    except OSError as e:
        raise PathError(p, f"cannot read {what} ({e.strerror})") from None
    logs.detail(f"{what}: {p} ({p.stat().st_size:,} bytes)")
    return p


def output_dir(path: str | os.PathLike, what: str) -> Path:
    """``path`` if it is, or can be made, a directory this process may write in."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise PathError(p, f"{what} is a file, not a directory")
    existing = _nearest_existing(p)
    if not existing.is_dir():
        raise PathError(p, f"{what} cannot be created: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == p else f" ({existing} is where it would be created)"
        raise PathError(p, f"{what}: cannot write here (no permission, or a read-only file system){where}")
    return p


def output_file(path: str | os.PathLike, what: str) -> Path:
    """``path`` if it can be written: not a directory, in a directory that can be written."""
    p = Path(path)
    if p.is_dir():
        raise PathError(p, f"{what} is a directory, not a file")
    parent = p.parent
    if parent.exists() and not parent.is_dir():
        raise PathError(p, f"{what} cannot be written: {parent} is a file, not a directory")
    output_dir(parent, f"the directory of {what}")
    return p


def _nearest_existing(p: Path) -> Path:
    """``p`` or its closest ancestor that exists (the current directory for a relative path)."""
    p = Path(os.path.abspath(p))
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def write_atomically(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` through a temporary file in the same
    directory and a rename; on any failure the temporary file is removed and ``path`` is as it
    was. An error from the write names ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with _temporary_beside(path) as tmp:
        with open(tmp, "xb") as f:  # created with the umask, like any other file
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return path


@contextlib.contextmanager
def _temporary_beside(path: Path) -> Iterator[Path]:
    """A fresh temporary name in ``path``'s directory, keeping its suffix (matplotlib reads the
    format from it), removed on the way out if it is still there; an OSError that names no file
    (a failed write) or the temporary one names ``path`` instead."""
    tmp = path.with_name(f".tmp-{secrets.token_hex(4)}-{path.name}")
    try:
        yield tmp
    except OSError as e:
        if e.filename in (None, os.fspath(tmp)):  # a failed write names no file, or the temporary
            raise OSError(e.errno, e.strerror or str(e), os.fspath(path)) from None
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def save_figure(fig: Any, path: str | os.PathLike, **kwargs: Any) -> Path:
    """``fig.savefig(path)`` written atomically (the format from ``path``'s suffix)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _temporary_beside(path) as tmp:
        fig.savefig(tmp, **kwargs)
        os.replace(tmp, path)
    return path


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks (records of what a run read)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
