"""Answers users can trust: for each model, `attnlab calibrate` on dev (ECE, AUROC, accuracy at
coverage, the fitted abstention rule) and `attnlab audit` (invented people against dev people),
as tables; ``--write`` puts them in the "trust" section of docs/benchmarks.md.

    .venv/bin/python benchmarks/trust.py runs/knowledge-cpu/finetune:shipped-recipe \\
        runs/holdout/finetune:holdout-recipe --out runs/trust --write

A model is RUN or RUN:LABEL; add =FRACTION (RUN:LABEL=0.1) to say which share of the training
file the run held out of training (default: what the run records, else 0.1, with a note that the
fit is optimistic if the run trained on those people). Plots go to OUT/LABEL/.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _common import REPO, count_with_interval, report, table  # puts the checkout's attnlab first on sys.path

from attnlab import cli  # noqa: E402
from attnlab.data.datasets import documents, read_text  # noqa: E402
from attnlab.trust.evidence import CorpusIndex  # noqa: E402
from attnlab.trust.policy import DEFAULT_KEEP_RIGHT  # noqa: E402

DEV = "data/birth_dev.tsv"


def parse_model(spec: str) -> tuple[str, str, str | None]:
    spec, _, fraction = spec.partition("=")
    run, _, label = spec.partition(":")
    return run, label or Path(run).name, fraction or None


def measure(run: str, label: str, fraction: str | None, out: Path, names: int, keep: float,
            reuse: bool = False) -> tuple[dict, dict]:
    fit = ["--keep-right", str(keep)] + (["--holdout-fraction", fraction] if fraction else [])
    done = [out / label / f for f in ("calibration.json", "audit.json", "answers.tsv")]
    if reuse and all(f.is_file() for f in done):
        print(f"== {label}: reusing {out / label} (written by an earlier run of this script)", flush=True)
        return json.loads(done[0].read_text()), json.loads(done[1].read_text())
    for argv in (["calibrate", run, "--eval-file", DEV, "--out-dir", str(out / label), *fit],
                 ["audit", run, "--names", str(names), "--out-dir", str(out / label), *fit]):
        print(f"== attnlab {' '.join(argv)}", flush=True)
        if cli.main(argv) != 0:
            raise SystemExit(f"attnlab {argv[0]} failed on {run}")
    return (json.loads((out / label / "calibration.json").read_text()),
            json.loads((out / label / "audit.json").read_text()))


def pct(k: int, n: int) -> str:
    return count_with_interval(k, n) if n else "-"


def calibration_row(label: str, c: dict) -> list[str]:
    overall = c["right"] / c["total"]
    at = {k: v["right"] / v["answered"] for k, v in c["accuracy_at_coverage"].items()}
    rule = c["rule"]
    return [label, pct(c["right"], c["total"]), f"{c['ece']:.3f}",
            "-" if c["auroc"] is None else f"{c['auroc']:.3f}",
            *(f"{100 * at[k]:.1f}%" for k in ("0.1", "0.3", "0.5", "1")),
            f"{at['0.3'] / overall:.2f}" if overall else "-",
            f"{(1 - at['0.3']) / (1 - overall):.2f}" if overall < 1 else "-",
            f"{pct(rule['answered'], rule['total'])}, {pct(rule['answered_right'], rule['answered'])} right"]


def audit_rows(label: str, a: dict) -> list[list[str]]:
    rows = []
    for key, name in [("confidence", "confidence"), ("name", "name familiarity"), ("both", "both (--abstain auto)")]:
        r = a[key]
        met = r["invented_abstained"] >= 0.9 * r["invented"] and r["dev_right_kept"] >= 0.8 * r["dev_right"]
        rows.append([label, name, pct(r["invented_abstained"], r["invented"]), pct(r["dev_abstained"], r["dev"]),
                     pct(r["dev_right_kept"], r["dev_right"]), "yes" if met else "no"])
    return rows


def evidence_rows(label: str, answers_tsv: Path, index: CorpusIndex) -> list[list[str]]:
    """Dev answers split by whether the corpus line of the person states them (whole words):
    retrieved-looking against made-up-looking answers."""
    groups: dict[str, list[tuple[bool, float, bool]]] = {"stated in the person's line": [], "not stated there": []}
    for line in answers_tsv.read_text(encoding="utf-8").splitlines()[1:]:
        question, gold, answer, confidence, answered = line.split("\t")
        key = "stated in the person's line" if index.find(question, answer).supporting else "not stated there"
        groups[key].append((answer == gold, float(confidence), answered == "1"))
    rows = []
    for key, items in groups.items():
        n = len(items)
        right = sum(r for r, _, _ in items)
        mean_conf = sum(c for _, c, _ in items) / n if n else 0.0
        rows.append([label, key, str(n), pct(right, n), f"{mean_conf:.2f}", pct(sum(g for _, _, g in items), n)])
    return rows


def places_row(label: str, a: dict) -> list[str]:
    r = a["never"]
    top = ", ".join(f"{p} {c}" for p, c in r["top_places"][:5])
    e = a["name_echo"]
    echo = f"{pct(e['echoed'], e['answered'])} ({100 * e['chance']:.1f}%)"
    return [label, str(r["invented"]), f"{r['entropy_bits']:.2f}", f"{100 * r['share_in_train_top10']:.1f}%", echo, top]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="RUN[:LABEL][=HELD_OUT_FRACTION]")
    parser.add_argument("--out", default="runs/trust", help="directory for each model's plots and JSON")
    parser.add_argument("--names", type=int, default=500, help="invented people per audit")
    parser.add_argument("--keep-right", type=float, default=DEFAULT_KEEP_RIGHT, help="--abstain auto's target (the policy's default)")
    parser.add_argument("--reuse", action="store_true",
                        help="take a model's numbers from OUT/LABEL when an earlier run left them there")
    parser.add_argument("--write", action="store_true", help="write the trust section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    out = Path(args.out)
    cal, aud, places, evidence = [], [], [], []
    index = CorpusIndex(documents(read_text(REPO / "data" / "wiki.txt")))
    for spec in args.models:
        run, label, fraction = parse_model(spec)
        c, a = measure(run, label, fraction, out, args.names, args.keep_right, args.reuse)
        cal.append(calibration_row(label, c))
        aud += audit_rows(label, a)
        places.append(places_row(label, a))
        evidence += evidence_rows(label, out / label / "answers.tsv", index)
    text = "\n\n".join([
        f"Calibration on {DEV} (confidence of the greedy answer; ECE over 15 equal-width bins; accuracy "
        "of the most confident 10/30/50/100% of the questions; the --abstain auto rule fitted on the held-out "
        f"training people for the target of answering {args.keep_right:.0%} of their right answers):",
        table(["model", "dev accuracy", "ECE", "AUROC", "acc@10%", "acc@30%", "acc@50%", "acc@100%",
               "acc@30% / overall", "error@30% / overall", "auto rule on dev: answered, right"], cal),
        f"Invented people ({args.names}, first names and surnames of the corpus recombined, no corpus line "
        "holds the full name) against the 500 dev people, for each rule fitted on the held-out training people "
        "(target: >= 90% of invented abstained and >= 80% of the dev questions answered correctly still answered):",
        table(["model", "abstain on", "invented abstained", "dev abstained", "dev right kept", "target met"], aud),
        "Retrieved or made up? Dev answers split by whether the asked person's corpus line states the "
        "answer as whole words (`ask --evidence`); the model never reads the corpus when answering:",
        table(["model", "answer", "answers", "right", "mean confidence", "answered by --abstain auto"], evidence),
        "Places the model answers for invented people when it never abstains (entropy of the answered places; "
        "share that are among the training file's 10 most frequent places; share that are the place of a real "
        "training or dev person with the same first name or surname, and in brackets that share with the "
        "answers shuffled among the invented people):",
        table(["model", "invented", "entropy (bits)", "in train top 10", "a namesake's place (shuffled)",
               "most frequent answers"], places),
        f"Plots: {out}/LABEL/reliability.png, coverage.png, audit.png. How each model was trained: "
        "docs/guides/trust.md and the lab notebook (docs/notebook.md)." + (" With --reuse, a model's numbers come from the JSON an earlier "
                                                   "run of this script left in OUT/LABEL." if args.reuse else ""),
    ])
    report("trust", text, write=args.write, title="Answers users can trust (benchmarks/trust.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
