"""Recall decoded with the corpus's guesses (answering/drafts.py) against one character a step:
the same dev questions answered both ways, side by side, at the batch sizes that occur (one
question on the command line, the batches the web lab forms under a class, a whole dev file),
and whether the two ways gave the same answers.

Each batch size is timed over ROUNDS rounds; a round answers the next BATCH questions of the
dev file both ways, in alternating order, so a drift in the machine's pace reaches both. The
whole dev file is then answered once each way at evaluate's batch size, and the answers,
recalled texts and confidences compared question by question.

Run: .venv/bin/python benchmarks/recall_drafts.py [--run models/cpu] [--batches 1,15,30] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, report, table  # noqa: E402

import attnlab  # noqa: E402
from attnlab.answering.evaluate import answer_questions  # noqa: E402
from attnlab.data.datasets import read_qa  # noqa: E402


def timed(fn) -> tuple[float, object]:
    began = time.perf_counter()
    result = fn()
    return time.perf_counter() - began, result


def side_by_side(model, examples, batch: int, rounds: int) -> list:
    """Median seconds per batch of ``batch`` questions, plain and drafted, and their ratio."""
    draft = model.recall_draft()
    times: dict[str, list[float]] = {"plain": [], "drafted": []}
    for r in range(rounds):
        chunk = [examples[(r * batch + i) % len(examples)] for i in range(batch)]
        ways = [("plain", None), ("drafted", draft)]
        for name, d in ways if r % 2 == 0 else ways[::-1]:
            seconds, _ = timed(lambda: answer_questions(model.gpt, model.vocab, chunk, draft=d))
            times[name].append(seconds)
    plain, drafted = statistics.median(times["plain"]), statistics.median(times["drafted"])
    return [batch, rounds, f"{1000 * plain:.0f}", f"{1000 * drafted:.0f}", f"{plain / drafted:.2f}x"]


def whole_file(model, examples, batch_size: int) -> tuple[list, list[str]]:
    """The dev file answered once each way: the row, and what differed."""
    t_plain, plain = timed(lambda: answer_questions(model.gpt, model.vocab, examples, batch_size=batch_size))
    t_drafted, drafted = timed(lambda: answer_questions(model.gpt, model.vocab, examples, batch_size=batch_size,
                                                        draft=model.recall_draft()))
    same = sum(p.answer == d.answer and p.recalled == d.recalled for p, d in zip(plain, drafted))
    right = [sum(a.answer == e.answer for a, e in zip(answers, examples)) for answers in (plain, drafted)]
    gap = max(abs(p.confidence - d.confidence) for p, d in zip(plain, drafted))
    row = [f"all {len(examples)} (batches of {batch_size})", 1, f"{1000 * t_plain:.0f}", f"{1000 * t_drafted:.0f}",
           f"{t_plain / t_drafted:.2f}x"]
    notes = [f"- the whole file: the same answer and recalled text for {same}/{len(examples)} questions; right "
             f"{right[0]} (plain) and {right[1]} (drafted); largest confidence difference {gap:.1e}"]
    return row, notes


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default="models/cpu", help="a recall-format run")
    ap.add_argument("--batches", default="1,15,30", help="batch sizes timed side by side, comma-separated")
    ap.add_argument("--rounds", type=int, default=5, help="batches of each size timed each way")
    ap.add_argument("--batch-size", type=int, default=256, help="evaluate's batch size, for the whole file")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = ap.parse_args(argv)
    model = attnlab.load(args.run, device="cpu")
    if model.recall_draft() is None:
        raise SystemExit(f"{args.run}: not a recall model with a readable corpus: nothing to draft")
    dev = Path(model.fact_set.dev if model.fact_set else REPO / "data" / "birth_dev.tsv").resolve()
    shown = dev.relative_to(REPO) if dev.is_relative_to(REPO) else dev
    examples = read_qa(dev, labelled=True)
    answer_questions(model.gpt, model.vocab, examples[:4], draft=model.recall_draft())  # warm-up
    rows = [side_by_side(model, examples, int(b), args.rounds) for b in args.batches.split(",")]
    row, notes = whole_file(model, examples, args.batch_size)
    text = table(["questions a batch", "batches", "plain ms", "drafted ms", "plain / drafted"], rows + [row])
    text += "\n\n" + "\n".join([
        f"- `{args.run}`, its dev questions ({shown}); a batch's time is the median over its rounds; plain: the "
        "recall decoded one character a step; drafted: the corpus's guesses checked several a step and the "
        "read-out started from the recall's keys and values",
        *notes,
    ])
    report("recall_drafts", text, write=not args.no_write,
           title="Recall guessed from the corpus (benchmarks/recall_drafts.py)")


if __name__ == "__main__":
    main()
