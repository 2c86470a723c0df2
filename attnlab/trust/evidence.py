"""Evidence for an answer: does the pretraining corpus say it?

The model answers closed-book, but a user deserves to know whether an answer is backed by the
text the model was pretrained on. For a question about a person we find the corpus lines that
mention the person and report whether the answered place occurs in them. This is an honest
check of the answer, not a way of producing one (SPEC 1: for 95.8% of dev people the gold place
appears in their line, the ceiling of any method that reads the corpus).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_QUESTION = re.compile(r"^\s*Where was (?P<name>.+?) born\?\s*$")


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


def subject_of(question: str) -> str:
    """The person in "Where was NAME born?", or the whole question for other phrasings."""
    m = _QUESTION.match(question)
    return m.group("name") if m else question.strip()


def contains_words(text: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` as whole words: "Bon" is not in "Boniface", but
    "New York" is in "born in New York." (no letter or digit may touch either end)."""
    if not phrase:
        return False
    return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text) is not None


class CorpusIndex:
    """Corpus lines by subject. Each wiki.txt line starts with "Name. ...", which we index;
    other subjects fall back to a substring scan."""

    def __init__(self, documents: list[str]):
        self.documents = documents
        self.by_title: dict[str, list[int]] = {}
        for i, doc in enumerate(documents):
            title = doc.split(". ", 1)[0]
            self.by_title.setdefault(title, []).append(i)

    def find(self, question: str, answer: str) -> Evidence:
        subject = subject_of(question)
        hits = self.by_title.get(subject) or [i for i, d in enumerate(self.documents) if contains_words(d, subject)]
        supporting = [i for i in hits if answer and contains_words(self.documents[i], answer)]
        return Evidence(subject, tuple(i + 1 for i in hits), tuple(i + 1 for i in supporting))
