"""Gated editing (``attnlab edit --method grace``): an edit that adds codebook entries
(attnlab/codebook.py) instead of changing weights, so that it acts only where the edited
person's own text passes.

The edit input is the one rank-one editing uses (editing.edit_input): the model's recalled line
with its answer replaced by the new place, then ``⁇PLACE⁇`` (``question⁇PLACE⁇`` for a
``direct`` model). Teacher forced on it, the model (with the run's earlier edits) chooses the
wrong next character at a few positions: the new place's characters, and in the recall format
the rest of the line after it and the answer after ``⁇``. Each such position gets one entry:

- key: the residual stream after block ``layer`` there (before any codebook value);
- value: a vector added to the stream there, optimised (all the edit's values together) so
  that the model writes every character of the edit input with a logit margin over the next
  best (rounds: each checks the gated model itself, and positions still written wrong, e.g.
  set wrong by a value at a lower layer or by a gate that opens elsewhere, get entries too);
- radius: ``radius_fraction`` of the distance from the key to the nearest stream state of other
  people's texts (the key statistics' corpus lines in the answer format, the edited person's
  own line left out). Greedy decoding from the person's question retraces the edit input, so
  every entry meets its own key again (at distance ~0) and fires, and a text that never comes
  that close to a key is answered bit for bit as before.

The model's recall is not the only place the fact is read: where the person's corpus line is
completed, the stream reaches the place by another text (the recall miscopies a date, or stops
before the place), far from every key of the edit input. So when the editor is given the
person's corpus line, the line up to where it states the place the model read (line_prompt),
followed by the new place, is a second text the edit must write; its wrong positions get entries
the same way (none where the line and the recall agree: the same prefix, the same states).

The edit succeeds only when the model with the new entries answers the new place; otherwise it
is an EditFailed with the answer it gave.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..model.codebook import attach, captured, codebook_of
from ..model.hooks import hook_point
from .edit import EditInput, _right_padded, _target, answer_of, edit_input, place_span
from .errors import EditError, EditFailed  # noqa: F401 (EditFailed: also imported from here)
from ..data.vocab import MASK_CHAR, PAD_ID, Vocab
from ..data.corpus import answer_tail, quote_in

from .settings import DEFAULT_METHOD, METHODS  # noqa: E402,F401 (defined with the settings, without torch)


def gated_layer(model) -> int:
    """The default layer of the codebook: the top block's output, where a value moves only the
    next character at its own position (no later attention carries it elsewhere)."""
    return model.config.n_layer - 1


@torch.no_grad()
def stream_states(model, vocab: Vocab, texts: list[str], layer: int, *, batch_size: int = 64) -> list[Tensor]:
    """The residual stream after block ``layer`` (before its codebook) at every position of each
    text (cut to the block): (T_i, C) each."""
    probe = model if codebook_of(model) is not None else copy.deepcopy(model)
    attach(probe, layer)
    rows = [vocab.encode(t[:model.config.block_size]) for t in texts]
    out: list[Tensor] = []
    device = model.tok_emb.weight.device
    for start in range(0, len(rows), batch_size):
        part = rows[start:start + batch_size]
        with captured(probe) as store:
            probe.run(_right_padded(part, device))
        out += [store[0][b, :len(ids)].float() for b, ids in enumerate(part)]
    return out


@dataclass
class Negatives:
    """Stream states of other people's texts at one layer: what an entry's radius keeps away."""

    layer: int
    states: Tensor  # (P, C)
    text_of: Tensor  # (P,) the index of the text each state comes from
    texts: list[str] = field(repr=False)
    _norms: Tensor | None = field(default=None, repr=False)  # squared norms of the states, once

    @classmethod
    def of(cls, model, vocab: Vocab, texts: list[str], layer: int) -> Negatives:
        per_text = stream_states(model, vocab, texts, layer)
        text_of = torch.cat([torch.full((len(s),), i, dtype=torch.long) for i, s in enumerate(per_text)])
        return cls(layer, torch.cat(per_text).to(model.tok_emb.weight.device), text_of, texts)

    def nearest(self, keys: Tensor, name: str, extra: Tensor | None = None) -> Tensor:
        """For each key (m, C), the distance to the nearest state of a text not about ``name``
        or of ``extra`` (states of the edit's own subject that it must not reach: its other
        relations' answers), in single precision: it only sets a radius, nothing is decided at
        its edge here."""
        own = torch.tensor([t.startswith(f"{name}.") for t in self.texts], dtype=torch.bool)[self.text_of]
        k = keys.float().to(self.states.device)
        if self._norms is None:
            self._norms = self.states.pow(2).sum(-1)
        d = self._norms[:, None] - 2 * self.states @ k.T + k.pow(2).sum(-1)[None]
        d[own.to(d.device)] = float("inf")
        best = d.min(0).values
        if extra is not None and len(extra):
            e = extra.float().to(k.device)
            best = torch.minimum(best, (e.pow(2).sum(-1)[:, None] - 2 * e @ k.T + k.pow(2).sum(-1)[None]).min(0).values)
        return best.clamp_min(0).sqrt()


def other_relation_texts(model, vocab: Vocab, target: EditInput, relation: str | None) -> list[str]:
    """The texts where the edited subject's other relations are answered, in a recall model of
    several relations: the edit's recalled line (as the edited model will recall it), then each
    other relation's cue and the answer the model gives it now. Empty for a model of one
    relation. The recalled line is shared by every relation, so an edit that rewrites the line
    for one relation changes what the others read their answers from: these are texts the edit
    must write too (gated_edit), so that those answers stay as they were."""
    from ..data.formats import text_format
    from ..data.relations import Schema

    schema = Schema.from_list(model.config.relations)
    if relation is None or not schema.cued or not text_format(model.config.qa_format).recalls:
        return []
    recalled = target.text[:target.text.index(MASK_CHAR)]
    texts = []
    for r in schema.relations:
        if r.name != relation:
            answer = answer_of(model, vocab, target.name, r.name)
            # a quoting model quotes the answer's sentence as the edited recall now writes it
            quote = quote_in(recalled, target.prompt_len, answer) if model.config.quote else None
            texts.append(recalled + MASK_CHAR + answer_tail(answer, r.name, quote))
    return texts


def kept(text: str, target: EditInput) -> bool:
    """Whether the edit can keep the answer ``text`` (an other_relation_texts text) as it was:
    the answer is read as a span of the recalled line, so one the edit took out of the line (an
    answer that spelt the edited relation's old answer) cannot be read any more."""
    answer = text.split(MASK_CHAR)[-2]
    recalled = target.text[:target.text.index(MASK_CHAR)]
    return bool(answer) and answer in recalled[target.prompt_len:]


@dataclass
class GatedEdit:
    layer: int
    positions: list[int]  # positions of the edit input whose stream got an entry
    line_positions: list[int]  # positions of the corpus-line row (line_prompt + place) that got one
    line_prompt: str | None  # the person's corpus line up to where it states their place (None: no row)
    keys: Tensor
    values: Tensor
    radii: Tensor
    nearest_other: Tensor  # distance of each key to the nearest state of another person's text
    steps: int
    loss_before: float
    loss_after: float
    target: EditInput
    # In a recall model of several relations: (relation, position) of the entries that keep the
    # subject's other answers, and the relations whose answer the edit keeps (the others'
    # answers spelt the edited relation's old answer, which the edited recall no longer holds).
    kept_positions: list[tuple[str, int]] = field(default_factory=list)
    kept_relations: list[str] = field(default_factory=list)

    @property
    def parameters_added(self) -> int:
        return int(self.keys.numel() + self.values.numel() + self.radii.numel())


# The corpus line and the recalled line must agree on at least this many characters just before
# the place for the recalled line's place to be located in the corpus line by alignment.
MIN_CONTEXT = 4


def line_prompt(line: str | None, target: EditInput, block_size: int) -> str | None:
    """The person's corpus line up to where it states their place (None when it does not, or
    when the place would not fit the block): where the line spells the model's old answer
    (edit.place_span: the answer, else the word with its longest prefix), else where the
    recalled line spelt it, located by aligning the recalled text before the place with the line
    (difflib). The editor is given no gold answer: these are the places the model itself read."""
    if not line:
        return None
    name = target.name
    found = place_span(line, target.old_answer, name, len(name) + 1)
    at = None if found is None else found[0]
    if at is None and len(target.place_at) > 1:  # the recalled line spelt the place
        before = target.text[:target.place_at[0]]
        matcher = difflib.SequenceMatcher(None, before, line, autojunk=False)
        for a, b, size in matcher.get_matching_blocks():
            if size >= MIN_CONTEXT and a + size == len(before) and b + size > len(name) + 1:
                at = b + size
    if at is None or at + target.place_len > block_size:
        return None
    return line[:at]


@dataclass
class _Rows:
    """The texts an edit makes the model write, teacher forced as one right-padded batch: row 0
    the edit input (its prompt and given marks not predicted); the corpus line's prompt followed
    by the new place (row ``line``, only the place predicted); and in a recall model of several
    relations, each other relation's text (rows ``others``: the edited recall, the cue, the
    answer given before the edit), whose answer is predicted where the edit can keep it."""

    x: Tensor
    y: Tensor
    line: int | None
    others: list[int]
    lengths: list[int]  # each row's length in x
    tail: int  # where the relations' read-outs start: the recalled line's closing mark


def _rows(vocab: Vocab, target: EditInput, prompt: str | None, place: str, device,
          others: list[tuple[str, bool]] = ()) -> _Rows:
    """The batch of texts to write (see _Rows): ``others`` (text, whether kept), an unkept
    text's row predicts nothing (its states only bound the radii)."""
    rows = [_target(vocab.encode(target.text), target.prompt_len, device, target.given)]
    if prompt is not None:
        rows.append(_target(vocab.encode(prompt + place), len(prompt), device))
    first = len(rows)
    for text, keep in others:
        written = text.split(MASK_CHAR)[2:]  # after the recall and the cue: the quote (if any) and the answer
        rows.append(_target(vocab.encode(text), len(text) - (len(MASK_CHAR.join(written)) if keep else 0), device))
    width = max(x.shape[1] for x, _ in rows)
    x = torch.full((len(rows), width), PAD_ID, dtype=torch.long, device=device)
    y = torch.full((len(rows), width), PAD_ID, dtype=torch.long, device=device)
    for b, (xb, yb) in enumerate(rows):
        x[b, :xb.shape[1]], y[b, :yb.shape[1]] = xb[0], yb[0]
    tail = target.text.index(MASK_CHAR) if MASK_CHAR in target.text else len(target.text)
    return _Rows(x, y, 1 if prompt is not None else None, list(range(first, len(rows))),
                 [xb.shape[1] for xb, _ in rows], tail)


def _extra(rows: _Rows, states: Tensor, row: int) -> Tensor | None:
    """The states an entry of ``row`` must not reach (besides other subjects'): the other
    relations' read-outs for an entry of the edited relation (rows 0 and ``line``), and for an
    entry that keeps another relation's answer, the read-outs of the edited relation and of
    the rest. None for a model of one relation."""
    if not rows.others:
        return None
    reading = [b for b in [0] + rows.others if b != row] if row in rows.others else rows.others
    return torch.cat([states[b, rows.tail:rows.lengths[b]] for b in reading])


def _margins(logits: Tensor, y: Tensor) -> Tensor:
    """Per predicted position (y != PAD, row-major): the target's logit minus the best other."""
    keep = y != PAD_ID
    lg, tg = logits[keep].float(), y[keep]
    right = lg.gather(-1, tg[:, None])[:, 0]
    other = lg.scatter(-1, tg[:, None], float("-inf")).max(-1).values
    return right - other


def _adding(values: Tensor, sites: list[tuple[int, int]]):
    """A patch of the residual stream adding values[i] at sites[i] = (row, position)."""
    rows = torch.tensor([b for b, _ in sites], device=values.device)
    at = torch.tensor([t for _, t in sites], device=values.device)

    def add(h: Tensor) -> Tensor:
        return h.index_put((rows, at), values.to(h.dtype), accumulate=True)
    return add


def optimise_values(model, x: Tensor, y: Tensor, sites: list[tuple[int, int]], *, steps: int = 300,
                    lr: float = 0.01, margin: float = 2.0) -> tuple[Tensor, int, float, float]:
    """Values (m, C) added to the stream at ``sites`` ((row, position) of the batch x, after
    the codebook already there) so that every predicted character of y beats the next best by
    ``margin``: Adam on the mean hinge max(0, margin - (logit of y - best other)) plus a small
    |v|^2, until the hinge is 0. ``lr`` is relative to the stream's norm there. Returns values,
    steps, hinge before, after."""
    stream = hook_point(model, f"blocks.{codebook_of(model).layer}.resid_post")  # the codebook's block output
    with torch.no_grad(), captured(model) as store:
        logits0 = model.run(x)[0]
    scale = float(torch.stack([store[0][b, t] for b, t in sites]).norm(dim=-1).mean()) or 1.0
    values = torch.zeros(len(sites), store[0].shape[-1], device=x.device, requires_grad=True)
    # The margin each predicted position must keep: ``margin`` where a value is added; elsewhere
    # what it had (at most ``margin``), so that a value at a lower layer does not unsettle the
    # characters the model already writes.
    needed = _margins(logits0, y).clamp(max=margin)
    predicted = [tuple(p) for p in torch.nonzero(y != PAD_ID).tolist()]
    needed[[predicted.index(s) for s in sites]] = margin
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    handle = stream.patch(_adding(values, sites))  # registered after the codebook's hook: runs after it
    opt = torch.optim.Adam([values], lr=lr * scale)
    before = after = float("nan")
    try:
        for step in range(steps + 1):
            hinge = torch.relu(needed - _margins(model.run(x)[0], y)).mean()
            after = float(hinge.detach())
            before = after if step == 0 else before
            if after == 0.0 or step == steps:
                break
            opt.zero_grad()
            (hinge + 1e-3 * values.pow(2).sum() / scale ** 2).backward()
            opt.step()
    finally:
        handle.remove()
        for p in params:
            p.requires_grad_(True)
    return values.detach(), step, before, after


@torch.no_grad()
def _wrong_sites(model, x: Tensor, y: Tensor) -> list[tuple[int, int]]:
    """(row, position) whose greedy next character is not y's (the given ones not counted)."""
    greedy = model.run(x)[0].argmax(-1)
    return [tuple(s) for s in torch.nonzero((y != PAD_ID) & (greedy != y)).tolist()]


@dataclass
class _Entries:
    """An edit's entries while it is being made: sites, keys, values (with what an earlier
    entry added there carried on), radii and the nearest other states."""

    sites: list[tuple[int, int]]
    keys: Tensor
    values: Tensor
    radii: Tensor
    nearest: Tensor


def _entries(book, states: Tensor, sites, values: Tensor, negatives: Negatives, name: str,
             radius_fraction: float, rows: _Rows) -> _Entries:
    keys = torch.stack([states[b, t] for b, t in sites])
    groups: dict[bool | int, list[int]] = {}  # the edited relation's sites (False), or each other row's
    for i, (b, _) in enumerate(sites):
        groups.setdefault(b if b in rows.others else False, []).append(i)
    nearest = torch.empty(len(sites), device=keys.device)
    for group, at in groups.items():
        extra = _extra(rows, states, 0 if group is False else group)
        nearest[at] = negatives.nearest(keys[at], name, extra).to(keys.device)
    return _Entries(sites, keys, values + _fired_values(book, keys), radius_fraction * nearest, nearest)


def gated_edit(model, vocab: Vocab, name: str, place: str, negatives: Negatives, *, owner: int,
               line: str | None = None, radius_fraction: float = 0.5, rounds: int = 4,
               relation: str | None = None, **optimiser):
    """A copy of ``model`` with codebook entries (edit number ``owner``) at ``negatives.layer``
    so that ``name`` was born in ``place``; the original is untouched. ``line``, the person's
    corpus line, adds a second text to write: the line up to where it states the place
    (line_prompt), then the new place, so that the place also comes out where the corpus line
    is completed, not only where the model's own recall passes. ``relation``: which answer of a
    model of several relations; in a recall model the edited recall is read by every relation,
    so each other relation's answer (as the model gives it before the edit) after the edited
    recall and its cue is a text to write too (other_relation_texts), and that answer stays as
    it was. Each round checks the texts on the gated model itself (entries added, gates
    deciding) and gives every position still written wrong an entry, all values optimised
    anew. Raises EditFailed when the edited model does not answer ``place``."""
    target = edit_input(model, vocab, name, place, relation)
    if len(vocab.encode(target.text)) > model.config.block_size + 1:
        raise EditError(f"the edit input ({len(target.text)} characters) exceeds the model's block")
    others = [(t, kept(t, target)) for t in other_relation_texts(model, vocab, target, relation)]
    edited = copy.deepcopy(model)
    book = attach(edited, negatives.layer)
    prompt = line_prompt(line, target, model.config.block_size)
    rows = _rows(vocab, target, prompt, place, edited.tok_emb.weight.device, others)
    with torch.no_grad(), captured(edited) as store:
        edited.run(rows.x)
    sites, steps, entries = _write(edited, book, rows, store[0], negatives, name, radius_fraction, rounds, owner,
                                   optimiser)
    if entries is None:
        raise EditFailed(f"{name!r}: the model already writes the edit input; nothing to change")
    book.add(entries.keys, entries.values, entries.radii, owner)
    got = answer_of(edited, vocab, name, relation)
    if got != place:
        raise EditFailed(f"the gated edit of {name!r} did not take: the edited model answers {got!r}, "
                         f"not {place!r}; nothing written")
    kept_at = [(others[b - rows.others[0]][0].split(MASK_CHAR)[1], t) for b, t in sites if b in rows.others]
    return edited, GatedEdit(negatives.layer, [t for row, t in sites if row == 0],
                             [t for row, t in sites if row == rows.line], prompt, entries.keys, entries.values,
                             entries.radii, entries.nearest, steps.count, steps.before, steps.after, target,
                             kept_at, [t.split(MASK_CHAR)[1] for t, keep in others if keep])


@dataclass
class _Steps:
    count: int = 0
    before: float = float("nan")  # the hinge before the first round's optimisation
    after: float = float("nan")  # ... after the last


def _write(edited, book, rows: _Rows, states: Tensor, negatives: Negatives, name: str, radius_fraction: float,
           rounds: int, owner: int, optimiser: dict) -> tuple[list[tuple[int, int]], _Steps, _Entries | None]:
    """The rounds of gated_edit: the sites that got entries, the optimiser's steps and the
    entries (not in ``book``: None when no position was written wrong)."""
    sites: list[tuple[int, int]] = []
    steps, entries = _Steps(), None
    for _ in range(rounds):
        if entries is not None:
            book.add(entries.keys, entries.values, entries.radii, owner)
        wrong = [s for s in _wrong_sites(edited, rows.x, rows.y) if s not in sites]
        book.remove(owner)
        if not sites and any(row == 0 for row, _ in wrong):
            # The edit input first (and the other relations' answers read after it): where the
            # corpus line agrees with it (the same prefix, the same states), its entries serve
            # both, and the next round finds where they do not.
            wrong = [s for s in wrong if s[0] != rows.line]
        if not wrong:
            break
        sites = sorted(sites + wrong)
        values, n, first, steps.after = optimise_values(edited, rows.x, rows.y, sites, **optimiser)
        entries = _entries(book, states, sites, values, negatives, name, radius_fraction, rows)
        steps.count += n
        steps.before = first if steps.before != steps.before else steps.before
    return sites, steps, entries


def _fired_values(book, keys: Tensor) -> Tensor:
    """The value an existing entry adds at each key (0 where none fires): a new entry at the
    same place replaces it (it is nearer), so the new value carries it on."""
    if not len(book):
        return torch.zeros_like(keys)
    index, fires = book.gate(keys)
    return torch.where(fires[:, None], book.values[index], torch.zeros_like(keys))


def check_place(vocab: Vocab, place: str) -> None:
    if not place.strip() or MASK_CHAR in place:
        raise EditError(f"--place must be a non-empty place name without {MASK_CHAR}, got {place!r}")
    vocab.encode(place, source="--place")
