"""What a command hands back besides its files: ``--json`` documents, and failure of its own goal.

``--json`` (``add_json_flag``): the command's human output goes to stderr and stdout carries one
JSON document, the dictionary the command gave ``publish`` (keys documented in
docs/guides/no-surprises.md), printed by the error handler once the command has succeeded.
A command that streams (``ask`` reading stdin) writes JSON lines itself to ``stdout(args)``.

``GoalNotMet``: the command ran but did not do what it was asked (an edit that does not take,
an evaluation that answered nothing, a pretraining whose loss became NaN). The error handler
prints ``attnlab COMMAND: failed: REASON`` and exits with code 1 (bad input is code 2); the
command raises it before writing its outputs, so nothing half-made is left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from typing import Any, Iterator, TextIO

from .flags import OUTPUT_SECTION, section

EXIT_FAILED = 1


class GoalNotMet(Exception):
    """The command's goal was not reached: a one-line reason, exit code 1."""


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    section(parser, OUTPUT_SECTION).add_argument("--json", action="store_true",
                        help="print one JSON document on stdout (the human output goes to stderr) "
                             "(default: off)")


def wants_json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))


def publish(args: argparse.Namespace, document: dict[str, Any]) -> None:
    """The command's JSON document, printed when it ends well (``--json`` only)."""
    args.json_document = document


def stdout(args: argparse.Namespace) -> TextIO:
    """The real standard output, also while --json sends the human output to stderr."""
    return getattr(args, "real_stdout", None) or sys.stdout


@contextlib.contextmanager
def human_output_aside(args: argparse.Namespace) -> Iterator[None]:
    """With --json, what the command prints goes to stderr while it runs."""
    if not wants_json(args):
        yield
        return
    args.real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        yield


def print_document(args: argparse.Namespace) -> None:
    document = getattr(args, "json_document", None)
    if wants_json(args) and document is not None:
        print(dumps(document), file=stdout(args), flush=True)


def dumps(document: Any, **kwargs: Any) -> str:
    """JSON text; NaN and infinities (an undefined AUROC, a diverged loss) become null, which
    every JSON reader accepts."""
    return json.dumps(_finite(document), allow_nan=False, default=str, **kwargs)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
