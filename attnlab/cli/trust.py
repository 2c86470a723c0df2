"""Trust commands: `calibrate` and `audit`, and the abstention flags that `evaluate` and `ask`
take (``add_abstain_flags``, ``check_abstain_flags``, ``abstain_in_evaluation``,
``given_in_ask``; answering.py calls them). The work lives in the library: trust/calibrate.py
(``calibrate``), trust/audit.py (``audit``), calibration.py and abstention.py."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Callable, Sequence

from ..trust.policy import DEFAULT_HOLDOUT, MODE_HELP, AbstainPolicy
from ..core import bounds, logs, paths
from ..core.outputs import refuse_existing
from . import flags, tables
from .results import add_json_flag, publish

MAX_INVENTED = 100_000  # audit --names

Log = Callable[[str], None]


# ---- abstention flags of evaluate and ask ------------------------------------------------------
RUN_DEFAULT = "the run's: auto when it records held-out people (finetune --holdout-fraction), else names"


def add_abstain_flags(parser: argparse.ArgumentParser, default: str = "off") -> None:
    """One flag per field of ``AbstainPolicy`` (its flag, help text and default), so the flags
    and the policy ``calibrate`` saves are one definition. ``--abstain`` takes the modes but
    ``below``, which ``--abstain-below P`` chooses; its default is the command's, ``default``:
    off, auto, or "run" (``rule_for_run``: the rule that works for the run at hand). The numbers
    are read as plain numbers and checked when the command starts (``check_abstain_flags``)."""
    g = parser.add_argument_group("abstention (\"I don't know\")")
    parser.set_defaults(abstain_default=default)
    shown = RUN_DEFAULT if default == "run" else default
    for f in dataclasses.fields(AbstainPolicy):
        kind = f.metadata["bound"].kind if "bound" in f.metadata else str
        options = dict(dest=_dest(f), type=kind, default=f.default, metavar=f.metadata.get("metavar"),
                       help=f.metadata["help"])
        if f.name == "mode":  # below is chosen by its threshold, --abstain-below P, so not offered here
            offered = {mode: text for mode, text in MODE_HELP.items() if mode != "below"}
            modes = "; ".join(f"{mode}: {text}" for mode, text in offered.items())
            options.update(choices=list(offered), default=None,
                           help=f"(default: {shown}) {modes} (a confidence threshold alone: --abstain-below P)")
        g.add_argument(_flag(f), **options)


def _flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _dest(f: dataclasses.Field) -> str:
    """The attribute of the parsed arguments that holds field ``f``."""
    return _flag(f)[2:].replace("-", "_")


def check_abstain_flags(args: argparse.Namespace) -> None:
    """Refuse bad abstention flags before any work is done (ValueError: exit 2)."""
    from ..trust.calibration import check_probability

    if args.abstain_below is not None:
        check_probability(args.abstain_below, "--abstain-below")
        if args.abstain in ("auto", "names"):
            raise ValueError(f"give either --abstain-below P or --abstain {args.abstain}, not both")
    check_probability(args.keep_right, "--keep-right")
    if args.holdout_fraction is not None and not 0 < args.holdout_fraction < 1:
        raise ValueError(f"--holdout-fraction must lie in (0, 1), got {args.holdout_fraction}")


def check_abstain_files(args: argparse.Namespace) -> None:
    """The file a fitted rule is fitted on (--abstain auto or names), before any work is done."""
    from ..data.datasets import read_questions

    if abstain_mode(args) in ("auto", "names", "run"):
        read_questions(paths.input_file(args.holdout_file, "--holdout-file"), labelled=True)


def abstain_mode(args: argparse.Namespace) -> str:
    """below (--abstain-below P), auto or off; --abstain's default depends on the command."""
    if args.abstain_below is not None:
        return "below"
    return args.abstain or args.abstain_default


def rule_for_run(args: argparse.Namespace, run: str, meta: dict, log: Log) -> None:
    """Settle the default "run" of --abstain for the loaded run, saying which rule and why:
    auto needs people held out from finetuning to fit its confidence threshold on; a run
    without them (e.g. the shipped model) gets names, whose fit does not need them."""
    if abstain_mode(args) != "run":
        return
    recorded = float((meta.get("train_config") or {}).get("holdout_fraction") or 0.0)
    args.abstain = "auto" if recorded > 0 else "names"
    why = (f"it records holding out the last {recorded:g} of its training file" if recorded > 0 else
           "it records no people held out from finetuning, so a confidence threshold could only be "
           "fitted on people it trained on (optimistic)")
    log(f"--abstain {args.abstain} (the default for {run}: {why}; --abstain off|auto|names to choose)")


def abstaining(args: argparse.Namespace) -> bool:
    return abstain_mode(args) != "off"


def holdout_fraction_for(args: argparse.Namespace, run: str, meta: dict, log: Log) -> float:
    """The held-out share: the flag, else the run's recorded one; says when the run does not
    record holding those people out (its fits are then optimistic)."""
    recorded = float((meta.get("train_config") or {}).get("holdout_fraction") or 0.0)
    fraction = args.holdout_fraction or recorded or DEFAULT_HOLDOUT
    if recorded != fraction:
        log(f"note: {run} does not record holding out the last {fraction:g} of {args.holdout_file} from "
            "finetuning (finetune --holdout-fraction); if it trained on them, the fit is optimistic")
    return fraction


def policy_from_args(args: argparse.Namespace) -> AbstainPolicy:
    """The abstention flags (checked: check_abstain_flags) as a policy; an unsettled "run"
    default (rule_for_run) fits both thresholds, as auto does."""
    mode = abstain_mode(args)
    values = {f.name: getattr(args, _dest(f)) for f in dataclasses.fields(AbstainPolicy)}
    return AbstainPolicy(**{**values, "mode": "auto" if mode == "run" else mode})


def rule_from_args(args: argparse.Namespace, model, vocab, run: str, meta: dict, log: Log):
    """The rule (trust/abstention.py ``Rule``) the abstention flags ask for, or None."""
    policy = policy_from_args(args)
    if policy.mode in ("auto", "names"):
        holdout_fraction_for(args, run, meta, log)  # says when the run does not record its held-out people
    return policy.rule(model, vocab, meta)


def _given(args, answers) -> tuple:
    """The rule (or None) and whether each answer is given."""
    from ..model.checkpoint import load_model
    from ..trust.abstention import decide, people_of
    from ..core.devices import resolve_device

    model, vocab, ckpt = load_model(args.checkpoint, device=str(resolve_device(getattr(args, "device", "auto"))))
    rule_for_run(args, args.checkpoint, ckpt.meta, logs.note)
    rule = rule_from_args(args, model, vocab, args.checkpoint, ckpt.meta, logs.note)
    if rule is None:
        return None, [True] * len(answers)
    names = people_of(answers_as_examples(answers), model) if rule.needs_familiarity else [""] * len(answers)
    return rule, decide(model, vocab, rule, names, [a.confidence for a in answers])


def answers_as_examples(answers):
    from ..data.datasets import QAExample

    return [QAExample(a.question, None, "<question>", i + 1) for i, a in enumerate(answers)]


def abstain_in_evaluation(args: argparse.Namespace, answers, out: Path, log: Log = logs.result) -> dict | None:
    """`evaluate`: beside the course's score (every question answered), the abstention figures
    of a rule: questions answered, abstained, and right among the answered (also returned, for
    --json). With the run's default rule the predictions stay the course's; a rule the user
    chose (--abstain, --abstain-below) also rewrites them with an empty line for each withheld
    answer (input order kept). The default rule is an extra the command was not asked for: when
    it cannot be fitted for this run (no --holdout-file, questions or characters the run cannot
    read), a note says so and the evaluation stands (None returned)."""
    chosen = abstain_mode(args) != "run"
    try:
        rule, given = _given(args, answers)
    except (ValueError, OSError) as e:  # DataError, VocabError, PathError are ValueErrors
        if chosen:
            raise
        logs.note(f"abstention figures not measured: {flags.one_line(e)} (choose a rule with --abstain or "
                  "--abstain-below, or skip them with --abstain off)")
        return None
    if chosen:
        from ..answering.evaluate import write_predictions

        write_predictions(out, [a.answer if ok else "" for a, ok in zip(answers, given)])
    figures = abstention_figures(rule, given, answers, read_qa_labels(args.eval_file))
    log(_figures_line(figures) + (f"; predictions (withheld: empty line) in {out}" if chosen else
                                  "; the predictions answer every question (the course's metric)"))
    return figures


def read_qa_labels(path) -> list[str | None]:
    from ..data.datasets import read_qa

    return [e.answer for e in read_qa(path)]


def abstention_figures(rule, given: Sequence[bool], answers, labels: Sequence[str | None]) -> dict:
    """How a rule's abstention fares on a question file: ``answered``, ``abstained``, and
    ``answered_correct`` (right among the answered; None without labels)."""
    k = sum(given)
    right = None
    if all(label is not None for label in labels):
        right = sum(ok and a.answer == label for a, label, ok in zip(answers, labels, given))
    return {"rule": rule.describe(), "questions": len(answers), "answered": k, "abstained": len(answers) - k,
            "answered_correct": right}


def _figures_line(f: dict) -> str:
    n, k, right = f["questions"], f["answered"], f["answered_correct"]
    line = (f"abstention: {f['rule']}\n  answered {k}/{n} ({100 * k / n:.1f}% coverage), abstained "
            f"{f['abstained']}/{n}")
    if right is not None:
        line += f", {right}/{k} ({100 * right / k if k else 0:.1f}%) correct on the answered questions"
    return line


def given_in_ask(args: argparse.Namespace, model, log: Log | None = None) -> Callable[[Sequence], list[bool]]:
    """`ask`: a function telling, for a list of answers of the loaded ``model`` (api.py),
    whether each is given (False: shown as "I don't know"). The rule is fitted once, before
    the first question, and told on stderr, so that stdout keeps one line per question."""
    log = log or (lambda message: logs.note(message, stderr=True))
    rule_for_run(args, args.checkpoint, model.checkpoint.meta, log)
    if not abstaining(args):
        return lambda answers: [True] * len(answers)
    rule = rule_from_args(args, model.gpt, model.vocab, args.checkpoint, model.checkpoint.meta, log)
    log(rule.describe())
    from ..trust.abstention import decide, people_of

    def given(answers: Sequence) -> list[bool]:
        names = people_of(answers_as_examples(answers), model.gpt) if rule.needs_familiarity else [""] * len(answers)
        return decide(model.gpt, model.vocab, rule, names, [a.confidence for a in answers])

    return given


# ---- calibrate ---------------------------------------------------------------------------------
def cmd_calibrate(args: argparse.Namespace) -> int:
    from ..model.checkpoint import load_model
    from ..core.devices import resolve_device
    from ..trust.abstention import Rule
    from ..trust.calibrate import CALIBRATE_FILES, calibrate

    check_abstain_flags(args)
    examples = _labelled(args.eval_file)
    check_abstain_files(args)
    out = _out_dir(args, "calibrate", CALIBRATE_FILES)
    model, vocab, ckpt = load_model(args.checkpoint, device=str(resolve_device(args.device)))
    rule_for_run(args, args.checkpoint, ckpt.meta, logs.note)
    rule = rule_from_args(args, model, vocab, args.checkpoint, ckpt.meta, logs.note) or Rule(how="--abstain off")
    result = calibrate(model, vocab, examples, rule, out, title=f"{args.checkpoint} on {args.eval_file}",
                       policy=policy_from_args(args), batch_size=args.batch_size, overwrite=args.overwrite)
    report, chosen = result.report, result.report["rule"]
    print(f"{args.eval_file}: {report['right']}/{report['total']} correct; confidence of the greedy answer "
          "against right/wrong")
    print("\n".join(report_lines(report)))
    k, kept, n = chosen["answered"], chosen["answered_right"], report["total"]
    print(f"{chosen['describe']}\n  on {args.eval_file}: answered {k}/{n} ({100 * k / n:.1f}% coverage), "
          f"{kept}/{k} ({100 * kept / max(1, k):.1f}%) correct; {kept}/{report['right']} of the right answers kept")
    print(f"wrote {out / 'reliability.png'}, {out / 'coverage.png'}, {out / 'calibration.json'} and "
          f"{out / 'answers.tsv'} (each answer, its confidence, and whether the rule answers it)")
    publish(args, {**report, "eval_file": str(args.eval_file), "written": [str(out / f) for f in CALIBRATE_FILES]})
    return 0


def _labelled(path) -> list:
    """calibrate's question file: every line labelled, to tell right from wrong."""
    from ..data.datasets import DataError, read_questions

    examples = read_questions(paths.input_file(path, "--eval-file"))
    unlabelled = next((e for e in examples if e.answer is None), None)
    if unlabelled is not None:
        raise DataError(unlabelled.source, unlabelled.line,
                        "no place label: calibrate needs question<TAB>place lines to tell right from wrong")
    return examples


def _out_dir(args: argparse.Namespace, name: str, files: list[str]) -> Path:
    """--out-dir (default: RUN/NAME, or runs/RUN_NAME/NAME for a shipped model), checked, with
    none of ``files`` there unless --overwrite, before any work is done."""
    from ..model.shipped import output_dir

    out = paths.output_dir(args.out_dir or output_dir(args.checkpoint) / name, "--out-dir")
    refuse_existing([out / f for f in files], args.overwrite)
    return out


def _share(k: int, n: int) -> str:
    """'k/n (p%)', or 'k/0' when there is nothing to share."""
    return f"{k}/{n} ({k / n:.1%})" if n else f"{k}/0"


def report_lines(report: dict) -> list[str]:
    from ..trust.calibrate import auroc_text
    from ..trust.calibration import N_BINS

    overall = report["right"] / report["total"]
    lines = [f"ECE ({N_BINS} equal-width bins): {report['ece']:.3f}",
             f"AUROC of confidence, right vs wrong: {auroc_text(report['auroc'])}",
             "the most confident answers, by coverage:"]
    rows = []
    for c, v in report["accuracy_at_coverage"].items():
        acc = v["right"] / v["answered"]
        rows.append([f"{float(c):.0%}", str(v["answered"]), str(v["right"]), f"{acc:.1%}",
                     f"{acc / overall:.2f}" if overall else "-"])
    header = ["coverage", "answered", "right", "accuracy", "x overall"]
    return lines + tables.table(header, rows, right=range(len(header)), indent="  ").split("\n")


# ---- audit -------------------------------------------------------------------------------------
def cmd_audit(args: argparse.Namespace) -> int:
    from ..trust.audit import AUDIT_FILES, audit, invent_people
    from ..model.checkpoint import load_model
    from ..data.datasets import documents, read_corpus, read_qa, read_questions

    _check_names(args.names)
    check_abstain_flags(args)
    docs = documents(read_corpus(paths.input_file(args.corpus, "--corpus")))
    dev = read_questions(paths.input_file(args.eval_file, "--eval-file"), labelled=True)
    read_questions(paths.input_file(args.train_file, "--train-file"), labelled=True)
    read_questions(paths.input_file(args.holdout_file, "--holdout-file"), labelled=True)
    out = _out_dir(args, "audit", AUDIT_FILES)
    invented = invent_people(docs, args.names, args.seed, source=args.corpus)
    model, vocab, ckpt = load_model(args.checkpoint, device=args.device)
    fraction = holdout_fraction_for(args, args.checkpoint, ckpt.meta, logs.note)
    rule_for_run(args, args.checkpoint, ckpt.meta, logs.note)
    result = audit(model, vocab, invented, dev, read_qa(args.train_file, labelled=True), policy_from_args(args),
                   fraction, out, batch_size=args.batch_size, overwrite=args.overwrite)
    print(f"{len(invented)} invented people (seed {args.seed}; first names and surnames of {args.corpus} "
          f"people, no line of which contains the full name), e.g. {', '.join(invented[:3])}; "
          f"{len(dev)} dev people of {args.eval_file}, {sum(result.answers.dev_right)} answered correctly")
    _print_audit(args, result)
    print(f"wrote {out / 'audit.png'}, {out / 'audit.json'} and {out / 'invented.txt'} (name, answer, confidence)")
    publish(args, {**result.summary(), "written": [str(out / f) for f in AUDIT_FILES]})
    return 0


def _print_audit(args: argparse.Namespace, result) -> None:
    """Each fitted rule as a table row, the chosen rule's report, the places made up with no
    abstention, and the name echo."""
    from ..trust.audit import FITTED

    print(f"rules fitted for the target: answer {args.keep_right:.0%} of the held-out people's right answers")
    rows = [[label, _share(r.invented_abstained, r.invented), _share(r.dev_abstained, r.dev),
             _share(r.dev_right_kept, r.dev_right)] for label, r in
            ((FITTED[key], result.fitted[key]) for key in FITTED)]
    print(tables.table(["abstain on", "invented abstained", "dev abstained", "dev right kept"], rows,
                       right=(1, 2, 3), indent="  "))
    print("\n" + "\n".join(result.chosen.lines()))
    print("\nwith no abstention, places answered for invented people:\n" + "\n".join(result.never.lines()[4:]))
    print(f"guided by the name? {result.echo} (real people: {args.train_file} and {args.eval_file})")


def _check_names(names: int) -> None:
    """audit --names: a positive count that decodes in sane time, before any work."""
    if names <= 0:
        raise ValueError(f"--names must be a positive number of people, got {names}")
    if names > MAX_INVENTED:
        raise ValueError(f"--names must be at most {MAX_INVENTED:,} (minutes of decoding on a CPU already), "
                         f"got {names}")


# ---- registration ------------------------------------------------------------------------------
def register(command) -> None:
    p = command("calibrate", "how much the confidence is worth: ECE, AUROC, accuracy at coverage, "
                "reliability and coverage plots, and the fitted abstention rule", cmd_calibrate)
    p.add_argument("checkpoint", help="checkpoint file or run directory")
    flags.eval_file(p, "labelled question<TAB>place file", old=("--file",))
    flags.out_dir(p, None, "directory for reliability.png, coverage.png, calibration.json, answers.tsv "
                  "(default: RUN/calibrate; runs/NAME/calibrate for a shipped model)", old=("--out",))
    flags.overwrite(p, "the files of an earlier calibrate in --out-dir")
    add_json_flag(p)
    p.add_argument("--batch-size", type=bounds.positive_int, default=256, help="questions decoded together")
    flags.device(p)
    add_abstain_flags(p, default="run")

    p = command("audit", "ask about invented people: how often the model abstains, and which places it "
                "makes up, against dev people", cmd_audit)
    p.add_argument("checkpoint", help="checkpoint file or run directory")
    p.add_argument("--names", type=int, default=500, help="number of invented people")
    p.add_argument("--seed", type=bounds.seed, default=0, help="seed of the invented names")
    flags.out_dir(p, None, "directory for audit.png, audit.json, invented.txt (default: RUN/audit; "
                  "runs/NAME/audit for a shipped model)", old=("--out",))
    flags.overwrite(p, "the files of an earlier audit in --out-dir")
    add_json_flag(p)
    flags.corpus(p, "corpus whose names are recombined")
    flags.eval_file(p, "labelled file of real people to compare with", old=("--dev-file",))
    flags.train_file(p, "file whose 10 most frequent places are compared")
    p.add_argument("--batch-size", type=bounds.positive_int, default=256, help="questions decoded together")
    flags.device(p)
    add_abstain_flags(p, default="run")
