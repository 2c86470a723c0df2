"""benchmarks/factsets.py: invented fact sets (towns, species, firms, books, the islands example) are
deterministic, keep the format's promises, and never overwrite a folder; benchmarks/iso_regions.py
makes a set of real facts whose answers are often written otherwise."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from attnlab.data.corpus import CorpusIndex, contains_words
from attnlab.data.vocab import Vocab
from tests.conftest import benchmark_fixture

factsets = benchmark_fixture("factsets")

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "facts" / "islands"
EXAMPLE_COMMAND = ["benchmarks/factsets.py", "example", "--seed", "0", "--out"]  # as its README says
FILES = ["corpus.txt", "dev.tsv", "facts.toml", "test.tsv", "train.tsv"]
SMALL = {"towns": 120, "species": 120, "firms": 120, "example": 60, "books": 120}


def _make(factsets, kind: str, out: Path, n: int | None = None, seed: int = 0) -> Path:
    n = SMALL[kind] if n is None else n
    assert factsets.main([kind, "--subjects", str(n), "--seed", str(seed), "--out", str(out)]) == 0
    return out


def _read(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _load(folder: Path):
    """The set as a reader sees it: relations, corpus lines, and (split, subject, relation, answer)."""
    meta = tomllib.loads((folder / "facts.toml").read_text(encoding="utf-8"))
    relations = {r["name"]: r["question"] for r in meta["relation"]}
    corpus = (folder / "corpus.txt").read_text(encoding="utf-8").splitlines()
    rows = []
    for split in ("train", "dev", "test"):
        for line in (folder / f"{split}.tsv").read_text(encoding="utf-8").splitlines():
            question, answer = line.split("\t")
            matches = []
            for rel, template in relations.items():
                head, tail = template.split("{subject}")
                if question.startswith(head) and question.endswith(tail) and len(question) > len(head) + len(tail):
                    matches.append((rel, question[len(head): len(question) - len(tail)]))
            assert len(matches) == 1, (question, matches)
            rows.append((split, matches[0][1], matches[0][0], answer))
    return meta, relations, corpus, rows


@pytest.mark.parametrize("kind", ["towns", "species", "firms", "example", "books"])
def test_the_same_seed_writes_the_same_bytes_and_another_seed_other_ones(factsets, tmp_path, kind):
    a = _read(_make(factsets, kind, tmp_path / "a"))
    b = _read(_make(factsets, kind, tmp_path / "b"))
    c = _read(_make(factsets, kind, tmp_path / "c", seed=1))
    assert sorted(a) == FILES and a == b
    assert a["corpus.txt"] != c["corpus.txt"] and a["train.tsv"] != c["train.tsv"]


@pytest.mark.parametrize("kind", ["towns", "species", "firms", "example", "books"])
def test_every_answer_is_written_in_its_subjects_document(factsets, tmp_path, kind):
    meta, relations, corpus, rows = _load(_make(factsets, kind, tmp_path / "set"))
    assert meta["name"] and meta["description"] and "\n" not in meta["description"]
    assert len(relations) == {"towns": 2, "species": 3, "firms": 2, "example": 2, "books": 2}[kind]
    index = CorpusIndex(corpus)
    for _, subject, _, answer in rows:
        doc = index.line_of(subject)
        assert doc is not None and doc.startswith(f"{subject}. ")
        assert contains_words(doc, answer), (subject, answer, doc)
        assert contains_words(doc.split(". ", 1)[1], answer)  # in the text, not only the name
    # each subject has all its relations, each once; a few lines are about no subject
    per_subject = Counter((s, r) for _, s, r, _ in rows)
    subjects = {s for _, s, _, _ in rows}
    assert set(per_subject.values()) == {1} and len(per_subject) == len(subjects) * len(relations)
    assert len(subjects) == SMALL[kind] and 3 <= len(corpus) - len(subjects) <= 10


@pytest.mark.parametrize("kind", ["towns", "species", "firms", "example", "books"])
def test_splits_are_disjoint_by_subject_and_sized_as_promised(factsets, tmp_path, kind):
    _, _, _, rows = _load(_make(factsets, kind, tmp_path / "set", n=200))
    split_of: dict[str, set[str]] = {}
    for split, subject, _, _ in rows:
        split_of.setdefault(subject, set()).add(split)
    assert all(len(s) == 1 for s in split_of.values())
    sizes = Counter(next(iter(s)) for s in split_of.values())
    assert sizes == {"train": 130, "dev": 35, "test": 35}


@pytest.mark.parametrize("kind", ["towns", "species", "firms", "example", "books"])
def test_subject_names_are_unique_and_each_has_one_document(factsets, tmp_path, kind):
    folder = _make(factsets, kind, tmp_path / "set", n=300)
    _, _, corpus, rows = _load(folder)
    subjects = sorted({s for _, s, _, _ in rows})
    assert len(subjects) == 300
    openings = Counter(line.split(". ", 1)[0] for line in corpus)
    assert all(openings[s] == 1 for s in subjects)
    # no subject's name is whole words inside another's (nor any line's opening another subject)
    for s in subjects:
        assert sum(line.startswith(f"{s}. ") for line in corpus) == 1
    for name, data in _read(folder).items():
        text = data.decode("utf-8")
        assert "\u25a1" not in text and "\u2047" not in text and "\r" not in text and text.endswith("\n")
        if name.endswith(".tsv"):
            assert all(line.count("\t") == 1 and line == line.strip() for line in text.splitlines())


@pytest.mark.parametrize("kind,lo,hi,mean", [("towns", 140, 280, (180, 230)), ("species", 140, 280, (180, 235)),
                                             ("firms", 150, 290, (180, 230)),
                                             ("example", 95, 150, (105, 140)), ("books", 90, 230, (120, 170))])
def test_documents_have_the_promised_length_and_distractors(factsets, tmp_path, kind, lo, hi, mean):
    _, relations, corpus, rows = _load(_make(factsets, kind, tmp_path / "set", n=300))
    index = CorpusIndex(corpus)
    docs = {s: index.line_of(s) for _, s, _, _ in rows}
    lengths = [len(d) for d in docs.values()]
    assert lo <= min(lengths) and max(lengths) <= hi and mean[0] <= sum(lengths) / len(lengths) <= mean[1]
    values = {rel: {a for _, _, r, a in rows if r == rel} for rel in relations}
    answer = {(s, r): a for _, s, r, a in rows}
    # a document names other values of the type it answers: another country, sea, habitat ...
    with_distractor = {rel: sum(any(v != answer[s, rel] and contains_words(d, v) for v in values[rel])
                                for s, d in docs.items()) / len(docs) for rel in relations if rel != "capital"}
    assert all(share >= 0.4 for share in with_distractor.values()), with_distractor
    # the sentences come in varied order: the true fact's sentence is not always in one place
    first = Counter(d.split(". ")[1].split()[0] for d in docs.values())
    assert len(first) >= 3 and first.most_common(1)[0][1] < 0.5 * len(docs)


@pytest.mark.parametrize("kind", ["towns", "species", "firms", "example", "books"])
def test_every_document_names_a_distractor_of_some_relation(factsets, kind):
    fs = factsets.generate(kind, 300, 3)
    found = [factsets.distractors(fs, s) for s in fs.subjects]
    assert all(any(d.values()) for d in found)
    for rel, _ in fs.relations:  # each relation's distractors are common, and never the answer
        assert sum(bool(d[rel]) for d in found) >= 0.5 * len(found), rel
        assert all(s.answers[rel] not in d[rel] for s, d in zip(fs.subjects, found))


@pytest.mark.parametrize("kind", ["towns", "species", "firms", "example", "books"])
def test_the_corpus_holds_every_character_of_the_questions_and_answers(factsets, tmp_path, kind):
    # the corpus defines the model's vocabulary: a "?" only in the questions would not encode
    folder = _make(factsets, kind, tmp_path / "set", n=3)
    vocab = Vocab.from_text((folder / "corpus.txt").read_text(encoding="utf-8"))
    for split in ("train", "dev", "test"):
        for line in (folder / f"{split}.tsv").read_text(encoding="utf-8").splitlines():
            for text in line.split("\t"):
                vocab.encode(text)


def test_books_have_an_author_each(factsets):
    """The books set's authors never repeat (a value can only be read from its document), and no
    author is whole words inside a book's name or another author's."""
    fs = factsets.generate("books", 600, 1)
    authors = [s.answers["author"] for s in fs.subjects]
    assert len(set(authors)) == len(authors)
    names = [s.name for s in fs.subjects]
    assert not any(contains_words(n, a.split()[1]) for n in names[:100] for a in authors)


def test_lead_sentences_push_the_facts_further_in_and_change_nothing_else(factsets, tmp_path):
    plain = _make(factsets, "towns", tmp_path / "plain")
    assert factsets.main(["towns", "--subjects", str(SMALL["towns"]), "--lead", "7", "--out", str(tmp_path / "long")]) == 0
    long = tmp_path / "long"
    for name in ("train.tsv", "dev.tsv", "test.tsv", "facts.toml"):
        assert (long / name).read_bytes() == (plain / name).read_bytes()
    before = (plain / "corpus.txt").read_text().splitlines()
    after = (long / "corpus.txt").read_text().splitlines()
    assert len(before) == len(after)
    leads = []
    for b, a in zip(before, after):
        if ". " not in b:
            assert a == b
            continue
        name, rest = b.split(". ", 1)
        assert a.startswith(f"{name}. ") and a.endswith(" " + rest)
        added = a[len(name) + 2: len(a) - len(rest) - 1]
        count = sum(added.count(lead) for lead in factsets._LEAD)
        assert 1 <= count <= 7 and len(added) == sum(len(x) for x in factsets._LEAD if x in added) + count - 1
        leads.append(count)
    assert len(set(leads)) > 3  # one to seven, not a fixed number
    # the answers are still written once in their documents (the generator's own check ran), further in
    _, _, corpus, rows = _load(long)
    index = CorpusIndex(corpus)
    assert all(contains_words(index.line_of(subject), answer) == 1 for _, subject, _, answer in rows)
    assert factsets.main(["towns", "--lead", "-1", "--out", str(tmp_path / "bad")]) == 2
    assert not (tmp_path / "bad").exists()


def test_most_frequent_answer_baselines_are_low(factsets, tmp_path):
    _, relations, _, rows = _load(_make(factsets, "towns", tmp_path / "set", n=1000))
    for rel in relations:
        counts = Counter(a for _, _, r, a in rows if r == rel)
        assert counts.most_common(1)[0][1] / sum(counts.values()) < 0.07, rel


def test_the_committed_example_is_what_its_command_writes(tmp_path):
    out = tmp_path / "islands"
    subprocess.run([sys.executable, *EXAMPLE_COMMAND, str(out)], cwd=REPO, check=True, capture_output=True)
    committed = _read(EXAMPLE)
    assert "README.md" in committed and " ".join(EXAMPLE_COMMAND) in committed["README.md"].decode()
    del committed["README.md"]
    assert _read(out) == committed


def test_a_non_empty_out_folder_is_refused_and_left_alone(factsets, tmp_path, capsys):
    out = _make(factsets, "example", tmp_path / "set", n=20)
    (out / "notes.txt").write_text("mine\n")
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}
    assert factsets.main(["example", "--subjects", "20", "--seed", "5", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "refusing" in err
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()} == before
    # from the command line too: exit status 2, and a file given as --out is refused the same way
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "factsets.py"), "towns", "--out", str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == "" and len(run.stderr.strip().splitlines()) == 1
    assert factsets.main(["towns", "--subjects", "10", "--out", str(out / "notes.txt")]) == 2
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()} == before


def test_an_empty_out_folder_is_used_and_no_temporary_file_is_left(factsets, tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    _make(factsets, "species", out, n=30)
    assert sorted(p.name for p in out.iterdir()) == FILES


# ------------------------------------------------------------------ benchmarks/iso_regions.py

iso_regions = benchmark_fixture("iso_regions")

REGIONS = [("Minas Gerais", "Brazil", "State", "BR-MG"), ("Madang", "Papua New Guinea", "Province", "PG-MPM"),
           ("Huancavelica", "Peru", "Region", "PE-HUV"), ("Aḑ Ḑāli‘", "Yemen", "Governorate", "YE-DA"),
           ("Beyləqan", "Azerbaijan", "Rayon", "AZ-BEY")]


def test_iso_regions_is_a_fact_set_whose_kinds_are_often_written_otherwise(iso_regions, tmp_path):
    """Made from rows as pycountry gives them (no pycountry needed here): the folder loads as a
    fact set, every country is written in its document, and a kind is written as ISO spells it
    only in the first of the four wordings."""
    from attnlab.data import factset

    rows = [(f"{name} {i}", country, kind, f"{code}{i}") for i in range(40) for name, country, kind, code in REGIONS]
    files = iso_regions.fact_set(rows, 200, seed=0)
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    facts = factset.load(tmp_path)
    assert facts.schema.names == ("country", "kind")
    index = CorpusIndex(files["corpus.txt"].splitlines())
    written = Counter()
    for line in files["train.tsv"].splitlines() + files["dev.tsv"].splitlines():
        question, answer = line.split("\t")
        asked = facts.schema.parse(question)
        written[asked.relation.name, contains_words(index.line_of(asked.subject), answer)] += 1
    assert written["country", False] == 0
    spelled = written["kind", True] / (written["kind", True] + written["kind", False])
    assert 0.1 < spelled < 0.45  # about one wording in four


def test_iso_regions_without_pycountry_says_so(iso_regions, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pycountry", None)  # an import of it then fails
    assert iso_regions.main(["--out", str(tmp_path / "r")]) == 2
    assert "needs pycountry (pip install pycountry)" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------ benchmarks/wiki_years.py

wiki_years = benchmark_fixture("wiki_years")


@pytest.mark.parametrize("text, year", [
    ("Corrsin was born on 3 April 1920 in Philadelphia .", "1920"),
    ("Eduard Ender (3 March 1822 Rome -- 28 December 1883 London) was an Austrian painter .", "1822"),
    ("Iago Dekanozishvili (born in 1951 in Tbilisi) is a Georgian artist .", "1951"),
    ("Born in Sheffield, Hofton began his career at Kiveton Park, before moving in April 1908 .", None),
    ("Georgina Willis is a film director who was born in Australia .", None),
    ("He played for the club (as a forward) and in 1998 moved to Leeds, born again .", None)])
def test_a_birth_year_is_one_the_line_says_the_person_was_born_in(wiki_years, text, year):
    assert wiki_years.birth_year(text) == year


def test_wiki_years_keeps_the_birthplace_split_and_loads_as_a_fact_set(wiki_years, tmp_path):
    from attnlab.data import factset

    lines = ["Ann Lee. Ann Lee (born 1901 in Oslo) was a poet .", "Bo Ek. Bo Ek was born in Lund .",
             "Cy Dow. Cy Dow was born on 2 May 1950 in Leeds ."]
    splits = {"train": [("Ann Lee", "Oslo"), ("Bo Ek", "Lund")], "dev": [("Cy Dow", "Leeds")]}
    files = wiki_years.fact_set(lines, splits, with_places=True)
    assert files["train.tsv"] == ("Where was Ann Lee born?\tOslo\nWhen was Ann Lee born?\t1901\n"
                                  "Where was Bo Ek born?\tLund\n")
    assert files["dev.tsv"] == "Where was Cy Dow born?\tLeeds\nWhen was Cy Dow born?\t1950\n"
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert factset.load(tmp_path).schema.names == ("birthplace", "birthyear")
    alone = wiki_years.fact_set(lines, splits, with_places=False)
    assert alone["train.tsv"] == "When was Ann Lee born?\t1901\n" and "birthplace" not in alone["facts.toml"]


def test_wiki_years_never_writes_into_a_folder_that_holds_files(wiki_years, tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    assert wiki_years.main(["--out", str(tmp_path)]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
