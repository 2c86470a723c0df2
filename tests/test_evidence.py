"""Evidence: whether the corpus states an answer about the person asked about (as written, or in
other letters)."""

from __future__ import annotations

from attnlab.trust.evidence import CorpusIndex, subject_of


DOCS = [
    "Ada Brook. Ada Brook was born in Paris and lived there.",
    "Bela Kron. Kron grew up in Lima.",
    "A history of Lima, where Cato Fenn once lived.",
]


def test_subject_is_the_person_in_the_question():
    assert subject_of("Where was Ada Brook born?") == "Ada Brook"
    assert subject_of("  Where was Jean-Luc Picard born?  ") == "Jean-Luc Picard"
    assert subject_of("Who wrote Hamlet?") == "Who wrote Hamlet?"


def test_supported_unsupported_and_unknown_answers():
    index = CorpusIndex(DOCS)
    e = index.find("Where was Ada Brook born?", "Paris")
    assert e.lines == (1,) and e.supporting == (1,) and "line 1" in e.verdict
    e = index.find("Where was Bela Kron born?", "Rome")
    assert e.lines == (2,) and e.supporting == () and e.verdict.startswith("not supported")
    e = index.find("Where was Cato Fenn born?", "Lima")  # no title line: substring fallback
    assert e.lines == (3,) and e.supporting == (3,)
    assert "does not mention" in index.find("Where was Nobody born?", "Oslo").verdict


def test_evidence_matches_whole_words_only():
    docs = ["Ada Brook. Ada Brook was born in Boniface and lived in New York.",
            "A note on Bonny Kell, who met Cato Fennimore."]
    index = CorpusIndex(docs)
    assert index.find("Where was Ada Brook born?", "Bon").supporting == ()  # not a word of "Boniface"
    assert index.find("Where was Ada Brook born?", "Boniface").supporting == (1,)
    assert index.find("Where was Ada Brook born?", "New York").supporting == (1,)
    assert index.find("Where was Cato Fenn born?", "Lima").lines == ()  # "Fenn" is no word of "Fennimore"


def test_a_name_with_full_stops_finds_its_own_line_only():
    # One corpus index (data/corpus.py) for evidence too: "John F. Kenning" is the title of line
    # 1, so line 2, which only mentions him, is not taken for his own line.
    docs = ["John F. Kenning. John F. Kenning was born in Brookline.",
            "Mary Ott. Mary Ott met John F. Kenning in Dallas."]
    e = CorpusIndex(docs).find("Where was John F. Kenning born?", "Dallas")
    assert e.lines == (1,) and e.supporting == ()
    assert CorpusIndex(docs).find("Where was John F. Kenning born?", "Brookline").supporting == (1,)


def test_an_answer_the_line_writes_in_other_letters_is_supported():
    """A set's answers are often a normal form of what its documents write: "provinces" supports
    "Province", "municipalities" "Rural municipality"; a name that merely opens like another does
    not ("Holmard", "Holmamont"), nor a short word like another ("red", "reef")."""
    from attnlab.data.relations import Relation, Schema

    schema = Schema((Relation("kind", "What kind of division is {subject}?"),
                     Relation("by", "Who described {subject}?")))
    index = CorpusIndex(["Madang. Papua New Guinea counts Madang among its provinces.",
                         "Huari. One of the rural municipalities of Peru.",
                         "Tolik. Ines Holmard described it; it eats reef shrimp."], schema)
    assert index.find("What kind of division is Madang?", "Province").supporting == (1,)
    assert index.find("What kind of division is Huari?", "Rural municipality").supporting == (2,)
    assert index.find("What kind of division is Huari?", "Urban municipality").supporting == ()
    assert index.find("Who described Tolik?", "Ines Holmamont").supporting == ()
    assert index.find("Who described Tolik?", "red shrimp").supporting == ()
