"""`attnlab synth bios` (issue 47, item 1): bioS-like biographies written as a fact set. The
generator only: same seed same bytes, every fact in every document of its person, unique names,
a split by person, a set the fact-set loader accepts, and an output folder never overwritten.
No test trains anything."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("faker", reason="the synth extra (Faker) is not installed")

from attnlab import cli  # noqa: E402
from attnlab.data import factset  # noqa: E402
from attnlab.data.datasets import documents, read_corpus, read_qa  # noqa: E402
from attnlab.data.synth import BiosOptions, SynthError, generate, write  # noqa: E402
from attnlab.data.synth.values import ATTRIBUTES, RELATIONS  # noqa: E402
from tests.test_bad_input import read_only  # noqa: E402,F401  (the fixture: a read-only directory, also for root)

AUGMENTED = BiosOptions(people=40, seed=3, multi=3, permute=True, fullname=True, celebrities=0.5)
PLAIN = BiosOptions(people=24, seed=5)
SETS = [AUGMENTED, PLAIN, BiosOptions(people=12, seed=1, multi=2), BiosOptions(people=9, seed=2, fullname=True)]


@pytest.fixture(scope="module")
def made():
    return {o: generate(o) for o in SETS}


def test_same_seed_same_bytes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write(generate(AUGMENTED), a)
    assert cli.main(["synth", "bios", "--people", "40", "--seed", "3", "--multi", "3", "--permute",
                     "--fullname", "--celebrities", "0.5", "--out", str(b)]) == 0
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir()) == sorted(
        ["corpus.txt", "train.tsv", "dev.tsv", "test.tsv", "people.tsv", "facts.toml"])
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_another_seed_other_people():
    a, b = generate(BiosOptions(people=10, seed=0)), generate(BiosOptions(people=10, seed=1))
    assert a.files["corpus.txt"] != b.files["corpus.txt"]


@pytest.mark.parametrize("options", SETS, ids=str)
def test_every_fact_is_in_every_document_of_its_person(made, options):
    bios = made[options]
    corpus = documents(bios.files["corpus.txt"])
    for p in bios.people:
        assert p.documents, p.name
        for doc in p.documents:
            assert doc.startswith(p.name + ". ") and doc in corpus
            for attribute in ATTRIBUTES:
                assert p.values[attribute] in doc[len(p.name) + 2:], (p.name, attribute, doc)
    assert len(corpus) == sum(len(p.documents) for p in bios.people) + 1  # + the question line


def test_the_augmentations_go_to_the_celebrities_only(made):
    bios = made[AUGMENTED]
    celebrities = [p for p in bios.people if p.celebrity]
    assert len(celebrities) == 20
    for p in bios.people:
        assert len(p.documents) == (3 if p.celebrity else 1)
        for doc in p.documents:
            # the heading and six sentences, or the heading and the first sentence (pronouns after)
            assert doc.count(p.name) == (7 if p.celebrity else 2), doc
    assert len({d for p in celebrities for d in p.documents}) == 3 * len(celebrities)  # rewrites differ


def test_a_plain_biography_keeps_the_attribute_order(made):
    p = made[PLAIN].people[0]
    doc = p.documents[0]
    positions = [doc.index(p.values[a], len(p.name) + 2) for a in ("birth_date", "university", "employer")]
    assert positions == sorted(positions)


@pytest.mark.parametrize("options", SETS, ids=str)
def test_no_two_people_share_a_full_name(made, options):
    names = [p.name for p in made[options].people]
    assert len(names) == len(set(names)) == options.people


@pytest.mark.parametrize("options", SETS, ids=str)
def test_the_split_is_by_person(made, options):
    bios = made[options]
    asked: dict[str, set[str]] = {}
    for split in ("train", "dev", "test"):
        for line in bios.files[f"{split}.tsv"].splitlines():
            question = line.split("\t")[0]
            who = next(p.name for p in bios.people if p.name in question)
            asked.setdefault(who, set()).add(split)
    assert all(len(splits) == 1 for splits in asked.values())
    assert set(asked) == {p.name for p in bios.people}  # everyone is asked about, six questions each
    train = sum(p.split == "train" for p in bios.people)
    assert train == sum(-(-sum(p.celebrity is g for p in bios.people) // 2) for g in (True, False))
    for split in ("train", "dev", "test"):
        people = [p for p in bios.people if p.split == split]
        assert people and len(bios.files[f"{split}.tsv"].splitlines()) == 6 * len(people)


def test_the_output_is_a_fact_set_the_loader_accepts(tmp_path, made):
    out = write(made[AUGMENTED], tmp_path / "bios")
    facts = factset.load(out)
    assert facts.schema.names == tuple(name for _, name, _ in RELATIONS)
    assert facts.test is not None and "3 biographies each" in facts.description
    corpus = set(read_corpus(facts.corpus))
    asked = "".join(e.question + e.answer for p in (facts.train, facts.dev, facts.test) for e in read_qa(p))
    assert set(asked) <= corpus and "?" in corpus  # the corpus holds every character of the questions
    for text in (read_corpus(facts.corpus), *(p.read_text() for p in facts.files.values())):
        assert "\u25a1" not in text and "\u2047" not in text and text.isascii()
    for line in (out / "train.tsv").read_text().splitlines():
        assert line.count("\t") == 1
    factset.sizes(facts)


def test_a_non_empty_out_dir_is_refused_and_left_as_it_was(tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    assert cli.main(["synth", "bios", "--people", "8", "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not empty" in err
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine\n"


def test_an_out_dir_that_is_a_file_or_read_only_is_refused(tmp_path, capsys, read_only):  # noqa: F811
    mine = tmp_path / "a-file"
    mine.write_text("mine\n")
    assert cli.main(["synth", "bios", "--people", "8", "--out-dir", str(mine)]) == 2
    assert "--out-dir is a file" in capsys.readouterr().err and mine.read_text() == "mine\n"
    ro = read_only(tmp_path / "ro") if (tmp_path / "ro").mkdir() is None else None
    assert cli.main(["synth", "bios", "--people", "8", "--out-dir", str(ro / "bios")]) == 2
    assert "cannot write here" in capsys.readouterr().err and not (ro / "bios").exists()


def test_an_empty_out_dir_is_used(tmp_path):
    (tmp_path / "empty").mkdir()
    assert cli.main(["synth", "bios", "--people", "8", "--out-dir", str(tmp_path / "empty")]) == 0
    factset.load(tmp_path / "empty")


@pytest.mark.parametrize("argv, says", [
    (["--people", "3"], "--people"),
    (["--multi", "0"], "--multi"),
    (["--celebrities", "1.5", "--multi", "2"], "--celebrities"),
    (["--celebrities", "0.5"], "needs an augmentation"),
    ([], "--out-dir DIR is required"),
])
def test_bad_options_are_one_line_errors(tmp_path, capsys, argv, says):
    out = [] if not argv else ["--out-dir", str(tmp_path / "x")]
    try:
        code = cli.main(["synth", "bios", *argv, *out])
    except SystemExit as e:  # argparse's own errors (a bad number)
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err
    assert not (tmp_path / "x").exists()


def test_without_faker_the_command_says_to_install_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "faker", None)  # import faker now raises ImportError
    assert cli.main(["synth", "bios", "--people", "8", "--out-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "synth extra" in err and "[synth]" in err
    assert not (tmp_path / "x").exists()
    with pytest.raises(SynthError):
        generate(BiosOptions(people=8))
