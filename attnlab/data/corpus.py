"""Who a question is about and what the corpus says of them: the question form, the corpus
index by person, and the recall format's prompt and training strings. Text only, no model:
pretraining data (objectives) and answering (answering/knowledge.py) both read it here."""

from __future__ import annotations

import re

from .datasets import DataError, QAExample
from .relations import COURSE, Asked, Schema
from .vocab import MASK_CHAR

_QUESTION = re.compile(r"^Where was (?P<name>.+) born\?$")


def person_of(question: str) -> str | None:
    """The name in a question of the experiment's form ``Where was NAME born?`` (else None)."""
    match = _QUESTION.match(question.strip())
    return match.group("name") if match else None


def require_person(example: QAExample, schema: Schema = COURSE) -> str:
    """The subject a data file's question asks about (a DataError naming its line when the
    question matches none of the ``schema``'s relations)."""
    return schema.require(example).subject


def require_asked(example: QAExample, schema: Schema = COURSE) -> Asked:
    """The relation and subject a data file's question asks about."""
    return schema.require(example)


class CorpusIndex:
    """The corpus lines by the person they are about: a line ``NAME. text`` belongs to NAME.
    A name may contain full stops ("John F. Kennedy"), so every ``". "`` in a line's opening
    is a candidate end of its name; the first line that opens with a name wins."""

    def __init__(self, docs: list[str], max_name_chars: int = 120):
        self.docs = docs
        self._line: dict[str, int] = {}
        for i, doc in enumerate(docs):
            for m in re.finditer(r"\. ", doc[: max_name_chars + 2]):
                self._line.setdefault(doc[: m.start()], i)
            if doc.endswith(".") and len(doc) <= max_name_chars + 1:
                self._line.setdefault(doc[:-1], i)

    def line_of(self, name: str) -> str | None:
        i = self._line.get(name)
        return None if i is None else self.docs[i]

    def line_number(self, name: str) -> int | None:
        """1-based line number of the person's line in the corpus file (None if absent)."""
        i = self._line.get(name)
        return None if i is None else i + 1

    def lines_about(self, name: str) -> list[int]:
        """0-based indices of the lines about ``name``: the person's own line if the corpus has
        one, else every line that mentions the name as whole words."""
        i = self._line.get(name)
        return [i] if i is not None else [j for j, doc in enumerate(self.docs) if contains_words(doc, name)]


def whole_words(*phrases: str) -> re.Pattern:
    """A pattern matching any of ``phrases`` as whole words (no letter or digit may touch either
    end), the longest first, so that "New York City" is found whole, not as "New York"."""
    alternatives = "|".join(re.escape(p) for p in sorted(phrases, key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)")


def contains_words(text: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` as whole words: "Bon" is not in "Boniface", but
    "New York" is in "born in New York."."""
    return bool(phrase) and whole_words(phrase).search(text) is not None


# A fact set's answers are often a normal form of what its documents write ("provinces" answered
# "Province", "Brazilian" answered "Brazil"). Such a text writes the answer in other letters:
# word for word over consecutive words, case aside, each word equal or, where both have at least
# ALIKE_WORD letters, opening alike on all but one letter of the shorter and on ALIKE_WORD letters
# at least. Shorter words ("red", "reef") must be equal, and a name that merely opens like another
# ("Holmard", "Holmamont"; "Mali", "Malta") is another name.
ALIKE_WORD = 4


def words_of(text: str) -> list[str]:
    """The words of ``text`` in lower case, in order (punctuation dropped)."""
    return re.findall(r"\w+", text.casefold())


def alike(a: str, b: str) -> bool:
    """Two lower-case words that are one word in other letters ("province" and "provinces",
    "municipality" and "municipalities", "brazil" and "brazilian")."""
    if a == b:
        return True
    shorter = min(len(a), len(b))
    if shorter < ALIKE_WORD:
        return False
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), shorter)
    return same >= max(ALIKE_WORD, shorter - 1)


def alike_at(words: list[str], at: int, phrase: list[str]) -> bool:
    """Whether the words from ``at`` on are ``phrase``'s words in other letters (words_of both)."""
    return len(phrase) <= len(words) - at and all(map(alike, phrase, words[at:at + len(phrase)]))


def word_spans(text: str, start: int = 0) -> list[tuple[int, int]]:
    """(start, end) of each word of ``text`` from ``start`` on, as words_of finds them."""
    return [(m.start(), m.end()) for m in re.finditer(r"\w+", text) if m.start() >= start]


def alike_spans(text: str, phrase: str, start: int = 0) -> list[tuple[int, int]]:
    """Where ``text`` (from ``start`` on) writes ``phrase`` word for word in other letters
    (alike): each run of consecutive words as (start, end) character offsets."""
    wanted = words_of(phrase)
    found = word_spans(text, start)
    words = [text[a:b].casefold() for a, b in found]
    return [(found[at][0], found[at + len(wanted) - 1][1]) for at in range(len(words))
            if wanted and alike_at(words, at, wanted)]


def writes(text: str, phrase: str) -> bool:
    """Whether ``text`` writes ``phrase``, as whole words or in other letters (alike)."""
    return contains_words(text, phrase) or bool(alike_spans(text, phrase))


# ------------------------------------------------------------------------- recall format


def recall_prompt(name: str) -> str:
    """What a recall model is given: the opening of the person's corpus line."""
    return f"{name}."


def place_in_line(line: str, name: str, place: str) -> int:
    """Where ``place`` is first written in ``line`` after the line's opening ``NAME.`` (-1 if it
    is not): the span a read-out copies the place from."""
    return line.find(place, len(recall_prompt(name))) if place else -1


def recall_string(line: str, recall_chars: int, place: str | None = None, cue: str | None = None,
                  quote: str | None = None) -> str:
    """A training string: the line cut at ``recall_chars``, ``⁇``, and ``place⁇`` if given,
    preceded by ``cue⁇`` (the relation's name) in a fact set of several relations and by
    ``quote⁇`` (``sentence_quote``) in a model that quotes."""
    text = line[:recall_chars] + MASK_CHAR
    return text if place is None else text + answer_tail(place, cue, quote)


def answer_tail(place: str, cue: str | None = None, quote: str | None = None) -> str:
    """What follows a recall's closing mark: ``cue⁇`` (several relations), ``quote⁇`` (a quoting
    model), ``place⁇``."""
    return (cue + MASK_CHAR if cue else "") + (quote + MASK_CHAR if quote is not None else "") + place + MASK_CHAR


_WORD = re.compile(r"[^\W_]+")  # a word: a run of letters and digits, as the span read-out counts them
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")


def sentence_quote(text: str, at: int, length: int, floor: int) -> str:
    """The sentence of ``text`` holding the value at ``at`` (``length`` characters), from its
    first word to its last (none before ``floor``): what a quoting model writes before a value.
    A small character model copies a value from its first characters, and values of one kind
    often share those (years open with 1 or 2): the sentence that states the fact differs from
    the others from its first words on, so the choice of value is made there."""
    ends = [m.end() for m in _SENTENCE_END.finditer(text, floor, at)]
    start = max([floor] + ends)
    stop = _SENTENCE_END.search(text, at + length)
    words = list(_WORD.finditer(text, start, stop.start() if stop else len(text)))
    return text[words[0].start():words[-1].end()] if words else ""


def quote_in(recalled: str, start: int, place: str) -> str:
    """The quote of ``place`` in a recalled text, searched from ``start`` (past the prompt)."""
    at = recalled.find(place, start) if place else -1
    return sentence_quote(recalled, at, len(place), start) if at >= 0 else ""


def quote_of(line: str, name: str, place: str, recall_chars: int, quote: bool) -> str | None:
    """What a quoting model writes before ``place`` when it recalled ``line``: None when it does
    not quote, empty when the place is not within the recalled characters."""
    return quote_in(line[:recall_chars], len(recall_prompt(name)), place) if quote else None
