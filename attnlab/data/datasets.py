"""Text files -> examples: the QA format (SPEC 2) and span corruption (SPEC 3).

Two implementations of span corruption live here on purpose:

- ``span_corruption_string`` / ``SpanCorruptionDataset``: the per-example reference, a direct
  transcription of SPEC 3 that is easy to read and to check;
- ``corrupt_batch``: the training path, the same distribution built for a whole batch with
  tensor ops on whatever device holds the documents. The tests compare the two statistically.

Difference from the course: its ``NameDataset`` dropped non-ASCII characters from QA lines. Our
vocabulary covers every character of the corpus, so we keep them ("Zürich" can be answered);
a character outside the vocabulary is a ``VocabError`` naming file and line (SPEC 2).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .vocab import MASK_CHAR, MASK_ID, PAD_CHAR, PAD_ID, Vocab, VocabError

_BOM = "\ufeff"


class DataError(ValueError):
    """A problem in an input file, reported as one line: ``path:line: problem``."""

    def __init__(self, source: str, line: int | None, problem: str):
        self.source = source
        self.line = line
        self.problem = problem
        where = source if line is None else f"{source}:{line}"
        super().__init__(f"{where}: {problem}")

    def __reduce__(self):  # keep the exception picklable (DataLoader workers)
        return (type(self), (self.source, self.line, self.problem))


# --------------------------------------------------------------------------- reading text


def _normalise(text: str) -> str:
    """Drop a leading BOM and turn CRLF / lone CR into LF."""
    if text.startswith(_BOM):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_text(path: str | os.PathLike[str]) -> str:
    """Read a UTF-8 file (BOM stripped, newlines normalised to LF).

    Bytes that are not UTF-8 give a DataError naming the file and line, not a
    UnicodeDecodeError.
    """
    raw = open(path, "rb").read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise DataError(
            os.fspath(path), line, f"not valid UTF-8 (byte 0x{raw[e.start]:02X})"
        ) from None
    return _normalise(text)


def documents(text: str) -> list[str]:
    """The corpus documents: one per line, empty lines dropped (the course's ``split('\\n')``)."""
    return [line for line in text.split("\n") if line]


def read_corpus(path: str | os.PathLike[str]) -> str:
    """A corpus file's text, refused (DataError naming the file, and the line) when it has no
    text or holds a character reserved for PAD or MASK."""
    text = read_text(path)
    if not any(line.strip() for line in text.split("\n")):
        raise DataError(os.fspath(path), None, "the corpus is empty (no line with text)")
    for reserved in (PAD_CHAR, MASK_CHAR):
        if reserved in text:
            line = text.count("\n", 0, text.index(reserved)) + 1
            raise DataError(os.fspath(path), line, f"contains the reserved character {reserved!r} "
                            f"(U+{ord(reserved):04X}), which cannot be in a corpus")
    return text


# ----------------------------------------------------------------------------- QA (SPEC 2)


@dataclass(frozen=True)
class QAExample:
    question: str
    answer: str | None  # None for an unlabelled file (test inputs)
    source: str  # file the example came from, for error messages
    line: int  # 1-based line number in that file


def parse_qa(
    text: str, source: str = "<input>", *, labelled: bool | None = None
) -> list[QAExample]:
    """Parse ``question<TAB>answer`` lines (or bare questions for an unlabelled file).

    Blank and whitespace-only lines are skipped; a BOM, CRLF and a trailing newline are fine.
    With ``labelled=None`` the file is unlabelled iff no non-blank line contains a tab, and a
    ``question<TAB>`` line with nothing after the tab is an unlabelled question (a fact set's
    test file); otherwise every line must be ``question<TAB>answer``. Question and answer are kept exactly,
    only surrounding whitespace is stripped.
    """
    lines = [(n, ln) for n, ln in enumerate(_normalise(text).split("\n"), 1) if ln.strip()]
    tabbed = next((n for n, ln in lines if "\t" in ln), None)
    blank_answers = labelled is None  # a file read as it comes: ``question<TAB>`` is unlabelled
    if labelled is None:
        labelled = tabbed is not None
    elif not labelled and tabbed is not None:
        raise DataError(source, tabbed, "found a tab in a file read as unlabelled (questions only)")

    examples = []
    for n, ln in lines:
        for reserved in (PAD_CHAR, MASK_CHAR):
            if reserved in ln:
                problem = f"contains the reserved character {reserved!r} (U+{ord(reserved):04X})"
                raise DataError(source, n, problem)
        if not labelled:
            examples.append(QAExample(ln.strip(), None, source, n))
            continue
        tabs = ln.count("\t")
        if tabs != 1:
            found = "no tab" if tabs == 0 else f"{tabs} tabs"
            hint = ""
            if tabs == 0 and tabbed is not None:
                hint = f" (line {tabbed} has one, so the file is labelled)"
            raise DataError(source, n, f"expected 'question<TAB>answer', found {found}{hint}")
        question, answer = (part.strip() for part in ln.split("\t"))
        if not question:
            raise DataError(source, n, "empty question")
        if not answer and not blank_answers:
            raise DataError(source, n, "empty answer")
        examples.append(QAExample(question, answer or None, source, n))
    return examples


def read_qa(path: str | os.PathLike[str], *, labelled: bool | None = None) -> list[QAExample]:
    """``parse_qa`` of a file, with errors naming the real path."""
    return parse_qa(read_text(path), os.fspath(path), labelled=labelled)


def read_questions(path: str | os.PathLike[str], *, labelled: bool | None = None) -> list[QAExample]:
    """``read_qa``, refusing a file without a single question (DataError naming it)."""
    examples = read_qa(path, labelled=labelled)
    if not examples:
        raise DataError(os.fspath(path), None, "no questions (the file has no line with text)")
    return examples


def qa_string(question: str, answer: str, block_size: int) -> str:
    """``question⁇place⁇`` padded with PAD to ``block_size`` (SPEC 2)."""
    s = question + MASK_CHAR + answer + MASK_CHAR
    if len(s) > block_size:
        raise ValueError(
            f"QA string is {len(s)} characters (question {len(question)}, place {len(answer)}, "
            f"2 sentinels), longer than block_size {block_size}"
        )
    return s + PAD_CHAR * (block_size - len(s))


def qa_tensors(example: QAExample, vocab: Vocab, block_size: int) -> tuple[Tensor, Tensor]:
    """Input and target ids of one QA example, each (block_size-1,) long.

    The target is the string shifted left by one with every position that would predict a
    question character set to PAD, so the loss only trains ``⁇place⁇`` (SPEC 2).
    """
    if example.answer is None:
        raise DataError(example.source, example.line, "no place to train on (unlabelled line)")
    try:
        s = qa_string(example.question, example.answer, block_size)
    except ValueError as e:
        raise DataError(example.source, example.line, str(e)) from None
    ids = vocab.encode_tensor(s, source=example.source, line=example.line)  # (block_size,)
    x = ids[:-1]
    y = ids[1:].clone()
    y[: len(example.question) - 1] = PAD_ID
    return x, y


def _vocab_of(pretraining_dataset: Any) -> Vocab:
    """The vocabulary of a pretraining dataset (ours, or a course-style one with ``itos``)."""
    vocab = getattr(pretraining_dataset, "vocab", None)
    if isinstance(vocab, Vocab):
        return vocab
    itos = pretraining_dataset.itos  # the course stored a dict {id: char}
    return Vocab([itos[i] for i in range(len(itos))])


class NameDataset(torch.utils.data.Dataset):
    """Finetuning examples in the QA format (SPEC 2), the course's ``NameDataset``.

    ``text`` is the TSV content; the vocabulary and block size come from the pretraining
    dataset, since the pretraining corpus always defines the vocabulary. All examples are
    encoded up front so errors surface at construction and batching is a slice.
    """

    PAD_CHAR = PAD_CHAR
    MASK_CHAR = MASK_CHAR

    def __init__(self, text: str, pretraining_dataset: Any, *, source: str = "<text>"):
        self.vocab = _vocab_of(pretraining_dataset)
        self.stoi = self.vocab.stoi
        self.itos = self.vocab.itos
        self.vocab_size = len(self.vocab)
        self.block_size: int = pretraining_dataset.block_size
        self.examples = parse_qa(text, source, labelled=True)
        n, t = len(self.examples), self.block_size - 1
        self._x = torch.empty(n, t, dtype=torch.long)  # (N, block_size-1)
        self._y = torch.empty(n, t, dtype=torch.long)  # (N, block_size-1)
        for i, example in enumerate(self.examples):
            self._x[i], self._y[i] = qa_tensors(example, self.vocab, self.block_size)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], pretraining_dataset: Any) -> NameDataset:
        return cls(read_text(path), pretraining_dataset, source=os.fspath(path))

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self._x[i], self._y[i]

    def tensors(self) -> tuple[Tensor, Tensor]:
        """All inputs and targets stacked, each (N, block_size-1)."""
        return self._x, self._y


# ------------------------------------------------------------------ span corruption (SPEC 3)


def _check_block_size(block_size: int) -> None:
    # SPEC 3 draws L from [4, int(3B/4)], which is non-empty only from B = 6.
    if block_size < 6:
        raise ValueError(f"span corruption needs block_size >= 6, got {block_size}")


def span_corruption_string(
    doc: str, block_size: int, rng: random.Random
) -> tuple[str, dict[str, int]]:
    """One span-corrupted training string of exactly ``block_size`` characters (SPEC 3).

    Returns the string and ``{"trunc_len", "mask_len", "mask_start"}``. The rearranged text has
    ``trunc_len + 3`` characters, at most ``int(3B/4) + 3 <= B`` for ``B >= 12``; for smaller
    block sizes it can be longer and is cut to ``B`` (losing trailing sentinels/masked text).
    An empty document gives ``mask_len = 0`` (``documents`` never yields one).
    """
    _check_block_size(block_size)
    # 1. truncate to L ~ U{4..int(3B/4)}; a shorter document stays whole.
    trunc = doc[: rng.randint(4, int(3 * block_size / 4))]
    n = len(trunc)
    # 2. masked length ~ U{1..max(1, n//2 - 1)}: mean (n//2)/2 ~ n/4, and it varies.
    m = min(rng.randint(1, max(1, n // 2 - 1)), n)
    start = rng.randint(0, n - m)
    prefix, masked, suffix = trunc[:start], trunc[start : start + m], trunc[start + m :]
    # 3. prefix ⁇ suffix ⁇ masked ⁇, padded (or, for tiny B, cut) to exactly B.
    s = prefix + MASK_CHAR + suffix + MASK_CHAR + masked + MASK_CHAR
    s = s[:block_size] + PAD_CHAR * (block_size - len(s))
    return s, {"trunc_len": n, "mask_len": m, "mask_start": start}


class SpanCorruptionDataset(torch.utils.data.Dataset):
    """Pretraining examples, one per corpus line (the course's ``CharCorruptionDataset``).

    Each access draws a fresh corruption from ``self.rng`` (``random.Random(seed)``). Inside a
    DataLoader worker the copy of the dataset reseeds itself once from the worker's seed, so
    workers do not repeat each other. For speed, train with ``doc_tensor`` + ``corrupt_batch``.
    """

    PAD_CHAR = PAD_CHAR
    MASK_CHAR = MASK_CHAR

    def __init__(
        self,
        text: str,
        block_size: int,
        *,
        vocab: Vocab | None = None,
        seed: int | None = None,
        source: str = "<text>",
    ):
        _check_block_size(block_size)
        self.vocab = vocab if vocab is not None else Vocab.from_text(text)
        self.stoi = self.vocab.stoi
        self.itos = self.vocab.itos
        self.vocab_size = len(self.vocab)
        self.block_size = block_size
        self.documents = documents(text)
        # Check every character now, naming the line, rather than mid-training.
        unknown = set(text) - self.stoi.keys()
        if unknown:
            pos = min(text.index(ch) for ch in unknown)
            raise VocabError(text[pos], source, text.count("\n", 0, pos) + 1)
        self.rng = random.Random(seed)
        self._worker_id: int | None = None
        self._doc_tensor: tuple[Tensor, Tensor] | None = None

    def __len__(self) -> int:
        return len(self.documents)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        worker = torch.utils.data.get_worker_info()
        if worker is not None and self._worker_id != worker.id:
            self._worker_id = worker.id
            self.rng = random.Random(worker.seed)
        s, _ = span_corruption_string(self.documents[i], self.block_size, self.rng)
        ids = self.vocab.encode_tensor(s)  # (block_size,)
        return ids[:-1], ids[1:]

    def doc_tensor(self) -> tuple[Tensor, Tensor]:
        """Documents as ids (n_docs, max_doc_len) padded with PAD_ID, and lengths (n_docs,).

        Cached; move both to the training device once and feed them to ``corrupt_batch``.
        """
        if self._doc_tensor is None:
            rows = [self.vocab.encode_tensor(d) for d in self.documents]
            lengths = torch.tensor([len(d) for d in self.documents], dtype=torch.long)
            docs = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=PAD_ID)
            self._doc_tensor = (docs, lengths)
        return self._doc_tensor


CharCorruptionDataset = SpanCorruptionDataset


def _uniform_int(low: Tensor, high: Tensor, generator: torch.Generator | None) -> Tensor:
    """Independent uniform integers in ``[low, high]`` (inclusive, elementwise, high >= low).

    A 62-bit draw reduced modulo the range: the modulo bias is below 2**-50, and unlike
    ``floor(rand * k)`` it has no float rounding and works on every device.
    """
    r = torch.randint(0, 2**62, low.shape, generator=generator, device=low.device)
    return low + r % (high - low + 1)


def corrupt_batch(
    docs: Tensor,
    lengths: Tensor,
    index: Tensor,
    block_size: int,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """A batch of span-corrupted examples with tensor ops only (the fast training path).

    Same distribution as ``span_corruption_string`` (SPEC 3). ``docs``/``lengths`` come from
    ``SpanCorruptionDataset.doc_tensor()`` (moved to any device), ``index`` (B,) picks
    documents, and ``generator`` (if given) must live on the same device. Returns ``x, y``,
    each (B, block_size-1).
    """
    _check_block_size(block_size)
    device = docs.device
    index = index.to(device)
    doc_len = lengths.to(device)[index]  # (B,)
    ones = torch.ones_like(doc_len)
    # 1. truncation length, then the actual truncated length n.
    L = _uniform_int(4 * ones, (3 * block_size // 4) * ones, generator)
    n = torch.minimum(L, doc_len)
    # 2. masked length and start; min with n only matters for empty documents.
    m = torch.minimum(_uniform_int(ones, torch.clamp(n // 2 - 1, min=1), generator), n)
    start = _uniform_int(torch.zeros_like(n), n - m, generator)

    # 3. for each output position p, which segment it is in and which document char it copies.
    #    Layout: [0,start) prefix | start ⁇ | suffix | n-m+1 ⁇ | masked | n+2 ⁇ | PAD
    p = torch.arange(block_size, device=device).unsqueeze(0)  # (1, T)
    start, m, n = start.unsqueeze(1), m.unsqueeze(1), n.unsqueeze(1)  # (B, 1)
    mask2 = n - m + 1  # position of the second ⁇
    mask3 = n + 2  # position of the third ⁇
    src = torch.where(p < start, p, torch.where(p < mask2, p + m - 1, p - mask2 - 1 + start))
    src = src.clamp(0, docs.shape[1] - 1)  # (B, T); out-of-segment positions are overwritten
    chars = docs[index].gather(1, src)  # (B, T)
    is_mask = (p == start) | (p == mask2) | (p == mask3)
    s = torch.where(is_mask, MASK_ID, torch.where(p > mask3, PAD_ID, chars))  # (B, T)
    return s[:, :-1], s[:, 1:]


def trim_batch(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """Drop trailing columns whose target is PAD in every row (keeps at least one column).

    Exact for a causal model: PAD targets add nothing to the loss and later positions cannot
    change earlier outputs. Costs one device sync (the new width is data-dependent).
    """
    keep = (y != PAD_ID).any(dim=0).nonzero()  # (k, 1) columns with a real target
    width = int(keep[-1, 0]) + 1 if len(keep) else 1
    return x[:, :width], y[:, :width]


def read_texts(path: str | Path) -> list[str]:
    """Non-blank lines of a file; for a question<TAB>answer file, the question column."""
    return [ln.split("\t")[0].strip() for ln in read_text(path).split("\n") if ln.strip()]

