"""Invented fact sets: a folder of documents about made-up subjects and questions about them.

A fact set is a folder holding

- ``corpus.txt``: one document a line; a document about a subject opens ``SUBJECT. `` (as
  ``data/wiki.txt`` does for people). Each subject has exactly one document; a few other lines
  are about no subject (the countries, rivers, regions of the invented world), one of them a
  question, so that the corpus, which defines a model's characters, holds every character of
  the question files ("?", the "W" of "Which").
- ``train.tsv``, ``dev.tsv``, ``test.tsv``: ``question<TAB>answer``; every question is one
  relation's template with the subject filled in, and the answer is written, as whole words and
  exactly once, in that subject's document. A subject's questions are all in one split (about
  65% of subjects train, 17.5% dev, 17.5% test); every document is in the corpus.
- ``facts.toml``: ``name``, ``description`` and one ``[[relation]]`` table (``name``,
  ``question`` with a ``{subject}`` slot) per question form.

Kinds (each differs from the birthplace set, which is about people):

- ``towns`` (default 3000 subjects): invented towns; ``country`` and ``river``.
- ``species`` (default 3000): invented animals; ``habitat``, ``diet`` and ``discoverer``.
- ``firms`` (default 3000): invented firms; ``city`` and ``founded`` (a year, among other years).
- ``example`` (default 300): invented islands, shorter documents; ``sea`` and ``capital``
  (committed at examples/facts/islands/).
- ``books`` (default 3000): invented books; ``author`` (every author a different person: no
  answer repeats) and ``year``.

Every document states each fact once, in one of several wordings, and also names other values of
the same type in other wordings (distractors: a trading partner's country, a canal's river, a
relative's habitat, a later student of the animal, a firm's branch city or the year it was sold, a
neighbouring sea, a port that is not the capital), with filler sentences for length; the order of
the sentences is shuffled per document, so the value to answer is found by the sentence's
wording, not its place. Answers are drawn
from tens to hundreds of values so that always giving the most frequent one scores a few per cent.

``--lead MAX`` makes the documents longer the way real ones often are: one to MAX general
sentences about a place ("A weekly market is held in the square.", whatever the kind) after each
line's opening ``NAME. ``, before its facts, so that the facts lie further into the document (the
recall must reach them).

Output is a function of the kind, --subjects, --seed and --lead only (one ``random.Random(seed)``, no
set iteration, no clock), written byte for byte the same on every machine: plain ASCII with
``\\n`` line ends. Standard library only.

Run: python benchmarks/factsets.py KIND [--subjects N] [--seed S] [--lead MAX] --out DIR
(DIR must not exist or be empty; each file is written to a temporary file and moved into place,
facts.toml last.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

SPLITS = ("train", "dev", "test")
DEV_SHARE = TEST_SHARE = 0.175
FORBIDDEN = "\u25a1\u2047\t\r"  # the lab's pad and mask characters; tabs and CRs break the files


# ------------------------------------------------------------------------------ what a set is


@dataclass
class Subject:
    name: str
    doc: str  # the whole corpus line, "NAME. sentence sentence ..."
    answers: dict[str, str]  # relation -> answer
    split: str = ""


@dataclass
class FactSet:
    kind: str
    description: str
    relations: list[tuple[str, str]]  # (name, question template with {subject})
    subjects: list[Subject]
    other_lines: list[str]
    values: dict[str, list[str]]  # relation -> every value of its type (answers and distractors)
    corpus: list[str] = field(default_factory=list)  # the corpus lines in file order
    rows: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # split -> (question, answer) in file order


# ------------------------------------------------------------------------------ names

# Words no invented name may be (lower case): common English words the syllables can spell.
# Every word of a kind's templates and fixed vocabulary is added to this per kind.
_ENGLISH = set("""
a an and are as at be by do for from go has he her his in is it me my no of on or so the to up we
also area band bark bass bay bell bend best bold born boss brook burn call can car care cast cold
come cost dale dam dan darn dell den dove down dull dust east eel else fall far farm fell fen field
fill film find five ford fort gate gold got hall halt hand hard harm have hell helm hen her here
hill hive hold hole holt home horn host ill ink isle kill kind land lane last lass lay led lend
less lest lift lime line list live loft lone long lord lose loss lost love main mall man mane mark
mass mast mead mean meld melt mend mere mess met mild mile mill mind mine miss mist moat mole moor
more morn moss most move must near nest net new none nor norm not now null oak old one orb ore
over pale pall pan park pass past pen pier pile pine pole pond pool port post rail ran rest ride
rim ring rise road rock role roll rose rove row rule run rust said sale salt same sand sank sea
seal sell send set shed ship shore sill silt sold some son sore sort sound spa stay stem step
still stock stone sum sun tall tan tar tarn tell ten tend term test than that them then there
these they this thorn till toll tolls ton tone torn toss tower town vale van vast vent vest vile
vine wall wand ward warm warn was well went were west what when wild will wind wine wing wise
with wold wore worn yard year yell yet zone grand selling telling falling calling rolling
morning darling willing killing filling melting holding
""".split())


def _word_set(*texts: str) -> set[str]:
    return {w.lower() for t in texts for w in re.findall(r"[A-Za-z]+", t)}


class Names:
    """Invented name tokens, each drawn until it is new: never a word of the templates, a common
    English word, or a token drawn before (compared in lower case). Multi-word values keep their
    invented token unique, so no value is whole words inside another value or a subject's name."""

    def __init__(self, rng: random.Random, reserved: set[str]):
        self.rng = rng
        self.taken = set(_ENGLISH) | {w.lower() for w in reserved}

    def token(self, make: Callable[[random.Random], str], what: str) -> str:
        for _ in range(5000):
            word = make(self.rng)
            if word.lower() not in self.taken and len(word) >= 3:
                self.taken.add(word.lower())
                return word
        raise SystemExit(f"factsets: ran out of invented {what} names; ask for fewer --subjects")


def _syllables(*parts: Sequence[str]) -> Callable[[random.Random], str]:
    """A maker that joins one choice from each list of parts and capitalises the result."""
    def make(rng: random.Random) -> str:
        return "".join(rng.choice(p) for p in parts).capitalize()
    return make


def _weighted_pool(rng: random.Random, values: list[str]) -> Callable[[], str]:
    """Draw from ``values`` with fixed random weights in [1, 2): some values are commoner than
    others, but the most frequent is still only about 1.3 / len(values) of the draws."""
    weights = [1.0 + rng.random() for _ in values]
    return lambda: rng.choices(values, weights)[0]


def _other(rng: random.Random, values: list[str], but: Sequence[str]) -> str:
    """A value of the same type that is none of ``but``."""
    while True:
        v = rng.choice(values)
        if v not in but:
            return v


def _year(rng: random.Random, lo: int = 1100, hi: int = 1890) -> int:
    return rng.randint(lo, hi)


def _world_lines(rng: random.Random, n: int, asked: str, draw: Callable[[], str]) -> list[str]:
    """The lines about no subject of a set of ``n`` subjects: ``asked`` (the line that puts the
    questions' characters in the corpus), then ``max(3, n // 50) - 1`` different lines ``draw``
    makes (fewer if it cannot make that many)."""
    k = max(3, n // 50) - 1
    lines: list[str] = []
    for _ in range(50 * k):
        line = draw()
        if line not in lines:
            lines.append(line)
        if len(lines) == k:
            break
    return [asked] + lines


def _document(rng: random.Random, name: str, build: Callable[[], list[str]], lo: int, hi: int) -> str:
    """``NAME. `` then the sentences ``build`` draws, shuffled; drawn again until the document's
    length is within [lo, hi]."""
    for _ in range(1000):
        sentences = build()
        rng.shuffle(sentences)
        doc = f"{name}. " + " ".join(sentences)
        if lo <= len(doc) <= hi:
            return doc
    raise AssertionError(f"no document for {name!r} of {lo}-{hi} characters")  # a template bug


# ------------------------------------------------------------------------------ towns

_TOWN_TRUE_COUNTRY = [
    "{T} is a town in {C}.",
    "{T} lies in the {dir} of {C}.",
    "It is a {adj} town in {C}.",
    "The town belongs to {C}.",
    "{T} is one of the oldest towns in {C}.",
    "It has been part of {C} since {year}.",
]
_TOWN_OTHER_COUNTRY = [
    "It trades mostly with {X}.",
    "Its sister town lies in {X}.",
    "Many of its first settlers came from {X}.",
    "Its wool is sold as far away as {X}.",
    "The border with {X} is a day's ride away.",
    "An army from {X} burned it in {year}.",
]
_TOWN_TRUE_RIVER = [
    "The {R} flows through {T}.",
    "{T} stands on the banks of the {R}.",
    "The river {R} runs through the town.",
    "It is built on both banks of the {R}.",
    "The town grew up where the old road crosses the {R}.",
]
_TOWN_OTHER_RIVER = [
    "Its water comes from the {X}.",
    "A canal links it to the {X}.",
    "The {X} rises in the hills to the {dir}.",
    "Its mills once sent flour down the {X}.",
    "Its fishermen cast their nets in the {X}.",
]
_TOWN_FILLER = [
    "About {pop} people live there.",
    "It has a population of {pop}.",
    "It was founded in {year}.",
    "Its charter dates from {year}.",
    "It is known for its {known}.",
    "Its stone bridge was built in {year}.",
    "The town hall stands on the main square.",
    "A market is held there every {day}.",
    "Its church has a tall {tower} tower.",
]
_KNOWN_FOR = ["wool market", "clock tower", "cheese", "glassworks", "spring fair", "tanneries",
              "orchards", "horse fair", "salt pans", "bell foundry", "rope walks", "cider"]
_DIRECTIONS = ["north", "south", "east", "west", "north-east", "north-west", "south-east", "south-west"]
_TOWN_ADJ = ["small", "busy", "quiet", "old", "market", "river", "walled", "hill"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
_TOWER = ["square", "round", "slate", "copper", "wooden", "stone"]
_TOWN_SUFFIX = ["Bay", "Cross", "Hill", "Vale", "Wells", "Market", "Green", "Bridge", "Haven", "Ford"]

_town_word = _syllables(
    ["var", "kes", "mor", "tal", "bren", "dor", "hal", "ost", "wel", "ald", "cor", "fen", "gar", "hol",
     "lam", "mar", "nor", "pel", "rav", "sel", "thor", "ulm", "vel", "wick", "yar", "ber", "cal", "dun",
     "elm", "fal", "grim", "har", "ing", "kir", "lin", "mel", "nes", "orm", "pen", "quen", "ros", "stan",
     "tor", "ves", "wol", "zel", "bram", "cran", "eld", "gos"],
    ["", "", "", "so", "ra", "li", "en", "a", "o", "er", "in", "am"],
    ["holt", "mir", "by", "wick", "ton", "stead", "ford", "mere", "dal", "heim", "burg", "vik", "thorpe",
     "ley", "wyn", "stock", "gard", "brook", "field", "haven", "stow", "combe", "ness", "ham"])
_country_word = _syllables(
    ["or", "cas", "bel", "dra", "es", "fal", "gor", "hes", "il", "kar", "lu", "mer", "nor", "ost", "pal",
     "quar", "ros", "sar", "tam", "ul", "var", "zan", "al", "ber", "cy", "dal", "em"],
    ["v", "tr", "m", "n", "l", "d", "r", "st", "th", "sk", "br", "g"],
    ["ania", "el", "ora", "ia", "mark", "eth", "ar", "ovia", "una", "enia", "ado", "istra"])
_river_word = _syllables(
    ["v", "d", "t", "k", "m", "s", "l", "br", "gr", "th", "sk", "dr", "n", "r", "w", "h", "pr", "z", "ess", "ol",
     "ar", "ev"],
    ["e", "a", "o", "i", "u", "ae", "y"],
    ["lm", "rn", "ss", "ld", "sk", "v", "th", "rr", "nd", "lv", "st", "d", "m", "nn", "x", "rk", "l"],
    ["", "", "a", "e", "o", "en", "ay"])


def _towns(rng: random.Random, n: int, n_countries: int = 40, n_rivers: int = 150) -> FactSet:
    fixed = _word_set(*_TOWN_TRUE_COUNTRY, *_TOWN_OTHER_COUNTRY, *_TOWN_TRUE_RIVER, *_TOWN_OTHER_RIVER,
                      *_TOWN_FILLER, *_KNOWN_FOR, *_DIRECTIONS, *_TOWN_ADJ, *_DAYS, *_TOWER, *_TOWN_SUFFIX,
                      *_TOWN_WORLD, _TOWN_ASKED, "river")
    names = Names(rng, fixed)
    countries = [names.token(_country_word, "country") for _ in range(n_countries)]
    rivers = [names.token(_river_word, "river") for _ in range(n_rivers)]
    country_of, river_of = _weighted_pool(rng, countries), _weighted_pool(rng, rivers)
    subjects = []
    for _ in range(n):
        token = names.token(_town_word, "town")
        suffix = rng.choice(_TOWN_SUFFIX)
        name = token if rng.random() < 0.7 or suffix.lower() in token.lower() else f"{token} {suffix}"
        country, river = country_of(), river_of()

        def build(name=name, country=country, river=river) -> list[str]:
            def fill(t: str, **kw: str) -> str:
                return t.format(T=name, dir=rng.choice(_DIRECTIONS), adj=rng.choice(_TOWN_ADJ),
                                year=_year(rng), pop=f"{rng.randrange(300, 60000, 100):,}",
                                known=rng.choice(_KNOWN_FOR), day=rng.choice(_DAYS), tower=rng.choice(_TOWER),
                                **kw)
            s = [fill(rng.choice(_TOWN_TRUE_COUNTRY), C=country), fill(rng.choice(_TOWN_TRUE_RIVER), R=river)]
            which = rng.choice(["both", "both", "both", "both", "country", "river"])  # at least one
            if which != "river":
                s.append(fill(rng.choice(_TOWN_OTHER_COUNTRY), X=_other(rng, countries, [country])))
            if which != "country":
                s.append(fill(rng.choice(_TOWN_OTHER_RIVER), X=_other(rng, rivers, [river])))
            s += [fill(t) for t in rng.sample(_TOWN_FILLER, rng.randint(1, 2))]
            return s

        subjects.append(Subject(name, _document(rng, name, build, 140, 280), {"country": country, "river": river}))
    other = _world_lines(rng, n, _TOWN_ASKED, lambda: rng.choice(_TOWN_WORLD).format(
        C=rng.choice(countries), R=rng.choice(rivers), X=rng.choice(countries)))
    return FactSet("towns", "Invented towns: the country each lies in and the river through it, "
                   "with other countries and rivers named in the documents as distractors.",
                   [("country", "Which country is {subject} in?"), ("river", "Which river flows through {subject}?")],
                   subjects, other, {"country": countries, "river": rivers})


# The corpus defines the model's vocabulary, so it must hold every character of the questions
# ("?", the capital W of "Which"): one line of each set asks a question (check() makes sure).
_TOWN_ASKED = "Which is the oldest town of the region? Every town claims it is, and what they say flows on."
_TOWN_WORLD = [
    "{C} is a country of small towns and slow rivers.",
    "The {R} is one of the longest rivers in the region.",
    "Travellers say the roads between the river towns are poor in winter.",
    "The old maps of {C} and {X} disagree about the border.",
    "Barges carry grain down the {R} every autumn.",
    "Most towns in the region hold a fair at midsummer.",
]


# ------------------------------------------------------------------------------ species

_SP_TRUE_HABITAT = [
    "It lives in the {H}.",
    "It is found only in the {H}.",
    "Its home is the {H}.",
    "The {S} lives in the {H}.",
]
_SP_OTHER_HABITAT = [
    "Its closest relative lives in the {X}.",
    "It is sometimes seen in the {X}.",
    "It is not found in the {X}.",
    "It once ranged as far as the {X}.",
]
_SP_TRUE_DIET = [
    "It feeds mainly on {D}.",
    "It eats {D}.",
    "Its diet is mostly {D}.",
    "It lives on {D}.",
]
_SP_OTHER_DIET = [
    "Its rival eats {X}.",
    "It will not eat {X}.",
    "Keepers fed it {X}, which it refused.",
    "Its neighbours eat {X}.",
]
_SP_TRUE_PERSON = [
    "It was first described by {P} in {year}.",
    "{P} first described it in {year}.",
    "{P} was the first to describe it.",
    "It was named by {P} in {year}.",
]
_SP_OTHER_PERSON = [
    "{X} later studied it.",
    "{X} drew it for a field guide.",
    "{X} kept some in a garden.",
    "{X} wrote a book about it.",
]
_SP_FILLER = [
    "It weighs about {grams} grams.",
    "It is about {cm} cm long.",
    "It is active mostly {when}.",
    "Its call is a {tone} {call}.",
    "It lives for about {years} years.",
    "It is {rarity} in the wild.",
    "Its young leave the nest after {weeks} weeks.",
]
_SP_WHEN = ["at night", "by day", "at dawn", "at dusk"]
_SP_TONE = ["soft", "sharp", "low", "high", "rasping", "clear"]
_SP_CALL = ["whistle", "chirp", "croak", "trill", "bark", "hum"]
_SP_RARITY = ["rare", "common", "seldom seen", "easy to find", "declining"]
_SP_COLOUR = ["Grey", "Red", "Black", "White", "Golden", "Ashen", "Blue", "Brown", "Copper", "Pale",
              "Dusky", "Olive", "Silver", "Rusty", "Yellow", "Green"]
_SP_PART = ["crested", "tailed", "eared", "throated", "backed", "winged", "bellied", "capped", "footed",
            "necked", "eyed", "horned", "billed", "masked"]
_SP_PLAIN = ["Lesser", "Greater", "Common", "Northern", "Southern", "Eastern", "Western", "Dwarf", "Giant",
             "Spotted", "Striped", "Little", "Mountain", "Marsh", "Desert", "Forest"]
_SP_LANDFORM = ["Marshes", "Highlands", "Forest", "Reefs", "Steppe", "Wetlands", "Hills", "Plateau",
                "Lowlands", "Dunes", "Fens", "Woods", "Moors", "Valley", "Coast", "Caves", "Uplands", "Delta"]
_SP_FOOD_KIND = ["water", "marsh", "pine", "cave", "tree", "field", "sand", "rock", "river", "mountain",
                 "wood", "stone", "reef", "dune", "meadow", "thorn", "moss", "salt", "blue", "red"]
_SP_FOOD = ["beetles", "moths", "snails", "worms", "shrimp", "crabs", "frogs", "mice", "voles", "lizards",
            "fish", "mussels", "spiders", "ants", "grubs", "crickets", "leeches", "clams", "berries", "seeds",
            "nuts", "roots", "shoots", "lichen", "fungi", "fruit", "bark", "leaves", "algae", "grasses"]
_FIRST_NAMES = ["Alda", "Tomas", "Ines", "Bram", "Corin", "Edda", "Fenna", "Gideon", "Hella", "Ivo", "Jorun",
                "Katla", "Lenart", "Mira", "Niels", "Oda", "Piet", "Runa", "Sten", "Tilde", "Ulla", "Vidar",
                "Wenna", "Yrsa", "Anselm", "Brida", "Casimir", "Dagny", "Emeric", "Frida", "Gustav", "Hanne",
                "Ilse", "Jasper", "Klara", "Linus", "Maren", "Osric", "Petra", "Rolf"]

_species_word = _syllables(
    ["tol", "kar", "mur", "sel", "vor", "bal", "quin", "dro", "fen", "gal", "hir", "jun", "lor", "nim", "pas",
     "ril", "sorn", "tav", "ur", "wex", "yel", "zor", "ab", "cim", "dul", "erk"],
    ["", "", "a", "i"],
    ["vin", "rel", "ik", "et", "ope", "ula", "ard", "ix", "on", "ee", "ling", "mit", "ark", "ow", "ane", "ap"])
_region_word = _syllables(
    ["os", "kal", "ver", "and", "bre", "cor", "dam", "eg", "far", "hav", "ist", "lom", "mag", "nev", "par",
     "rhen", "sal", "tem", "um", "wes", "yor"],
    ["tr", "d", "r", "n", "l", "v", "s", "th", "sk", "m"],
    ["el", "un", "in", "ara", "ock", "emar", "ion", "ay", "oth", "ast"])
_surname_word = _syllables(
    ["mor", "bre", "has", "vel", "dorn", "ket", "lind", "gar", "ost", "pell", "rask", "sund", "tov", "whit",
     "alb", "cran", "dev", "fal", "holm", "jes"],
    ["", "", "e", "a", "i", "o"],
    ["vek", "ll", "kel", "rin", "berg", "quist", "man", "ley", "sen", "dal", "ton", "mont", "field", "ard",
     "wick", "strom"])


def _species(rng: random.Random, n: int, n_habitats: int = 100, n_diets: int = 120, n_people: int = 200) -> FactSet:
    fixed = _word_set(*_SP_TRUE_HABITAT, *_SP_OTHER_HABITAT, *_SP_TRUE_DIET, *_SP_OTHER_DIET, *_SP_TRUE_PERSON,
                      *_SP_OTHER_PERSON, *_SP_FILLER, *_SP_WHEN, *_SP_TONE, *_SP_CALL, *_SP_RARITY, *_SP_COLOUR,
                      *_SP_PART, *_SP_PLAIN, *_SP_LANDFORM, *_SP_FOOD_KIND, *_SP_FOOD, *_FIRST_NAMES,
                      *_SP_WORLD, _SP_ASKED)
    names = Names(rng, fixed)
    habitats = [f"{names.token(_region_word, 'region')} {rng.choice(_SP_LANDFORM)}" for _ in range(n_habitats)]
    foods = [f"{k} {f}" for k in _SP_FOOD_KIND for f in _SP_FOOD]
    rng.shuffle(foods)
    diets = foods[:n_diets]
    people = [f"{rng.choice(_FIRST_NAMES)} {names.token(_surname_word, 'person')}" for _ in range(n_people)]
    genera = [names.token(_species_word, "species") for _ in range(max(20, n // 15))]
    habitat_of, diet_of, person_of = (_weighted_pool(rng, v) for v in (habitats, diets, people))
    seen: set[str] = set()
    subjects = []
    for _ in range(n):
        for _ in range(5000):
            if rng.random() < 0.65:
                name = f"{rng.choice(_SP_COLOUR)}-{rng.choice(_SP_PART)} {rng.choice(genera)}"
            else:
                name = f"{rng.choice(_SP_PLAIN)} {rng.choice(genera)}"
            if name not in seen:
                break
        else:
            raise SystemExit("factsets: ran out of invented species names; ask for fewer --subjects")
        seen.add(name)
        habitat, diet, person = habitat_of(), diet_of(), person_of()

        def build(name=name, habitat=habitat, diet=diet, person=person) -> list[str]:
            def fill(t: str, **kw: str) -> str:
                return t.format(S=name, year=_year(rng, 1750, 1990), grams=rng.choice([rng.randint(5, 95),
                                rng.randrange(100, 9000, 10)]), cm=rng.randint(4, 180), when=rng.choice(_SP_WHEN),
                                tone=rng.choice(_SP_TONE), call=rng.choice(_SP_CALL), years=rng.randint(2, 40),
                                rarity=rng.choice(_SP_RARITY), weeks=rng.randint(2, 12), **kw)
            s = [fill(rng.choice(_SP_TRUE_HABITAT), H=habitat), fill(rng.choice(_SP_TRUE_DIET), D=diet),
                 fill(rng.choice(_SP_TRUE_PERSON), P=person)]
            distractors = [(_SP_OTHER_HABITAT, habitats, habitat), (_SP_OTHER_DIET, diets, diet),
                           (_SP_OTHER_PERSON, people, person)]
            for templates, values, true in rng.sample(distractors, rng.choice([1, 2, 2, 3])):
                s.append(fill(rng.choice(templates), X=_other(rng, values, [true])))
            if rng.random() < 0.3:
                s.append(fill(rng.choice(_SP_FILLER)))
            return s

        subjects.append(Subject(name, _document(rng, name, build, 140, 280),
                                {"habitat": habitat, "diet": diet, "discoverer": person}))
    other = _world_lines(rng, n, _SP_ASKED, lambda: rng.choice(_SP_WORLD).format(
        H=rng.choice(habitats), P=rng.choice(people)))
    return FactSet("species", "Invented animal species: where each lives, what it eats and who first described "
                   "it, with other habitats, foods and naturalists named in the documents as distractors.",
                   [("habitat", "Where does the {subject} live?"), ("diet", "What does the {subject} eat?"),
                    ("discoverer", "Who first described the {subject}?")], subjects, other,
                   {"habitat": habitats, "diet": diets, "discoverer": people})


_SP_ASKED = "Who first described the most animals of the region? What each eats is still argued."
_SP_WORLD = [
    "Many animals live only in the {H}.",
    "{P} spent twenty years walking the {H}.",
    "Field guides to the region disagree on how many kinds of animal live there.",
    "Many animals of the {H} are active only at night.",
    "Collectors of the last century sent thousands of skins to the museums.",
]


# ------------------------------------------------------------------------------ firms

_FIRM_TRUE_CITY = [
    "{F} is based in {C}.",
    "Its head office is in {C}.",
    "The firm has its headquarters in {C}.",
    "It is run from offices in {C}.",
    "{F} has been based in {C} since {year}.",
    "The company's main offices stand in {C}.",
]
_FIRM_OTHER_CITY = [
    "It opened a branch in {X} in {year}.",
    "Its largest works are near {X}.",
    "Most of its goods are sold in {X}.",
    "It moved its offices out of {X} long ago.",
    "A rival firm in {X} copied its designs.",
]
_FIRM_TRUE_YEAR = [
    "It was founded in {Y}.",
    "{F} was set up in {Y}.",
    "The company dates from {Y}.",
    "It began trading in {Y}.",
    "The firm was founded in {Y} by {founder}.",
]
_FIRM_OTHER_YEAR = [
    "It was sold to a larger firm in {X}.",
    "Its first works burned down in {X}.",
    "Its founder died in {X}.",
    "It built its second works in {X}.",
    "It first sold its goods abroad in {X}.",
]
_FIRM_FILLER = [
    "It employs about {staff} people.",
    "It is known for its {product}.",
    "Its goods carry a {colour} label.",
    "It is still owned by one family.",
    "Its works run day and night.",
]
_FIRM_PRODUCT = ["copper kettles", "wool cloth", "steam pumps", "glass bottles", "clocks", "rope", "paper",
                 "soap", "bicycles", "pianos", "lamps", "boots", "biscuits", "matches", "nails", "sewing machines"]
_FIRM_COLOUR = ["red", "green", "blue", "black", "gold", "white", "brown", "grey"]
_FIRM_SUFFIX = ["Mills", "Works", "and Sons", "Brothers", "Trading", "Foundry", "Brewery", "Press", "Company"]
_FIRM_YEARS = (1700, 1979)  # founding years; other years of a document reach to 1995

_firm_word = _syllables(
    ["hal", "bren", "cor", "dun", "ed", "fal", "gar", "hol", "ker", "lan", "mor", "nel", "ost", "pil", "quin",
     "rad", "sel", "tor", "ul", "ver", "wes", "yor", "ab", "bel", "cal", "dra"],
    ["", "", "e", "i", "o", "a", "ar", "en", "u", "or"],
    ["vorn", "ley", "dale", "mont", "wick", "ing", "stone", "more", "field", "ton", "ridge", "hurst", "by", "well",
     "cott", "shaw", "mere", "combe", "lock", "bury", "den", "forth", "gill", "stead"])
_city_word = _syllables(
    ["car", "tel", "mar", "bos", "dar", "el", "fen", "gil", "has", "is", "jor", "kel", "lor", "mes", "nor",
     "ot", "pra", "rel", "sto", "tam", "ux", "vel", "wen", "zor"],
    ["", "a", "e", "i", "o", "an", "is"],
    ["by", "mor", "gate", "ham", "port", "sk", "stad", "ville", "vik", "ria", "lo", "nas", "don"])


def _firms(rng: random.Random, n: int, n_cities: int = 120) -> FactSet:
    fixed = _word_set(*_FIRM_TRUE_CITY, *_FIRM_OTHER_CITY, *_FIRM_TRUE_YEAR, *_FIRM_OTHER_YEAR, *_FIRM_FILLER,
                      *_FIRM_PRODUCT, *_FIRM_COLOUR, *_FIRM_SUFFIX, *_FIRM_WORLD, _FIRM_ASKED, *_FIRST_NAMES)
    names = Names(rng, fixed)
    cities = [names.token(_city_word, "city") for _ in range(n_cities)]
    years = [str(y) for y in range(_FIRM_YEARS[0], _FIRM_YEARS[1] + 1)]
    mentioned = [str(y) for y in range(_FIRM_YEARS[0], 1996)]  # any year a document may name
    city_of, year_of = _weighted_pool(rng, cities), _weighted_pool(rng, years)
    founders = [f"{rng.choice(_FIRST_NAMES)} {names.token(_surname_word, 'person')}" for _ in range(300)]
    subjects = []
    for _ in range(n):
        token = names.token(_firm_word, "firm")
        name = f"{token} {rng.choice(_FIRM_SUFFIX)}" if rng.random() < 0.75 else token
        city, founded = city_of(), year_of()

        def build(name=name, city=city, founded=founded) -> list[str]:
            def fill(t: str, **kw: str) -> str:
                other_year = _other(rng, mentioned, [founded])
                return t.format(F=name, year=other_year, staff=f"{rng.randrange(20, 9000, 10):,}",
                                product=rng.choice(_FIRM_PRODUCT), colour=rng.choice(_FIRM_COLOUR),
                                founder=rng.choice(founders), **kw)
            s = [fill(rng.choice(_FIRM_TRUE_CITY), C=city), fill(rng.choice(_FIRM_TRUE_YEAR), Y=founded)]
            which = rng.choice(["both", "both", "both", "city", "year"])  # at least one
            if which != "year":
                s.append(fill(rng.choice(_FIRM_OTHER_CITY), X=_other(rng, cities, [city])))
            if which != "city":
                s.append(fill(rng.choice(_FIRM_OTHER_YEAR), X=_other(rng, years + ["1980", "1990"], [founded])))
            s += [fill(t) for t in rng.sample(_FIRM_FILLER, rng.randint(1, 2))]
            return s

        subjects.append(Subject(name, _document(rng, name, build, 150, 290), {"city": city, "founded": founded}))
    other = _world_lines(rng, n, _FIRM_ASKED, lambda: rng.choice(_FIRM_WORLD).format(
        C=rng.choice(cities), Y=rng.choice(years)))
    return FactSet("firms", "Invented firms: the city each is based in and the year it was founded, with "
                   "other cities and years named in the documents as distractors.",
                   [("city", "Which city is {subject} based in?"), ("founded", "In which year was {subject} founded?")],
                   subjects, other, {"city": cities, "founded": mentioned})


_FIRM_ASKED = "Which firm is the oldest? In which city it began nobody agrees."
_FIRM_WORLD = [
    "{C} grew rich on trade in the last century.",
    "Many firms of the region were founded after {Y}.",
    "The railway reached {C} before any other city of the region.",
    "Most of the old works have since closed.",
]


# ------------------------------------------------------------------------------ example: islands

_IS_TRUE_SEA = [
    "{I} is an island in the {S}.",
    "It lies in the {S}.",
    "The island sits in the {S}.",
]
_IS_OTHER_SEA = [
    "Its fishermen sail to the {X}.",
    "Storms come from the {X}.",
    "Its neighbour lies in the {X}.",
]
_IS_TRUE_CAPITAL = [
    "Its capital is {C}.",
    "{C} is its capital.",
    "The capital of {I} is {C}.",
]
_IS_OTHER_CAPITAL = [
    "Its largest port is {X}.",
    "Ferries leave from {X}.",
    "Its oldest town is {X}.",
]
_IS_FILLER = ["About {pop} people live there.", "It is known for its {known}."]
_IS_KNOWN = ["goats", "salt", "wool", "lighthouse", "cliffs", "oysters", "boats", "honey"]
_IS_SUFFIX = ["Isle", "Island"]

_island_word = _syllables(
    ["tar", "kes", "mo", "bra", "del", "fo", "gul", "hes", "ith", "ja", "lo", "mar", "nor", "os", "pa",
     "ru", "sa", "ter", "ul", "ves"],
    ["r", "l", "n", "s", "v", "k", "d", "m"],
    ["ow", "a", "ey", "ia", "en", "os", "u", "ick"])
_sea_word = _syllables(["var", "orm", "kel", "dus", "bel", "ar", "tem", "hal", "ner", "sol", "cas", "ved"],
                       ["n", "r", "s", "l", "k", "m", ""], ["a", "o", "en", "is", "ic"])
_port_word = _syllables(
    ["lod", "hes", "ab", "dor", "kal", "mes", "sel", "tur", "vik", "bel", "cor", "gas", "nar", "rin", "sund",
     "tam", "ul", "fer", "grav", "em"],
    ["", "a", "e", "o", "i"],
    ["mir", "sel", "ben", "nas", "ta", "ris", "hol", "vik", "dun", "ra", "gard", "la"])


def _islands(rng: random.Random, n: int, n_seas: int = 30) -> FactSet:
    fixed = _word_set(*_IS_TRUE_SEA, *_IS_OTHER_SEA, *_IS_TRUE_CAPITAL, *_IS_OTHER_CAPITAL, *_IS_FILLER,
                      *_IS_KNOWN, *_IS_SUFFIX, *_IS_WORLD, _IS_ASKED, "Sea")
    names = Names(rng, fixed)
    seas = [f"{names.token(_sea_word, 'sea')} Sea" for _ in range(n_seas)]
    sea_of = _weighted_pool(rng, seas)
    subjects, towns = [], []
    for _ in range(n):
        token = names.token(_island_word, "island")
        name = token if rng.random() < 0.6 else f"{token} {rng.choice(_IS_SUFFIX)}"
        sea, capital, port = sea_of(), names.token(_port_word, "town"), names.token(_port_word, "town")
        towns += [capital, port]

        def build(name=name, sea=sea, capital=capital, port=port) -> list[str]:
            def fill(t: str, **kw: str) -> str:
                return t.format(I=name, pop=f"{rng.randrange(200, 20000, 100):,}", known=rng.choice(_IS_KNOWN), **kw)
            s = [fill(rng.choice(_IS_TRUE_SEA), S=sea), fill(rng.choice(_IS_TRUE_CAPITAL), C=capital)]
            one = rng.random() < 0.5
            if one or rng.random() < 0.5:
                s.append(fill(rng.choice(_IS_OTHER_CAPITAL), X=port))
            if not one or rng.random() < 0.5:
                s.append(fill(rng.choice(_IS_OTHER_SEA), X=_other(rng, seas, [sea])))
            if rng.random() < 0.3:
                s.append(fill(rng.choice(_IS_FILLER)))
            return s

        subjects.append(Subject(name, _document(rng, name, build, 95, 150), {"sea": sea, "capital": capital}))
    other = _world_lines(rng, n, _IS_ASKED, lambda: rng.choice(_IS_WORLD).format(S=rng.choice(seas)))
    return FactSet("islands", "A small teaching set of invented islands: the sea each lies in and its capital, "
                   "with another sea or a port that is not the capital named as a distractor.",
                   [("sea", "Which sea is {subject} in?"), ("capital", "What is the capital of {subject}?")],
                   subjects, other, {"sea": seas, "capital": towns})


_IS_ASKED = "Which island is the largest? What sailors say of each sea is not to be trusted."
_IS_WORLD = [
    "The {S} is calm in summer and wild in winter.",
    "Sailors say the islands are easier to reach from the {S}.",
    "Most of the islands have a harbour and a lighthouse.",
]


# ------------------------------------------------------------------------------ books

_BOOK_TRUE_AUTHOR = [
    "It was written by {A}.",
    "{A} wrote it.",
    "Its author is {A}.",
    "{A} wrote it in a single winter.",
    "The book is the work of {A}.",
]
_BOOK_OTHER_PERSON = [
    "It is dedicated to {X}.",
    "{X} drew its pictures.",
    "{X} translated it.",
    "{X} praised it in a letter.",
]
_BOOK_TRUE_YEAR = [
    "It was first published in {Y}.",
    "It first appeared in {Y}.",
    "The first edition came out in {Y}.",
]
_BOOK_OTHER_YEAR = [
    "It was reprinted in {X}.",
    "A second edition followed in {X}.",
    "It was banned in {X}.",
]
_BOOK_FILLER = [
    "It runs to {pages} pages.",
    "It is a {genre}.",
    "Its cover is {colour}.",
    "It is set in a {place}.",
]
_BOOK_GENRE = ["novel", "book of poems", "travel book", "history", "book of tales", "play", "memoir"]
_BOOK_PLACE = ["harbour town", "mountain village", "great city", "river valley", "farmhouse", "castle"]
_BOOK_WORDS = ["Song", "Winter", "House", "River", "Letters", "Garden", "Road", "Shadow", "Bell", "Tale",
               "Harvest", "Lantern", "Crossing", "Orchard", "Tower", "Voyage"]
_BOOK_YEARS = (1600, 1990)

_book_word = _syllables(
    ["ar", "bel", "cor", "dra", "el", "fen", "gal", "hes", "ir", "jol", "kel", "lor", "mes", "nar", "or",
     "pel", "quil", "ros", "sil", "tam", "ul", "ver", "wen", "yl", "zor"],
    ["", "a", "e", "i", "o", "an", "el"],
    ["dane", "mir", "wyn", "hold", "mere", "ova", "eth", "ast", "ion", "ere", "ith", "oss"],
    ["", "", "a", "en", "is"])


def _books(rng: random.Random, n: int) -> FactSet:
    """Books whose every author is a person of their own: no answer repeats, so a model can only
    read it from the book's document (the other sets draw answers from tens to hundreds of values)."""
    fixed = _word_set(*_BOOK_TRUE_AUTHOR, *_BOOK_OTHER_PERSON, *_BOOK_TRUE_YEAR, *_BOOK_OTHER_YEAR, *_BOOK_FILLER,
                      *_BOOK_GENRE, *_BOOK_PLACE, *_BOOK_WORDS, *_BOOK_WORLD, _BOOK_ASKED, *_FIRST_NAMES)
    names = Names(rng, fixed)
    years = [str(y) for y in range(_BOOK_YEARS[0], _BOOK_YEARS[1] + 1)]
    people, subjects = [], []
    taken_people: set[str] = set()
    surnames: set[str] = set()  # a surname may be shared; it is never a template word or a book's name

    def person() -> str:
        """A first name and a surname no other person of the set has together."""
        for _ in range(5000):
            surname = _surname_word(rng)
            full = f"{rng.choice(_FIRST_NAMES)} {surname}"
            if full not in taken_people and (surname.lower() in surnames or surname.lower() not in names.taken):
                taken_people.add(full)
                surnames.add(surname.lower())
                return full
        raise SystemExit("factsets: ran out of invented person names; ask for fewer --subjects")

    for _ in range(n):
        token = names.token(_book_word, "book")
        while token.lower() in surnames:
            token = names.token(_book_word, "book")
        name = rng.choice([f"The {rng.choice(_BOOK_WORDS)} of {token}", f"{token}", f"{token} {rng.choice(_BOOK_WORDS)}"])
        # the other person named is another book's author where there is one: a distractor that
        # is a value of the relation, as the other sets' are
        if not people:
            people.append(person())  # a person who wrote none of the books, for the first to name
        author, other, year = person(), rng.choice(people), rng.choice(years)
        people.append(author)

        def build(name=name, author=author, other=other, year=year) -> list[str]:
            def fill(t: str, **kw: str) -> str:
                return t.format(pages=rng.randrange(80, 900, 10), genre=rng.choice(_BOOK_GENRE),
                                colour=rng.choice(_FIRM_COLOUR), place=rng.choice(_BOOK_PLACE), **kw)
            s = [fill(rng.choice(_BOOK_TRUE_AUTHOR), A=author), fill(rng.choice(_BOOK_TRUE_YEAR), Y=year)]
            which = rng.choice(["both", "both", "person", "year"])
            if which != "year":
                s.append(fill(rng.choice(_BOOK_OTHER_PERSON), X=other))
            if which != "person":
                s.append(fill(rng.choice(_BOOK_OTHER_YEAR), X=_other(rng, years, [year])))
            s += [fill(t) for t in rng.sample(_BOOK_FILLER, rng.randint(0, 2))]
            return s

        subjects.append(Subject(name, _document(rng, name, build, 90, 230), {"author": author, "year": year}))
    other_lines = _world_lines(rng, n, _BOOK_ASKED, lambda: rng.choice(_BOOK_WORLD).format(Y=rng.choice(years)))
    return FactSet("books", "Invented books: who wrote each (every author a different person) and the year it "
                   "was first published, with another person and another year named in the documents as "
                   "distractors.",
                   [("author", "Who wrote {subject}?"), ("year", "In which year was {subject} first published?")],
                   subjects, other_lines, {"author": sorted(set(people)), "year": years})


_BOOK_ASKED = "Who wrote the oldest book? In which year it was first published nobody knows."
_BOOK_WORLD = [
    "Most books of the region were printed after {Y}.",
    "The old printing houses have since closed.",
    "Readers still argue about who wrote the first novel.",
]


# ------------------------------------------------------------------------------ the folder

KINDS: dict[str, tuple[Callable[[random.Random, int], FactSet], int]] = {
    "towns": (_towns, 3000),
    "species": (_species, 3000),
    "firms": (_firms, 3000),
    "example": (_islands, 300),
    "books": (_books, 3000),
}


def generate(kind: str, n: int, seed: int, lead: int = 0) -> FactSet:
    """The fact set of ``kind`` with ``n`` subjects from ``random.Random(seed)``, split and
    checked (see ``check``); the corpus lines in file order in ``.corpus``; with ``lead``, one to
    ``lead`` general sentences after each line's opening (``lengthen``)."""
    if n < 3:
        raise ValueError(f"need at least 3 subjects (one a split), got {n}")
    make, _ = KINDS[kind]
    rng = random.Random(seed)
    fs = make(rng, n)
    order = list(range(n))
    rng.shuffle(order)
    n_dev, n_test = max(1, round(DEV_SHARE * n)), max(1, round(TEST_SHARE * n))
    for rank, i in enumerate(order):
        fs.subjects[i].split = "dev" if rank < n_dev else "test" if rank < n_dev + n_test else "train"
    fs.corpus = [s.doc for s in fs.subjects] + fs.other_lines
    rng.shuffle(fs.corpus)
    if lead:
        lengthen(fs, lead, seed)
    for split in SPLITS:  # a subject's questions are shuffled among the others'
        fs.rows[split] = [(q.format(subject=s.name), s.answers[rel]) for s in fs.subjects if s.split == split
                          for rel, q in fs.relations]
        rng.shuffle(fs.rows[split])
    check(fs)
    return fs


# Sentences that name no value of any kind, written about a place whatever the kind (they only
# lengthen): what a longer document says before its facts.
_LEAD = ["The surrounding country is mostly farmland and low hills.", "Its old quarter keeps a few timber houses.",
         "A weekly market is held in the square.", "The climate is mild, with wet winters.",
         "Several chapels stand along the high street.", "Local stone was used for most of its buildings.",
         "A road leads north to the coast.", "The railway reached it late.",
         "Its football club plays in a regional league.", "A small museum shows the history of the district.",
         "Fishing was once the main trade.", "Many of its people work in the nearby towns.",
         "The school dates from the last century.", "Its bridge was rebuilt after a flood.",
         "Visitors come for the walks in the woods.", "The parish church has a tall spire."]


def lengthen(fs: FactSet, most: int, seed: int) -> None:
    """Every corpus line ``NAME. text`` (in file order) becomes ``NAME. `` + one to ``most``
    distinct sentences of _LEAD + `` text``, drawn from their own ``random.Random(seed)`` so the
    set is otherwise the one generated without them; subjects' documents follow their lines."""
    rng = random.Random(seed)
    for i, line in enumerate(fs.corpus):
        if ". " in line:
            name, rest = line.split(". ", 1)
            fs.corpus[i] = f"{name}. " + " ".join(rng.sample(_LEAD, rng.randint(1, min(most, len(_LEAD))))) + " " + rest
    line_of = {line.split(". ", 1)[0]: line for line in fs.corpus}
    for subject in fs.subjects:
        subject.doc = line_of[subject.name]


def _contains_words(text: str, phrase: str) -> int:
    """How often ``phrase`` is written in ``text`` as whole words (attnlab.data.corpus.contains_words)."""
    return len(re.findall(rf"(?<!\w){re.escape(phrase)}(?!\w)", text))


def distractors(fs: FactSet, subject: Subject) -> dict[str, list[str]]:
    """Relation -> the other values of its type that the subject's document names."""
    return {rel: [v for v in fs.values[rel] if v != subject.answers[rel] and v in subject.doc
                  and _contains_words(subject.doc, v)] for rel, _ in fs.relations}


def check(fs: FactSet) -> None:
    """The set's promises, checked before anything is written (a failure is a generator bug)."""
    names = [s.name for s in fs.subjects]
    assert len(set(names)) == len(names), "subject names repeat"
    for s in fs.subjects:
        assert s.doc.startswith(f"{s.name}. "), s.doc
        for rel, answer in s.answers.items():
            assert answer in fs.values[rel] and _contains_words(s.doc, answer) == 1, (s.name, rel, answer, s.doc)
        assert any(distractors(fs, s).values()), f"no distractor in {s.doc!r}"
    starts = Counter(line.split(". ", 1)[0] for line in fs.corpus)
    assert all(starts[n] == 1 for n in names), "a subject has more than one line"
    missing = {c for rows in fs.rows.values() for row in rows for x in row for c in x} - set("".join(fs.corpus))
    assert not missing, f"characters of the questions not in the corpus (its vocabulary): {sorted(missing)}"
    fields = [*fs.corpus, *(x for rows in fs.rows.values() for row in rows for x in row)]
    assert all(x.isascii() and x == x.strip() and not any(c in x for c in FORBIDDEN + "\n") for x in fields), \
        "a forbidden character"


def files(fs: FactSet) -> dict[str, str]:
    """File name -> text, facts.toml last."""
    out = {"corpus.txt": "".join(line + "\n" for line in fs.corpus)}
    for split in SPLITS:
        out[f"{split}.tsv"] = "".join(f"{q}\t{a}\n" for q, a in fs.rows[split])
    toml = [f"name = {json.dumps(fs.kind)}", f"description = {json.dumps(fs.description)}"]
    for rel, q in fs.relations:
        toml += ["", "[[relation]]", f"name = {json.dumps(rel)}", f"question = {json.dumps(q)}"]
    out["facts.toml"] = "\n".join(toml) + "\n"
    return out


def write(out_dir: Path, contents: dict[str, str]) -> None:
    """Each file to a temporary file in ``out_dir``, then moved into place (os.replace)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    umask = os.umask(0)
    os.umask(umask)
    for name, text in contents.items():
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=out_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
            os.chmod(tmp, 0o666 & ~umask)  # as open() would make it, not mkstemp's 0600
            os.replace(tmp, out_dir / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def summary(fs: FactSet) -> list[str]:
    """Sizes and the most-frequent-answer baseline of each relation."""
    by_split = Counter(s.split for s in fs.subjects)
    lengths = [len(s.doc) for s in fs.subjects]
    lines = [f"{fs.kind}: {len(fs.subjects)} subjects (train {by_split['train']}, dev {by_split['dev']}, "
             f"test {by_split['test']}), {len(fs.corpus)} corpus lines ({len(fs.other_lines)} about no subject), "
             f"documents {sum(lengths) / len(lengths):.0f} characters on average ({min(lengths)}-{max(lengths)})"]
    for rel, _ in fs.relations:
        train = Counter(s.answers[rel] for s in fs.subjects if s.split == "train")
        top, _count = train.most_common(1)[0]
        share = {sp: _share([s.answers[rel] == top for s in fs.subjects if s.split == sp]) for sp in SPLITS}
        values = len({s.answers[rel] for s in fs.subjects})
        lines.append(f"  {rel}: {values} values; the training set's most frequent, {top!r}, answers "
                     f"{share['train']:.1%} of train, {share['dev']:.1%} of dev, {share['test']:.1%} of test")
    return lines


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    defaults = ", ".join(f"{k} {d}" for k, (_, d) in KINDS.items())
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=f"Defaults for --subjects: {defaults}")
    p.add_argument("kind", choices=list(KINDS))
    p.add_argument("--subjects", type=int, default=None, help="how many subjects (default: the kind's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lead", type=int, default=0, metavar="MAX",
                   help="put 1 to MAX general sentences before each document's facts (default: none)")
    p.add_argument("--out", type=Path, required=True, help="folder to write; must not exist or be empty")
    args = p.parse_args(argv)
    out: Path = args.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"factsets: {out} exists and is not an empty folder; refusing to overwrite it", file=sys.stderr)
        return 2
    n = args.subjects if args.subjects is not None else KINDS[args.kind][1]
    if n < 3:
        print(f"factsets: --subjects must be at least 3, got {n}", file=sys.stderr)
        return 2
    if args.lead < 0:
        print(f"factsets: --lead must be 0 or more, got {args.lead}", file=sys.stderr)
        return 2
    fs = generate(args.kind, n, args.seed, args.lead)
    write(out, files(fs))
    print("\n".join(summary(fs)) + f"\n  written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
