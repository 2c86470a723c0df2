"""Probing commands: `generate` continuations (and loops), `attention` maps, `explore` the
mathematics of attention."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core import bounds, paths
from .. import explore
from ..core.outputs import refuse_existing
from ..data.format_names import MASK_CHAR
from . import flags


def _prompts_from_file(path: str, prompt_chars: int, limit: int) -> list[str]:
    from ..data.datasets import read_texts

    texts = read_texts(path)
    if not texts:
        raise ValueError(f"{path}: no prompts")
    return [t[:prompt_chars] for t in texts][: limit or None]


def cmd_generate(args: argparse.Namespace) -> int:
    from ..model.checkpoint import load_model
    from ..core.devices import resolve_device
    from ..model.generate import continue_texts
    from ..data.vocab import visible
    from ..probing.loops import find_loop

    if args.loops:
        paths.input_file(args.loops, "--loops")
    elif args.prompts:
        _no_empty(args.prompts, "prompt")
    model, vocab, _ = load_model(args.checkpoint, device=str(resolve_device(args.device)))
    if args.loops:
        return _survey_loops(args, model, vocab)
    prompts = args.prompts or [ln.rstrip("\n") for ln in sys.stdin if ln.strip()]  # (blank lines skipped)
    if not prompts:
        raise ValueError("no prompts: pass them as arguments or one per line on stdin")
    print(f"continuing {len(prompts)} prompt(s) by up to {args.max_new} characters ({_decoding(args)})")
    texts = continue_texts(model, vocab, prompts, max_new=args.max_new, temperature=args.temperature,
                           top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                           batch_size=args.batch_size, stop=args.stop, progress=len(prompts) > args.batch_size)
    for i, (p, c) in enumerate(zip(prompts, texts), 1):
        loop = find_loop(c, min_repeats=args.min_repeats, min_length=args.min_length)
        print(f"[{i}] {visible(p)} | {visible(c)}")
        print(f"    {loop.describe(c) if loop else 'no loop'}")
    return 0


def _decoding(args: argparse.Namespace) -> str:
    if args.temperature == 0:
        return "greedy"
    return f"sampling at temperature {args.temperature}, top-k {args.top_k or 'off'}, top-p {args.top_p}, seed {args.seed}"


def _survey_loops(args: argparse.Namespace, model, vocab) -> int:
    """generate --loops: how often greedy continuations of a file's lines loop."""
    from ..data.vocab import visible
    from ..probing.loops import survey_loops

    prompts = _prompts_from_file(args.loops, args.prompt_chars, args.limit)
    print(f"greedy continuations of {len(prompts)} prompts (first {args.prompt_chars} characters "
          f"of each line of {args.loops}), up to {args.max_new} new characters each "
          f"(clipped to block_size {model.config.block_size})")
    survey = survey_loops(model, vocab, prompts, max_new=args.max_new, batch_size=args.batch_size, show=args.show,
                          source=args.loops, min_repeats=args.min_repeats, min_length=args.min_length)
    print(survey.report.summary())
    if survey.examples:
        print("examples:\n" + "\n".join(f"  {visible(p)!s} | {visible(c)}\n    {loop.describe(c)}"
                                         for p, c, loop in survey.examples))
    return 0


def _no_empty(texts: list[str], what: str) -> None:
    """Refuse an empty argument (there is nothing to continue or draw; a space is a text)."""
    for number, text in enumerate(texts, 1):
        if not text:
            raise ValueError(f"<argument>:{number}: empty {what}")


def one_character(text: str) -> str:
    """argparse type of generate --stop."""
    if len(text) != 1:
        raise argparse.ArgumentTypeError(f"must be one character, got {text!r}")
    return text


def cmd_attention(args: argparse.Namespace) -> int:
    from ..probing.attention_maps import draw_attention, statistics_table
    from ..model.checkpoint import load_model
    from ..core.devices import resolve_device

    _check_attention_inputs(args)
    overrides = {"attention": args.attention} if args.attention else {}
    model, vocab, _ = load_model(args.checkpoint, device=str(resolve_device(args.device)), **overrides)
    suffix = MASK_CHAR if args.sentinel else ""
    config = model.config
    print(f"attention maps of {args.checkpoint} ({config.attention}, {config.n_layer} layers x "
          f"{config.n_head} heads)")
    if args.text is not None:
        text = args.text + suffix
        drawn = draw_attention(model, vocab, text, args.out_dir, overwrite=args.overwrite)
        print(f"\n{text!r} ({drawn.characters} characters):")
        print(statistics_table(drawn.entropy, drawn.distance))
        print(f"\nheatmaps written to {args.out_dir}/layer0.png .. layer{len(drawn.paths) - 1}.png")
    if args.over:
        _statistics_over(args, model, vocab, suffix)
    return 0


def _check_attention_inputs(args: argparse.Namespace) -> None:
    """Before the model is loaded: something to do, the text, --out-dir and --over."""
    from ..model.shipped import output_dir

    if args.text is None and not args.over:
        raise ValueError("give a TEXT to draw, --over FILE to average statistics, or both")
    if args.text is not None:
        _no_empty([args.text], "TEXT to draw")
        args.out_dir = str(paths.output_dir(args.out_dir or output_dir(args.checkpoint) / "attention", "--out-dir"))
        refuse_existing([Path(args.out_dir) / "layer0.png"], args.overwrite)  # (the layer count needs the model)
    if args.over:
        paths.input_file(args.over, "--over")


def _statistics_over(args: argparse.Namespace, model, vocab, suffix: str) -> None:
    """attention --over FILE: the per-head statistics averaged over its texts."""
    from ..data.datasets import read_texts
    from ..probing.attention_maps import statistics_over, statistics_table

    texts = [t + suffix for t in read_texts(args.over)][: args.limit or None]
    if not texts:
        raise ValueError(f"{args.over}: no texts")
    ent, dist, n = statistics_over(model, vocab, texts, source=str(args.over))
    print(f"\nper-head statistics averaged over {n} texts of {args.over}:")
    print(statistics_table(ent, dist))


def register(command) -> None:
    p = command("generate", "continue prompts (greedy or sampled) and detect loops", cmd_generate)
    p.add_argument("checkpoint", help="checkpoint file or run directory")
    p.add_argument("prompts", nargs="*", default=[], help="prompts (default: none: one per line on stdin)")
    p.add_argument("--max-new", type=bounds.positive_int, default=100,
                   help="new characters per prompt (clipped so that the longest prompt plus them fit the block)")
    p.add_argument("--temperature", type=bounds.non_negative_float, default=0.0,
                   help="sampling temperature tau: logits / tau (0 = greedy argmax)")
    p.add_argument("--top-k", type=bounds.non_negative_int, default=0, help="sample among the k most likely characters (0 = all)")
    p.add_argument("--top-p", type=bounds.TOP_P.argtype(), default=1.0,
                   help="sample among the smallest set of most likely characters whose probability reaches p (1 = all)")
    p.add_argument("--seed", type=bounds.seed, default=0, help="random seed for sampling")
    p.add_argument("--batch-size", type=bounds.positive_int, default=64, help="prompts decoded together")
    p.add_argument("--stop", default=None, type=one_character, help="stop a continuation after this character (default: none)")
    p.add_argument("--loops", default=None, metavar="FILE",
                   help="instead: greedy continuations of the lines of FILE (TSV: question column), "
                        "reporting how often they loop and the period histogram (default: off)")
    p.add_argument("--prompt-chars", type=bounds.positive_int, default=40, help="with --loops: prompt = first N characters of a line")
    p.add_argument("--limit", type=bounds.non_negative_int, default=200, help="with --loops: at most this many lines (0 = all)")
    p.add_argument("--show", type=bounds.non_negative_int, default=5, help="with --loops: print this many looping examples")
    p.add_argument("--min-repeats", type=bounds.at_least(1, float).argtype(), default=3.0,
                   help="a loop's periodic tail holds at least this many periods")
    p.add_argument("--min-length", type=bounds.positive_int, default=12, help="and at least this many characters")
    flags.device(p)

    p = command("attention", "attention heatmaps (PNG per layer) and per-head entropy and distance",
                cmd_attention)
    p.add_argument("checkpoint", help="checkpoint file or run directory")
    p.add_argument("text", nargs="?", default=None, help="text to draw (default: none, only --over)")
    flags.out_dir(p, None, "directory for layerN.png (default: RUN/attention; runs/NAME/attention for a "
                  "shipped model)", old=("--out",))
    flags.overwrite(p, "the heatmaps of an earlier drawing in --out-dir")
    p.add_argument("--over", default=None, help="file of texts, one per line (TSV: question column), "
                   "to average the per-head statistics over (default: none)")
    p.add_argument("--limit", type=bounds.non_negative_int, default=0,
                   help="use at most this many texts of --over (0 = all)")
    p.add_argument("--sentinel", action="store_true",
                   help=f"append the QA sentinel {MASK_CHAR} to every text, as evaluation does")
    flags.attention_view(p)
    flags.device(p)

    p = command("explore", "the mathematics of attention, checked numerically (claim, numbers, verdict)",
                explore.main)
    explore.add_arguments(p)
