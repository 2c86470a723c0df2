"""Fact commands: `trace` (where does the model keep a fact?), `edit` (can a user correct
it?) and `edits`. The logic is in the library: attnlab/facts/trace.py (causal tracing) and
attnlab/facts/correction.py (an edit checked, made and measured); this module only parses
arguments into settings (attnlab/facts/settings.py), calls the library, prints and writes files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..core import bounds, paths
from ..facts.settings import EditSettings, TraceSettings
from . import flags
from ..core.outputs import refuse_existing, write_output
from .results import GoalNotMet, add_json_flag, publish

# The library's tracing and editing (and torch with them) are imported when a command runs, so
# that --help needs no torch.


# ---- trace -----------------------------------------------------------------------------------
def _trace_one(model, vocab, args, out: Path) -> dict:
    from ..facts import trace as tracing

    settings = flags.settings_from(args, TraceSettings)
    t = tracing.trace(model, vocab, args.question, name=args.name, **settings.to_dict())
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
        "seed": args.seed, "settings": settings.to_dict(),
        "recovered": {k: v.tolist() for k, v in t.recovered.items()}}
    _write_json(out / "trace.json", document, args.overwrite)
    print(f"heatmap: {png}; table: {out / 'trace.md'}; numbers: {out / 'trace.json'}")
    return document


def _trace_over(model, vocab, args, out: Path) -> dict:
    import numpy as np
    
    from ..answering.evaluate import answer_questions
    from ..core.progress import progress_bar
    from ..data.corpus import require_person
    from ..data.datasets import read_qa
    from ..facts import trace as tracing
    from ..facts.trace import TraceError

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
        "noise": args.noise, "samples": args.samples, "settings": flags.settings_from(args, TraceSettings).to_dict(),
        "recovered": {k: [[None if np.isnan(x) else x for x in row] for row in v.tolist()]
                      for k, v in avg.recovered.items()}}
    _write_json(out / "trace-average.json", document, args.overwrite)
    print(f"heatmap: {png}; numbers: {out / 'trace-average.json'}")
    return document


def _report_strongest(recovered, labels, name_last) -> None:
    from ..facts import trace as tracing

    for kind, (layer, label, value) in tracing.strongest(recovered, labels).items():
        print(f"strongest {kind} effect: layer {layer} at {label} (recovered {value:.4f})")
    if name_last is not None:
        col = {k: v[:, name_last] for k, v in recovered.items()}
        print("at the name's last character, by layer: " + "; ".join(
            f"{k} " + " ".join(f"{x:.4f}" for x in v) for k, v in col.items()))


def _write_json(path: Path, data, overwrite: bool = False) -> None:
    write_output(path, json.dumps(data, indent=1) + "\n", overwrite)


def cmd_trace(args: argparse.Namespace) -> int:
    from ..data.datasets import read_questions
    from ..facts.trace import TraceError
    from ..model.checkpoint import load_model
    from ..model.shipped import output_dir

    if args.question is None and not args.over:
        raise TraceError("give a QUESTION to trace, --over FILE to average, or both")
    if args.question is not None and not args.question.strip():
        raise TraceError("<argument>: empty question")
    if args.over:
        read_questions(paths.input_file(args.over, "--over"), labelled=True)
    out = paths.output_dir(args.out_dir or output_dir(args.checkpoint) / "trace", "--out-dir")
    refuse_existing([out / f for f in trace_files(args)], args.overwrite)  # created when the first file is written
    model, vocab, _ = load_model(args.checkpoint, device=args.device)
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
    from ..facts.errors import EditError
    from ..model.checkpoint import CHECKPOINT_NAME

    if not args.out_dir:  # not argparse's required=True, which would refuse the old name --out
        raise EditError("--out-dir is required: the new run directory for the edited model")
    out = Path(args.out_dir)
    if out.resolve() in (source.parent.resolve(), source.resolve()):
        raise EditError(f"--out-dir {out} is the original run: the edit goes to a new run directory")
    if (out / CHECKPOINT_NAME).exists():
        raise EditError(f"--out-dir {out} already holds a checkpoint; choose a new run directory")
    return paths.output_dir(out, "--out-dir")  # created when the first file is written


def cmd_edit(args: argparse.Namespace) -> int:
    from ..data.datasets import read_corpus, read_questions
    from ..facts.correction import training_answers
    from ..facts.errors import EditError
    from ..model.checkpoint import load_model, resolve
    from ..training.rundir import claim

    source = resolve(args.checkpoint)
    if args.undo is not None:
        if args.person is not None or args.place is not None:
            raise EditError("--undo N removes an edit; it takes no --person or --place")
        return _undo(args, source, _new_run_dir(args, source))
    for flag, value in (("--person", args.person), ("--place", args.place)):
        if value is None:
            raise EditError(f"{flag} is required (or --undo N to remove an edit)")
        if not value.strip():
            raise EditError(f"{flag} is empty")
    loaded = load_model(source, device=args.device)  # read once: its relations are checked, then it is edited
    schema = _check_relation(args, loaded[2])
    out = _new_run_dir(args, source)
    docs = read_corpus(paths.input_file(args.corpus, "--corpus")).split("\n")
    if args.eval_file:  # every question one the model answers, before any work
        for e in read_questions(paths.input_file(args.eval_file, "--eval-file")):
            schema.require(e)
    facts = getattr(args, "fact_set", None)
    trained = training_answers(args.train_file and paths.input_file(args.train_file, "--train-file"),
                               facts.schema if facts else None)
    with claim(out):  # held while editing: a second edit into the same new --out-dir is refused, not lost
        return _edit_into(args, source, loaded, out, docs, trained)


def _edit_into(args: argparse.Namespace, source: Path, loaded, out: Path, docs: list[str], trained) -> int:
    """The edit of ``cmd_edit`` on ``loaded`` (model, vocab, checkpoint of ``source``), its checks
    done and ``out`` held; an edit that does not take fails before anything is written (``claim``
    then removes the directory it made)."""
    from ..facts.correction import edit_fact, save_edited_run
    from ..facts.errors import EditFailed

    model, vocab, ckpt = loaded
    try:
        edited, report = edit_fact(model, vocab, args.person, args.place, docs, trained=trained,
                                   relation=args.relation,
                                   settings=flags.settings_from(args, EditSettings), eval_file=args.eval_file,
                                   corpus_name=args.corpus, log=print)
    except EditFailed as e:  # a missed goal (exit 1), not bad input
        raise GoalNotMet(str(e)) from None
    report["source"] = str(source)
    written = save_edited_run(out, edited, vocab, {**ckpt.meta, "edit": report}, report)
    print(f"edited model: {out} (edit {report['id']}; the original {source} is unchanged); "
          f"report: {out / 'edit.json'}; edits: {out / 'edits.json'}")
    publish(args, {**report, "written": [str(written[0]), str(written[2]), str(written[1])]})
    return 0


def _undo(args, source: Path, out: Path) -> int:
    """A new run directory holding the model with every edit of ``source`` but edit N."""
    from ..facts.correction import save_edited_run, undo_edit
    from ..model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(source, training_state=False)
    model, meta, record = undo_edit(ckpt, args.undo)
    written = save_edited_run(out, model, ckpt.vocab, meta, None)
    left = list(model.edits)
    print(f"removed edit {args.undo} ({record['person']!r}: {record.get('old_answer')!r} -> {record['place']!r}); "
          f"{len(left)} edit(s) left; model: {out} (the original {source} is unchanged)")
    publish(args, {"undone": record, "edits": left, "source": str(source), "run_dir": str(out),
                   "written": [str(p) for p in written]})
    return 0


def _check_relation(args: argparse.Namespace, ckpt):
    """--relation must name one of the checkpoint's relations, and a model of several needs it
    (before anything is written); the model's relations (a Schema)."""
    from ..data.relations import Schema
    from ..facts.errors import EditError

    schema = Schema.from_list(ckpt.model_config.relations)
    if args.relation is None and schema.cued:
        raise EditError(f"this model answers several relations ({', '.join(schema.names)}): --relation NAME "
                        "says which answer the edit changes")
    if args.relation is not None and args.relation not in schema.names:
        raise EditError(f"--relation {args.relation!r}: the model's relations are {', '.join(schema.names)}")
    return schema


def cmd_edits(args: argparse.Namespace) -> int:
    from ..model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(args.checkpoint, training_state=False)
    if not ckpt.edits:
        print(f"{ckpt.path}: no edits (an unedited model)")
        return 0
    relations = any(r.get("relation") for r in ckpt.edits)  # a model of several relations names each edit's
    print("| edit | " + ("subject | relation" if relations else "person") +
          " | old answer | new answer | method | layer | parameters added |")
    print("| --- " * (8 if relations else 7) + "|")
    for r in ckpt.edits:
        who = f"{r.get('person')} | {r.get('relation') or ''}" if relations else f"{r.get('person')}"
        print(f"| {r['id']} | {who} | {r.get('old_answer')} | {r.get('place')} | {r.get('method')} | "
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
    flags.settings_flags(p.add_argument_group("tracing"), TraceSettings)
    p.add_argument("--over", default=None, help="question<TAB>answer file: average the traces of the "
                   "questions the model answers correctly (default: none)")
    p.add_argument("--limit", type=bounds.non_negative_int, default=0,
                   help="use at most this many questions of --over (0 = all)")
    flags.device(p)

    _register_edit(command)


def _register_edit(command) -> None:
    p = command("edit", "correct one fact (PERSON was born in PLACE; a SUBJECT's answer to a RELATION) or "
                "undo an edit; writes a new run directory", cmd_edit)
    p.add_argument("checkpoint", help="checkpoint file or run directory (never modified)")
    p.add_argument("--person", "--subject", dest="person", default=None,
                   help="the subject, as in the model's question ('Where was NAME born?' for the birthplace set) "
                        "(default: none; required unless --undo)")
    p.add_argument("--place", "--value", "--answer", dest="place", default=None,
                   help="the new answer (the birth place) (default: none; required unless --undo)")
    p.add_argument("--relation", default=None,
                   help="the relation edited (default: the model's one relation; a model of several "
                        "relations needs it): its other relations of the subject are asked before and after")
    flags.out_dir(p, None, "new run directory for the edited model (default: none; required)", old=("--out",))
    p.add_argument("--undo", type=bounds.positive_int, default=None,
                   help="remove edit N (a gated edit; `attnlab edits RUN` lists them) instead of adding one "
                        "(default: none, add an edit)")
    flags.settings_flags(p.add_argument_group("edit"), EditSettings)
    flags.corpus(p, help="corpus: key statistics and the person's line for generalisation")
    flags.train_file(p, "question<TAB>answer file the model was finetuned on: the key statistics are "
                        "gathered on its people's lines in the answer format ('' for plain corpus lines)")
    flags.eval_file(p, "question<TAB>answer file whose other answers are compared before and after "
                       "('' to skip)", old=("--dev",))
    flags.device(p)
    add_json_flag(p)

    p = command("edits", "list the edits an edited run holds (person, or subject and relation; old answer, "
                "new answer, method, layer, parameters added)", cmd_edits)
    p.add_argument("checkpoint", help="checkpoint file or run directory")
