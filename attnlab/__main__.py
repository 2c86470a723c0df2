"""`python -m attnlab` and the `attnlab` command (pyproject.toml's console script)."""

import sys


def main() -> int:
    """The program. Importing the command line loads torch, which takes seconds: a Ctrl-C then
    ends it with exit code 130 and no traceback, as a Ctrl-C later does (cli.entry)."""
    try:
        from .cli import entry
    except KeyboardInterrupt:
        return 130
    return entry()


if __name__ == "__main__":
    sys.exit(main())
