"""bioS-like synthetic biographies (Allen-Zhu and Li, Physics of Language Models 3.1, arXiv
2309.14316, section 2.1), written as a fact set.

Each person has a unique full name (first, middle, last), a gender (for the pronouns) and six
attributes: birth date (years 1900-2099, days 1-28, as in the paper), birth city, university,
major, employer and the employer's city (each company has one city, so the work city follows
from the employer, as in bioS). A biography is the six sentences, one template each drawn at
random (values.py), in the attributes' order, the person named in full in the first sentence and
by pronoun after it.

The paper's augmentations, given to the celebrities (a share of the people, all by default):

- ``multi`` K: K biographies a person, each with its own draw of templates;
- ``permute``: each biography's sentences in a fresh random order;
- ``fullname``: the full name in every sentence instead of the pronoun.

The others get one plain biography. Every document of a person is a corpus line that opens
``FULL NAME. `` (the fact-set format), so a person with K biographies has K documents, the first
being the one a model recalls.

The QA split is by person, as in the paper: half the people (half of each group, celebrities and
the others) have their six questions in train.tsv, and the other half in dev.tsv and test.tsv
(a quarter of the people each). people.tsv lists every person, their group, split and values.

Values: names and companies from Faker (en_US), cities from the US places of Faker's geo
provider, universities built from those names and places, majors from values.py. Faker is an
optional dependency (the ``synth`` extra) pinned to one version, since its output for a seed may
change between versions. Everything is a function of the options alone: one seeded Faker
instance and one seeded ``random.Random``, no set iteration, no clock; the files are ASCII with
``\\n`` line ends.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from ...core.outputs import write_new
from ...core.paths import PathError
from .values import ATTRIBUTES, MAJORS, PRONOUNS, RELATIONS, TEMPLATES

FAKER_VERSION = "40.54.0"
INSTALL_HINT = "pip install -e '.[synth]'"
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
N_UNIVERSITIES = 300  # the paper's pool sizes (section 2.1); its 200 cities are the 161 US places
N_COMPANIES = 263     # of Faker's geo provider here
FORBIDDEN = "\u25a1\u2047\t\r\n"  # the lab's pad and mask characters; tabs and line breaks break the files
FILES = ("corpus.txt", "train.tsv", "dev.tsv", "test.tsv", "people.tsv", "facts.toml")  # facts.toml last


class SynthError(ValueError):
    """Options that cannot make a set, or Faker missing: one line, exit code 2 on the command line."""


@dataclass(frozen=True)
class BiosOptions:
    people: int = 1000
    seed: int = 0
    multi: int = 1
    permute: bool = False
    fullname: bool = False
    celebrities: float = 1.0  # the share of people given the augmentations

    def check(self) -> None:
        if self.people < 4:
            raise SynthError(f"--people must be at least 4 (train, dev and test each need people), got {self.people}")
        if self.multi < 1:
            raise SynthError(f"--multi must be at least 1, got {self.multi}")
        if not 0.0 <= self.celebrities <= 1.0:
            raise SynthError(f"--celebrities must be a fraction from 0 to 1, got {self.celebrities}")
        if self.celebrities < 1.0 and not self.augmented:
            raise SynthError("--celebrities needs an augmentation to give them (--multi K, --permute or --fullname)")

    @property
    def augmented(self) -> bool:
        return self.multi > 1 or self.permute or self.fullname


@dataclass
class Person:
    name: str
    gender: str
    values: dict[str, str]  # attribute -> value (ATTRIBUTES)
    celebrity: bool = False
    split: str = ""
    documents: list[str] = field(default_factory=list)


@dataclass
class Bios:
    options: BiosOptions
    people: list[Person]
    files: dict[str, str]  # file name -> text


# ------------------------------------------------------------------------------ values


def faker_instance(seed: int):
    """An en_US Faker seeded for this set; SynthError (install the extra) without Faker."""
    try:
        from faker import Faker
    except ImportError:
        raise SynthError(f"synthetic biographies need Faker; install the synth extra: {INSTALL_HINT}") from None
    fake = Faker("en_US")
    fake.seed_instance(seed)
    return fake


def us_places() -> list[str]:
    """The US place names of Faker's geo provider, in its order, each once."""
    from faker.providers.geo import Provider

    places = [row[2] for row in Provider.land_coords if row[3] == "US"]
    return list(dict.fromkeys(p for p in places if p.isascii() and "." not in p))


def _unique(draw, n: int, what: str) -> list[str]:
    made: dict[str, None] = {}
    for _ in range(50 * n):
        made.setdefault(draw(), None)
        if len(made) == n:
            return list(made)
    raise SynthError(f"could not draw {n} different {what}")


@dataclass(frozen=True)
class Pools:
    cities: list[str]
    universities: list[str]
    companies: list[tuple[str, str]]  # (company, its city)


def pools(fake, rng: random.Random) -> Pools:
    cities = us_places()
    shapes = ("University of {c}", "{n} University", "{n} College", "{c} State University",
              "{c} Institute of Technology", "{n} Institute")
    universities = _unique(lambda: rng.choice(shapes).format(c=rng.choice(cities), n=fake.last_name()),
                           N_UNIVERSITIES, "universities")
    companies = [(c, rng.choice(cities)) for c in _unique(fake.company, N_COMPANIES, "companies")]
    return Pools(cities, universities, companies)


def _full_name(fake, rng: random.Random) -> tuple[str, str]:
    gender = rng.choice(("female", "male"))
    first = fake.first_name_female if gender == "female" else fake.first_name_male
    given = first()
    middle = first()
    while middle == given:
        middle = first()
    return f"{given} {middle} {fake.last_name()}", gender


def draw_people(fake, rng: random.Random, n: int, pool: Pools) -> list[Person]:
    """``n`` people with different full names and their six values."""
    people: list[Person] = []
    taken: set[str] = set()
    for _ in range(20 * n + 100):
        name, gender = _full_name(fake, rng)
        if name in taken:
            continue
        taken.add(name)
        company, company_city = rng.choice(pool.companies)
        date = f"{MONTHS[rng.randrange(12)]} {rng.randint(1, 28)}, {rng.randint(1900, 2099)}"
        values = {"birth_date": date, "birth_city": rng.choice(pool.cities),
                  "university": rng.choice(pool.universities), "major": rng.choice(MAJORS),
                  "employer": company, "work_city": company_city}
        people.append(Person(name, gender, values))
        if len(people) == n:
            return people
    raise SynthError(f"could not draw {n} different full names; ask for fewer --people")


# ------------------------------------------------------------------------------ documents


def biography(rng: random.Random, person: Person, *, permute: bool, fullname: bool) -> str:
    """One document: ``NAME. `` and the six sentences; the first sentence names the person in
    full, the others too with ``fullname``, else by pronoun."""
    order = list(ATTRIBUTES)
    if permute:
        rng.shuffle(order)
    subject, possessive, inner = PRONOUNS[person.gender]
    sentences = []
    for i, attribute in enumerate(order):
        template = rng.choice(TEMPLATES[attribute])
        named = i == 0 or fullname
        sentences.append(template.format(S=person.name if named else subject,
                                         P=f"{person.name}'s" if named else possessive,
                                         p=inner, v=person.values[attribute]))
    return f"{person.name}. " + " ".join(sentences)


def write_documents(rng: random.Random, people: list[Person], options: BiosOptions) -> list[str]:
    """Every person's documents (in ``Person.documents``) and the corpus lines: everyone's first
    document in order, then the celebrities' second ones, and so on."""
    for p in people:
        if p.celebrity:
            p.documents = [biography(rng, p, permute=options.permute, fullname=options.fullname)
                           for _ in range(options.multi)]
        else:
            p.documents = [biography(rng, p, permute=False, fullname=False)]
    rounds = max(len(p.documents) for p in people)
    return [p.documents[r] for r in range(rounds) for p in people if r < len(p.documents)]


def assign_groups(rng: random.Random, people: list[Person], options: BiosOptions) -> None:
    """Mark the celebrities, then split each group: half train, the rest alternately dev, test."""
    k = round(options.celebrities * len(people))
    for i in sorted(rng.sample(range(len(people)), k)):
        people[i].celebrity = True
    for group in (True, False):
        members = [p for p in people if p.celebrity is group]
        rng.shuffle(members)
        half = (len(members) + 1) // 2
        for j, p in enumerate(members):
            p.split = "train" if j < half else ("dev", "test")[(j - half) % 2]


# ------------------------------------------------------------------------------ the fact set


def qa_rows(people: list[Person], split: str) -> str:
    lines = [f"{question.format(subject=p.name)}\t{p.values[attribute]}"
             for p in people if p.split == split for attribute, _, question in RELATIONS]
    return "".join(line + "\n" for line in lines)


def question_line() -> str:
    """A corpus line about no one that asks every question form, so that the corpus (which sets
    a model's characters) holds the questions' characters ('?', 'W' ...)."""
    return "Questions about these people: " + " ".join(q.format(subject="this person") for _, _, q in RELATIONS)


def describe(options: BiosOptions) -> str:
    o = options
    switches = [f"{o.multi} biographies each" if o.multi > 1 else "one biography each",
                "sentence order shuffled per biography" if o.permute else "sentences in a fixed order",
                "the full name in every sentence" if o.fullname else "pronouns after the first sentence"]
    if not o.augmented:
        who = f"{o.people} people, one plain biography each"
    elif o.celebrities >= 1.0:
        who = f"{o.people} people, " + ", ".join(switches)
    else:
        who = (f"{o.people} people; celebrities ({o.celebrities:g} of them): " + ", ".join(switches)
               + "; the others one plain biography each")
    return (f"bioS-like synthetic biographies (Allen-Zhu and Li, Physics of Language Models 3.1, "
            f"arXiv 2309.14316), seed {o.seed}: {who}. Six attributes a person; QA train on half the "
            f"people, dev and test a quarter each (people.tsv says who is where).")


def command_line(options: BiosOptions, out: str = "DIR") -> str:
    o = options
    parts = [f"attnlab synth bios --people {o.people} --seed {o.seed}"]
    parts += [f"--multi {o.multi}"] if o.multi > 1 else []
    parts += ["--permute"] if o.permute else []
    parts += ["--fullname"] if o.fullname else []
    parts += [f"--celebrities {o.celebrities:g}"] if o.celebrities < 1.0 else []
    return " ".join(parts + [f"--out-dir {out}"])


def facts_toml(options: BiosOptions) -> str:
    s = json.dumps  # a JSON string of ASCII text is a TOML basic string
    o = options
    lines = [f"name = {s('bios')}", f"description = {s(describe(o))}", ""]
    for _, name, question in RELATIONS:
        lines += ["[[relation]]", f"name = {s(name)}", f"question = {s(question)}", ""]
    lines += ["[generator]", f"command = {s(command_line(o))}", f"people = {o.people}", f"seed = {o.seed}",
              f"multi = {o.multi}", f"permute = {s(o.permute)}", f"fullname = {s(o.fullname)}",
              f"celebrities = {o.celebrities!r}", f"faker = {s(FAKER_VERSION)}"]
    return "\n".join(lines) + "\n"


def people_tsv(people: list[Person]) -> str:
    header = ["name", "group", "split", "documents", *ATTRIBUTES]
    rows = [[p.name, "celebrity" if p.celebrity else "plain", p.split, str(len(p.documents)),
             *(p.values[a] for a in ATTRIBUTES)] for p in people]
    return "".join("\t".join(r) + "\n" for r in [header, *rows])


def generate(options: BiosOptions) -> Bios:
    """The whole set in memory, a function of ``options`` alone."""
    options.check()
    fake = faker_instance(options.seed)
    rng = random.Random(f"attnlab synth bios {options.seed}")
    people = draw_people(fake, rng, options.people, pools(fake, rng))
    assign_groups(rng, people, options)
    corpus = write_documents(rng, people, options) + [question_line()]
    files = {"corpus.txt": "".join(line + "\n" for line in corpus),
             **{f"{split}.tsv": qa_rows(people, split) for split in ("train", "dev", "test")},
             "people.tsv": people_tsv(people), "facts.toml": facts_toml(options)}
    _check_characters(people, files)
    return Bios(options, people, files)


def _check_characters(people: list[Person], files: dict[str, str]) -> None:
    """No field holds a tab, a line break, PAD or MASK, and every file is ASCII (a guard against a
    changed Faker: en_US values are plain ASCII)."""
    for p in people:
        for text in (p.name, *p.values.values()):
            if any(c in FORBIDDEN for c in text) or not text.strip():
                raise SynthError(f"a drawn value cannot be written: {text!r}")
    for name, text in files.items():
        if not text.isascii():
            raise SynthError(f"{name} would contain a character outside ASCII")


def refuse_non_empty(out: str | Path) -> None:
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "is not empty" if out.is_dir() else "is not a folder"
        raise PathError(out, f"{what}; choose a new or empty folder")


def write(bios: Bios, out: str | Path) -> Path:
    """Write the set into ``out`` (new or empty), each file whole, facts.toml last."""
    out = Path(out)
    refuse_non_empty(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        write_new(out / name, bios.files[name])
    return out
