"""How a model answers in each answer format (``ModelConfig.qa_format``), one object per
format: ask ``answer_format(model.config.qa_format)`` instead of comparing the format's name.

Each object is its format's training strings (``attnlab/data/formats.py``) plus answering:
``answer`` a batch of questions greedily, ``answer_one`` question about a named person, and
``reading``: what the model read before writing an answer, which of those characters it wrote
itself, and where the person's name is (causal tracing and editing need all three).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.progress import progress_bar
from ..data.datasets import DataError, QAExample
from ..data.formats import QA_FORMATS, DirectText, RecallText
from ..data.vocab import MASK_CHAR, MASK_ID, Vocab
from ..model.generate import Draft, generate
from ..model.gpt import GPT
from ..data.relations import Asked, Schema
from .knowledge import MAX_ANSWER_CHARS, answer_by_recall, recall_prompt, require_person


def unparsable(schema: Schema) -> str:
    """What an answer says of a question that matches none of the model's relations."""
    forms = "; ".join(repr(r.template) for r in schema.relations)
    return f"I can't parse this: ask {forms}"

MAX_NEW_CHARS = MAX_ANSWER_CHARS  # the answer budget of both formats: one number


def cue_text(config, relation) -> str:
    """``cue⁇`` where a model (its ``ModelConfig``) reads the relation's answer after its recall
    (a recall-format model of several relations); else nothing (a direct model reads the
    question itself)."""
    cue = Schema.from_list(config.relations).cue(relation)
    return "" if cue is None or not answer_format(config.qa_format).recalls else cue + MASK_CHAR


@dataclass(frozen=True)
class Answer:
    question: str
    answer: str
    confidence: float  # probability of the whole greedy completion up to the closing MASK
    complete: bool  # the model closed its answer with MASK within the budget
    recalled: str | None = None  # recall format: what the model wrote of the person first
    withheld: str | None = None  # an abstaining ask: the answer it withheld (answer is then "")
    relation: str | None = None  # the relation the question asks about (None: not known)
    problem: str | None = None  # why the question got no answer ("I can't parse this: ...")
    # The confidence through the run's stored correction: how often answers of this confidence
    # were right on training subjects held out of finetuning (None: the run stores none).
    chance_right: float | None = None
    quoted: str | None = None  # a quoting model (``quote``): the sentence it wrote before the answer
    # A recall answer's confidence in parts, as log-probabilities: the answer read out of the
    # recall, the quote before it, the answer's characters as the recall wrote them (their sum
    # is ln confidence for a closed answer); a correction may weigh them apart (trust/calibration.py).
    parts: tuple[float, float, float] | None = None


@dataclass(frozen=True)
class Reading:
    """What the model read before writing an answer: ``text``, then a closing ``⁇``. The
    first ``prompt_len`` characters of ``text + ⁇`` were given; ``written`` are the positions
    it chose itself, ``given`` later ones it did not (the closing mark of a recall that filled
    its budget, set by the answerer). The person's name starts at ``name_start``."""

    text: str
    prompt_len: int
    name_start: int
    written: tuple[int, ...] = ()
    given: tuple[int, ...] = ()


def extract_answer(completion: str) -> str:
    """The text between the first and second MASK of a completion (SPEC 6)."""
    parts = completion.split(MASK_CHAR)
    return parts[1] if len(parts) > 1 else ""


class DirectFormat(DirectText):
    """The model reads ``question⁇`` and writes ``place⁇`` (SPEC 2 and 6)."""

    def answer(self, model: GPT, vocab: Vocab, examples: list[QAExample], *, batch_size: int,
               max_new: int | None = None, use_cache: bool = True, progress: bool = False,
               strict: bool = True, draft: Draft | None = None) -> list[Answer]:
        """Questions batched by length so little padding is decoded; a row stops at its
        closing MASK. Any question is read as it is written (``strict`` is the recall
        format's)."""
        max_new = max_new or model.config.answer_chars
        prompts = [vocab.encode(e.question + MASK_CHAR, source=e.source, line=e.line) for e in examples]
        for e, prompt in zip(examples, prompts):
            if len(prompt) > model.config.block_size:  # a question the model cannot even read
                raise DataError(e.source, e.line, f"the question and its mark are {len(prompt)} characters, "
                                f"more than the model's block_size {model.config.block_size}")
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        answers: list[Answer | None] = [None] * len(prompts)
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        for chunk in progress_bar(batches, desc="answering", disable=not progress, leave=False):
            gen = generate(model, [prompts[i] for i in chunk], max_new, stop_token=MASK_ID, use_cache=use_cache)
            for i, toks, lps in zip(chunk, gen.tokens, gen.logprobs):
                complete = bool(toks) and toks[-1] == MASK_ID
                text = extract_answer(examples[i].question + MASK_CHAR + vocab.decode(toks))
                answers[i] = Answer(examples[i].question, text, math.exp(sum(lps)), complete)
        return answers  # type: ignore[return-value]

    def answer_one(self, model: GPT, vocab: Vocab, question: str, name: str) -> Answer:
        asked = [QAExample(question, None, "<question>", 1)]
        return self.answer(model, vocab, asked, batch_size=256)[0]

    def reading(self, question: str, name: str | None, answer: Answer, recall_chars: int) -> Reading:
        """The question and its mark, all given."""
        return Reading(question, len(question) + 1, question.find(name) if name else -1)


class RecallFormat(RecallText):
    """The model writes what it remembers of the person from ``NAME.``, then ``⁇``, then the
    place read from that text and ``⁇`` (attnlab/answering/knowledge.py)."""

    def answer(self, model: GPT, vocab: Vocab, examples: list[QAExample], *, batch_size: int,
               max_new: int | None = None, use_cache: bool = True, progress: bool = False,
               strict: bool = True, draft: Draft | None = None) -> list[Answer]:
        """Answers in input order. A question that matches none of the model's relations is a
        DataError naming its line, or with ``strict=False`` an empty answer with its problem
        stated (one unreadable question does not stop the others)."""
        schema = Schema.from_list(model.config.relations)
        asked: list[Asked | None] = []
        problems: list[str | None] = []
        for e in examples:
            try:
                one = schema.require(e) if strict else schema.parse(e.question)
                if one is None:
                    problems.append(unparsable(schema))
                else:
                    vocab.encode(one.subject, source=e.source, line=e.line)  # a clear error for an unknown character
                    problems.append(None)
                asked.append(one)
            except DataError as error:
                if strict:
                    raise
                asked.append(None)
                problems.append(f"I can't read this: {error.problem}")
        ok = [i for i, a in enumerate(asked) if a is not None]
        recalled = answer_by_recall(model, vocab, [asked[i].subject for i in ok], model.config.recall_chars,
                                    batch_size=batch_size, max_answer_chars=max_new,
                                    cues=[schema.cue(asked[i].relation) for i in ok], draft=draft) if ok else []
        by_row = dict(zip(ok, recalled))
        out = []
        for i, e in enumerate(examples):
            r = by_row.get(i)
            if r is None:
                out.append(Answer(e.question, "", 0.0, False, problem=problems[i]))
            else:
                out.append(Answer(e.question, r.answer, r.confidence, r.complete, r.recalled,
                                  relation=asked[i].relation.name, quoted=r.quoted, parts=r.parts))
        return out

    def answer_one(self, model: GPT, vocab: Vocab, question: str, name: str) -> Answer:
        """About ``name`` (given: a question need not be in the course's form)."""
        schema = Schema.from_list(model.config.relations)
        asked = schema.parse(question)
        relation = asked.relation if asked else schema.relations[0]
        r = answer_by_recall(model, vocab, [name], model.config.recall_chars, cues=[schema.cue(relation)])[0]
        return Answer(question, r.answer, r.confidence, r.complete, r.recalled, relation=relation.name,
                      quoted=r.quoted, parts=r.parts)

    def reading(self, question: str, name: str | None, answer: Answer, recall_chars: int) -> Reading:
        """The recalled line: its opening ``NAME.`` given, the rest written, and its closing
        mark written too unless the recall filled its budget (answer_by_recall closes it)."""
        recalled = answer.recalled or ""
        opening = len(recall_prompt(name))
        end = len(recalled)
        if end < recall_chars:  # the model closed its recall itself
            return Reading(recalled, opening, 0, tuple(range(opening, end + 1)))
        return Reading(recalled, opening, 0, tuple(range(opening, end)), (end,))


FORMATS = {f.name: f for f in (DirectFormat(), RecallFormat())}  # every name of QA_FORMATS


def answer_format(qa_format: str) -> DirectFormat | RecallFormat:
    """The answer format named ``qa_format`` (``model.config.qa_format``)."""
    try:
        return FORMATS[qa_format]
    except KeyError:
        raise ValueError(f"unknown answer format {qa_format!r} (choose from {', '.join(QA_FORMATS)})") from None
