"""`attnlab learn`: a fact set learned in a time budget by one command.

The recipe is the knowledge recipe of the bundled birthplace set (``cpu15``: pretrain on the
corpus with the format subjects' questions mixed in, recall the subject's document, copy the
answer out of it), with every choice that depends on the data derived from the fact set by
rule (``recipe_for``): how many characters to recall, the longest answer, the block, and how
many training subjects teach the answer format. Pretraining fits itself to the budget on this
machine (``--minutes``), finetuning and scoring come within it.

Output directory R: ``R/pretrain/`` (the pretrained model), the finetuned model in R itself (so
``attnlab ask R``, ``evaluate R`` and ``attnlab.load(R)`` use it), ``R/factset.json`` (which
fact set, with its content hash), ``R/predictions-dev.txt``, ``R/results.json``, and
``R/learning.json`` (what the run was begun with, written before training, so that ``--resume``
continues that run and refuses another fact set, budget or seed in words).
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..answering.evaluate import Score, answer_questions, baseline_answers, predictions_text, score_by_relation
from ..config.settings import ModelConfig, TrainConfig, get_preset
from ..core import logs
from ..core.paths import write_atomically
from ..data import factset as factsets
from ..data.corpus import CorpusIndex
from ..data.datasets import documents, read_qa, read_text
from ..data.splits import finetuning_people, subject_reader
from ..model.checkpoint import CHECKPOINT_NAME, load_model
from ..core.devices import resolve_device
from ..training.pipeline import finetune, pretrain
from ..training.rundir import CONFIG_NAME

FACTSET_RECORD = factsets.RECORD_NAME
RESULTS = "results.json"
BEGUN = "learning.json"
BASE_PRESET = "cpu15"  # the recipe whose data-dependent choices recipe_for derives from a fact set
# Of a budget, what finetuning takes after pretraining: at least this many minutes, or this
# share of the budget (finetuning is fitted to it; scoring runs in what the fitted stages leave,
# as each aims at 95% of its minutes).
AFTER_PRETRAINING = (0.6, 0.12)
# Read-out examples in finetuning (other training subjects' documents given, the answer scored),
# per format subject: enough to teach reading, few enough that finetuning stays short.
READ_OUTS_PER_FORMAT_SUBJECT = 3
# Copies of each finetuning example's document with its answer swapped for another value of the
# relation, that answer scored: the model learns to copy the value the text states where the
# relation's wording stands, not one it remembers or a neighbouring span (reading, not recall, was
# what the learned sets missed: benchmarks/read_or_recall.py). Finetuning is fitted to the
# minutes left after pretraining, so the copies never push a run past its budget.
READ_OUT_SWAPS = 2
# Swapped copies mixed into pretraining, per format subject: reading is then learned over every
# pass at pretraining's rate rather than in finetuning's few low-rate steps (the shipped model's
# recipe does the same); each copy costs about a document of compute, so a budget fits fewer
# passes, and the reading they buy was worth more than those passes on the sets it was tried on.
PRETRAIN_READ_OUT_SWAPS = 1
# The share of swapped copies given a disguised value (TrainConfig.swap_novel), which only copying
# answers. Off: where every subject has its own value (authors of books, islands' capitals) the
# copies of known values already teach a read-out that answers most of them in a full budget,
# and disguised copies cost answers in short budgets and in quoting models (the notebook).
SWAP_NOVEL = 0.0
# Training subjects that teach the answer format in a 15-minute budget (fewer in less): their
# documents are pretrained on with their answers; the other training subjects' documents are
# left out of pretraining (they only teach reading, their document given), so that each pass
# is spent on the subjects asked about.
FORMAT_SUBJECTS = 500
# Layers by load, the characters one pretraining pass reads per minute of the budget: up to the
# first figure four layers, up to the second three, else two. The course's set in 15 minutes
# is a light load, the same set in 5 minutes (or a set of twice as long documents in 15) a
# middle one.
LAYERS_BY_LOAD = (15_000, 40_000)
# Pretraining passes, per 100 characters of the block (what the model learns to write of a
# subject: its recalled document, the quote and the answer), under which the depth the load
# chose is too deep for this machine: when pretraining's fit to the budget finds fewer, learn
# starts pretraining again with fewer layers (never under two), as many as are expected to fit
# that many passes (SHALLOWER_COST). Short of passes, a shallower model's extra passes store
# more than its lost layer, and the passes a subject needs grow with what it writes; the load
# alone cannot see a slower machine (the notebook: long documents, the firms set, the species
# set, and the course's set in five minutes). Counted by the characters recalled alone, a set
# that stored more with fewer layers (firms, which quotes) and one that stored more with its
# three (species) fitted the same passes per character; by the block they lie apart.
FEWER_LAYERS_BELOW = 8
# A pretraining step's cost grows as (layers + SHALLOWER_COST): the embeddings, the read-out
# head and the data cost about one layer more (the notebook has the steps timed).
SHALLOWER_COST = 1.0
# Training subjects held out of finetuning, their documents pretrained on as dev's are: after
# finetuning, the run's abstention rule and confidence correction are fitted on their questions
# and stored with it (abstention.json), so that ask, evaluate, calibrate and serve have a rule fitted
# on labels the model never trained on. Enough questions to fit the correction, few enough that a
# pass grows little; at most CALIBRATION_MOST of a small set's subjects.
CALIBRATION_SUBJECTS = 100
CALIBRATION_MOST = 0.1
# Which training subjects teach the format, are held out or only teach reading: a sample fixed
# by a hash of each subject (data/subject_orders.py), not the training file's first and last,
# since a user's file may be sorted (by answer, by relation) and its ends are then unlike the rest.
SUBJECT_ORDER = "hashed"
# Pretraining passes below which the recipe's answers stayed at the most-frequent baseline on
# the sets it was tried on, of documents of about 200 characters (longer documents, their facts
# further in, needed more; the notebook): a budget that fits fewer is told so before the first step.
LEAST_PASSES = 20
# The model quotes the sentence that states an answer before writing it (ModelConfig.quote) when
# a relation's answers this often share their first character with another value of the
# relation in the same document (factset.shared_openings): the sentence's opening words, not the
# value's, then choose the value. Quoting costs characters in every pass, so a set whose values
# open differently is learned without it. None: decided by this rule; True or False: always.
QUOTE_WHEN_SHARED = 0.25
QUOTE: bool | None = None
# The longest recall, in characters (the recall reaches 95% of the training answers up to it):
# every character recalled is generated before an answer and read in every pass.
RECALL_MOST = 320


@dataclass(frozen=True)
class Recipe:
    """What `learn` trains: the model, its two stages, and the choices derived from the data."""

    model: ModelConfig
    pretrain: TrainConfig
    finetune: TrainConfig
    format_subjects: int  # training subjects whose questions are mixed into pretraining
    pretrain_minutes: float
    sizes: factsets.Sizes | None = None  # the data's lengths the recipe was derived from

    def describe(self) -> str:
        m = self.model
        return (f"{m.n_layer} layers x {m.n_embd} wide, {m.recall_chars} characters recalled, answers up to "
                f"{m.answer_chars}{', after quoting their sentence' if m.quote else ''}, block {m.block_size}; "
                f"{self.format_subjects} training subjects teach the "
                f"answer format; pretraining fitted to {self.pretrain_minutes:g} minutes")


def recipe_for(facts: factsets.FactSet, minutes: float, seed: int = 0) -> Recipe:
    """The default recipe fitted to ``facts`` and a budget of ``minutes`` on this machine.

    Rules, none set per data set: the recall reaches the end of 95% of the training answers in
    their documents (factset.sizes); up to FORMAT_SUBJECTS training subjects (fewer in short
    budgets: a pass over fewer documents stores more of each) teach the answer format and are
    pretrained on, the other training subjects' documents are left out of pretraining and only
    teach reading; the more characters a pass reads per minute of the budget, the fewer layers
    (LAYERS_BY_LOAD: in a short budget more passes store more than depth); the finetuning
    subjects' answers go with the model, for the read-out of answers written in other letters
    (``answer_values``)."""
    sizes = factsets.sizes(facts, most=RECALL_MOST)
    quote = quotes(facts, sizes.recall_chars)
    if quote:  # the block then holds the quote too
        sizes = factsets.sizes(facts, most=RECALL_MOST, quote=True)
    base = get_preset(BASE_PRESET)
    train = read_qa(facts.train, labelled=True)
    subjects = list(dict.fromkeys(facts.schema.require(e).subject for e in train))
    holdout = calibration_fraction(len(subjects))
    kept = list(dict.fromkeys(facts.schema.require(e).subject for e in  # in the order training takes them
                              finetuning_people(train, holdout, subject_reader(facts.schema), order=SUBJECT_ORDER)))
    n_format = min(len(kept), max(round(FORMAT_SUBJECTS * min(1.0, minutes / 15)), 50))
    docs = documents(read_text(facts.corpus))
    layers = layers_for(pass_characters(docs, kept[n_format:], sizes.recall_chars) / minutes)
    model = ModelConfig(**{**base.model, "n_layer": layers, "recall_chars": sizes.recall_chars,
                           "answer_chars": sizes.answer_chars, "block_size": sizes.block_size,
                           "relations": facts.schema.to_list(), "quote": quote,
                           "answer_values": answer_values(facts.schema, train, set(kept))})
    pre_minutes = round(max(0.05, minutes - after_pretraining(minutes)), 2)
    pre = dataclasses.replace(base.pretrain, seed=seed, minutes=pre_minutes, epochs=400, mix_people=n_format,
                              mix_ratio=min(100.0, n_format / len(docs)), mix_overlap="drop", holdout_fraction=holdout,
                              read_out_swaps=PRETRAIN_READ_OUT_SWAPS, swap_novel=SWAP_NOVEL,
                              subject_order=SUBJECT_ORDER)
    fine = dataclasses.replace(base.finetune, seed=seed, mix_people=n_format, preset="", holdout_fraction=holdout,
                               read_out_people=READ_OUTS_PER_FORMAT_SUBJECT * n_format,
                               read_out_swaps=READ_OUT_SWAPS, swap_novel=SWAP_NOVEL,
                               minutes=after_pretraining(minutes), subject_order=SUBJECT_ORDER)
    return Recipe(model, pre, fine, n_format, pre_minutes, sizes)


def answer_values(schema, examples: list, subjects: set[str]) -> list[list]:
    """Each relation's answers to the questions about ``subjects`` (the training subjects that
    finetuning reads: never a held-out one's, whose answers the abstention fit scores), most
    frequent first: the values the span read-out may answer where the recall writes a look-alike
    (ModelConfig.answer_values)."""
    counts: dict[str, Counter] = {name: Counter() for name in schema.names}
    for example in examples:
        asked = schema.require(example)
        if asked.subject in subjects:
            counts[asked.relation.name][example.answer] += 1
    return [[name, [answer for answer, _ in c.most_common()]] for name, c in counts.items()]


def quotes(facts: factsets.FactSet, recall_chars: int) -> bool:
    """Whether the model learned for ``facts``, recalling ``recall_chars`` characters, quotes
    before answering (QUOTE_WHEN_SHARED)."""
    if QUOTE is not None:
        return QUOTE
    shared = factsets.shared_openings(facts, recall_chars)
    return max(shared.values(), default=0.0) >= QUOTE_WHEN_SHARED


def calibration_fraction(subjects: int) -> float:
    """The share of training subjects held out for fitting the abstention rule
    (CALIBRATION_SUBJECTS, at most CALIBRATION_MOST of them); 0 for a set too small to spare any."""
    return 0.0 if subjects < 20 else min(CALIBRATION_MOST, CALIBRATION_SUBJECTS / subjects)


def after_pretraining(minutes: float) -> float:
    """Of a budget of ``minutes``, what finetuning and scoring take after pretraining."""
    return max(AFTER_PRETRAINING[0], AFTER_PRETRAINING[1] * minutes)


def layers_for(load: float) -> int:
    """The model's depth for a pretraining load (LAYERS_BY_LOAD)."""
    return 4 if load <= LAYERS_BY_LOAD[0] else 3 if load <= LAYERS_BY_LOAD[1] else 2


def passes_wanted(block_chars: int) -> float:
    """The pretraining passes under which a shallower model is taken (FEWER_LAYERS_BELOW), for a
    block of ``block_chars``."""
    return FEWER_LAYERS_BELOW * block_chars / 100


def shallower_layers(layers: int, passes: float, wanted: float) -> int:
    """The depth for a budget that fits ``passes`` pretraining passes at ``layers`` on this
    machine: ``layers`` when they reach ``wanted`` (passes_wanted), else the deepest of fewer
    layers expected to fit ``wanted`` passes, at least two."""
    if passes >= wanted or layers <= 2:
        return layers
    fits = [n for n in range(layers - 1, 1, -1) if passes * (layers + SHALLOWER_COST) / (n + SHALLOWER_COST) >= wanted]
    return fits[0] if fits else 2


def pass_characters(docs: list[str], left_out: list[str], recall_chars: int) -> int:
    """Characters one pretraining pass reads: every corpus document cut at the recall, but those
    of the ``left_out`` subjects."""
    index = CorpusIndex(docs)
    skipped = {index.line_number(s) for s in left_out}
    return sum(min(len(d), recall_chars) for n, d in enumerate(docs, 1) if n not in skipped)


def learn(facts_dir: str | Path, out_dir: str | Path, *, minutes: float = 15.0, seed: int = 0,
          device: str = "auto", overwrite: bool = False, resume: bool = False, pretrained: bool = True,
          recipe: Recipe | None = None, log: Callable[[str], None] = logs.note) -> dict[str, Any]:
    """Pretrain and finetune a model on the fact set in ``facts_dir`` within ``minutes``, score
    its dev questions per relation, and write the results (module docstring). ``pretrained=False``
    is the reference without pretraining: the same model finetuned from scratch. ``recipe``
    replaces the one ``recipe_for`` derives (a study varying it: benchmarks/knowledge_studies.py)."""
    began = time.perf_counter()
    facts = factsets.load(facts_dir)
    out = Path(out_dir)
    if (out / CHECKPOINT_NAME).exists() and not (overwrite or resume):
        raise ValueError(f"{out} already holds a learned model: choose another output directory, or "
                         "replace it (overwrite)")
    _begin(out, facts, {"minutes": minutes, "seed": seed, "pretrained": pretrained}, resume=resume,
           overwrite=overwrite)
    recipe = recipe or recipe_for(facts, minutes, seed)
    _say_out_of_reach(recipe.sizes or factsets.sizes(facts, most=RECALL_MOST), recipe.model.recall_chars, log)
    _say_undocumented(facts, log)
    log(f"learning {facts.name} ({len(facts.schema.relations)} relation(s): {', '.join(facts.schema.names)}) "
        f"in {minutes:g} minutes: {recipe.describe()}" + ("" if pretrained else "; no pretraining"))
    fitted: dict[str, Any] = {}
    if pretrained:
        if resume and (out / "pretrain" / CHECKPOINT_NAME).exists():
            recipe = as_pretrained(recipe, out / "pretrain")
        steps, recipe = _pretrain_fitted(facts, recipe, out, minutes=minutes, fitted=fitted, device=device,
                                         overwrite=overwrite, resume=resume, log=log)
        if fitted.get("steps_per_pass"):  # the passes made: a --minutes run re-fits them as it goes
            fitted["pretraining_passes"] = round(steps / fitted.pop("steps_per_pass"), 2)
    else:
        scratch = dataclasses.replace(get_preset(BASE_PRESET).finetune_scratch, seed=seed,
                                      mix_people=recipe.format_subjects, preset="")
        finetune(scratch, run_dir=out, model_config=recipe.model, corpus=facts.corpus, train_file=facts.train,
                 log=log, device=device, overwrite=overwrite or resume, vocab_text=facts.vocabulary_text())
    write_atomically(out / FACTSET_RECORD, json.dumps(facts.record(), indent=2) + "\n")
    learned = load_model(out, device=str(resolve_device(device)))  # once, for the rule and the scores
    if pretrained and recipe.finetune.holdout_fraction:
        store_abstention(out, facts, device=device, log=log, loaded=learned)
    results = score_fact_set(out, facts, device=device, loaded=learned)
    results.update(minutes=minutes, seed=seed, pretrained=pretrained, **fitted,
                   wall_minutes=round((time.perf_counter() - began) / 60, 2), machine=machine(),
                   recipe={"describe": recipe.describe(), "model": recipe.model.to_dict(),
                           "pretrain": recipe.pretrain.to_dict(), "finetune": recipe.finetune.to_dict()})
    write_atomically(out / RESULTS, json.dumps(results, indent=2) + "\n")
    return results


def _begin(out: Path, facts: factsets.FactSet, settings: dict[str, Any], *, resume: bool,
           overwrite: bool) -> None:
    """Record what the run in ``out`` is begun with (BEGUN); with ``resume``, refuse to continue a
    run begun with another fact set, budget, seed or pretraining, naming what differs. (A run
    begun before the record existed is continued as its checkpoints allow.)"""
    path = out / BEGUN
    begun = {"fact_set": facts.record(), **settings}
    if resume and path.is_file():
        before = json.loads(path.read_text(encoding="utf-8"))
        if before["fact_set"]["digest"] != begun["fact_set"]["digest"]:
            raise ValueError(f"{out} began learning {before['fact_set'].get('path', 'another fact set')}, and "
                             f"{facts.root} differs from it now (files added or changed since): start again with "
                             "--overwrite, or learn it into another --out-dir")
        changed = [k for k, v in settings.items() if before.get(k) != v]
        if changed:
            then, now = (", ".join(_flag(k, d.get(k)) for k in changed) for d in (before, settings))
            raise ValueError(f"{out} was begun with {then}, not {now}: resume it with the same, or start again "
                             "with --overwrite")
        return
    if resume or overwrite or not (out / "pretrain" / CHECKPOINT_NAME).exists():  # else pretraining refuses
        out.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(begun, indent=2) + "\n")


def _flag(name: str, value: Any) -> str:
    """A learn setting as its command-line flag says it."""
    if name == "pretrained":
        return "pretraining" if value else "--no-pretraining"
    return f"--{name} {value:g}" if isinstance(value, float) else f"--{name} {value}"


def rescore(run: str | Path, *, device: str = "auto", log: Callable[[str], None] = logs.note) -> dict[str, Any]:
    """A learned run brought up to date without training it again: its abstention rule and
    confidence correction fitted afresh (when it held subjects out), its dev answers scored
    again, and results.json rewritten with what it records of its training kept."""
    out = Path(run)
    previous = json.loads((out / RESULTS).read_text(encoding="utf-8"))
    facts = factsets.load(previous["fact_set"]["path"])
    if facts.record()["digest"] != previous["fact_set"]["digest"]:
        raise ValueError(f"{out}: its fact set {facts.root} has changed since the run learned it: "
                         "scores on it would not be the run's")
    learned = load_model(out, device=str(resolve_device(device)))
    if previous.get("pretrained") and learned[2].meta.get("train_config", {}).get("holdout_fraction"):
        store_abstention(out, facts, device=device, log=log, loaded=learned)
    results = {**previous, **score_fact_set(out, facts, device=device, loaded=learned)}
    write_atomically(out / RESULTS, json.dumps(results, indent=2) + "\n")
    return results


def _say_out_of_reach(sizes: factsets.Sizes, recall_chars: int, log: Callable[[str], None]) -> None:
    """A fact set whose answers the span read-out often cannot reach is told so, and why: the model
    answers with a span of the first document about the subject, within the recall of
    ``recall_chars`` characters (at most RECALL_MOST)."""
    beyond = sizes.beyond(recall_chars)
    if not sizes.answers or beyond <= 0.05 * sizes.answers:
        return
    unwritten = sizes.answers - len(sizes.ends)
    late = beyond - unwritten
    why = []
    if unwritten:
        why.append(f"{unwritten} are not written in their subject's first document (put each subject's facts "
                   "in its first document)")
    if late:
        why.append(f"{late} are written past the first {recall_chars} characters, which the model recalls "
                   f"(at most {RECALL_MOST}: state the facts early in the document; a longer document also fits "
                   "fewer passes)")
    warn = logs.warnings_via(log)
    warn(f"warning: of {sizes.answers} training answers, {'; '.join(why)}: the model answers such a question only "
         "where the recall writes the answer in other letters (\"provinces\" for \"Province\")")


def _say_undocumented(facts: factsets.FactSet, log: Callable[[str], None]) -> None:
    """Held-out subjects with no document are told before training: nothing can teach them; so
    are keys of facts.toml that are not read (a misspelt one would change nothing)."""
    warn = logs.warnings_via(log)
    for line in factsets.unknown_keys(facts):
        warn(f"warning: {line}")
    for role, (missing, subjects) in factsets.undocumented(facts).items():
        warn(f"warning: {missing} of {subjects} {role} subjects have no document in {facts.corpus} (a line "
            f"beginning 'SUBJECT. '): the model never reads about them, so their questions are expected wrong")


def budget_check(minutes: float, recipe: Recipe, fitted: dict[str, float],
                 log: Callable[[str], None]) -> Callable[[float, int], None]:
    """What pretraining is told once it has fitted its passes to the budget: it records them (and
    the steps of a pass, from which learn counts the passes made) in ``fitted`` and, under
    LEAST_PASSES, says before the first step that the answers will likely not beat the baseline,
    and about how many minutes would fit enough passes."""
    def check(passes: float, steps_per_pass: int = 0) -> None:
        fitted["pretraining_passes_fitted"] = fitted["pretraining_passes"] = round(passes, 2)
        if steps_per_pass:
            fitted["steps_per_pass"] = steps_per_pass
        if passes >= LEAST_PASSES:
            return
        needed = math.ceil((minutes - recipe.pretrain_minutes) + recipe.pretrain_minutes * LEAST_PASSES / passes)
        fitted["budget_short"] = True
        logs.warnings_via(log)(
            f"warning: {minutes:g} minutes fit {passes:.0f} pretraining passes on this machine, and this recipe "
            f"needs about {LEAST_PASSES} to store facts in documents of about 200 characters (longer ones need "
            f"more): expect answers near the most-frequent baseline (about {needed} minutes would fit "
            f"{LEAST_PASSES}); training goes on")
    return check


def _pretrain_and_finetune(facts: factsets.FactSet, recipe: Recipe, out: Path, *, device: str, overwrite: bool,
                           resume: bool, log: Callable[[str], None],
                           on_fit: Callable[[float, int], None] | None = None,
                           on_pace: Callable[[float], None] | None = None) -> int:
    """The recipe's two stages: pretraining in ``out/pretrain``, finetuning into ``out``; an
    interrupted pretraining is continued with ``resume``. Returns pretraining's steps."""
    pre_dir = out / "pretrain"
    _, _, result = pretrain(recipe.model, recipe.pretrain, corpus=facts.corpus, run_dir=pre_dir, log=log, mix_qa=facts.train,
             held_out=facts.held_out, vocab_text=facts.vocabulary_text(), device=device,
             resume=resume and (pre_dir / CHECKPOINT_NAME).exists(), overwrite=overwrite, on_fit=on_fit,
             on_pace=on_pace)
    finetune(recipe.finetune, run_dir=out, init=pre_dir, corpus=facts.corpus, train_file=facts.train, log=log,
             device=device, overwrite=overwrite or resume)
    return result.steps


class TooDeep(Exception):
    """Pretraining's fit to the budget found too few passes for the recipe's depth
    (FEWER_LAYERS_BELOW): before its first step, from the steps timed then, or at its first
    re-fit, from its own first steps (``paced``)."""

    def __init__(self, layers: int, passes: float, wanted: float, fewer: int, paced: bool = False):
        super().__init__(f"{layers} layers fit {passes:g} pretraining passes, fewer than {wanted:g}: take {fewer}")
        self.layers, self.passes, self.wanted, self.fewer, self.paced = layers, passes, wanted, fewer, paced


def _check_depth(recipe: Recipe, passes: float, *, paced: bool) -> None:
    """Raises TooDeep where ``passes`` call for fewer layers than the recipe's (shallower_layers)."""
    wanted = passes_wanted(recipe.model.block_size)
    fewer = shallower_layers(recipe.model.n_layer, passes, wanted)
    if fewer < recipe.model.n_layer:
        raise TooDeep(recipe.model.n_layer, passes, wanted, fewer, paced)


def depth_check(recipe: Recipe, then: Callable[[float, int], None]) -> Callable[[float, int], None]:
    """Pretraining's ``on_fit``: raises TooDeep where the passes fitted call for fewer layers
    (shallower_layers), else hands the fit on to ``then``."""
    def check(passes: float, steps_per_pass: int = 0) -> None:
        _check_depth(recipe, passes, paced=False)
        then(passes, steps_per_pass)
    return check


def pace_check(recipe: Recipe, fitted: dict[str, Any]) -> Callable[[float], None]:
    """Pretraining's ``on_pace``: records the passes the run fits at its own pace
    (``pretraining_passes_paced``) and applies the same rule to them. The few steps timed
    before a run can misjudge a shared machine's pace by a fifth either way, and a depth kept on
    an optimistic guess falls short of the passes that store its facts."""
    def check(passes: float) -> None:
        fitted["pretraining_passes_paced"] = round(passes, 2)
        _check_depth(recipe, passes, paced=True)
    return check


def _pretrain_fitted(facts: factsets.FactSet, recipe: Recipe, out: Path, *, minutes: float, fitted: dict[str, Any],
                     device: str, overwrite: bool, resume: bool,
                     log: Callable[[str], None]) -> tuple[int, Recipe]:
    """The recipe's two stages (_pretrain_and_finetune), pretraining begun again with fewer layers
    whenever its fit (before its first step, or at its own pace after its first steps) finds
    too few passes for its depth on this machine, the time spent on the deeper starts taken
    from the next one's budget. Returns pretraining's steps and the recipe trained."""
    began, budget = time.perf_counter(), recipe.pretrain_minutes
    while True:  # each start is shallower than the last, and two layers are never too deep
        try:
            steps = _pretrain_and_finetune(facts, recipe, out, device=device, overwrite=overwrite, resume=resume,
                                           log=log, on_fit=depth_check(recipe, budget_check(minutes, recipe, fitted, log)),
                                           on_pace=pace_check(recipe, fitted))
            return steps, recipe
        except TooDeep as deep:
            recipe = shallower(recipe, deep.fewer, budget - (time.perf_counter() - began) / 60)
            _say_too_deep(deep, recipe, fitted, log)


def _say_too_deep(deep: TooDeep, recipe: Recipe, fitted: dict[str, Any], log: Callable[[str], None]) -> None:
    """Records (``fitted["deeper_fit"]``: the first depth left) and says why pretraining begins
    again with ``recipe``'s layers."""
    fitted.pop("budget_short", None)  # the deeper start's warning; the next fit says its own
    fitted.setdefault("deeper_fit", {"layers": deep.layers, "passes": round(deep.passes, 2),
                                     "pace": "run" if deep.paced else "timed"})
    how = "at the pace of its first steps" if deep.paced else "on this machine"
    log(f"{deep.layers} layers fit {deep.passes:.0f} pretraining passes {how}, fewer than the {deep.wanted:.0f} "
        f"that a block of {recipe.model.block_size} characters wants: pretraining begins again with "
        f"{recipe.model.n_layer} layers (short of passes, more passes store more than depth)")


def shallower(recipe: Recipe, layers: int, minutes_left: float) -> Recipe:
    """``recipe`` with ``layers`` layers and what is left of its pretraining's budget."""
    return with_depth(recipe, layers, round(max(0.05, minutes_left), 2))


def as_pretrained(recipe: Recipe, pre_dir: Path) -> Recipe:
    """``recipe`` with the depth and pretraining budget of the pretraining in ``pre_dir``: a run
    resumed after its fit chose fewer layers continues with them."""
    saved = json.loads((pre_dir / CONFIG_NAME).read_text(encoding="utf-8"))
    layers = saved["model"]["n_layer"]
    return recipe if layers == recipe.model.n_layer else with_depth(recipe, layers, saved["train"]["minutes"])


def with_depth(recipe: Recipe, layers: int, pre_minutes: float) -> Recipe:
    return dataclasses.replace(recipe, model=dataclasses.replace(recipe.model, n_layer=layers),
                               pretrain=dataclasses.replace(recipe.pretrain, minutes=pre_minutes),
                               pretrain_minutes=pre_minutes)


def store_abstention(run: Path, facts: factsets.FactSet, *, device: str = "auto",
                     log: Callable[[str], None] = logs.note, loaded: tuple | None = None) -> Path:
    """The default abstention rules and the confidence correction, fitted on the training
    subjects the run held out of finetuning, stored with it (abstention.json); ``loaded``: the
    run's model as ``load_model`` gives it, when the caller has it already."""
    from ..trust.policy import AbstainPolicy
    from ..trust.stored import fit_for_storing, stored_path, write_stored

    model, vocab, checkpoint = loaded or load_model(run, device=str(resolve_device(device)))
    text = fit_for_storing(model, vocab, checkpoint.meta, AbstainPolicy(holdout_file=str(facts.train)))
    path = write_stored(stored_path(run), text)
    held = json.loads(text)["held_out"]
    log(f"abstention rule and confidence correction fitted on {held['people']} held-out training questions "
        f"({held['right']} answered right), stored in {path}")
    return path


def score_fact_set(run: str | Path, facts: factsets.FactSet, *, device: str = "auto",
                   eval_file: str | Path | None = None, loaded: tuple | None = None) -> dict[str, Any]:
    """Dev (or ``eval_file``) answers of the model in ``run``, scored per relation and overall,
    each beside its relation's most-frequent-answer baseline; predictions written beside it
    (``loaded``: as for store_abstention)."""
    model, vocab, _ = loaded or load_model(run, device=str(resolve_device(device)))
    path = Path(eval_file or facts.dev)
    examples = read_qa(path, labelled=True)
    answers = answer_questions(model, vocab, examples)
    predictions = [a.answer for a in answers]
    write_atomically(predictions_file(run, path), predictions_text(predictions))
    by_relation = score_by_relation(predictions, examples, facts.schema)
    common, base_answers = baseline_answers(read_qa(facts.train, labelled=True), examples, facts.schema)
    base_by = score_by_relation(base_answers, examples, facts.schema)
    rows = {name: {**score_json(score), "baseline": {"answer": common.get(name), **score_json(base_by[name])}}
            for name, score in by_relation.items()}
    overall = Score(sum(r["correct"] for r in rows.values()), sum(r["total"] for r in rows.values()))
    base_all = Score(sum(r["baseline"]["correct"] for r in rows.values()), overall.total)
    right = [p == e.answer for p, e in zip(predictions, examples)]
    return {"fact_set": facts.record(), "eval_file": str(path), "relations": rows,
            "overall": {**score_json(overall), "baseline": score_json(base_all)},
            "calibration": calibration_json(answers, right, Path(run))}


def predictions_file(run: str | Path, questions: str | Path) -> Path:
    """Where a learned run keeps its answers to a question file (as evaluate names them)."""
    return Path(run) / f"predictions-{Path(questions).stem}.txt"


def calibration_json(answers: list, right: list[bool], run: Path) -> dict[str, Any]:
    """How far the answers' confidence is from accuracy (ECE over N_BINS equal-width bins, with
    the range a calibrated confidence scores by chance), raw and, when the run stores a
    correction fitted on its held-out subjects, after it."""
    from ..trust.calibration import N_BINS, corrected, ece_by_chance, expected_calibration_error
    from ..trust.stored import read_stored, stored_correction

    confidence = [a.confidence for a in answers]
    out: dict[str, Any] = {"bins": N_BINS, "ece": round(expected_calibration_error(confidence, right), 4),
                           "ece_by_chance": [round(x, 4) for x in ece_by_chance(confidence)]}
    correction = stored_correction(read_stored(run))
    if correction is not None:
        chance = corrected(confidence, correction, [a.parts for a in answers])
        out.update(correction=correction.to_dict(), ece_corrected=round(expected_calibration_error(chance, right), 4),
                   ece_corrected_by_chance=[round(x, 4) for x in ece_by_chance(chance)])
    return out


def score_json(score: Score) -> dict[str, Any]:
    low, high = score.interval
    return {"correct": score.correct, "total": score.total, "percent": round(score.percent, 1),
            "ci95": [round(100 * low, 1), round(100 * high, 1)]}


def results_table(results: dict[str, Any]) -> str:
    """One table: each relation and all, the model's accuracy beside the baseline's."""
    from ..trust.calibration import chance_text

    lines = ["| relation | questions | learned (95% CI) | most frequent answer (baseline) |",
             "| --- | --- | --- | --- |"]
    rows = [*results["relations"].items(), ("all", results["overall"])]
    for name, r in rows:
        base = r["baseline"]
        answer = f" ({base['answer']})" if base.get("answer") else ""
        lines.append(f"| {name} | {r['total']} | {r['correct']} = {r['percent']:.1f}% ({r['ci95'][0]:.1f}-"
                     f"{r['ci95'][1]:.1f}) | {base['percent']:.1f}%{answer} |")
    calibration = results.get("calibration")
    if calibration:
        after = (f", {calibration['ece_corrected']:.3f} after the correction fitted on held-out training subjects"
                 if "ece_corrected" in calibration else "")
        lines.append(f"\nconfidence against accuracy: ECE {calibration['ece']:.3f} ({calibration['bins']} bins){after}")
        span = calibration.get("ece_corrected_by_chance") or calibration.get("ece_by_chance")
        if span:  # runs written before the range was kept have none
            lines.append(f"({chance_text(span, results['overall']['total'])})")
    return "\n".join(lines)


def machine() -> str:
    """The CPU a figure came from (its model name where Linux says it)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {_cores()} cores"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()}, {_cores()} cores"


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


__all__ = ["Recipe", "learn", "recipe_for", "rescore", "results_table", "score_fact_set"]
