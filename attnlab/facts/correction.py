"""Correcting one fact, whole: the request checked, the edit made (gated, rank-one, or plain
finetuning), its efficacy, generalisation and specificity measured, and the edited model's record
of its edits; and an edit removed again. ``attnlab edit`` and ``LoadedModel.edit`` are thin
wrappers over ``edit_fact`` and ``undo_edit``; the methods themselves are in gated_edit.py,
edit.py and finetune_edit.py.

Nothing is written here but by ``save_edited_run``; an edit that does not reach its target is an
``EditFailed`` (the command line's exit code 1) before anything is written.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Callable

from ..core.outputs import write_output
from ..data.corpus import CorpusIndex, require_person
from ..data.relations import Schema
from ..data.datasets import QAExample, read_qa
from ..data.vocab import Vocab
from ..answering.evaluate import answer_questions
from ..model.checkpoint import CHECKPOINT_NAME, Checkpoint, save_checkpoint
from ..model.codebook import codebook_of
from ..model.gpt import GPT
from .edit import (answer_layer, question_about, changed_answers, check_layer, completes_with, default_layer, edit_model, key_second_moment,
                   place_slot, stat_texts)
from .finetune_edit import finetune_edit
from .errors import EditError, EditFailed
from .gated_edit import Negatives, check_place, gated_edit, gated_layer
from .settings import EditSettings

Log = Callable[[str], None]

LOCUS_WORDS = {"name": "the name's last character",
               "answer": "the place's read-out (the character before the place is first written)",
               "both": "the place's read-outs in the recalled line and after the answer mark (one key each)"}


def _quiet(_line: str) -> None:
    """The default ``log``: the library says nothing; the command line passes ``print``."""


def training_answers(path: str | os.PathLike | None, schema: Schema | None = None) -> list[QAExample] | None:
    """The labelled questions of a training file (the key statistics' answer format), each
    checked against ``schema`` (the model's relations; default: the course's question) before
    any work, or None without a file."""
    if not path:
        return None
    trained = read_qa(path, labelled=True)
    for e in trained:
        require_person(e, schema or Schema())
    return trained


def edit_fact(model: GPT, vocab: Vocab, person: str, place: str, docs: list[str], *,
              settings: EditSettings = EditSettings(), trained: list[QAExample] | None = None,
              relation: str | None = None, eval_file: str | os.PathLike | None = None,
              corpus_name: str = "the corpus", log: Log = _quiet) -> tuple[GPT, dict[str, Any]]:
    """A new model in which ``person`` was born in ``place`` (``model`` is unchanged), and the
    edit's report: the method's numbers, efficacy, generalisation (``docs``: the corpus lines,
    for the key statistics and the person's own line) and, with ``eval_file``, specificity (how
    many other answers of that file changed), with the settings used. ``relation``: which
    answer of a model of several relations is changed (its other relations of ``person`` are
    asked before and after, and reported); ``trained``: the training file's questions (the
    key statistics' answer format). The new model's ``edits`` lists every edit it holds. Bad
    requests raise EditError; a missed target EditFailed (an EditError too)."""
    question_about(model, person, relation)  # a model this edit can serve, and a relation it has
    if not Schema.from_list(model.config.relations).cued:
        relation = None  # the model's one relation, named: nothing else to keep
    line = check_edit_request(model, vocab, person, place, docs, settings.layer, corpus_name)
    method = {"grace": _grace, "rome": _rome, "finetune": _finetune}[settings.method]
    edited, report = method(model, vocab, person, place, docs, trained, settings, log, line, relation)
    report.update(measure(model, edited, vocab, person, place, line, report["old_answer"],
                          method=settings.method, eval_file=eval_file, log=log, relation=relation))
    report["settings"] = settings.to_dict()
    if relation is not None:
        report["relation"] = relation
    record = {k: report[k] for k in ("id", "person", "old_answer", "place", "method", "layer", "parameters_added")}
    if relation is not None:
        record["relation"] = relation
    edited.edits = list(model.edits) + [record]
    return edited, report


def check_edit_request(model: GPT, vocab: Vocab, person: str, place: str, docs: list[str], layer: int | None,
                       corpus_name: str = "the corpus") -> str:
    """The person's corpus line; but first refuse, before any work, an edit that cannot be made:
    an unknown person, a place the vocabulary cannot spell, a second edit of an edited person."""
    if layer is not None:
        check_layer(model, layer)
    check_place(vocab, place)
    who = "subject" if model.config.relations else "person"  # a fact set's word, or the course's
    vocab.encode(person, source=f"--{who}")
    line = CorpusIndex(docs).line_of(person)
    if line is None:
        if who == "subject":
            raise EditError(f"--subject {person!r}: no document of {corpus_name} is about this subject, so the "
                            "model never read of it; an edit corrects what the model learnt of a subject it read")
        raise EditError(f"--person {person!r}: no line of {corpus_name} is about this person, so the "
                        f"model never saw them; an edit corrects what the model learnt of someone it saw")
    for r in model.edits:
        # One edit a subject, whatever its relation: a second edit would rewrite a recall the
        # first one already rewrote.
        if r.get("person") == person:
            what = f" ({r['relation']})" if r.get("relation") else ""
            raise EditError(f"--person {person!r} was already edited (edit {r['id']}{what}: {r.get('old_answer')!r} -> "
                             f"{r.get('place')!r}); undo it first (attnlab edit RUN --undo {r['id']} --out-dir NEW)")
    return line


def next_id(model: GPT) -> int:
    """The number the next edit of ``model`` gets."""
    return 1 + max((r["id"] for r in model.edits), default=0)


def _grace(model, vocab, person, place, docs, trained, s: EditSettings, log: Log, line: str, relation: str | None):
    """The gated edit (gated_edit.py): the edited model and its report."""
    book = codebook_of(model)
    layer = s.layer if s.layer is not None else book.layer if book is not None else gated_layer(model)
    log(f"layer {layer}: the residual stream after this block holds the edit's entries"
        f"{' (--layer)' if s.layer is not None else ''}")
    negatives = Negatives.of(model, vocab, stat_texts(model, docs, s.stat_lines, s.seed, trained), layer)
    owner = next_id(model)
    edited, g = gated_edit(model, vocab, person, place, negatives, owner=owner,
                           line=line, radius_fraction=s.radius, relation=relation)
    t = g.target
    log(f"edit input: {t.text!r}; the model answered {t.old_answer!r} before")
    log("corpus line: " + ("states no place the model read" if g.line_prompt is None else
                           f"{g.line_prompt!r} + the new answer"))
    log(f"{len(g.positions) + len(g.line_positions)} entries at characters {g.positions} of the edit input and "
        f"{g.line_positions} of the corpus line (values optimised in {g.steps} steps, "
        f"hinge {g.loss_before:.3f} -> {g.loss_after:.3f}); radius {s.radius:g} x the distance to "
        f"the nearest state of another person's text (nearest {float(g.nearest_other.min()):.2f})")
    return edited, {"id": owner, "person": person, "place": place, "method": "grace", "layer": layer,
                    "old_answer": t.old_answer, "edit_input": t.text, "key_positions": g.positions,
                    "line_prompt": g.line_prompt, "line_key_positions": g.line_positions,
                    "parameters_added": g.parameters_added, "radius_fraction": s.radius,
                    "radii": g.radii.tolist(), "steps": g.steps,
                    **({"kept_relations": g.kept_relations} if relation is not None else {})}


def _rome_layer(model, vocab, person: str, s: EditSettings, log: Log, relation: str | None) -> int:
    """The MLP a rank-one edit changes: ``s.layer``, else the default for its locus."""
    if s.layer is not None:
        log(f"layer {s.layer} (--layer)")
        return s.layer
    layer, effects = default_layer(model, vocab, question_about(model, person, relation), s.at, noise=s.noise,
                                   samples=s.samples, seed=s.seed)
    if effects is None:
        log(f"layer {layer}: the layer below the top, the default for an edit at the answer "
            f"(the top layer's MLP there moves only the next character)")
    else:
        log(f"layer {layer}: the strongest MLP effect at {LOCUS_WORDS[s.at]} in the trace "
            f"of this question (recovered probability by layer: {' '.join(f'{x:.4f}' for x in effects)})")
    return layer


def _rome(model, vocab, person, place, docs, trained, s: EditSettings, log: Log, line: str, relation: str | None):
    """The rank-one edit (edit.py): the edited model and its report."""
    layer = _rome_layer(model, vocab, person, s, log, relation)
    moment = key_second_moment(model, vocab, stat_texts(model, docs, s.stat_lines, s.seed, trained), layer)
    edited, edit, target = edit_model(model, vocab, person, place, layer, moment, at=s.at,
                                      tighten_steps=s.tighten_steps, relation=relation)
    log(f"edit input: {target.text!r} (key at characters {edit.positions}, {LOCUS_WORDS[s.at]}); "
        f"the model answered {target.old_answer!r} before")
    log(f"value optimised in {edit.steps} steps: loss {edit.loss_before:.3f} -> {edit.loss_after:.3f}; "
        f"|delta| {float(edit.delta.norm()):.3f}")
    return edited, {"id": next_id(model), "person": person, "place": place, "method": "rome",
                    "at": s.at, "key_positions": edit.positions, "layer": layer,
                    "layer_chosen_by": ("--layer" if s.layer is not None
                                        else "trace" if s.at == "name" else "below the top"),
                    "old_answer": target.old_answer, "edit_input": target.text, "parameters_added": 0,
                    "steps": edit.steps, "tighten_steps": s.tighten_steps,
                    "delta_norm": float(edit.delta.norm()), "loss_before": edit.loss_before,
                    "loss_after": edit.loss_after}


def _finetune(model, vocab, person, place, docs, trained, s: EditSettings, log: Log, line: str, relation: str | None):
    """Plain finetuning of one MLP's output matrix on the one question (finetune_edit.py): the
    edited model and its report."""
    layer = s.layer if s.layer is not None else answer_layer(model)
    why = "--layer" if s.layer is not None else "the layer rome edits"
    log(f"layer {layer} ({why}): its MLP output matrix is finetuned")
    edited, f = finetune_edit(model, vocab, person, place, layer, relation=relation)
    log(f"edit input: {f.target.text!r}; the model answered {f.target.old_answer!r} before")
    log(f"finetuned on it for {f.steps} steps (stopped at the first step that gives the new answer): "
        f"loss {f.loss_before:.3f} -> {f.loss_after:.3f}")
    return edited, {"id": next_id(model), "person": person, "place": place, "method": "finetune", "layer": layer,
                    "old_answer": f.target.old_answer, "edit_input": f.target.text, "parameters_added": 0,
                    "steps": f.steps, "loss_before": f.loss_before, "loss_after": f.loss_after}


def measure(model: GPT, edited: GPT, vocab: Vocab, person: str, place: str, line: str, old_answer: str, *,
            method: str, eval_file: str | os.PathLike | None = None, log: Log = _quiet,
            relation: str | None = None) -> dict[str, Any]:
    """Efficacy (an edit that misses it is an EditFailed), generalisation, the subject's other
    relations (a model of several) and, with ``eval_file``, specificity (``line``: the
    person's corpus line)."""
    question = question_about(model, person, relation)
    now = answer_questions(edited, vocab, [QAExample(question, place, "<edit>", 1)])[0].answer
    if now != place:
        raise EditFailed(f"the {method} edit did not take: {question!r} is answered {now!r}, not "
                         f"{place!r}; nothing written")
    log(f"efficacy: {question!r} -> {now!r} (the new answer)")
    slot = place_slot(line, person, [old_answer])
    general = None if slot is None else completes_with(edited, vocab, slot, place)
    if slot is None:
        log("generalisation: the person's corpus line does not spell their old answer; not measured")
    else:
        log(f"generalisation: {slot!r} -> {'the new answer' if general else 'NOT the new answer'}")
    report = {"efficacy": True, "answer_after": now, "generalisation": general, "generalisation_prompt": slot}
    if relation is not None:
        report["other_relations"] = other_relations(model, edited, vocab, person, relation, log)
    if eval_file:
        schema = Schema.from_list(model.config.relations)
        others = [e for e in read_qa(eval_file) if getattr(schema.parse(e.question, bare_subject=False),
                                                              "subject", None) != person]
        n = len(changed_answers(edited, vocab, others, answer_questions(model, vocab, others)))
        log(f"specificity: {n} of {len(others)} other answers of {eval_file} changed "
            f"({100.0 * n / max(1, len(others)):.1f}%)")
        report.update(dev=str(eval_file), others=len(others), others_changed=n)
    return report


def other_relations(model: GPT, edited: GPT, vocab: Vocab, person: str, relation: str,
                    log: Log = _quiet) -> dict[str, dict[str, str]]:
    """The edited subject's answers to its other relations, before and after the edit (an edit
    of one relation should move none of them): relation -> {"before", "after"}."""
    schema = Schema.from_list(model.config.relations)
    asked = [QAExample(r.ask(person), None, "<edit>", 1) for r in schema.relations if r.name != relation]
    if not asked:
        return {}
    before, after = answer_questions(model, vocab, asked), answer_questions(edited, vocab, asked)
    found = {r.name: {"before": b.answer, "after": a.answer}
             for r, b, a in zip([r for r in schema.relations if r.name != relation], before, after)}
    moved = [name for name, pair in found.items() if pair["before"] != pair["after"]]
    shifts = ", ".join(f"{n} {found[n]['before']!r} -> {found[n]['after']!r}" for n in moved)
    log(f"other relations of {person!r}: {len(found) - len(moved)} of {len(found)} unchanged"
        + (f" (moved: {shifts})" if moved else ""))
    return found


def save_edited_run(out: Path, model: GPT, vocab: Vocab, meta: dict[str, Any], report: dict | None) -> list[Path]:
    """The edited run: its checkpoint (format 2), edits.json (every edit it holds) and, for a new
    edit, edit.json (its report); the files written. The JSON files are new files (never
    replaced)."""
    written = [save_checkpoint(out / CHECKPOINT_NAME, model, vocab, meta=meta),
               write_output(out / "edits.json", json.dumps(model.edits, indent=1) + "\n", False)]
    if report is not None:
        written.append(write_output(out / "edit.json", json.dumps(report, indent=1) + "\n", False))
    return written


def undo_edit(ckpt: Checkpoint, number: int) -> tuple[GPT, dict[str, Any], dict[str, Any]]:
    """The model of ``ckpt`` with every edit but edit ``number``, its metadata (recording the
    undo) and the removed edit's record. Only gated edits can be undone (EditError)."""
    record = next((r for r in ckpt.edits if r["id"] == number), None)
    if record is None:
        have = ", ".join(str(r["id"]) for r in ckpt.edits) or "none"
        raise EditError(f"--undo {number}: {ckpt.path} has no edit {number} (its edits: {have})")
    if record.get("method") != "grace":
        raise EditError(f"--undo {number}: edit {number} ({record.get('method')}) changed the model's weights "
                         f"and cannot be undone; only gated edits (--method grace) can")
    keep = ckpt.edit_state["owner"] != number
    state = {k: v[keep] for k, v in ckpt.edit_state.items()}
    rest = [r for r in ckpt.edits if r["id"] != number]
    grace_left = any(r.get("method") == "grace" for r in rest)
    model = dataclasses.replace(ckpt, edits=rest, edit_state=state if grace_left else {},
                                edit_layer=ckpt.edit_layer if grace_left else None).build_model()
    meta = {k: v for k, v in ckpt.meta.items() if k != "edit"}
    meta["undo"] = {"source": str(ckpt.path), "removed": record}
    return model, meta, record
