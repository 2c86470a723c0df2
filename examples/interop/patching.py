"""Activation patching with TransformerLens and nnsight on a lab model, checked against the lab's
own trace.

The lab's causal trace (``attnlab trace``, attnlab/facts/trace.py) corrupts the person's name with
noise and restores one hidden state from the clean run. Here the same experiment is done in
TransformerLens, with its hook names and ``run_with_hooks``, on the model exported from the lab:

1. a clean run, its residual stream cached (``run_with_cache``);
2. a corrupted run: the lab's noise added at ``hook_embed`` (the token embeddings) wherever the
   name occurs;
3. the corrupted run again, with ``blocks.L.hook_resid_post`` at one position put back from the
   clean cache.

Each gives the probability of the model's clean answer, which the lab's trace also gives (its
``clean``, ``corrupted`` and ``recovered["residual"][L, position]``, with one noise sample).
nnsight does the same on the lab's own ``GPT`` (``patched_nnsight``): the three columns printed
agree.

    python examples/interop/patching.py models/cpu "Where was Alfred Mele born?" --layer 1

Needs the interop extra (transformer-lens, nnsight): pip install -c constraints.txt -e '.[interop]'.
"""

from __future__ import annotations

import argparse

import torch

import attnlab
from attnlab.facts.trace import answer_point, sample_noise


def answer_probability(logits: torch.Tensor, answer_ids: list[int], context_len: int) -> float:
    """The probability of spelling ``answer_ids`` after the first ``context_len`` characters."""
    logp = logits[0, context_len - 1 : context_len - 1 + len(answer_ids)].double().log_softmax(-1)
    return float(logp[torch.arange(len(answer_ids)), answer_ids].sum().exp())


def patched(model, question: str, layer: int, position: int, *, noise: float = 3.0, seed: int = 0) -> dict:
    """The clean, corrupted and restored probabilities of the clean answer, from TransformerLens
    (``transformer_lens``) and from the lab's trace (``lab``), for restoring the residual stream
    after block ``layer`` at ``position`` of the input."""
    point = answer_point(model.gpt, model.vocab, question)  # the input and the clean answer: the lab's
    context, answer = model.vocab.encode(point.context), model.vocab.encode(point.answer)
    ids = torch.tensor([context + answer])
    [eps] = sample_noise(model.gpt, point.name_end - point.name_start, noise, samples=1, seed=seed)

    tl = model.to_transformer_lens()  # a TransformerLens TransformerBridge

    def corrupt(embed, hook):  # the name's token embeddings, plus the lab's noise
        embed = embed.clone()
        for start in point.name_starts:
            embed[:, start : start + len(eps)] += eps
        return embed

    hook = f"blocks.{layer}.hook_resid_post"
    with torch.no_grad():
        clean_logits, cache = tl.run_with_cache(ids, names_filter=[hook])
        corrupted_logits = tl.run_with_hooks(ids, fwd_hooks=[("hook_embed", corrupt)])

        def restore(resid, hook):
            resid = resid.clone()
            resid[:, position] = cache[hook.name][:, position]
            return resid

        restored_logits = tl.run_with_hooks(ids, fwd_hooks=[("hook_embed", corrupt), (hook, restore)])
    trace = model.trace(question, kinds=["residual"], noise=noise, samples=1, seed=seed)
    n = len(context)
    return {
        "point": point,
        "transformer_lens": {"clean": answer_probability(clean_logits, answer, n),
                             "corrupted": answer_probability(corrupted_logits, answer, n),
                             "restored": answer_probability(restored_logits, answer, n)},
        "lab": {"clean": trace.clean, "corrupted": trace.corrupted,
                "restored": float(trace.recovered["residual"][layer, position])},
    }


def patched_nnsight(model, question: str, layer: int, position: int, *, noise: float = 3.0, seed: int = 0) -> dict:
    """The same three probabilities from nnsight, which wraps the lab's own GPT (no export): its
    modules by their names (``tok_emb``, ``blocks[L]``), their outputs read and written inside
    a trace."""
    from nnsight import NNsight

    point = answer_point(model.gpt, model.vocab, question)
    context, answer = model.vocab.encode(point.context), model.vocab.encode(point.answer)
    ids = torch.tensor([context + answer])
    [eps] = sample_noise(model.gpt, point.name_end - point.name_start, noise, samples=1, seed=seed)
    net = NNsight(model.gpt)
    probabilities = {}
    with torch.no_grad():
        with net.trace(ids):  # clean: GPT.forward gives (logits, loss), a block (hidden, weights)
            clean_state = net.blocks[layer].output[0][:, position].save()
            clean_logits = net.output[0].save()
        probabilities["clean"] = answer_probability(clean_logits, answer, len(context))
        for run in ("corrupted", "restored"):
            with net.trace(ids):
                for start in point.name_starts:
                    net.tok_emb.output[:, start : start + len(eps)] += eps
                if run == "restored":
                    net.blocks[layer].output[0][:, position] = clean_state
                logits = net.output[0].save()
            probabilities[run] = answer_probability(logits, answer, len(context))
    return probabilities


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run directory or checkpoint, e.g. models/cpu")
    parser.add_argument("question", help='e.g. "Where was Alfred Mele born?"')
    parser.add_argument("--layer", type=int, default=0, help="the block whose output is restored (default: 0)")
    parser.add_argument("--position", type=int, default=None,
                        help="the input position restored (default: the name's last character)")
    args = parser.parse_args()
    model = attnlab.load(args.run, device="cpu")
    point = answer_point(model.gpt, model.vocab, args.question)
    position = point.name_last if args.position is None else args.position
    result = patched(model, args.question, args.layer, position)
    by_nnsight = patched_nnsight(model, args.question, args.layer, position)
    print(f"input: {point.context!r}; clean answer: {point.answer!r}")
    print(f"restoring blocks.{args.layer}.hook_resid_post at position {position} ({point.context[position]!r})")
    print(f"{'P(clean answer)':<16} {'TransformerLens':>16} {'nnsight':>16} {'attnlab trace':>16}")
    for run in ("clean", "corrupted", "restored"):
        print(f"{run:<16} {result['transformer_lens'][run]:>16.6f} {by_nnsight[run]:>16.6f} {result['lab'][run]:>16.6f}")


if __name__ == "__main__":
    main()
