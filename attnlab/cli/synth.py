"""`attnlab synth bios`: write a synthetic fact set of bioS-like biographies (Allen-Zhu and Li,
Physics of Language Models 3.1) with the paper's augmentations. The generator is the library's
(attnlab/data/synth/bios.py, on Faker: the optional extra ``synth``); this module parses the
flags, calls it and prints where the set is."""

from __future__ import annotations

import argparse

from ..core import bounds, paths
from ..data.synth import bios
from . import flags

PEOPLE = bounds.Bound(int, 4, name="people")
MULTI = bounds.Bound(int, 1, name="K")
SHARE = bounds.UNIT
KINDS = ("bios",)


def register(command) -> None:
    p = command("synth", "write a synthetic fact set: bios, bioS-like biographies of invented people "
                         "(Physics of Language Models 3.1) with the paper's augmentations", run)
    p.add_argument("kind", choices=KINDS, help="what to write: bios (six attributes a person)")
    p.add_argument("--people", type=PEOPLE.argtype(), default=1000, metavar="N", help="how many people, at least 4")
    p.add_argument("--seed", type=bounds.SEED.argtype(), default=0,
                   help="the set is a function of its options and this seed")
    p.add_argument("--multi", type=MULTI.argtype(), default=1, metavar="K",
                   help="K biographies a celebrity (everyone, unless --celebrities), each with its own "
                        "templates (the paper's multiK)")
    p.add_argument("--permute", action="store_true",
                   help="shuffle the sentence order of each celebrity biography (default: fixed order)")
    p.add_argument("--fullname", action="store_true",
                   help="the full name in every sentence of a celebrity biography (default: pronouns after "
                        "the first sentence)")
    p.add_argument("--celebrities", type=SHARE.argtype(), default=1.0, metavar="F",
                   help="the share of people given the augmentations above; the others get one plain "
                        "biography (default: 1, everyone)")
    flags.out_dir(p, None, "the folder to write (new or empty): corpus.txt, train.tsv, dev.tsv, test.tsv, "
                           "people.tsv, facts.toml; required (default: none)")
    # The spelling of the output flag: accepted, not shown, not deprecated.
    p.add_argument("--out", dest="out_dir", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    if not args.out_dir:
        raise ValueError("--out-dir DIR is required (the folder to write the fact set into)")
    paths.output_dir(args.out_dir, "--out-dir")  # before any work
    bios.refuse_non_empty(args.out_dir)
    options = bios.BiosOptions(people=args.people, seed=args.seed, multi=args.multi, permute=args.permute,
                               fullname=args.fullname, celebrities=args.celebrities)
    made = bios.generate(options)
    out = bios.write(made, args.out_dir)
    celebrities = sum(p.celebrity for p in made.people)
    documents = sum(len(p.documents) for p in made.people)
    splits = {s: sum(p.split == s for p in made.people) for s in ("train", "dev", "test")}
    print(f"wrote {out}: {len(made.people)} people ({celebrities} given the augmentations), {documents} "
          f"biographies; QA train {splits['train']} people, dev {splits['dev']}, test {splits['test']}")
    print(f"a fact set: attnlab learn {out}, or --facts {out} with another command "
          "(docs/guides/synthetic-bios.md)")
    return 0
