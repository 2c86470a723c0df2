"""`attnlab generate`: continue prompts with a trained model (greedy, temperature, top-k,
top-p), report where a continuation falls into a loop, and with ``--loops FILE`` measure how
often greedy continuations of many prompts loop (SPEC section 7).

Two temperatures are at play: the model's output-softmax temperature beta (ModelConfig
``logit_scale``, fixed with the model: logits * beta) and the sampling temperature tau chosen
here (logits / tau when sampling; tau = 0 is greedy argmax).
"""

from __future__ import annotations

import argparse
import sys

import torch
from tqdm.auto import tqdm

from .generate import generate
from .loops import LoopReport, find_loop
from .model import GPT
from .vocab import Vocab

_SHOWN = {"\n": "↵", "\t": "⇥"}


def continue_texts(model: GPT, vocab: Vocab, prompts: list[str], *, max_new: int,
                   temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                   batch_size: int = 64, stop: str | None = None, progress: bool = False,
                   source: str = "<prompt>") -> list[str]:
    """The continuation (new characters only) of every prompt; batches share one seeded
    generator, so the same seed and batch size give the same samples."""
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    stop_id = None if stop is None else vocab.encode(stop, source="--stop")[0]
    encoded = [vocab.encode(p, source=source, line=i + 1) for i, p in enumerate(prompts)]
    out: list[str] = []
    starts = range(0, len(encoded), batch_size)
    for s in tqdm(starts, desc="generate", disable=not progress):
        gen = generate(model, encoded[s : s + batch_size], max_new, temperature=temperature,
                       top_k=top_k, top_p=top_p, stop_token=stop_id, generator=generator)
        out.extend(vocab.decode(t) for t in gen.tokens)
    return out


def shown(text: str) -> str:
    return "".join(_SHOWN.get(c, c) for c in text)


def _prompts_from_file(path: str, prompt_chars: int, limit: int) -> list[str]:
    from .attention_maps import read_texts

    texts = read_texts(path)
    if not texts:
        raise ValueError(f"{path}: no prompts")
    return [t[:prompt_chars] for t in texts][: limit or None]


def cmd_generate(args: argparse.Namespace) -> int:
    from .checkpoint import load_model
    from .devices import resolve_device

    if args.temperature < 0 or not 0 < args.top_p <= 1 or args.top_k < 0 or args.max_new < 1:
        raise ValueError("need --temperature >= 0, 0 < --top-p <= 1, --top-k >= 0 and --max-new >= 1")
    model, vocab, _ = load_model(args.checkpoint, device=str(resolve_device(args.device)))
    loop_options = dict(min_repeats=args.min_repeats, min_length=args.min_length)

    if args.loops:
        prompts = _prompts_from_file(args.loops, args.prompt_chars, args.limit)
        print(f"greedy continuations of {len(prompts)} prompts (first {args.prompt_chars} characters "
              f"of each line of {args.loops}), up to {args.max_new} new characters each "
              f"(clipped to block_size {model.config.block_size})")
        texts = continue_texts(model, vocab, prompts, max_new=args.max_new, temperature=0.0,
                               batch_size=args.batch_size, progress=True, source=args.loops)
        report = LoopReport()
        examples = []
        for p, c in zip(prompts, texts):
            loop = find_loop(c, **loop_options)
            report.add(loop)
            if loop is not None and len(examples) < args.show:
                examples.append(f"  {shown(p)!s} | {shown(c)}\n    {loop.describe(c)}")
        print(report.summary())
        if examples:
            print("examples:\n" + "\n".join(examples))
        return 0

    prompts = args.prompts or [ln.rstrip("\n") for ln in sys.stdin if ln.strip()]
    if not prompts:
        raise ValueError("no prompts: pass them as arguments or one per line on stdin")
    mode = "greedy" if args.temperature == 0 else (
        f"sampling at temperature {args.temperature}, top-k {args.top_k or 'off'}, "
        f"top-p {args.top_p}, seed {args.seed}")
    print(f"continuing {len(prompts)} prompt(s) by up to {args.max_new} characters ({mode})")
    texts = continue_texts(model, vocab, prompts, max_new=args.max_new, temperature=args.temperature,
                           top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                           batch_size=args.batch_size, stop=args.stop, progress=len(prompts) > args.batch_size)
    for i, (p, c) in enumerate(zip(prompts, texts), 1):
        loop = find_loop(c, **loop_options)
        print(f"[{i}] {shown(p)} | {shown(c)}")
        print(f"    {loop.describe(c) if loop else 'no loop'}")
    return 0


def register(command) -> None:
    p = command("generate", "continue prompts (greedy or sampled) and detect loops", cmd_generate)
    p.add_argument("checkpoint", help="checkpoint file or run directory")
    p.add_argument("prompts", nargs="*", help="prompts (default: one per line on stdin)")
    p.add_argument("--max-new", type=int, default=100,
                   help="new characters per prompt (clipped so that the longest prompt plus them fit the block)")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="sampling temperature tau: logits / tau (0 = greedy argmax)")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely characters (0 = all)")
    p.add_argument("--top-p", type=float, default=1.0,
                   help="sample among the smallest set of most likely characters whose probability reaches p (1 = all)")
    p.add_argument("--seed", type=int, default=0, help="random seed for sampling")
    p.add_argument("--batch-size", type=int, default=64, help="prompts decoded together")
    p.add_argument("--stop", default=None, help="stop a continuation after this character (default: none)")
    p.add_argument("--loops", default=None, metavar="FILE",
                   help="instead: greedy continuations of the lines of FILE (TSV: question column), "
                        "reporting how often they loop and the period histogram (default: off)")
    p.add_argument("--prompt-chars", type=int, default=40, help="with --loops: prompt = first N characters of a line")
    p.add_argument("--limit", type=int, default=200, help="with --loops: at most this many lines (0 = all)")
    p.add_argument("--show", type=int, default=5, help="with --loops: print this many looping examples")
    p.add_argument("--min-repeats", type=float, default=3.0,
                   help="a loop's periodic tail holds at least this many periods")
    p.add_argument("--min-length", type=int, default=12, help="and at least this many characters")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
