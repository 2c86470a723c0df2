"""The attention variants side by side: `attnlab variants` (a table of what each one costs and
can express) and `attnlab compare` (every variant through the same pretrain -> finetune -> dev
evaluation, written up as a markdown table and a bar chart).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .attention import REGISTRY
from .config import ModelConfig, TrainConfig


# ---- the table -----------------------------------------------------------------------------
@dataclass(frozen=True)
class VariantInfo:
    name: str
    parameters: int  # the whole model
    attention_parameters: int  # all layers' attention modules
    score_cost: str
    expresses: str


def variant_table(config: ModelConfig) -> list[VariantInfo]:
    """One row per registered variant, for ``config`` with only the attention changed."""
    import torch

    from .model import GPT

    rows = []
    for name, cls in REGISTRY.items():
        torch.manual_seed(0)
        model = GPT(dataclasses.replace(config, attention=name))
        rows.append(VariantInfo(name, model.num_parameters(), model.num_parameters(attention_only=True),
                                cls.score_cost, cls.expresses))
    return rows


def format_variant_table(rows: list[VariantInfo]) -> str:
    lines = ["| variant | parameters | attention parameters | score cost | can / cannot express |",
             "| --- | ---: | ---: | --- | --- |"]
    lines += [f"| {r.name} | {r.parameters:,} | {r.attention_parameters:,} | {r.score_cost} | "
              f"{r.expresses} |" for r in rows]
    return "\n".join(lines)


def _config_with_vocab(args: argparse.Namespace) -> ModelConfig:
    """The command line's model config, its vocabulary size taken from the corpus."""
    from . import cli
    from .data import read_text
    from .vocab import Vocab

    config = cli.model_config_from(args)
    return dataclasses.replace(config, vocab_size=len(Vocab.from_text(read_text(args.corpus))))


def cmd_variants(args: argparse.Namespace) -> int:
    config = _config_with_vocab(args)
    print(f"attention variants for preset {args.preset!r}: {config.n_layer} layers, {config.n_head} "
          f"heads, width d={config.n_embd}, block T={config.block_size}, vocabulary "
          f"{config.vocab_size} (from {args.corpus}), positions {config.positions}/{config.position_mode}"
          f"{', rel_clip ' + str(config.rel_clip) if config.rel_clip else ''}")
    print(format_variant_table(variant_table(config)))
    return 0


# ---- the comparison ------------------------------------------------------------------------
@dataclass
class CompareRow:
    model: str
    parameters: int | None
    pretrain_loss: float | None
    dev_correct: int | None
    dev_total: int | None
    seconds: float | None
    run_dir: str
    stored: int | None = None  # dev people whose line the model completes with their place
    stored_total: int | None = None  # of those whose line states it

    @property
    def dev_percent(self) -> float | None:
        return None if not self.dev_total else 100.0 * (self.dev_correct or 0) / self.dev_total


def compare(
    model_config: ModelConfig,
    pretrain_config: TrainConfig,
    finetune_config: TrainConfig,
    scratch_config: TrainConfig,
    *,
    variants: list[str] | None = None,
    corpus: str | Path,
    train_file: str | Path,
    dev_file: str | Path,
    out: str | Path = "runs/compare",
    device: str = "auto",
    scratch: bool = True,
    reuse: bool = False,
    log: Callable[[str], None] = print,
) -> list[CompareRow]:
    """Every variant (default: the whole registry) through pretrain -> finetune -> dev, with
    the same model shape, seeds and data; plus the most-frequent-place baseline and, if
    ``scratch``, vanilla finetuned without pretraining. Writes results.md/.json and a chart.

    Each finished run leaves its row in ``row.json`` in its directory; with ``reuse`` those
    rows are read back instead of retrained, so an interrupted comparison continues where it
    stopped and variants trained by separate processes (e.g. one per core) are gathered into
    one table."""
    from .pipeline import baseline, evaluate_file, finetune, pretrain

    variants = list(variants or REGISTRY)
    unknown = [v for v in variants if v not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(REGISTRY)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stages = {name: dataclasses.replace(c, device=device) for name, c in
              (("pretrain", pretrain_config), ("finetune", finetune_config), ("scratch", scratch_config))}
    log(f"== attnlab compare: {', '.join(variants)}; outputs in {out}")

    place, base = baseline(train_file, dev_file)
    log(f'baseline: always answering "{place}": {base if base is not None else "no labels"} on {dev_file}')
    rows = [CompareRow(f'baseline ("{place}")', None, None, None if base is None else base.correct,
                       None if base is None else base.total, None, "-")]

    def evaluate(run_dir: Path):
        _, result, _ = evaluate_file(run_dir, dev_file, device=device, log=log)
        return (None, None) if result is None else (result.correct, result.total)

    def stored(run_dir: Path) -> dict[str, int | None]:
        from .checkpoint import load_model
        from .data import documents, read_qa, read_text
        from .knowledge import CorpusIndex, measure_stored

        examples = read_qa(dev_file)
        if any(e.answer is None for e in examples):
            return {}
        model, vocab, _ = load_model(run_dir)
        result = measure_stored(model, vocab, CorpusIndex(documents(read_text(corpus))), examples)
        return {"stored": result.stored, "stored_total": result.total}

    def finished(run: Path) -> CompareRow | None:
        saved = run / "row.json"
        if reuse and saved.exists():
            log(f"reusing the finished run in {run}")
            return CompareRow(**json.loads(saved.read_text()))
        return None

    def record(row: CompareRow) -> CompareRow:
        (Path(row.run_dir) / "row.json").write_text(json.dumps(dataclasses.asdict(row)) + "\n")
        return row

    if scratch:
        row = finished(out / "scratch")
        if row is None:
            log("== no pretraining: vanilla finetuned from scratch")
            start = time.perf_counter()
            model, _, _ = finetune(stages["scratch"], run_dir=out / "scratch", corpus=corpus,
                                   train_file=train_file,
                                   model_config=dataclasses.replace(model_config, attention="vanilla"), log=log)
            secs = time.perf_counter() - start
            row = record(CompareRow("vanilla, no pretraining", model.num_parameters(), None,
                                    *evaluate(out / "scratch"), secs, str(out / "scratch"),
                                    **stored(out / "scratch")))
        rows.append(row)

    for i, name in enumerate(variants, 1):
        row = finished(out / name)
        if row is None:
            log(f"== {i}/{len(variants)} {name}: pretrain, finetune, evaluate on {dev_file}")
            config = dataclasses.replace(model_config, attention=name)
            start = time.perf_counter()
            model, _, pre = pretrain(config, stages["pretrain"], corpus=corpus, run_dir=out / name / "pretrain",
                                     log=log)
            finetune(stages["finetune"], run_dir=out / name / "finetune", init=out / name / "pretrain",
                     corpus=corpus, train_file=train_file, log=log)
            secs = time.perf_counter() - start
            row = record(CompareRow(name, model.num_parameters(), pre.final_loss,
                                    *evaluate(out / name / "finetune"), secs, str(out / name),
                                    **stored(out / name / "finetune")))
        rows.append(row)

    table = compare_table(rows)
    (out / "results.md").write_text(table + "\n")
    (out / "results.json").write_text(json.dumps([dataclasses.asdict(r) for r in rows], indent=2) + "\n")
    chart = out / "dev_accuracy.png"
    plot_dev_accuracy(rows, chart, title=f"dev accuracy on {Path(dev_file).name}")
    log("")
    log(table)
    log(f"\nwrote {out / 'results.md'}, {out / 'results.json'} and {chart}; runs in {out}/*/")
    return rows


def compare_table(rows: list[CompareRow]) -> str:
    from .evaluate import Score

    lines = ["| variant | parameters | pretrain loss | dev extracted (95% CI) | dev stored | time |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        params = "-" if r.parameters is None else f"{r.parameters:,}"
        loss = "-" if r.pretrain_loss is None else f"{r.pretrain_loss:.3f}"
        acc = "-" if r.dev_percent is None else Score(r.dev_correct or 0, r.dev_total).with_interval()
        stored = "-" if not r.stored_total else f"{r.stored}/{r.stored_total}"
        secs = "-" if r.seconds is None else f"{r.seconds:.0f} s"
        lines.append(f"| {r.model} | {params} | {loss} | {acc} | {stored} | {secs} |")
    return "\n".join(lines)


def plot_dev_accuracy(rows: list[CompareRow], path: Path, title: str) -> Path:
    """Horizontal bars of dev accuracy; the baseline and no-pretraining rows in grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r.dev_percent is not None]
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(shown) + 1.2))
    colours = ["tab:blue" if r.model in REGISTRY else "tab:gray" for r in shown]
    ax.barh([r.model for r in shown], [r.dev_percent for r in shown], color=colours)
    for y, r in enumerate(shown):
        ax.text(r.dev_percent, y, f" {r.dev_percent:.1f}%", va="center")
    ax.invert_yaxis()
    ax.set_xlabel("dev accuracy (%)")
    ax.set_xlim(0, max([10.0] + [r.dev_percent * 1.2 for r in shown]))
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def cmd_compare(args: argparse.Namespace) -> int:
    from . import cli

    if args.attention is not None:
        raise ValueError("compare trains several variants: choose them with --variants, not --attention")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()] if args.variants else None
    compare(
        cli.model_config_from(args),
        cli.train_config_from(args, "pretrain"),
        cli.train_config_from(args, "finetune"),
        cli.train_config_from(args, "finetune_scratch"),
        variants=variants, corpus=args.corpus, train_file=args.train_file, dev_file=args.dev_file,
        out=args.out, device=args.device or "auto", scratch=args.scratch, reuse=args.reuse,
    )
    return 0


def register(command) -> None:
    """Add `variants` and `compare` to the CLI (see cli._EXTRA_COMMANDS)."""
    from . import cli

    p = command("variants", "table of the attention variants: parameters, score cost, what each "
                "can and cannot express", cmd_variants)
    cli._common(p)
    p.add_argument("--corpus", default="data/wiki.txt", help="corpus that defines the vocabulary size")
    cli.add_model_flags(p)

    p = command("compare", "every attention variant through pretrain -> finetune -> dev evaluation, "
                "same preset, seed and data; a markdown table and a bar chart", cmd_compare)
    cli._common(p)
    p.add_argument("--variants", default=None,
                   help=f"comma-separated variants to train (default: all: {','.join(REGISTRY)})")
    p.add_argument("--out", default="runs/compare", help="output directory")
    p.add_argument("--corpus", default="data/wiki.txt", help="pretraining corpus (also defines the vocabulary)")
    p.add_argument("--train-file", default="data/birth_places_train.tsv", help="question<TAB>place finetuning file")
    p.add_argument("--dev-file", default="data/birth_dev.tsv", help="labelled file every model is scored on")
    p.add_argument("--scratch", action=argparse.BooleanOptionalAction, default=True,
                   help="also finetune vanilla without pretraining as a reference row")
    p.add_argument("--reuse", action="store_true",
                   help="reuse runs already finished in --out (their row.json) instead of retraining "
                        "(default: retrain everything)")
    cli.add_model_flags(p)
    cli.add_train_flags(p, ("pretrain", "finetune", "finetune_scratch"))
