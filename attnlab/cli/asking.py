"""Answering typed questions (`attnlab ask`, attnlab/cli/answering.py): one line per answer
with its confidence, and questions read one per line from a stream, each answered as soon as
it is read and the answer flushed, so the command works interactively and as a process at the
other end of a pipe."""

from __future__ import annotations

import json
import sys
from typing import Callable, Sequence, TextIO

from ..api import LoadedModel
from ..data.datasets import DataError, read_text
from ..answering.evaluate import MAX_NEW_CHARS, Answer
from ..trust.evidence import CorpusIndex
from ..data.vocab import VocabError


NO_QUESTIONS = "no questions: pass them as arguments or one per line on stdin"


def answer_lines(model: LoadedModel, lines: TextIO, out: TextIO, index: CorpusIndex | None = None,
                 source: str = "<stdin>", given: Callable[[Sequence[Answer]], list[bool]] | None = None,
                 as_json: bool = False) -> int:
    """Answer each non-blank line as it is read, until end of input. A bad line is reported on
    stderr as ``source:line: problem`` and the rest are still answered; exit code 2 then. No
    question at all is a ValueError (the command line's one-line error). ``given``: whether
    each answer is given (ask --abstain, attnlab/trust/abstention.py); a withheld one is "I don't know".
    ``as_json``: each answer as one JSON line (``record``) instead of the tab-separated one."""
    answered = failed = 0
    for number, line in enumerate(iter(lines.readline, ""), 1):  # readline: no read-ahead
        if not line.strip():
            continue
        try:
            _text_only(line, source, number)
            (answer,) = model.ask([line], source=source, first_line=number)
        except (DataError, VocabError) as e:
            print(f"attnlab ask: error: {e}", file=sys.stderr, flush=True)
            failed += 1
            continue
        print(shown_line(answer, index, given is None or given([answer])[0], as_json), file=out, flush=True)
        answered += 1
    if not answered and not failed:
        raise ValueError(NO_QUESTIONS)
    return 2 if failed else 0


def _text_only(line: str, source: str, number: int) -> None:
    """Bytes that are not UTF-8 reach Python as lone surrogates ('\\udcf6'): say so, not that
    the character is missing from the vocabulary."""
    if any("\udc80" <= ch <= "\udcff" for ch in line):
        raise DataError(source, number, "not UTF-8 text (attnlab reads questions as UTF-8)")


def describe(answer: Answer, index: CorpusIndex | None = None) -> str:
    """One tab-separated line: question, answer, confidence, [evidence verdict], [recalled]."""
    note = "" if answer.complete else f" (unfinished: no closing mark within {MAX_NEW_CHARS} characters)"
    line = f"{answer.question}\t{answer.answer}\tconfidence {answer.confidence:.2f}{note}"
    if index is not None:
        line += f"\t{index.find(answer.question, answer.answer).verdict}"
    if answer.recalled is not None:  # recall format: what the model wrote of the person first
        line += f"\trecalled: {answer.recalled!r}"
    return line


def shown_line(answer: Answer, index: CorpusIndex | None, given: bool, as_json: bool = False) -> str:
    """The output line of one answer: tab-separated for people, or one JSON object."""
    if as_json:
        return json.dumps(record(answer, index, given), ensure_ascii=False)
    return describe(answer, index) if given else withheld(answer)


def record(answer: Answer, index: CorpusIndex | None, given: bool) -> dict:
    """An answer for programs (ask --json; keys in docs/guides/no-surprises.md): ``answer`` is
    null when the abstention rule withholds it, ``model_answer`` is what the model said."""
    return {"question": answer.question, "answer": answer.answer if given else None, "given": given,
            "model_answer": answer.answer, "confidence": answer.confidence, "complete": answer.complete,
            "evidence": None if index is None else index.find(answer.question, answer.answer).verdict,
            "recalled": answer.recalled}


def withheld(answer: Answer) -> str:
    """The line of an answer the abstention rule withholds: "I don't know", and what it was."""
    return f"{answer.question}\tI don't know\t(withheld: {answer.answer!r}, confidence {answer.confidence:.2f})"


def evidence_index(corpus: str | None) -> CorpusIndex | None:
    """The corpus in which each answer is looked up (None: --evidence '')."""
    return CorpusIndex(read_text(corpus).split("\n")) if corpus else None
