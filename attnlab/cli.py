"""`attnlab <command>`: argument parsing onto the functions of pipeline.py and friends.

Model and training flags are generated from the config dataclasses (one ``--dashed-name``
per field); their defaults come from the chosen ``--preset`` and stage, and every help line
says what that default is.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any, Callable

from .config import PRESETS, ModelConfig, TrainConfig, cli_fields, get_preset

STAGES = {"pretrain": "pretrain", "finetune": "finetune", "scratch": "finetune_scratch"}


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Appends "(default: X)" unless the help text already states its default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text:
            return text
        return super()._get_help_string(action)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _preset_default(field: dataclasses.Field, stages: tuple[str, ...]) -> str:
    """'spec: X, quick: Y' for a field across presets (model fields or training stages)."""
    parts = []
    for preset in PRESETS.values():
        if preset.name == "tiny":
            continue
        if not stages:
            value = preset.model.get(field.name, field.default)
        else:
            values = {getattr(getattr(preset, s), field.name) for s in stages}
            value = "/".join(str(v) for v in sorted(values, key=str))
        parts.append(f"{preset.name}: {value}")
    return "; ".join(parts)


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model (defaults from --preset)")
    for f in cli_fields(ModelConfig):
        _add_field(group, f, _preset_default(f, ()))


def add_train_flags(parser: argparse.ArgumentParser, stages: tuple[str, ...]) -> None:
    group = parser.add_argument_group("training (defaults from --preset)")
    for f in cli_fields(TrainConfig):
        if not set(stages) & set(f.metadata.get("stages", stages)):
            continue  # a pretraining-only setting (objective, mixing) is no finetuning flag
        _add_field(group, f, _preset_default(f, stages))


_SWITCHES = {"compile", "amp"}  # on/off/auto settings that also get a --no-NAME shorthand


def _add_field(group, f: dataclasses.Field, default_text: str) -> None:
    help_text = f"{f.metadata['help']} (default: {default_text})"
    if f.type in ("bool", bool):
        group.add_argument(_flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction,
                           default=None, help=help_text)
    else:
        kind = {"int": int, "float": float, "str": str}.get(str(f.type), str)
        group.add_argument(_flag(f.name), dest=f.name, type=kind, default=None,
                           metavar=f.name.upper(), help=help_text)
        if f.name in _SWITCHES:
            group.add_argument(_flag(f"no_{f.name}"), dest=f.name, action="store_const", const="off",
                               help=f"shorthand for {_flag(f.name)} off (default: {default_text})")


def _overrides(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    return {f.name: getattr(args, f.name) for f in cli_fields(cls) if getattr(args, f.name, None) is not None}


def model_config_from(args: argparse.Namespace) -> ModelConfig:
    preset = get_preset(args.preset)
    return ModelConfig(**{**preset.model, **_overrides(args, ModelConfig)})


def train_config_from(args: argparse.Namespace, stage: str) -> TrainConfig:
    base = getattr(get_preset(args.preset), stage)
    return dataclasses.replace(base, **_overrides(args, TrainConfig))


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="quick", choices=[p for p in PRESETS],
                        help="named configuration: spec = the course's numbers, quick = CPU-sized, "
                             "tiny = seconds, for tests")


# ---- commands ------------------------------------------------------------------------------
def cmd_pretrain(args: argparse.Namespace) -> int:
    from . import distributed
    from .pipeline import pretrain

    env, device = distributed.setup(args.device or "auto")
    config = train_config_from(args, "pretrain")
    try:
        pretrain(model_config_from(args), dataclasses.replace(config, device=device),
                 corpus=args.corpus, run_dir=args.run_dir or f"runs/pretrain-{args.attention or 'vanilla'}",
                 resume=args.resume, log=_main_log(env), mix_qa=args.mix_qa,
                 held_out=tuple(args.held_out), eval_file=args.eval_file or None)
    finally:
        distributed.teardown()
    return 0


def cmd_finetune(args: argparse.Namespace) -> int:
    from . import distributed
    from .pipeline import evaluate_file, finetune

    env, device = distributed.setup(args.device or "auto")
    stage = "finetune" if args.init else "finetune_scratch"
    config = dataclasses.replace(train_config_from(args, stage), device=device)
    run_dir = Path(args.run_dir or f"runs/finetune-{args.attention or 'vanilla'}{'' if args.init else '-scratch'}")
    try:
        finetune(config, run_dir=run_dir, init=args.init,
                 model_config=None if args.init else model_config_from(args),
                 overrides=_overrides(args, ModelConfig) if args.init else None,
                 corpus=args.corpus, train_file=args.train_file, resume=args.resume, log=_main_log(env),
                 eval_file=args.eval_file or None)
        if args.eval_file:  # split across ranks; rank 0 writes the predictions
            evaluate_file(run_dir, args.eval_file, device=device)
    finally:
        distributed.teardown()
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from . import distributed
    from .pipeline import evaluate_file

    overrides = {"attention": args.attention} if args.attention else {}
    _env, device = distributed.setup(args.device)  # under torchrun each rank decodes a share
    try:
        evaluate_file(args.checkpoint, args.file, out=args.out, device=device,
                      batch_size=args.batch_size, overrides=overrides,
                      stored_corpus=args.corpus if args.stored else None)
    finally:
        distributed.teardown()
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    from .checkpoint import load_model
    from .data import QAExample
    from .evaluate import answer_questions
    from .devices import resolve_device

    if args.questions:
        items = [(q, "<argument>", i + 1) for i, q in enumerate(args.questions)]
    else:
        items = [(line.strip(), "<stdin>", i + 1) for i, line in enumerate(sys.stdin) if line.strip()]
    if not items:
        print("no questions: pass them as arguments or one per line on stdin", file=sys.stderr)
        return 2
    model, vocab, _ = load_model(args.checkpoint, device=str(resolve_device(args.device)))
    examples = [QAExample(q, None, src, line) for q, src, line in items]
    index = None
    if args.evidence:
        from .data import read_text
        from .evidence import CorpusIndex

        index = CorpusIndex(read_text(args.evidence).split("\n"))
    for a in answer_questions(model, vocab, examples):
        note = "" if a.complete else " (unfinished: no closing mark within 32 characters)"
        line = f"{a.question}\t{a.answer}\tconfidence {a.confidence:.2f}{note}"
        if index is not None:
            line += f"\t{index.find(a.question, a.answer).verdict}"
        if a.recalled is not None:  # recall format: what the model wrote of the person first
            line += f"\trecalled: {a.recalled!r}"
        print(line)
    return 0


def cmd_baseline(args: argparse.Namespace) -> int:
    from .pipeline import baseline

    place, result = baseline(args.train_file, args.file)
    if result is None:
        print(f'most frequent place in {args.train_file}: "{place}"; {args.file} has no labels, '
              "so no accuracy can be computed")
    else:
        print(f'most frequent place in {args.train_file}: "{place}"; always answering it on '
              f"{args.file}: {result}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .pipeline import demo

    demo(args.preset, out=args.out, attention=args.attention, device=args.device, shipped=args.shipped or None)
    return 0


def _main_log(env) -> Callable[[str], None]:
    return print if env.is_main else (lambda _msg: None)


# ---- parser --------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnlab", formatter_class=_Formatter,
        description="Pretrain, finetune and probe small character-level transformers on the "
                    "birth-place knowledge-access task.",
        epilog="Run `attnlab COMMAND --help` for a command's options.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, fn) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, formatter_class=_Formatter)
        p.set_defaults(func=fn)
        return p

    p = command("pretrain", "span-corruption pretraining on the corpus", cmd_pretrain)
    _common(p)
    p.add_argument("--corpus", default="data/wiki.txt", help="pretraining corpus, one document per line")
    p.add_argument("--run-dir", default=None, help="output directory (default: runs/pretrain-ATTENTION)")
    p.add_argument("--resume", action="store_true", help="continue from the run directory's checkpoint (default: start afresh)")
    p.add_argument("--mix-qa", default="data/birth_places_train.tsv", metavar="FILE",
                   help="question<TAB>place file mixed into lm pretraining when --mix-ratio > 0; its "
                        "questions may not be asked in a --held-out file")
    p.add_argument("--held-out", nargs="*", default=["data/birth_dev.tsv", "data/birth_test_inputs.tsv"],
                   metavar="FILE", help="evaluation files whose people may never be mixed into training")
    p.add_argument("--eval-file", default="data/birth_dev.tsv",
                   help="labelled file scored every --eval-every steps ('' to skip)")
    add_model_flags(p)
    add_train_flags(p, ("pretrain",))

    p = command("finetune", "finetune on birth-place questions (from --init, or from scratch)", cmd_finetune)
    _common(p)
    p.add_argument("--init", default=None, help="pretrained checkpoint or run directory (default: none, no pretraining)")
    p.add_argument("--corpus", default="data/wiki.txt", help="corpus that defines the vocabulary when there is no --init")
    p.add_argument("--train-file", default="data/birth_places_train.tsv", help="question<TAB>place training file")
    p.add_argument("--eval-file", default="data/birth_dev.tsv", help="labelled file to score after training ('' to skip)")
    p.add_argument("--run-dir", default=None, help="output directory (default: runs/finetune-ATTENTION[-scratch])")
    p.add_argument("--resume", action="store_true", help="continue from the run directory's checkpoint (default: start afresh)")
    add_model_flags(p)
    add_train_flags(p, ("finetune", "finetune_scratch"))

    p = command("evaluate", "answer a question file greedily; score it if it has labels", cmd_evaluate)
    p.add_argument("checkpoint", help="checkpoint file or run directory")
    p.add_argument("--file", default="data/birth_dev.tsv", help="questions, with or without <TAB>place labels")
    p.add_argument("--out", default=None, help="predictions file (default: RUN_DIR/predictions-FILESTEM.txt)")
    p.add_argument("--attention", default=None, help="evaluate with another variant of the same parameters, e.g. argmax (default: the checkpoint's)")
    p.add_argument("--batch-size", type=int, default=256, help="questions decoded together")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument("--stored", action="store_true",
                   help="also report stored facts: for people whose place is written in their corpus "
                        "line, does greedy completion of the line up to the place reproduce it "
                        "(default: answers only)")
    p.add_argument("--corpus", default="data/wiki.txt", help="corpus for --stored")

    p = command("ask", "answer questions typed as arguments or on stdin, with a confidence", cmd_ask)
    p.add_argument("checkpoint", help="checkpoint file or run directory")
    p.add_argument("questions", nargs="*", help='questions such as "Where was Ada Lovelace born?" (default: read stdin)')
    p.add_argument("--evidence", default="data/wiki.txt", metavar="CORPUS",
                   help="corpus in which to check whether each answer is stated about the person "
                        "('' to skip) (default: data/wiki.txt)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")

    p = command("baseline", "score the training file's most frequent place on a labelled file", cmd_baseline)
    p.add_argument("--train-file", default="data/birth_places_train.tsv", help="file whose most frequent place is the answer")
    p.add_argument("--file", default="data/birth_dev.tsv", help="file to score")

    p = command("demo", "the main job: baseline, no pretraining, a recipe trained now and the shipped "
                "model, scored on dev (extracted and stored)", cmd_demo)
    p.add_argument("--preset", default="demo", choices=list(PRESETS),
                   help="recipe trained from scratch (demo: the cpu recipe cut to fit 15 minutes on 2 cores)")
    p.add_argument("--shipped", default="models/cpu", help="shipped model scored beside it ('' to skip)")
    p.add_argument("--out", default="runs/demo", help="output directory")
    p.add_argument("--attention", default="vanilla", help="attention variant to demonstrate")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")

    from . import explore

    p = command("explore", "the mathematics of attention, checked numerically (claim, numbers, verdict)",
                explore.main)
    explore.add_arguments(p)

    for extra in _feature_commands() + _EXTRA_COMMANDS:
        extra(command)
    return parser


def _feature_commands() -> list[Callable]:
    """Feature modules that register their own subcommands: fn(command) -> None."""
    from . import attention_maps as maps, sample, variants

    return [variants.register, sample.register, maps.register]


_EXTRA_COMMANDS: list[Callable] = []


def main(argv: list[str] | None = None, *, process_settings: bool = False) -> int:
    """Run one subcommand. ``process_settings``: first apply the process-wide CPU settings
    (attnlab/cpu_settings.py) unless the command asks for the plain path (--no-fast); the
    program does, library calls (tests) do not."""
    from .data import DataError
    from .checkpoint import CheckpointError
    from .vocab import VocabError

    args = build_parser().parse_args(argv)
    if process_settings and getattr(args, "fast", None) is not False:  # None: not given
        from . import cpu_settings

        cpu_settings.apply()
    try:
        return args.func(args) or 0
    except (DataError, VocabError, CheckpointError, FileNotFoundError, ValueError) as e:
        print(f"attnlab {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def entry() -> int:
    """The `attnlab` program (console script, ``python -m attnlab``, torchrun)."""
    return main(process_settings=True)


if __name__ == "__main__":
    sys.exit(entry())
