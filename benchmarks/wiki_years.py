"""A second relation on the course's real corpus: the year each person of ``data/wiki.txt`` was
born, where their line states it, alone or beside the birthplace.

    .venv/bin/python benchmarks/wiki_years.py --out runs/sets/birthyear             # one relation
    .venv/bin/python benchmarks/wiki_years.py --out runs/sets/born --with-places    # and the birthplace

A person's birth year is the first year (1000-2029) of their line when "born" stands in the 30
characters before it ("was born on 3 April 1920", "born 1958 in") or it lies inside a
parenthesis opened before it ("(26 February 1840 Columbus - 2 August 1904 ...)"); people whose
line states none are left out of the year questions. Every person keeps the birthplace set's
split (a dev person's year is a dev question), so the corpus is ``wiki.txt`` unchanged and no dev
or test label of the birthplace set is read. The learned figures are in docs/guides/your-facts.md.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from _common import REPO

from attnlab.core.paths import write_atomically
from attnlab.data.datasets import read_qa, read_text

YEAR = re.compile(r"\b(1[0-9]{3}|20[0-2][0-9])\b")
BORN_WITHIN = 30
PLACE_QUESTION = re.compile(r"^Where was (.+) born\?$")


def birth_year(text: str) -> str | None:
    """The year ``text`` (a line after its subject's "NAME. ") says its person was born, or None."""
    m = YEAR.search(text)
    if m is None:
        return None
    before = text[:m.start()]
    opened = before.rfind("(") > before.rfind(")")
    return m.group(1) if opened or "born" in before[-BORN_WITHIN:].lower() else None


def fact_set(lines: list[str], splits: dict[str, list[tuple[str, str]]], with_places: bool) -> dict[str, str]:
    """File name -> text: ``splits`` maps train/dev to (person, birthplace) in the birthplace
    set's order; each person's year comes from their first line."""
    years: dict[str, str | None] = {}
    for line in lines:
        name, _, text = line.partition(". ")
        years.setdefault(name, birth_year(text))
    files = {"corpus.txt": "".join(line + "\n" for line in lines)}
    for split, people in splits.items():
        rows = []
        for person, place in people:
            if with_places:
                rows.append(f"Where was {person} born?\t{place}\n")
            if years.get(person):
                rows.append(f"When was {person} born?\t{years[person]}\n")
        files[f"{split}.tsv"] = "".join(dict.fromkeys(rows))  # a namesake asked once
    toml = ['name = "born"' if with_places else 'name = "birthyear"',
            'description = "the year (and place) the people of the CS224N Wikipedia lines were born"',
            "namesakes = true"]
    if with_places:
        toml += ["", "[[relation]]", 'name = "birthplace"', 'question = "Where was {subject} born?"']
    toml += ["", "[[relation]]", 'name = "birthyear"', 'question = "When was {subject} born?"']
    files["facts.toml"] = "\n".join(toml) + "\n"
    return files


def people(path: Path) -> list[tuple[str, str]]:
    return [(PLACE_QUESTION.match(e.question).group(1), e.answer) for e in read_qa(path, labelled=True)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="a folder that does not exist or is empty")
    p.add_argument("--with-places", action="store_true", help="ask the birthplace too (two relations)")
    args = p.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        print(f"wiki_years: {args.out} is not empty: choose another folder", file=sys.stderr)
        return 2
    data = REPO / "data"
    splits = {"train": people(data / "birth_places_train.tsv"), "dev": people(data / "birth_dev.tsv")}
    files = fact_set(read_text(data / "wiki.txt").splitlines(), splits, args.with_places)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():  # facts.toml last: a folder without it is no fact set yet
        write_atomically(args.out / name, text)
    counts = {s: files[f"{s}.tsv"].count("\n") for s in splits}
    print(f"{args.out}: {counts['train']} training and {counts['dev']} dev questions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
