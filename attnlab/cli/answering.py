"""Answering commands: `evaluate` a question file, `ask` typed questions, score the `baseline`."""

from __future__ import annotations

import argparse
import sys

from ..config import DEFAULT_CORPUS
from . import flags


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .. import distributed
    from ..pipeline import evaluate_file

    overrides = {"attention": args.attention} if args.attention else {}
    with distributed.session(args.device) as (_env, device):  # under torchrun each rank decodes a share
        evaluate_file(args.checkpoint, args.eval_file, out=args.predictions, device=device,
                      batch_size=args.batch_size, overrides=overrides,
                      stored_corpus=args.corpus if args.stored else None)
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    from ..checkpoint import load_model
    from ..data import QAExample, read_text
    from ..devices import resolve_device
    from ..evaluate import answer_questions
    from ..evidence import CorpusIndex

    if args.questions:
        items = [(q, "<argument>", i + 1) for i, q in enumerate(args.questions)]
    else:
        items = [(line.strip(), "<stdin>", i + 1) for i, line in enumerate(sys.stdin) if line.strip()]
    if not items:
        raise ValueError("no questions: pass them as arguments or one per line on stdin")
    model, vocab, _ = load_model(args.checkpoint, device=str(resolve_device(args.device)))
    examples = [QAExample(q, None, src, line) for q, src, line in items]
    index = CorpusIndex(read_text(args.evidence).split("\n")) if args.evidence else None
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
    from ..pipeline import baseline

    place, result = baseline(args.train_file, args.eval_file)
    if result is None:
        print(f'most frequent place in {args.train_file}: "{place}"; {args.eval_file} has no labels, '
              "so no accuracy can be computed")
    else:
        print(f'most frequent place in {args.train_file}: "{place}"; always answering it on '
              f"{args.eval_file}: {result}")
    return 0


def register(command) -> None:
    p = command("evaluate", "answer a question file greedily; score it if it has labels", cmd_evaluate)
    p.add_argument("checkpoint", help="checkpoint file or run directory")
    flags.eval_file(p, "questions, with or without <TAB>place labels", old=("--file",))
    p.add_argument("--predictions", default=None, metavar="FILE",
                   help="predictions file (default: RUN_DIR/predictions-FILESTEM.txt)")
    p.add_argument("--out", dest="predictions", action=flags.Deprecated, new="--predictions",
                   help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    flags.attention_view(p)
    p.add_argument("--batch-size", type=int, default=256, help="questions decoded together")
    flags.device(p)
    p.add_argument("--stored", action="store_true",
                   help="also report stored facts: for people whose place is written in their corpus "
                        "line, does greedy completion of the line up to the place reproduce it "
                        "(default: answers only)")
    flags.corpus(p, "corpus for --stored")

    p = command("ask", "answer questions typed as arguments or on stdin, with a confidence", cmd_ask)
    p.add_argument("checkpoint", help="checkpoint file or run directory")
    p.add_argument("questions", nargs="*", help='questions such as "Where was Ada Lovelace born?" (default: read stdin)')
    p.add_argument("--evidence", default=str(DEFAULT_CORPUS), metavar="CORPUS",
                   help="corpus in which to check whether each answer is stated about the person "
                        f"('' to skip) (default: {DEFAULT_CORPUS})")
    flags.device(p)

    p = command("baseline", "score the training file's most frequent place on a labelled file", cmd_baseline)
    flags.train_file(p, "file whose most frequent place is the answer")
    flags.eval_file(p, "file to score", old=("--file",))
