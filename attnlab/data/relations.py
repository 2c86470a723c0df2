"""Relations: the question forms of a fact set (``Where was {subject} born?``, ``Which country
is {subject} in?``), how a typed question is matched to one, and the ``Schema`` a model keeps of
its fact set's relations (saved in its config) so that it can tell what it is asked."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from .datasets import DataError, QAExample

SLOT = "{subject}"
_RELATION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class Relation:
    """One question form: ``name`` (a short word, also the model's cue for it) and the question
    ``template`` with one ``{subject}`` slot."""

    name: str
    template: str
    _pattern: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.template.count(SLOT) != 1:
            raise ValueError(f"relation {self.name!r}: the question {self.template!r} must hold {SLOT} once")
        if not _RELATION_NAME.fullmatch(self.name):
            raise ValueError(f"relation name {self.name!r} must be a word (letters, digits, - or _)")
        before, after = self.template.split(SLOT)
        object.__setattr__(self, "_pattern", re.compile(
            _loose(before) + r"(?P<subject>.+?)" + _loose(after.rstrip("?").rstrip()) + r"\s*\??", re.IGNORECASE))

    @property
    def form(self) -> str:
        """The question as ``subject_in`` matches it: any case, spaces collapsed, "?" optional."""
        return " ".join(self.template.split()).rstrip("?").rstrip().lower()

    def ask(self, subject: str) -> str:
        """The question about ``subject``, as the fact set writes it."""
        return self.template.replace(SLOT, subject)

    def subject_in(self, question: str) -> str | None:
        """The subject of ``question`` if it has this relation's form, as people type it: any
        case, spaces collapsed, the closing "?" optional (None otherwise)."""
        m = self._pattern.fullmatch(" ".join(question.split()))
        return m.group("subject").strip() if m else None


def _loose(text: str) -> str:
    """A regular expression for ``text`` that lets any run of spaces stand for one."""
    return r"\s+".join(re.escape(part) for part in text.split(" ")) if text.strip() else re.escape(text)


BIRTHPLACE = Relation("birthplace", "Where was {subject} born?")


@dataclass(frozen=True)
class Asked:
    """Which relation a question asks about, and of whom."""

    relation: Relation
    subject: str


@dataclass(frozen=True)
class Schema:
    """The relations of a fact set. With one relation a model reads answers without a cue (the
    course's format); with several, the relation's name tells it which answer to read."""

    relations: tuple[Relation, ...] = (BIRTHPLACE,)

    def __post_init__(self) -> None:
        if not self.relations:
            raise ValueError("a fact set needs at least one relation")
        seen = Counter(r.name for r in self.relations)
        twice = [n for n, k in seen.items() if k > 1]
        if twice:
            raise ValueError(f"relation {twice[0]!r} is named twice")
        forms: dict[str, Relation] = {}
        for r in self.relations:
            first = forms.setdefault(r.form, r)
            if first is not r:
                raise ValueError(f"relations {first.name!r} and {r.name!r} ask the same question "
                                 f"({r.template!r}): a question could not tell which is meant")

    @property
    def cued(self) -> bool:
        """Whether answers are read after a cue naming the relation (more than one relation)."""
        return len(self.relations) > 1

    def cue(self, relation: Relation) -> str | None:
        return relation.name if self.cued else None

    def relation(self, name: str) -> Relation:
        for r in self.relations:
            if r.name == name:
                return r
        raise ValueError(f"no relation {name!r} (the fact set has {', '.join(self.names)})")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.relations)

    def parse(self, question: str, *, bare_subject: bool = True) -> Asked | None:
        """Which relation and subject ``question`` asks about (None: no relation matches). The
        longest matching template wins (its subject is the shortest); with one relation, text
        that is no question at all is taken as a bare subject."""
        text = " ".join(question.split())
        found = [(len(r.template), Asked(r, s)) for r in self.relations if (s := r.subject_in(text))]
        if found:
            return max(found, key=lambda pair: pair[0])[1]
        if bare_subject and not self.cued and text and not text.endswith("?"):
            return Asked(self.relations[0], text)
        return None

    def require(self, example: QAExample) -> Asked:
        """``parse`` of a data file's question, or a DataError naming its line."""
        asked = self.parse(example.question, bare_subject=False)
        if asked is None:
            forms = "; ".join(repr(r.template) for r in self.relations)
            raise DataError(example.source, example.line,
                            f"the question {example.question!r} matches no relation (expected {forms})")
        return asked

    def to_list(self) -> list[list[str]]:
        return [[r.name, r.template] for r in self.relations]

    @classmethod
    def from_list(cls, pairs) -> Schema:
        """From a model config's ``relations`` (empty: the course's one question)."""
        if not pairs:
            return cls()
        return cls(tuple(Relation(str(name), str(template)) for name, template in pairs))


COURSE = Schema()


