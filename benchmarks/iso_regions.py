"""A fact set of real facts whose answers the documents do not always spell: the subdivisions of
ISO 3166-2 (from pycountry), each with its country and its kind.

    pip install pycountry   # not a dependency of the lab
    .venv/bin/python benchmarks/iso_regions.py --out runs/sets/regions [--subjects 3000] [--seed 0]

Every subdivision whose name is unique and at most 40 characters long is a subject; --subjects
of them are drawn (seeded). Its document is one of four wordings stating the country and the
ISO code, and the kind either as ISO writes it ("Minas Gerais is a State of Brazil") or, in three
wordings of four, as prose writes it ("the region of Huancavelica", "one of the provinces of
Madang"): the answer of ``kind`` is ISO's ("Province"), so about three in four of those answers
are not written in their document, only a word that opens like them. ``country`` is written
in every document. Names keep their letters (Aḑ Ḑāli‘, Beyləqan): the set is not ASCII.

The learned figures are in docs/guides/your-facts.md; the commands that make them are there.
Subjects are split 80/10/10 into train, dev and test; output depends on --subjects, --seed and
pycountry's data (its version is printed).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

from _common import REPO  # noqa: F401  (puts the checkout's attnlab first on sys.path)

from attnlab.core.paths import write_atomically

WORDINGS = [
    "{name}. {name} is a {kind} of {country}. Its ISO 3166-2 code is {code}.",
    "{name}. The {kind_lower} of {name} lies in {country}, where it is listed under the code {code}.",
    "{name}. Listed as {code}, {name} is one of the {kind_lower}s of {country}.",
    "{name}. {country} counts {name} among its {kind_lower}s (code {code}).",
]
RELATIONS = (("country", "Which country is {subject} in?"), ("kind", "What kind of division is {subject}?"))
LONGEST_NAME = 40


def subdivisions(pycountry) -> list[tuple[str, str, str, str]]:
    """(name, country, kind, code) of every subdivision whose name is unique, in ISO order."""
    subs = list(pycountry.subdivisions)
    repeats = Counter(s.name for s in subs)
    rows = []
    for s in subs:
        if repeats[s.name] > 1 or len(s.name) > LONGEST_NAME:
            continue
        country = pycountry.countries.get(alpha_2=s.country_code)
        rows.append((s.name, getattr(country, "common_name", None) or country.name, s.type, s.code))
    return rows


def fact_set(rows: list[tuple[str, str, str, str]], n: int, seed: int) -> dict[str, str]:
    """File name -> text of the set made of ``n`` of ``rows`` (seeded)."""
    rng = random.Random(seed)
    rows = list(rows)
    rng.shuffle(rows)
    rows = rows[:n]
    corpus = "".join(rng.choice(WORDINGS).format(name=name, country=country, kind=kind, kind_lower=kind.lower(),
                                                  code=code) + "\n" for name, country, kind, code in rows)
    cut = (int(0.8 * len(rows)), int(0.9 * len(rows)))
    parts = {"train": rows[:cut[0]], "dev": rows[cut[0]:cut[1]], "test": rows[cut[1]:]}
    files = {"corpus.txt": corpus}
    for split, part in parts.items():
        files[f"{split}.tsv"] = "".join(f"Which country is {name} in?\t{country}\nWhat kind of division is "
                                        f"{name}?\t{kind}\n" for name, country, kind, _ in part)
    toml = ['name = "iso-regions"', 'description = "ISO 3166-2 subdivisions: the country and the kind of each"']
    for name, question in RELATIONS:
        toml += ["", "[[relation]]", f'name = "{name}"', f'question = "{question}"']
    files["facts.toml"] = "\n".join(toml) + "\n"
    return files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="a folder that does not exist or is empty")
    p.add_argument("--subjects", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        import pycountry
    except ImportError:
        print("iso_regions: needs pycountry (pip install pycountry)", file=sys.stderr)
        return 2
    if args.out.exists() and any(args.out.iterdir()):
        print(f"iso_regions: {args.out} is not empty: choose another folder", file=sys.stderr)
        return 2
    files = fact_set(subdivisions(pycountry), args.subjects, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():  # facts.toml last: a folder without it is no fact set yet
        write_atomically(args.out / name, text)
    print(f"{args.out}: {len(files['corpus.txt'].splitlines())} subjects (pycountry "
          f"{getattr(pycountry, '__version__', 'version unknown')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
