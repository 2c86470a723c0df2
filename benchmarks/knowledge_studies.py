"""Knowledge studies: the published results on synthetic biographies (Allen-Zhu and Li, Physics
of Language Models, Parts 3.1, 3.2 and 3.3) rerun at CPU scale on `attnlab synth bios` sets, each
row with the paper's direct answer and with the lab's recall-and-copy read-out, three seeds,
95% intervals, beside the paper's figure (docs/guides/knowledge-studies.md).

    .venv/bin/python benchmarks/knowledge_studies.py --rows 3.1-single --seeds 0 1 2 --write
    .venv/bin/python benchmarks/knowledge_studies.py --table           # the table from what is recorded
    .venv/bin/python benchmarks/knowledge_studies.py --list            # the rows and their commands

A cell is one row, one read-out, one seed at one scale (--people, --minutes): it generates its
set (the seed draws the people too), trains and scores (models and sets under OUT), and records
its counts in the ledger at once: benchmarks/records/knowledge-studies.json, committed, so a
study is continued in a later session (--ledger; --tiny runs keep theirs in OUT/ledger.json). A
cell already recorded there is skipped, so an interrupted study continues where it stopped.
--write puts the table into the guide's generated section.

Read-outs:

- direct: the paper's. Pretraining is next-character prediction on the corpus (QA of the
  trained half mixed in for the mixed-training rows); the model is then finetuned to answer
  ``question⁇answer⁇`` on the trained half (not for mixed training, which the paper tests
  without finetuning) and asked about the other half.
- recall: the lab's (`attnlab learn`'s recipe, without the swapped copies its pretraining
  gained after these cells were recorded: study_recipe): the model first writes the
  subject's document from its name, then copies the answer out of it. Its pretraining always
  mixes in the answers of a share of the trained half (the recipe's format subjects, never a
  held-out person), so the mixed-training row has no recall cell of its own.
- bits (Part 3.3): knowledge bits stored, per parameter: each value of a sample of the people
  scored among its pool (``knowledge_bits``), against what the model says of anyone.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from _common import REPO, table, write_section

from attnlab.core.paths import write_atomically

GUIDE = REPO / "docs" / "guides" / "knowledge-studies.md"
LEDGER = REPO / "benchmarks" / "records" / "knowledge-studies.json"
SECTION = "knowledge-studies"
SCRIPT = "benchmarks/knowledge_studies.py"
DEFAULT_PEOPLE = 1000  # the paper's 100,000 scaled so that a run passes over its corpus tens of times
DEFAULT_MINUTES = 10.0  # a run's budget: 2 read-outs x 3 seeds x 10 minutes = one hour a row
DEFAULT_SEEDS = (0, 1, 2)
AUGMENTED = {"multi": 5, "permute": True, "fullname": True}
TRAIN_SAMPLE = 300  # trained-on questions scored too: a row whose finetuning did not take shows it
# Direct-answer finetuning on the trained half (the recall recipe keeps its own): enough epochs
# that it fits its own questions (the train sample says whether it did), else a row tests the
# finetuning, not whether the knowledge can be extracted.
DIRECT_FINETUNE = dict(epochs=10, batch_size=32, learning_rate=6e-4, checkpoint_every=0)
# Part 3.3: small models at fixed numbers of exposures (passes over bioS single: one biography
# a person, so one pass is one exposure of each fact), each (layers, width): a size below and
# one above the size at which a character model starts to store facts of the people (the
# guide). 2,000 people hold about 92,000 bits of values: a model at 1 bit a parameter could
# store them all, so a ratio well under 92,000 / parameters is the model's bound, not the set's.
CAPACITY_MODELS = ((1, 32), (2, 64))
CAPACITY_PEOPLE = 2000
CAPACITY_PRETRAIN = dict(objective="lm", batch_size=16, learning_rate=3e-3, optimizer="muon", checkpoint_every=500)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


@dataclass(frozen=True)
class Row:
    key: str
    part: str
    what: str
    paper: str  # the paper's figure and where it stands
    data: dict = field(default_factory=dict)  # BiosOptions besides people and seed
    task: str = "attributes"  # attributes, minority, inverse, compare, compare-steps, bits
    mix: bool = False  # QA of the trained half mixed into pretraining (the paper's mixed training)
    readouts: tuple = ("direct", "recall")
    not_applicable: str = ""  # why the recall read-out has no cell in this row
    exposures: int = 0  # Part 3.3: passes over the set
    # The share of --people the row's set holds: an augmented set of a fifth of the people has
    # the single set's characters of text, so a time budget gives it the same passes (at the
    # full count its biographies get a fifth of the passes and are not stored).
    people_share: float = 1.0
    capacity_model: tuple[int, int] = (1, 32)  # Part 3.3: the model's layers and width

    def people(self, settings: "Settings") -> int:
        if self.task == "bits":
            return settings.capacity_people
        return max(8, round(settings.people * self.people_share))  # 8: two people in each quarter


UNVERIFIED = "quoted from the issue, not checked against the paper here"
ROWS = [
    Row("3.1-single", "3.1", "bioS single: pretrain, QA finetune on half, test on the other half",
        f"about 9.7% ({UNVERIFIED}); v3's abstract: 'memorized but not extractable, leading to 0% accuracy'"),
    Row("3.1-augmented", "3.1", "multi5 + permute + fullname: pretrain, QA finetune on half, test on the other half",
        f"about 96% ({UNVERIFIED}); abstract: extraction needs augmentation (paraphrasing, sentence shuffling)",
        data=AUGMENTED),
    Row("3.1-augmented-same-text", "3.1", "multi5 + permute + fullname for a fifth of the people: the single "
        "row's characters of text, so the same passes; pretrain, QA finetune on half, test on the other half",
        f"about 96% ({UNVERIFIED}); here the passes of the single row are kept, not its count of people",
        data=AUGMENTED, people_share=0.2),
    Row("3.1-mixed", "3.1", "bioS single, mixed training: QA of the trained half in pretraining, no finetune",
        f"mixed training lets the model answer about the other half ({UNVERIFIED}; abstract: 'incorporate "
        "more instruction-finetuning data into the pretraining stage')", mix=True, readouts=("direct",),
        not_applicable="the lab's recipe always mixes answers of the trained half into pretraining: its cell is "
        "the single row's"),
    Row("3.1-celebrities", "3.1", "celebrities (half the people: multi5 + permute + fullname), the rest single, "
        "a third of the people (the single row's characters of text): QA finetune on celebrities, test on the "
        "minority", f"augmenting celebrities lifts the minority ({UNVERIFIED})",
        data={**AUGMENTED, "celebrities": 0.5}, task="minority", people_share=1 / 3),
    Row("3.2-inverse", "3.2", "inverse search: 'Who was born on DATE in CITY?', finetune on half, test on the "
        "other (the 3.2 rows: multi5 + permute + fullname, a fifth of the people, as 3.1-augmented-same-text)",
        "virtually 0% (abstract of arXiv 2309.14402 v2)", data=AUGMENTED, task="inverse", readouts=("direct",),
        people_share=0.2,
        not_applicable="the read-out recalls a document from its subject's name; an inverse question names no one"),
    Row("3.2-compare", "3.2", "'Was A born in an earlier year than B?' answered at once (the recall read-out: "
        "each person's birth date read out of their recall, the two years compared by the program)",
        "fails without chain of thought (abstract of arXiv 2309.14402 v2; the figure not checked here)",
        data=AUGMENTED, task="compare", people_share=0.2),
    Row("3.2-compare-steps", "3.2", "the same, the two years written first ('1961; 2088; Yes')",
        "works with chain of thought in training and inference (abstract of arXiv 2309.14402 v2)",
        data=AUGMENTED, task="compare-steps", readouts=("direct",), people_share=0.2,
        not_applicable="the read-out always writes both years first: its cell is the 3.2-compare row's"),
    *[Row(f"3.3-bits-L{n}W{w}-E{e}", "3.3", f"bits of knowledge a parameter: bioS single, {n} layer(s) x {w} "
          f"wide, {e} exposures a fact", "about 1 bit a parameter at 100 exposures, 2 at 1,000 (arXiv 2404.05405: "
          "a figure caption, 'R(F) >= 2 (resp. >= 1) for 1000 exposures (resp. 100)'; which figure not checked "
          "here)", task="bits", readouts=("bits",), exposures=e, capacity_model=(n, w))
      for n, w in CAPACITY_MODELS for e in (25, 100)],
]
ROWS_BY_KEY = {r.key: r for r in ROWS}


@dataclass(frozen=True)
class Settings:
    people: int = DEFAULT_PEOPLE
    minutes: float = DEFAULT_MINUTES
    capacity_people: int = CAPACITY_PEOPLE  # Part 3.3's sets
    out: Path = Path("runs/studies")
    tiny: bool = False  # seconds-long runs (tests, smoke checks): know nothing
    device: str = "cpu"
    attention: str = "vanilla"  # a variation: every model of the study with this attention
    ledger: Path | None = None  # the cells' counts (None: LEDGER, or OUT/ledger.json for tiny runs)

    def ledger_path(self) -> Path:
        return self.ledger or (self.out / "ledger.json" if self.tiny else LEDGER)

    def scale(self) -> str:
        """The part of a cell's key that says at what scale (and with what attention) it ran."""
        return (f"N{self.people}-M{self.minutes:g}-C{self.capacity_people}" + ("-tiny" if self.tiny else "")
                + ("" if self.attention == "vanilla" else f"-{self.attention}"))


def cell_key(row: Row, readout: str, seed: int, settings: Settings, *, measure: bool = True) -> str:
    """A cell's name in the ledger: its row, read-out and seed, and the settings it depends on
    (Part 3.3: the measure too, unless ``measure`` is False: the name of its training)."""
    if row.task == "bits":
        scale = f"C{settings.capacity_people}" + (f"-{BITS_MEASURE}" if measure else "")
    else:
        scale = f"N{row.people(settings)}-M{settings.minutes:g}"
    extra = ("-tiny" if settings.tiny else "") + ("" if settings.attention == "vanilla" else f"-{settings.attention}")
    return f"{row.key}/{readout}/{scale}{extra}/seed{seed}"


# ----------------------------------------------------------------------------- the ledger


def read_ledger(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def record(path: Path, key: str, result: dict[str, Any]) -> None:
    """Add one cell's result to the ledger, written whole (a reader never sees half of it), under
    a lock: two studies sharing OUT (rows run side by side on a larger machine) lose no cell."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ledger = read_ledger(path)
        ledger[key] = result
        write_atomically(path, json.dumps(ledger, indent=1, sort_keys=True) + "\n")


def run_cells(rows: list[Row], seeds: list[int], readouts: list[str], settings: Settings,
              log: Callable[[str], None] = print) -> list[str]:
    """Every cell of ``rows`` not yet in the ledger, one after another; the keys run."""
    done, ran = read_ledger(settings.ledger_path()), []
    for row in rows:
        for readout in [r for r in row.readouts if r in readouts]:
            for seed in seeds:
                key = cell_key(row, readout, seed, settings)
                if key in done:
                    log(f"{key}: recorded, skipped")
                    continue
                log(f"{key}: running")
                began = time.perf_counter()
                result = run_cell(row, readout, seed, settings)
                result["wall_minutes"] = round((time.perf_counter() - began) / 60, 2)
                record(settings.ledger_path(), key, result)
                ran.append(key)
    return ran


# ----------------------------------------------------------------------------- the data


def bios_set(row: Row, seed: int, settings: Settings) -> Path:
    """The row's generated set for this seed, made once and shared by the rows that use it (a
    folder left half-written by an interrupted generation is made again)."""
    import shutil

    from attnlab.data.synth import bios

    people = row.people(settings)
    options = bios.BiosOptions(people=people, seed=seed, **row.data)
    switches = [f"multi{options.multi}"] * (options.multi > 1) + ["permute"] * options.permute + \
        ["fullname"] * options.fullname + [f"celebrities{options.celebrities:g}"] * (options.celebrities < 1)
    folder = settings.out / "data" / "_".join([f"people{people}", f"seed{seed}", *switches])
    if not (folder / "facts.toml").is_file():  # written last: a set without it is unfinished
        shutil.rmtree(folder, ignore_errors=True)
        bios.write(bios.generate(options), folder)
    return folder


def people_of(folder: Path) -> list[dict[str, str]]:
    lines = (folder / "people.tsv").read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[1:]]


def minority_set(folder: Path, work: Path) -> Path:
    """The celebrity row's set: QA training on the celebrities' trained half only, dev and test
    questions about the minority (the people given one plain biography) only."""
    from attnlab.data.synth.values import RELATIONS

    people = people_of(folder)
    target = work / "facts"
    target.mkdir(parents=True, exist_ok=True)
    for name in ("corpus.txt", "facts.toml"):
        write_atomically(target / name, (folder / name).read_text(encoding="utf-8"))
    keep = {"train": "celebrity", "dev": "plain", "test": "plain"}
    for split, group in keep.items():
        rows = [f"{q.format(subject=p['name'])}\t{p[a]}\n" for p in people if p["split"] == split
                and p["group"] == group for a, _, q in RELATIONS]
        write_atomically(target / f"{split}.tsv", "".join(rows))
    return target


def inverse_questions(people: list[dict[str, str]], split: str) -> str:
    """'Who was born on DATE in CITY?' -> the full name, for the people of ``split`` whose date
    and city no one else shares (the question has one answer)."""
    counts: dict[tuple[str, str], int] = {}
    for p in people:
        counts[p["birth_date"], p["birth_city"]] = counts.get((p["birth_date"], p["birth_city"]), 0) + 1
    return "".join(f"Who was born on {p['birth_date']} in {p['birth_city']}?\t{p['name']}\n" for p in people
                   if p["split"] == split and counts[p["birth_date"], p["birth_city"]] == 1)


def compare_questions(people: list[dict[str, str]], split: str, steps: bool, seed: int) -> str:
    """'Was A born in an earlier year than B?' for pairs of ``split`` people born in different
    years, Yes and No equally often; with ``steps`` the answer writes both years first."""
    group = [p for p in people if p["split"] == split]
    rng = random.Random(f"compare {split} {seed}")
    lines = []
    for _ in range(2 * len(group)):
        a, b = rng.sample(group, 2)
        ya, yb = int(a["birth_date"][-4:]), int(b["birth_date"][-4:])
        if ya == yb:
            continue
        verdict = "Yes" if ya < yb else "No"
        answer = f"{ya}; {yb}; {verdict}" if steps else verdict
        lines.append(f"Was {a['name']} born in an earlier year than {b['name']}?\t{answer}\n")
    return "".join(lines)


def derived_files(row: Row, folder: Path, work: Path, seed: int) -> tuple[Path, Path]:
    """The row's own train and dev question files, made from the set's people (Part 3.2)."""
    people = people_of(folder)
    files = []
    for split in ("train", "dev"):
        if row.task == "inverse":
            text = inverse_questions(people, split)
        else:
            text = compare_questions(people, split, row.task == "compare-steps", seed)
        files.append(write_atomically(work / f"{row.task}-{split}.tsv", text))
    return files[0], files[1]


# ----------------------------------------------------------------------------- the cells


def run_cell(row: Row, readout: str, seed: int, settings: Settings) -> dict[str, Any]:
    """Train and score one cell; its counts (and what it trained) as the ledger keeps them."""
    folder = bios_set(row, seed, settings)
    work = settings.out / "runs" / cell_key(row, readout, seed, settings, measure=False).replace(":", "_")
    if row.task == "bits":
        return capacity_cell(row, folder, work, seed, settings)
    facts_dir = minority_set(folder, work) if row.task == "minority" else folder
    if row.task == "compare" and readout == "recall":
        return compare_recall_cell(folder, work, seed, settings)
    if row.task in ("inverse", "compare", "compare-steps"):
        train, dev = derived_files(row, folder, work, seed)
        return direct_cell(facts_dir, work, seed, settings, mix=row.mix, files=(train, dev),
                           verdict=row.task == "compare-steps", few_answers=row.task != "inverse")
    if readout == "direct":
        return direct_cell(facts_dir, work, seed, settings, mix=row.mix)
    return recall_cell(facts_dir, work, seed, settings)


def quiet(message: str) -> None:
    """Training logs: the pipeline's lines that say what was trained, the rest dropped."""
    if message.startswith(("pretraining", "finetuning", "--minutes", "learning")):
        print("  " + message, flush=True)


def study_recipe(facts, settings: Settings, seed: int):
    """`learn`'s recipe for the set and budget, as shipped (``settings.tiny`` cuts it to
    seconds). The recall cells use it whole: its pretraining mixes in the answer format of a
    share of the trained half (never of the held-out half), which its light finetuning relies
    on. Without that mix, finetuning must teach the format: at the recipe's learning rate it
    does not, at the direct cells' it overwrites the stored biographies (the model recalls the
    wrong person's facts), so the unmixed recall cell is a variation to build, not a row."""
    from attnlab.experiments.learn import recipe_for

    recipe = recipe_for(facts, settings.minutes, seed)
    model, fine = dataclasses.replace(recipe.model, attention=settings.attention), recipe.finetune
    # the recorded cells were measured before `learn` mixed swapped copies into pretraining: the
    # study keeps that recipe so that its ledger holds one (rerunning its cells with the new one
    # is a variation: drop this line and the ledger's recall cells together)
    pre = dataclasses.replace(recipe.pretrain, read_out_swaps=0)
    if settings.tiny:
        model = dataclasses.replace(model, n_layer=1, n_head=2, n_embd=32)
        pre = dataclasses.replace(pre, epochs=1, minutes=0, max_steps=2)
        fine = dataclasses.replace(fine, epochs=1, max_steps=2)
    return dataclasses.replace(recipe, model=model, pretrain=pre, finetune=fine)


def train_sample(path: Path, work: Path) -> Path:
    """The first TRAIN_SAMPLE trained-on questions, scored beside the held-out ones."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)[:TRAIN_SAMPLE]
    return write_atomically(work / "train-sample.tsv", "".join(lines))


def counts(score: dict[str, Any]) -> dict[str, int]:
    return {"correct": score["correct"], "total": score["total"]}


def recall_cell(facts_dir: Path, work: Path, seed: int, settings: Settings) -> dict[str, Any]:
    """The lab's read-out: `attnlab learn` with its recipe (study_recipe)."""
    from attnlab.data import factset
    from attnlab.experiments.learn import learn, score_fact_set

    facts = factset.load(facts_dir)
    recipe = study_recipe(facts, settings, seed)
    found = learn(facts_dir, work, minutes=settings.minutes, seed=seed, device=settings.device, overwrite=True,
                  recipe=recipe, log=quiet)
    trained = score_fact_set(work, facts, device=settings.device, eval_file=train_sample(facts.train, work))
    return {"dev": counts(found["overall"]), "train": counts(trained["overall"]), "recipe": recipe.describe(),
            "relations": {k: counts(v) for k, v in found["relations"].items()},
            "pretraining_passes": found.get("pretraining_passes")}


def compare_recall_cell(folder: Path, work: Path, seed: int, settings: Settings) -> dict[str, Any]:
    """The lab's read-out of a comparison: the set's recall model (the 3.1-augmented-same-text
    row's recall cell, the same set, recipe and seed: its run is reused when it is there, else
    trained and that cell recorded too) asked each person's birth date; the years are read from
    the two answers and compared by the program. Scored on the compare rows' own pairs: the
    verdict, and the whole written answer ('1961; 2088; Yes') as the steps row scores it."""
    import attnlab
    from attnlab.data import factset

    same_text = ROWS_BY_KEY["3.1-augmented-same-text"]
    key = cell_key(same_text, "recall", seed, settings)
    run = settings.out / "runs" / cell_key(same_text, "recall", seed, settings, measure=False).replace(":", "_")
    facts = factset.load(folder)
    record_of = run / factset.RECORD_NAME
    if not ((run / "results.json").is_file() and record_of.is_file()  # results.json: written when learn ends
            and json.loads(record_of.read_text(encoding="utf-8")).get("digest") == facts.record()["digest"]):
        began = time.perf_counter()
        result = recall_cell(folder, run, seed, settings)
        if key not in read_ledger(settings.ledger_path()):
            record(settings.ledger_path(), key, {**result, "wall_minutes": round((time.perf_counter() - began) / 60, 2)})
    model = attnlab.load(run, device=settings.device)
    people = people_of(folder)
    result: dict[str, Any] = {"recipe": f"the recall model of {key}, birth dates read out, years compared",
                              "pretraining_passes": json.loads((run / "results.json").read_text()).get("pretraining_passes")}
    for split in ("train", "dev"):
        lines = compare_questions(people, split, True, seed).splitlines()[:TRAIN_SAMPLE if split == "train" else None]
        result[split] = compare_by_recall(model, facts.schema, [line.split("\t") for line in lines])
    write_atomically(work / "compare-read.json", json.dumps(result, indent=1) + "\n")
    return result


def compare_by_recall(model, schema, pairs: list[list[str]]) -> dict[str, int]:
    """Counts for ``pairs`` of (question, 'YEAR; YEAR; VERDICT'): the verdict the read-out's two
    years give (a year it cannot read, or two equal ones, gives none: counted wrong, and the pairs
    with both years read are counted apart), the whole answer, and the commonest verdict's count
    (a constant answer's score)."""
    asked = [question[len("Was "):-1].split(" born in an earlier year than ") for question, _ in pairs]
    names = list(dict.fromkeys(n for pair in asked for n in pair))
    birth = schema.relation("birth-date")
    answers = model.ask([birth.ask(n) for n in names], abstain=None)
    year = {n: a.answer[-4:] if a.answer[-4:].isdigit() else None for n, a in zip(names, answers)}
    verdicts = [answer.rsplit("; ", 1)[-1] for _, answer in pairs]
    counts = {"correct": 0, "total": len(pairs), "whole_answer_correct": 0, "both_years_read": 0,
              "most_frequent": max(verdicts.count(v) for v in set(verdicts)) if verdicts else 0}
    for (a, b), (_, gold) in zip(asked, pairs):
        ya, yb = year[a], year[b]
        verdict = None if ya is None or yb is None or ya == yb else "Yes" if int(ya) < int(yb) else "No"
        counts["both_years_read"] += ya is not None and yb is not None
        counts["correct"] += verdict == gold.rsplit("; ", 1)[-1]
        counts["whole_answer_correct"] += f"{ya}; {yb}; {verdict}" == gold
    return counts


def direct_cell(facts_dir: Path, work: Path, seed: int, settings: Settings, *, mix: bool,
                files: tuple[Path, Path] | None = None, verdict: bool = False, few_answers: bool = False
                ) -> dict[str, Any]:
    """The paper's read-out: pretraining (with the trained half's QA mixed in when ``mix``), then,
    unless ``mix``, finetuning to answer at once; ``files`` are a row's own train and dev
    questions (Part 3.2) in place of the set's; ``few_answers``: a Yes/No question, whose
    commonest answer is recorded as its baseline."""
    from attnlab.config.settings import TrainConfig
    from attnlab.data import factset
    from attnlab.data.datasets import documents, read_qa, read_text
    from attnlab.training.pipeline import finetune, pretrain

    facts = factset.load(facts_dir)
    train, dev = files or (facts.train, facts.dev)
    recipe = study_recipe(facts, settings, seed)
    answers = [e.answer for e in read_qa(train, labelled=True)]
    model = dataclasses.replace(recipe.model, qa_format="direct", answer_chars=max(map(len, answers)) + 8,
                                relations=() if files else recipe.model.relations)
    docs = len(documents(read_text(facts.corpus)))
    pre = dataclasses.replace(recipe.pretrain, mix_people=0, mix_overlap="drop", read_out_swaps=0,
                              mix_ratio=min(100.0, len(answers) / docs) if mix else 0.0)  # no read-out to teach
    vocab_text = facts.vocabulary_text() + read_text(train) + "".join(e.question for e in read_qa(dev))
    pace: dict[str, int] = {}
    _, _, made = pretrain(model, pre, corpus=facts.corpus, run_dir=work / "pretrain", mix_qa=train, held_out=(dev,),
                          vocab_text=vocab_text, device=settings.device, overwrite=True, log=quiet,
                          on_fit=lambda passes, steps_per_pass=0: pace.update(steps_per_pass=steps_per_pass))
    final = work / "pretrain"
    if not mix:
        fine = TrainConfig(seed=seed, **DIRECT_FINETUNE, **({"max_steps": 2} if settings.tiny else {}))
        finetune(fine, run_dir=work, init=final, corpus=facts.corpus, train_file=train, device=settings.device,
                 overwrite=True, log=quiet)
        final = work
    result = score_direct(final, dev, train_sample(train, work), settings.device, verdict, few_answers)
    if not files:
        from attnlab.experiments.learn import score_fact_set

        found = score_fact_set(final, facts, device=settings.device)
        result["relations"] = {k: counts(v) for k, v in found["relations"].items()}
    passes = round(made.steps / pace["steps_per_pass"], 2) if pace.get("steps_per_pass") else None
    return {**result, "pretraining_passes": passes,
            "recipe": f"direct answer; {model.n_layer} layers x {model.n_embd} wide, block "
                      f"{model.block_size}" + ("; QA mixed into pretraining" if mix else "")}


def score_direct(run: Path, dev: Path, sample: Path, device: str, verdict: bool, few_answers: bool = False
                 ) -> dict[str, Any]:
    """Exact answers to the held-out and the trained-on questions; with ``verdict`` (an answer
    that writes its steps first) the last step alone is scored, and the whole answer beside it.
    With ``few_answers`` (Yes or No), ``most_frequent``: how many a model answering every question
    with the commonest (last step of the) answer would get right, the question's baseline."""
    from attnlab.answering.evaluate import answer_questions
    from attnlab.data.datasets import read_qa
    from attnlab.model.checkpoint import load_model

    model, vocab, _ = load_model(run, device=device)
    result: dict[str, Any] = {}
    for name, path in (("dev", dev), ("train", sample)):
        examples = read_qa(path, labelled=True)
        answers = [a.answer for a in answer_questions(model, vocab, examples)]
        last = (lambda s: s.rsplit("; ", 1)[-1]) if verdict else (lambda s: s)
        gold = [last(e.answer) for e in examples]
        result[name] = {"correct": sum(last(a) == g for a, g in zip(answers, gold)), "total": len(examples)}
        if few_answers:
            result[name]["most_frequent"] = max(gold.count(g) for g in set(gold)) if gold else 0
        if verdict:
            result[name]["whole_answer_correct"] = sum(a == e.answer for a, e in zip(answers, examples))
    return result


# ----------------------------------------------------------------------------- Part 3.3


BITS_SAMPLE = 400  # people whose values are scored (all their values); the total is scaled up from them
BITS_MEASURE = "pool"  # in the cells' keys: cells of an earlier measure are not read as this one
DATE_PARTS = ("month", "day", "year")


def value_pools(people: list[dict[str, str]]) -> dict[str, list[str]]:
    """The values each attribute is drawn from: the set's own (every city, university, major and
    employer some person of the set has) and, for the birth date, its three parts in turn
    (attnlab/data/synth/bios.py draws month, day 1-28 and year 1900-2099). The work city follows
    from the employer, so it carries no bits of its own."""
    from attnlab.data.synth.bios import MONTHS

    pools = {a: sorted({p[a] for p in people}) for a in ("birth_city", "university", "major", "employer")}
    return {"month": list(MONTHS), "day": [str(d) for d in range(1, 29)],
            "year": [str(y) for y in range(1900, 2100)], **pools}


def date_parts(date: str) -> dict[str, str]:
    """'May 28, 2088' -> its month, day and year, in the order they are written."""
    month, day, year = date.replace(",", "").split(" ")
    return {"month": month, "day": day, "year": year}


def pool_log_probs(model, context: list[int], candidates: list[list[int]]) -> list[float]:
    """The model's log-probability of each candidate continuing ``context``, normalised over
    the candidates: the context is run once and every candidate reads its cached keys and
    values (one row each, each seeing the context and itself)."""
    import torch

    from attnlab.model.attention.base import KVCache

    device = next(model.parameters()).device
    C, L, P = len(context), max(len(c) for c in candidates), len(candidates)
    caches = [KVCache() for _ in model.blocks]
    positions = torch.arange(C + L, device=device)
    causal = torch.ones(C, C, dtype=torch.bool, device=device).tril()
    logits, _ = model.run(torch.tensor([context], device=device), positions=positions[None, :C],
                          allowed=causal[None, None], caches=caches, key_positions=positions[None, :C])
    first = logits[0, -1].float().log_softmax(-1)
    # one view of the context's keys and values for each candidate
    caches = [KVCache(k=c.k.expand(P, -1, -1, -1), v=c.v.expand(P, -1, -1, -1)) for c in caches]
    idx = torch.zeros(P, L, dtype=torch.long, device=device)
    for row, candidate in enumerate(candidates):
        idx[row, :len(candidate)] = torch.tensor(candidate)
    allowed = torch.ones(P, 1, L, C + L, dtype=torch.bool, device=device)
    allowed[:, :, :, C:] = torch.ones(L, L, dtype=torch.bool, device=device).tril()
    logits, _ = model.run(idx, positions=positions[None, C:].expand(P, -1), allowed=allowed, caches=caches,
                          key_positions=positions[None].expand(P, -1))
    logp = logits.float().log_softmax(-1)
    totals = []
    for row, candidate in enumerate(candidates):
        total = float(first[candidate[0]])
        total += sum(float(logp[row, j - 1, candidate[j]]) for j in range(1, len(candidate)))
        totals.append(total)
    norm = torch.logsumexp(torch.tensor(totals), 0).item()
    return [t - norm for t in totals]


def value_spans(doc: str, person: dict[str, str], at: int) -> list[tuple[str, int, str]]:
    """Where each scored value stands in the person's biography: (pool name, start, value),
    the birth date split into its parts, in the biography's order."""
    spans = []
    for attribute in ("birth_date", "birth_city", "university", "major", "employer"):
        start = doc.find(person[attribute], at)
        if start < 0:
            continue
        if attribute == "birth_date":
            parts, offset = date_parts(person[attribute]), start
            for part in DATE_PARTS:
                offset = doc.index(parts[part], offset)
                spans.append((part, offset, parts[part]))
                offset += len(parts[part])
        else:
            spans.append((attribute, start, person[attribute]))
    return sorted(spans, key=lambda s: s[1])


@dataclass
class Bits:
    """What a model stores about the people scored. ``bits``: for each value, log2 of the
    model's probability of the true value among its pool, given the person's biography before
    it, less log2 of the model's average probability of that value over the people scored (what
    it would say of anyone), summed; ``by_pool`` the same per pool. ``bits_vs_even``: against an
    even share of the pool instead (it also charges the model for preferring some values, e.g.
    those it spells well). ``picked``: values whose likeliest pool member is the true one."""

    bits_vs_even: float = 0.0
    values: int = 0
    picked: int = 0
    people: int = 0
    by_pool: dict[str, float] = field(default_factory=dict)

    @property
    def bits(self) -> float:
        return sum(self.by_pool.values())


def knowledge_bits(model, vocab, people: list[dict[str, str]], docs: list[str], *,
                   sample: int = BITS_SAMPLE, seed: int = 0) -> Bits:
    """``Bits`` of ``sample`` people of the set (drawn with ``seed``; all when there are fewer).
    Each value of their biographies (a birth date as month, day and year) is scored among every
    value of its pool, each read from the biography before it and closed by the character after
    it, normalised over the pool: this counts what the model knows of the person, not how well
    it spells the pool's values. A model that says the same of everyone stores 0 bits; one sure
    of every true value about log2 of the pool a value (at most log2 of the people scored)."""
    import torch

    from attnlab.data.corpus import CorpusIndex

    index, block = CorpusIndex(docs), model.config.block_size
    drawn = value_pools(people)  # a value the model cannot spell (a character it never read) has probability 0
    pools = {name: [v for v in values if all(ch in vocab.stoi for ch in v)] for name, values in drawn.items()}
    encoded = {name: [vocab.encode(v) for v in values] for name, values in pools.items()}  # once, not per value
    scored = people if len(people) <= sample else random.Random(f"bits {seed}").sample(people, sample)
    read: dict[str, list[tuple[list[float], int]]] = {name: [] for name in pools}
    with torch.no_grad():
        for person in scored:
            doc = index.line_of(person["name"]) or ""
            for pool, start, value in value_spans(doc, person, len(person["name"]) + 2):
                after = vocab.encode(doc[start + len(value):start + len(value) + 1])
                candidates = [ids + after for ids in encoded[pool]]
                if start + max(len(c) for c in candidates) <= block:
                    log_q = pool_log_probs(model, vocab.encode(doc[:start]), candidates)
                    read[pool].append((log_q, pools[pool].index(value)))
    out = Bits(people=len(scored))
    for pool, rows in read.items():
        out.by_pool[pool] = 0.0
        if not rows:
            continue
        average = (torch.logsumexp(torch.tensor([q for q, _ in rows], dtype=torch.float64), 0)
                   - math.log(len(rows))).tolist()
        for log_q, true in rows:
            out.by_pool[pool] += (log_q[true] - average[true]) / math.log(2)
            out.bits_vs_even += math.log2(len(drawn[pool])) + log_q[true] / math.log(2)
            out.values, out.picked = out.values + 1, out.picked + (max(range(len(log_q)), key=log_q.__getitem__) == true)
    return out


def capacity_cell(row: Row, folder: Path, work: Path, seed: int, settings: Settings) -> dict[str, Any]:
    """Pretrain a small model on bioS single for ``row.exposures`` passes (one biography a
    person: a pass is one exposure of each fact) and estimate the bits it stores."""
    from attnlab.config.settings import ModelConfig, TrainConfig
    from attnlab.data import factset
    from attnlab.data.datasets import documents, read_text
    from attnlab.model.checkpoint import load_model
    from attnlab.training.pipeline import pretrain

    facts = factset.load(folder)
    docs = documents(read_text(facts.corpus))
    block = min(512, -(-max(len(d) for d in docs) // 16) * 16)
    layers, width = row.capacity_model
    model = ModelConfig(n_layer=layers, n_head=2, n_embd=width, dropout=0.0, block_size=block, qa_format="direct",
                        attention=settings.attention)
    config = TrainConfig(**CAPACITY_PRETRAIN, epochs=1 if settings.tiny else row.exposures, seed=seed,
                         **({"max_steps": 2} if settings.tiny else {}))
    done = {"model": dataclasses.asdict(model), "train": dataclasses.asdict(config), "corpus": str(facts.corpus)}
    marker = work / "trained.json"  # written after pretraining: a finished model is scored again, not retrained
    if not (marker.is_file() and json.loads(marker.read_text(encoding="utf-8")) == json.loads(json.dumps(done))):
        pretrain(model, config, corpus=facts.corpus, run_dir=work, mix_qa=None, held_out=(), device=settings.device,
                 overwrite=True, log=quiet)
        write_atomically(marker, json.dumps(done, sort_keys=True) + "\n")
    trained, vocab, _ = load_model(work, device=settings.device)
    people = people_of(folder)
    found = knowledge_bits(trained, vocab, people, docs, sample=8 if settings.tiny else BITS_SAMPLE, seed=seed)
    scale = len(people) / max(1, found.people)  # the sample's bits, scaled to the set
    bits = found.bits * scale
    parameters = trained.num_parameters()
    return {"bits": round(bits, 1), "bits_vs_even": round(found.bits_vs_even * scale, 1), "values": found.values,
            "picked": found.picked, "people_scored": found.people, "measure": BITS_MEASURE,
            "bits_by_pool": {k: round(v, 1) for k, v in found.by_pool.items()}, "parameters": parameters,
            "bits_per_parameter": round(bits / parameters, 4), "exposures": config.epochs,
            "recipe": f"{model.n_layer} layer(s) x {model.n_embd} wide, block {block}, {config.epochs:g} passes"}


# ----------------------------------------------------------------------------- the table


def seeds_interval(values: list[float]) -> tuple[float, float] | None:
    """The 95% t interval of the seeds' mean (None for one seed)."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = T975.get(n - 1, 1.96) * sd / math.sqrt(n)
    return mean - half, mean + half


def accuracy_text(results: list[dict[str, Any]]) -> str:
    """Seeds pooled: percent with its 95% Wilson interval, each seed's percent, the seeds' 95%
    interval, and the trained-on questions' accuracy."""
    from attnlab.answering.evaluate import wilson_interval

    k, n = sum(r["dev"]["correct"] for r in results), sum(r["dev"]["total"] for r in results)
    low, high = wilson_interval(k, n)
    seeds = [100 * r["dev"]["correct"] / max(1, r["dev"]["total"]) for r in results]
    text = f"{k}/{n} = {100 * k / max(1, n):.1f}% (95% CI {100 * low:.1f}-{100 * high:.1f}); seeds " + \
        ", ".join(f"{s:.1f}" for s in seeds)
    spread = seeds_interval(seeds)
    if spread:
        text += f" (seeds' 95% interval {spread[0]:.1f}-{spread[1]:.1f})"
    if all("most_frequent" in r["dev"] for r in results):  # a question of few answers: what a constant one gets
        m = sum(r["dev"]["most_frequent"] for r in results)
        text += f"; the commonest answer every time {m}/{n} = {100 * m / max(1, n):.1f}%"
    if all("both_years_read" in r["dev"] for r in results):  # the recall read-out: a year it could not read
        y = sum(r["dev"]["both_years_read"] for r in results)
        text += f"; both years read out for {y}/{n}"
    if all("whole_answer_correct" in r["dev"] for r in results):  # the written steps: both years right too
        w = sum(r["dev"]["whole_answer_correct"] for r in results)
        text += f"; both years right too {w}/{n} = {100 * w / max(1, n):.1f}%"
    tk, tn = sum(r["train"]["correct"] for r in results), sum(r["train"]["total"] for r in results)
    text += f"; trained-on questions {100 * tk / max(1, tn):.0f}%"
    passes = [r.get("pretraining_passes") for r in results]
    if all(passes):  # a minutes budget: how many passes the machine's pace allowed each seed
        text += "; pretraining passes " + ", ".join(f"{p:.0f}" for p in passes)
    return text


def bits_text(results: list[dict[str, Any]]) -> str:
    from attnlab.answering.evaluate import wilson_interval

    ratios = [r["bits_per_parameter"] for r in results]
    text = (f"{sum(ratios) / len(ratios):.3f} bits a parameter ({results[0]['parameters']:,} parameters, "
            f"{results[0]['exposures']:g} exposures); seeds " + ", ".join(f"{x:.3f}" for x in ratios))
    spread = seeds_interval(ratios)
    text += f" (seeds' 95% interval {spread[0]:.3f}-{spread[1]:.3f})" if spread else ""
    picked, values = sum(r["picked"] for r in results), sum(r["values"] for r in results)
    low, high = wilson_interval(picked, values)
    even = [r["bits_vs_even"] / r["parameters"] for r in results]
    return (text + f"; true value the likeliest of its pool {picked}/{values} = {picked / values:.1%} "
            f"(95% CI {100 * low:.1f}-{100 * high:.1f}%); against an even pool {sum(even) / len(even):.3f} a parameter")


def row_command(row: Row, settings: Settings, seeds: list[int] | tuple[int, ...] = DEFAULT_SEEDS) -> str:
    parts = [".venv/bin/python", SCRIPT, "--rows", row.key, "--seeds", *map(str, seeds)]
    parts += (["--capacity-people", str(settings.capacity_people)] if row.task == "bits" else
              ["--people", str(settings.people), "--minutes", f"{settings.minutes:g}"])
    parts += [] if settings.attention == "vanilla" else ["--attention", settings.attention]
    return shlex.join(parts + (["--tiny"] if settings.tiny else []) + ["--write"])


def cell_text(row: Row, readout: str, ledger: dict[str, Any], seeds: list[int], settings: Settings) -> str:
    if readout not in row.readouts:
        return "n/a: " + (row.not_applicable or "capacity is read from the pretrained model's probabilities of each value")
    results = [ledger[k] for k in (cell_key(row, readout, s, settings) for s in seeds) if k in ledger]
    if not results:
        return f"not run: `{row_command(row, settings)}`"
    return bits_text(results) if readout == "bits" else accuracy_text(results)


def study_table(ledger: dict[str, Any], seeds: list[int], settings: Settings, rows: list[Row] = ROWS) -> str:
    lines = []
    for row in rows:
        measured = "bits" if row.task == "bits" else "direct"
        lines.append([f"{row.part} `{row.key}`", row.what, row.paper, cell_text(row, measured, ledger, seeds, settings),
                      cell_text(row, "recall", ledger, seeds, settings), f"`{row_command(row, settings)}`"])
    return table(["row", "what", "the paper", "direct answer (the paper's)", "recall-and-copy read-out (the lab's)",
                  "command"], lines)


def section_text(ledger: dict[str, Any], seeds: list[int], settings: Settings, note: str = "") -> str:
    scale = (f"{settings.people:,} people a set (the seed draws them; a row that says so a share of them), "
             f"{settings.minutes:g} minutes a run "
             f"(Part 3.3: {settings.capacity_people:,} people), seeds {', '.join(map(str, seeds))}; held-out "
             "questions (the dev quarter of the people); counts pooled over seeds with 95% Wilson intervals")
    text = f"Scale: {scale}" + (" (tiny: seconds-long runs that know nothing)" if settings.tiny else "") + ".\n\n"
    return text + study_table(ledger, seeds, settings) + (f"\n\n{note}" if note else "")


# ----------------------------------------------------------------------------- the command


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", choices=list(ROWS_BY_KEY), default=None, help="rows (default: all)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    parser.add_argument("--readouts", nargs="+", choices=["direct", "recall", "bits"],
                        default=["direct", "recall", "bits"])
    parser.add_argument("--people", type=int, default=DEFAULT_PEOPLE)
    parser.add_argument("--minutes", type=float, default=DEFAULT_MINUTES, help="each training run's budget")
    parser.add_argument("--capacity-people", type=int, default=CAPACITY_PEOPLE, help="Part 3.3's sets")
    parser.add_argument("--out", type=Path, default=Path("runs/studies"), help="the sets and models")
    parser.add_argument("--ledger", type=Path, default=None,
                        help=f"the cells' counts (default: {LEDGER.relative_to(REPO)}; OUT/ledger.json with --tiny)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--attention", default="vanilla", help="every model's attention variant (`attnlab variants`)")
    parser.add_argument("--tiny", action="store_true", help="seconds-long runs that know nothing (checks)")
    parser.add_argument("--table", action="store_true", help="only print the table of what is recorded")
    parser.add_argument("--list", action="store_true", help="only print the rows and their commands")
    parser.add_argument("--note", default="", help="a line under the table (say what kind of run it was)")
    parser.add_argument("--write", action="store_true", help="write the table into docs/guides/knowledge-studies.md")
    return parser.parse_args(argv)


def section_name(settings: Settings) -> str:
    """The guide's generated section: the default scale's, or one of its own for another scale."""
    default = Settings(out=settings.out)
    return SECTION if settings.scale() == default.scale() else f"{SECTION}-{settings.scale().replace('.', '_')}"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    settings = Settings(args.people, args.minutes, args.capacity_people, args.out, args.tiny, args.device,
                        args.attention, args.ledger)
    rows = [ROWS_BY_KEY[k] for k in args.rows] if args.rows else ROWS
    if args.list:
        print("\n".join(f"{r.key}: {row_command(r, settings)}" for r in rows))
        return 0
    if not args.table:
        run_cells(rows, args.seeds, args.readouts, settings)
    text = section_text(read_ledger(settings.ledger_path()), args.seeds, settings, args.note)
    print(text)
    if args.write:
        title = "The table" if section_name(settings) == SECTION else \
            f"At another scale ({settings.scale()})"
        write_section(section_name(settings), text, path=GUIDE, title=title)
        print(f"wrote the {section_name(settings)} section of {GUIDE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
