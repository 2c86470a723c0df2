"""Flags that several commands share, each defined once, and the model and training flags
generated from the config dataclasses (one ``--dashed-name`` per field; their defaults come from
the chosen ``--preset`` and stage, and every help line says what that default is).

One name per idea: the labelled evaluation file is ``--eval-file`` and the output directory
``--out-dir`` in every command; the older names (``--file``, ``--dev-file``, ``--run-dir``,
``--out``) still work and say on stderr that they are deprecated.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from ..core import datafiles
from ..model.attention.registry import names as attention_names
from ..config.settings import (
    DEFAULT_CORPUS, DEFAULT_DEV, DEFAULT_TEST, DEFAULT_TRAIN, PRESETS, ModelConfig, TrainConfig, cli_fields,
    DEFAULT_PRESET, RENAMED_PRESETS, RESUMABLE, get_preset
)
from ..core.paths import PathError


class Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Appends "(default: X)" unless the help text already states its default; a help text
    with line breaks (a listing) keeps them, each line wrapped on its own. The flags marked
    ``advanced`` (most of the generated model and training flags) are left out of --help and
    shown by --help-all (``show_all``)."""

    def __init__(self, *args: Any, show_all: bool = False, **kw: Any):
        super().__init__(*args, **kw)
        self.show_all = show_all

    def _shown(self, actions) -> list:
        return [a for a in actions if self.show_all or not getattr(a, "advanced", False)]

    def add_usage(self, usage, actions, groups, prefix=None) -> None:
        super().add_usage(usage, self._shown(actions), groups, prefix)

    def add_arguments(self, actions) -> None:
        super().add_arguments(self._shown(actions))

    def _split_lines(self, text: str, width: int) -> list[str]:
        if "\n" not in text:
            return super()._split_lines(text, width)
        split = super()._split_lines
        return [part for line in text.splitlines() for part in split(line, width)]

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        short = getattr(action, "short_help", None)
        if short and not self.show_all:  # --help's shorter text; --help-all's is the whole one
            return short
        if "default" in text:
            return text
        return super()._get_help_string(action)


class Deprecated(argparse.Action):
    """An old flag name: stores into the new one's destination and says so on stderr."""

    def __init__(self, option_strings, dest, new: str = "", **kw):
        self.new = new
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest, None)
        if current is not None and current != parser.get_default(self.dest) and current != values:
            _given_twice(parser, self.new, current, option_string, values)  # --out-dir A --run-dir B
        _given(parser, namespace, self.dest, self.new, option_string, values)
        print(f"{parser.prog}: {option_string} is deprecated; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


class _Renamed(argparse._StoreAction):
    """The new name of a flag that has old ones: given with an old one, the values must agree."""

    def __call__(self, parser, namespace, values, option_string=None):
        _given(parser, namespace, self.dest, option_string, option_string, values)
        setattr(namespace, self.dest, values)


def _given(parser, namespace, dest: str, new: str, option: str, value: Any) -> None:
    """Record which name gave ``dest`` its value; one setting given under two of its names with
    different values (--run-dir B --out-dir A) is refused, exit code 2, before anything is done."""
    given = namespace.__dict__.setdefault("_renamed_flags_given", {})
    if dest in given and given[dest][0] != option and given[dest][1] != value:
        _given_twice(parser, new, given[dest][1], option, value, given[dest][0])
    given[dest] = (option, value)


def _given_twice(parser, new: str, first: Any, option: str, value: Any, first_option: str | None = None) -> None:
    parser.error(f"{first_option or new} {first} and {option} {value} set the same option ({new}; the other "
                 f"name is its old one) to different values: give it once")


def _renamed(parser: argparse.ArgumentParser, new: str, old: tuple[str, ...], **kw: Any) -> None:
    """``new`` with ``kw``; each ``old`` name still accepted (hidden from help, deprecated)."""
    action = parser.add_argument(new, action=_Renamed, **kw)
    for name in old:
        parser.add_argument(name, dest=action.dest, action=Deprecated, new=new, help=argparse.SUPPRESS,
                            default=argparse.SUPPRESS, metavar=action.metavar)


# ---- shared flags ------------------------------------------------------------------------------
# --help groups the options of every command under the same titles (issue 24, item 6): the
# command's own options first, then "model" and "training" (flags generated from the configs),
# then these; each shared flag below puts itself in its section.
DATA_SECTION = "data files"
OUTPUT_SECTION = "output"
MACHINE_SECTION = "machine"


def section(parser, title: str):
    """The argument group called ``title`` of ``parser`` (made on first use); a group passed in
    is used as it is (argparse groups do not nest)."""
    if not isinstance(parser, argparse.ArgumentParser):
        return parser
    found = [g for g in parser._action_groups if g.title == title]  # argparse has no public lookup
    return found[0] if found else parser.add_argument_group(title)


def device_name(text: str) -> str:
    """argparse type of --device: a device this machine has (devices.check_device)."""
    from ..core.devices import check_device

    try:
        return check_device(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def device(parser: argparse.ArgumentParser) -> None:
    section(parser, MACHINE_SECTION).add_argument("--device", default="auto", type=device_name,
                        help="cpu, cuda, cuda:N or auto (CUDA when there is one)")


def preset(parser: argparse.ArgumentParser, default: str = DEFAULT_PRESET, help: str = "") -> None:
    """--preset NAME, its help listing every preset on a line of its own (name, what it is for,
    size, expected time); a retired name is accepted with a note (``resolve_preset``)."""
    listing = "\n".join(f"  {p.summary()}" for p in PRESETS.values()).replace("%", "%%")
    text = help if "(default" in help else f"{help or 'named recipe'} (default: {default})"
    action = parser.add_argument("--preset", default=default, type=resolve_preset, choices=list(PRESETS),
                                 metavar="NAME", help=f"{text}; one of:\n{listing}")
    action.short_help = f"{text}; one of {', '.join(PRESETS)} (--help-all says what each is for)"


def resolve_preset(name: str) -> str:
    """A preset name as given, or a retired name's successor (with a one-line note on stderr);
    argparse's choices then refuse an unknown name as for every other choice."""
    if name in RENAMED_PRESETS:
        new = RENAMED_PRESETS[name]
        print(f"note: preset {name!r} is now called {new!r}; the old name will go away", file=sys.stderr)
        return new
    return name


def corpus(parser: argparse.ArgumentParser, help: str = "pretraining corpus, one document per line") -> None:
    section(parser, DATA_SECTION).add_argument("--corpus", default=DEFAULT_CORPUS.as_written, help=help)


def train_file(parser: argparse.ArgumentParser, help: str = "question<TAB>answer training file") -> None:
    section(parser, DATA_SECTION).add_argument("--train-file", default=DEFAULT_TRAIN.as_written, help=help)


def eval_file(parser: argparse.ArgumentParser, help: str, old: tuple[str, ...] = ()) -> None:
    """The labelled (or, for evaluate, possibly unlabelled) question file a command scores."""
    _renamed(section(parser, DATA_SECTION), "--eval-file", old, default=DEFAULT_DEV.as_written, help=help)


def out_dir(parser: argparse.ArgumentParser, default: str | None, help: str, old: tuple[str, ...] = ()) -> None:
    _renamed(section(parser, OUTPUT_SECTION), "--out-dir", old, default=default, help=help)


def resume(parser: argparse.ArgumentParser) -> None:
    section(parser, OUTPUT_SECTION).add_argument("--resume", action="store_true",
                        help="continue from the run directory's checkpoint (default: start afresh)")


def resume_or_overwrite(parser: argparse.ArgumentParser) -> None:
    """Training commands: what to do with an output directory that already holds a run
    (attnlab/training/rundir.py; the flags a resumed run may change are settings.RESUMABLE)."""
    group = section(parser, OUTPUT_SECTION).add_mutually_exclusive_group()
    resume = group.add_argument("--resume", action="store_true",
                       help="continue the run in the output directory from its checkpoint: the model, "
                            "schedule, data and settings are the checkpoint's (--preset is not used), and "
                            "a flag given must agree with them, except " + ", ".join(map(_flag, RESUMABLE)) +
                            " (--max-steps, --epochs: not ending before the checkpoint's step) (default: off)")
    resume.short_help = ("continue the run in the output directory from its checkpoint, with its settings "
                         "(--help-all: the flags it may change) (default: off)")
    group.add_argument("--overwrite", action="store_true",
                       help="replace the run in the output directory (checkpoint, metrics.jsonl, "
                            "config.json); without --resume or --overwrite a directory holding a "
                            "checkpoint is refused (default: off)")


def overwrite(parser: argparse.ArgumentParser, what: str) -> None:
    """Commands that write files: without --overwrite an existing output is refused (outputs.py)."""
    section(parser, OUTPUT_SECTION).add_argument("--overwrite", action="store_true",
                        help=f"replace {what} if it exists (default: off: an existing file is refused, "
                             "exit code 2, and left as it was)")


def mixing(parser: argparse.ArgumentParser) -> None:
    """What lm pretraining may mix in, and what it never may."""
    mix = parser.add_argument("--mix-qa", default=None, metavar="FILE",
                        help="question<TAB>answer file mixed into lm pretraining; needs --mix-ratio > 0 (given "
                             "without it, an error: it would mix nothing); its questions may not be asked in a "
                             f"--held-out file (default: {DEFAULT_TRAIN.as_written} when --mix-ratio > 0)")
    held = parser.add_argument("--held-out", nargs="*", default=[DEFAULT_DEV.as_written, DEFAULT_TEST.as_written],
                               metavar="FILE",
                               help="evaluation files whose people may never be mixed into training")
    mix.advanced = held.advanced = True  # --help-all: lm pretraining's mix (--mix-ratio is there too)


def mix_qa_file(args: argparse.Namespace, config: TrainConfig) -> str:
    """--mix-qa as used: refused when given with nothing to mix (a flag that would be silently
    inert), else the default training file. A resumed run's mix is the checkpoint's, checked
    there (rundir.check_data)."""
    if args.mix_qa is not None and config.mix_ratio <= 0 and not getattr(args, "resume", False):
        raise ValueError(f"--mix-qa {args.mix_qa} mixes nothing without --mix-ratio > 0 (preset "
                         f"{args.preset}: {config.mix_ratio:g}); give --mix-ratio R, or leave --mix-qa out")
    if args.mix_qa:
        _refuse_held_out_mix(args.mix_qa, args.held_out)
    facts = getattr(args, "fact_set", None)
    return args.mix_qa or (str(facts.train) if facts else datafiles.resolved_text(DEFAULT_TRAIN.as_written))


def _refuse_held_out_mix(mix_qa: str, held_out: list[str]) -> None:
    """A held-out file is never mixed into pretraining: a --held-out file, or the course's dev or
    test file (or a copy of one), whatever --held-out says. (A mix that merely shares questions
    with a --held-out file is refused later, naming the lines.)"""
    from ..core.paths import file_sha256

    if not Path(mix_qa).is_file():
        return  # the file checks name it
    course = [datafiles.resolved_text(f.as_written) for f in (DEFAULT_DEV, DEFAULT_TEST)]
    for held in [*course, *held_out]:
        same = Path(held).is_file() and Path(held).resolve() == Path(mix_qa).resolve()
        if same or (held in course and Path(held).is_file() and file_sha256(held) == file_sha256(mix_qa)):
            what = "is" if same else "has the content of"
            raise ValueError(f"--mix-qa {mix_qa}: {what} the held-out evaluation file {held}; only "
                             "training-file questions may be mixed into pretraining")


def attention_view(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--attention", default=None, choices=attention_names(),
                        help="use another variant of the same parameters, e.g. argmax (default: the checkpoint's)")


def data_dir(parser: argparse.ArgumentParser) -> None:
    """Every command: where ``data/NAME`` paths are read (resolve_data_paths, datafiles.py)."""
    action = section(parser, DATA_SECTION).add_argument("--data-dir", default=None, metavar="DIR",
                        help="directory holding the data files: data/NAME options read DIR/NAME "
                             f"(or ${datafiles.DATA_DIR_ENV}) (default: ./data if present, else the "
                             "installed package's data)")
    action.advanced = True  # --help-all


OUTPUT_OPTIONS = {"out_dir", "predictions", "image"}


# Data options a fact set supplies when they are left at the birthplace set's defaults: the
# option, its default, and the fact-set file that replaces it.
FACT_SET_OPTIONS = {"corpus": (DEFAULT_CORPUS, "corpus"), "evidence": (DEFAULT_CORPUS, "corpus"),
                    "train_file": (DEFAULT_TRAIN, "train"), "holdout_file": (DEFAULT_TRAIN, "train"),
                    "eval_file": (DEFAULT_DEV, "dev")}


def fact_set(parser: argparse.ArgumentParser) -> None:
    """Commands that read data files: --facts DIR supplies them (a run that learned a fact set
    supplies its own without the flag)."""
    group = section(parser, DATA_SECTION)
    group.add_argument("--facts", default=None, metavar="DIR",
                       help="a fact-set folder: its files for the data options (default: the run's own, else data/)")
    other = group.add_argument("--other-facts", action="store_true",
                               help="use --facts although the run learned another fact set (default: refused)")
    other.advanced = True  # --help-all


def apply_fact_set(args: argparse.Namespace) -> None:
    """In place: data options left at their defaults take the files of --facts, or of the fact
    set the command's run learned (data/factset.py, recorded). A --facts other than the run's
    own is refused unless --other-facts."""
    from ..data import factset

    if not hasattr(args, "facts"):  # a command that reads no data files
        return
    args.data_defaults = [option for option, (default, _) in FACT_SET_OPTIONS.items()
                          if getattr(args, option, None) == default.as_written]
    run = getattr(args, "checkpoint", None) or (getattr(args, "runs", None) or [None])[0]
    learned = factset.learned_record(run) if isinstance(run, str) and Path(run).exists() else None
    chosen = getattr(args, "facts", None)
    if chosen:  # the run's own set moved or copied is the same set: only its content counts
        facts = factset.load(_fact_set_dir(chosen))
        if learned is not None and not learned.same_as(facts) and not getattr(args, "other_facts", False):
            raise factset.DataError(str(chosen), None, f"{run} learned another fact set ({learned.name} at "
                                    f"{learned.path}); use that one, or ask for this one anyway (--other-facts)")
    else:
        facts = learned.load() if learned is not None else None
    if chosen and learned is not None:  # loading a learned run takes the set named (load_facts)
        args.load_facts = {"facts": str(facts.root), "other_facts": bool(getattr(args, "other_facts", False))}
    if facts is None:
        return
    args.fact_set = facts
    for option, (default, role) in FACT_SET_OPTIONS.items():
        if getattr(args, option, None) == default.as_written and role in facts.files:
            setattr(args, option, str(facts.files[role]))
    if getattr(args, "held_out", None) == [DEFAULT_DEV.as_written, DEFAULT_TEST.as_written]:
        args.held_out = [str(p) for p in facts.held_out]


def with_fact_set(args: argparse.Namespace, facts) -> argparse.Namespace:
    """A copy of ``args`` whose data options left at their defaults are the files of ``facts``
    (a FactSet; None: the course's files), resolved as ``resolve_data_paths`` resolves them: how
    a command of several runs (serve) reads the set each run learned, not the first run's."""
    copy = argparse.Namespace(**vars(args))
    copy.fact_set = facts
    for option in getattr(args, "data_defaults", ()):
        default, role = FACT_SET_OPTIONS[option]
        chosen = facts.files[role] if facts is not None and role in facts.files else default.as_written
        setattr(copy, option, datafiles.resolved_text(str(chosen)))
    return copy


def load_facts(args: argparse.Namespace) -> dict:
    """How ``attnlab.load`` takes the command's fact set: the folder --facts named (a moved copy
    of the run's own, or with --other-facts another set), else nothing (the run's record)."""
    return getattr(args, "load_facts", {})


def _fact_set_dir(path: str) -> Path:
    """A fact-set folder as given; ``data`` (the bundled set) also from any directory."""
    p = Path(path)
    if not (p / "facts.toml").exists() and p.parts[:1] == ("data",):
        return datafiles.resolve(Path(path) / "facts.toml").parent
    return p


def resolve_data_paths(args: argparse.Namespace) -> None:
    """Resolve, in place, every ``data/...`` and ``models/...`` value of parsed arguments, after
    applying the command's --data-dir (so the defaults work from any directory)."""
    datafiles.set_data_dir(getattr(args, "data_dir", None))
    for name, value in vars(args).items():
        if name in OUTPUT_OPTIONS:  # a file to write is where the user said, not in --data-dir
            continue
        if isinstance(value, str) and value:
            setattr(args, name, datafiles.resolved_text(value))
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            setattr(args, name, [datafiles.resolved_text(v) if v else v for v in value])


def config_file(parser: argparse.ArgumentParser) -> None:
    """Training commands: a run's settings as defaults (with_config_file, config_file.py)."""
    action = parser.add_argument("--config", default=None, metavar="FILE",
                                 help="settings from a run's config.json (or TOML of the same shape); flags "
                                      "given on the command line override them (default: none)")
    action.advanced = True  # --help-all


def with_config_file(parser: argparse.ArgumentParser, argv: list[str] | None,
                     args: argparse.Namespace) -> argparse.Namespace:
    """``args`` re-parsed with the --config file's settings as the command's defaults
    (precedence: preset < file < command line). The model table is left out when the command
    finetunes from --init (the pretrained checkpoint fixes the model). A bad file is a one-line
    error and exit code 2, as argparse's own errors are."""
    if not getattr(args, "config", None):
        return args
    from ..config.files import read_config_file
    from ..data.datasets import DataError

    try:
        values = read_config_file(args.config)
    except (DataError, PathError, OSError) as e:
        parser.exit(2, f"attnlab {args.command}: error: {one_line(e)}\n")
    command = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
    actions = {}
    for a in command._actions:  # the first, visible one of each destination (not --no-compile)
        if a.help != argparse.SUPPRESS:
            actions.setdefault(a.dest, a)
    from_init = "init" in actions and (args.init if args.init is not None else values.get("init"))
    unknown = _unknown_top_level(parser, values)
    if unknown:
        parser.exit(2, f"attnlab {args.command}: error: {args.config}: unknown setting {unknown!r} (settings are "
                       "the options of attnlab's commands and the model and train tables)\n")
    defaults = {}
    for key, value in values.items():
        section, _, name = key.rpartition(".")
        if name in actions and not (section == "model" and from_init):
            problem = _file_value_problem(actions[name], value)
            if problem:
                parser.exit(2, f"attnlab {args.command}: error: {args.config}: {key} {problem}\n")
            defaults[name] = value
    command.set_defaults(**defaults)
    return parse(parser, argv)


# Commands whose trailing texts (nargs="*") may also come after their options.
TRAILING_TEXTS = {"ask": "questions", "generate": "prompts"}


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, except that `ask RUN --json "Where was X born?"` works: argparse
    gives a nargs="*" positional nothing once an option came between, and then calls the text
    an unrecognized argument."""
    args, extra = parser.parse_known_args(argv)
    dest = TRAILING_TEXTS.get(getattr(args, "command", None))
    if extra and dest and not any(e.startswith("-") for e in extra):
        setattr(args, dest, [*getattr(args, dest), *extra])
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


RUN_RECORDS = {"stage"}  # what a run's config.json records beside its options


def _unknown_top_level(parser: argparse.ArgumentParser, values: dict[str, Any]) -> str | None:
    """A top-level key of a --config file that is no option of any command (a typo such as
    'corpsu' must not train on the default data), or None."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices.values()
    known = RUN_RECORDS | {a.dest for c in commands for a in c._actions}
    return next((key for key in values if "." not in key and key not in known), None)


def _file_value_problem(action: argparse.Action, value: Any) -> str | None:
    """What is wrong with a config file's ``value`` for an option (argparse applies neither
    ``type`` nor ``choices`` to defaults, so the file's values are checked here)."""
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction)):
        return None if isinstance(value, bool) else f"must be true or false, got {value!r}"
    if action.nargs in ("*", "+"):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return None if ok else f"must be a list of strings, got {value!r}"
    bound = getattr(action.type, "bound", None)
    if bound is not None:
        return bound.problem(value)
    if not isinstance(value, str):
        return f"must be a string, got {value!r}"
    if action.choices is not None and value not in action.choices:
        return f"must be one of {', '.join(action.choices)}, got {value!r}"
    if callable(action.type) and action.type is not str:
        try:
            action.type(value)
        except (argparse.ArgumentTypeError, ValueError) as e:
            return f"is refused ({e})"
    return None


def one_line(e: BaseException | str) -> str:
    """An error's message on one line (an OSError as 'path: reason')."""
    if isinstance(e, OSError) and e.filename is not None:
        return f"{e.filename}: {e.strerror}"
    return " ".join(str(e).splitlines())


def verbosity(parser: argparse.ArgumentParser) -> None:
    """Every command: how much it says besides its results (attnlab/core/logs.py)."""
    g = section(parser, OUTPUT_SECTION).add_mutually_exclusive_group()  # one "output" group a command
    g.add_argument("-q", "--quiet", action="store_true",
                   help="print only results, warnings and errors: no progress bars or notes (default: off)")
    g.add_argument("-v", "--verbose", action="store_true",
                   help="also print details: the options resolved, the device, each file read (default: off)")


def cpu_settings(parser: argparse.ArgumentParser) -> None:
    action = section(parser, MACHINE_SECTION).add_argument("--cpu-settings", action=argparse.BooleanOptionalAction, default=True,
                        help="apply the process-wide CPU settings first: flush denormals, keep freed "
                             "memory (attnlab/core/cpu_settings.py) (default: on)")
    action.advanced = True  # --help-all


# ---- flags generated from the config dataclasses ---------------------------------------------
def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def readable(value: Any) -> str:
    """A default as help shows it: a float to 3 significant digits (0.17024174327545114 -> 0.17)."""
    return str(float(f"{value:.3g}")) if isinstance(value, float) else str(value)


def _preset_default(field: dataclasses.Field, stages: tuple[str, ...]) -> str:
    """'cpu15: X; ...; spec: Y' for a field across presets (model fields or training stages), or
    'X in every preset' when they agree. Finetuning's two stages differ in some presets: their
    values read 'X from --init, Y from scratch'."""
    parts = []
    for p in PRESETS.values():
        if p.name == "tiny":
            continue
        if not stages:
            value = readable(p.model.get(field.name, field.default))
        else:
            values = [readable(getattr(getattr(p, s), field.name)) for s in stages]
            value = values[0] if len(set(values)) == 1 else ", ".join(
                f"{v} {_STAGE_WORDS.get(s, s)}" for v, s in zip(values, stages))
        parts.append((p.name, value))
    if len({value for _, value in parts}) == 1:
        return f"{parts[0][1]} in every preset"
    return "; ".join(f"{name}: {value}" for name, value in parts)


_STAGE_WORDS = {"finetune": "from --init", "finetune_scratch": "from scratch"}


# The generated flags --help shows; --help-all shows every one (issue 45: pretrain --help was
# 343 lines). The rest keep their defaults from --preset, and a --config file may set any of them.
COMMON_FIELDS = {"attention", "qa_format", "epochs", "max_steps", "minutes", "batch_size", "learning_rate", "seed"}
SHORT_HELP = {  # --help's text of a common flag whose whole text is long (--help-all shows that)
    "max_steps": "stop after this many optimiser steps of the full schedule (resumable to more steps; "
                 "0 = run all epochs)",
    "minutes": "fit pretraining into this many minutes of training on this machine (0 = run all --epochs)",
    "qa_format": "how the model answers: direct or recall (--help-all says how each works)",
}


class HelpAll(argparse.Action):
    """--help-all: the command's help with every flag, then exit (as --help does)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(format_help_all(parser), end="", file=sys.stdout)
        parser.exit()


def format_help_all(parser: argparse.ArgumentParser) -> str:
    """A command's help with every flag (--help-all; the CLI reference, scripts/gen_reference.py)."""
    kept = parser.formatter_class
    parser.formatter_class = lambda prog: Formatter(prog, show_all=True)
    try:
        return parser.format_help()
    finally:
        parser.formatter_class = kept


def help_all(parser: argparse.ArgumentParser) -> None:
    """--help-all on a command that has flags --help leaves out."""
    if any(getattr(a, "advanced", False) for a in parser._actions):
        parser.add_argument("--help-all", action=HelpAll,
                            help="show every option: --help shows the common ones (the model and training "
                             "settings it leaves out keep their defaults from --preset)")


def model_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model (defaults from --preset)")
    for f in cli_fields(ModelConfig):
        _add_field(group, f, _preset_default(f, ()))


def train_flags(parser: argparse.ArgumentParser, stages: tuple[str, ...]) -> None:
    """The training fields of ``stages``, and --config FILE to take them from a run's
    config.json; --device is the shared flag (``device``)."""
    config_file(parser)
    group = parser.add_argument_group("training (defaults from --preset)")
    for f in cli_fields(TrainConfig):
        if f.name == "device" or not set(stages) & set(f.metadata.get("stages", stages)):
            continue  # a pretraining-only setting (objective, mixing) is no finetuning flag
        _add_field(group, f, _preset_default(f, stages))
    device(parser)


_SWITCHES = {"compile", "amp"}  # on/off/auto settings that also get a --no-NAME shorthand


class AttentionChoices(list):
    """The --attention choices: the variants' names (listed in help and errors), and any path
    form FILE.py:ClassName or package.module:ClassName (loaded when the model is built;
    docs/guides/your-attention.md)."""

    def __contains__(self, value: object) -> bool:
        from ..model.attention import plugin

        if isinstance(value, str) and plugin.is_plugin(value):
            try:
                return bool(plugin.split(value))
            except plugin.PluginError:
                return False
        return list.__contains__(self, value)


def attention_choices() -> AttentionChoices:
    return AttentionChoices([*attention_names(), "FILE.py:ClassName"])


# Names whose choices live in a package the config module cannot import (it imports config).
_CHOICES = {"attention": attention_choices}


def _add_field(group, f: dataclasses.Field, default_text: str) -> None:
    """The flag of a config field: a switch for a bool, else parsed and checked by the field's
    bound (a number) or choices (a name), so a bad value is refused as it is parsed."""
    help_text = f"{f.metadata['help']} (default: {default_text})"
    if f.type in ("bool", bool):
        added = [group.add_argument(_flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction,
                                    default=None, help=help_text)]
    else:
        choices = _CHOICES[f.name]() if f.name in _CHOICES else f.metadata.get("choices")
        kind = f.metadata["bound"].argtype() if "bound" in f.metadata else str
        added = [group.add_argument(_flag(f.name), dest=f.name, type=kind, default=None, choices=choices,
                                    metavar=None if choices else f.name.upper(), help=help_text)]
        if f.name in _SWITCHES:
            added.append(group.add_argument(_flag(f"no_{f.name}"), dest=f.name, action="store_const", const="off",
                                            help=f"shorthand for {_flag(f.name)} off (default: {default_text})"))
    for action in added:
        action.advanced = f.name not in COMMON_FIELDS  # --help-all only
        if f.name in SHORT_HELP:
            action.short_help = f"{SHORT_HELP[f.name]} (default: {default_text})"
        if "; " in default_text:  # --help: the default preset's value; --help-all: every preset's
            ours = next((v for v in default_text.split("; ") if v.startswith(f"{DEFAULT_PRESET}: ")), None)
            if ours:
                action.short_help = (getattr(action, "short_help", None) or action.help).replace(
                    default_text, f"from --preset; {ours}")


def overrides(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The config fields given on the command line."""
    return {f.name: getattr(args, f.name) for f in cli_fields(cls) if getattr(args, f.name, None) is not None}


def model_config_from(args: argparse.Namespace) -> ModelConfig:
    return ModelConfig(**{**get_preset(args.preset).model, **overrides(args, ModelConfig)})


def train_config_from(args: argparse.Namespace, stage: str) -> TrainConfig:
    return dataclasses.replace(getattr(get_preset(args.preset), stage), preset=args.preset,
                               **overrides(args, TrainConfig))


# ---- flags generated from settings objects (attnlab/facts/settings.py) ------------------------
def settings_flags(parser, cls: type, help: dict[str, str] | None = None) -> None:
    """One flag per field of the settings dataclass ``cls``, with the field's default, help text
    (or ``help[name]`` for this command) and parser: its bound, its choices, or ``parse``."""
    for f in dataclasses.fields(cls):
        kind = f.metadata["bound"].argtype() if "bound" in f.metadata else f.metadata.get("parse", str)
        parser.add_argument(_flag(f.name), dest=f.name, type=kind, default=f.default,
                            choices=f.metadata.get("choices"), help=(help or {}).get(f.name, f.metadata["help"]))


def settings_from(args: argparse.Namespace, cls: type):
    """The settings object of ``cls`` from the flags ``settings_flags`` added."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})
