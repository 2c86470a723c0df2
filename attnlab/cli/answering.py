"""Answering commands: `evaluate` a question file, `ask` typed questions, score the `baseline`."""

from __future__ import annotations

import argparse
import json
import sys

from ..core import bounds, logs, paths
from ..config.settings import DEFAULT_CORPUS
from ..core.outputs import refuse_existing, refuse_inputs
from . import flags, results, trust


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ..core import distributed
    from ..training.pipeline import evaluate_file

    trust.check_abstain_flags(args)
    _check_evaluate_files(args)
    overrides = {"attention": args.attention} if args.attention else {}
    with distributed.session(args.device) as (env, device):  # under torchrun each rank decodes a share
        answers, score, out = evaluate_file(args.checkpoint, args.eval_file, out=args.predictions, device=device,
                                            batch_size=args.batch_size, overrides=overrides,
                                            stored_corpus=args.corpus if args.stored else None,
                                            overwrite=args.overwrite, log=logs.result)
        abstention = kalai = None
        if env.is_main and score:
            kalai = trust.kalai_line(answers, trust.read_qa_labels(args.eval_file))
        if trust.abstaining(args) and env.is_main:
            abstention = trust.abstain_in_evaluation(args, answers, out)
    results.publish(args, {"checkpoint": str(args.checkpoint), "eval_file": str(args.eval_file),
                           "questions": len(answers), "correct": score.correct if score else None,
                           "accuracy": score.correct / score.total if score and score.total else None,
                           "interval_95": list(score.interval) if score else None, "kalai": kalai,
                           "abstention": abstention, "written": [str(out)]})
    return 0


def _check_evaluate_files(args: argparse.Namespace) -> None:
    """The checkpoint, the question file and where the predictions go, before any decoding."""
    from ..data.datasets import read_corpus, read_questions
    from ..model.checkpoint import resolve
    from ..model.shipped import output_dir

    resolve(args.checkpoint)
    read_questions(paths.input_file(args.eval_file, "--eval-file"))
    if args.predictions:
        paths.output_file(args.predictions, "--predictions")
        refuse_inputs(args.predictions, {"checkpoint": args.checkpoint, "--eval-file": args.eval_file,
                                         "--corpus": args.corpus if args.stored else None}, "--predictions")
        refuse_existing([args.predictions], args.overwrite)
    else:
        paths.output_dir(output_dir(args.checkpoint), "the directory of the predictions (--predictions)")
    if args.stored:
        read_corpus(paths.input_file(args.corpus, "--corpus"))
    if trust.abstain_mode(args) != "run":  # the default rule is an extra: when it cannot be fitted, a note says so
        trust.check_abstain_files(args)


def cmd_ask(args: argparse.Namespace) -> int:
    from ..api import load
    from ..data.formats import text_format
    from ..data.relations import Schema
    from .asking import answer_lines, evidence_index, record, table

    _check_ask_input(args)
    model = load(args.checkpoint, device=args.device, **flags.load_facts(args))
    index = evidence_index(args.evidence, Schema.from_list(model.config.relations))
    given = trust.given_in_ask(args, model)  # --abstain: fitted once, before the first question
    out, as_json = results.stdout(args), results.wants_json(args)
    if not args.questions:
        if sys.stdin.isatty():
            logs.note("one question per line (Ctrl-D to end)", stderr=True)
        return answer_lines(model, sys.stdin, out, index, given=given, as_json=as_json)  # each line as it is read
    questions = [index.as_written(q) for q in args.questions] if index is not None else args.questions
    answers = model.ask(questions, source="<argument>", strict=False, abstain=None)
    if as_json:
        for answer, ok in zip(answers, given(answers)):
            print(json.dumps(record(answer, index, ok), ensure_ascii=False), file=out)
    else:
        print(table(answers, index, given(answers), text_format(model.config.qa_format).recalls), file=out)
    return 0


def _check_ask_input(args: argparse.Namespace) -> None:
    """Everything `ask` reads, checked before the model loads: questions, --evidence, the
    abstention flags and files."""
    trust.check_abstain_flags(args)
    for number, question in enumerate(args.questions, 1):
        if not question.strip():
            raise ValueError(f"<argument>:{number}: empty question")
        if "\n" in question or "\r" in question:  # it would split the output line
            raise ValueError(f"<argument>:{number}: a question is one line; this one holds a line break")
    if args.evidence:
        paths.input_file(args.evidence, "--evidence")
    trust.check_abstain_files(args)


def cmd_baseline(args: argparse.Namespace) -> int:
    from ..data.datasets import read_questions
    from ..training.pipeline import baseline

    read_questions(paths.input_file(args.train_file, "--train-file"), labelled=True)
    read_questions(paths.input_file(args.eval_file, "--eval-file"))
    facts = getattr(args, "fact_set", None)
    if facts is not None and len(facts.schema.relations) > 1:
        return _baseline_by_relation(args, facts.schema)
    place, result = baseline(args.train_file, args.eval_file)
    if result is None:
        print(f'most frequent place in {args.train_file}: "{place}"; {args.eval_file} has no labels, '
              "so no accuracy can be computed")
    else:
        print(f'most frequent place in {args.train_file}: "{place}"; always answering it on '
              f"{args.eval_file}: {result.with_interval()}")
    return 0


def _baseline_by_relation(args: argparse.Namespace, schema) -> int:
    """A fact set of several relations: each relation's most frequent training answer, always
    given to its questions (as learn's table scores the baseline)."""
    from ..answering.evaluate import baseline_answers, score, score_by_relation
    from ..data.datasets import read_qa

    examples = read_qa(args.eval_file)
    common, answers = baseline_answers(read_qa(args.train_file, labelled=True), examples, schema)
    scores = score_by_relation(answers, examples, schema)
    for name, answer in common.items():
        said = (f"always answering it on {args.eval_file}: {scores[name].with_interval()}" if name in scores
                else f"{args.eval_file} has no labelled question of it")
        print(f'{name}: most frequent answer in {args.train_file}: "{answer}"; {said}')
    overall = score(answers, examples)
    if overall is not None:
        print(f"all: each relation's most frequent answer on {args.eval_file}: {overall.with_interval()}")
    return 0


def register(command) -> None:
    p = command("evaluate", "answer a question file greedily; score it if it has labels", cmd_evaluate)
    p.add_argument("checkpoint", help="checkpoint file or run directory")
    flags.eval_file(p, "questions, with or without <TAB>answer labels", old=("--file",))
    p.add_argument("--predictions", default=None, metavar="FILE",
                   help="predictions file (default: RUN_DIR/predictions-FILESTEM.txt; with --attention, "
                        "RUN_DIR/predictions-FILESTEM-VARIANT.txt, so the plain predictions stay)")
    p.add_argument("--out", dest="predictions", action=flags.Deprecated, new="--predictions",
                   help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    flags.overwrite(p, "the predictions file")
    results.add_json_flag(p)
    flags.attention_view(p)
    p.add_argument("--batch-size", type=bounds.positive_int, default=256, help="questions decoded together")
    flags.device(p)
    p.add_argument("--stored", action="store_true",
                   help="also report stored facts: for people whose place is written in their corpus "
                        "line, does greedy completion of the line up to the place reproduce it "
                        "(default: answers only)")
    flags.corpus(p, "corpus for --stored")
    # The course's metric answers every question; the run's rule's figures are reported beside it.
    trust.add_abstain_flags(p)

    p = command("ask", "answer questions typed as arguments or on stdin (each line as soon as it is read), "
                "with a confidence", cmd_ask)
    p.add_argument("checkpoint", help="checkpoint file or run directory")
    # default=[]: without it argparse calls the questions required when none is given (issue 45)
    p.add_argument("questions", nargs="*", default=[],
                   help='questions such as "Where was Ada Lovelace born?" (default: none: one per line on stdin)')
    p.add_argument("--evidence", default=DEFAULT_CORPUS.as_written, metavar="CORPUS",
                   help="corpus in which to check whether each answer is stated about the person "
                        f"('' to skip) (default: {DEFAULT_CORPUS.as_written})")
    flags.device(p)
    trust.add_abstain_flags(p)  # "I don't know" where the run's rule abstains; --abstain off: raw
    p.add_argument("--json", action="store_true",
                   help="one JSON object per answer, one per line, as each is answered (default: off)")

    p = command("baseline", "score always giving the training file's most frequent answer (each relation's) on a "
                "labelled file", cmd_baseline)
    flags.train_file(p, "file whose most frequent place is the answer")
    flags.eval_file(p, "file to score", old=("--file",))
