"""Trust commands: `calibrate` and `audit`, and the abstention flags that `evaluate` and `ask`
take (``add_abstain_flags``, ``check_abstain_flags``, ``abstain_in_evaluation``,
``given_in_ask``; answering.py calls them). The work lives in the library: trust/calibrate.py
(``calibrate``), trust/audit.py (``audit``), calibration.py and abstention.py."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Callable, Sequence

from ..trust.policy import DEFAULT_HOLDOUT, DEFAULT_MODE, MODE_HELP, AbstainPolicy
from ..core import bounds, logs, paths
from ..core.outputs import refuse_existing
from . import flags, tables
from .results import add_json_flag, publish

MAX_INVENTED = 100_000  # audit --names

Log = Callable[[str], None]


# ---- abstention flags of evaluate and ask ------------------------------------------------------
def add_abstain_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per field of ``AbstainPolicy`` (its flag, help text and default), so the flags
    and the policy ``calibrate`` saves are one definition, and every command's default is the
    policy's (mode run: the run's rule). ``--abstain`` takes the modes but ``below``, which
    ``--abstain-below P`` chooses. The numbers are read as plain numbers and checked when the
    command starts (``check_abstain_flags``)."""
    g = parser.add_argument_group("abstention (\"I don't know\")")
    for f in dataclasses.fields(AbstainPolicy):
        kind = f.metadata["bound"].kind if "bound" in f.metadata else str
        options = dict(dest=_dest(f), type=kind, default=f.default, metavar=f.metadata.get("metavar"),
                       help=f.metadata["help"])
        if f.name == "mode":  # below is chosen by its threshold, --abstain-below P, so not offered here
            offered = {mode: text for mode, text in MODE_HELP.items() if mode != "below"}
            modes = "; ".join(f"{mode}: {text}" for mode, text in offered.items())
            options.update(choices=list(offered), default=None,
                           help=f"(default: {DEFAULT_MODE}) {modes} (a confidence threshold alone: --abstain-below P)")
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
        if args.abstain is not None and args.abstain != "off":
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
    """below (--abstain-below P), else --abstain, else the policy's default (run)."""
    if args.abstain_below is not None:
        return "below"
    return args.abstain or DEFAULT_MODE


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
    """The abstention flags (checked: check_abstain_flags) as a policy."""
    values = {f.name: getattr(args, _dest(f)) for f in dataclasses.fields(AbstainPolicy)}
    return AbstainPolicy(**{**values, "mode": abstain_mode(args)})


def resolved_policy(args: argparse.Namespace, run: str, meta: dict, log: Log) -> AbstainPolicy:
    """The flags' policy with the default settled for the run, saying which rule and why when
    it is the default, and when a fit reads people the run may have trained on."""
    policy, why = policy_from_args(args).resolved(meta)
    if why:
        log(f"--abstain {policy.mode} (the default for {run}: {why}; --abstain off|auto|names to choose)")
    if policy.mode in ("auto", "names"):
        holdout_fraction_for(args, run, meta, log)
    return policy


def rule_from_args(args: argparse.Namespace, model, run: str, log: Log):
    """The rule (trust/abstention.py ``Rule``) the abstention flags ask for, or None, for a
    ``LoadedModel`` (api.py): read from the run's stored fit when it matches, else fitted."""
    return model.rule_for(resolved_policy(args, run, model.checkpoint.meta, log))


def _given(args, answers) -> tuple:
    """The rule (or None) and whether each answer is given."""
    from ..api import load
    from ..trust.abstention import decide_answers
    from ..core.devices import resolve_device

    model = load(args.checkpoint, device=str(resolve_device(getattr(args, "device", "auto"))),
                 **flags.load_facts(args))
    rule = rule_from_args(args, model, args.checkpoint, logs.note)
    if rule is None:
        return None, [True] * len(answers)
    return rule, decide_answers(model.gpt, model.vocab, rule, answers)


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
    ``answered_correct`` (right among the answered), ``wrong_withheld`` and Kalai's score
    (``kalai``, calibration.py ``kalai_scores``) under the rule (None without labels)."""
    k = sum(given)
    figures = {"rule": rule.describe(), "questions": len(answers), "answered": k, "abstained": len(answers) - k,
               "answered_correct": None, "wrong_withheld": None, "wrong": None, "kalai": None}
    if all(label is not None for label in labels):
        from ..trust.calibration import kalai_scores

        right = [a.answer == label for a, label in zip(answers, labels)]
        figures.update(answered_correct=sum(ok and r for r, ok in zip(right, given)),
                       wrong_withheld=sum(not ok and not r for r, ok in zip(right, given)),
                       wrong=right.count(False), kalai=kalai_scores(right, given))
    return figures


def kalai_line(answers, labels: Sequence[str | None], log: Log = logs.result) -> dict | None:
    """`evaluate`: Kalai's score with every question answered, beside the accuracy (None and no
    line without labels)."""
    if not answers or any(label is None for label in labels):
        return None
    from ..trust.calibration import kalai_scores, kalai_text

    scores = kalai_scores([a.answer == label for a, label in zip(answers, labels)])
    log(f"Kalai score (+1 right, -t/(1-t) wrong, 0 abstained), every question answered: "
        f"{kalai_text(scores, len(answers))}")
    return scores


def _figures_line(f: dict) -> str:
    from ..trust.calibration import kalai_text

    n, k, right = f["questions"], f["answered"], f["answered_correct"]
    line = (f"abstention: {f['rule']}\n  answered {k}/{n} ({100 * k / n:.1f}% coverage), abstained "
            f"{f['abstained']}/{n}")
    if right is not None:
        line += (f", {right}/{k} ({100 * right / k if k else 0:.1f}%) correct on the answered questions, "
                 f"{f['wrong_withheld']}/{f['wrong']} wrong answers withheld\n  Kalai score under the rule: "
                 f"{kalai_text(f['kalai'], n)}")
    return line


def given_in_ask(args: argparse.Namespace, model, log: Log | None = None) -> Callable[[Sequence], list[bool]]:
    """`ask`: a function telling, for a list of answers of the loaded ``model`` (api.py),
    whether each is given (False: shown as "I don't know"). The rule is fitted once, before
    the first question, and told on stderr, so that stdout keeps one line per question."""
    log = log or (lambda message: logs.note(message, stderr=True))
    rule = rule_from_args(args, model, args.checkpoint, log)
    if rule is None:
        return lambda answers: [True] * len(answers)
    log(rule.describe())
    from ..trust.abstention import decide_answers

    def given(answers: Sequence) -> list[bool]:
        return decide_answers(model.gpt, model.vocab, rule, answers)

    return given


# ---- calibrate ---------------------------------------------------------------------------------
def cmd_calibrate(args: argparse.Namespace) -> int:
    from ..api import load
    from ..core.devices import resolve_device
    from ..trust.abstention import Rule
    from ..trust.calibrate import CALIBRATE_FILES, calibrate
    from ..trust.stored import stored_correction

    check_abstain_flags(args)
    examples = _labelled(args.eval_file)
    check_abstain_files(args)
    out = _out_dir(args, "calibrate", CALIBRATE_FILES)
    model = load(args.checkpoint, device=str(resolve_device(args.device)), **flags.load_facts(args))
    policy = model.own_policy(resolved_policy(args, args.checkpoint, model.checkpoint.meta, logs.note))
    stored = _fit_and_store(args, model, policy, out)
    rule = model.rule_for(policy) or Rule(how="--abstain off")
    result = calibrate(model.gpt, model.vocab, examples, rule, out, title=f"{args.checkpoint} on {args.eval_file}",
                       policy=policy, correction=stored_correction(stored), batch_size=args.batch_size,
                       overwrite=args.overwrite)
    report, chosen = result.report, result.report["rule"]
    print(f"{args.eval_file}: {report['right']}/{report['total']} correct; confidence of the greedy answer "
          "against right/wrong")
    print("\n".join(report_lines(report)))
    k, kept, n = chosen["answered"], chosen["answered_right"], report["total"]
    print(f"{chosen['describe']}\n  on {args.eval_file}: answered {k}/{n} ({100 * k / n:.1f}% coverage), "
          f"{kept}/{k} ({100 * kept / max(1, k):.1f}%) correct; {kept}/{report['right']} of the right answers kept, "
          f"{n - report['right'] - (k - kept)}/{n - report['right']} of the wrong ones withheld")
    print(f"wrote {', '.join(str(out / f) for f in CALIBRATE_FILES[:-1])} and {out / CALIBRATE_FILES[-1]} "
          "(answers.tsv: each answer, its confidence, and whether the rule answers it)")
    publish(args, {**report, "eval_file": str(args.eval_file), "written": [str(out / f) for f in CALIBRATE_FILES]})
    return 0


def store_fitted_rule(run_dir: Path, train_file, device, log: Log) -> Path:
    """After finetuning with people held out: fit the default policy's rules and the confidence
    correction on them and store them with the run (abstention.json), so ask reads them."""
    from ..api import load
    from ..trust.stored import fit_for_storing, stored_path, write_stored

    model = load(run_dir, device=str(device))
    policy = model.own_policy(AbstainPolicy(holdout_file=str(train_file)))
    path = write_stored(stored_path(run_dir), fit_for_storing(model.gpt, model.vocab, model.checkpoint.meta, policy))
    log(f"abstention rules fitted on the held-out people, stored in {path} (ask and evaluate read them)")
    return path


def _fit_and_store(args: argparse.Namespace, model, policy, out: Path) -> dict:
    """Fit the rules and the confidence correction on the held-out people once, write abstention.json into
    ``out`` and, for a run directory (a shipped model stays as shipped), beside its checkpoint,
    where ask, evaluate and serve read it; the fit, which ``model`` now holds."""
    import json

    from ..core.outputs import write_output
    from ..model.shipped import is_shipped
    from ..trust.stored import STORED_NAME, fit_for_storing, stored_path, write_stored

    text = fit_for_storing(model.gpt, model.vocab, model.checkpoint.meta, policy, batch_size=args.batch_size)
    write_output(out / STORED_NAME, text, args.overwrite)
    if not is_shipped(args.checkpoint):
        logs.note(f"stored the fitted rules with the run: {write_stored(stored_path(args.checkpoint), text)}")
    model.stored = json.loads(text)
    return model.stored


def _labelled(path) -> list:
    """calibrate's question file: every line labelled, to tell right from wrong."""
    from ..data.datasets import DataError, read_questions

    examples = read_questions(paths.input_file(path, "--eval-file"))
    unlabelled = next((e for e in examples if e.answer is None), None)
    if unlabelled is not None:
        raise DataError(unlabelled.source, unlabelled.line,
                        "no answer label: calibrate needs question<TAB>answer lines to tell right from wrong")
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
    from ..trust.calibration import N_BINS, Correction, chance_text, kalai_text

    overall = report["right"] / report["total"]
    corrected = ("" if report.get("ece_corrected") is None else
                 f"; {report['ece_corrected']:.3f} after the correction fitted on the held-out training people "
                 f"({Correction.from_dict(report['correction']).describe()})")
    n = report["total"]
    span = report.get("ece_corrected_by_chance") or report.get("ece_by_chance")
    lines = [f"ECE ({N_BINS} equal-width bins): {report['ece']:.3f}{corrected}",
             *([f"  {chance_text(span, n)}{' (the corrected one)' if report.get('ece_corrected') is not None else ''}"]
               if span else []),
             f"Kalai score (+1 right, -t/(1-t) wrong, 0 abstained), every question answered: "
             f"{kalai_text(report['kalai'], n)}"]
    if "rule" in report:
        lines.append(f"  under the abstention rule: {kalai_text(report['rule']['kalai'], n)}")
    lines += [f"AUROC of confidence, right vs wrong: {auroc_text(report['auroc'])}",
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
    from ..trust.audit import AUDIT_FILES, audit, audit_words, invent_people, name_parts
    from ..trust.stored import read_stored
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
    policy = resolved_policy(args, args.checkpoint, ckpt.meta, logs.note)
    rules = policy.fitted(model, vocab, ckpt.meta, read_stored(args.checkpoint))  # the rules ask reads
    result = audit(model, vocab, invented, dev, read_qa(args.train_file, labelled=True), policy, rules, out,
                   batch_size=args.batch_size, overwrite=args.overwrite)
    who, _, _ = words = audit_words(model)
    print(f"{len(invented)} invented {who} (seed {args.seed}; {name_parts(docs)[3]} of {args.corpus}, "
          f"no line of which contains the whole name), e.g. {', '.join(invented[:3])}; "
          f"{len(dev)} dev questions of {args.eval_file}, {sum(result.answers.dev_right)} answered correctly")
    _print_audit(args, result, words)
    print(f"wrote {out / 'audit.png'}, {out / 'audit.json'} and {out / 'invented.txt'} (name, answer, confidence)")
    publish(args, {**result.summary(), "written": [str(out / f) for f in AUDIT_FILES]})
    return 0


def _print_audit(args: argparse.Namespace, result, words: tuple[str, str, str]) -> None:
    """Each fitted rule as a table row, the chosen rule's report, the answers made up with no
    abstention, and the name echo (``words``: audit_words)."""
    from ..trust.audit import FITTED

    print(f"rules fitted for the target: answer {args.keep_right:.0%} of new people's right answers")
    rows = [[label, _share(r.invented_abstained, r.invented), _share(r.dev_abstained, r.dev),
             _share(r.dev_right_kept, r.dev_right)] for label, r in
            ((FITTED[key], result.fitted[key]) for key in FITTED)]
    print(tables.table(["abstain on", "invented abstained", "dev abstained", "dev right kept"], rows,
                       right=(1, 2, 3), indent="  "))
    who, _, what = words
    print("\n" + "\n".join(result.chosen.lines(words)))
    print(f"\nwith no abstention, {what} given to invented {who}:\n" + "\n".join(result.never.lines(words)[4:]))
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
    flags.eval_file(p, "labelled question<TAB>answer file", old=("--file",))
    flags.out_dir(p, None, "directory for reliability.png, coverage.png, calibration.json, answers.tsv "
                  "(default: RUN/calibrate; runs/NAME/calibrate for a shipped model)", old=("--out",))
    flags.overwrite(p, "the files of an earlier calibrate in --out-dir")
    add_json_flag(p)
    p.add_argument("--batch-size", type=bounds.positive_int, default=256, help="questions decoded together")
    flags.device(p)
    add_abstain_flags(p)

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
    add_abstain_flags(p)
