"""Why a model stores facts but does not extract them (issue 27, docs/guides/variants.md): for
each trained recall-format model, on the same people,

- closed book: dev accuracy (the model recalls the person's line from ``NAME.``, then copies
  the place out of it), and how many of those recalls had the gold place written in them;
- stored: dev people whose line the model completes up to the place with the place;
- open book: the person's own corpus line given instead of the recall, the place read out of it
  (``read_out_given_lines``), on held-out training people (the last ``--held-out`` lines of the
  training file: a ``--mix-people 500`` recipe such as cpu5 never read their lines nor their
  places) and on dev (lines it pretrained on);
- where the read-out looks: the attention of the query at ``⁇`` over the given line, per layer,
  on the place's characters, on the opening ``NAME.`` and elsewhere, beside the share a uniform
  spread would give the place (attnlab/probing/read_out.py).

Every model is compared with the first (the reference) on the same questions by the exact
McNemar test (attnlab/experiments/comparison.py).

    .venv/bin/python benchmarks/read_out.py runs/knowledge-cpu5/finetune:vanilla \\
        runs/syn5/finetune:synthesizer --json runs/read_out.json [--write]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from _common import REPO, count_with_interval, open_book_right, report, table

sys.path.insert(0, str(REPO))

from attnlab.answering.evaluate import evaluate  # noqa: E402
from attnlab.answering.knowledge import measure_stored  # noqa: E402
from attnlab.core.paths import write_atomically  # noqa: E402
from attnlab.data.corpus import CorpusIndex, place_in_line, recall_prompt, require_person  # noqa: E402
from attnlab.data.datasets import documents, read_qa, read_text  # noqa: E402
from attnlab.experiments.comparison import TEST_METHOD, compare_models  # noqa: E402
from attnlab.model.checkpoint import load_model  # noqa: E402
from attnlab.probing.read_out import read_out_attention  # noqa: E402

DEV = "data/birth_dev.tsv"
TRAIN = "data/birth_places_train.tsv"
CORPUS = "data/wiki.txt"


def people_sets(dev_file: str, train_file: str, held_out: int, index: CorpusIndex) -> dict[str, list]:
    """The labelled people of each set, those without a corpus line left out (nothing to read)."""
    sets = {"held-out train": read_qa(train_file, labelled=True)[-held_out:], "dev": read_qa(dev_file, labelled=True)}
    return {name: [e for e in ex if index.line_of(require_person(e)) is not None] for name, ex in sets.items()}


def closed_book(model, vocab, dev: list) -> tuple[np.ndarray, np.ndarray]:
    """Per dev question: answered right; and the gold place written in what the model recalled."""
    answers, _ = evaluate(model, vocab, dev)
    right = np.array([a.answer == e.answer for a, e in zip(answers, dev)])
    recalled = np.array([place_in_line(a.recalled or "", require_person(e), e.answer) >= 0
                         for a, e in zip(answers, dev)])
    return right, recalled


def measure(run: str, dev: list, sets: dict[str, list], index: CorpusIndex) -> dict:
    """Every measurement of one model; per-question arrays under "right"."""
    model, vocab, _ = load_model(run)
    right, recalled = closed_book(model, vocab, dev)
    stored = measure_stored(model, vocab, index, dev)
    out = {"run": run, "attention": model.config.attention, "stored": stored.stored, "stored_total": stored.total,
           "recalled_place": int(recalled.sum()), "right_when_recalled": int((right & recalled).sum()),
           "right": {"closed dev": right}, "look": {}}
    for name, examples in sets.items():
        out["right"][f"open {name}"] = np.array(open_book_right(model, vocab, index, examples))
        look = read_out_attention(model, vocab, index, examples)
        out["look"][name] = {"mass": look.mass.tolist(), "uniform_place": look.uniform_place,
                             "counted": look.counted, "asked": look.asked}
    return out


def accuracy_table(results: dict[str, dict]) -> str:
    reference = next(iter(results))
    measures = list(results[reference]["right"])
    tests = {m: compare_models({label: [r["right"][m]] for label, r in results.items()}, reference) for m in measures}
    rows = []
    for label, r in results.items():
        cells = [f"{label} ({r['attention']})"]
        for m in measures:
            right = r["right"][m]
            test = tests[m][label][1]
            shown = count_with_interval(int(right.sum()), right.size)
            cells.append(shown if test is None else f"{shown}; p={test.combined.p:.2g}, {test.verdict}")
        cells += [f"{r['stored']}/{r['stored_total']}", f"{r['right_when_recalled']}/{r['recalled_place']}"]
        rows.append(cells)
    return table(["model", *measures, "stored (dev)", "closed dev: right / place in the recall"], rows) + (
        f"\n\n- 95% Wilson intervals; p: {TEST_METHOD}, against `{reference}`, two-sided (verdict at p < 0.05)"
        "\n- closed: the model's own recall, then the copy read-out; open: the person's corpus line given "
        "(cut at recall_chars), then the same read-out")


def attention_table(results: dict[str, dict]) -> str:
    """Per model, people set and layer: mass on the place (mean over heads, and the best head),
    on the name and elsewhere (means over heads)."""
    rows = []
    for label, r in results.items():
        for name, look in r["look"].items():
            place, on_name, other = (np.asarray(m) for m in look["mass"])  # (L, h) each
            for layer in range(place.shape[0]):
                best = int(place[layer].argmax())
                rows.append([label, f"{name} ({look['counted']})", layer, f"{place[layer].mean():.3f}",
                             f"{place[layer, best]:.3f} (head {best})", f"{on_name[layer].mean():.3f}",
                             f"{other[layer].mean():.3f}", f"{look['uniform_place']:.3f}"])
    return table(["model", "people (place within the text)", "layer", "on the place (mean of heads)",
                  "best head", "on NAME.", "elsewhere", "uniform share of the place"], rows) + (
        "\n\n- attention of the query at ⁇ (it predicts the place's first character) over the person's own "
        "line cut at recall_chars, averaged over the people whose place is written within it")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN[:LABEL]", help="checkpoints or run directories; the first is the reference")
    p.add_argument("--eval-file", default=DEV, help=f"dev questions (default: {DEV})")
    p.add_argument("--train-file", default=TRAIN, help=f"training file (default: {TRAIN})")
    p.add_argument("--held-out", type=int, default=400, metavar="N",
                   help="the training file's last N people, never trained on by a --mix-people 500 recipe (default: 400)")
    p.add_argument("--corpus", default=CORPUS, help=f"corpus (default: {CORPUS})")
    p.add_argument("--json", default=None, metavar="FILE", help="also write every number as JSON")
    p.add_argument("--write", action="store_true", help="write the tables into docs/benchmarks.md")
    args = p.parse_args(argv)
    index = CorpusIndex(documents(read_text(args.corpus)))
    sets = people_sets(args.eval_file, args.train_file, args.held_out, index)
    dev = read_qa(args.eval_file, labelled=True)
    results = {}
    for spec in args.runs:
        run, _, label = spec.partition(":")
        results[label or run] = measure(run, dev, sets, index)
    text = accuracy_table(results) + "\n\n" + attention_table(results)
    if args.json:
        plain = {k: {**r, "right": {m: a.astype(int).tolist() for m, a in r["right"].items()}} for k, r in results.items()}
        write_atomically(args.json, json.dumps(plain, indent=1) + "\n")
    report("read_out", text, write=args.write, title="Stored but not extracted: where the read-out looks "
           "(benchmarks/read_out.py)")


if __name__ == "__main__":
    main()
