"""A probe of the knowledge issue: would ranking every candidate answer beat the greedy copy
read-out? (docs/notebook.md, 2026-11-25, "Probes of the read-out of the model shipped before change 6")

The copy read-out (attnlab/answering/knowledge.py) picks the place greedily, one character at a
time, among the whole-word spans of the recalled text. This probe scores every whole-word span
of one to four words instead, by the model's log-probability of the span and its closing mark
after ``recalled ⁇``, and answers the best; both are compared on the same people by the exact
McNemar test. It runs one full forward pass per candidate (about 65 per person), so it is a
probe, not an answer format.

    .venv/bin/python benchmarks/read_out_rank.py models/cpu --eval-file runs/p/holdout.tsv [--write]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from _common import REPO, count_with_interval, report, table

sys.path.insert(0, str(REPO))

from attnlab.answering.knowledge import answer_by_recall  # noqa: E402
from attnlab.data.corpus import recall_prompt, require_person  # noqa: E402
from attnlab.data.datasets import read_qa  # noqa: E402
from attnlab.data.vocab import MASK_ID, PAD_ID  # noqa: E402
from attnlab.experiments.comparison import mcnemar, verdict  # noqa: E402
from attnlab.model.checkpoint import load_model  # noqa: E402

MAX_WORDS, MAX_CHARS, BATCH = 4, 32, 256


def word_spans(text: str) -> list[str]:
    """Every run of one to ``MAX_WORDS`` whole words of ``text`` (at most ``MAX_CHARS``)."""
    starts = [i for i, c in enumerate(text) if c.isalnum() and (i == 0 or not text[i - 1].isalnum())]
    ends = [i + 1 for i, c in enumerate(text) if c.isalnum() and (i + 1 == len(text) or not text[i + 1].isalnum())]
    spans = set()
    for k, start in enumerate(starts):
        for end in ends:
            if end > start and end - start <= MAX_CHARS and sum(start <= s < end for s in starts[k:]) <= MAX_WORDS:
                spans.add(text[start:end])
    return sorted(spans)


@torch.no_grad()
def span_scores(model, rows: list[list[int]], answer_starts: list[int]) -> list[float]:
    """log p(tokens from ``answer_starts[i]`` on | the tokens before) for every row."""
    scores = []
    for at in range(0, len(rows), BATCH):
        part, starts = rows[at:at + BATCH], answer_starts[at:at + BATCH]
        idx = torch.full((len(part), max(map(len, part))), PAD_ID, dtype=torch.long)
        for b, row in enumerate(part):
            idx[b, :len(row)] = torch.tensor(row)
        logps = model.run(idx)[0].float().log_softmax(-1)
        for b, (row, start) in enumerate(zip(part, starts)):
            targets = torch.tensor(row[start:])
            scores.append(float(logps[b, start - 1:len(row) - 1].gather(1, targets[:, None]).sum()))
    return scores


def ranked_answers(model, vocab, names: list[str], recalled: list[str]) -> list[str]:
    """For each person, the best-scored whole-word span of what the model recalled."""
    rows, starts, owners, spans = [], [], [], []
    for person, (name, text) in enumerate(zip(names, recalled)):
        context = vocab.encode(text) + [MASK_ID]
        for span in word_spans(text[len(recall_prompt(name)):]):
            row = context + vocab.encode(span) + [MASK_ID]
            if len(row) <= model.config.block_size:
                rows.append(row), starts.append(len(context)), owners.append(person), spans.append(span)
    best: dict[int, tuple[float, str]] = {}
    for person, span, score in zip(owners, spans, span_scores(model, rows, starts)):
        best[person] = max(best.get(person, (float("-inf"), "")), (score, span))
    return [best.get(p, (0.0, ""))[1] for p in range(len(names))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a recall-format run or model directory")
    parser.add_argument("--eval-file", default="runs/p/holdout.tsv",
                        help="labelled people (default: the held-out training people)")
    parser.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = parser.parse_args()
    model, vocab, _ = load_model(Path(args.run))
    examples = read_qa(args.eval_file, labelled=True)
    names = [require_person(e) for e in examples]
    greedy = answer_by_recall(model, vocab, names, model.config.recall_chars)
    ranked = ranked_answers(model, vocab, names, [a.recalled for a in greedy])
    right_greedy = [a.answer == e.answer for a, e in zip(greedy, examples)]
    right_ranked = [a == e.answer for a, e in zip(ranked, examples)]
    test = mcnemar(right_ranked, right_greedy)
    rows = [[label, count_with_interval(sum(right), len(right))] for label, right in
            (("greedy copy (the default)", right_greedy), ("every span ranked", right_ranked))]
    rows[1].append(f"{test.wins} fixed / {test.losses} broken, p={test.p:.2g}, {verdict(test)}")
    rows[0].append("reference")
    text = table(["read-out of " + args.run, f"right ({Path(args.eval_file).name})", "paired test"], rows)
    text += "\n\n- paired test: the exact McNemar test (two-sided) on the same people; 95% intervals: Wilson score intervals"
    report("knowledge_read_out_rank", text, write=args.write,
           title="Ranking every span vs the greedy copy read-out (benchmarks/read_out_rank.py)")


if __name__ == "__main__":
    main()
