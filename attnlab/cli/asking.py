"""Answering typed questions (`attnlab ask`, attnlab/cli/answering.py): a table with one row per
answer (labelled, aligned columns: question, answer, confidence, evidence, ...), or one JSON
object per answer, and questions read one per line from a stream, each answered as soon as it
is read and its row flushed, so the command works interactively and as a process at the other
end of a pipe."""

from __future__ import annotations

import json
import sys
from typing import Callable, Sequence, TextIO

from ..api import LoadedModel
from ..data.datasets import DataError, read_text
from ..data.formats import text_format
from ..answering.evaluate import MAX_NEW_CHARS, Answer
from ..trust.evidence import CorpusIndex
from ..data.vocab import VocabError
from . import tables


NO_QUESTIONS = "no questions: pass them as arguments or one per line on stdin"


def answer_lines(model: LoadedModel, lines: TextIO, out: TextIO, index: CorpusIndex | None = None,
                 source: str = "<stdin>", given: Callable[[Sequence[Answer]], list[bool]] | None = None,
                 as_json: bool = False) -> int:
    """Answer each non-blank line as it is read, until end of input. A bad line is reported on
    stderr as ``source:line: problem`` and the rest are still answered; exit code 2 then. No
    question at all is a ValueError (the command line's one-line error). ``given``: whether
    each answer is given (ask --abstain, attnlab/trust/abstention.py); a withheld one is "I don't know".
    ``as_json``: each answer as one JSON line (``record``); else the table's header before the
    first answer, then one row per answer, padded to STREAM_WIDTHS (the widths of answers not yet
    read are unknown)."""
    answered = failed = 0
    columns = table_columns(index, text_format(model.config.qa_format).recalls, model.correction() is not None)
    for number, line in enumerate(iter(lines.readline, ""), 1):  # readline: no read-ahead
        if not line.strip():
            continue
        try:
            _text_only(line, source, number)
            question = index.as_written(line) if index is not None else line
            (answer,) = model.ask([question], source=source, first_line=number, strict=False, abstain=None)
        except (DataError, VocabError) as e:
            print(f"attnlab ask: error: {e}", file=sys.stderr, flush=True)
            failed += 1
            continue
        ok = given is None or given([answer])[0]
        if as_json:
            print(json.dumps(record(answer, index, ok), ensure_ascii=False), file=out, flush=True)
        else:
            widths = [STREAM_WIDTHS.get(c, 0) for c in columns]
            if not answered:
                print(tables.row_text(columns, widths), file=out)
            print(tables.row_text(cells(answer, index, ok, columns), widths), file=out, flush=True)
        answered += 1
    if not answered and not failed:
        raise ValueError(NO_QUESTIONS)
    return 2 if failed else 0


def _text_only(line: str, source: str, number: int) -> None:
    """Bytes that are not UTF-8 reach Python as lone surrogates ('\\udcf6'): say so, not that
    the character is missing from the vocabulary."""
    if any("\udc80" <= ch <= "\udcff" for ch in line):
        raise DataError(source, number, "not UTF-8 text (attnlab reads questions as UTF-8)")


# ---- the human output: labelled, aligned columns ---------------------------------------------
# Columns are two spaces apart at least; while streaming, each is padded to this width (a longer
# value pushes the rest of its row right; no answer is longer than MAX_NEW_CHARS).
STREAM_WIDTHS = {"question": 40, "answer": MAX_NEW_CHARS, "confidence": 10, "chance right": 12, "evidence": 44,
                 "recalled": 44}


def table_columns(index: CorpusIndex | None, recall: bool, chance: bool = False) -> list[str]:
    """The columns of ask's table: question, answer, confidence, its chance of being right (when
    the run stores a confidence correction), the corpus verdict (unless --evidence ''), what a
    recall model recalled, and a note (withheld or unfinished answers)."""
    return (["question", "answer", "confidence"] + (["chance right"] if chance else [])
            + (["evidence"] if index is not None else [])
            + (["recalled"] if recall else []) + ["note"])


def cells(answer: Answer, index: CorpusIndex | None, given: bool, columns: Sequence[str]) -> list[str]:
    """One answer's row: a withheld answer reads "I don't know", and its note says what it was;
    a question no relation matches reads "I can't parse this", and its note says what to ask."""
    if answer.problem:
        values = {"question": answer.question, "answer": "I can't parse this", "confidence": "", "chance right": "",
                  "evidence": "", "recalled": "", "note": answer.problem}
        return [values[c] for c in columns]
    notes = [] if given else [f"withheld: {answer.answer!r}"]
    if not answer.complete:
        notes.append("unfinished: no closing mark within the answer budget")
    values = {"question": answer.question, "answer": answer.answer if given else "I don't know",
              "confidence": f"{answer.confidence:.2f}",
              "chance right": "" if answer.chance_right is None else f"{answer.chance_right:.2f}",
              "evidence": index.find(answer.question, answer.answer).verdict if index is not None else "",
              "recalled": repr(answer.recalled), "note": "; ".join(notes)}
    return [values[c] for c in columns]


def table(answers: Sequence[Answer], index: CorpusIndex | None, given: Sequence[bool], recall: bool) -> str:
    """The answers to questions given as arguments: a header and one row each, aligned (the
    note column only when some answer has a note)."""
    columns = table_columns(index, recall, any(a.chance_right is not None for a in answers))
    rows = [cells(a, index, ok, columns) for a, ok in zip(answers, given)]
    if not any(r[-1] for r in rows):
        rows, columns = [r[:-1] for r in rows], columns[:-1]
    return tables.table(columns, rows)


def record(answer: Answer, index: CorpusIndex | None, given: bool) -> dict:
    """An answer for programs (ask --json; keys in docs/guides/no-surprises.md): ``answer`` is
    null when the abstention rule withholds it, ``model_answer`` is what the model said,
    ``chance_right`` its confidence through the run's stored correction (null without one)."""
    if answer.problem:
        return {"question": answer.question, "answer": None, "given": False, "model_answer": None,
                "confidence": 0.0, "chance_right": None, "complete": False, "evidence": None, "recalled": None,
                "quoted": None, "relation": None, "problem": answer.problem}
    return {"question": answer.question, "answer": answer.answer if given else None, "given": given,
            "relation": answer.relation, "problem": None,
            "model_answer": answer.answer, "confidence": answer.confidence, "chance_right": answer.chance_right,
            "complete": answer.complete,
            "evidence": None if index is None else index.find(answer.question, answer.answer).verdict,
            "recalled": answer.recalled, "quoted": answer.quoted}


def evidence_index(corpus: str | None, schema=None) -> CorpusIndex | None:
    """The corpus in which each answer is looked up (None: --evidence ''); ``schema``: the
    model's relations, which tell whom a question is about."""
    return CorpusIndex(read_text(corpus).split("\n"), schema) if corpus else None
