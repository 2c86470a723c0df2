"""Experiment commands: the `demo`, `compare` the attention variants, the `variants` table,
`plot` the training curves of runs."""

from __future__ import annotations

import argparse
import dataclasses
import os

from ..core import bounds, paths
from ..model.attention.registry import VARIANTS
from ..core.outputs import refuse_existing
from . import flags, results


def cmd_demo(args: argparse.Namespace) -> int:
    from ..model.checkpoint import load_checkpoint
    from ..experiments.demo import demo

    paths.output_dir(args.out_dir, "--out-dir")
    if args.shipped and os.path.lexists(args.shipped):  # scored last: a damaged one is refused first
        load_checkpoint(args.shipped, training_state=False)
    rows = demo(args.preset, out=args.out_dir, attention=args.attention, device=args.device,
                shipped=args.shipped or None, resume=args.resume, overwrite=args.overwrite)
    _publish_rows(args, rows)
    return 0


def _publish_rows(args: argparse.Namespace, rows) -> None:
    """--json of demo and compare: the table's rows and the files written."""
    from ..experiments.results import RESULT_FILES

    results.publish(args, {"rows": [r.to_dict() for r in rows],
                           "written": [os.path.join(args.out_dir, f) for f in RESULT_FILES]})


def cmd_compare(args: argparse.Namespace) -> int:
    from ..data.datasets import read_corpus, read_questions
    from ..config.settings import TrainConfig
    from ..experiments.compare import CompareSettings, compare

    if args.attention is not None:
        raise ValueError("compare trains several variants: choose them with --variants, not --attention")
    configs = (flags.model_config_from(args), flags.train_config_from(args, "pretrain"),
               flags.train_config_from(args, "finetune"), flags.train_config_from(args, "finetune_scratch"))
    read_corpus(paths.input_file(args.corpus, "--corpus"))
    read_questions(paths.input_file(args.train_file, "--train-file"), labelled=True)
    read_questions(paths.input_file(args.eval_file, "--eval-file"))
    paths.output_dir(args.out_dir, "--out-dir")
    if args.records:
        paths.output_dir(args.records, "--records")
    variants = None if args.variants is None else [v.strip() for v in args.variants.split(",") if v.strip()]
    if variants == []:
        raise ValueError(f"--variants {args.variants!r} names no variant; leave it out to train all of them")
    # --minutes given is the budget of the whole comparison; a preset's own minutes are not
    minutes = flags.overrides(args, TrainConfig).get("minutes") or 0.0
    rows = compare(CompareSettings(
        *configs, variants=variants, corpus=args.corpus, train_file=args.train_file, dev_file=args.eval_file,
        out=args.out_dir, device=args.device, scratch=args.scratch, reuse=args.reuse, resume=args.resume,
        overwrite=args.overwrite, preset=args.preset, seeds=args.seeds, reference=args.reference,
        records=args.records, gather=args.gather, only_seeds=args.only_seeds, minutes=minutes))
    _publish_rows(args, rows)
    return 0


def cmd_variants(args: argparse.Namespace) -> int:
    from ..experiments.variants import format_variant_table, variant_table
    from ..data.datasets import read_corpus
    from ..data.vocab import Vocab

    config = flags.model_config_from(args)
    text = read_corpus(paths.input_file(args.corpus, "--corpus"))
    config = dataclasses.replace(config, vocab_size=len(Vocab.from_text(text)))
    print(f"attention variants for preset {args.preset!r}: {config.n_layer} layers, {config.n_head} "
          f"heads, width d={config.n_embd}, block T={config.block_size}, vocabulary "
          f"{config.vocab_size} (from {args.corpus}), positions {config.positions}/{config.position_mode}"
          f"{', rel_clip ' + str(config.rel_clip) if config.rel_clip else ''}")
    print(format_variant_table(variant_table(config)))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from ..experiments.curves import metrics_path, plot_runs

    for run in args.runs:
        paths.input_file(metrics_path(run), "the metrics file")
    args.image = args.image or default_image(args.runs)
    paths.output_file(args.image, "--image")
    refuse_existing([args.image], args.overwrite)
    image = plot_runs(args.runs, args.image)
    print(f"training curves of {len(args.runs)} run(s) written to {image}")
    return 0


def default_image(runs: list[str]) -> str:
    """RUN/plots/curves.png of the first run (runs/NAME/plots for a shipped model); the other
    runs' names join the file name, so that each set of runs gets its own image."""
    from ..experiments.curves import metrics_path
    from ..model.shipped import output_dir

    first = metrics_path(runs[0]).parent
    others = "".join(f"-{metrics_path(r).parent.name}" for r in runs[1:])
    return str(output_dir(first) / "plots" / f"curves{others}.png")


def _continuing(group, name: str) -> None:
    """--resume and --overwrite: what to do with an --out-dir that holds an earlier run."""
    group.add_argument("--resume", action="store_true",
                       help=f"continue an interrupted {name} in --out-dir: finished runs are kept, an "
                            "interrupted one continues from its checkpoint; settings that differ from the "
                            "stored runs' are an error (default: --out-dir must hold no earlier results)")
    group.add_argument("--overwrite", action="store_true",
                       help=f"start over: remove the earlier {name}'s results and runs in --out-dir")


def register(command) -> None:
    p = command("demo", "the main job: baseline, no pretraining, a recipe trained now and the shipped "
                "model, scored on dev (extracted and stored)", cmd_demo)
    flags.preset(p, "demo", "recipe trained from scratch while you wait")
    p.add_argument("--shipped", default="models/cpu", help="shipped model scored beside it ('' to skip)")
    flags.out_dir(p, "runs/demo", "output directory", old=("--out",))
    p.add_argument("--attention", default="vanilla", choices=flags.attention_choices(), help="attention variant to demonstrate")
    flags.device(p)
    _continuing(p.add_mutually_exclusive_group(), "demo")
    results.add_json_flag(p)
    _register_compare(command)

    p = command("variants", "table of the attention variants: parameters, score cost, what each "
                "can and cannot express", cmd_variants)
    flags.preset(p)
    flags.corpus(p, "corpus that defines the vocabulary size")
    flags.model_flags(p)

    p = command("plot", "training curves (loss, learning rate, tokens/s, dev accuracy where logged) "
                "of one or several runs on shared axes", cmd_plot)
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directory (or its metrics.jsonl)")
    p.add_argument("--image", default=None, metavar="FILE",
                   help="image file to write (PNG, or any format matplotlib knows by the suffix) (default: "
                        "RUN/plots/curves.png of the first RUN, curves-RUN2-RUN3.png with more runs)")
    flags.overwrite(p, "the image")
    p.add_argument("--out", dest="image", action=flags.Deprecated, new="--image",
                   help=argparse.SUPPRESS, default=argparse.SUPPRESS)


def _register_compare(command) -> None:
    p = command("compare", "every attention variant through pretrain -> finetune -> dev evaluation, "
                "same preset, seeds and data; a markdown table with paired tests and a bar chart", cmd_compare)
    flags.preset(p, "cpu15", "recipe every variant is trained with")
    p.add_argument("--variants", default=None,
                   help=f"comma-separated variants to train (default: all: {','.join(VARIANTS)})")
    p.add_argument("--seeds", type=bounds.COMPARE_SEEDS.argtype(), default=1,
                   metavar="N",
                   help="train each variant N times (1 to 100), seed k with both stages' --seed plus k (the same seeds for "
                        "every variant; runs in VARIANT/seed-K/ when N > 1); the table shows each seed's count, "
                        "the mean with a 95%% interval over questions and seeds, and a paired test against "
                        "--reference (docs/guides/comparisons.md)")
    p.add_argument("--reference", default=None, metavar="VARIANT",
                   help="variant the others are tested against, on the same questions and seeds "
                        "(default: vanilla if trained, else the first of --variants)")
    flags.out_dir(p, "runs/compare", "output directory", old=("--out",))
    p.add_argument("--records", default=None, metavar="DIR",
                   help="directory of committed run records (settings, dev predictions, counts; no weights): "
                        "a variant's seed recorded there with the same settings and attnlab version is "
                        "reused, not trained, and every finished one is recorded there "
                        "(attnlab/experiments/records.py; the repo's are in benchmarks/records/compare) "
                        "(default: no records)")
    p.add_argument("--gather", action="store_true",
                   help="train nothing: the table from the --records and the finished runs in --out-dir; "
                        "the (variant, seed) cells neither holds are listed as missing (default: train them)")
    p.add_argument("--only-seeds", type=bounds.non_negative_ints, default=None, metavar="K[,K...]",
                   help="of the --seeds N, train only the seed indices K (0 to N-1, as in VARIANT/seed-K/; "
                        "the no-pretraining row goes with K = 0) and take the others from --records (and, with "
                        "--resume or --reuse, the finished runs in --out-dir), so that separate processes can "
                        "train one grid's seeds at once, each recording its cells in --records "
                        "(benchmarks/grid.sh) (default: train every seed)")
    flags.corpus(p, "pretraining corpus (also defines the vocabulary)")
    flags.train_file(p, "question<TAB>answer finetuning file")
    flags.eval_file(p, "labelled file every model is scored on", old=("--dev-file",))
    p.add_argument("--scratch", action=argparse.BooleanOptionalAction, default=True,
                   help="also finetune vanilla without pretraining as a reference row")
    continuing = p.add_mutually_exclusive_group()
    _continuing(continuing, "compare")
    continuing.add_argument("--reuse", action="store_true",
                            help="keep the runs already finished in --out-dir (their row.json; made with the "
                                 "same settings) and train the others; an unfinished run is an error "
                                 "(default: a fresh --out-dir)")
    flags.model_flags(p)
    flags.train_flags(p, ("pretrain", "finetune", "finetune_scratch"))
    minutes = next(a for a in p._actions if a.dest == "minutes")
    minutes.help = minutes.short_help = (
        "fit the whole comparison into this many minutes on this machine: every run trained (variants x "
        "seeds, and the no-pretraining row) gets an equal share of what is left as it starts, its "
        "pretraining and finetuning fitted to it (default: 0, every run trains all --epochs; a preset's own "
        "minutes are not used)")
    results.add_json_flag(p)
