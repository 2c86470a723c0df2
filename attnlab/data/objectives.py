"""Pretraining objectives besides span corruption: next-character prediction on corpus lines
(``--objective lm``), packed several lines to a row, with question-answer examples of
training-file people mixed in (``--mix-qa FILE --mix-ratio R``).

Packing is exact: each row holds whole sequences side by side, every position attends only to
earlier positions of its own sequence and counts its position from the sequence's start, so a
sequence gets the same logits, and the same loss, as it would alone (tests/test_objectives.py).
Rows are then almost free of padding, which is most of the work saved on a CPU.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import torch
from torch import Tensor

from .corpus import CorpusIndex, place_in_line, recall_prompt, sentence_quote, recall_string, whole_words
from .datasets import DataError, QAExample
from .relations import COURSE, Schema
from .formats import text_format
from .vocab import PAD_ID, Vocab

OBJECTIVES = ("span", "lm")


@dataclass(frozen=True)
class Sequence:
    """Token ids of one training string; targets predicting its first ``unscored`` characters
    (a question) are left out of the loss."""

    ids: list[int]
    unscored: int = 0


def corpus_sequences(docs: list[str], vocab: Vocab, block_size: int, qa_format: str,
                     recall_chars: int, source: str = "<corpus>") -> list[Sequence]:
    """One sequence per corpus line: the line cut to fit the block (direct format) or cut at
    ``recall_chars`` and closed with ``⁇`` (recall format)."""
    fmt = text_format(qa_format)
    out = []
    for n, doc in enumerate(docs, 1):
        text = fmt.corpus_text(doc, recall_chars)
        out.append(Sequence(vocab.encode(text[: block_size + 1], source=source, line=n)))
    return out


def qa_sequences(examples: list[QAExample], vocab: Vocab, block_size: int, qa_format: str,
                 recall_chars: int, index: CorpusIndex | None, *, read_out_only: bool = False,
                 schema: Schema = COURSE, quote: bool = False) -> list[Sequence]:
    """The QA examples in the answer format ``qa_format`` (data/formats.py): ``question⁇place⁇``
    with the question unscored (SPEC 2), or the person's recall string with the place (every
    character scored; with ``read_out_only`` only the place and its closing mark)."""
    fmt = text_format(qa_format)
    out = []
    for ex in examples:
        text, unscored = fmt.example_text(ex, recall_chars, index, read_out_only, schema, quote)
        if len(text) > block_size + 1:
            raise DataError(ex.source, ex.line, f"the example is {len(text)} characters, longer than "
                            f"block_size + 1 = {block_size + 1}")
        out.append(Sequence(vocab.encode(text, source=ex.source, line=ex.line), unscored))
    return out


def swapped_place_read_outs(examples: list[QAExample], index: CorpusIndex, vocab: Vocab, block_size: int,
                            recall_chars: int, per_person: float, seed: int,
                            schema: Schema = COURSE, *, distractors: bool = False,
                            quote: bool = False, novel: float = 0.0) -> list[Sequence]:
    """Read-out examples made from training people's own lines: each line with its place
    replaced by another of the training file's places (``per_person`` draws; a fraction draws
    once more for that share of the people, chosen by the seed), cut at ``recall_chars``, then
    that place, and only the place scored. The model learns to read whichever place stands
    where the birthplace stands, not the place it remembers; no label outside the given
    examples is used. A line whose place is not within the recalled characters (or whose
    example would not fit the block) gives none.

    With ``distractors``, a line that also names other values of the relation (as whole words,
    within the recalled characters) has the answer exchanged with one of them: the same two
    values, in each other's places, and the answer is the one that now stands where the answer
    stood. A line without one gets a random value as before.

    With ``novel``, that share of the random values is disguised (``disguised``): a string no
    value of the set is, which the model can only write by copying it from the line, where
    copies of known values let a read-out score by choosing among the values it has seen."""
    rng = random.Random(seed)
    asked = [schema.require(e) for e in examples]
    values = {r.name: sorted({e.answer for e, a in zip(examples, asked) if a.relation is r})
              for r in schema.relations}
    finders = {name: whole_words(*vals) for name, vals in values.items() if vals} if distractors else {}
    alphabets = {name: alphabet_of(vals) for name, vals in values.items()}
    whole, share = int(per_person), per_person - int(per_person)
    # only a fractional count draws the extra people, so whole counts keep their seeded draws
    once_more = set(rng.sample(range(len(examples)), round(share * len(examples)))) if share else set()
    out = []
    for n, (ex, question) in enumerate(zip(examples, asked)):
        name, places = question.subject, values[question.relation.name]
        line = index.line_of(name) or ""
        at = place_in_line(line, name, ex.answer)
        if at < 0 or len(places) < 2:
            continue
        others = [p for p in places if p != ex.answer]
        rivals = _distractors(finders[question.relation.name], line[:recall_chars], at, ex.answer) if finders else []
        cue = schema.cue(question.relation)
        for _ in range(whole + (n in once_more)):
            slot = at  # where the new answer starts in the swapped line
            if rivals:
                where, new = rng.choice(rivals)
                swapped = _exchanged(line, (at, ex.answer, new), (where, new, ex.answer))
                slot += len(ex.answer) - len(new) if where < at else 0
            else:
                new = rng.choice(others)
                if novel and rng.random() < novel:
                    new = disguised(new, alphabets[question.relation.name], rng)
                swapped = line[:at] + new + line[at + len(ex.answer):]
            said = sentence_quote(swapped[:recall_chars], slot, len(new), len(recall_prompt(name))) if quote else None
            text = recall_string(swapped, recall_chars, new, cue, said)
            given = len(swapped[:recall_chars]) + (len(cue) + 1 if cue else 0)
            if slot + len(new) <= recall_chars and len(text) <= block_size + 1:
                out.append(Sequence(vocab.encode(text, source=ex.source, line=ex.line), given))
    return out


def _kind(ch: str) -> str | None:
    return "upper" if ch.isupper() else "lower" if ch.islower() else "digit" if ch.isdigit() else None


def alphabet_of(values: list[str]) -> dict[str, str]:
    """The upper-case letters, lower-case letters and digits that ``values`` use, by kind: the
    characters a disguised value is drawn from (all of them in the vocabulary)."""
    kinds: dict[str, set[str]] = {}
    for value in values:
        for ch in value:
            if (kind := _kind(ch)) is not None:
                kinds.setdefault(kind, set()).add(ch)
    return {kind: "".join(sorted(chars)) for kind, chars in kinds.items()}


def disguised(value: str, alphabet: dict[str, str], rng: random.Random) -> str:
    """``value`` with each letter and digit replaced by one drawn from ``alphabet`` of its kind
    (upper case, lower case, digit); spaces and punctuation kept, so it has the value's shape."""
    return "".join(rng.choice(alphabet[kind]) if (kind := _kind(ch)) in alphabet else ch for ch in value)


def _distractors(finder: re.Pattern, text: str, at: int, answer: str) -> list[tuple[int, str]]:
    """(position, value) of each other value of the relation in ``text`` (``finder``: its
    values as whole words), clear of the answer standing at ``at``."""
    return [(m.start(), m.group()) for m in finder.finditer(text)
            if m.group() != answer and (m.end() <= at or m.start() >= at + len(answer))]


def _exchanged(line: str, *edits: tuple[int, str, str]) -> str:
    """``line`` with each (position, old, new) written in, the last position first so that the
    earlier positions stay where they were."""
    for where, old, new in sorted(edits, reverse=True):
        line = line[:where] + new + line[where + len(old):]
    return line


def one_fact_per_subject(examples: list[QAExample], schema: Schema) -> list[QAExample]:
    """One question of each subject, the relations taken in turn (the i-th subject to appear
    gets relation i mod R, or its first question when it has none of that relation). A recall
    example holds the subject's whole document: one a subject keeps each document once per
    pass, and every relation's format is still taught on a share of the subjects."""
    by_subject: dict[str, list[tuple[str, QAExample]]] = {}
    for e in examples:
        asked = schema.require(e)
        by_subject.setdefault(asked.subject, []).append((asked.relation.name, e))
    chosen = []
    for i, questions in enumerate(by_subject.values()):
        wanted = schema.names[i % len(schema.names)]
        chosen.append(next((e for name, e in questions if name == wanted), questions[0][1]))
    return chosen


def refuse_held_out_people(mix: list[QAExample], held_out: dict[str, list[QAExample]],
                           drop: bool = False) -> tuple[list[QAExample], list[QAExample]]:
    """Only training-file people may be mixed into pretraining: a mixed question that is also
    asked in an evaluation file (dev, test) is refused, naming both places; with ``drop`` such
    questions are left out instead. Returns (kept, dropped). The course's training file asks
    three questions that dev or test also ask (namesakes with other places)."""
    asked: dict[str, tuple[str, int]] = {}
    for path, examples in held_out.items():
        for ex in examples:
            asked.setdefault(ex.question.strip(), (path, ex.line))
    kept, dropped = [], []
    for ex in mix:
        where = asked.get(ex.question.strip())
        if where is None:
            kept.append(ex)
        elif drop:
            dropped.append(ex)
        else:
            raise DataError(ex.source, ex.line, f"{ex.question!r} is also asked in {where[0]} line "
                            f"{where[1]}: only training-file people may be mixed into pretraining "
                            "(--mix-overlap drop leaves such questions out)")
    return kept, dropped


def mixed(corpus: list[Sequence], qa: list[Sequence], count: int, seed: int) -> list[Sequence]:
    """The corpus plus ``count`` QA sequences per epoch: every QA example the same number of
    times (give or take one), the remainder drawn by a seeded permutation."""
    if count <= 0 or not qa:
        return list(corpus)
    whole, rest = divmod(count, len(qa))
    g = torch.Generator().manual_seed(seed)
    extra = [qa[i] for i in torch.randperm(len(qa), generator=g)[:rest].tolist()]
    return list(corpus) + qa * whole + extra


@dataclass(frozen=True)
class PackedRows:
    """Rows of packed sequences: inputs, targets (PAD where unscored or empty) and the segment
    each position belongs to (-1 for padding); positions follow from the segments
    (model.segment_positions)."""

    x: Tensor
    y: Tensor
    segments: Tensor

    def __len__(self) -> int:
        return len(self.x)


def pack(sequences: list[Sequence], width: int) -> PackedRows:
    """First-fit decreasing: each sequence of n ids contributes n-1 (input, target) positions;
    sequences are placed longest first into the first row with room. Deterministic."""
    spans = sorted(range(len(sequences)), key=lambda i: -len(sequences[i].ids))
    rows: list[list[int]] = []
    room: list[int] = []
    for i in spans:
        n = len(sequences[i].ids) - 1
        if n < 1:
            continue
        if n > width:
            raise ValueError(f"a sequence of {n + 1} ids does not fit rows of width {width}")
        # First fit: scanning is fine at corpus scale (a few thousand rows).
        r = next((r for r, free in enumerate(room) if free >= n), None)
        if r is None:
            rows.append([])
            room.append(width)
            r = len(rows) - 1
        rows[r].append(i)
        room[r] -= n
    R = len(rows)
    x = torch.full((R, width), PAD_ID, dtype=torch.long)
    y = torch.full((R, width), PAD_ID, dtype=torch.long)
    seg = torch.full((R, width), -1, dtype=torch.long)
    for r, members in enumerate(rows):
        at = 0
        for s, i in enumerate(members):
            ids = torch.tensor(sequences[i].ids)
            n = len(ids) - 1
            x[r, at:at + n] = ids[:-1]
            target = ids[1:].clone()
            target[: sequences[i].unscored] = PAD_ID
            y[r, at:at + n] = target
            seg[r, at:at + n] = s
            at += n
    return PackedRows(x, y, seg)
