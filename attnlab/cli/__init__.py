"""`attnlab <command>`: one parser assembled from the command modules, one error handler.

Commands are grouped by job, a module each: training.py (pretrain, finetune), answering.py
(evaluate, ask, baseline), experiments.py (demo, compare, variants, plot), probing.py (generate,
attention, explore), trust.py (calibrate, audit; the abstention flags of evaluate and ask),
facts.py (trace, edit), serving.py (serve), checking.py (check-attention), interop.py (export),
synth.py (synth). Each module has ``register(command)``, where
``command(name, help, fn)`` returns the argparse parser of a new subcommand that runs
``fn(args)``; a new command module joins the program with one line in ``COMMANDS``. Flags that
several commands share are defined once, in flags.py. The commands are thin layers over the
library (pipeline.py, experiments.py, ...), which never imports this package.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from .._version import __version__
from ..core import logs
from . import (answering, checking, experiments, facts, flags, interop, learning, probing, results, serving, synth,
               training, trust)
from .flags import model_config_from, train_config_from  # noqa: F401  (the library-facing helpers)

# The registration hooks, in the order the commands are listed in `attnlab --help`.
COMMANDS: list[Callable] = [learning.register, training.register, answering.register, experiments.register, probing.register,
                             trust.register, facts.register, serving.register, checking.register, interop.register,
                             synth.register]


# The last line of each command's --help: one command that runs as written from the checkout
# (tests/test_docs.py parses each).
EXAMPLES = {
    "learn": "attnlab learn examples/facts/islands --minutes 5 --out-dir runs/islands",
    "pretrain": "attnlab pretrain --preset cpu --out-dir runs/pretrain",
    "finetune": "attnlab finetune --preset cpu --init runs/pretrain --out-dir runs/finetune",
    "evaluate": "attnlab evaluate models/cpu --eval-file data/birth_dev.tsv --stored",
    "ask": 'attnlab ask models/cpu "Where was Alfred Mele born?"',
    "baseline": "attnlab baseline --eval-file data/birth_dev.tsv",
    "demo": "attnlab demo --out-dir runs/demo",
    "compare": "attnlab compare --variants vanilla,rotary --seeds 3 --out-dir runs/compare",
    "variants": "attnlab variants",
    "plot": "attnlab plot runs/pretrain runs/finetune --image runs/curves.png",
    "generate": 'attnlab generate models/cpu "Alfred Mele."',
    "attention": 'attnlab attention models/cpu "Where was Alfred Mele born?" --out-dir runs/maps',
    "explore": "attnlab explore",
    "calibrate": "attnlab calibrate models/cpu --out-dir runs/calibrate",
    "audit": "attnlab audit models/cpu --out-dir runs/audit",
    "trace": 'attnlab trace models/cpu "Where was Alfred Mele born?" --out-dir runs/trace',
    "edit": 'attnlab edit models/cpu --person "Alfred Mele" --place Paris --out-dir runs/edited',
    "edits": "attnlab edits runs/edited",
    "serve": "attnlab serve models/cpu --port 8000",
    "check-attention": "attnlab check-attention examples/attention/rotary.py:RotaryAttention --same-as rotary",
    "export": "attnlab export models/cpu --to transformer-lens runs/cpu-tl",
    "synth": "attnlab synth bios --people 200 --multi 5 --permute --fullname --out-dir runs/bios",
}


class Parser(argparse.ArgumentParser):
    """argparse's parser with its errors on one line, like every other error of the program:
    ``attnlab COMMAND: error: argument --flag: problem``, exit code 2 (the usage is in --help)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="attnlab", formatter_class=flags.Formatter,
        description="Pretrain, finetune and probe small character-level transformers on fact sets: "
                    "what they store and how they retrieve it (the course's birthplace task by default; "
                    "`attnlab learn DIR` for your own).",
        epilog="Run `attnlab COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, fn: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        example = f"example:\n  {EXAMPLES[name]}" if name in EXAMPLES else None
        p = sub.add_parser(name, help=help, description=help, formatter_class=flags.Formatter, epilog=example)
        p.set_defaults(func=fn)
        made.append(p)
        return p

    made: list[argparse.ArgumentParser] = []
    for register in COMMANDS:
        register(command)
    for p in made:  # last, so that --help shows a command's own options first
        if any(a.dest in flags.FACT_SET_OPTIONS or a.dest == "held_out" for a in p._actions):
            flags.fact_set(p)
        flags.data_dir(p)
        flags.cpu_settings(p)
        flags.verbosity(p)
        flags.help_all(p)  # every command has flags --help leaves out (--data-dir, --cpu-settings)
    return parser


def main(argv: list[str] | None = None, *, process_settings: bool = False) -> int:
    """Run one subcommand. ``process_settings``: first apply the process-wide CPU settings
    (attnlab/core/cpu_settings.py) unless the command is given --no-cpu-settings; the program does,
    library calls (tests) do not."""
    parser = build_parser()
    args = flags.with_config_file(parser, argv, flags.parse(parser, argv))  # --config FILE as defaults
    try:
        flags.apply_fact_set(args)  # --facts DIR, or the run's own fact set, for the data options
    except ValueError as e:
        print(f"attnlab {args.command}: error: {flags.one_line(e)}", file=sys.stderr)
        return 2
    flags.resolve_data_paths(args)  # data/NAME from any directory, or --data-dir
    if process_settings and args.cpu_settings:
        from ..core import cpu_settings

        cpu_settings.apply()
    return run(args)


def run(args: argparse.Namespace) -> int:
    """The one error handler: bad input is a one-line error per problem and exit code 2.
    ValueError covers the library's input errors (DataError, VocabError, CheckpointError,
    PathError, ...); OSError a file that cannot be read or written (a full disk), by its name;
    SafetensorError a checkpoint that could not be written (reading one is a CheckpointError).
    A command that ran but missed its goal (results.GoalNotMet, a diverged training run) exits
    1; with --json the command's document is printed once it has succeeded (results.py).
    --quiet and --verbose set the package logger's level for the command (attnlab/core/logs.py)."""
    from safetensors import SafetensorError

    try:
        with results.human_output_aside(args), logs.level(_verbosity(args)):
            logs.detail(f"attnlab {args.command}: {_options(args)}")
            code = args.func(args) or 0
        results.print_document(args)
        return code
    except (results.GoalNotMet, ValueError, OSError, SafetensorError) as e:
        if _missed_its_goal(e):  # it ran, but did not do what it was asked (no output left)
            print(f"attnlab {args.command}: failed: {flags.one_line(e)}", file=sys.stderr)
            return results.EXIT_FAILED
        for message in getattr(e, "messages", None) or [_described(e, args)]:
            print(f"attnlab {args.command}: error: {flags.one_line(message)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _verbosity(args: argparse.Namespace) -> int:
    """The log level of one command: --quiet, --verbose or neither (attnlab/core/logs.py)."""
    return logs.level_for(getattr(args, "quiet", False), getattr(args, "verbose", False))


def _options(args: argparse.Namespace) -> str:
    """Every option as resolved (flags, config file, preset defaults), for --verbose."""
    plain = (str, int, float, bool, list, tuple, type(None))
    shown = {k: v for k, v in sorted(vars(args).items()) if k != "command" and isinstance(v, plain)}
    return ", ".join(f"{k}={v!r}" for k, v in shown.items())


def _missed_its_goal(e: BaseException) -> bool:
    """GoalNotMet, or a training run whose loss diverged (train.Diverged: its weights are not
    saved), told without importing torch for commands that never train."""
    train = sys.modules.get(f"{__name__.rpartition('.')[0]}.training.trainer")
    return isinstance(e, results.GoalNotMet) or (train is not None and isinstance(e, train.Diverged))


def _described(e: BaseException, args: argparse.Namespace) -> str:
    """The message of an error; a failed write that names no file (deep in a library) says
    which output directory it was writing."""
    out_dir = getattr(args, "out_dir", None)
    if isinstance(e, OSError) and e.filename is None and out_dir:
        return f"{out_dir}: {e.strerror or e}"
    if not isinstance(e, (ValueError, OSError)):  # SafetensorError
        return f"{out_dir or '.'}: a checkpoint could not be written ({flags.one_line(e)})"
    return flags.one_line(e)


def entry() -> int:
    """The `attnlab` program (console script, ``python -m attnlab``, torchrun). Ctrl-C while
    it starts (importing torch, reading flags) ends it quietly too, with exit code 130."""
    try:
        return main(process_settings=True)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(entry())
