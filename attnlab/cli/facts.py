"""Fact commands: `trace` (where does the model keep a fact?) and `edit` (can a user correct
it?). The logic is in the library's tracing.py (causal tracing) and editing.py (rank-one
editing); this module only parses arguments, prints and writes files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from ..core import bounds, paths
from ..data.datasets import read_corpus, read_qa, read_questions
from ..facts.gated_edit import DEFAULT_METHOD, METHODS
from ..facts.edit import (LOCI, changed_answers, check_layer, completes_with, default_layer, edit_model,
                          key_second_moment, place_slot, stat_texts)
from ..answering.knowledge import require_person
from ..facts.trace import TraceError
from ..model.checkpoint import CHECKPOINT_NAME
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
    from ..model.checkpoint import CHECKPOINT_NAME, load_model
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
def _new_run_dir(args, source: Path) -> Path:
    """--out-dir, checked: a new run directory, not the original one (nothing is written yet)."""
    from ..model.checkpoint import CHECKPOINT_NAME

    if not args.out_dir:  # not argparse's required=True, which would refuse the old name --out
        raise TraceError("--out-dir is required: the new run directory for the edited model")
    out = Path(args.out_dir)
    if out.resolve() in (source.parent.resolve(), source.resolve()):
        raise TraceError(f"--out-dir {out} is the original run: the edit goes to a new run directory")
    if (out / CHECKPOINT_NAME).exists():
        raise TraceError(f"--out-dir {out} already holds a checkpoint; choose a new run directory")
    return paths.output_dir(out, "--out-dir")  # created when the first file is written


def cmd_edit(args: argparse.Namespace) -> int:
    from ..model.checkpoint import resolve

    source = resolve(args.checkpoint)
    if args.undo is not None:
        if args.person is not None or args.place is not None:
            raise TraceError("--undo N removes an edit; it takes no --person or --place")
        return _undo(args, source, _new_run_dir(args, source))
    for flag, value in (("--person", args.person), ("--place", args.place)):
        if value is None:
            raise TraceError(f"{flag} is required (or --undo N to remove an edit)")
        if not value.strip():
            raise TraceError(f"{flag} is empty")
    out = _new_run_dir(args, source)
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
    """The edit of ``cmd_edit``, its checks done and ``out`` held; an edit that does not take
    fails before anything is written (``claim`` then removes the directory it made)."""
    from ..model.checkpoint import load_model
    from ..core.devices import resolve_device

    model, vocab, ckpt = load_model(source, device=str(resolve_device(args.device)))
    _check_edit_request(model, vocab, args, docs)
    from ..facts.gated_edit import EditFailed

    try:
        if args.method == "rome":
            edited, report = _rome(model, vocab, args, docs, places)
        else:
            edited, report = _grace(model, vocab, args, docs, places)
    except EditFailed as e:  # a missed goal (exit 1), not bad input
        raise GoalNotMet(str(e)) from None
    report.update(_measure(model, edited, vocab, args, docs, report["old_answer"]))
    record = {k: report[k] for k in ("id", "person", "old_answer", "place", "method", "layer", "parameters_added")}
    edited.edits = list(getattr(model, "edits", [])) + [record]
    report["source"] = str(source)
    _save_edited(out, edited, vocab, {**ckpt.meta, "edit": report}, report)
    print(f"edited model: {out} (edit {record['id']}; the original {source} is unchanged); "
          f"report: {out / 'edit.json'}; edits: {out / 'edits.json'}")
    publish(args, {**report, "written": [str(out / CHECKPOINT_NAME), str(out / "edit.json"), str(out / "edits.json")]})
    return 0


def _check_edit_request(model, vocab, args, docs: list[str]) -> None:
    """Refuse, before any work, an edit that cannot be made: an unknown person, a place the
    vocabulary cannot spell, a second edit of an edited person."""
    from ..facts.gated_edit import check_place
    from ..answering.knowledge import CorpusIndex

    if args.layer is not None:
        check_layer(model, args.layer)
    check_place(vocab, args.place)
    vocab.encode(args.person, source="--person")
    if CorpusIndex(docs).line_of(args.person) is None:
        raise TraceError(f"--person {args.person!r}: no line of {args.corpus} is about this person, so the "
                         f"model never saw them; an edit corrects what the model learnt of someone it saw")
    for r in getattr(model, "edits", []):
        if r.get("person") == args.person:
            raise TraceError(f"--person {args.person!r} was already edited (edit {r['id']}: {r.get('old_answer')!r} -> "
                             f"{r.get('place')!r}); undo it first (attnlab edit RUN --undo {r['id']} --out-dir NEW)")


def _next_id(model) -> int:
    return 1 + max((r["id"] for r in getattr(model, "edits", [])), default=0)


def _grace(model, vocab, args, docs, places):
    """The gated edit (attnlab/gated_editing.py): the edited model and its report."""
    from ..model.codebook import codebook_of
    from ..facts.gated_edit import Negatives, gated_edit, gated_layer
    from ..answering.knowledge import CorpusIndex

    book = codebook_of(model)
    layer = args.layer if args.layer is not None else book.layer if book is not None else gated_layer(model)
    print(f"layer {layer}: the residual stream after this block holds the edit's entries"
          f"{' (--layer)' if args.layer is not None else ''}")
    negatives = Negatives.of(model, vocab, stat_texts(model, docs, args.stat_lines, args.seed, places), layer)
    owner = _next_id(model)
    edited, g = gated_edit(model, vocab, args.person, args.place, negatives, owner=owner,
                           line=CorpusIndex(docs).line_of(args.person), radius_fraction=args.radius)
    t = g.target
    print(f"edit input: {t.text!r}; the model answered {t.old_answer!r} before")
    print("corpus line: " + ("states no place the model read" if g.line_prompt is None else
                             f"{g.line_prompt!r} + the new place"))
    print(f"{len(g.positions) + len(g.line_positions)} entries at characters {g.positions} of the edit input and "
          f"{g.line_positions} of the corpus line (values optimised in {g.steps} steps, "
          f"hinge {g.loss_before:.3f} -> {g.loss_after:.3f}); radius {args.radius:g} x the distance to "
          f"the nearest state of another person's text (nearest {float(g.nearest_other.min()):.2f})")
    return edited, {"id": owner, "person": args.person, "place": args.place, "method": "grace", "layer": layer,
                    "old_answer": t.old_answer, "edit_input": t.text, "key_positions": g.positions,
                    "line_prompt": g.line_prompt, "line_key_positions": g.line_positions,
                    "parameters_added": g.parameters_added, "radius_fraction": args.radius,
                    "radii": g.radii.tolist(), "steps": g.steps}


def _rome(model, vocab, args, docs, places):
    """The rank-one edit (attnlab/editing.py): the edited model and its report."""
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
    return edited, {"id": _next_id(model), "person": args.person, "place": args.place, "method": "rome",
                    "at": args.at, "key_positions": edit.positions, "layer": layer,
                    "layer_chosen_by": ("--layer" if args.layer is not None
                                        else "trace" if args.at == "name" else "below the top"),
                    "old_answer": target.old_answer, "edit_input": target.text, "parameters_added": 0,
                    "steps": edit.steps, "tighten_steps": args.tighten_steps,
                    "delta_norm": float(edit.delta.norm()), "loss_before": edit.loss_before,
                    "loss_after": edit.loss_after}


def _measure(model, edited, vocab, args, docs, old_answer: str) -> dict:
    """Efficacy (an edit that misses it fails: nothing is written), generalisation and, with
    --eval-file, specificity."""
    from ..data import QAExample
    from ..answering.evaluate import answer_questions
    from ..answering.knowledge import CorpusIndex, person_of

    question = f"Where was {args.person} born?"
    now = answer_questions(edited, vocab, [QAExample(question, args.place, "<edit>", 1)])[0].answer
    if now != args.place:  # a missed goal (exit 1), not bad input
        raise GoalNotMet(f"the {args.method} edit did not take: {question!r} is answered {now!r}, not "
                         f"{args.place!r}; nothing written")
    print(f"efficacy: {question!r} -> {now!r} (the new place)")
    slot = place_slot(CorpusIndex(docs).line_of(args.person), args.person, [old_answer])
    general = None if slot is None else completes_with(edited, vocab, slot, args.place)
    if slot is None:
        print("generalisation: the person's corpus line does not spell their old answer; not measured")
    else:
        print(f"generalisation: {slot!r} -> {'the new place' if general else 'NOT the new place'}")
    report = {"efficacy": True, "answer_after": now, "generalisation": general, "generalisation_prompt": slot}
    if args.eval_file:
        others = [e for e in read_qa(args.eval_file) if person_of(e.question) != args.person]
        n = len(changed_answers(edited, vocab, others, answer_questions(model, vocab, others)))
        print(f"specificity: {n} of {len(others)} other answers of {args.eval_file} changed "
              f"({100.0 * n / max(1, len(others)):.1f}%)")
        report.update(dev=str(args.eval_file), others=len(others), others_changed=n)
    return report


def _save_edited(out: Path, model, vocab, meta: dict, report: dict | None) -> None:
    """The edited run: its checkpoint (format 2), edits.json (every edit it holds) and, for a new
    edit, edit.json (its report)."""
    from ..model.checkpoint import CHECKPOINT_NAME, save_checkpoint

    save_checkpoint(out / CHECKPOINT_NAME, model, vocab, meta=meta)
    _write_json(out / "edits.json", getattr(model, "edits", []))
    if report is not None:
        _write_json(out / "edit.json", report)


def _undo(args, source: Path, out: Path) -> int:
    """A new run directory holding the model with every edit of ``source`` but edit N."""
    import dataclasses

    from ..model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(source, training_state=False)
    record = next((r for r in ckpt.edits if r["id"] == args.undo), None)
    if record is None:
        have = ", ".join(str(r["id"]) for r in ckpt.edits) or "none"
        raise TraceError(f"--undo {args.undo}: {source} has no edit {args.undo} (its edits: {have})")
    if record.get("method") != "grace":
        raise TraceError(f"--undo {args.undo}: edit {args.undo} ({record.get('method')}) changed the model's weights "
                         f"and cannot be undone; only gated edits (--method grace) can")
    keep = ckpt.edit_state["owner"] != args.undo
    state = {k: v[keep] for k, v in ckpt.edit_state.items()}
    rest = [r for r in ckpt.edits if r["id"] != args.undo]
    grace_left = any(r.get("method") == "grace" for r in rest)
    model = dataclasses.replace(ckpt, edits=rest, edit_state=state if grace_left else {},
                                edit_layer=ckpt.edit_layer if grace_left else None).build_model()
    meta = {k: v for k, v in ckpt.meta.items() if k != "edit"}
    meta["undo"] = {"source": str(source), "removed": record}
    _save_edited(out, model, ckpt.vocab, meta, None)
    print(f"removed edit {args.undo} ({record['person']!r}: {record.get('old_answer')!r} -> {record['place']!r}); "
          f"{len(rest)} edit(s) left; model: {out} (the original {source} is unchanged)")
    return 0


def cmd_edits(args: argparse.Namespace) -> int:
    from ..model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(args.checkpoint, training_state=False)
    if not ckpt.edits:
        print(f"{ckpt.path}: no edits (an unedited model)")
        return 0
    print("| edit | person | old answer | new place | method | layer | parameters added |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in ckpt.edits:
        print(f"| {r['id']} | {r.get('person')} | {r.get('old_answer')} | {r.get('place')} | {r.get('method')} | "
              f"{r.get('layer')} | {r.get('parameters_added')} |")
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

    _register_edit(command)


def _register_edit(command) -> None:
    p = command("edit", "correct one fact (PERSON was born in PLACE) or undo an edit; writes a new run "
                "directory", cmd_edit)
    p.add_argument("checkpoint", help="checkpoint file or run directory (never modified)")
    p.add_argument("--person", default=None, help="the name, as in 'Where was NAME born?' (default: none; "
                   "required unless --undo)")
    p.add_argument("--place", default=None, help="the new birth place (default: none; required unless --undo)")
    flags.out_dir(p, None, "new run directory for the edited model (default: none; required)", old=("--out",))
    p.add_argument("--method", choices=METHODS, default=DEFAULT_METHOD,
                   help="grace: gated codebook entries at one layer that fire only near the edited "
                        "person's own text (adds parameters; can be undone); rome: a rank-one change of "
                        "one MLP's output matrix (changes weights; cannot be undone)")
    p.add_argument("--undo", type=bounds.positive_int, default=None,
                   help="remove edit N (a gated edit; `attnlab edits RUN` lists them) instead of adding one "
                        "(default: none, add an edit)")
    p.add_argument("--radius", type=bounds.positive_float, default=0.5,
                   help="grace: each entry's radius as a fraction of the distance from its key to the nearest "
                        "stream state of another person's text")
    p.add_argument("--at", choices=LOCI, default="answer",
                   help="rome: where the key is read: 'answer', the position before the place's first "
                        "character where the model first writes it (where tracing finds the fact in "
                        "recall-format models; where that edit fails and the recalled line spells the place, "
                        "the edit of 'both'), 'both', two keys (a rank-two edit): that one and the "
                        "'⁇' before the answer, or 'name', the name's last character (ROME's subject "
                        "token)")
    p.add_argument("--layer", type=int, default=None,  # its range depends on the model: check_layer
                   help="grace: the block whose output holds the entries; rome: the MLP to edit (default: grace, "
                        "the top block or the run's codebook layer; rome with --at answer, the layer below "
                        "the top; rome with --at name, the layer where tracing this question finds the "
                        "strongest MLP effect at the name's last character)")
    p.add_argument("--tighten-steps", type=bounds.non_negative_int, default=200,
                   help="rome: once the edit works, at most this many steps looking for the smallest change that "
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
                   help="lines for the key statistics (rome) or the radii (grace) (0 = all)")
    flags.eval_file(p, "question<TAB>place file whose other answers are compared before and after "
                       "('' to skip)", old=("--dev",))
    flags.device(p)
    add_json_flag(p)

    p = command("edits", "list the edits an edited run holds (person, old answer, new place, method, layer, "
                "parameters added)", cmd_edits)
    p.add_argument("checkpoint", help="checkpoint file or run directory")
