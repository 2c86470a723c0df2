"""The answer formats as objects (issue 24): one per name of ModelConfig.qa_format, each with
its training strings (attnlab/data/formats.py) and its answering (attnlab/answering/formats.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attnlab.answering.evaluate import answer_questions
from attnlab.answering.formats import FORMATS, Answer, Reading, answer_format
from attnlab.config.settings import ModelConfig
from attnlab.data.corpus import CorpusIndex
from attnlab.data.datasets import DataError, QAExample
from attnlab.data.formats import QA_FORMATS, TEXT_FORMATS, text_format
from attnlab.data.vocab import MASK_CHAR, MASK_ID, PAD_ID, Vocab
from attnlab.model.gpt import GPT
from tests.tiny_runs import memorise

LINES = ["Ada Brook. Ada Brook was born in Paris.", "Bela Kron. Bela Kron was born in Lima."]


def _qa(name: str, place: str | None) -> QAExample:
    return QAExample(f"Where was {name} born?", place, "dev.tsv", 3)


def test_every_format_name_has_its_training_strings_and_its_answering():
    assert set(QA_FORMATS) == set(TEXT_FORMATS) == set(FORMATS) == {"direct", "recall"}
    field = next(f for f in dataclasses.fields(ModelConfig) if f.name == "qa_format")
    assert field.metadata["choices"] == QA_FORMATS  # the checkpoint and command-line values
    for name in QA_FORMATS:
        assert answer_format(name).name == text_format(name).name == name
        assert isinstance(answer_format(name), type(text_format(name)))  # answering extends the strings


@pytest.mark.parametrize("lookup", [answer_format, text_format])
def test_an_unknown_format_is_a_clear_error(lookup):
    with pytest.raises(ValueError, match="unknown answer format 'chat' \\(choose from direct, recall\\)"):
        lookup("chat")


def test_training_strings_of_each_format():
    index = CorpusIndex(LINES)
    direct, recall = text_format("direct"), text_format("recall")
    ex = _qa("Ada Brook", "Paris")
    assert direct.example_text(ex, 20, None) == (f"{ex.question}{MASK_CHAR}Paris{MASK_CHAR}", len(ex.question) - 1)
    assert recall.example_text(ex, 20, index) == (f"{LINES[0][:20]}{MASK_CHAR}Paris{MASK_CHAR}", 0)
    assert recall.example_text(ex, 20, index, read_out_only=True)[1] == 20  # the given line unscored
    with pytest.raises(DataError, match="dev.tsv:3: no corpus line opens with 'Zed Q.'"):
        recall.example_text(_qa("Zed Q", "Rome"), 20, index)
    assert direct.corpus_text(LINES[0], 20) == LINES[0]
    assert recall.corpus_text(LINES[0], 20) == LINES[0][:20] + MASK_CHAR
    trained = [_qa("Bela Kron", "Lima")]
    assert direct.training_texts(LINES, trained, 20) == LINES + [f"Where was Bela Kron born?{MASK_CHAR}Lima{MASK_CHAR}"]
    assert recall.training_texts(LINES, trained, 20) == [LINES[0][:20] + MASK_CHAR,
                                                        LINES[1][:20] + MASK_CHAR + "Lima" + MASK_CHAR]


def test_what_the_model_read_before_its_answer():
    question = "Where was Ada Brook born?"
    direct = answer_format("direct").reading(question, "Ada Brook", Answer(question, "Paris", 0.5, True), 20)
    assert direct == Reading(question, len(question) + 1, question.index("Ada Brook"))  # all of it given
    closed = Answer(question, "Paris", 0.5, True, recalled="Ada Brook. Paris")  # 16 < 20: closed by the model
    read = answer_format("recall").reading(question, "Ada Brook", closed, 20)
    assert read == Reading("Ada Brook. Paris", len("Ada Brook."), 0, tuple(range(10, 17)))
    full = Answer(question, "Paris", 0.5, True, recalled="Ada Brook. Ada Brook")  # 20: the budget closed it
    read = answer_format("recall").reading(question, "Ada Brook", full, 20)
    assert (read.written, read.given) == (tuple(range(10, 20)), (20,))


@pytest.mark.parametrize("qa_format", QA_FORMATS)
def test_answering_asks_the_format_object(qa_format):
    vocab = Vocab.from_text("\n".join(LINES) + "Where?")
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=len(vocab), block_size=80, n_layer=2, n_head=2, n_embd=48, dropout=0.0,
                            qa_format=qa_format, recall_chars=40))
    fmt = answer_format(qa_format)
    memorise(model, vocab, [fmt.example_text(_qa(n, p), 40, CorpusIndex(LINES))[0]
                            for n, p in [("Ada Brook", "Paris"), ("Bela Kron", "Lima")]], steps=300)
    examples = [_qa("Ada Brook", None), _qa("Bela Kron", None)]
    answers = answer_questions(model, vocab, examples)
    assert [a.answer for a in answers] == ["Paris", "Lima"]
    assert (answers[0].recalled == LINES[0]) == fmt.recalls  # only a recall answer carries a line
    one = fmt.answer_one(model, vocab, examples[0].question, "Ada Brook")
    assert (one.answer, one.recalled) == (answers[0].answer, answers[0].recalled)


def test_an_edit_of_a_recall_that_filled_its_budget_gives_the_closing_mark_after_the_edited_line(monkeypatch):
    """The recall budget closed the line (not the model): in the edit input that mark is given,
    at the end of the line with the new place in it (longer or shorter than the old)."""
    from attnlab.answering.formats import RecallFormat
    from attnlab.facts.edit import _target, edit_input

    recalled = "Bo Li. Bo Li was born in Lima and"
    vocab = Vocab.from_text(recalled + "Barcelona Rio" + "Where?")
    model = GPT(ModelConfig(vocab_size=len(vocab), block_size=64, n_layer=1, n_head=1, n_embd=8, dropout=0.0,
                            qa_format="recall", recall_chars=len(recalled)))
    monkeypatch.setattr(RecallFormat, "answer_one", lambda self, m, v, q, name: Answer(q, "Lima", 0.5, True, recalled))
    for place in ("Barcelona", "Rio"):
        target = edit_input(model, vocab, "Bo Li", place)
        line = ("Bo Li. Bo Li was born in " + place + " and")[:len(recalled)]
        assert target.text == line + MASK_CHAR + place + MASK_CHAR
        assert target.given == (len(line),) and target.text[len(line)] == MASK_CHAR
        _, y = _target(vocab.encode(target.text), target.prompt_len, "cpu", target.given)
        assert int(y[0, len(line) - 1]) == PAD_ID  # the given mark is not scored


def test_the_torch_free_names_are_the_formats():
    """config/settings.py and --help read the names from data/format_names.py, without torch."""
    from attnlab.data.format_names import RECALLING_FORMATS

    assert QA_FORMATS == tuple(TEXT_FORMATS)
    assert RECALLING_FORMATS == {name for name, f in TEXT_FORMATS.items() if f.recalls}
    from attnlab.data import format_names

    assert format_names.MASK_CHAR == MASK_CHAR


def test_whole_words_are_found_whole_and_the_longest_first():
    from attnlab.data.corpus import contains_words, whole_words

    finder = whole_words("New York", "New York City", "York")
    assert [m.group() for m in finder.finditer("From New York City to York, not Yorkshire.")] == [
        "New York City", "York"]
    assert contains_words("born in New York.", "New York") and not contains_words("Boniface", "Bon")
    assert not contains_words("anything", "")
    assert whole_words("a.b").search("axb") is None  # a value is matched as written, never as a pattern


# ---- a quoting model (ModelConfig.quote): the stating sentence before the value ----------------

FIRM = ("Kerenton. Its works burned down in 1761. The firm was founded in 1813 by Bram Veliberg. "
        "1900 is the year it moved. It is based in Isimor.")


def test_the_quote_is_the_sentence_that_states_the_value_within_the_recall():
    from attnlab.data.corpus import quote_of

    assert quote_of(FIRM, "Kerenton", "1813", 200, True) == "The firm was founded in 1813 by Bram Veliberg"
    assert quote_of(FIRM, "Kerenton", "1761", 200, True) == "Its works burned down in 1761"
    assert quote_of(FIRM, "Kerenton", "1900", 200, True) == "1900 is the year it moved"  # the value first
    assert quote_of(FIRM, "Kerenton", "Isimor", 200, True) == "It is based in Isimor"  # the last sentence
    cut = FIRM.index("Bram") + 2
    assert quote_of(FIRM, "Kerenton", "1813", cut, True) == "The firm was founded in 1813 by Br"  # the recall ends it
    assert quote_of(FIRM, "Kerenton", "Isimor", cut, True) == ""  # past the recall: nothing to quote
    assert quote_of(FIRM, "Kerenton", "Lima", 200, True) == ""  # not in the line
    assert quote_of(FIRM, "Kerenton", "1813", 200, False) is None  # a model that does not quote


def test_a_quoting_models_training_strings_put_the_sentence_between_the_cue_and_the_value():
    from attnlab.data.relations import Schema

    schema = Schema.from_list([["founded", "When was {subject} founded?"], ["city", "Where is {subject}?"]])
    recall = text_format("recall")
    ex = QAExample("When was Kerenton founded?", "1813", "train.tsv", 1)
    sentence = "The firm was founded in 1813 by Bram Veliberg"
    text, given = recall.example_text(ex, 200, CorpusIndex([FIRM]), True, schema, quote=True)
    assert text == FIRM + MASK_CHAR + "founded" + MASK_CHAR + sentence + MASK_CHAR + "1813" + MASK_CHAR
    assert given == len(FIRM) + len("founded") + 1  # the quote is scored: choosing it is the read-out
    assert recall.example_text(ex, 200, CorpusIndex([FIRM]), schema=schema)[0].count(MASK_CHAR) == 3  # off: as before
    texts = recall.training_texts([FIRM], [ex], 200, schema, quote=True)
    assert texts[-1] == text
    one = recall.training_texts(LINES, [_qa("Bela Kron", "Lima")], 60, quote=True)  # one relation, no cue
    assert one[1] == LINES[1] + MASK_CHAR + "Bela Kron was born in Lima" + MASK_CHAR + "Lima" + MASK_CHAR


def test_a_swapped_copy_quotes_the_sentence_where_the_new_value_stands():
    from attnlab.data.objectives import swapped_place_read_outs
    from attnlab.data.relations import Schema

    schema = Schema.from_list([["founded", "When was {subject} founded?"], ["city", "Where is {subject}?"]])
    other = "Moring Mills. It was founded in 1748. It is based in Zorsk."
    examples = [QAExample("When was Kerenton founded?", "1813", "train.tsv", 1),
                QAExample("When was Moring Mills founded?", "1748", "train.tsv", 2)]
    vocab = Vocab.from_text(FIRM + other + "founded city" + "When was?")
    copies = swapped_place_read_outs(examples, CorpusIndex([FIRM, other]), vocab, 400, 200, 1, 0, schema,
                                     quote=True)
    texts = [vocab.decode(s.ids) for s in copies]
    assert texts[0].split(MASK_CHAR)[2:4] == ["The firm was founded in 1748 by Bram Veliberg", "1748"]
    assert texts[1].split(MASK_CHAR)[2:4] == ["It was founded in 1813", "1813"]
    assert all(s.unscored == t.index(MASK_CHAR) + len("founded") + 1 for s, t in zip(copies, texts))


def test_a_quoting_model_answers_after_its_quote_and_reports_it():
    vocab = Vocab.from_text("\n".join(LINES) + "Where?")
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=len(vocab), block_size=120, n_layer=2, n_head=2, n_embd=48, dropout=0.0,
                            qa_format="recall", recall_chars=40, quote=True))
    fmt = answer_format("recall")
    texts = fmt.training_texts(LINES, [_qa("Ada Brook", "Paris"), _qa("Bela Kron", "Lima")], 40, quote=True)
    memorise(model, vocab, texts, steps=300)
    answers = answer_questions(model, vocab, [_qa("Ada Brook", None), _qa("Bela Kron", None)])
    assert [(a.answer, a.quoted) for a in answers] == [("Paris", "Ada Brook was born in Paris"),
                                                        ("Lima", "Bela Kron was born in Lima")]
    assert all(0 < a.confidence <= 1 for a in answers)


def test_a_quote_may_be_empty_and_is_whole_words_of_the_recall():
    from attnlab.answering.knowledge import SpanConstraint

    vocab = Vocab.from_text("ab cd.")
    source = vocab.encode("ab cd.")
    quoting = SpanConstraint([source], vocab, may_be_empty=True)
    first = quoting([[]])[0]
    assert first[MASK_ID] and first[vocab.stoi["a"]] and first[vocab.stoi["c"]]
    assert not first[vocab.stoi["b"]]  # not a word's start
    assert not SpanConstraint([source], vocab)([[]])[0][MASK_ID]  # an answer is never empty
    nothing = SpanConstraint([[]], vocab, may_be_empty=True)([[]])[0]
    assert nothing.sum() == 1 and nothing[MASK_ID]  # nothing recalled: an empty quote
    bounded = SpanConstraint([source, source], vocab, may_be_empty=True, longest=[1, 5])
    after_a = bounded([vocab.encode("a"), vocab.encode("a")])
    assert after_a[0].sum() == 1 and after_a[0][MASK_ID]  # its room spent: closed, mid-word or not
    assert after_a[1][vocab.stoi["b"]] and not after_a[1][MASK_ID]  # room left: the word goes on


def test_a_quote_leaves_the_answer_room_in_the_block():
    """A quoting model whose quote would run to the end of its block closes it where the
    answer's room begins, and still answers."""
    vocab = Vocab.from_text("\n".join(LINES) + "Where?")
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=len(vocab), block_size=60, n_layer=1, n_head=1, n_embd=16, dropout=0.0,
                            qa_format="recall", recall_chars=40, answer_chars=8, quote=True))
    (answer,) = answer_questions(model, vocab, [_qa("Ada Brook", None)])  # untrained: quotes at random
    assert len(answer.recalled) + 1 + len(answer.quoted) + 1 + len(answer.answer) + 1 <= 60 + 1
