"""The confidence correction and abstention rule two ways, on the same weights: beta calibration of
the confidence (the rule thresholding the confidence), against the correction ``learn`` and
``calibrate`` now fit (the confidence's parts weighed apart where cross-validation on the
held-out answers prefers it, else beta calibration; the rule thresholding the corrected
chance), both fitted on the training subjects the run held out of finetuning, judged on dev and on invented subjects (``attnlab audit``'s names).

    .venv/bin/python benchmarks/confidence_parts.py runs/towns15 runs/firms15 models/cpu --write

Per run and method: dev ECE (15 bins) of the corrected confidence beside the range a calibrated
one scores on the same answers by chance (ece_by_chance), its log-loss and AUROC (right
against wrong), and the default rule's counts: dev right answers kept, dev wrong answers
withheld, invented subjects abstained on (keep-right 0.97). A run made by ``learn`` reads its
fact set; any other reads the course's files.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from _common import count_with_interval, report, table  # puts the checkout's attnlab first on sys.path

from attnlab.config.settings import DEFAULT_CORPUS, DEFAULT_DEV, DEFAULT_TRAIN  # noqa: E402
from attnlab.core.datafiles import resolve  # noqa: E402
from attnlab.data import factset  # noqa: E402
from attnlab.data.datasets import documents, read_qa, read_text  # noqa: E402
from attnlab.data.subject_orders import recorded_order  # noqa: E402
from attnlab.model.checkpoint import load_model  # noqa: E402
from attnlab.trust.abstention import held_out_signals, rules_from  # noqa: E402
from attnlab.trust.audit import audit_answers, invent_people  # noqa: E402
from attnlab.trust.calibration import (PartsCorrection, auroc, corrected, ece_by_chance,  # noqa: E402
                                      expected_calibration_error, fit_correction)
from attnlab.trust.policy import DEFAULT_HOLDOUT, DEFAULT_KEEP_RIGHT  # noqa: E402

METHODS = ("beta, confidence", "chosen, chance")


def files_of(run: str) -> tuple[Path, Path, Path]:
    """corpus, train and dev files of the run's fact set (the course's for a run without one)."""
    facts = factset.recorded(run)
    if facts is None:
        return resolve(DEFAULT_CORPUS), resolve(DEFAULT_TRAIN), resolve(DEFAULT_DEV)
    return facts.corpus, facts.train, facts.dev


def run_label(run: str) -> str:
    """A run's name in a table: its folder, with the folder above when it is a stage of a
    pipeline (``k15-s0/finetune``), so that runs of one recipe stay apart."""
    path = Path(run)
    return f"{path.parent.name}/{path.name}" if path.name in ("finetune", "pretrain") else path.name


def held_out_of(run: str):
    """The run's model and vocabulary, its corpus, train and dev files, and its held-out
    subjects answered once (the material every rule of these benchmarks is fitted on)."""
    model, vocab, checkpoint = load_model(run, device="cpu")
    corpus, train, dev_file = files_of(run)
    fraction = float((checkpoint.meta.get("train_config") or {}).get("holdout_fraction") or DEFAULT_HOLDOUT)
    held = held_out_signals(model, vocab, train, fraction, order=recorded_order(checkpoint.meta))
    return model, vocab, (corpus, train, dev_file), held


def log_loss(chance: list[float], right: list[bool]) -> float:
    clip = lambda p: min(max(p, 1e-6), 1 - 1e-6)
    return -sum(math.log(clip(p)) if r else math.log(1 - clip(p)) for p, r in zip(chance, right)) / len(right)


def measure(run: str, names: int, keep: float) -> list[list[str]]:
    model, vocab, (corpus, train, dev_file), held = held_out_of(run)
    dev = read_qa(dev_file, labelled=True)
    seen = audit_answers(model, vocab, invent_people(documents(read_text(corpus)), names, 0), dev,
                         read_qa(train, labelled=True))
    answers = seen.dev_answers
    right = seen.dev_right
    rows = []
    for method in METHODS:
        parts = method.startswith("chosen")  # the parts weighed apart where cross-validation prefers them
        correction = fit_correction(held.confidence, held.right, held.parts if parts else None)
        chance = corrected([a.confidence for a in answers], correction, [a.parts for a in answers])
        rule = rules_from(held, keep, correction if parts else None)["both"]
        label = f"{'parts' if isinstance(correction, PartsCorrection) else 'beta'}, {method.split(', ')[1]}"
        rows.append([run_label(run), label, f"{sum(held.right)}/{len(held.right)}",
                     f"{expected_calibration_error(chance, right):.3f}", "{:.3f}-{:.3f}".format(*ece_by_chance(chance)),
                     f"{log_loss(chance, right):.3f}",
                     f"{auroc(chance, right):.3f}", *rule_cells(seen.report(model, vocab, rule))])
        print(" | ".join(rows[-1]), flush=True)
    return rows


def rule_cells(judged) -> list[str]:
    """An audit report's (trust/audit.py AuditReport) dev right answers kept, dev wrong answers
    withheld and invented subjects abstained on, as table cells."""
    wrong = judged.dev - judged.dev_right
    withheld_wrong = judged.dev_abstained - (judged.dev_right - judged.dev_right_kept)
    return [count_with_interval(judged.dev_right_kept, judged.dev_right), f"{withheld_wrong}/{wrong}",
            count_with_interval(judged.invented_abstained, judged.invented)]


def runs_arguments(doc: str, argv: list[str] | None) -> argparse.Namespace:
    """The flags of a benchmark that judges runs' rules: the runs, invented names, keep-right, --write."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="runs with a recall model that held people out of finetuning")
    parser.add_argument("--names", type=int, default=500, help="invented subjects asked about (default 500)")
    parser.add_argument("--keep-right", type=float, default=DEFAULT_KEEP_RIGHT)
    parser.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    return parser.parse_args(argv)


def judge_runs(doc: str, argv: list[str] | None, measure, name: str, headers: list[str], title: str) -> int:
    """A benchmark that judges runs' rules: ``measure(run, names, keep_right)`` gives each run's
    rows, reported under ``headers`` in section ``name`` of the benchmarks page."""
    args = runs_arguments(doc, argv)
    rows = [row for run in args.runs for row in measure(run, args.names, args.keep_right)]
    report(name, table(headers, rows), write=args.write, title=title)
    return 0


def main(argv: list[str] | None = None) -> int:
    headers = ["run", "correction, rule on", "held-out right", "dev ECE", "calibrated, by chance", "dev log-loss", "AUROC",
               "dev right kept", "dev wrong withheld", "invented abstained"]
    return judge_runs(__doc__, argv, measure, "confidence-parts", headers,
                      "The confidence's parts weighed apart, against beta calibration of their product")


if __name__ == "__main__":
    sys.exit(main())
