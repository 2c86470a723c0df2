"""Why a learned model's dev answers are wrong: the answer missing from what it recalled (a
storage or recall failure) or present but not copied (a reading failure), per relation.

    .venv/bin/python benchmarks/read_or_recall.py RUN [--facts DIR] [--eval-file FILE] [--read-outs span,copy]

RUN is a run of `attnlab learn` (its fact set is recorded) or any recall-format run with
--facts. Prints, per read-out (attnlab/answering/knowledge.py: ``span``, the default, the
likeliest whole-word span or training answer the recall echoes; ``span-no-values``, the same
without the training answers, spans only; ``copy``, a span built greedily; ``free``) and
relation: right, with its 95% interval; wrong with the answer in the recalled text (the read-out
chose another span); wrong with the answer not in it as written. Counts out of N; the recall is
the same for every read-out (greedy), so two read-outs' rows compare the same weights.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from _common import REPO  # noqa: F401  (puts the checkout's attnlab first on sys.path)

import dataclasses

from attnlab.answering.evaluate import Score
from attnlab.answering.knowledge import READ_OUTS, answer_by_recall
from attnlab.data import factset
from attnlab.data.corpus import contains_words
from attnlab.data.datasets import read_qa
from attnlab.model.checkpoint import load_model


def failure_kind(answer: str, recalled: str | None, truth: str) -> str:
    """right, misread (the truth is in the recalled text as whole words) or not recalled."""
    if answer == truth:
        return "right"
    return "misread" if recalled and contains_words(recalled, truth) else "not recalled"


def tally(answers, examples, schema) -> dict[str, Counter]:
    kinds: dict[str, Counter] = {}
    for a, ex in zip(answers, examples):
        relation = schema.require(ex).relation.name
        kinds.setdefault(relation, Counter())[failure_kind(a.answer, a.recalled, ex.answer)] += 1
    return kinds


WITHOUT_VALUES = "span-no-values"  # the span read-out with the model's answer values left out
CHOICES = (*READ_OUTS, WITHOUT_VALUES)


def read_out_answers(model, vocab, examples, schema, read_out: str):
    """The model's recall answers to ``examples`` with the read-out ``read_out`` (CHOICES)."""
    asked = [schema.require(e) for e in examples]
    config = model.config
    if read_out == WITHOUT_VALUES:
        model.config, read_out = dataclasses.replace(config, answer_values=()), "span"
    try:
        return answer_by_recall(model, vocab, [a.subject for a in asked], model.config.recall_chars,
                                cues=[schema.cue(a.relation) for a in asked], read_out=read_out)
    finally:
        model.config = config


def read_outs(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHOICES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected read-outs from {', '.join(CHOICES)}, got {text!r}")
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path)
    p.add_argument("--facts", type=Path, help="the fact set (default: the one the run recorded)")
    p.add_argument("--eval-file", type=Path, help="labelled questions (default: the set's dev file)")
    p.add_argument("--read-outs", type=read_outs, default=["span"], help=f"comma-separated: {', '.join(CHOICES)}")
    args = p.parse_args(argv)
    facts = factset.load(args.facts) if args.facts else factset.recorded(args.run)
    if facts is None:
        raise SystemExit(f"{args.run}: no fact set recorded; give --facts DIR")
    model, vocab, _ = load_model(args.run)
    examples = read_qa(args.eval_file or facts.dev, labelled=True)
    print("| read-out | relation | N | right | right, 95% CI | misread (answer recalled, another span read) "
          "| not recalled (as written) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for read_out in args.read_outs:
        kinds = tally(read_out_answers(model, vocab, examples, facts.schema, read_out), examples, facts.schema)
        for relation, c in kinds.items():
            low, high = Score(c["right"], sum(c.values())).interval
            print(f"| {read_out} | {relation} | {sum(c.values())} | {c['right']} | {100 * low:.1f}-{100 * high:.1f}% "
                  f"| {c['misread']} | {c['not recalled']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
