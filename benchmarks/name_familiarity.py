"""Two measures of a name's familiarity, on the same weights: the probability of the whole name
(``NAME.`` read as a corpus line's opening; the measure rules are fitted on now) against the
lowest probability of one of its characters (the measure of rules stored before), each with its
threshold fitted on the held-out training subjects (keeping 99.5% of them), judged on the dev
subjects (real, never in a fit) and on invented ones (``attnlab audit``'s names: the first word
of one name and the last of another).

    .venv/bin/python benchmarks/name_familiarity.py runs/firms15 runs/species15 models/cpu --write

Per run and measure: how well the familiarity tells dev from invented names (AUROC), the name
check alone (dev subjects passing it, invented subjects stopped), and the default rule (the name
check and the confidence threshold, keep-right 0.97, on the run's correction): dev right answers
kept, dev wrong answers withheld, invented subjects abstained on.
"""

from __future__ import annotations

import dataclasses
import sys

from _common import count_with_interval  # puts the checkout's attnlab first on sys.path
from confidence_parts import held_out_of, judge_runs, rule_cells, run_label

from attnlab.data.datasets import documents, read_qa, read_text  # noqa: E402
from attnlab.trust.abstention import FAMILIARITY_MEASURES, name_familiarity, people_of, rules_from  # noqa: E402
from attnlab.trust.audit import audit_answers, invent_people  # noqa: E402
from attnlab.trust.calibration import auroc, correctable, fit_correction  # noqa: E402


def measure(run: str, names: int, keep: float) -> list[list[str]]:
    model, vocab, (corpus, train, dev_file), held = held_out_of(run)
    correction = fit_correction(held.confidence, held.right, held.parts) if correctable(held.right) else None
    dev = read_qa(dev_file, labelled=True)
    seen = audit_answers(model, vocab, invent_people(documents(read_text(corpus)), names, 0), dev,
                         read_qa(train, labelled=True))
    dev_names = sorted(set(people_of(dev, model)))
    rows = []
    for how in FAMILIARITY_MEASURES:
        measured = dataclasses.replace(held, measure=how,
                                       familiarity=name_familiarity(model, vocab, held.names, measure=how))
        rules = rules_from(measured, keep, correction)
        known = name_familiarity(model, vocab, dev_names, measure=how)
        invented = name_familiarity(model, vocab, seen.invented, measure=how)
        separation = auroc(known + invented, [True] * len(known) + [False] * len(invented))
        passing = sum(f >= rules["name"].familiarity for f in known)
        stopped = sum(f < rules["name"].familiarity for f in invented)
        rows.append([run_label(run), how, f"{separation:.3f}", f"{passing}/{len(known)}",
                     count_with_interval(stopped, len(invented)), *rule_cells(seen.report(model, vocab, rules["both"]))])
        print(" | ".join(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    headers = ["run", "familiarity of", "AUROC dev/invented names", "dev names passing", "invented names stopped",
               "dev right kept (rule)", "dev wrong withheld", "invented abstained (rule)"]
    return judge_runs(__doc__, argv, measure, "name-familiarity", headers,
                      "A name's familiarity: the whole name's probability against its least likely character")


if __name__ == "__main__":
    sys.exit(main())
