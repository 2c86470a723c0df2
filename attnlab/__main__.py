"""`python -m attnlab` and the `attnlab` command (pyproject.toml's console script)."""

import signal
import sys


def main() -> int:
    """The program. Importing the command line loads torch, which takes seconds: a Ctrl-C then
    ends it with exit code 130 and no traceback, as a Ctrl-C later does (cli.entry). Once the
    command is over, Ctrl-C is ignored: the interpreter's shutdown (torch's atexit callbacks)
    is left to finish, instead of printing "Exception ignored in atexit callback"."""
    try:
        from .cli import entry
    except KeyboardInterrupt:
        return 130
    try:
        return entry()
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
