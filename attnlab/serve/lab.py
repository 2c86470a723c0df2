"""What the page shows, from the library: answers with their confidence, abstention verdict,
recalled text and corpus evidence; attention weights; causal traces; the dev set scored; edits
of an in-memory copy of a model, saved on request as a new run directory.

Safety lives here too, so it holds whatever serves the page: a ``Lab`` reads only the runs it
is given, the runs its training jobs write and their fact sets, and its data files, writes
only new directories inside its ``out_dir``, refuses bad
input with a ``LabError`` (a one-line message and the HTTP status to answer with), and runs one
model computation at a time (``lock``): concurrent requests never interleave forward passes or
fill a cache twice.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Hashable

from ..trust.abstention import Rule, decide_answers
from ..trust.stored import weights_digest
from .trace_worker import NotPortable, TraceWorker, portable
from ..api import LoadedModel
from ..trust.calibration import ece_by_chance, expected_calibration_error, kalai_scores, reliability_bins
from ..data.corpus import alike_spans
from ..data.datasets import QAExample
from ..answering.evaluate import Answer, Score, answer_questions, score_by_relation
from ..answering.formats import cue_text
from ..data.relations import Schema
from ..trust.evidence import CorpusIndex
from ..data.vocab import MASK_CHAR, PAD_CHAR

MAX_QUESTION_CHARS = 200  # longer than any "Where was NAME born?" of the data files
MAX_TRACE_SAMPLES = 10  # a trace costs samples x 3 x layers x positions forwards
TRACE_NICENESS = 10  # how much lower a trace's thread is scheduled than the asks' (where the OS allows)
TRACE_SAMPLES = 10  # `attnlab trace`'s default (facts/settings.py): fewer make noise look like an effect
KEPT_EDITS = 4  # edited copies kept in memory (each is a whole model)
MAX_RUNS = 16  # runs served, the learned and edited ones included
ANSWER_CACHE = 4096  # answers kept for asking again (all runs together; 0: none kept)
_NOT_KEPT = "not kept"  # the key of a question answer_key cannot key (asked as it is, never kept)
_SAVE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class LabError(ValueError):
    """Bad input to the lab: a one-line message and the HTTP status it is answered with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class Facts:
    """The data a run is shown with: its corpus (evidence, an edit's statistics), its dev
    questions, its relations, and the training answers an edit reads (may be empty)."""

    corpus: list[str]
    dev: list[QAExample]
    schema: Schema
    trained: list[QAExample]
    evidence: CorpusIndex

    @classmethod
    def of(cls, corpus: list[str], dev: list[QAExample], schema: Schema, trained: list[QAExample] | None = None):
        return cls(corpus, dev, schema, trained or [], CorpusIndex(corpus, schema))

    @classmethod
    def load(cls, root: str | Path) -> "Facts":
        """A fact-set folder's corpus, dev questions and relations."""
        from ..data import factset
        from ..data.datasets import read_corpus, read_qa

        facts = factset.load(root)
        return cls.of(read_corpus(facts.corpus).split("\n"), read_qa(facts.dev, labelled=True), facts.schema,
                      read_qa(facts.train, labelled=True))


@dataclass
class Run:
    name: str  # as given on the command line
    model: LoadedModel
    rule: Rule | None = None  # abstention rule (None: every answer is given)
    dev: dict[str, Any] | None = None  # the scored dev set, once computed
    dev_answers: list[Answer] | None = None
    facts: Facts | None = None  # None: the lab's own (the data files it was started with)


@dataclass
class _Asked:
    """One question for one run, waiting to be answered in the next batch."""

    run: int
    question: str
    answer: Answer | None = None
    given: bool = True
    error: Exception | None = None
    done: bool = False
    cached: bool = False  # answered from the answer cache, not computed for this request


class AnswerCache:
    """Answers already given, kept to be given again without computing them: a class asks
    the same questions over and over, and an answer takes a whole recall to compute.

    An entry is keyed by the run's number and what the model reads of the question (``key``),
    and holds the model and abstention rule it was computed with: it is given only while the
    run still serves that same model and rule, so a run whose model or rule is replaced never
    gets an old answer (the lab never changes a served model in place: an edit is a copy,
    served as a new run). At most ``size`` entries, the least recently asked dropped first."""

    def __init__(self, size: int = ANSWER_CACHE):
        self.size = size
        self._kept: OrderedDict[tuple[int, Hashable], tuple[Any, Any, Answer, bool]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, number: int, run: Run, key: Hashable | None) -> tuple[Answer, bool] | None:
        if key is None or not self.size:
            return None
        with self._lock:
            entry = self._kept.get((number, key))
            if entry is None:
                return None
            model, rule, answer, given = entry
            if model is not run.model or rule is not run.rule:  # computed for another model or rule
                del self._kept[(number, key)]
                return None
            self._kept.move_to_end((number, key))
            return answer, given

    def put(self, number: int, model: Any, rule: Rule | None, key: Hashable | None, answer: Answer,
            given: bool) -> None:
        """Keep ``answer`` (and whether ``rule`` gives it) as run ``number``'s, computed by ``model``."""
        if key is None or not self.size:
            return
        with self._lock:
            self._kept[(number, key)] = (model, rule, answer, given)
            self._kept.move_to_end((number, key))
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)

    def __len__(self) -> int:
        return len(self._kept)


def answer_key(run: Run, question: str) -> Hashable | None:
    """What decides ``run``'s answer to ``question``: for a recall model the subject and the
    relation (it recalls the subject's line and reads the relation's answer from it, never the
    question's wording), for a direct model the question's text; None for a question no
    relation of a recall model matches (its error is never kept)."""
    if run.model.config.qa_format != "recall":
        return ("question", question)
    asked = Schema.from_list(run.model.config.relations).parse(question, bare_subject=False)
    return None if asked is None else ("recall", asked.subject, asked.relation.name)


@dataclass
class EditedCopy:
    run: int
    model: Any  # the edited GPT (the run's own model is never modified)
    report: dict[str, Any]
    served: int | None = None  # its run number once it is served to be asked


def _asked_as(answer: Answer, question: str) -> Answer:
    """``answer`` as the answer to ``question`` (one answer given to several wordings)."""
    return answer if answer.question == question else dataclasses.replace(answer, question=question)


def checked_text(text: str | None, what: str) -> str:
    """``text`` stripped, refused when it is something no model can read: nothing, too much,
    or the model's own marks."""
    text = (text or "").strip()
    if not text:
        raise LabError(f"empty {what}" + (": type 'Where was NAME born?' or just a name" if what == "question" else ""))
    if len(text) > MAX_QUESTION_CHARS:
        raise LabError(f"the {what} is {len(text)} characters long; at most {MAX_QUESTION_CHARS} are read")
    for mark in (MASK_CHAR, PAD_CHAR):
        if mark in text:
            raise LabError(f"the {what} contains {mark!r}, a mark the model uses itself")
    return text


def question_of(text: str, schema: Schema | None = None) -> str:
    """The question asked: ``text`` itself, or the one relation's question about TEXT when it is
    just a subject (``Where was TEXT born?`` for the course's set)."""
    text = checked_text(text, "question")
    schema = schema or Schema()
    asked = schema.parse(text)
    if asked is not None and schema.parse(text, bare_subject=False) is None:
        return asked.relation.ask(asked.subject)
    return text


def _read_after(config, answer: Answer) -> str:
    """What a model (its ``ModelConfig``) read after the closing mark of its recall (or
    question) and before ``answer``: the relation's ``cue⁇`` (a recall model of several
    relations) and its quote ``quote⁇`` (a quoting model)."""
    relation = Schema.from_list(config.relations).relation(answer.relation) if answer.relation else None
    cued = cue_text(config, relation) if relation is not None else ""
    return cued + (answer.quoted + MASK_CHAR if answer.quoted is not None else "")


def copied_span(recalled: str | None, answer: str) -> list[int] | None:
    """[start, end) of the answer in the recalled text, where the model copied it from (the
    first place it occurs, else the first words that write it in other letters, as "provinces"
    writes "Province"; None when neither occurs, or nothing was recalled)."""
    if not recalled or not answer:
        return None
    if answer in recalled:
        start = recalled.index(answer)
        return [start, start + len(answer)]
    alike = alike_spans(recalled, answer)
    return list(alike[0]) if alike else None


def _corrected_chance(model: LoadedModel, answers: list[Answer]) -> list[float] | None:
    """The answers' confidences through the run's stored correction (None: it stores none, or
    its weights changed since)."""
    correction = model.correction()
    if correction is None or not answers:
        return None
    return [correction.chance(a.confidence, a.parts) for a in answers]


def in_words(rule: Rule | None, confidence: float, given: bool, chance_right: float | None = None) -> str:
    """The abstention verdict as a student reads it: sure, or unsure and why, then how often
    answers this confident were right on held-out subjects when the run stores a correction;
    ``confidence``: what the rule thresholds (``Rule.score``: the confidence, or its chance)."""
    chance = "" if chance_right is None else f"; about {round(100 * chance_right)} in 100 answers this confident are right"
    if rule is None:
        return "no abstention rule for this run: every answer is given" + chance
    if given and rule.joint is not None:
        return "sure: the name is familiar enough to this model for an answer this likely" + chance
    if given:
        return "sure" + (f": {_its(rule)}at or above this model's threshold {rule.confidence:.2f}"
                         if rule.confidence is not None else "") + chance
    if rule.confidence is not None and confidence < rule.confidence:
        return f"unsure: {_its(rule)}below this model's threshold {rule.confidence:.2f}" + chance
    if rule.joint is not None:
        return "unsure: the name is too unfamiliar to this model for an answer this unlikely" + chance
    return "unsure: the name is less familiar to this model than its threshold allows" + chance


def _its(rule: Rule) -> str:
    """The score a rule thresholds, named where it is not the confidence itself."""
    return "its chance right is " if rule.chance is not None else ""


def head_summaries(layers: list, span: list[int] | None) -> list[dict[str, Any]]:
    """Per layer and head, the mean share of the answer rows' attention on the copied span,
    strongest first (empty without a span)."""
    if span is None:
        return []
    out = []
    for layer, heads in enumerate(layers):
        for head, rows in enumerate(heads):
            shares = [sum(row[span[0]:span[1]]) for row in rows]
            out.append({"layer": layer, "head": head, "on_span": round(sum(shares) / len(shares), 3) if shares else 0.0})
    return sorted(out, key=lambda h: -h["on_span"])


def strongest_sentence(t, strongest: dict[str, tuple[int, str, float]]) -> str:
    """The state whose restoring brings the answer back most, in one sentence."""
    kind, (layer, _, value) = max(strongest.items(), key=lambda kv: kv[1][2])
    grid = t.recovered[kind]
    position = int(next(c for c in range(grid.shape[1]) if grid[layer, c] == value))
    p, where = t.point, "after the name"
    if p.name_start <= position < p.name_end:
        where = "in the name"
    elif position < p.name_start:
        where = "before the name"
    state = "residual stream" if kind == "residual" else f"{kind} output"
    if value - t.corrupted < 0.1 * (t.clean - t.corrupted) or t.clean <= t.corrupted:
        return (f"No single state brings P({p.answer!r}) back: the best, the {state} at layer {layer}, reaches "
                f"{value:.3f} (clean {t.clean:.3f}, name corrupted {t.corrupted:.3f}).")
    return (f"Restoring the {state} at layer {layer} over {p.context[position]!r} (position {position}, {where}) "
            f"brings P({p.answer!r}) back to {value:.3f} of the clean {t.clean:.3f} "
            f"(name corrupted: {t.corrupted:.3f}).")


def lower_priority(by: int = TRACE_NICENESS) -> bool:
    """Lower the calling thread's scheduling priority (Linux sets niceness per thread); True
    when it took. Any process may lower its own priority, so this fails only where the OS has
    no such call."""
    try:
        me = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + by))
        return True
    except (AttributeError, OSError):
        return False


def plain(message: str) -> str:
    """A library error in the page's words: no 'question:1:' file positions, no config names."""
    message = re.sub(r"^(question|input|<[a-z]+>):\d+:\s*", "", " ".join(message.split()))
    return re.sub(r"exceeds the model's block_size (\d+)", r"is longer than this model can read (\1 characters)",
                  message)


class Lab:
    def __init__(self, runs: list[Run], corpus: list[str], dev: list[QAExample], out_dir: str | Path,
                 trained: list[QAExample] | None = None, stat_lines: int = 2000,
                 answer_cache: int = ANSWER_CACHE):
        if not runs:
            raise ValueError("the lab needs at least one run")
        self.runs = runs
        self.corpus = corpus
        self.schema = Schema.from_list(runs[0].model.config.relations)  # the first run's fact set
        self.dev_examples = dev
        self.out_dir = Path(out_dir)
        self.facts = Facts.of(corpus, dev, self.schema, trained)
        self.evidence = self.facts.evidence
        self.stat_lines = stat_lines  # corpus lines for an edit's key statistics (0: all)
        self.lock = threading.Lock()  # one model computation at a time
        self.trace_lock = threading.Lock()  # one causal trace at a time, on a copy of the model
        self._trace_copies: dict[int, Any] = {}
        # Traces run in a process of their own at a lower priority (trace_worker.py), else (a
        # model that cannot be sent there) on a thread of lower priority: asks get the CPU first.
        self._trace_worker = TraceWorker(TRACE_NICENESS)
        self._tracer = ThreadPoolExecutor(1, thread_name_prefix="attnlab-trace", initializer=lower_priority)
        self._waiting: list[_Asked] = []  # questions not yet answered (ask)
        self._waiting_lock = threading.Lock()
        self.answers = AnswerCache(answer_cache)  # answers given, to give again (0: none kept)
        self.edits: OrderedDict[int, EditedCopy] = OrderedDict()
        self._edit_ids = itertools.count(1)

    # ---- runs --------------------------------------------------------------------------------
    def run(self, number: int) -> Run:
        if not 0 <= number < len(self.runs):
            raise LabError(f"no run {number}: this lab serves runs 0 to {len(self.runs) - 1}", 404)
        return self.runs[number]

    def facts_of(self, run: Run) -> Facts:
        return run.facts or self.facts

    def add_run(self, name: str, model: LoadedModel, facts: Facts | None = None) -> int:
        """A run joins the lab (a finished training job, an edited copy); its number. At most
        MAX_RUNS are served: each is a whole model in memory."""
        with self.lock:
            if len(self.runs) >= MAX_RUNS:
                raise LabError(f"this lab serves {MAX_RUNS} runs at most; start it again to drop some", 409)
            self.runs.append(Run(name, model, facts=facts))
            return len(self.runs) - 1

    def add_learned(self, run_dir: str | Path, facts_root: str | Path) -> int:
        """A run a training job wrote, served with the fact set it learned."""
        from ..api import load

        return self.add_run(str(run_dir), load(run_dir, device="cpu"), Facts.load(facts_root))

    def describe_runs(self) -> list[dict[str, Any]]:
        return [{"id": i, "name": r.name, "qa_format": r.model.config.qa_format,
                 "n_layer": r.model.config.n_layer, "n_head": r.model.config.n_head,
                 "parameters": sum(p.numel() for p in r.model.gpt.parameters()),
                 "relations": list(self.facts_of(r).schema.names), "dev_questions": len(self.facts_of(r).dev),
                 "abstention": r.rule.describe() if r.rule else "never abstain"}
                for i, r in enumerate(self.runs)]

    # ---- asking ------------------------------------------------------------------------------
    def ask(self, text: str, runs: list[int] | None = None) -> dict[str, Any]:
        """The question answered by each of ``runs`` (default: all), side by side.

        An answer the run gave before (``AnswerCache``) is given again at once. The others are
        answered in one batch with every question asked meanwhile: each request puts its
        questions on the waiting list, and whoever holds the lock answers everything waiting, so
        20 users asking together wait for about one batched answer, not for 19 answers one by
        one."""
        numbers = list(range(len(self.runs))) if runs is None else list(dict.fromkeys(runs))  # each once
        if not numbers:
            raise LabError("no run chosen: tick at least one")
        for n in numbers:
            self.run(n)  # an unknown run is refused before anything waits
        asked = [_Asked(n, self.question_for(text, self.runs[n])) for n in numbers]
        pending = [a for a in asked if not self._from_cache(a)]
        if pending:
            with self._waiting_lock:
                self._waiting += pending
            with self.lock:
                if not all(a.done for a in pending):  # else another request answered them meanwhile
                    with self._waiting_lock:
                        batch, self._waiting = self._waiting, []
                    self._answer_waiting(batch)
        failed = [a for a in asked if a.error is not None]
        for a in failed:  # a bug, or a question no run chosen can be asked: the request fails
            if not isinstance(a.error, ValueError) or len(failed) == len(asked):
                raise a.error
        # Runs of different fact sets side by side: a run that cannot be asked this question
        # says why on its card while the others answer.
        return {"question": next(a.question for a in asked if a.error is None),
                "answers": [self._shown(a) if a.error is None else self._not_asked(a) for a in asked]}

    def _not_asked(self, asked: _Asked) -> dict[str, Any]:
        """The card of a run that could not be asked the question, and why."""
        return {"run": asked.run, "name": self.runs[asked.run].name, "question": asked.question,
                "problem": str(asked.error)}

    def question_for(self, text: str, run: Run) -> str:
        """The question ``run`` is asked: a bare subject made a question of its fact set, the
        subject spelled as its corpus spells it."""
        facts = self.facts_of(run)
        return facts.evidence.as_written(question_of(text, facts.schema))

    def _from_cache(self, a: _Asked) -> bool:
        """Whether ``a`` was answered from the answer cache (then it is done)."""
        run = self.runs[a.run]
        hit = self.answers.get(a.run, run, answer_key(run, a.question))
        if hit is None:
            return False
        answer, a.given = hit
        a.answer = _asked_as(answer, a.question)
        a.cached = a.done = True
        return True

    def _answer_waiting(self, batch: list[_Asked]) -> None:
        """Answer every waiting question, one model call per run; a bad question (an unknown
        character) fails alone: its batch is answered again one question at a time."""
        by_run: dict[int, list[_Asked]] = {}
        for a in batch:
            by_run.setdefault(a.run, []).append(a)
        for number, group in by_run.items():
            try:
                self._answer_group(number, group)
            except ValueError:
                for a in group:
                    try:
                        self._answer_group(number, [a])
                    except ValueError as e:
                        a.error = e
            except Exception as e:  # a bug: every request of the batch gets it (a 500), none hangs
                for a in group:
                    a.error = e
            finally:
                for a in group:
                    a.done = True

    def _answer_group(self, number: int, group: list[_Asked]) -> None:
        """One model call for the group's questions, each asked once however many asked it
        (what the model reads, ``answer_key``); the answers are kept in the answer cache."""
        run = self.runs[number]
        model, rule = run.model, run.rule  # what the answers are computed with, kept with them
        keys = [answer_key(run, a.question) or (_NOT_KEPT, j) for j, a in enumerate(group)]
        slot: dict[Hashable, int] = {}
        unique: list[str] = []
        for a, k in zip(group, keys):
            if k not in slot:
                slot[k] = len(unique)
                unique.append(a.question)
        answers = model.ask(unique, source="question", abstain=None)  # _given decides
        given = self._given(model, rule, answers)
        for a, k in zip(group, keys):
            a.answer, a.given = _asked_as(answers[slot[k]], a.question), given[slot[k]]
        for k, i in slot.items():
            if k[0] != _NOT_KEPT:
                self.answers.put(number, model, rule, k, answers[i], given[i])

    def _shown(self, asked: _Asked) -> dict[str, Any]:
        run, answer, facts = self.runs[asked.run], asked.answer, self.facts_of(self.runs[asked.run])
        found = facts.evidence.find(asked.question, answer.answer)
        first = (found.supporting or found.lines or (None,))[0]
        return {"run": asked.run, "name": run.name, "question": asked.question, "answer": answer.answer,
                "confidence": answer.confidence, "chance_right": answer.chance_right, "relation": answer.relation,
                "complete": answer.complete, "recalled": answer.recalled, "given": asked.given,
                "cached": asked.cached,
                "span": copied_span(answer.recalled, answer.answer),
                "in_words": in_words(run.rule, run.rule.score(answer.confidence, answer.parts) if run.rule
                                     else answer.confidence, asked.given, answer.chance_right),
                "abstention": run.rule.describe() if run.rule else "never abstain",
                "evidence": {"verdict": found.verdict, "supported": bool(found.supporting),
                             "line_number": first,
                             "line": facts.corpus[first - 1] if first else None}}

    @staticmethod
    def _given(model: LoadedModel, rule: Rule | None, answers: list[Answer]) -> list[bool]:
        """Whether ``rule`` gives each of ``model``'s answers (None: every one)."""
        if rule is None:
            return [True] * len(answers)
        return decide_answers(model.gpt, model.vocab, rule, answers)

    # ---- why: attention and causal trace -----------------------------------------------------
    def attention(self, text: str, number: int) -> dict[str, Any]:
        """Where the answer's characters look: for every layer and head, the attention of the
        positions that write the answer (one row per answer character) over the text the model
        read before it (the recalled text in the recall format, else the question), with the
        copied span, and each head's share of attention on that span."""
        from ..probing.attention_maps import attention_weights

        run = self.run(number)
        question = self.question_for(text, run)
        vocab, block = run.model.vocab, run.model.config.block_size
        with self.lock:
            (answer,) = run.model.ask([question], source="question", abstain=None)
            read = answer.recalled if answer.recalled is not None else question
            head = read + MASK_CHAR + _read_after(run.model.config, answer)
            ids = vocab.encode(head + answer.answer)[:block]
            weights, _ = attention_weights(run.model.gpt, [ids])
        n_read = min(len(read), len(ids))
        first = len(head) - 1  # the position that writes answer[0]; row k writes answer[k]
        rows = list(range(first, min(first + len(answer.answer), len(ids))))
        layers = [[[[round(float(x), 4) for x in w[0, h, r, :n_read]] for r in rows] for h in range(w.shape[1])]
                  for w in weights]
        span = copied_span(read[:n_read], answer.answer)
        return {"question": question, "answer": answer.answer, "read": list(read[:n_read]),
                "rows": list(answer.answer[:len(rows)]), "span": span,
                "recalled": answer.recalled is not None, "layers": layers,
                "heads": head_summaries(layers, span)}

    def trace(self, text: str, number: int, samples: int = TRACE_SAMPLES) -> dict[str, Any]:
        """The causal trace of the question (facts/trace.py, with `attnlab trace`'s defaults):
        recovered probability of the clean answer for each kind, layer and position of the input
        the answer is produced from, and the strongest state in a sentence. It runs in the trace
        worker's process (trace_worker.py), one trace at a time, at a lower priority, so asks
        are not held back while it runs and get the CPU first; a model that cannot be sent there
        is traced on a copy, on a thread of lower priority (``lower_priority``)."""
        from ..facts import trace as tracing
        from ..facts.settings import TraceSettings

        if not 1 <= samples <= MAX_TRACE_SAMPLES:
            raise LabError(f"samples must lie in 1..{MAX_TRACE_SAMPLES}, got {samples}")
        run = self.run(number)
        question = self.question_for(text, run)
        settings = TraceSettings().to_dict() | {"samples": samples}
        with self.trace_lock:
            try:
                # keyed by the model object as well: an edit's codebook is not in the weights' digest
                key = (number, id(run.model.gpt), weights_digest(run.model.gpt))
                t = self._trace_worker.run(key, lambda: self._portable(run),
                                           tracing.trace, question, **settings)
            except NotPortable:  # traced here, on a copy, on a thread of lower priority
                model = self._trace_copy(number)
                t = self._tracer.submit(lambda: tracing.trace(model, run.model.vocab, question, **settings)).result()
        p = t.point
        recovered = {k: [[round(float(x), 5) for x in row] for row in v] for k, v in t.recovered.items()}
        return {"question": question, "answer": p.answer, "chars": list(p.context),
                "name_start": p.name_start, "name_end": p.name_end, "clean": t.clean,
                "corrupted": t.corrupted, "samples": t.samples, "noise": t.noise, "scale": [0.0, t.clean],
                "recovered": recovered, "strongest": strongest_sentence(t, tracing.strongest(t.recovered, list(p.context)))}

    def _portable(self, run: "Run") -> bytes:
        """The run's model as the trace worker loads it (under the lock, as a copy is made)."""
        with self.lock:
            return portable(run.model.gpt, run.model.vocab)

    def warm_traces(self) -> None:
        """Start the trace worker now, without waiting for it."""
        self._trace_worker.warm()

    def close(self) -> None:
        """Stop the trace worker (the server calls this as it stops)."""
        self._trace_worker.close()

    def _trace_copy(self, number: int):
        """The run's model copied once (under the lock, so no ask runs while it is copied)."""
        import copy

        if number not in self._trace_copies:
            with self.lock:
                self._trace_copies[number] = copy.deepcopy(self.runs[number].model.gpt)
        return self._trace_copies[number]

    # ---- the dev set -------------------------------------------------------------------------
    def dev(self, number: int) -> dict[str, Any]:
        """Every dev question with its gold answer, the answer, right or wrong, confidence and
        abstention verdict; the accuracy with its 95% interval; the reliability bins; the ECE, raw
        and after the run's stored correction (None without one)."""
        run = self.run(number)
        with self.lock:
            if run.dev is None:
                run.dev_answers, run.dev = self._score_dev(run)
        return run.dev

    def _score_dev(self, run: Run) -> tuple[list[Answer], dict[str, Any]]:
        examples = self.facts_of(run).dev
        answers = answer_questions(run.model.gpt, run.model.vocab, examples, draft=run.model.recall_draft())
        given = self._given(run.model, run.rule, answers)
        right = [a.answer == e.answer for a, e in zip(answers, examples)]
        confidence = [a.confidence for a in answers]
        chance = _corrected_chance(run.model, answers)
        result = Score(sum(right), len(right))
        low, high = result.interval
        rows = [{"question": e.question, "gold": e.answer, "answer": a.answer, "right": r,
                 "confidence": a.confidence, "given": g, "relation": a.relation}
                for e, a, r, g in zip(examples, answers, right, given)]
        bins = [{"low": b.low, "high": b.high, "count": b.count, "confidence": b.mean_confidence,
                 "accuracy": b.accuracy} for b in reliability_bins(confidence, right)]
        by_relation = {name: {"correct": sc.correct, "total": sc.total, "text": sc.with_interval()}
                       for name, sc in score_by_relation([a.answer for a in answers], examples,
                                                         Schema.from_list(run.model.config.relations)).items()}
        return answers, {"name": run.name, "rows": rows, "correct": result.correct, "total": result.total,
                         "relations": by_relation,
                         "accuracy": result.correct / result.total if result.total else 0.0,
                         "interval": [low, high], "text": result.with_interval(), "bins": bins,
                         "ece": expected_calibration_error(confidence, right) if rows else 0.0,
                         "ece_corrected": expected_calibration_error(chance, right) if chance else None,
                         # the range for the confidence whose ECE the page shows last
                         "ece_by_chance": list(ece_by_chance(chance or confidence)) if rows else None,
                         "kalai": {"all": kalai_scores(right), "rule": kalai_scores(right, given)}}

    # ---- comparing runs ----------------------------------------------------------------------
    def compare(self, numbers: list[int]) -> dict[str, Any]:
        """Two or more runs on their dev questions: each one's score per relation with its 95%
        interval, and each against the first by the paired test of experiments/comparison.py
        (exact McNemar on the questions exactly one of the two got right), when both answered
        the same questions."""
        from ..experiments.comparison import paired_test

        numbers = list(dict.fromkeys(numbers))
        if len(numbers) < 2:
            raise LabError("choose two or more runs to compare")
        scored = [self.dev(n) for n in numbers]
        reference = scored[0]
        questions = [r["question"] for r in reference["rows"]]
        rows = []
        for n, d in zip(numbers, scored):
            row = {"run": n, "name": d["name"], "text": d["text"], "correct": d["correct"], "total": d["total"],
                   "interval": d["interval"], "relations": d["relations"], "paired": None}
            if n != numbers[0]:
                if [r["question"] for r in d["rows"]] == questions:
                    test = paired_test([[r["right"] for r in d["rows"]]], [[r["right"] for r in reference["rows"]]])
                    row["paired"] = test.to_dict()
                else:
                    row["paired"] = {"verdict": "not compared: the two runs have different dev questions"}
            rows.append(row)
        return {"reference": numbers[0], "runs": rows}

    # ---- edits -------------------------------------------------------------------------------
    def edit(self, number: int, person: str, place: str, method: str | None = None,
             relation: str | None = None) -> dict[str, Any]:
        """Edit a copy of the run's model so ``person`` was born in ``place``, as ``attnlab edit``
        does (the same library call, the default method unless ``method`` is given); report the
        new answer and the dev answers that changed. A request the editor refuses (a person the
        corpus does not know, a second edit of one person) is a 400, an edit that does not take
        a 422. The copy is kept (KEPT_EDITS at most) until saved or pushed out."""
        run = self.run(number)
        person, place = checked_text(person, "person"), checked_text(place, "place")
        names = self.facts_of(run).schema.names
        if relation is not None and relation not in names:
            raise LabError(f"this run's fact set has no relation {relation!r} (it has: {', '.join(names)})")
        self.dev(number)  # the answers before, to compare with
        with self.lock:
            edited, report = self._edited(run, person, place, method, relation)
            report["run"] = number
            edit_id = next(self._edit_ids)
            self.edits[edit_id] = EditedCopy(number, edited, report)
            while len(self.edits) > KEPT_EDITS:
                self.edits.popitem(last=False)
        return {"id": edit_id, **report}

    def _edited(self, run: Run, person: str, place: str, method: str | None, relation: str | None):
        from ..facts.correction import edit_fact
        from ..facts.edit import question_about
        from ..facts.errors import EditError, EditFailed
        from ..facts.settings import EditSettings
        from ..facts.trace import TraceError

        try:  # the settings check the method themselves (None: their default)
            settings = EditSettings(stat_lines=self.stat_lines, **({"method": method} if method else {}))
        except ValueError as e:
            raise LabError(f"unknown edit method {method!r} ({e})") from None
        try:
            facts = self.facts_of(run)
            edited, report = edit_fact(run.model.gpt, run.model.vocab, person, place, facts.corpus,
                                       settings=settings, trained=facts.trained, relation=relation)
        except EditFailed as e:  # an EditError too: caught first
            raise LabError(str(e), 422) from None
        except (EditError, TraceError) as e:
            raise LabError(str(e)) from None
        others, changed = self._changed_dev_answers(run, edited, person)
        return edited, {**report, "source": run.name, "new_answer": report["answer_after"],
                        "question": question_about(run.model.gpt, person, relation),
                        "others": others, "others_changed": len(changed), "changed": changed}

    def _changed_dev_answers(self, run: Run, edited: Any, person: str) -> tuple[int, list[dict[str, str]]]:
        """How many dev questions are about other people, and those of their answers the edit
        changed: question, gold, before, after."""
        from ..facts.edit import changed_answers

        dev, schema = self.facts_of(run).dev, self.facts_of(run).schema
        keep = [i for i, e in enumerate(dev) if self._subject(e.question, schema) != person]
        others = [dev[i] for i in keep]
        before = [run.dev_answers[i] for i in keep]
        moved = changed_answers(edited, run.model.vocab, others, before)
        after = answer_questions(edited, run.model.vocab, [others[i] for i in moved]) if moved else []
        return len(others), [{"question": others[i].question, "gold": others[i].answer,
                              "before": before[i].answer, "after": a.answer} for i, a in zip(moved, after)]

    def _subject(self, question: str, schema: Schema) -> str | None:
        asked = schema.parse(question, bare_subject=False)
        return asked.subject if asked else None

    def ask_edit(self, edit_id: int) -> dict[str, Any]:
        """The edited copy served as a run of its own (once), so it can be asked at once."""
        copy = self.edits.get(edit_id)
        if copy is None:
            raise LabError(f"no edit {edit_id} in memory (only the last {KEPT_EDITS} are kept)", 404)
        if copy.served is None:
            source = self.runs[copy.run]
            model = LoadedModel(copy.model, source.model.vocab, source.model.checkpoint)
            r = copy.report
            name = f"{source.name} edited: {r.get('person')} -> {r.get('new_answer')} (edit {edit_id}, not saved)"
            copy.served = self.add_run(name, model, source.facts)
            self.runs[copy.served].rule = source.rule
        return {"id": edit_id, "run": copy.served}

    def save_edit(self, edit_id: int, name: str) -> dict[str, Any]:
        """Write the edited copy as the new run directory OUT_DIR/NAME, as ``attnlab edit`` writes
        one (checkpoint, edits.json, edit.json). NAME is one plain path component, and the
        directory must not exist yet: nothing is written outside OUT_DIR, and no run, edited or
        not, is ever overwritten."""
        from ..facts.correction import save_edited_run

        copy = self.edits.get(edit_id)
        if copy is None:
            raise LabError(f"no edit {edit_id} in memory (only the last {KEPT_EDITS} are kept)", 404)
        if not _SAVE_NAME.fullmatch(name or ""):
            raise LabError(f"the directory name {name!r} must be 1-64 letters, digits, '.', '_' or '-' "
                           "and start with a letter or digit")
        target = self.out_dir / name
        run = self.runs[copy.run]
        report = {k: v for k, v in copy.report.items() if k != "changed"}
        with self.lock:  # also keeps two saves under one name from both passing the check
            if target.exists():
                raise LabError(f"{target} already exists; choose a new name", 409)
            path = save_edited_run(target, copy.model, run.model.vocab,
                                   {**run.model.checkpoint.meta, "edit": report}, copy.report)[0]
        return {"id": edit_id, "run_dir": str(target), "checkpoint": str(path)}
