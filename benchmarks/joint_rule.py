"""The default abstention rule as one joint check of the name and the answer, against the two
checks it replaced, on the same weights and the same held-out answers.

    .venv/bin/python benchmarks/joint_rule.py runs/firms15 runs/species15 models/cpu --write

Two checks (the rule before): a name familiarity threshold keeping 99.5% of the held-out
subjects, then the highest threshold on the answer's chance right that keeps the conformal count
of held-out right answers, raised by the share of real names the name check may turn away (so
that both together keep ``--keep-right``). One joint check (the rule now): the highest threshold
on ln(name familiarity) + logit(chance right) that keeps the conformal count. Both are fitted on
the run's held-out training subjects only; judged on dev (right answers kept, wrong withheld)
and on invented subjects (``attnlab audit``'s names of seeds 0 and 1).

Two yardstick rows follow each run's rules: the same joint score, and the chance right alone,
with the threshold placed on dev itself so that it keeps exactly ``--keep-right`` of dev's right
answers. They read dev's labels, so no rule may be fitted that way; they say how many wrong
answers any threshold on that score could withhold at that share kept, which a rule fitted on
held-out subjects can only approach.
"""

from __future__ import annotations

import math
import sys

from _common import count_with_interval  # puts the checkout's attnlab first on sys.path
from confidence_parts import held_out_of, judge_runs, rule_cells, run_label

from attnlab.data.datasets import documents, read_qa, read_text  # noqa: E402
from attnlab.trust.abstention import (HeldOut, Rule, highest_keeping, joint_score, name_check_share,  # noqa: E402
                                      name_familiarity, people_of, rules_from)
from attnlab.trust.audit import audit_answers, invent_people  # noqa: E402
from attnlab.trust.calibration import conformal_count, correctable, corrected, fit_correction  # noqa: E402

SEEDS = (0, 1)


def two_checks(held: HeldOut, keep: float, chance, name_rule: Rule) -> Rule:
    """The rule before: ``name_rule``'s familiarity threshold, then a chance threshold keeping the
    conformal count of held-out right answers plus the name check's share (the union bound)."""
    scores = corrected(held.confidence, chance, held.parts)
    passing = sorted((s for s, r, f in zip(scores, held.right, held.familiarity)
                      if r and f >= name_rule.familiarity), reverse=True)
    share = name_check_share(held, name_rule.familiarity)
    needed = max(conformal_count(sum(held.right), keep),
                 min(conformal_count(sum(held.right), min(1.0, keep + share)), len(passing)))
    return Rule(passing[needed - 1], name_rule.familiarity, "two checks", chance, held.measure)


def placed(scores: list[float], right: list[bool], keep: float) -> float:
    """The highest threshold that keeps ceil(``keep`` x the right answers) of these: placed on
    the answers it is judged on (a yardstick, never a fitted rule)."""
    return highest_keeping(scores, right, math.ceil(keep * sum(right)), math.inf)


def yardsticks(model, vocab, seen, correction, measure: str, keep: float) -> dict[str, Rule]:
    """The joint score's and the chance's thresholds placed on dev (``placed``)."""
    chance = [Rule(chance=correction).score(a.confidence, a.parts) for a in seen.dev_answers]
    familiar = name_familiarity(model, vocab, people_of(seen.dev, model), measure=measure)
    joint = [joint_score(f, c) for f, c in zip(familiar, chance)]
    return {"joint, placed on dev (yardstick)": Rule(joint=placed(joint, seen.dev_right, keep), chance=correction,
                                                     measure=measure),
            "chance alone, placed on dev (yardstick)": Rule(placed(chance, seen.dev_right, keep), chance=correction)}


def measure(run: str, names: int, keep: float) -> list[list[str]]:
    model, vocab, (corpus, train, dev_file), held = held_out_of(run)
    correction = fit_correction(held.confidence, held.right, held.parts) if correctable(held.right) else None
    rules = rules_from(held, keep, correction)
    dev, docs = read_qa(dev_file, labelled=True), documents(read_text(corpus))
    seen = [audit_answers(model, vocab, invent_people(docs, names, seed), dev, read_qa(train, labelled=True))
            for seed in SEEDS]
    compared = {"two checks (before)": two_checks(held, keep, correction, rules["name"]), "joint (now)": rules["both"],
                **yardsticks(model, vocab, seen[0], correction, held.measure, keep)}
    rows = []
    for label, rule in compared.items():
        judged = [s.report(model, vocab, rule) for s in seen]
        kept, withheld, _ = rule_cells(judged[0])
        invented = [count_with_interval(j.invented_abstained, j.invented) for j in judged]
        rows.append([run_label(run), label, f"{sum(held.right)}/{len(held.right)}", kept, withheld,
                     *invented])
        print(" | ".join(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    headers = ["run", "rule", "held-out right", "dev right kept", "dev wrong withheld",
               *[f"invented abstained (names of seed {s})" for s in SEEDS]]
    return judge_runs(__doc__, argv, measure, "joint-rule", headers,
                      "\"I don't know\": one joint check of the name and the answer, against two checks")


if __name__ == "__main__":
    sys.exit(main())
