"""`attnlab learn DIR`: a fact set learned in a time budget by one command
(attnlab/experiments/learn.py), with one table and the next commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core import bounds, logs, paths
from . import flags, results


def cmd_learn(args: argparse.Namespace) -> int:
    from ..data import factset
    from ..experiments.learn import learn, results_table

    facts = factset.load(args.facts_dir)  # a bad fact set is refused before anything is written
    out = Path(args.out_dir or f"runs/learn-{Path(args.facts_dir).resolve().name}")
    paths.output_dir(out, "--out-dir")
    found = learn(facts.root, out, minutes=args.minutes, seed=args.seed, device=args.device,
                  overwrite=args.overwrite, resume=args.resume, pretrained=not args.no_pretraining)
    logs.result(f"\n{facts.name}: dev answers of the model learned in {args.minutes:g} minutes "
                f"({found['wall_minutes']:g} minutes taken, {found['machine']})\n{results_table(found)}\n"
                + _verdict(found) + f"results: {out / 'results.json'}; the model: {out}\n"
                f'next: attnlab ask {out} "{example_question(facts, out)}"\n'
                f"next: attnlab evaluate {out} --eval-file {facts.test or facts.dev}")
    results.publish(args, found)
    return 0


def _verdict(found: dict) -> str:
    """A model that does not beat the most-frequent-answer baseline is said to, in words."""
    overall = found["overall"]
    if overall["correct"] > overall["baseline"]["correct"]:
        return ""
    if not found.get("pretrained", True):
        return "without pretraining the model has never read the dev subjects' documents: it cannot know them\n"
    return ("this model does not beat always giving each relation's most frequent answer: the budget is too "
            "short for this fact set on this machine (give more minutes)\n")


def example_question(facts, run: Path) -> str:
    """A dev question to try first: the first one the run answered right (its dev
    predictions), so the suggestion shows the model knowing a fact; else the first."""
    from ..data.datasets import read_qa
    from ..experiments.learn import predictions_file

    dev = read_qa(facts.dev, labelled=True)
    predictions = predictions_file(run, facts.dev)
    answered = predictions.read_text(encoding="utf-8").splitlines() if predictions.is_file() else []
    right = (e for e, said in zip(dev, answered) if said.strip() == e.answer)
    return next(right, dev[0]).question


def register(command) -> None:
    p = command("learn", "learn a fact set (a folder: corpus, questions, relations) within a time budget",
                cmd_learn)
    p.add_argument("facts_dir", metavar="DIR", help="the fact-set folder (docs/guides/your-facts.md); "
                   "the course's birthplace set is data/")
    p.add_argument("--minutes", type=bounds.Bound(float, 0, 600, low_open=True, name="minutes").argtype(), default=15.0,
                   help="the budget on this machine: pretraining fits itself to it, finetuning and scoring "
                        "come within it (default: 15)")
    p.add_argument("--seed", type=bounds.SEED.argtype(), default=0, help="random seed (default: 0)")
    flags.device(p)
    p.add_argument("--no-pretraining", action="store_true",
                   help="the reference without pretraining: the same model finetuned from scratch (default: off)")
    flags.out_dir(p, None, "output directory: the learned model, results.json (default: runs/learn-DIRNAME)")
    flags.resume_or_overwrite(p)
    results.add_json_flag(p)
