"""The answer formats' training strings (``ModelConfig.qa_format``): how a corpus line and a
question-answer example are written for training, one object per format, looked up by the
config's name (which stays the checkpoint and command-line value).

- ``direct`` (SPEC 2): ``question⁇place⁇``; corpus lines as they are.
- ``recall``: the person's corpus line cut at ``recall_chars``, ``⁇``, and for training-file
  people their place and ``⁇`` (docs/guides/knowledge.md explains why).

How a model answers in each format (decoding, what it read before its answer) is added on top
of these in ``attnlab/answering/formats.py``.
"""

from __future__ import annotations

from .corpus import CorpusIndex, quote_of, recall_string
from .datasets import DataError, QAExample
from .relations import COURSE, Schema
from .vocab import MASK_CHAR


class DirectText:
    """The question, its closing mark, the place and a closing mark (SPEC 2)."""

    name = "direct"
    recalls = False  # the model answers at once, from the question

    def corpus_text(self, line: str, recall_chars: int) -> str:
        return line

    def example_text(self, ex: QAExample, recall_chars: int, index: CorpusIndex | None,
                     read_out_only: bool = False, schema: Schema = COURSE, quote: bool = False) -> tuple[str, int]:
        """The training string of ``ex`` and how many of its leading targets are unscored:
        those that predict question characters (SPEC 2)."""
        return ex.question + MASK_CHAR + ex.answer + MASK_CHAR, len(ex.question) - 1

    def training_texts(self, docs: list[str], trained: list[QAExample], recall_chars: int,
                       schema: Schema = COURSE, quote: bool = False) -> list[str]:
        """Corpus lines and the training questions (``trained``, labelled) as trained on."""
        return docs + [self.example_text(ex, recall_chars, None)[0] for ex in trained]


class RecallText:
    """The person's corpus line cut at ``recall_chars``, ``⁇``, then the place and ``⁇``."""

    name = "recall"
    recalls = True  # the model first writes its person's corpus line: examples are built from it

    def corpus_text(self, line: str, recall_chars: int) -> str:
        return recall_string(line, recall_chars)

    def example_text(self, ex: QAExample, recall_chars: int, index: CorpusIndex | None,
                     read_out_only: bool = False, schema: Schema = COURSE, quote: bool = False) -> tuple[str, int]:
        """Every character scored; with ``read_out_only`` only the place and its closing mark
        (the line is given, as a recall would give it: the example teaches reading the place
        out of it, not the line). In a fact set of several relations the relation's name
        comes between the recalled line and the answer (``schema.cue``); with ``quote`` the
        sentence of the line that states the place comes next (``quote_of``), scored with it."""
        asked = schema.require(ex)
        line = index.line_of(asked.subject) if index is not None else None
        if line is None:
            raise DataError(ex.source, ex.line, f"no corpus line opens with {asked.subject + '.'!r}")
        cue = schema.cue(asked.relation)
        text = recall_string(line, recall_chars, ex.answer, cue,
                             quote_of(line, asked.subject, ex.answer, recall_chars, quote))
        return text, len(line[:recall_chars]) + (len(cue) + 1 if cue else 0) if read_out_only else 0

    def training_texts(self, docs: list[str], trained: list[QAExample], recall_chars: int,
                       schema: Schema = COURSE, quote: bool = False) -> list[str]:
        """Each corpus line as a recall string. With one relation, a line whose subject a
        training question (``trained``) asks about ends with its answer, as finetuned; with
        several, the line stays plain and each training question adds its line's recall string
        with the relation's cue and the answer."""
        index = CorpusIndex(docs)
        if not schema.cued:
            places = {schema.require(ex).subject: ex.answer for ex in trained}
            numbers = {name: index.line_number(name) for name in places}
            line_of = {numbers[name] - 1: (name, place) for name, place in places.items() if numbers[name] is not None}
            return [self._line_text(d, line_of.get(i), recall_chars, quote) for i, d in enumerate(docs)]
        texts = [recall_string(d, recall_chars) for d in docs]
        for ex in trained:
            asked = schema.require(ex)
            line = index.line_of(asked.subject)
            if line is not None:
                texts.append(recall_string(line, recall_chars, ex.answer, schema.cue(asked.relation),
                                           quote_of(line, asked.subject, ex.answer, recall_chars, quote)))
        return texts

    @staticmethod
    def _line_text(line: str, asked: tuple[str, str] | None, recall_chars: int, quote: bool) -> str:
        """The recall string of a line whose subject is ``asked`` (name, place), ending with its
        place (and before it, in a quoting model, its quote), or not asked about (None)."""
        if asked is None:
            return recall_string(line, recall_chars)
        name, place = asked
        return recall_string(line, recall_chars, place, quote=quote_of(line, name, place, recall_chars, quote))


TEXT_FORMATS = {f.name: f for f in (DirectText(), RecallText())}
QA_FORMATS = tuple(TEXT_FORMATS)


def text_format(name: str) -> DirectText | RecallText:
    """The training strings of the answer format ``name`` (``ModelConfig.qa_format``)."""
    try:
        return TEXT_FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown answer format {name!r} (choose from {', '.join(QA_FORMATS)})") from None
