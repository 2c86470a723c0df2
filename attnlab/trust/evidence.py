"""Evidence for an answer: does the pretraining corpus say it?

The model answers closed-book, but a user deserves to know whether an answer is backed by the
text the model was pretrained on. For a question about a person we find the corpus lines that
mention the person and report whether the answered place occurs in them, as written or in other
letters ("provinces" supports "Province": data/corpus.py ``writes``). This is an honest
check of the answer, not a way of producing one (SPEC 1: for 95.8% of dev people the gold place
appears in their line, the ceiling of any method that reads the corpus).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..data import corpus
from ..data.corpus import writes
from ..data.relations import Schema


@dataclass(frozen=True)
class Evidence:
    subject: str  # the person the question is about
    lines: tuple[int, ...]  # 1-based corpus lines that mention the subject
    supporting: tuple[int, ...]  # those of them that also contain the answer

    @property
    def verdict(self) -> str:
        if not self.lines:
            return f"the corpus does not mention {self.subject!r}"
        if self.supporting:
            return f"supported by corpus line {self.supporting[0]}"
        return f"not supported: corpus line {self.lines[0]} mentions {self.subject!r} but not this answer"


def subject_of(question: str, schema: Schema | None = None) -> str:
    """The subject of a question of one of ``schema``'s relations (default: the course's "Where
    was NAME born?"), or the whole question for other phrasings."""
    asked = (schema or Schema()).parse(question, bare_subject=False)
    return asked.subject if asked else question.strip()


class CorpusIndex(corpus.CorpusIndex):
    """The corpus index of data/corpus.py (a line ``NAME. text`` is NAME's, full stops in
    names included), asked for the evidence of an answer."""

    def __init__(self, docs: list[str], schema: Schema | None = None, **kw):
        super().__init__(docs, **kw)
        self.schema = schema

    def as_written(self, question: str) -> str:
        """``question`` about a subject spelled as the corpus spells it: a subject typed in
        another case ("ada lovelace") is the corpus's ("Ada Lovelace") when only one subject
        matches; other questions are returned as they are."""
        asked = (self.schema or Schema()).parse(question)
        if asked is None or self.line_of(asked.subject) is not None:
            return question
        if not hasattr(self, "_folded"):
            folded: dict[str, list[str]] = {}
            for name in self._line:
                folded.setdefault(name.casefold(), []).append(name)
            self._folded = folded
        found = self._folded.get(" ".join(asked.subject.split()).casefold(), [])
        return asked.relation.ask(found[0]) if len(found) == 1 else question

    def find(self, question: str, answer: str) -> Evidence:
        subject = subject_of(question, self.schema)
        hits = self.lines_about(subject)
        supporting = [i for i in hits if answer and writes(self.docs[i], answer)]
        return Evidence(subject, tuple(i + 1 for i in hits), tuple(i + 1 for i in supporting))
