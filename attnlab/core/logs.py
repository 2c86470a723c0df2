"""The package's log lines, through Python's ``logging``: one logger, ``attnlab``.

Three kinds of line, each a level of that logger:

- ``result``: what a command was asked for (a training run's summary, a score, a results
  table), at level RESULT (25, between INFO and WARNING), so ``--quiet`` keeps them;
- ``note``: what the work is doing (starting, resuming, which rule was chosen), at INFO;
- ``detail``: what ``--verbose`` adds (the options resolved, the device, the files read), at DEBUG.

Until someone configures it, the logger writes each line as it is, to the standard output of
the moment (``sys.stdout`` looked up per line, so a redirection such as ``--json``'s applies),
or to stderr for a line given ``stderr=True`` and for warnings; it does not pass lines on to the
root logger, so a program's own logging set-up shows none twice. Library users silence the
package with ``logging.getLogger("attnlab").setLevel(logging.ERROR)``, or route its lines into
their own handlers by removing this one (``logger.handlers.clear()``) and setting
``logger.propagate = True``. Progress bars (progress.py) follow the same switch: they are shown
only while the logger takes INFO lines.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Callable, Iterator

LOGGER_NAME = "attnlab"
RESULT = 25
logging.addLevelName(RESULT, "RESULT")

logger = logging.getLogger(LOGGER_NAME)


class ConsoleHandler(logging.Handler):
    """Each line as it is (no level, no time), to the current stdout (stderr: warnings and
    lines logged with ``extra={"to_stderr": True}``), flushed so a pipe sees it at once."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            to_stderr = getattr(record, "to_stderr", False) or record.levelno >= logging.WARNING
            stream = sys.stderr if to_stderr else sys.stdout
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # logging's convention: a failing handler never stops the program
            self.handleError(record)


def _install_default() -> None:
    if not logger.handlers:  # a program that set up its own before importing attnlab keeps them
        logger.addHandler(ConsoleHandler())
        logger.propagate = False
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)


_install_default()


def result(message: str, *, stderr: bool = False) -> None:
    """A line of what was asked for: kept by --quiet."""
    logger.log(RESULT, message, extra={"to_stderr": stderr})


def note(message: str, *, stderr: bool = False) -> None:
    """A line about the work under way: the default ``log`` of the library's long functions."""
    logger.info(message, extra={"to_stderr": stderr})


def detail(message: str, *, stderr: bool = True) -> None:
    """A line only --verbose shows (on stderr unless told otherwise)."""
    logger.debug(message, extra={"to_stderr": stderr})


def warn(message: str) -> None:
    """A warning, on stderr; --quiet keeps it."""
    logger.warning(message)


def results_via(log: Callable[[str], None]) -> Callable[[str], None]:
    """Where a function given ``log`` sends its result lines: the caller's own ``log`` when it
    passed one (it receives every line), else ``result`` (so --quiet keeps them)."""
    return result if log is note else log


def warnings_via(log: Callable[[str], None]) -> Callable[[str], None]:
    """Where a function given ``log`` sends its warnings: the caller's own ``log`` when it passed
    one, else ``warn`` (so --quiet keeps them)."""
    return warn if log is note else log


def shows(level: int = logging.INFO) -> bool:
    """Whether lines of ``level`` are shown now (progress bars ask for INFO)."""
    return logger.isEnabledFor(level)


def level_for(quiet: bool = False, verbose: bool = False) -> int:
    """--quiet: results, warnings and errors only; --verbose: every detail; else notes too."""
    return RESULT if quiet else logging.DEBUG if verbose else logging.INFO


@contextlib.contextmanager
def level(value: int) -> Iterator[None]:
    """The logger at ``value`` for a while (one command), then as it was."""
    before = logger.level
    logger.setLevel(value)
    try:
        yield
    finally:
        logger.setLevel(before)
