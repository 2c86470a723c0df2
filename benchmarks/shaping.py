"""Attention-shaping losses on the QA task: pretrain + finetune with no shaping, with the focus
(entropy) loss and with the near (locality) loss, then dev accuracy and the heads' mean entropy
and attention distance on the dev questions. Writes a section of docs/benchmarks.md.

    python benchmarks/shaping.py                       # quick preset (CPU: about 3 x the demo)
    python benchmarks/shaping.py --preset tiny --max-steps 5 --benchmarks /tmp/B.md   # smoke run

Each setting is ``none`` or ``LOSS:LAMBDA``; the same loss and weight are used in both stages.
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

from _common import replace_section  # noqa: E402
from attnlab.model.checkpoint import load_model  # noqa: E402
from attnlab.config.settings import ModelConfig, get_preset  # noqa: E402
from attnlab.answering.evaluate import Score  # noqa: E402
from attnlab.probing.attention_maps import statistics_over  # noqa: E402
from attnlab.data.datasets import read_texts  # noqa: E402
from attnlab.config.settings import DEFAULT_DEV  # noqa: E402
from attnlab.training.pipeline import evaluate_file, finetune, pretrain  # noqa: E402
from attnlab.core.devices import resolve_device  # noqa: E402
from attnlab.data.vocab import MASK_CHAR  # noqa: E402



def parse_setting(text: str) -> tuple[str, float]:
    if text == "none":
        return "none", 0.0
    m = re.fullmatch(r"(focus|near):([0-9.eE+-]+)", text)
    if not m:
        raise SystemExit(f"bad setting {text!r}: use none, focus:LAMBDA or near:LAMBDA")
    return m.group(1), float(m.group(2))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="quick", help="model and training preset (default: quick)")
    p.add_argument("--attention", default="vanilla", help="attention variant (default: vanilla)")
    p.add_argument("--settings", nargs="+", default=["none", "focus:0.02", "near:0.005"],
                   help="losses to compare (default: none focus:0.02 near:0.005)")
    p.add_argument("--near-max", type=float, default=16.0, help="L_max of the near loss (default: 16)")
    p.add_argument("--max-steps", type=int, default=0, help="cap both stages at N steps (default: 0 = preset)")
    p.add_argument("--epochs", type=float, default=0, help="epochs of both stages (default: 0 = preset)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (default: auto)")
    p.add_argument("--out", default="runs/bench-shaping", help="run directory (default: runs/bench-shaping)")
    p.add_argument("--benchmarks", default="docs/benchmarks.md", help="file whose section is written (default: docs/benchmarks.md)")
    p.add_argument("--reuse", action="store_true",
                   help="reuse settings already finished in --out (their row.json) instead of retraining, so "
                        "settings can be trained by separate processes and gathered (default: retrain)")
    p.add_argument("--none-from", default=None, metavar="RUN",
                   help="take the 'none' row from a finished `attnlab compare` run of the same preset and "
                        "variant (e.g. runs/compare/vanilla): lambda = 0 trains bit-identically to the plain "
                        "loss, so it is the same run (default: train it)")
    args = p.parse_args(argv)

    preset = get_preset(args.preset)
    model_config = ModelConfig(**{**preset.model, "attention": args.attention})
    stage_overrides = dict(device=args.device)
    if args.max_steps:
        stage_overrides["max_steps"] = args.max_steps
    if args.epochs:
        stage_overrides["epochs"] = args.epochs
    questions = [q + MASK_CHAR for q in read_texts(DEFAULT_DEV)]
    out = Path(args.out)
    rows = []
    for setting in args.settings:
        name, weight = parse_setting(setting)
        shaping = dict(attn_loss=name, attn_loss_weight=weight, near_max=args.near_max)
        run = out / setting.replace(":", "-")
        if setting == "none" and args.none_from:
            run = Path(args.none_from)
            saved = json.loads((run / "row.json").read_text())
            fin_ce = json.loads((run / "finetune" / "metrics.jsonl").read_text().splitlines()[-1])["loss"]
            row = dict(dev=[saved["dev_correct"], saved["dev_total"]], pretrain_ce=saved["pretrain_loss"],
                       finetune_ce=fin_ce, seconds=saved["seconds"])
            print(f"== none: taken from {run}")
        elif args.reuse and (run / "row.json").exists():
            row = json.loads((run / "row.json").read_text())
            print(f"== {setting}: reusing the finished run in {run}")
        else:
            print(f"== {setting}: pretrain + finetune in {run}")
            start = time.perf_counter()
            _, _, pre = pretrain(model_config, dataclasses.replace(preset.pretrain, **stage_overrides, **shaping),
                                 run_dir=run / "pretrain")
            _, _, fin = finetune(dataclasses.replace(preset.finetune, **stage_overrides, **shaping),
                                 run_dir=run / "finetune", init=run / "pretrain")
            seconds = time.perf_counter() - start
            _, dev, _ = evaluate_file(run / "finetune", DEFAULT_DEV, device=args.device)
            row = dict(dev=[dev.correct, dev.total], pretrain_ce=pre.final_loss, finetune_ce=fin.final_loss,
                       seconds=seconds)
            (run / "row.json").write_text(json.dumps(row) + "\n")
        model, vocab, _ = load_model(run / "finetune", device=str(resolve_device(args.device)))
        ent, dist, n = statistics_over(model, vocab, questions, source=str(DEFAULT_DEV))
        rows.append((setting, Score(*row["dev"]), row["pretrain_ce"], row["finetune_ce"], ent, dist,
                     row["seconds"]))

    lines = [
        "## Attention-shaping losses",
        "",
        "`" + " ".join(["python benchmarks/shaping.py", *(argv if argv is not None else sys.argv[1:])]) + "`",
        f"(preset {preset.name}, {args.attention}; the loss and lambda apply to pretraining and finetuning;"
        f" L_max = {args.near_max}). Entropy (nats) and mean |t1 - t2| (characters) are per head, averaged"
        f" over the {len(questions)} dev questions with their sentinel, then over heads"
        " (min-max over heads in brackets).",
        "",
        "| setting | dev accuracy (95% Wilson CI) | pretrain CE | finetune CE | head entropy | attention distance | time |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for setting, dev, pre_ce, fin_ce, ent, dist, secs in rows:
        lines.append(
            f"| {setting} | {dev.with_interval()} | {pre_ce:.3f} | {fin_ce:.3f} | {ent.mean():.2f} [{ent.min():.2f}-{ent.max():.2f}]"
            f" | {dist.mean():.2f} [{dist.min():.2f}-{dist.max():.2f}] | {secs:.0f} s |")
    body = "\n".join(lines)
    print("\n" + body)
    path = Path(args.benchmarks)
    replace_section("shaping", body, path=path)
    print(f"\nwrote the section to {path}; runs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
