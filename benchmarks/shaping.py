"""Attention-shaping losses on the QA task: pretrain + finetune with no shaping, with the focus
(entropy) loss and with the near (locality) loss, then dev accuracy and the heads' mean entropy
and attention distance on the dev questions. Writes a section of docs/benchmarks.md.

    python benchmarks/shaping.py                       # quick preset (CPU: about 3 x the demo)
    python benchmarks/shaping.py --preset tiny --max-steps 5 --benchmarks /tmp/B.md   # smoke run
    python benchmarks/shaping.py --seeds 3             # each setting with 3 seeds, paired tests

Each setting is ``none`` or ``LOSS:LAMBDA``; the same loss and weight are used in both stages.
Each setting is compared with ``none`` (or the first setting) on the same dev questions and
seeds: mean accuracy with a 95% interval over questions and seeds, and the paired exact McNemar
test (attnlab/experiments/comparison.py, docs/guides/comparisons.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import command_line, replace_section  # noqa: E402
from attnlab.model.checkpoint import load_model  # noqa: E402
from attnlab.config.settings import ModelConfig, TrainConfig, get_preset  # noqa: E402
from attnlab.answering.evaluate import Score  # noqa: E402
from attnlab.experiments.comparison import (  # noqa: E402
    INTERVAL_METHOD, TEST_METHOD, compare_models, correctness, holm_note, read_correctness)
from attnlab.probing.attention_maps import statistics_over  # noqa: E402
from attnlab.data.datasets import read_qa, read_texts  # noqa: E402
from attnlab.config.settings import DEFAULT_DEV  # noqa: E402
from attnlab.training.pipeline import evaluate_file, finetune, pretrain  # noqa: E402
from attnlab.experiments.compare import equal_passes, seed_dir  # noqa: E402
from attnlab.experiments.provenance import check_settings, stage_settings  # noqa: E402
from attnlab.core.devices import resolve_device  # noqa: E402
from attnlab.data.vocab import MASK_CHAR  # noqa: E402



def parse_setting(text: str) -> tuple[str, float]:
    if text == "none":
        return "none", 0.0
    m = re.fullmatch(r"(focus|near):([0-9.eE+-]+)", text)
    if not m:
        raise SystemExit(f"bad setting {text!r}: use none, focus:LAMBDA or near:LAMBDA")
    return m.group(1), float(m.group(2))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="quick", help="model and training preset (default: quick)")
    p.add_argument("--attention", default="vanilla", help="attention variant (default: vanilla)")
    p.add_argument("--settings", nargs="+", default=["none", "focus:0.02", "near:0.005"],
                   help="losses to compare (default: none focus:0.02 near:0.005)")
    p.add_argument("--near-max", type=float, default=16.0, help="L_max of the near loss (default: 16)")
    p.add_argument("--max-steps", type=int, default=0, help="cap both stages at N steps (default: 0 = preset)")
    p.add_argument("--epochs", type=float, default=0, help="epochs of both stages (default: 0 = preset)")
    p.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="train each setting N times, seed k with the preset's seeds plus k, the same seeds for "
                        "every setting (runs in SETTING/seed-K/ when N > 1) (default: 1)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (default: auto)")
    p.add_argument("--out", default="runs/bench-shaping", help="run directory (default: runs/bench-shaping)")
    p.add_argument("--benchmarks", default="docs/benchmarks.md", help="file whose section is written (default: docs/benchmarks.md)")
    p.add_argument("--reuse", action="store_true",
                   help="reuse settings already finished in --out (their row.json) instead of retraining, so "
                        "settings can be trained by separate processes and gathered (default: retrain)")
    p.add_argument("--none-from", default=None, metavar="RUN",
                   help="take the 'none' rows from a finished `attnlab compare` run of the same preset and "
                        "variant (e.g. runs/compare/vanilla; with --seeds N, its seed-K directories; its "
                        "settings are checked): lambda = 0 trains bit-identically to the plain loss, so it is "
                        "the same run (default: train it)")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error(f"--seeds must be at least 1, got {args.seeds}")
    return args


def none_from(run: Path) -> dict:
    """The row of a finished `attnlab compare` run, as this script records its own."""
    saved = json.loads((run / "row.json").read_text())
    fin_ce = json.loads((run / "finetune" / "metrics.jsonl").read_text().splitlines()[-1])["loss"]
    return dict(dev=[saved["dev_correct"], saved["dev_total"]], pretrain_ce=saved["pretrain_loss"],
                finetune_ce=fin_ce, seconds=saved["seconds"], dev_each=saved.get("dev_each") or dev_each_of(run))


def dev_each_of(run: Path) -> str:
    """A finished run's per-question dev correctness (0/1 a question), from the predictions its
    finetuned model wrote (rows recorded before the rows carried it)."""
    predictions = run / "finetune" / f"predictions-{Path(DEFAULT_DEV).stem}.txt"
    return "".join("1" if c else "0" for c in read_correctness(predictions, DEFAULT_DEV))


def stage_configs(setting: str, k: int, args, preset) -> tuple[TrainConfig, TrainConfig]:
    """The pretraining and finetuning configs of one setting with seed k (each stage's seed plus
    k; the pretraining's epochs as given, never fitted to --minutes, as `compare` trains them)."""
    name, weight = parse_setting(setting)
    overrides = dict(device=args.device, attn_loss=name, attn_loss_weight=weight, near_max=args.near_max,
                     preset=preset.name)
    if args.max_steps:
        overrides["max_steps"] = args.max_steps
    if args.epochs:
        overrides["epochs"] = args.epochs
    return (equal_passes(dataclasses.replace(preset.pretrain, **overrides, seed=preset.pretrain.seed + k)),
            dataclasses.replace(preset.finetune, **overrides, seed=preset.finetune.seed + k))


def check_none_run(run: Path, k: int, args, preset, model_config) -> None:
    """A --none-from run must have been made with the settings ``none`` would train with seed k
    (a one-line error names what differs)."""
    stored = json.loads((run / "settings.json").read_text()) if (run / "settings.json").is_file() else None
    pre, fin = stage_configs("none", k, args, preset)
    current = {"model": model_config.to_dict(), "pretrain": stage_settings(pre), "finetune": stage_settings(fin)}
    check_settings(run / "settings.json", stored and {key: stored.get(key) for key in current}, current)


def train_row(run: Path, setting: str, k: int, args, preset, model_config) -> dict:
    """Pretrain and finetune one setting with seed k (each stage's seed plus k) in ``run``; its
    row (dev_each: one 0/1 per dev question) is written to run/row.json."""
    pretrain_config, finetune_config = stage_configs(setting, k, args, preset)
    start = time.perf_counter()
    _, _, pre = pretrain(model_config, pretrain_config, run_dir=run / "pretrain")
    _, _, fin = finetune(finetune_config, run_dir=run / "finetune", init=run / "pretrain")
    seconds = time.perf_counter() - start
    answers, dev, _ = evaluate_file(run / "finetune", DEFAULT_DEV, device=args.device)
    labels = [e.answer for e in read_qa(DEFAULT_DEV, labelled=True)]
    each = "".join("1" if c else "0" for c in correctness([a.answer for a in answers], labels))
    row = dict(dev=[dev.correct, dev.total], pretrain_ce=pre.final_loss, finetune_ce=fin.final_loss,
               seconds=seconds, dev_each=each, seed=preset.pretrain.seed + k)
    (run / "row.json").write_text(json.dumps(row) + "\n")
    return row


def setting_rows(setting: str, args, preset, model_config, questions: list[str]) -> dict:
    """Every seed of one setting, trained or reused, with the heads' entropy and distance
    averaged over the seeds' models."""
    rows, ents, dists = [], [], []
    for k in range(args.seeds):
        run = seed_dir(Path(args.out) / setting.replace(":", "-"), k, args.seeds)
        if setting == "none" and args.none_from:
            run = seed_dir(Path(args.none_from), k, args.seeds)
            try:
                check_none_run(run, k, args, preset, model_config)
            except ValueError as e:
                raise SystemExit(f"error: --none-from: {e}") from None
            row = none_from(run)
            print(f"== none, seed {preset.pretrain.seed + k}: taken from {run}")
        elif args.reuse and (run / "row.json").exists():
            row = json.loads((run / "row.json").read_text())
            row["dev_each"] = row.get("dev_each") or dev_each_of(run)
            print(f"== {setting}, seed {preset.pretrain.seed + k}: reusing the finished run in {run}")
        else:
            print(f"== {setting}, seed {preset.pretrain.seed + k}: pretrain + finetune in {run}")
            row = train_row(run, setting, k, args, preset, model_config)
        model, vocab, _ = load_model(run / "finetune", device=str(resolve_device(args.device)))
        ent, dist, _ = statistics_over(model, vocab, questions, source=str(DEFAULT_DEV))
        rows.append(row)
        ents.append(ent)
        dists.append(dist)
    mean = lambda key: sum(r[key] for r in rows) / len(rows)  # noqa: E731
    return dict(runs=[[c == "1" for c in r["dev_each"]] for r in rows], pretrain_ce=mean("pretrain_ce"),
                finetune_ce=mean("finetune_ce"), seconds=sum(r["seconds"] for r in rows),
                entropy=sum(ents) / len(ents), distance=sum(dists) / len(dists))


def section(args, argv, preset, results: dict[str, dict], n_questions: int) -> str:
    reference = "none" if "none" in results else next(iter(results))
    compared = compare_models({s: r["runs"] for s, r in results.items()}, reference)
    lines = [
        "## Attention-shaping losses",
        "",
        f"`{command_line(argv, script=__file__)}`",
        f"(preset {preset.name}, {args.attention}, {args.seeds} seed(s) per setting: the preset's seeds plus 0.."
        f"{args.seeds - 1}; the loss and lambda apply to pretraining and finetuning; L_max = {args.near_max})."
        f" Entropy (nats) and mean |t1 - t2| (characters) are per head, averaged over the {n_questions} dev"
        " questions with their sentinel, then over heads and seeds (min-max over heads in brackets)."
        f" 95% CI: {INTERVAL_METHOD}. p: {TEST_METHOD} against `{reference}`, two-sided; the verdict at"
        " p < 0.05 (docs/guides/comparisons.md). CE and time: mean and total over the seeds.",
        "",
        f"| setting | dev accuracy, mean over seeds (95% CI) | each seed | p vs {reference} | verdict "
        "| pretrain CE | finetune CE | head entropy | attention distance | time |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for setting, r in results.items():
        summary, test = compared[setting]
        counts = ", ".join(map(str, summary.counts)) + f" of {summary.total}"
        p, verdict = ("-", "reference") if test is None else (f"{test.combined.p:.3g}", test.verdict)
        ent, dist = r["entropy"], r["distance"]
        lines.append(
            f"| {setting} | {summary.shown()} | {counts} | {p} | {verdict} | {r['pretrain_ce']:.3f} | "
            f"{r['finetune_ce']:.3f} | {ent.mean():.2f} [{ent.min():.2f}-{ent.max():.2f}]"
            f" | {dist.mean():.2f} [{dist.min():.2f}-{dist.max():.2f}] | {r['seconds']:.0f} s |")
    note = holm_note({setting: test for setting, (_, test) in compared.items()}, reference)
    return "\n".join(lines + (["", note] if note else []))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for setting in args.settings:
        parse_setting(setting)  # every setting checked before any training
    preset = get_preset(args.preset)
    model_config = ModelConfig(**{**preset.model, "attention": args.attention})
    questions = [q + MASK_CHAR for q in read_texts(DEFAULT_DEV)]
    results = {s: setting_rows(s, args, preset, model_config, questions) for s in args.settings}
    body = section(args, argv, preset, results, len(questions))
    print("\n" + body)
    path = Path(args.benchmarks)
    replace_section("shaping", body, path=path)
    print(f"\nwrote the section to {path}; runs in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
