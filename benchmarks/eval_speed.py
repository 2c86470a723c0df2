"""Evaluation speed: questions per second on the 500 dev questions (SPEC 6).

Three ways of answering, with the same randomly initialised spec-size model:
(a) cached batched: ``generate`` with the KV cache, questions sorted by length and batched as
    ``evaluate.answer_questions`` does;
(b) uncached batched: the same batches, the whole sequence through the model at every step;
(c) one question at a time: the course's loop (one unpadded prompt, full forward pass per new
    character, argmax of the last position).

An untrained model does not close its answer with ``⁇`` early, so rows would not stop early
anyway; to measure a fixed amount of work every question decodes the full 32 characters
(``stop_token=None``). A trained model stops at the closing ``⁇`` and is faster still.
(b) and (c) are slow, so they are timed on a subset and extrapolated to 500 (stated in the
table).

Run: .venv/bin/python benchmarks/eval_speed.py [--subset 50] [--device auto]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, report, resolve_device, table, timed  # noqa: E402

from attnlab.config.settings import ModelConfig, get_preset  # noqa: E402
from attnlab.data.datasets import SpanCorruptionDataset, read_qa, read_text  # noqa: E402
from attnlab.answering.evaluate import MAX_NEW_CHARS  # noqa: E402
from attnlab.model.generate import generate  # noqa: E402
from attnlab.model.gpt import GPT  # noqa: E402
from attnlab.data.vocab import MASK_CHAR  # noqa: E402

TARGET_SECONDS = 5.0  # the 500-question dev evaluation on the 2-core CPU (issue 4)


def batched(model: GPT, prompts: list[list[int]], batch_size: int, use_cache: bool) -> list[list[int]]:
    """Answer in length-sorted batches (as evaluate.answer_questions), full 32 characters."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[list[int]] = [[] for _ in prompts]
    for i in range(0, len(order), batch_size):
        chunk = order[i : i + batch_size]
        gen = generate(model, [prompts[j] for j in chunk], MAX_NEW_CHARS, stop_token=None, use_cache=use_cache)
        for j, toks in zip(chunk, gen.tokens):
            out[j] = toks
    return out


@torch.no_grad()
def course_loop(model: GPT, prompt: list[int], steps: int) -> list[int]:
    """The course's greedy sampling loop for one question."""
    device = next(model.parameters()).device
    x = torch.tensor([prompt], device=device)
    for _ in range(steps):
        logits, _ = model(x[:, -model.config.block_size :])
        x = torch.cat([x, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return x[0, len(prompt) :].tolist()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--dev", default=str(DATA / "birth_dev.tsv"), help="labelled questions to answer")
    ap.add_argument("--model", choices=["spec", "quick"], default="spec", help="model shape preset")
    ap.add_argument("--batch-size", type=int, default=256, help="questions per batch (evaluate's default)")
    ap.add_argument("--subset", type=int, default=50, help="questions timed for the slow ways (b) and (c), extrapolated")
    ap.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = torch's default)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    examples = read_qa(args.dev)
    corpus = read_text(DATA / "wiki.txt")
    vocab = SpanCorruptionDataset(corpus, 128).vocab
    config = ModelConfig(vocab_size=len(vocab), **get_preset(args.model).model)
    torch.manual_seed(0)
    model = GPT(config).to(device).eval()
    prompts = [vocab.encode(e.question + MASK_CHAR) for e in examples]
    n = len(prompts)
    sub = prompts[: min(args.subset, n)]
    print(f"eval_speed: {n} questions from {args.dev}, {args.model} model "
          f"({model.num_parameters():,} parameters, random init) on {device} ({torch.get_num_threads()} threads), "
          f"{MAX_NEW_CHARS} characters each")

    batched(model, prompts[:8], 8, True)  # warm-up (allocator, kernels)
    rows = []
    t_cached, cached = timed(lambda: batched(model, prompts, args.batch_size, True), device)
    rows.append(["(a) cached, batched", n, f"{t_cached:.2f}", f"{t_cached:.2f}", f"{n / t_cached:,.0f}"])

    t_unc, uncached = timed(lambda: batched(model, sub, args.batch_size, False), device)
    rows.append([f"(b) uncached, batched (first {len(sub)} questions, extrapolated)", len(sub), f"{t_unc:.2f}",
                 f"{t_unc * n / len(sub):.1f}", f"{len(sub) / t_unc:,.1f}"])
    # Same greedy tokens, a sanity check that we time equal work (not a test: see tests/).
    same = sum(uncached[i] == cached[i] for i in range(len(sub)))

    t_one = 0.0
    one = []
    for p in tqdm(sub, desc="one at a time", leave=False):
        t, toks = timed(lambda: course_loop(model, p, MAX_NEW_CHARS), device)
        t_one += t
        one.append(toks)
    same_one = sum(one[i] == cached[i] for i in range(len(sub)))
    rows.append([f"(c) one question at a time, course loop (first {len(sub)}, extrapolated)", len(sub),
                 f"{t_one:.2f}", f"{t_one * n / len(sub):.1f}", f"{len(sub) / t_one:,.1f}"])

    text = table(["way", "questions timed", "seconds", f"seconds for {n}", "questions/s"], rows)
    text += "\n\n" + "\n".join([
        f"- {n} dev questions, spec-size model with random weights, every question decoded for the full "
        f"{MAX_NEW_CHARS} characters (an untrained model does not close its answer early), batch {args.batch_size}",
        f"- agreement with (a) on the first {len(sub)} questions: uncached {same}/{len(sub)}, "
        f"one-at-a-time {same_one}/{len(sub)} identical completions",
        f"- (a) vs (c): {t_one * n / len(sub) / t_cached:.0f}x faster; target: all {n} in under "
        f"{TARGET_SECONDS:g} s ({'met' if t_cached < TARGET_SECONDS else 'not met'}: {t_cached:.2f} s)",
    ])
    report("eval_speed", text, write=not args.no_write, device=device, title="Evaluation speed (benchmarks/eval_speed.py)")


if __name__ == "__main__":
    main()
