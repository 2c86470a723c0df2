"""How much a model's confidence is worth on a labelled question file, as ``attnlab calibrate``
reports it: the measures of calibration.py, what an abstention rule does there, the reliability
and coverage plots, and every answer (each file written atomically; files already there are
refused unless ``overwrite``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..answering.evaluate import Answer, answer_questions
from ..core.outputs import write_output
from ..data.datasets import QAExample
from .abstention import Rule, decide, people_of
from .calibration import (
    COVERAGES, N_BINS, Correction, Parts, PartsCorrection, accuracy_at_coverage, auroc, corrected,
    ece_by_chance, expected_calibration_error, kalai_scores,
    plot_coverage, plot_reliability, reliability_bins,
)

CALIBRATE_FILES = ["reliability.png", "coverage.png", "calibration.json", "abstention.json", "answers.tsv"]


@dataclass(frozen=True)
class Calibration:
    """``report``: what calibration.json holds (``calibration_report``, and under ``"rule"``
    what the rule answered); the answers, and whether the rule gives each."""

    report: dict
    answers: list[Answer]
    given: list[bool]


def calibration_report(conf: Sequence[float], right: Sequence[bool], correction: Correction | PartsCorrection | None = None,
                       parts: Sequence[Parts | None] | None = None) -> dict:
    """ECE (N_BINS equal-width bins) with the range a calibrated confidence scores by chance
    (ece_by_chance), AUROC, accuracy at coverage, Kalai's score when every question is answered,
    and with ``correction`` the same measures of the corrected confidence (each answer's ``parts``
    where the correction weighs them)."""
    at = {f"{c:g}": accuracy_at_coverage(conf, right, c) for c in COVERAGES}
    report = {"total": len(right), "right": sum(map(bool, right)), "ece": expected_calibration_error(conf, right),
              "ece_bins": N_BINS, "ece_by_chance": list(ece_by_chance(conf)), "auroc": auroc(conf, right),
              "accuracy_at_coverage": {c: {"right": r, "answered": n} for c, (r, n) in at.items()},
              "kalai": kalai_scores(right), "correction": correction.to_dict() if correction else None,
              "ece_corrected": None, "ece_corrected_by_chance": None, "auroc_corrected": None}
    if correction is not None:
        chance = corrected(conf, correction, parts)
        report.update(ece_corrected=expected_calibration_error(chance, right),
                      ece_corrected_by_chance=list(ece_by_chance(chance)), auroc_corrected=auroc(chance, right))
    return report


def calibrate(model, vocab, examples: list[QAExample], rule: Rule, out_dir: str | Path, *, title: str,
              policy=None, correction: Correction | PartsCorrection | None = None, batch_size: int = 256, overwrite: bool = False
              ) -> Calibration:
    """Answer the labelled ``examples``, measure the confidence against right and wrong, apply
    ``rule``, and write reliability.png, coverage.png, calibration.json (with ``policy``, the
    AbstainPolicy the rule comes from, when given) and answers.tsv into ``out_dir``;
    ``correction``: the confidence correction fitted on held-out people, whose ECE is reported too."""
    answers = answer_questions(model, vocab, examples, batch_size=batch_size)
    conf = [a.confidence for a in answers]
    right = [a.answer == e.answer for a, e in zip(answers, examples)]
    report = calibration_report(conf, right, correction, [a.parts for a in answers])
    given = decide(model, vocab, rule, people_of(examples, model), answers)
    k = sum(given)
    kept_right = sum(g and r for g, r in zip(given, right))
    report["rule"] = {"describe": rule.describe(), "confidence": rule.confidence, "familiarity": rule.familiarity,
                      "joint": rule.joint, "measure": rule.measure if rule.needs_familiarity else None,
                      "score": rule.scored,
                      "answered": k, "answered_right": kept_right, "right": sum(right), "total": len(right),
                      "kalai": kalai_scores(right, given),
                      "policy": policy.to_dict() if policy is not None else None}
    out, title = Path(out_dir), f"{title} (n={len(right)})"
    plot_reliability(reliability_bins(conf, right), out / "reliability.png",
                     f"{title}\nECE {report['ece']:.3f} ({N_BINS} bins)")
    plot_coverage(conf, right, out / "coverage.png", f"{title}\nAUROC {auroc_text(report['auroc'])}",
                  rule_point=(k / len(right), kept_right / max(1, k)))
    write_output(out / "calibration.json", json.dumps(report, indent=2) + "\n", overwrite)
    write_output(out / "answers.tsv", "question\tlabel\tanswer\tconfidence\tanswered\n" + "".join(
        f"{e.question}\t{e.answer}\t{a.answer}\t{a.confidence:.6f}\t{int(g)}\n"
        for e, a, g in zip(examples, answers, given)), overwrite)
    return Calibration(report, answers, given)


def auroc_text(value: float | None) -> str:
    return "undefined (all right or all wrong)" if value is None else f"{value:.3f}"
