"""Editors against the retrained model (issue 49, item 1): what an edit should do, measured.

Published editors are scored on models nobody can retrain, so "what the model should do after the
edit" is a guess. Here the default recipe (`attnlab learn`) trains a model from scratch in
minutes, so the reference exists: the model trained on a fact set in which the edited subjects
had the new answers all along (the oracle).

1. ``--k`` edit requests (default 25 dev subjects, plus ``--train-subjects`` training ones),
   seeded: each subject's answer of the edited relation becomes a random other answer of that
   relation in the training file. Only subjects whose corpus line spells their answer exactly once
   (after their name) and whose name opens one line are drawn: the corpus can then be changed by
   replacing that one span.
2. The edited fact set is written to OUT/edited-set/ in the fact-set format (docs/guides/your-facts.md):
   the corpus lines changed, the training answers changed for training subjects, the dev answers
   for dev subjects (dev answers only score: no dev label enters training), every other byte kept.
3. The base (``--base RUN``, else trained into OUT/base on the unedited set) and the oracle
   (OUT/oracle, on the edited set) come from the same recipe, budget and seed (``--minutes``,
   ``--seed``): `attnlab learn`.
4. Each editor (gated ``grace``, rank-one ``rome``, ``finetune``) edits the base once per request
   (single edits, each from the base), and is compared with the oracle subject by subject on:
   the edited question; the completion of the subject's own corpus line up to the answer; two
   paraphrases (cloze prompts in words the editor never saw: PARAPHRASES); for fact sets of several
   relations the subject's other relations; and the answers of ``--others`` other subjects.

Every answer is generated greedily (`attnlab ask`'s decoding), never teacher forced. A probe's
output is classed as *new* (starts with the new answer), *old* (starts with the answer before the
edit: the base model's own answer, else the gold one) or *other*; an editor and the oracle agree on
a probe when they fall in the same class (for the other subjects: when they give the same answer).
Counts carry Wilson 95% intervals.

Output: OUT/report.json and a section of docs/benchmarks.md (``edit-oracle-SET``).

Run: .venv/bin/python benchmarks/edit_oracle.py --facts data --minutes 15 --out runs/oracle  (the machine to itself: the
trainings are budgeted in minutes, as `attnlab learn` is)
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, count_with_interval, report, table  # noqa: E402

from attnlab.core.paths import write_atomically  # noqa: E402
from attnlab.data import factset as factsets  # noqa: E402
from attnlab.data.corpus import CorpusIndex  # noqa: E402
from attnlab.data.datasets import QAExample, read_qa, read_text  # noqa: E402

METHODS = ("grace", "rome", "finetune")
# Two cloze prompts per relation, in words no edit input holds (the editor sees the question's
# recall and the corpus line; these open the subject's line as a sentence it never had).
PARAPHRASES: dict[str, tuple[str, str]] = {
    "birthplace": ("{s}. {s} was born in ", "{s}. Born in "),
    "capital": ("{s}. The capital of {s} is ", "{s}. {s} has its capital at "),
    "sea": ("{s}. {s} lies in the ", "{s}. The island of {s} is in the "),
}


@dataclass(frozen=True)
class Request:
    subject: str
    relation: str
    old: str  # the gold answer before the edit
    new: str
    dev: bool  # a dev subject (else a training one)


def _opening_counts(docs: list[str], index: CorpusIndex, subjects) -> Counter:
    """How many corpus lines open with each subject's ``NAME. `` (namesakes open two)."""
    wanted = set(subjects)
    return Counter(d.split(". ", 1)[0] for d in docs if d.split(". ", 1)[0] in wanted)


def choose_requests(facts, k: int, train_k: int, seed: int, relation: str) -> list[Request]:
    """``k`` dev and ``train_k`` training subjects (seeded) whose one corpus line spells their
    answer once, each given another training answer of ``relation``."""
    schema = facts.schema
    docs = read_text(facts.corpus).split("\n")
    index = CorpusIndex(docs)
    pools = {}
    for dev, path in ((True, facts.dev), (False, facts.train)):
        rows = [(schema.require(e).subject, e.answer) for e in read_qa(path, labelled=True)
                if schema.require(e).relation.name == relation]
        pools[dev] = rows
    answers = sorted({a for _, a in pools[False]})
    openings = _opening_counts(docs, index, [s for rows in pools.values() for s, _ in rows])

    def editable(subject: str, answer: str) -> bool:
        line = index.line_of(subject)
        return openings[subject] == 1 and line is not None and line.count(answer, len(subject) + 1) == 1

    rng = random.Random(seed)
    chosen = []
    for dev, n in ((True, k), (False, train_k)):
        rows = sorted(r for r in pools[dev] if editable(*r))
        if n > len(rows):
            raise SystemExit(f"asked for {n} {'dev' if dev else 'training'} subjects; {len(rows)} can be edited")
        for subject, old in rng.sample(rows, n):
            chosen.append(Request(subject, relation, old, rng.choice([a for a in answers if a != old]), dev))
    return chosen


def _replace_answers(text: str, changed: dict[str, str]) -> str:
    """A question file with the answers of the questions in ``changed`` replaced."""
    out = []
    for line in text.split("\n"):
        question, tab, _ = line.partition("\t")
        out.append(f"{question}\t{changed[question]}" if tab and question in changed else line)
    return "\n".join(out)


def write_edited_set(facts, requests: list[Request], out: Path) -> Path:
    """The fact set with the requests made true, in ``out`` (the same file names): each edited
    subject's corpus line with its answer replaced, and its question's answer in the training or
    dev file; every other line kept byte for byte."""
    schema = facts.schema
    corpus = read_text(facts.corpus)
    lines = corpus.split("\n")
    index = CorpusIndex(lines)
    for r in requests:
        i = index.line_number(r.subject) - 1
        at = lines[i].index(r.old, len(r.subject) + 1)
        lines[i] = lines[i][:at] + r.new + lines[i][at + len(r.old):]
    out.mkdir(parents=True, exist_ok=True)
    write_atomically(out / facts.corpus.name, "\n".join(lines))
    for role, dev in (("train", False), ("dev", True)):
        changed = {schema.relation(r.relation).ask(r.subject): r.new for r in requests if r.dev == dev}
        write_atomically(out / facts.files[role].name, _replace_answers(read_text(facts.files[role]), changed))
    if facts.test is not None:
        write_atomically(out / facts.test.name, facts.test.read_bytes())
    write_atomically(out / factsets.FACTS_FILE, (facts.root / factsets.FACTS_FILE).read_bytes())
    return out


def learn_trainer(minutes: float, seed: int) -> Callable[[Path, Path], Path]:
    """The default recipe (`attnlab learn DIR --minutes M --seed S`) as a trainer."""
    def train(facts_dir: Path, run_dir: Path) -> Path:
        from attnlab.experiments.learn import learn

        if not (run_dir / "checkpoint.safetensors").exists():  # an earlier run of this script trained it
            learn(facts_dir, run_dir, minutes=minutes, seed=seed, device="cpu")
        return run_dir
    return train


# ---- probing ---------------------------------------------------------------------------------
def classify(text: str, new: str, old: str) -> str:
    return "new" if text.startswith(new) else "old" if old and text.startswith(old) else "other"


def probes(model, vocab, r: Request, old: str, line: str | None) -> dict[str, str]:
    """The classes of one edited subject's probes under ``model`` (old: the base's answer)."""
    from attnlab.answering.evaluate import answer_questions
    from attnlab.data.relations import Schema
    from attnlab.facts.edit import place_slot

    schema = Schema.from_list(model.config.relations)
    asked = answer_questions(model, vocab, [QAExample(schema.relation(r.relation).ask(r.subject), None, "<oracle>", 1)])
    out = {"question": classify(asked[0].answer, r.new, old)}
    slot = place_slot(line, r.subject, [r.old])
    out["own line"] = "-" if slot is None else classify(complete(model, vocab, slot, len(r.new)), r.new, old)
    for n, template in enumerate(PARAPHRASES.get(r.relation, ()), 1):
        out[f"paraphrase {n}"] = classify(complete(model, vocab, template.format(s=r.subject), len(r.new)), r.new, old)
    return out


def complete(model, vocab, prefix: str, chars: int) -> str:
    """Greedy continuation of ``prefix`` (``chars`` characters, cut at the block)."""
    from attnlab.model.generate import generate

    ids = vocab.encode(prefix)
    room = min(chars, model.config.block_size - len(ids))
    return "" if room <= 0 else vocab.decode(generate(model, [ids], room).tokens[0])


def answers_of(model, vocab, examples: list[QAExample]) -> list[str]:
    from attnlab.answering.evaluate import answer_questions

    return [a.answer for a in answer_questions(model, vocab, examples)] if examples else []


# ---- the editors -----------------------------------------------------------------------------
class Editors:
    """The three editors, their statistics gathered once from the base model."""

    def __init__(self, model, vocab, facts, docs: list[str], stat_lines: int, seed: int):
        from attnlab.facts.correction import training_answers
        from attnlab.facts.edit import answer_layer, key_second_moment, stat_texts
        from attnlab.facts.gated_edit import Negatives, gated_layer

        texts = stat_texts(model, docs, stat_lines, seed, training_answers(facts.train, facts.schema))
        self.model, self.vocab, self.index = model, vocab, CorpusIndex(docs)
        self.negatives = Negatives.of(model, vocab, texts, gated_layer(model))
        self.layer = answer_layer(model)
        self.moment = key_second_moment(model, vocab, texts, self.layer)

    def edit(self, method: str, r: Request):
        """The base edited by ``method`` (None when the editor refuses: EditError)."""
        from attnlab.facts.edit import edit_model
        from attnlab.facts.errors import EditError
        from attnlab.facts.finetune_edit import finetune_edit
        from attnlab.facts.gated_edit import gated_edit

        relation = r.relation if len(self.model.config.relations) > 1 else None
        try:
            if method == "grace":
                return gated_edit(self.model, self.vocab, r.subject, r.new, self.negatives, owner=1,
                                  line=self.index.line_of(r.subject), relation=relation)[0]
            if method == "rome":
                return edit_model(self.model, self.vocab, r.subject, r.new, self.layer, self.moment, relation=relation)[0]
            return finetune_edit(self.model, self.vocab, r.subject, r.new, self.layer, relation=relation)[0]
        except EditError:
            return None


# ---- the comparison --------------------------------------------------------------------------
@dataclass
class Subjects:
    """What the comparison asks besides the edited probes."""

    others: list[QAExample]  # other subjects' questions of the edited relation
    other_relations: dict[str, list[QAExample]]  # per edited subject, its questions of other relations


def watched(facts, requests: list[Request], n_others: int, seed: int) -> Subjects:
    """The other subjects' questions of the edited relation (the dev ones first, then training
    ones drawn at random, ``n_others`` in all) and the edited subjects' other questions."""
    schema = facts.schema
    edited = {r.subject for r in requests}
    relation = requests[0].relation
    pools: dict[bool, list[QAExample]] = {True: [], False: []}
    rest: dict[str, list[QAExample]] = {}
    for dev, path in ((True, facts.dev), (False, facts.train)):
        for e in read_qa(path, labelled=True):
            asked = schema.require(e)
            if asked.subject in edited:
                if asked.relation.name != relation:
                    rest.setdefault(asked.subject, []).append(e)
            elif asked.relation.name == relation:
                pools[dev].append(e)
    others = pools[True][:n_others]
    others += random.Random(seed).sample(pools[False], min(len(pools[False]), n_others - len(others)))
    return Subjects(others, rest)


def same_answers(model, vocab, examples: list[QAExample], before: list) -> list[str]:
    """``model``'s generated answers to ``examples``, given the base's (evaluate.Answer): only
    the ones changed_answers finds changed are generated again (exact, and much faster)."""
    from attnlab.facts.edit import changed_answers

    answers = [a.answer for a in before]
    changed = changed_answers(model, vocab, examples, before) if examples else []
    for i, a in zip(changed, answers_of(model, vocab, [examples[i] for i in changed])):
        answers[i] = a
    return answers


def compare(base, oracle, edited: dict[str, list], vocab, requests: list[Request], subjects: Subjects,
            index: CorpusIndex) -> dict:
    """Per editor, per probe: the classes of its outputs and the oracle's; the other subjects'
    and other relations' answers: how many are the oracle's and how many the base's."""
    from attnlab.answering.evaluate import answer_questions

    old = answers_of(base, vocab, [QAExample(base_question(base, r), None, "<oracle>", 1) for r in requests])
    base_old = [o or r.old for o, r in zip(old, requests)]
    oracle_rows = [probes(oracle, vocab, r, o, index.line_of(r.subject)) for r, o in zip(requests, base_old)]
    before = answer_questions(base, vocab, subjects.others) if subjects.others else []
    others_base = [a.answer for a in before]
    others_oracle = answers_of(oracle, vocab, subjects.others)
    rel = [subjects.other_relations.get(r.subject, []) for r in requests]
    flat = [e for group in rel for e in group]
    rel_before = answer_questions(base, vocab, flat) if flat else []
    rel_oracle = answers_of(oracle, vocab, flat)
    out = {"oracle": {"probes": oracle_rows, "others_as_base": _same(others_oracle, others_base),
                      "others_right": _same(others_oracle, [e.answer for e in subjects.others]),
                      "relations_as_base": _same(rel_oracle, [a.answer for a in rel_before]),
                      "relations_right": _same(rel_oracle, [e.answer for e in flat])},
           "others": len(subjects.others), "other_relations": len(flat),
           "base_others_right": _same(others_base, [e.answer for e in subjects.others])}
    for method, models in edited.items():
        m = {"probes": [], "refused": 0, "others_as_oracle": 0, "others_as_base": 0,
             "relations_as_oracle": 0, "relations_as_base": 0}
        at = 0
        for r, o, model, group in zip(requests, base_old, models, rel):
            if model is None:  # refused: the edit is not made, the base answers for it
                m["refused"] += 1
                model = base
            m["probes"].append(probes(model, vocab, r, o, index.line_of(r.subject)))
            mine = same_answers(model, vocab, subjects.others, before)
            m["others_as_oracle"] += _same(mine, others_oracle)
            m["others_as_base"] += _same(mine, others_base)
            got = same_answers(model, vocab, group, rel_before[at:at + len(group)])
            m["relations_as_oracle"] += _same(got, rel_oracle[at:at + len(group)])
            m["relations_as_base"] += _same(got, [a.answer for a in rel_before[at:at + len(group)]])
            at += len(group)
        out[method] = m
    return out


def _same(a: list[str], b: list[str]) -> int:
    return sum(x == y for x, y in zip(a, b))


def base_question(model, r: Request) -> str:
    from attnlab.data.relations import Schema

    return Schema.from_list(model.config.relations).relation(r.relation).ask(r.subject)


def summary(result: dict, requests: list[Request], setup: str) -> str:
    k = len(requests)
    kinds = [p for p in result["oracle"]["probes"][0]] if k else []
    rows = []
    for kind in kinds:
        oracle = [row[kind] for row in result["oracle"]["probes"]]
        asked = [i for i, c in enumerate(oracle) if c != "-"]
        rows.append([kind, "oracle", count_with_interval(sum(oracle[i] == "new" for i in asked), len(asked)), "-"])
        for method in METHODS:
            if method not in result:
                continue
            mine = [row[kind] for row in result[method]["probes"]]
            rows.append([kind, method, count_with_interval(sum(mine[i] == "new" for i in asked), len(asked)),
                         count_with_interval(sum(mine[i] == oracle[i] for i in asked), len(asked))])
    n, nr = result["others"], result["other_relations"]
    others = [["oracle", count_with_interval(result["oracle"]["others_as_base"], n), "-",
               count_with_interval(result["oracle"]["others_right"], n)]]
    for method in METHODS:
        if method in result:
            m = result[method]
            others.append([f"{method} (refused {m['refused']} of {k})", count_with_interval(m["others_as_base"], n * k),
                           count_with_interval(m["others_as_oracle"], n * k), ""])
    parts = [table(["probe", "model", "writes the new answer", "agrees with the oracle (same class)"], rows),
             table([f"the answers of {n} other subjects", "same as the base", "same as the oracle",
                    "right (gold)"], others)]
    if nr:
        rel = [["oracle", count_with_interval(result["oracle"]["relations_as_base"], nr), "-",
                count_with_interval(result["oracle"]["relations_right"], nr)]]
        rel += [[m, count_with_interval(result[m]["relations_as_base"], nr), count_with_interval(result[m]["relations_as_oracle"], nr), ""]
                for m in METHODS if m in result]
        parts.append(table([f"the edited subjects' other relations ({nr} questions)", "same as the base",
                            "same as the oracle", "right (gold)"], rel))
    return "\n\n".join(parts + [setup])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--facts", default=str(DATA), help="the fact-set folder (default: the birthplace set)")
    ap.add_argument("--relation", default=None, help="the relation edited (default: the set's first)")
    ap.add_argument("--k", type=int, default=25, help="edit requests of dev subjects")
    ap.add_argument("--train-subjects", type=int, default=0, help="edit requests of training subjects besides")
    ap.add_argument("--others", type=int, default=500, help="other subjects whose answers are compared")
    ap.add_argument("--minutes", type=float, default=15.0, help="the recipe's budget (attnlab learn --minutes)")
    ap.add_argument("--seed", type=int, default=0, help="requests and training seed")
    ap.add_argument("--base", default=None, help="the base run (trained by the same recipe on the unedited set); "
                    "default: trained into OUT/base")
    ap.add_argument("--methods", default=",".join(METHODS), help="editors compared")
    ap.add_argument("--stat-lines", type=int, default=2000, help="lines of the editors' statistics")
    ap.add_argument("--out", default="runs/oracle", help="where the edited set, the runs and report.json go")
    ap.add_argument("--no-write", action="store_true", help="leave docs/benchmarks.md alone")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None, trainer: Callable[[Path, Path], Path] | None = None) -> dict:
    from attnlab.model.checkpoint import load_model

    args = parse_args(argv)
    facts = factsets.load(args.facts)
    relation = args.relation or facts.schema.relations[0].name
    out = Path(args.out)
    requests = choose_requests(facts, args.k, args.train_subjects, args.seed, relation)
    edited_dir = write_edited_set(facts, requests, out / "edited-set")
    train = trainer or learn_trainer(args.minutes, args.seed)
    began = time.perf_counter()
    base_dir = Path(args.base) if args.base else train(facts.root, out / "base")
    oracle_dir = train(edited_dir, out / "oracle")
    trained = (time.perf_counter() - began) / 60
    base, vocab, _ = load_model(base_dir)
    oracle, oracle_vocab, _ = load_model(oracle_dir)
    if oracle_vocab.stoi != vocab.stoi:  # the new answers are old answers: the characters are the same
        raise SystemExit("the oracle's vocabulary differs from the base's; the probes need one")
    docs = read_text(facts.corpus).split("\n")
    editors = Editors(base, vocab, facts, docs, args.stat_lines, args.seed)
    methods = [m for m in args.methods.split(",") if m]
    edited = {m: [editors.edit(m, r) for r in requests] for m in methods}
    subjects = watched(facts, requests, args.others, args.seed)
    result = compare(base, oracle, edited, vocab, requests, subjects, CorpusIndex(docs))
    setup = (f"- fact set {facts.name}, relation `{relation}`: {sum(r.dev for r in requests)} dev and "
             f"{sum(not r.dev for r in requests)} training subjects given new answers (seed {args.seed}); base "
             f"{'`' + args.base + '`' if args.base else 'and oracle'} trained by `attnlab learn DIR --minutes {args.minutes:g} "
             f"--seed {args.seed}` (DIR: {args.facts}, and {args.out}/edited-set for the oracle; training took "
             f"{trained:.1f} min); each edit made once "
             "from the base; every answer generated greedily, never teacher forced; paraphrases: "
             + "; ".join(f"`{t}`" for t in PARAPHRASES.get(relation, ())))
    record = {"requests": [asdict(r) for r in requests], "result": result, "setup": setup, "args": vars(args)}
    write_atomically(out / "report.json", json.dumps(record, indent=1) + "\n")
    report(f"edit-oracle-{facts.name}", summary(result, requests, setup), write=not args.no_write,
           title=f"Editors against the retrained model, {facts.name} (benchmarks/edit_oracle.py)")
    return record


if __name__ == "__main__":
    main()
