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
  best (rounds: positions that a value at a lower layer sets wrong get entries too);
- radius: ``radius_fraction`` of the distance from the key to the nearest stream state of other
  people's texts (the key statistics' corpus lines in the answer format, the edited person's
  own line left out). Greedy decoding from the person's question retraces the edit input, so
  every entry meets its own key again (at distance ~0) and fires, and a text that never comes
  that close to a key is answered bit for bit as before.

The edit succeeds only when the model with the new entries answers the new place; otherwise it
is an EditFailed with the answer it gave.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..model.codebook import attach, captured, codebook_of
from .edit import EditInput, _right_padded, _target, answer_of, edit_input
from .trace import TraceError
from ..data.vocab import MASK_CHAR, PAD_ID, Vocab

METHODS = ("grace", "rome")
DEFAULT_METHOD = "grace"


class EditFailed(TraceError):
    """An edit that did not reach its target: nothing is written."""


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

    def nearest(self, keys: Tensor, name: str) -> Tensor:
        """For each key (m, C), the distance to the nearest state of a text not about ``name``
        (in single precision: it only sets a radius, nothing is decided at its edge here)."""
        own = torch.tensor([t.startswith(f"{name}.") for t in self.texts], dtype=torch.bool)[self.text_of]
        k = keys.float().to(self.states.device)
        if self._norms is None:
            self._norms = self.states.pow(2).sum(-1)
        d = self._norms[:, None] - 2 * self.states @ k.T + k.pow(2).sum(-1)[None]
        d[own.to(d.device)] = float("inf")
        return d.min(0).values.clamp_min(0).sqrt()


@dataclass
class GatedEdit:
    layer: int
    positions: list[int]  # positions of the edit input whose stream got an entry
    keys: Tensor
    values: Tensor
    radii: Tensor
    nearest_other: Tensor  # distance of each key to the nearest state of another person's text
    steps: int
    loss_before: float
    loss_after: float
    target: EditInput

    @property
    def parameters_added(self) -> int:
        return int(self.keys.numel() + self.values.numel() + self.radii.numel())


def _margins(logits: Tensor, y: Tensor) -> Tensor:
    """Per predicted position (y != PAD): the target's logit minus the best other one."""
    keep = y != PAD_ID
    lg, tg = logits[keep].float(), y[keep]
    right = lg.gather(-1, tg[:, None])[:, 0]
    other = lg.scatter(-1, tg[:, None], float("-inf")).max(-1).values
    return right - other


def optimise_values(model, x: Tensor, y: Tensor, positions: list[int], *, steps: int = 300,
                    lr: float = 0.01, margin: float = 2.0) -> tuple[Tensor, int, float, float]:
    """Values (m, C) added to the stream at ``positions`` (after the codebook already there)
    so that every predicted character of y beats the next best by ``margin``: Adam on the mean
    hinge max(0, margin - (logit of y - best other)) plus a small |v|^2, until the hinge is 0.
    ``lr`` is relative to the stream's norm there. Returns values, steps, hinge before, after."""
    block = model.blocks[codebook_of(model).layer]
    with torch.no_grad(), captured(model) as store:
        logits0 = model.run(x)[0][0]
    scale = float(store[0][0, positions].norm(dim=-1).mean()) or 1.0
    values = torch.zeros(len(positions), store[0].shape[-1], device=x.device, requires_grad=True)
    at = torch.tensor(positions, device=x.device)
    # The margin each predicted position must keep: ``margin`` where a value is added; elsewhere
    # what it had (at most ``margin``), so that a value at a lower layer does not unsettle the
    # characters the model already writes.
    needed = _margins(logits0, y[0]).clamp(max=margin)
    predicted = torch.nonzero(y[0] != PAD_ID).flatten().tolist()
    needed[[predicted.index(p) for p in positions]] = margin

    def add(_m, _i, out):
        h, w = out
        return h.index_add(1, at, values[None].to(h.dtype)), w

    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    handle = block.register_forward_hook(add)
    opt = torch.optim.Adam([values], lr=lr * scale)
    before = after = float("nan")
    try:
        for step in range(steps + 1):
            hinge = torch.relu(needed - _margins(model.run(x)[0][0], y[0])).mean()
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


def _wrong_positions(model, x: Tensor, y: Tensor) -> list[int]:
    """Positions whose greedy next character is not y's (the given ones not counted)."""
    with torch.no_grad():
        greedy = model.run(x)[0][0].argmax(-1)
    return [int(t) for t in torch.nonzero((y[0] != PAD_ID) & (greedy != y[0])).flatten()]


def gated_edit(model, vocab: Vocab, name: str, place: str, negatives: Negatives, *, owner: int,
               radius_fraction: float = 0.5, rounds: int = 3, **optimiser):
    """A copy of ``model`` with codebook entries (edit number ``owner``) at ``negatives.layer``
    so that ``name`` was born in ``place``; the original is untouched. Raises EditFailed when
    the edited model does not answer ``place``."""
    target = edit_input(model, vocab, name, place)
    ids = vocab.encode(target.text)
    if len(ids) > model.config.block_size + 1:
        raise TraceError(f"the edit input ({len(ids)} characters) exceeds the model's block")
    edited = copy.deepcopy(model)
    book = attach(edited, negatives.layer)
    x, y = _target(ids, target.prompt_len, edited.tok_emb.weight.device, target.given)
    with torch.no_grad(), captured(edited) as store:
        edited.run(x)
    states = store[0][0]
    positions: list[int] = []
    steps, before, after, values = 0, float("nan"), float("nan"), None
    for _ in range(rounds):
        wrong = [p for p in _wrong_positions(_with_values(edited, positions, values), x, y) if p not in positions]
        if not wrong:
            break
        positions = sorted(positions + wrong)
        values, n, b, after = optimise_values(edited, x, y, positions, **optimiser)
        steps += n
        before = b if before != before else before
    if not positions:
        raise EditFailed(f"{name!r}: the model already writes the edit input; nothing to change")
    keys = states[positions]
    values = values + _fired_values(book, keys)
    nearest = negatives.nearest(keys, name)
    radii = radius_fraction * nearest
    book.add(keys, values, radii, owner)
    got = answer_of(edited, vocab, name)
    if got != place:
        raise EditFailed(f"the gated edit of {name!r} did not take: the edited model answers {got!r}, "
                         f"not {place!r}; nothing written")
    return edited, GatedEdit(negatives.layer, positions, keys, values, radii, nearest, steps, before, after, target)


def _fired_values(book, keys: Tensor) -> Tensor:
    """The value an existing entry adds at each key (0 where none fires): a new entry at the
    same place replaces it (it is nearer), so the new value carries it on."""
    if not len(book):
        return torch.zeros_like(keys)
    index, fires = book.gate(keys)
    return torch.where(fires[:, None], book.values[index], torch.zeros_like(keys))


class _with_values:
    """``model`` teacher forced with ``values`` added at ``positions`` (none: the model)."""

    def __init__(self, model, positions, values):
        self.model, self.positions, self.values = model, positions, values

    def run(self, x):
        if self.values is None:
            return self.model.run(x)
        at = torch.tensor(self.positions, device=x.device)
        block = self.model.blocks[codebook_of(self.model).layer]
        handle = block.register_forward_hook(
            lambda _m, _i, out: (out[0].index_add(1, at, self.values[None].to(out[0].dtype)), out[1]))
        try:
            return self.model.run(x)
        finally:
            handle.remove()


def check_place(vocab: Vocab, place: str) -> None:
    if not place.strip() or MASK_CHAR in place:
        raise TraceError(f"--place must be a non-empty place name without {MASK_CHAR}, got {place!r}")
    vocab.encode(place, source="--place")
