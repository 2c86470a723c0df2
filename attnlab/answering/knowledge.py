"""Closed-book knowledge: who is asked about, what the corpus says of them, what the model
stored, and the recall answer format.

Two answer formats (``ModelConfig.qa_format``):

- ``direct`` (SPEC 2 and 6): the model reads ``question⁇`` and writes ``place⁇``.
- ``recall``: the model first writes what it remembers of the person, starting from the
  corpus's own opening ``NAME.`` and running for at most ``recall_chars`` characters (or until
  it writes ``⁇``), then ``⁇``, then the place and ``⁇``. Training strings are the corpus line
  cut at ``recall_chars`` characters, ``⁇``, and for training-file people their place and
  ``⁇``. The model never sees the corpus at answer time: the recalled text comes from its
  weights, and the place is read from that text.

Why recall: a small model memorises biography lines as strings keyed by the text before each
place, not by the person's name, so a direct question cannot reach the stored place
(Allen-Zhu and Li 2023, "Physics of Language Models: Part 3.1", call this stored but not
extractable). Completing the person's own line from the name is the one query such storage
answers; reading a place out of a line is a skill that transfers from training people to
everyone else. docs/guides/knowledge.md explains the recipe; docs/notebook.md has the measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..data.corpus import (CorpusIndex, alike_at, contains_words, person_of, place_in_line, recall_prompt,  # noqa: F401
                           recall_string, require_person, word_spans, words_of)
from ..data.datasets import QAExample
from ..data.relations import Schema
from ..model.attention import KVCache, masks
from ..model.generate import Draft, Generation, generate, left_padded
from ..model.positions import left_padded_positions
from ..model.gpt import GPT, evaluating
from ..data.vocab import MASK_ID, PAD_ID, Vocab

from ..data.formats import QA_FORMATS  # noqa: E402,F401 (defined once, with the formats)


@dataclass(frozen=True)
class RecallAnswer:
    answer: str
    confidence: float  # see answer_by_recall
    complete: bool  # the answer was closed by ⁇ within the budget
    recalled: str  # what the model wrote about the person before answering
    quoted: str | None = None  # a quoting model: the sentence it quoted before the answer
    # The confidence's parts, as log-probabilities: the answer read out (closing mark included),
    # the quote before it, and the answer's characters as the recall wrote them.
    parts: tuple[float, float, float] | None = None


READ_OUTS = ("span", "copy", "free")
# First characters whose spans the "span" read-out scores: the likeliest few at the answer's
# first position. Scoring every span of a recalled document costs a forward pass over each; the
# spans opening with unlikely characters almost never win, and leaving them out keeps an answer
# a few times the cost of a greedy read rather than dozens.
SPAN_OPENINGS = 4
MAX_ANSWER_CHARS = 32  # the longest place read out, by every answerer (evaluate.MAX_NEW_CHARS too)
# A relation's training answers (ModelConfig.answer_values) join the spans the "span" read-out
# scores where the recalled text writes them in other letters (data/corpus.py ``alike``), which no
# span spells. Only such look-alikes join: a value the text does not echo lets what the model
# remembers outvote what it copies, and one pieced together from words of different places
# ("marsh beetles" from "marsh snails" and "water beetles") is another value.
LOOKUP = 3  # letters that open both of two alike words (the index's key)


@torch.no_grad()
def answer_by_recall(model: GPT, vocab: Vocab, names: list[str], recall_chars: int, *,
                     batch_size: int = 256, max_answer_chars: int | None = None,
                     read_out: str = "span", cues: list[str | None] | None = None,
                     draft: Draft | None = None) -> list[RecallAnswer]:
    """Recall each subject's line from ``NAME.`` (greedy), then read the answer (greedy).

    ``read_out="span"`` (the default) answers the run of whole words of the recalled text (after
    the prompt) that the model finds most likely as the answer, closing mark included, among
    the spans that open with one of the model's ``SPAN_OPENINGS`` likeliest first characters.
    ``"copy"`` builds a span greedily instead: at each character the model's most likely choice
    among those that continue some span, or the closing mark; a good first character can then
    lead into the wrong span ("T" for "Tarr" read on into "The"), which scoring whole spans
    avoids. A small character model chooses the right span far more often than it spells it
    out: free reading garbles copies ("Paris" -> "Pars"; docs/guides/knowledge.md). ``"free"``
    is the unconstrained greedy read-out. A row that recalled nothing reads freely. A model
    whose config lists its relations' training answers (``answer_values``) reads those that look
    like words of the recalled text (``AnswerValues``) as whole spans too, under "span".
    ``cues`` (one per name, a fact set of several relations) name the relation to read; a
    subject asked about several relations is recalled once. ``draft`` (answering/drafts.py)
    guesses the recall's next characters so that it is decoded several a step; the recall is
    the model's greedy text either way.

    Confidence is the probability of the answer and its closing mark given the recalled text,
    times, when the answer is spelled out in the recalled text, the probability the model gave
    those characters while recalling: an answer read from a confidently remembered line is
    surer than one read from a line the model was unsure of. A model that quotes
    (``quote``) first writes the sentence of its recall that states the answer, as whole words
    of the recalled text (or nothing), greedily; the answer is read after it and the quote's
    probability joins its confidence."""
    budget = max_answer_chars or model.config.answer_chars
    cues = cues if cues is not None else [None] * len(names)
    unique = list(dict.fromkeys(names))
    recalls: dict[str, Recalled] = {}
    for start in range(0, len(unique), batch_size):
        part = unique[start:start + batch_size]
        recalls.update(zip(part, _recall_batch(model, vocab, part, recall_chars, draft)))
    out: list[RecallAnswer] = []
    known = AnswerValues(model.config, vocab)
    for start in range(0, len(names), batch_size):
        rows = [recalls[n] for n in names[start:start + batch_size]]
        out += _read_places(model, vocab, [r.text for r in rows], [r.prompt_len for r in rows],
                            [r.logps for r in rows], budget, read_out, cues[start:start + batch_size],
                            [r.kept for r in rows], known)
    return out


@dataclass(frozen=True)
class Recalled:
    """A subject's recall: its ids (prompt first), the prompt's length, the log-probabilities of
    the recalled characters, and the keys and values the recall computed for its first ids
    (``generate``'s kept cache; None where decoding kept none)."""

    text: list[int]
    prompt_len: int
    logps: list[float]
    kept: list[tuple[torch.Tensor, torch.Tensor]] | None = None


def _recall_batch(model, vocab, names, recall_chars, draft=None) -> list[Recalled]:
    """Each name's recall (``Recalled``)."""
    prompts = [vocab.encode(recall_prompt(n)) for n in names]
    budget = max(1, recall_chars - min(len(p) for p in prompts))
    first = generate(model, prompts, budget, stop_token=MASK_ID, draft=draft, keep_cache=draft is not None)
    out = []
    for b, (prompt, new, logps) in enumerate(zip(prompts, first.tokens, first.logprobs)):
        text = (prompt + new)[:recall_chars]
        if MASK_ID in text:
            text = text[: text.index(MASK_ID)]
        out.append(Recalled(text, len(prompt), logps[:max(0, len(text) - len(prompt))],
                            first.kept[b] if first.kept else None))
    return out


def _read_places(model, vocab, texts, prompt_lens, recall_logps, max_answer_chars, read_out,
                 cues=None, kept=None, known: "AnswerValues | None" = None) -> list[RecallAnswer]:
    """The second step of a recall answer: ``⁇`` after each text, the relation's ``cue⁇`` if
    any, then the answer; ``kept``: the recall's keys and values of each text, where at hand;
    ``known``: the model's answer values, as the caller built them once."""
    cues = cues or [None] * len(texts)
    seconds = [text + [MASK_ID] + (vocab.encode(cue) + [MASK_ID] if cue else []) for text, cue in zip(texts, cues)]
    sources = [text[n:] for text, n in zip(texts, prompt_lens)]
    quotes: list[tuple[list[int], list[float]] | None] = [None] * len(texts)
    if model.config.quote:
        quotes = _quotes(model, seconds, sources, vocab, model.config.recall_chars)
        seconds = [s + q for s, (q, _) in zip(seconds, quotes)]
    if read_out == "span":
        known = known or AnswerValues(model.config, vocab)
        values = [known.like(vocab.decode(src), cue) for src, cue in zip(sources, cues)]
        second = read_best_spans(model, vocab, seconds, sources, max_answer_chars, kept=kept, values=values)
    else:
        spans = SpanConstraint(sources, vocab) if read_out == "copy" else None
        second = generate(model, seconds, max_answer_chars + 1, stop_token=MASK_ID, allowed_next=spans)
    answers = []
    for text, prompt_len, logps_recall, toks, logps, quote in zip(texts, prompt_lens, recall_logps,
                                                                  second.tokens, second.logprobs, quotes):
        recalled = vocab.decode(text)
        complete = bool(toks) and toks[-1] == MASK_ID
        answer = vocab.decode(toks[:-1] if complete else toks)
        read, quoting, recalling = sum(logps), (sum(quote[1]) if quote else 0.0), 0.0
        at = recalled.find(answer, prompt_len) if answer else -1
        if at >= 0 and logps_recall:  # the characters of the answer as the model recalled them
            recalling = sum(logps_recall[at - prompt_len: at - prompt_len + len(answer)])
        quoted = vocab.decode(quote[0][:-1]) if quote else None
        confidence = math.exp(read + quoting + recalling) if complete else 0.0
        answers.append(RecallAnswer(answer, confidence, complete, recalled, quoted, (read, quoting, recalling)))
    return answers


def _quotes(model, contexts, sources, vocab, max_chars) -> list[tuple[list[int], list[float]]]:
    """Each context's quote: the sentence a quoting model writes before the answer (whole words
    of its source, or none), greedily, with its closing mark and the log-probability of each
    character."""
    # a quote never takes the room the answer needs in the block: the constraint closes it where
    # that starts, so every quote ends with its mark
    room = [max(0, min(max_chars, model.config.block_size - len(c) - model.config.answer_chars - 2))
            for c in contexts]
    read = generate(model, contexts, max(room) + 1, stop_token=MASK_ID,
                    allowed_next=SpanConstraint(sources, vocab, may_be_empty=True, longest=room))
    return [(list(toks), list(logps)) for toks, logps in zip(read.tokens, read.logprobs)]


@torch.no_grad()
def read_out_given_lines(model: GPT, vocab: Vocab, index: CorpusIndex, examples: list[QAExample], *,
                         batch_size: int = 256, read_out: str = "span") -> list[RecallAnswer]:
    """Open-book read-out: each person's own corpus line (cut at ``recall_chars``) stands in
    for the recall, and the model reads the place from it. Separates reading from
    remembering: on people the model never pretrained on it measures the read-out skill alone
    (a recipe choice made on held-out training people, never on dev)."""
    R = model.config.recall_chars
    schema = Schema.from_list(model.config.relations)
    texts, prompt_lens, cues = [], [], []
    for ex in examples:
        asked = schema.require(ex)
        name = asked.subject
        cues.append(schema.cue(asked.relation))
        line = index.line_of(name)
        if line is None:
            raise ValueError(f"{ex.source}:{ex.line}: no corpus line opens with {name + '.'!r}")
        texts.append(vocab.encode(line[:R]))
        prompt_lens.append(len(recall_prompt(name)))
    out: list[RecallAnswer] = []
    known = AnswerValues(model.config, vocab)
    for start in range(0, len(texts), batch_size):
        part = slice(start, start + batch_size)
        out += _read_places(model, vocab, texts[part], prompt_lens[part], [[] for _ in texts[part]],
                            model.config.answer_chars, read_out, cues[part], known=known)
    return out


@torch.no_grad()
def read_best_spans(model: GPT, vocab: Vocab, contexts: list[list[int]], sources: list[list[int]],
                    max_answer_chars: int, *, openings: int = SPAN_OPENINGS, rows_per_pass: int = 8,
                    kept: list[list[tuple[torch.Tensor, torch.Tensor]] | None] | None = None,
                    values: list[list[list[int]]] | None = None) -> Generation:
    """The ``"span"`` read-out: for each context (the recalled text, ``⁇`` and the relation's
    cue), the whole-word span of its ``source`` (what was recalled after the prompt) that the
    model finds most likely as the answer: the span's characters and the closing mark, scored
    together. Returned as ``generate`` returns a read (the span and ``⁇``, with the model's
    log-probability of each); a row whose source has no word is read freely.

    ``rows_per_pass`` contexts at a time go through the model once, keeping their keys and
    values: the last position gives the answer's first character (which chooses the spans to
    score), and the spans are then scored against the kept context, never computing it again.
    ``kept`` (per context, per layer, the keys and values of its first positions, as
    ``generate(keep_cache=True)`` returns them) spares computing those as well. ``values`` (per
    context, answers as ids) are scored beside the spans, each whole only (never a prefix)."""
    chooser = WholeWords(vocab)
    tokens: list[list[int] | None] = [None] * len(contexts)
    logprobs: list[list[float] | None] = [None] * len(contexts)
    for start in range(0, len(contexts), rows_per_pass):
        part = list(range(start, min(start + rows_per_pass, len(contexts))))
        read = _KeptContexts(model, [contexts[r] for r in part], [kept[r] for r in part] if kept else None)
        room = [min(max_answer_chars, model.config.block_size - len(contexts[r])) for r in part]
        runs = [chooser.candidates(sources[r], room[i], read.first[i], openings)
                + [WholeRun(v) for v in (values[r] if values else []) if 0 < len(v) <= room[i]]
                for i, r in enumerate(part)]
        for r, best in zip(part, _likeliest_spans(read, runs, chooser)):
            if best is not None:
                tokens[r], logprobs[r] = best[0] + [MASK_ID], best[1]
    free = [r for r, t in enumerate(tokens) if t is None]
    if free:
        read = generate(model, [contexts[r] for r in free], max_answer_chars + 1, stop_token=MASK_ID)
        for r, t, lp in zip(free, read.tokens, read.logprobs):
            tokens[r], logprobs[r] = t, lp
    return Generation(tokens, logprobs)


def _likeliest_spans(read: "_KeptContexts", runs: list[list[list[int]]], chooser: "WholeWords"
                     ) -> list[tuple[list[int], list[float]] | None]:
    """Each row's likeliest span of its ``runs``, scoring as few runs as the answer allows: the
    runs that open with the row's likeliest opening first, then only those whose first
    character alone is likelier than the best span found (a span's log-probability is its first
    character's plus terms that are never positive, so no other run can beat it). The answer is
    the one scoring every run gives; most rows need the first pass only."""
    def score(first_runs: list[list[list[int]]]) -> list[tuple[list[int], list[float]] | None]:
        return read.best_spans(first_runs, chooser) if any(first_runs) else [None] * len(first_runs)

    top = [max((read.first[i][run[0]].item() for run in rows if run), default=-math.inf)
           for i, rows in enumerate(runs)]
    best = score([[run for run in rows if run and read.first[i][run[0]].item() == top[i]]
                  for i, rows in enumerate(runs)])
    bound = [sum(b[1]) if b is not None else -math.inf for b in best]
    later = score([[run for run in rows if run and top[i] > read.first[i][run[0]].item() > bound[i]]
                   for i, rows in enumerate(runs)])
    return [b if a is None or (b is not None and sum(b[1]) >= sum(a[1])) else a for b, a in zip(best, later)]


class _KeptContexts:
    """A few contexts run through the model once (left-padded), their keys and values kept:
    ``first`` (B, V) holds the log-probabilities of the character after each context."""

    def __init__(self, model: GPT, contexts: list[list[int]],
                 kept: list[list[tuple[torch.Tensor, torch.Tensor]] | None] | None = None):
        self.model, self.lengths = model, [len(c) for c in contexts]
        device = next(model.parameters()).device
        if kept is None or any(k is None for k in kept):
            kept = [[] for _ in contexts]
        # Each context's first positions whose keys and values are at hand (never its last: the
        # answer's first character is read there), then the rest fed; both left-padded.
        have = [min(k[0][0].shape[1] if k else 0, len(c) - 1) for k, c in zip(kept, contexts)]
        H = max(have)
        idx, fed = left_padded([c[n:] for c, n in zip(contexts, have)], device)
        held = torch.arange(H, device=device)[None, :] >= H - torch.tensor(have, device=device)[:, None]
        self.valid = torch.cat([held, fed], 1)
        self.positions = left_padded_positions(self.valid)
        self.caches = [KVCache() for _ in model.blocks]
        if H:
            for layer, cache in enumerate(self.caches):
                cache.k, cache.v = (_left_aligned([k[layer][i][:, :n] for k, n in zip(kept, have)], H)
                                    for i in (0, 1))
        with evaluating(model):
            logits, _ = model.run(idx, positions=self.positions[:, H:], allowed=masks.padded(self.valid, idx.shape[1]),
                                  caches=self.caches, key_positions=self.positions)
        self.first = logits[:, -1].float().log_softmax(-1).cpu()

    def best_spans(self, runs: list[list[list[int]]], chooser: "WholeWords"
                   ) -> list[tuple[list[int], list[float]] | None]:
        """Each context's likeliest whole-word prefix of its ``runs`` (None: no runs): every run
        follows its context in one pass, seeing the context and itself only, numbered on from
        the context as if it alone followed it."""
        device = self.valid.device
        B, C = self.valid.shape
        for cache in self.caches:  # the context's keys and values only, not an earlier call's runs
            cache.truncate(C)
        R = max(1, max(sum(len(run) for run in rows) for rows in runs))
        feed = torch.full((B, R), PAD_ID, dtype=torch.long)
        positions = torch.zeros(B, R, dtype=torch.long)
        allowed = torch.zeros(B, R, C + R, dtype=torch.bool)
        allowed[:, :, C:] = torch.eye(R, dtype=torch.bool)  # padding sees itself
        for b, rows in enumerate(runs):
            toks = [t for run in rows for t in run]
            if toks:
                n = len(toks)
                group = torch.tensor([k for k, run in enumerate(rows) for _ in run])
                at = torch.arange(n)
                feed[b, :n] = torch.tensor(toks)
                positions[b, :n] = self.lengths[b] + torch.tensor([j for run in rows for j in range(len(run))])
                allowed[b, :n, :C] = self.valid[b].cpu()
                allowed[b, :n, C:C + n] = (at[None, :] <= at[:, None]) & (group[None, :] == group[:, None])
        with evaluating(self.model):
            logits, _ = self.model.run(feed.to(device), positions=positions.to(device),
                                       allowed=allowed[:, None].to(device), caches=self.caches,
                                       key_positions=torch.cat([self.positions, positions.to(device)], 1))
        logp = logits.float().log_softmax(-1).cpu()
        # The first character's distribution, then the runs': as one row whose context ends at 0.
        return [_best_of_row(torch.cat([self.first[b:b + 1], logp[b]]), 1, rows, chooser) if rows else None
                for b, rows in enumerate(runs)]


def _left_aligned(parts: list[torch.Tensor], width: int) -> torch.Tensor:
    """(B, h, width, e) from each row's (h, n, e), right-aligned after zeros (masked out)."""
    like = next(p for p in parts if p.shape[1])
    out = like.new_zeros(len(parts), like.shape[0], width, like.shape[2])
    for b, p in enumerate(parts):
        if p.shape[1]:
            out[b, :, width - p.shape[1]:] = p
    return out


class WholeRun(list):
    """A candidate answer scored whole (an answer value), where a span's run is scored at every
    word end."""


class AnswerValues:
    """A model's training answers by relation (``ModelConfig.answer_values``), indexed by the
    first letters of their first word, so that each recall finds its look-alikes without reading
    them all."""

    def __init__(self, config, vocab: Vocab):
        self.vocab = vocab
        self.only = Schema.from_list(config.relations).relations[0].name  # the relation of an uncued read
        self.index: dict[str, dict[str, list[tuple[str, list[str]]]]] = {}
        self.known: dict[str, set[str]] = {}
        for name, answers in config.answer_values:
            by_opening = self.index.setdefault(name, {})
            self.known[name] = set(answers)
            for answer in answers:
                words = words_of(answer)
                if words and all(ch in vocab.stoi for ch in answer):
                    by_opening.setdefault(words[0][:LOOKUP], []).append((answer, words))

    def like(self, recalled: str, cue: str | None) -> list[list[int]]:
        """The answers of the cued relation (uncued: the only one) that ``recalled`` writes in
        other letters (data/corpus.py ``alike``), where the words that write them are no answer
        of the relation themselves ("Hymo" is not another spelling of "Hymen" where both are
        rivers) and the answer is not written as it is (it is a span already); as ids, in the
        order found."""
        relation = cue if cue is not None else self.only
        by_opening, known = self.index.get(relation, {}), self.known.get(relation, set())
        if not by_opening:  # a model without answer values (every preset) reads spans alone
            return []
        spans = word_spans(recalled)
        words = [recalled[a:b].casefold() for a, b in spans]
        found: dict[str, None] = {}
        for at, word in enumerate(words):
            for answer, needs in by_opening.get(word[:LOOKUP], ()):
                if (answer not in found and alike_at(words, at, needs)
                        and recalled[spans[at][0]:spans[at + len(needs) - 1][1]] not in known
                        and not contains_words(recalled, answer)):
                    found[answer] = None
        return [self.vocab.encode(answer) for answer in found]


class WholeWords:
    """Which runs of a source's characters are whole words: a span opens where a word starts
    and closes where a word ends."""

    def __init__(self, vocab: Vocab):
        self.in_word = [ch.isalnum() for ch in vocab.itos]

    def starts(self, source: list[int]) -> list[int]:
        return [s for s, t in enumerate(source) if self.in_word[t] and (s == 0 or not self.in_word[source[s - 1]])]

    def ends(self, source: list[int], end: int) -> bool:
        """A word ends just before ``end`` (exclusive)."""
        return self.in_word[source[end - 1]] and (end == len(source) or not self.in_word[source[end]])

    def last(self, source: list[int]) -> int:
        """The position of the source's last word character (-1: none): no span runs past it."""
        return max((i for i, t in enumerate(source) if self.in_word[t]), default=-1)

    def candidates(self, source: list[int], longest: int, first: torch.Tensor, openings: int) -> list[list[int]]:
        """The runs of ``source`` from each word start opening with one of the ``openings``
        likeliest characters (``first``: log-probabilities of the answer's first character), each
        up to ``longest`` characters and not past the last word: every span from a start is a
        prefix of its run, so one run scores them all."""
        last = self.last(source)
        starts = self.starts(source)
        if not starts or longest < 1:
            return []
        opening = sorted({source[s] for s in starts}, key=lambda t: -float(first[t]))[:openings]
        runs = [(s, source[s:min(s + longest, last + 1)]) for s in starts if source[s] in opening]
        return [run[:self._last_end(source, s, len(run))] for s, run in runs]

    def _last_end(self, source: list[int], start: int, length: int) -> int:
        """The longest prefix of the run from ``start`` that ends at a word's end."""
        for n in range(length, 0, -1):
            if self.ends(source, start + n):
                return n
        return 0


def _best_of_row(logp: torch.Tensor, C: int, runs: list[list[int]], chooser: WholeWords) -> tuple[list[int], list[float]]:
    """The likeliest whole-word prefix of any run (its characters' log-probabilities, then the
    closing mark's), from a row's (T, V) log-probabilities."""
    best: tuple[float, list[int], list[float]] = (-math.inf, [], [])
    at = C
    for run in runs:
        prev = [C - 1] + list(range(at, at + len(run) - 1))
        chars = logp[prev, run].tolist()
        closes = logp[at:at + len(run), MASK_ID].tolist()
        total = 0.0
        for n in range(1, len(run) + 1):
            total += chars[n - 1]
            closes_here = n == len(run) if isinstance(run, WholeRun) else chooser.ends(run, n)
            if closes_here and total + closes[n - 1] > best[0]:
                best = (total + closes[n - 1], run[:n], chars[:n] + [closes[n - 1]])
        at += len(run)
    return best[1], best[2]


class SpanConstraint:
    """Next-token masks that keep each row's answer a run of whole words of its source text:
    it starts where a word starts and may close with ``⁇`` only where a word ends. Called by
    ``generate`` with the tokens chosen so far.

    Each row keeps the start positions its answer so far still matches, so a call that extends
    the previous one by a token (as ``generate`` calls it) filters those instead of scanning the
    source again; any other call is answered from scratch, with the same result."""

    def __init__(self, sources: list[list[int]], vocab: Vocab, *, may_be_empty: bool = False,
                 longest: list[int] | None = None):
        self.sources = sources
        self.may_be_empty = may_be_empty  # the closing mark may come first (an empty quote)
        self.longest = longest  # per row, the characters after which only the closing mark may come
        self.vocab_size = len(vocab)
        self.words = WholeWords(vocab)
        # a span may not run past a source's last word character: from there no word ends,
        # so nothing could close it (it would run on through the source's trailing " .")
        self.last_word = [self.words.last(src) for src in sources]
        self._ends = [self._word_ends(src) for src in sources]  # _ends[row][e]: a word ends before e
        self._seen: list[tuple[list[int], list[int]]] = [([], self.occurrences(src, [])) for src in sources]

    def __call__(self, chosen: list[list[int]]) -> torch.Tensor:
        mask = torch.zeros(len(self.sources), self.vocab_size, dtype=torch.bool)
        rows, tokens = [], []
        for row, (source, so_far) in enumerate(zip(self.sources, chosen)):
            if self.longest is not None and len(so_far) >= self.longest[row]:
                mask[row, MASK_ID] = True  # its room is spent: closed, whole words or not
                continue
            starts = self._starts(row, so_far)
            if not starts and self.may_be_empty and not so_far:  # nothing to quote: close at once
                mask[row, MASK_ID] = True
                continue
            if not starts:  # nothing recalled to copy from: read freely
                mask[row] = True
                continue
            n = len(so_far)
            allowed = {source[s + n] for s in starts if s + n <= self.last_word[row]}
            if (n and any(self._ends[row][s + n] for s in starts)) or (not n and self.may_be_empty):
                allowed.add(MASK_ID)
            rows += [row] * len(allowed)
            tokens += allowed
        if rows:
            mask[rows, tokens] = True
        return mask

    def _starts(self, row: int, so_far: list[int]) -> list[int]:
        """occurrences(source, so_far), from the row's last answer when so_far extends it by one."""
        before, starts = self._seen[row]
        n = len(so_far)
        if n == len(before) + 1 and so_far[:-1] == before:
            source, token = self.sources[row], so_far[-1]
            starts = [s for s in starts if s + n <= len(source) and source[s + n - 1] == token]
        elif so_far != before:
            starts = self.occurrences(self.sources[row], so_far)
        self._seen[row] = (list(so_far), starts)
        return starts

    def _word_ends(self, source: list[int]) -> list[bool]:
        return [False] + [self.word_ends(source, end) for end in range(1, len(source) + 1)]

    def occurrences(self, source: list[int], so_far: list[int]) -> list[int]:
        """Word-start positions where ``source`` continues with ``so_far``."""
        n = len(so_far)
        return [s for s in self.words.starts(source) if s + n <= len(source) and source[s:s + n] == so_far]

    def word_ends(self, source: list[int], end: int) -> bool:
        return self.words.ends(source, end)


# ------------------------------------------------------------------------------- stored


@dataclass(frozen=True)
class Stored:
    """People whose gold place is written in their corpus line (``total``), and how many of
    them the model reproduces by greedy completion of the line up to the place (``stored``)."""

    stored: int
    total: int
    asked: int  # people asked about (total <= asked)

    def __str__(self) -> str:
        pct = 100.0 * self.stored / self.total if self.total else 0.0
        return f"{self.stored}/{self.total} ({pct:.1f}%)"


def stored_probes(index: CorpusIndex, examples: list[QAExample], block_size: int,
                  schema: Schema | None = None) -> list[tuple[str, str]]:
    """(line prefix up to the place, place) for each labelled person whose place appears in
    their corpus line and fits the model's block."""
    schema = schema or Schema()
    probes = []
    for ex in examples:
        asked = schema.parse(ex.question, bare_subject=False)
        name = asked.subject if asked else None
        line = index.line_of(name) if name else None
        if not line or not ex.answer:
            continue
        at = place_in_line(line, name, ex.answer)
        if at > 0 and at + len(ex.answer) <= block_size:
            probes.append((line[:at], ex.answer))
    return probes


@torch.no_grad()
def measure_stored(model: GPT, vocab: Vocab, index: CorpusIndex, examples: list[QAExample], *,
                   batch_size: int = 256) -> Stored:
    """How many facts the model stored: greedy completion of each person's own line prefix
    reproduces the place (the corpus-side counterpart of QA accuracy, "extracted")."""
    probes = stored_probes(index, examples, model.config.block_size, Schema.from_list(model.config.relations))
    hits = 0
    for start in range(0, len(probes), batch_size):
        part = probes[start:start + batch_size]
        prompts = [vocab.encode(prefix) for prefix, _ in part]
        longest = max(len(place) for _, place in part)
        gen = generate(model, prompts, longest)
        hits += sum(vocab.decode(toks).startswith(place) for toks, (_, place) in zip(gen.tokens, part))
    return Stored(hits, len(probes), len(examples))
