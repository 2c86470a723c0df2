"""Fact sets (attnlab/data/factset.py, relations.py): the folder format and its checks, questions
matched as people type them, data-derived sizes, and the recall format with several relations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnlab.data import factset
from attnlab.data.corpus import recall_string
from attnlab.data.datasets import DataError, QAExample, read_qa
from attnlab.data.relations import COURSE, Relation, Schema

TOWNS = Schema((Relation("country", "Which country is {subject} in?"),
                Relation("river", "Which river flows through {subject}?")))


def write_set(root: Path, *, toml: str | bytes | None = None, corpus: str | None = None, train: str | None = None,
              dev: str | None = None) -> Path:
    """A small valid two-relation fact set, with any file replaced."""
    root.mkdir(parents=True, exist_ok=True)
    towns = [("Ardale", "Velm", "Orna"), ("Brisk", "Tarn", "Kessa"), ("Colver", "Velm", "Drin"),
             ("Dunmoor", "Sorn", "Orna"), ("Eskby", "Tarn", "Drin")]
    if isinstance(toml, bytes):
        (root / "facts.toml").write_bytes(toml)
    else:
        (root / "facts.toml").write_text(toml if toml is not None else (
            'name = "towns"\ndescription = "invented towns"\n'
            '[[relation]]\nname = "country"\nquestion = "Which country is {subject} in?"\n'
            '[[relation]]\nname = "river"\nquestion = "Which river flows through {subject}?"\n'), encoding="utf-8")
    lines = [f"{t}. It trades with Zarn. {t} lies in {c}. The {r} flows through it." for t, c, r in towns]
    (root / "corpus.txt").write_text(corpus if corpus is not None else "\n".join(lines) + "\nWhich? None.\n",
                                     encoding="utf-8")

    def qa(part):
        return "".join(f"Which country is {t} in?\t{c}\nWhich river flows through {t}?\t{r}\n" for t, c, r in part)

    (root / "train.tsv").write_text(train if train is not None else qa(towns[:3]), encoding="utf-8")
    (root / "dev.tsv").write_text(dev if dev is not None else qa(towns[3:]), encoding="utf-8")
    return root


# ------------------------------------------------------------------------------ relations


def test_questions_are_matched_as_people_type_them():
    assert TOWNS.parse("Which country is Ardale in?").subject == "Ardale"
    assert TOWNS.parse("which  country is  New Ardale in").subject == "New Ardale"
    asked = TOWNS.parse("WHICH RIVER FLOWS THROUGH Brisk ?")
    assert (asked.relation.name, asked.subject) == ("river", "Brisk")
    assert TOWNS.parse("Who founded Brisk?") is None
    assert TOWNS.parse("Brisk") is None  # a bare subject is ambiguous with two relations


def test_a_bare_subject_asks_the_one_relation():
    assert COURSE.parse("Ada Lovelace").subject == "Ada Lovelace"
    assert COURSE.parse("where was ada lovelace born").subject == "ada lovelace"
    assert COURSE.parse("Who was Ada?") is None


def test_the_longest_matching_template_wins():
    schema = Schema((Relation("capital", "What is {subject}?"), Relation("long", "What is the capital of {subject}?")))
    asked = schema.parse("What is the capital of Orna?")
    assert (asked.relation.name, asked.subject) == ("long", "Orna")


@pytest.mark.parametrize("name,template,problem", [
    ("country", "Which country?", "must hold {subject} once"),
    ("country", "{subject} or {subject}?", "must hold {subject} once"),
    ("two words", "Where is {subject}?", "must be a word"),
])
def test_a_bad_relation_is_refused(name, template, problem):
    with pytest.raises(ValueError, match=problem):
        Relation(name, template)


def test_the_recall_string_names_the_relation_only_with_several():
    assert recall_string("Ardale. It lies in Orna.", 12, "Orna") == "Ardale. It l⁇Orna⁇"
    assert recall_string("Ardale. It lies in Orna.", 12, "Orna", "country") == "Ardale. It l⁇country⁇Orna⁇"
    assert COURSE.cue(COURSE.relations[0]) is None and TOWNS.cue(TOWNS.relations[1]) == "river"


def test_a_schema_round_trips_through_a_model_config():
    from attnlab.config.settings import ModelConfig

    config = ModelConfig.from_dict(json.loads(json.dumps(ModelConfig(relations=TOWNS.to_list()).to_dict())))
    assert Schema.from_list(config.relations) == TOWNS
    assert Schema.from_list(ModelConfig().relations) == COURSE  # an old checkpoint: the course's question


# ---------------------------------------------------------------------------- the folder


def test_a_valid_folder_loads(tmp_path):
    facts = factset.load(write_set(tmp_path / "towns"))
    assert facts.name == "towns" and facts.schema == TOWNS and facts.test is None
    before = facts.digest()
    assert facts.record()["digest"] == before
    (tmp_path / "towns" / "dev.tsv").write_text("Which country is Dunmoor in?\tOrna\n", encoding="utf-8")
    assert factset.load(tmp_path / "towns").digest() != before


def test_the_birthplace_set_is_a_fact_set_of_the_course_question():
    facts = factset.load(Path(__file__).resolve().parents[1] / "data")
    assert facts.schema == COURSE and facts.corpus.name == "wiki.txt" and facts.test is not None
    assert len(read_qa(facts.dev)) == 500


BAD = [
    (dict(toml='name = "x"\nfoo = = 3\n'), "facts.toml:2: not valid TOML"),
    (dict(toml='name = "x"\n'), "facts.toml: no [[relation]] table"),
    (dict(toml='[[relation]]\nname = "c"\nquestion = "Which country?"\n'), "must hold {subject} once"),
    (dict(toml='[[relation]]\nname = "c"\nquestion = "Is {subject}?"\n[[relation]]\nname = "c"\n'
                'question = "Was {subject}?"\n'), "relation 'c' is named twice"),
    (dict(train="Who founded Ardale?\tNobody\n"), "train.tsv:1: the question 'Who founded Ardale?' matches no relation"),
    (dict(train="Which country is Ardale in?\tOrna\nWhich country is Ardale in?\tKessa\n"),
     "train.tsv:2: 'Ardale' has two answers for country"),
    (dict(train="Which country is Nowhere in?\tOrna\n"), "train.tsv:1: the subject 'Nowhere' has no document"),
    (dict(dev=""), "dev.tsv: no questions"),
    (dict(dev="Which country is Ardale in?\n"), "dev.tsv:1: expected 'question<TAB>answer', found no tab"),
    (dict(train="Which country is Ardale in?\t\n"), "train.tsv:1: empty answer"),
    (dict(corpus=""), "corpus.txt: the corpus is empty"),
    (dict(toml='[[relation]]\nname = "c"\nquestion = "Where is {subject}?"\n[[relation]]\nname = "d"\n'
                'question = "where  is {subject}"\n'), "relations 'c' and 'd' ask the same question"),
    (dict(toml='name = "x"\n\n[[relation]]\nname = "c"\nquestion = "Is {subject}?"\n\n[[relation]]\nnam = "d"\n'
                'question = "Was {subject}?"\n'), "facts.toml:7: relation 2: needs name"),
    (dict(toml='name = "x"\n'.encode("utf-8") + b'description = "caf\xe9"\n'), "facts.toml:2: not valid UTF-8"),
]


@pytest.mark.parametrize("change,message", BAD)
def test_a_bad_folder_is_one_clear_error(tmp_path, change, message):
    root = write_set(tmp_path / "bad", **change)
    with pytest.raises(DataError) as e:
        factset.load(root)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_facts_toml_as_editors_save_it_loads(tmp_path):
    """A byte-order mark and CRLF line ends (Windows editors) are read as plain UTF-8."""
    plain = write_set(tmp_path / "plain")
    text = (plain / "facts.toml").read_text(encoding="utf-8")
    saved = write_set(tmp_path / "saved", toml="")
    (saved / "facts.toml").write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode("utf-8"))
    assert factset.load(saved).schema == factset.load(plain).schema == TOWNS


def test_keys_facts_toml_does_not_read_are_named_with_their_line_and_likely_meaning(tmp_path):
    from attnlab.experiments.learn import _say_undocumented

    toml = ('name = "towns"\nnamesake = true\n[[relation]]\nname = "country"\nquestion = "Which country is '
            '{subject} in?"\n[[relation]]\nname = "river"\nquestion = "Which river flows through {subject}?"\n'
            'questoin = "x"\n[source]\nurl = "https://example.org"\n')
    facts = factset.load(write_set(tmp_path / "typos", toml=toml))
    found = factset.unknown_keys(facts)
    assert facts.schema == TOWNS and not facts.namesakes  # read as before: the keys are not guessed at
    assert [line.split(": unknown key ")[0].rsplit("/", 1)[1] for line in found] == [
        "facts.toml:2", "facts.toml:10", "facts.toml:9"]
    assert "did you mean 'namesakes'?" in found[0] and "did you mean" not in found[1]
    assert "'questoin'" in found[2] and "did you mean 'question'?" in found[2]
    said: list[str] = []
    _say_undocumented(facts, said.append)
    assert said == [f"warning: {line}" for line in found]
    assert factset.unknown_keys(factset.load(write_set(tmp_path / "clean"))) == []


def test_learn_warnings_are_kept_by_quiet(tmp_path, capsys):
    from attnlab.core import logs
    from attnlab.experiments.learn import _say_undocumented

    facts = factset.load(write_set(tmp_path / "typo", toml='namesake = true\n[[relation]]\nname = "country"\n'
                                   'question = "Which country is {subject} in?"\n[[relation]]\nname = "river"\n'
                                   'question = "Which river flows through {subject}?"\n'))
    with logs.level(logs.level_for(quiet=True)):
        _say_undocumented(facts, logs.note)
    assert "unknown key 'namesake'" in capsys.readouterr().err


def test_a_missing_file_or_folder_is_named(tmp_path):
    root = write_set(tmp_path / "towns")
    (root / "dev.tsv").unlink()
    with pytest.raises(DataError, match=r"dev.tsv: missing: the fact set's dev file"):
        factset.load(root)
    with pytest.raises(DataError, match="no such fact-set folder"):
        factset.load(tmp_path / "nowhere")
    (root / "facts.toml").unlink()
    with pytest.raises(DataError, match=r"facts.toml: missing"):
        factset.load(root)


def test_sizes_come_from_the_data(tmp_path):
    facts = factset.load(write_set(tmp_path / "towns"))
    sizes = factset.sizes(facts)
    longest_end = max(len(line) - 1 for line in facts.corpus.read_text().split("\n")[:3])
    assert sizes.recall_chars >= 32 and sizes.recall_chars >= longest_end - 40
    assert sizes.answer_chars >= len("Orna") and sizes.block_size % 16 == 0
    assert sizes.block_size >= sizes.recall_chars + len("country") + sizes.answer_chars + 3
    assert (sizes.out_of_reach, sizes.answers) == (0, 6)
    # a quoting model's block also holds the longest training answer's sentence and its mark
    from attnlab.data.corpus import CorpusIndex, quote_of
    from attnlab.data.datasets import documents, read_qa, read_text

    index = CorpusIndex(documents(read_text(facts.corpus)))
    quotes = [quote_of(index.line_of(facts.schema.require(e).subject), facts.schema.require(e).subject, e.answer,
                       sizes.recall_chars, True) for e in read_qa(facts.train, labelled=True)]
    quoting = factset.sizes(facts, quote=True)
    assert max(map(len, quotes)) > 0 and quoting.recall_chars == sizes.recall_chars
    assert quoting.block_size >= sizes.recall_chars + len("country") + 1 + max(map(len, quotes)) + 1 + sizes.answer_chars


def test_answers_the_copy_cannot_reach_are_counted_and_said(tmp_path):
    from attnlab.experiments.learn import _say_out_of_reach

    # Ardale's river is written only in a second document about it: the copy reads the first
    corpus = ("Ardale. It trades with Zarn. Ardale lies in Velm.\nArdale. The Orna flows through it.\n"
              "Brisk. Brisk lies in Tarn. The Kessa flows through it.\n"
              "Colver. Colver lies in Velm. The Drin flows through it.\nDunmoor. In Sorn, on the Orna.\n"
              "Eskby. In Tarn, on the Drin.\nWhich? None.\n")
    sizes = factset.sizes(factset.load(write_set(tmp_path / "towns", corpus=corpus)))
    assert (sizes.out_of_reach, sizes.answers) == (1, 6)
    said = []
    _say_out_of_reach(sizes, sizes.recall_chars, said.append)
    assert len(said) == 1 and "of 6 training answers, 1 are not written in their subject's first document" in said[0]
    assert "past the first" not in said[0]
    # a recipe recalling fewer characters reaches fewer answers, and is told so by its own length,
    # apart from the one answer no recall reaches
    short = min(sizes.ends)
    late = sizes.beyond(short) - 1
    assert late == 5 - sum(end <= short for end in sizes.ends) > 0
    _say_out_of_reach(sizes, short, said.append)
    assert "1 are not written" in said[1] and f"{late} are written past the first {short} characters" in said[1]


def test_a_run_record_is_checked_against_the_folder(tmp_path):
    root = write_set(tmp_path / "towns")
    run = tmp_path / "run"
    run.mkdir()
    assert factset.recorded(run) is None
    (run / factset.RECORD_NAME).write_text(json.dumps(factset.load(root).record()), encoding="utf-8")
    assert factset.recorded(run).schema == TOWNS
    (root / "dev.tsv").write_text("Which country is Dunmoor in?\tKessa\n", encoding="utf-8")
    with pytest.raises(DataError, match="changed since the run learned it.*with --facts DIR"):
        factset.recorded(run)


def test_a_run_finds_its_set_from_another_directory_and_a_moved_copy_by_content(tmp_path, monkeypatch):
    """The record keeps the folder as given and absolute: a relative path read from another
    directory still finds it. A folder gone says to name it; a copy elsewhere is the same set
    (its content hash), another set is not."""
    import shutil

    monkeypatch.chdir(tmp_path)
    write_set(tmp_path / "towns")
    run = tmp_path / "run"
    run.mkdir()
    (run / factset.RECORD_NAME).write_text(json.dumps(factset.load("towns").record()), encoding="utf-8")
    monkeypatch.chdir(run)  # "towns" is no folder from here
    assert factset.recorded(run).root == tmp_path / "towns"
    shutil.move(tmp_path / "towns", tmp_path / "moved")
    with pytest.raises(DataError, match="which is no longer there: name its folder with --facts DIR"):
        factset.recorded(run)
    learned = factset.learned_record(run)
    assert learned.same_as(factset.load(tmp_path / "moved"))
    assert not learned.same_as(factset.load(write_set(tmp_path / "other", dev="Which country is Eskby in?\tDrin\n")))


# ------------------------------------------------------------------- the recipe's data


def test_one_fact_per_subject_takes_the_relations_in_turn(tmp_path):
    from attnlab.data.objectives import one_fact_per_subject

    facts = factset.load(write_set(tmp_path / "towns"))
    chosen = one_fact_per_subject(read_qa(facts.train, labelled=True), facts.schema)
    assert [facts.schema.require(e).relation.name for e in chosen] == ["country", "river", "country"]
    assert len({facts.schema.require(e).subject for e in chosen}) == 3


def test_recall_examples_cue_their_relation_and_read_outs_score_the_answer_only():
    from attnlab.data.corpus import CorpusIndex
    from attnlab.data.formats import text_format

    line = "Ardale. It trades with Zarn. Ardale lies in Orna. The Velm flows through it."
    index = CorpusIndex([line])
    ex = QAExample("Which river flows through Ardale?", "Velm", "t.tsv", 1)
    text, unscored = text_format("recall").example_text(ex, 40, index, True, TOWNS)
    assert text == line[:40] + "⁇river⁇Velm⁇"
    assert text[unscored + 1:] == "Velm⁇"  # targets from there on are scored: the answer and its mark


def test_held_out_subjects_without_a_document_are_counted_and_learn_says_so(tmp_path):
    from attnlab.experiments.learn import _say_undocumented

    complete = factset.load(write_set(tmp_path / "complete"))
    assert factset.undocumented(complete) == {}
    dev = "Which country is Eskby in?\tTarn\nWhich country is Fenwick in?\tVelm\nWhich river flows through Fenwick?\tOrna\n"
    facts = factset.load(write_set(tmp_path / "missing", dev=dev))  # allowed: a dev subject the corpus never names
    assert factset.undocumented(facts) == {"dev": (1, 2)}
    said: list[str] = []
    _say_undocumented(facts, said.append)
    assert len(said) == 1 and "1 of 2 dev subjects have no document" in said[0]
