"""What the model says about people it never saw.

We invent people by recombining first names and surnames of the corpus's people (seeded), keep
only names that no corpus line contains, ask the model where they were born, and compare with
dev people: how often it abstains, and which places it answers when it does not. A model that
answers invented people mostly with the training file's most frequent places is guessing from
the base rates (and from how a name sounds), not retrieving.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..answering.evaluate import Answer, answer_questions
from ..core.paths import save_figure
from ..core.plotting import pyplot
from ..data.datasets import QAExample
from .abstention import Rule, decide, people_of
from ..data.relations import Schema

_NAME = re.compile(r"^[A-Z][\w'-]*( [A-Z][\w'.-]*)+$")
_ONE_WORD = re.compile(r"^[A-Z][\w'-]+$")


def corpus_people(docs: Sequence[str], max_chars: int = 40) -> list[str]:
    """The people the corpus lines are about: a line ``NAME. text`` with NAME of two or more
    capitalised words."""
    people = []
    for doc in docs:
        title = doc.split(". ", 1)[0]
        if len(title) <= max_chars and _NAME.match(title):
            people.append(title)
    return people


def one_word_names(docs: Sequence[str], max_chars: int = 40) -> list[str]:
    """The subjects of corpus lines ``NAME. text`` whose NAME is one capitalised word."""
    titles = (doc.split(". ", 1)[0] for doc in docs)
    return [t for t in titles if len(t) <= max_chars and _ONE_WORD.match(t)]


def name_parts(docs: Sequence[str], source: str = "the corpus") -> tuple[list[str], list[str], str, str]:
    """What invented names are made of: the first parts, the last parts, what joins them, and
    the recipe in words. The first word of one corpus name and the last word of another when the
    corpus names its subjects with two or more words; else (chemical elements, countries) the
    first half of one one-word name and the second half of another."""
    people = corpus_people(docs)
    firsts = sorted({p.split()[0] for p in people})
    surnames = sorted({p.split()[-1] for p in people if not p.split()[-1].endswith(".")})
    if len(firsts) >= 2 and len(surnames) >= 2:
        return firsts, surnames, " ", "the first word of one name and the last word of another"
    words = one_word_names(docs)
    heads = sorted({w[: len(w) // 2] for w in words})
    tails = sorted({w[len(w) // 2:] for w in words})
    if len(heads) >= 2 and len(tails) >= 2:
        return heads, tails, "", "the first half of one one-word name and the second half of another"
    raise ValueError(f"{source}: too few subjects to recombine their names ({len(firsts)} first name(s) and "
                     f"{len(surnames)} surname(s) of {len(people)} people, {len(words)} one-word name(s); at "
                     "least 2 of each are needed)")


def invent_people(docs: Sequence[str], n: int, seed: int = 0, source: str = "the corpus") -> list[str]:
    """``n`` distinct names recombined from the names of the corpus's subjects (``name_parts``:
    "FIRST SURNAME", each part from a different person), such that no corpus line contains the
    full name (seeded, so the same list every time). ``source`` names the corpus in the errors."""
    if n <= 0:
        raise ValueError(f"--names must be a positive number of people, got {n}")
    firsts, lasts, joiner, _ = name_parts(docs, source)
    text = "\n".join(docs)
    rng = random.Random(seed)
    names: list[str] = []
    seen: set[str] = set()
    for _ in range(200 * n):
        if len(names) == n:
            break
        name = f"{rng.choice(firsts)}{joiner}{rng.choice(lasts)}"
        if name in seen:
            continue
        seen.add(name)
        if name not in text:
            names.append(name)
    if len(names) < n:
        raise ValueError(f"{source}: could invent only {len(names)} names absent from it, not {n}")
    return names


def entropy_bits(counts: Counter) -> float:
    """Shannon entropy (bits) of the distribution the counts define; 0 for none."""
    total = sum(counts.values())
    return max(0.0, -sum(c / total * math.log2(c / total) for c in counts.values() if c)) if total else 0.0


@dataclass
class AuditReport:
    policy: str  # how the model abstains, in words
    invented: int
    invented_abstained: int
    dev: int
    dev_abstained: int
    dev_right: int  # dev questions answered correctly without abstention
    dev_right_kept: int  # of those, still answered under the policy
    places: Counter = field(default_factory=Counter)  # places answered for invented people
    train_top: list[str] = field(default_factory=list)  # the training file's 10 most frequent places

    @property
    def share_in_train_top(self) -> float:
        total = sum(self.places.values())
        return sum(self.places[p] for p in self.train_top) / total if total else 0.0

    def lines(self, words: tuple[str, str, str] = ("people", "people", "places")) -> list[str]:
        """The report in words; ``words``: what the invented subjects, the dev questions' subjects
        and the answers are called (``audit_words``)."""
        pct = lambda k, n: f"{k}/{n} ({100 * k / n:.1f}%)" if n else f"{k}/0"
        answered = sum(self.places.values())
        who, dev, what = words
        out = [
            f"abstention: {self.policy}",
            f"invented {who} abstained: {pct(self.invented_abstained, self.invented)}",
            f"dev {dev} abstained: {pct(self.dev_abstained, self.dev)}",
            f"dev questions answered correctly that are still answered: {pct(self.dev_right_kept, self.dev_right)}",
            f"{what} given to the {answered} invented {who} not abstained: "
            f"{len(self.places)} distinct, entropy {entropy_bits(self.places):.2f} bits, "
            f"{100 * self.share_in_train_top:.1f}% among the training file's 10 most frequent {what}",
        ]
        out += [f"  {count:4d}  {place}" for place, count in self.places.most_common(10)]
        return out


def audit_words(model) -> tuple[str, str, str]:
    """What an audit calls the invented subjects, the dev ones and the answers: the course's
    people and places, or a learned fact set's subjects, questions and answers."""
    return ("subjects", "questions", "answers") if model.config.relations else ("people", "people", "places")


@dataclass
class AuditAnswers:
    """What an audit judges abstention rules by: the model's answers about invented people and
    about real (dev) people, and the training file's 10 most frequent places."""

    invented: list[str]
    invented_answers: list[Answer]
    dev: list[QAExample]
    dev_answers: list[Answer]
    train_top: list[str]

    @property
    def dev_right(self) -> list[bool]:
        return [a.answer == e.answer for a, e in zip(self.dev_answers, self.dev)]

    def report(self, model, vocab, rule: Rule) -> AuditReport:
        """How ``rule`` abstains on both groups, and the places it lets through for invented people."""
        inv_given = decide(model, vocab, rule, self.invented, self.invented_answers)
        dev_given = decide(model, vocab, rule, people_of(self.dev, model), self.dev_answers)
        places = Counter(a.answer for a, ok in zip(self.invented_answers, inv_given) if ok)
        right = self.dev_right
        return AuditReport(rule.describe(), len(self.invented), len(self.invented) - sum(inv_given), len(self.dev),
                           len(self.dev) - sum(dev_given), sum(right),
                           sum(ok and r for ok, r in zip(dev_given, right)), places, self.train_top)


def audit_answers(model, vocab, invented: list[str], dev: list[QAExample], train: list[QAExample], *,
                  batch_size: int = 256) -> AuditAnswers:
    """The model's answers about the ``invented`` people and the ``dev`` people, with the 10 most
    frequent places of the ``train`` file."""
    relations = Schema.from_list(model.config.relations).relations  # each asked in turn
    questions = [QAExample(relations[i % len(relations)].ask(n), None, "<invented>", i + 1)
                 for i, n in enumerate(invented)]
    train_top = [p for p, _ in Counter(e.answer for e in train).most_common(10)]
    return AuditAnswers(invented, answer_questions(model, vocab, questions, batch_size=batch_size), dev,
                        answer_questions(model, vocab, dev, batch_size=batch_size), train_top)


def plot_audit(report: AuditReport, unrestricted: AuditReport, path: str | Path) -> Path:
    """Left: abstention rates under the rule, invented against dev people; right: the places
    the model makes up for invented people when it never abstains."""
    import textwrap

    plt = pyplot()

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [1, 2]})
    rates = [report.invented_abstained / max(1, report.invented), report.dev_abstained / max(1, report.dev)]
    bars = left.bar(["invented people", "dev people"], rates, color=["#c44e52", "#4c72b0"])
    for bar, k, n in zip(bars, [report.invented_abstained, report.dev_abstained], [report.invented, report.dev]):
        left.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{k}/{n}", ha="center", va="bottom")
    left.set_ylim(0, 1.1)
    left.set_ylabel("share abstained")
    left.set_title("\"I don't know\" under the rule")
    top = unrestricted.places.most_common(10)
    if top:
        names = [p for p, _ in top][::-1]
        colours = ["#dd8452" if p in report.train_top else "#8c8c8c" for p in names]
        right.barh(names, [c for _, c in top][::-1], color=colours)
    right.set_xlabel("answers")
    answered = sum(unrestricted.places.values())
    right.set_title(f"never abstaining: top places for {answered} invented people ({len(unrestricted.places)} "
                    f"distinct, entropy {entropy_bits(unrestricted.places):.2f} bits)\norange: among the training "
                    f"file's 10 most frequent places ({100 * unrestricted.share_in_train_top:.0f}% of answers)",
                    fontsize=9)
    fig.suptitle(textwrap.fill(report.policy, 150), fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)
    return path


@dataclass(frozen=True)
class NameEcho:
    """How often an invented person's answer is the place of a real person who shares their
    first name or surname (``echoed``), against the same answers shuffled among the invented
    people (``chance``: the expected share if answers ignored the name)."""

    echoed: int
    answered: int
    chance: float

    def __str__(self) -> str:
        share = self.echoed / self.answered if self.answered else 0.0
        return (f"{self.echoed}/{self.answered} ({100 * share:.1f}%) answers are the place of a real person with "
                f"the same first name or surname; {100 * self.chance:.1f}% if the answers were shuffled")


def name_echo(invented: Sequence[str], answers: Sequence[str], places_of: dict[str, str]) -> NameEcho:
    """``places_of``: labelled real people (name -> place). Empty answers are not counted."""
    by_part: dict[tuple[int, str], set[str]] = {}
    for person, place in places_of.items():
        parts = person.split()
        by_part.setdefault((0, parts[0]), set()).add(place)
        by_part.setdefault((1, parts[-1]), set()).add(place)
    pairs = [(by_part.get((0, n.split()[0]), set()) | by_part.get((1, n.split()[-1]), set()), a)
             for n, a in zip(invented, answers) if a]
    if not pairs:
        return NameEcho(0, 0, 0.0)
    echoed = sum(a in donors for donors, a in pairs)
    given = Counter(a for _, a in pairs)
    chance = sum(sum(given[p] for p in donors) for donors, _ in pairs) / len(pairs) ** 2
    return NameEcho(echoed, len(pairs), chance)


# ---- the whole audit (attnlab audit) ------------------------------------------------------------
AUDIT_FILES = ["audit.png", "audit.json", "invented.txt"]
FITTED = {"confidence": "confidence only", "name": "name familiarity only", "both": "name familiarity and confidence together"}


@dataclass(frozen=True)
class Audit:
    """An audit's results: the answers, the report of each fitted rule (``FITTED``), of the
    policy's chosen rule, and of never abstaining, and how far answers echo names."""

    answers: AuditAnswers
    fitted: dict[str, AuditReport]
    chosen: AuditReport
    never: AuditReport
    echo: NameEcho

    def summary(self) -> dict:
        """audit.json: each report, and the name echo."""
        reports = {**self.fitted, "chosen": self.chosen, "never": self.never}
        return {**{key: report_json(r) for key, r in reports.items()},
                "name_echo": {"echoed": self.echo.echoed, "answered": self.echo.answered, "chance": self.echo.chance}}


def report_json(r: AuditReport) -> dict:
    return {"policy": r.policy, "invented": r.invented, "invented_abstained": r.invented_abstained,
            "dev": r.dev, "dev_abstained": r.dev_abstained, "dev_right": r.dev_right,
            "dev_right_kept": r.dev_right_kept, "top_places": r.places.most_common(10),
            "entropy_bits": entropy_bits(r.places), "share_in_train_top10": r.share_in_train_top}


def audit(model, vocab, invented: list[str], dev: list[QAExample], train: list[QAExample], policy,
          rules: dict[str, Rule], out_dir: str | Path, *, batch_size: int = 256, overwrite: bool = False) -> Audit:
    """Ask about the ``invented`` people and the ``dev`` people; judge the ``rules`` fitted for
    ``policy`` (an AbstainPolicy; ``AbstainPolicy.fitted`` gives them, as ask reads them), its
    chosen rule and never abstaining; write audit.png, invented.txt (name, answer,
    confidence) and audit.json into ``out_dir`` (atomically; existing files refused unless
    ``overwrite``)."""
    from ..core.outputs import write_output

    seen = audit_answers(model, vocab, invented, dev, train, batch_size=batch_size)
    chosen = policy.choose(rules) or Rule(how="--abstain off")
    schema = Schema.from_list(model.config.relations)
    known = {asked.subject: e.answer for e in [*train, *dev]
             if (asked := schema.require(e)).relation == schema.relations[0]}
    result = Audit(seen, {key: seen.report(model, vocab, rules[key]) for key in FITTED},
                   seen.report(model, vocab, chosen), seen.report(model, vocab, Rule(how="never abstain")),
                   name_echo(invented, [a.answer for a in seen.invented_answers], known))
    out = Path(out_dir)
    plot_audit(result.chosen, result.never, out / "audit.png")
    write_output(out / "invented.txt", "".join(
        f"{n}\t{a.answer}\t{a.confidence:.4f}\n" for n, a in zip(invented, seen.invented_answers)), overwrite)
    write_output(out / "audit.json", json.dumps(result.summary(), indent=2) + "\n", overwrite)
    return result
