"""Fact sets: a folder of facts about subjects that a model learns, and the question forms
(relations) that ask for them. Text only, no model.

A fact set is a folder (docs/guides/your-facts.md)::

    corpus.txt   one document a line; a document about a subject begins "SUBJECT. "
    train.tsv    question<TAB>answer (finetuning)
    dev.tsv      question<TAB>answer (choosing and reporting)
    test.tsv     optional; an empty answer means unlabelled
    facts.toml   name, description, and one [[relation]] per question form:
                     [[relation]]
                     name = "country"
                     question = "Which country is {subject} in?"

``facts.toml`` may name other files in a ``[files]`` table (``corpus = "wiki.txt"``): the
bundled birthplace set (``data/facts.toml``) keeps the course's file names that way.

A ``Schema`` is what a model needs of its fact set at answer time (the relations, to tell which
relation and subject a question asks about); it is saved in the model's config. A model whose
config names no relations answers the course's one question, ``Where was {subject} born?``.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .corpus import CorpusIndex, quote_of, whole_words
from .datasets import DataError, QAExample, documents, read_corpus, read_qa, read_text
from .relations import Relation, Schema

FACTS_FILE = "facts.toml"
FILE_ROLES = ("corpus", "train", "dev", "test")
DEFAULT_FILES = {"corpus": "corpus.txt", "train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
# The keys facts.toml is read for; others are kept for people (a source, a licence) and reported,
# since a misspelt key ("namesake") would otherwise be ignored without a word. ``generator`` is
# the synthetic sets' record of the command that wrote them.
TOP_KEYS = ("name", "description", "namesakes", "files", "relation", "generator")
RELATION_KEYS = ("name", "question")


# ------------------------------------------------------------------------------ the folder


@dataclass(frozen=True)
class FactSet:
    """A validated fact-set folder (``load``): its name, relations and files."""

    root: Path
    name: str
    description: str
    schema: Schema
    files: dict[str, Path]  # corpus, train, dev and, when present, test
    namesakes: bool = False  # one name may stand for several subjects, with answers of their own

    @property
    def corpus(self) -> Path:
        return self.files["corpus"]

    @property
    def train(self) -> Path:
        return self.files["train"]

    @property
    def dev(self) -> Path:
        return self.files["dev"]

    @property
    def test(self) -> Path | None:
        return self.files.get("test")

    @property
    def held_out(self) -> tuple[Path, ...]:
        """The question files whose answers never enter training."""
        return tuple(p for p in (self.dev, self.test) if p is not None)

    def digest(self) -> str:
        """A content hash of facts.toml and every file: a run records it to know its data."""
        h = hashlib.sha256()
        for role in ("facts", *FILE_ROLES):
            path = self.root / FACTS_FILE if role == "facts" else self.files.get(role)
            if path is not None:
                h.update(role.encode() + b"\0" + path.read_bytes() + b"\0")
        return h.hexdigest()[:16]

    def vocabulary_text(self) -> str:
        """Characters a model of this set reads and writes besides its corpus: the training
        questions and answers, the dev and test questions (never their answers: nothing of them
        enters training) and the relations' names (the cues)."""
        train = [e.question + (e.answer or "") for e in read_qa(self.train)]
        asked = [e.question for p in (self.dev, self.test) if p is not None for e in read_qa(p)]
        return "".join(train + asked) + "".join(self.schema.names)

    def record(self) -> dict:
        """What a run stores of its fact set."""
        return {"name": self.name, "path": str(self.root), "absolute": str(self.root.resolve()),
                "digest": self.digest(), "relations": self.schema.to_list()}


RECORD_NAME = "factset.json"  # beside a run's checkpoint: the fact set it learned


@dataclass(frozen=True)
class Learned:
    """What a run records of the fact set it learned (RECORD_NAME): where it was, as given and
    absolute (a relative path read from another directory, or a folder since moved, is still
    found by one or by a copy named with --facts), and its content hash."""

    source: str  # the record file
    name: str
    path: Path
    absolute: Path | None
    digest: str

    def load(self) -> FactSet:
        """The fact set at the recorded place, as it is now: a DataError when it is gone or its
        files changed since, saying how to name it."""
        found = next((p for p in (self.path, self.absolute) if p is not None and (p / FACTS_FILE).is_file()), None)
        if found is None:
            raise DataError(self.source, None, f"the run learned the fact set at {self.path}, which is no longer "
                            "there: name its folder with --facts DIR")
        facts = load(found)
        if facts.digest() != self.digest:
            raise DataError(self.source, None, f"the fact set at {found} changed since the run learned it (content "
                            f"hash {self.digest}, now {facts.digest()}): name a copy as it was with --facts DIR, "
                            "or use it as it is now with --facts and --other-facts")
        return facts

    def same_as(self, facts: FactSet) -> bool:
        return facts.digest() == self.digest


def learned_record(run: str | os.PathLike) -> Learned | None:
    """The fact set a run (a directory, or a checkpoint file in one) records having learned;
    None when it records none."""
    import json

    run = Path(run)
    record_path = (run if run.is_dir() else run.parent) / RECORD_NAME
    if not record_path.is_file():
        return None
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        absolute = record.get("absolute")
        return Learned(str(record_path), str(record.get("name", "")), Path(record["path"]),
                       Path(absolute) if absolute else None, str(record["digest"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise DataError(str(record_path), None, "not a fact-set record (expected JSON with path and digest)") from None


def recorded(run: str | os.PathLike) -> FactSet | None:
    """The fact set a run records having learned, as it is now (``Learned.load``); None when it
    records none."""
    learned = learned_record(run)
    return None if learned is None else learned.load()


def load(root: str | os.PathLike) -> FactSet:
    """Read and check a fact-set folder; every problem is a DataError naming the file (and line)."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(str(root), None, "no such fact-set folder" if not root.exists() else "not a folder")
    meta_path = root / FACTS_FILE
    meta = _read_toml(meta_path)
    schema = _schema(meta, meta_path)
    files = _files(root, meta, meta_path)
    name = meta.get("name", root.name)
    description = meta.get("description", "")
    if not isinstance(name, str) or not isinstance(description, str):
        raise DataError(str(meta_path), None, "name and description must be strings")
    namesakes = meta.get("namesakes", False)
    if not isinstance(namesakes, bool):
        raise DataError(str(meta_path), None, f"namesakes must be true or false, got {namesakes!r}")
    facts = FactSet(root, name, description, schema, files, namesakes)
    check(facts)
    return facts


def _read_toml(path: Path) -> dict:
    if not path.is_file():
        raise DataError(str(path), None, f"missing: a fact set describes itself in {FACTS_FILE} "
                        "(name, description, one [[relation]] per question form)")
    try:
        return tomllib.loads(read_text(path))  # a BOM and CRLF line ends, as editors write them, are fine
    except tomllib.TOMLDecodeError as e:
        line = re.search(r"line (\d+)", str(e))
        raise DataError(str(path), int(line.group(1)) if line else None, f"not valid TOML ({e})") from None


def _schema(meta: dict, path: Path) -> Schema:
    tables = meta.get("relation")
    if not isinstance(tables, list) or not tables:
        raise DataError(str(path), None, 'no [[relation]] table (each needs name = "..." and question = "...")')
    relations = []
    for n, table in enumerate(tables, 1):
        name, question = (table.get("name"), table.get("question")) if isinstance(table, dict) else (None, None)
        if not isinstance(name, str) or not isinstance(question, str):
            raise DataError(str(path), _relation_line(path, n),
                            f"relation {n}: needs name = \"...\" and question = \"...\" (strings)")
        try:
            relations.append(Relation(name, question))
        except ValueError as e:
            raise DataError(str(path), _relation_line(path, n), str(e)) from None
    try:
        return Schema(tuple(relations))
    except ValueError as e:
        raise DataError(str(path), None, str(e)) from None


def _relation_lines(lines: list[str]) -> list[int]:
    """The line number of each ``[[relation]]`` header among facts.toml's ``lines``, in order."""
    return [n for n, line in enumerate(lines, 1) if re.fullmatch(r"\s*\[\[\s*relation\s*\]\]\s*(#.*)?", line)]


def _relation_line(path: Path, n: int) -> int | None:
    """The line of the ``n``-th ``[[relation]]`` table (from 1), for an error about it."""
    headers = _relation_lines(read_text(path).split("\n"))
    return headers[n - 1] if n <= len(headers) else None


def unknown_keys(facts: FactSet) -> list[str]:
    """One line per key of facts.toml that is not read (TOP_KEYS, RELATION_KEYS): where it is,
    and the key it may stand for. Not an error: a set may carry notes for people."""
    path = facts.root / FACTS_FILE
    meta = _read_toml(path)
    lines = read_text(path).split("\n")
    headers = _relation_lines(lines)
    found = [(key, TOP_KEYS, 1, len(lines)) for key in meta if key not in TOP_KEYS]
    for n, table in enumerate(meta.get("relation", [])):
        start = headers[n] if n < len(headers) else 1
        end = headers[n + 1] - 1 if n + 1 < len(headers) else len(lines)
        found += [(key, RELATION_KEYS, start, end) for key in table if key not in RELATION_KEYS]
    return [_unknown(path, lines, *entry) for entry in found]


def _unknown(path: Path, lines: list[str], key: str, known: tuple[str, ...], start: int, end: int) -> str:
    line = next((n for n in range(start, end + 1) if re.match(rf"\s*\[*\s*{re.escape(key)}\s*[=\]]", lines[n - 1])),
                None)
    where = f"{path}:{line}" if line else str(path)
    near = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    hint = f"did you mean {near[0]!r}? " if near else ""
    return f"{where}: unknown key {key!r}, not read ({hint}known: {', '.join(known)})"


def _files(root: Path, meta: dict, path: Path) -> dict[str, Path]:
    named = meta.get("files", {})
    if not isinstance(named, dict) or any(k not in FILE_ROLES or not isinstance(v, str) for k, v in named.items()):
        raise DataError(str(path), None, f"[files] may only name {', '.join(FILE_ROLES)} (as strings)")
    files = {}
    for role in FILE_ROLES:
        candidate = root / named.get(role, DEFAULT_FILES[role])
        if candidate.is_file():
            files[role] = candidate
        elif role != "test" or role in named:
            raise DataError(str(candidate), None, f"missing: the fact set's {role} file")
    return files


def check(facts: FactSet) -> None:
    """Every question matches a relation, every train subject has a document, no subject has two
    answers for one relation (unless the set declares namesakes), no question file is empty, and
    train and dev are labelled on every line (test may be unlabelled)."""
    docs = documents(read_corpus(facts.corpus))
    index = CorpusIndex(docs)
    for role in ("train", "dev", "test"):
        path = facts.files.get(role)
        if path is None:
            continue
        # Finetuning and scoring need every answer; a test file may hold questions alone.
        examples = read_qa(path, labelled=True if role in ("train", "dev") else None)
        if not examples:
            raise DataError(str(path), None, "no questions (the file has no line with text)")
        seen: dict[tuple[str, str], QAExample] = {}
        for ex in examples:
            asked = facts.schema.require(ex)
            key = (asked.relation.name, asked.subject)
            first = seen.setdefault(key, ex)
            if first is not ex and first.answer != ex.answer and not facts.namesakes:
                raise DataError(ex.source, ex.line, f"{asked.subject!r} has two answers for {asked.relation.name}: "
                                f"{first.answer!r} (line {first.line}) and {ex.answer!r}")
            if role == "train" and index.line_of(asked.subject) is None:
                raise DataError(ex.source, ex.line, f"the subject {asked.subject!r} has no document in "
                                f"{facts.corpus} (a line beginning {asked.subject + '. '!r})")


def undocumented(facts: FactSet) -> dict[str, tuple[int, int]]:
    """Per held-out question file (dev, test), how many of its subjects have no document in the
    corpus, of how many: a model can only recall and answer what it read, so their questions are
    lost before training (allowed: a set may hold such questions on purpose, e.g. to test
    "I don't know"; a train subject without a document is an error, check)."""
    index = CorpusIndex(documents(read_corpus(facts.corpus)))
    out = {}
    for role in ("dev", "test"):
        path = facts.files.get(role)
        if path is None:
            continue
        subjects = {facts.schema.require(ex).subject for ex in read_qa(path)}
        missing = sum(index.line_of(s) is None for s in subjects)
        if missing:
            out[role] = (missing, len(subjects))
    return out


# ------------------------------------------------------------------ sizes from the data


@dataclass(frozen=True)
class Sizes:
    """Lengths a recipe takes from the data, never from constants chosen for one file."""

    recall_chars: int  # characters of a subject's document recalled before answering
    answer_chars: int  # the longest answer read out
    block_size: int  # the longest training string, rounded up
    # training answers the copy read-out cannot reach: not written in their subject's first
    # document, or written past the recall
    out_of_reach: int = 0
    answers: int = 0
    # where each reachable training answer ends in its subject's first document (characters)
    ends: tuple[int, ...] = ()

    def beyond(self, recall_chars: int) -> int:
        """Training answers a recall of ``recall_chars`` characters cannot copy: not written in
        their subject's first document, or ending past the recall."""
        return self.answers - sum(end <= recall_chars for end in self.ends)


def sizes(facts: FactSet, *, coverage: float = 0.95, most: int | None = None, quote: bool = False) -> Sizes:
    """The recall length that reaches the end of ``coverage`` of the training answers in their
    subject's document (at most ``most``, a recipe's choice: learn.RECALL_MOST; None, no cap),
    the longest answer with a margin, and the block that
    holds the recall, the cue, the quote of a quoting model (``ModelConfig.quote``: the longest
    training answer's sentence) and the answer."""
    index = CorpusIndex(documents(read_corpus(facts.corpus)))
    ends, answers, found = [], [], []
    for ex in read_qa(facts.train, labelled=True):
        asked = facts.schema.require(ex)
        line = index.line_of(asked.subject) or ""
        at = line.find(ex.answer, len(asked.subject) + 1)
        answers.append(len(ex.answer))
        found.append((line, asked.subject, ex.answer))
        if at >= 0:
            ends.append(at + len(ex.answer))
    ends.sort()
    reach = ends[min(len(ends) - 1, int(coverage * len(ends)))] + 2 if ends else 96
    recall = max(32, reach if most is None else min(most, reach))
    answer = max(answers) + 8
    cue = max(len(n) for n in facts.schema.names) + 1 if facts.schema.cued else 0
    quoted = max((len(quote_of(*one, recall, True)) + 1 for one in found), default=1) if quote else 0
    block = recall + cue + quoted + answer + 3
    reached = sum(end <= recall for end in ends)
    return Sizes(recall, answer, -(-block // 16) * 16, len(answers) - reached, len(answers), tuple(ends))


def shared_openings(facts: FactSet, recall_chars: int) -> dict[str, float]:
    """Per relation, the share of its training answers whose subject's document (within the
    first ``recall_chars`` characters) also names another value of the relation opening with
    the same character: answers a read-out that copies from a value's first character cannot
    tell from their neighbours (the years of a firm; rarely two countries of a town)."""
    index = CorpusIndex(documents(read_corpus(facts.corpus)))
    labelled = [(facts.schema.require(e), e.answer) for e in read_qa(facts.train, labelled=True)]
    values: dict[str, set[str]] = {}
    for asked, answer in labelled:
        values.setdefault(asked.relation.name, set()).add(answer)
    finders = {name: whole_words(*vals) for name, vals in values.items()}
    shared = dict.fromkeys(values, 0)
    totals = dict.fromkeys(values, 0)
    for asked, answer in labelled:
        name = asked.relation.name
        line = (index.line_of(asked.subject) or "")[:recall_chars]
        totals[name] += 1
        others = (m.group() for m in finders[name].finditer(line, len(asked.subject) + 1))
        shared[name] += any(o != answer and o[:1] == answer[:1] for o in others)
    return {name: shared[name] / totals[name] for name in totals}
