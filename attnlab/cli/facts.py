"""Fact commands: `trace` (where does the model keep a fact?) and `edit` (can a user correct
it?). The logic is in the library's tracing.py (causal tracing) and editing.py (rank-one
editing); this module only parses arguments, prints and writes files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from ..core import bounds, paths
from ..data.datasets import read_corpus, read_questions
from ..facts.edit import LOCI
from ..facts.trace import TraceError
from . import flags
from ..core.progress import progress_bar
from ..core.outputs import refuse_existing, write_output
from ..model.shipped import output_dir
from .results import GoalNotMet, add_json_flag, publish

LOCUS_WORDS = {"name": "the name's last character",
               "answer": "the place's read-out (the character before the place is first written)",
               "both": "the place's read-outs in the recalled line and after the answer mark (one key each)"}


# ---- trace -----------------------------------------------------------------------------------
def _trace_one(model, vocab, args, out: Path) -> dict:
    from ..facts import trace as tracing

    t = tracing.trace(model, vocab, args.question, name=args.name, noise=args.noise,
                      samples=args.samples, seed=args.seed)
    p = t.point
    labels = tracing.char_labels(p.context)
    where = "inside its recalled text" if p.in_recall else "after its input"
    print(f"question: {p.question!r}; name: {p.name!r} (characters {p.name_start}..{p.name_last})")
    print(f"input the model answers from ({len(p.context)} characters): {p.context!r}")
    print(f"clean answer ({where}): {p.answer!r}")
    print(f"probability of the clean answer (its characters, teacher forced): clean {t.clean:.4f}, "
          f"corrupted {t.corrupted:.4f} (noise {t.noise} x embedding std, {t.samples} samples, "
          f"seed {args.seed})")
    _report_strongest(t.recovered, [f"{c!s}@{i}" for i, c in enumerate(labels)], p.name_last)
    png = out / "trace.png"
    tracing.plot(t.recovered, labels, png, low=t.corrupted, high=t.clean,
                 title=f"{p.question}  ->  {p.answer!r}\nP(clean answer): clean {t.clean:.3f}, "
                       f"corrupted {t.corrupted:.3f}")
    write_output(out / "trace.md", tracing.table(t.recovered, labels) + "\n", args.overwrite)
    document = {
        "question": p.question, "name": p.name, "context": p.context, "answer": p.answer,
        "name_start": p.name_start, "name_end": p.name_end, "answer_inside_recall": p.in_recall,
        "clean": t.clean, "corrupted": t.corrupted, "noise": t.noise, "samples": t.samples,
        "seed": args.seed, "recovered": {k: v.tolist() for k, v in t.recovered.items()}}
    _write_json(out / "trace.json", document, args.overwrite)
    print(f"heatmap: {png}; table: {out / 'trace.md'}; numbers: {out / 'trace.json'}")
    return document


def _trace_over(model, vocab, args, out: Path) -> dict:
    from ..facts import trace as tracing
    from ..data.datasets import read_qa
    from ..answering.evaluate import answer_questions
    from ..answering.knowledge import require_person

    examples = read_qa(args.over, labelled=True)[: args.limit or None]
    if not examples:
        raise TraceError(f"{args.over}: no questions")
    for e in examples:
        require_person(e)
    answers = answer_questions(model, vocab, examples)
    right = [e for e, a in zip(examples, answers) if a.answer == e.answer]
    if not right:
        raise TraceError(f"{args.over}: the model answers none of its {len(examples)} questions correctly")
    traces = [tracing.trace(model, vocab, e.question, noise=args.noise, samples=args.samples,
                            seed=args.seed + i)
              for i, e in enumerate(progress_bar(right, desc="tracing", leave=False))]
    avg = tracing.average_traces(traces, len(examples))
    print(f"averaged over the {avg.n} of {avg.asked} questions of {args.over} the model answers "
          f"correctly; positions aligned on the name's last character and the input's end")
    print(f"mean probability of the clean answer: clean {avg.clean:.4f}, corrupted {avg.corrupted:.4f} "
          f"(noise {args.noise} x embedding std, {args.samples} samples per question)")
    present = avg.counts > 0  # e.g. no text before the name in the recall format
    labels = [label for label, keep in zip(avg.labels, present) if keep]
    shown = {k: v[:, present] for k, v in avg.recovered.items()}
    _report_strongest(shown, labels, None)
    print(tracing.table(shown, labels))
    png = out / "trace-average.png"
    tracing.plot(shown, labels, png, low=avg.corrupted, high=avg.clean,
                 title=f"mean over {avg.n} correctly answered questions of {Path(args.over).name}\n"
                       f"P(clean answer): clean {avg.clean:.3f}, corrupted {avg.corrupted:.3f}")
    document = {
        "file": str(args.over), "questions": avg.asked, "averaged_over": avg.n, "labels": avg.labels,
        "counts": avg.counts.tolist(), "clean": avg.clean, "corrupted": avg.corrupted,
        "noise": args.noise, "samples": args.samples,
        "recovered": {k: [[None if np.isnan(x) else x for x in row] for row in v.tolist()]
                      for k, v in avg.recovered.items()}}
    _write_json(out / "trace-average.json", document, args.overwrite)
    print(f"heatmap: {png}; numbers: {out / 'trace-average.json'}")
    return document


def _report_strongest(recovered, labels, name_last) -> None:
    from ..facts.trace import strongest

    for kind, (layer, label, value) in strongest(recovered, labels).items():
        print(f"strongest {kind} effect: layer {layer} at {label} (recovered {value:.4f})")
    if name_last is not None:
        col = {k: v[:, name_last] for k, v in recovered.items()}
        print("at the name's last character, by layer: " + "; ".join(
            f"{k} " + " ".join(f"{x:.4f}" for x in v) for k, v in col.items()))


def _write_json(path: Path, data, overwrite: bool = False) -> None:
    write_output(path, json.dumps(data, indent=1) + "\n", overwrite)


def cmd_trace(args: argparse.Namespace) -> int:
    from ..model.checkpoint import load_model
    from ..core.devices import resolve_device

    if args.question is None and not args.over:
        raise TraceError("give a QUESTION to trace, --over FILE to average, or both")
    if args.question is not None and not args.question.strip():
        raise TraceError("<argument>: empty question")
    if args.over:
        read_questions(paths.input_file(args.over, "--over"), labelled=True)
    out = paths.output_dir(args.out_dir or output_dir(args.checkpoint) / "trace", "--out-dir")
    refuse_existing([out / f for f in trace_files(args)], args.overwrite)  # created when the first file is written
    model, vocab, _ = load_model(args.checkpoint, device=str(resolve_device(args.device)))
    document = {}
    if args.question is not None:
        document["trace"] = _trace_one(model, vocab, args, out)
    if args.over:
        document["average"] = _trace_over(model, vocab, args, out)
    publish(args, {**document, "written": [str(out / f) for f in trace_files(args)]})
    return 0


def trace_files(args: argparse.Namespace) -> list[str]:
    """The files `trace` writes into its --out-dir."""
    one = ["trace.png", "trace.md", "trace.json"] if args.question is not None else []
    return one + (["trace-average.png", "trace-average.json"] if args.over else [])


# ---- edit ------------------------------------------------------------------------------------
def cmd_edit(args: argparse.Namespace) -> int:
    from ..model.checkpoint import CHECKPOINT_NAME, resolve
    from ..data.datasets import read_qa
    from ..answering.knowledge import require_person

    if not args.out_dir:  # not argparse's required=True, which would refuse the old name --out
        raise TraceError("--out-dir is required: the new run directory for the edited model")
    for flag, value in (("--person", args.person), ("--place", args.place)):
        if not value.strip():
            raise TraceError(f"{flag} is empty")
    source = resolve(args.checkpoint)
    out = Path(args.out_dir)
    if out.resolve() in (source.parent.resolve(), source.resolve()):
        raise TraceError(f"--out-dir {out} is the original run: the edit goes to a new run directory")
    if (out / CHECKPOINT_NAME).exists():
        raise TraceError(f"--out-dir {out} already holds a checkpoint; choose a new run directory")
    paths.output_dir(out, "--out-dir")
    docs = read_corpus(paths.input_file(args.corpus, "--corpus")).split("\n")
    if args.eval_file:
        read_questions(paths.input_file(args.eval_file, "--eval-file"))
    places = None  # name -> place of the training file: the key statistics' answer format
    if args.train_file:
        places = {require_person(e): e.answer
                  for e in read_qa(paths.input_file(args.train_file, "--train-file"), labelled=True)}
    from ..training.rundir import claim

    with claim(out):  # held while editing: a second edit into the same new --out-dir is refused, not lost
        return _edit_into(args, source, out, docs, places)


def _edit_into(args: argparse.Namespace, source: Path, out: Path, docs: list[str], places) -> int:
    """The edit of ``cmd_edit``, its checks done and ``out`` held; an edit that does not take is
    a GoalNotMet before anything is written (``claim`` then removes the directory it made)."""
    from ..model.checkpoint import CHECKPOINT_NAME, load_model, save_checkpoint
    from ..data import QAExample, read_qa
    from ..core.devices import resolve_device
    from ..facts.edit import (changed_answers, check_layer, completes_with, default_layer, edit_model,
                          key_second_moment, place_slot, stat_texts)
    from ..answering.evaluate import answer_questions
    from ..answering.knowledge import CorpusIndex, person_of

    model, vocab, ckpt = load_model(source, device=str(resolve_device(args.device)))
    if args.layer is not None:
        check_layer(model, args.layer)
    vocab.encode(args.place, source="--place")
    vocab.encode(args.person, source="--person")
    question = f"Where was {args.person} born?"
    locus = LOCUS_WORDS[args.at]
    if args.layer is None:
        layer, effects = default_layer(model, vocab, question, args.at, noise=args.noise,
                                       samples=args.samples, seed=args.seed)
        if effects is None:
            print(f"layer {layer}: the layer below the top, the default for an edit at the answer "
                  f"(the top layer's MLP there moves only the next character)")
        else:
            print(f"layer {layer}: the strongest MLP effect at {locus} in the trace "
                  f"of this question (recovered probability by layer: "
                  f"{' '.join(f'{x:.4f}' for x in effects)})")
    else:
        layer = args.layer
        print(f"layer {layer} (--layer)")
    texts = stat_texts(model, docs, args.stat_lines, args.seed, places)
    moment = key_second_moment(model, vocab, texts, layer)
    edited, edit, target = edit_model(model, vocab, args.person, args.place, layer, moment, at=args.at,
                                      tighten_steps=args.tighten_steps)
    print(f"edit input: {target.text!r} (key at characters {edit.positions}, {locus}); "
          f"the model answered {target.old_answer!r} before")
    print(f"value optimised in {edit.steps} steps: loss {edit.loss_before:.3f} -> {edit.loss_after:.3f}; "
          f"|delta| {float(edit.delta.norm()):.3f}")

    ask = [QAExample(question, args.place, "<edit>", 1)]
    now = answer_questions(edited, vocab, ask)[0].answer
    efficacy = now == args.place
    print(f"efficacy: {question!r} -> {now!r} ({'the new place' if efficacy else 'NOT the new place'})")
    if not efficacy:
        raise GoalNotMet(f"the edit did not take: {question!r} is answered {now!r}, not {args.place!r} "
                         f"(it was {target.old_answer!r}); nothing was written")

    slot = place_slot(CorpusIndex(docs).line_of(args.person), args.person, [target.old_answer])
    general = None if slot is None else completes_with(edited, vocab, slot, args.place)
    if slot is None:
        print("generalisation: the person's corpus line does not spell their old answer; not measured")
    else:
        print(f"generalisation: {slot!r} -> {'the new place' if general else 'NOT the new place'}")

    report = {"source": str(source), "person": args.person, "place": args.place, "at": args.at,
              "key_positions": edit.positions, "layer": layer,
              "layer_chosen_by": ("--layer" if args.layer is not None
                                  else "trace" if args.at == "name" else "below the top"),
              "old_answer": target.old_answer, "edit_input": target.text, "efficacy": efficacy,
              "answer_after": now, "generalisation": general, "generalisation_prompt": slot,
              "steps": edit.steps, "tighten_steps": args.tighten_steps, "delta_norm": float(edit.delta.norm()),
              "loss_before": edit.loss_before, "loss_after": edit.loss_after}
    if args.eval_file:
        others = [e for e in read_qa(args.eval_file) if person_of(e.question) != args.person]
        n = len(changed_answers(edited, vocab, others, answer_questions(model, vocab, others)))
        print(f"specificity: {n} of {len(others)} other answers of {args.eval_file} changed "
              f"({100.0 * n / max(1, len(others)):.1f}%)")
        report.update(dev=str(args.eval_file), others=len(others), others_changed=n)
    meta = {**ckpt.meta, "edit": {k: v for k, v in report.items() if k != "edit_input"}}
    path = save_checkpoint(out / CHECKPOINT_NAME, edited, vocab, meta=meta)
    _write_json(out / "edit.json", report)
    print(f"edited model: {path} (the original {source} is unchanged); report: {out / 'edit.json'}")
    publish(args, {**report, "written": [str(path), str(out / "edit.json")]})
    return 0


def register(command) -> None:
    p = command("trace", "causal tracing: which hidden states carry the fact that answers a question",
                cmd_trace)
    p.add_argument("checkpoint", help="checkpoint file or run directory")
    p.add_argument("question", nargs="?", default=None, help='e.g. "Where was Ada Lovelace born?" '
                   "(default: none, only --over)")
    p.add_argument("--name", default=None, help="the characters to corrupt; must occur in the question "
                   "(default: NAME of 'Where was NAME born?')")
    flags.out_dir(p, None, "directory for the heatmap, table and numbers (default: RUN/trace, or "
                  "runs/NAME/trace beside a shipped model's models/ directory)", old=("--out",))
    flags.overwrite(p, "the files of an earlier trace in --out-dir")
    add_json_flag(p)
    p.add_argument("--noise", type=bounds.positive_float, default=3.0,
                   help="noise on the name's embeddings, in standard deviations of the embedding weights")
    p.add_argument("--samples", type=bounds.positive_int, default=10, help="noise samples averaged")
    p.add_argument("--seed", type=bounds.seed, default=0, help="noise seed")
    p.add_argument("--over", default=None, help="question<TAB>place file: average the traces of the "
                   "questions the model answers correctly (default: none)")
    p.add_argument("--limit", type=bounds.non_negative_int, default=0,
                   help="use at most this many questions of --over (0 = all)")
    flags.device(p)

    p = command("edit", "rank-one edit (ROME) of one MLP so the model says PERSON was born in PLACE; "
                "writes a new run directory", cmd_edit)
    p.add_argument("checkpoint", help="checkpoint file or run directory (never modified)")
    p.add_argument("--person", required=True, help="the name, as in 'Where was NAME born?' (default: none; required)")
    p.add_argument("--place", required=True, help="the new birth place (default: none; required)")
    flags.out_dir(p, None, "new run directory for the edited model (default: none; required)", old=("--out",))
    p.add_argument("--at", choices=LOCI, default="answer",
                   help="where the key is read: 'answer', the position before the place's first "
                        "character where the model first writes it (where tracing finds the fact in "
                        "recall-format models; where that edit fails and the recalled line spells the place, "
                        "the edit of 'both'), 'both', two keys (a rank-two edit): that one and the "
                        "'⁇' before the answer, or 'name', the name's last character (ROME's subject "
                        "token)")
    p.add_argument("--layer", type=int, default=None,  # its range depends on the model: check_layer
                   help="MLP to edit (default: with --at answer the layer below the top; with "
                        "--at name the layer where tracing this question finds the strongest MLP "
                        "effect at the name's last character)")
    p.add_argument("--tighten-steps", type=bounds.non_negative_int, default=200,
                   help="once the edit works, at most this many steps looking for the smallest change that "
                        "still works (fewer other answers move); 0 stops at the first change that works")
    p.add_argument("--noise", type=bounds.positive_float, default=3.0,
                   help="tracing noise for choosing the layer (--at name)")
    p.add_argument("--samples", type=bounds.positive_int, default=10,
                   help="tracing samples for choosing the layer (--at name)")
    p.add_argument("--seed", type=bounds.seed, default=0, help="seed for the noise and the corpus sample")
    flags.corpus(p, help="corpus: key statistics and the person's line for generalisation")
    flags.train_file(p, "question<TAB>place file the model was finetuned on: the key statistics are "
                        "gathered on its people's lines in the answer format ('' for plain corpus lines)")
    p.add_argument("--stat-lines", type=bounds.non_negative_int, default=2000,
                   help="lines for the key statistics (0 = all)")
    flags.eval_file(p, "question<TAB>place file whose other answers are compared before and after "
                       "('' to skip)", old=("--dev",))
    flags.device(p)
    add_json_flag(p)
