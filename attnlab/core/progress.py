"""Progress bars that suit where they are written: tqdm's bar on a terminal, and periodic plain
lines (no carriage returns) when stderr is a file or a pipe, so logs stay readable.

Every progress bar of the package is made by ``progress_bar``, with tqdm's arguments. A bar is
shown only while the ``attnlab`` logger takes INFO lines (logs.py): ``--quiet``, or a library user
silencing the logger, hides the bars with the notes.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Iterable, TextIO

from tqdm.auto import tqdm

from . import logs

LOG_EVERY_S = 30.0  # a plain progress line at most this often, and none for shorter work


class _Lines:
    """A file for tqdm that turns its redraws (a carriage return, then the status) into whole
    lines, from LOG_EVERY_S seconds on: work that ends sooner leaves no progress in the log."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.start = time.monotonic()

    def write(self, text: str) -> None:
        line = text.replace("\r", "").strip()
        if line and time.monotonic() - self.start >= LOG_EVERY_S:
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(iterable: Iterable | None = None, **kwargs: Any) -> tqdm:
    """``tqdm(iterable, **kwargs)`` on a terminal; elsewhere a plain line every LOG_EVERY_S
    seconds and at the end, once the work has taken that long."""
    stream = kwargs.pop("file", None) or sys.stderr
    if not logs.shows():
        kwargs["disable"] = True
    if kwargs.get("disable") or _is_terminal(stream):
        return tqdm(iterable, file=stream, **kwargs)
    kwargs.update(dynamic_ncols=False, ncols=100, ascii=True, mininterval=LOG_EVERY_S, leave=True)
    return tqdm(iterable, file=_Lines(stream), **kwargs)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False
