"""The data files from any directory: a relative path ``data/NAME`` (the default of every
command's data options) is looked up

1. in ``--data-dir`` (or the ATTNLAB_DATA_DIR environment variable) when given;
2. as written, relative to the current directory (a checkout's own data/ wins);
3. in the source checkout the package runs from (an editable install: ``pip install -e .``);
4. where a wheel install puts them: PREFIX/share/attnlab/data (pyproject.toml data-files).

``models/NAME`` (the shipped models) is looked up the same way in steps 2 and 3. Any other
path is used as written. A path found nowhere is returned as written, so the error names it.
"""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path

DATA_DIR_ENV = "ATTNLAB_DATA_DIR"
SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the checkout, for an editable install
_data_dir: Path | None = None  # --data-dir of the running command


def set_data_dir(path: str | os.PathLike | None) -> None:
    """Make ``data/NAME`` mean ``path/NAME`` (None: the default lookup)."""
    global _data_dir
    _data_dir = None if path is None else Path(path)


def data_dir_override() -> Path | None:
    if _data_dir is not None:
        return _data_dir
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env) if env else None


def installed_data_dirs() -> list[Path]:
    """Where a wheel install of attnlab puts the data files (a venv or system prefix, or the
    user base for ``pip install --user``)."""
    return [Path(sys.prefix) / "share" / "attnlab" / "data", Path(site.USER_BASE or "") / "share" / "attnlab" / "data"]


def resolve(path: str | os.PathLike) -> Path:
    """Where ``path`` is, by the rules above."""
    p = Path(path)
    if p.is_absolute() or len(p.parts) < 2 or p.parts[0] not in ("data", "models"):
        return p
    kind, rest = p.parts[0], Path(*p.parts[1:])
    override = data_dir_override()
    if kind == "data" and override is not None:
        return override / rest
    if p.exists():
        return p
    roots = [SOURCE_ROOT / kind] + (installed_data_dirs() if kind == "data" else [])
    return next((root / rest for root in roots if (root / rest).exists()), p)


def redirect_note(path: str | os.PathLike) -> str:
    """' (data/ files are read from DIR: --data-dir or $ATTNLAB_DATA_DIR)' when ``path`` lies in
    that directory, else ''; a missing file there is the redirection's doing, not the flag's."""
    override = data_dir_override()
    if override is None:
        return ""
    try:
        Path(os.path.abspath(path)).relative_to(os.path.abspath(override))
    except ValueError:
        return ""
    how = "--data-dir" if _data_dir is not None else f"${DATA_DIR_ENV}"
    return f" (data/ files are read from {override}, set by {how})"


class DataFile(os.PathLike):
    """A default data path, resolved each time it is used (so that a --data-dir given after
    import still applies to library defaults such as pipeline.DEFAULT_DEV)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __fspath__(self) -> str:
        return str(resolve(self.path))

    def __str__(self) -> str:
        return self.__fspath__()

    @property
    def as_written(self) -> str:
        """The path unresolved (``data/NAME``): a command's default, resolved after parsing,
        when its --data-dir is known."""
        return str(self.path)

    def __repr__(self) -> str:
        return f"DataFile({str(self.path)!r})"

    def __truediv__(self, name: str) -> "DataFile":
        return DataFile(self.path / name)


def resolved_text(value: str) -> str:
    """``value`` resolved by the rules above, as text; unchanged where it is not found."""
    resolved = resolve(value)
    return value if resolved == Path(value) else str(resolved)
