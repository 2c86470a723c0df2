"""Where the read-out step looks (issue 27: why a variant stores facts but does not extract them).

In the recall answer format (attnlab/answering/knowledge.py) the model writes ``⁇`` after the
text it recalled and then the place, read from that text. Given each person's own corpus line
cut at ``recall_chars`` (the open book of ``read_out_given_lines``), the query at that ``⁇``
is the one whose output predicts the place's first character. This module measures, per layer
and head, how much of its attention lands on the place's characters, on the line's opening
``NAME.``, and elsewhere, beside the share a uniform spread over the visible keys would give
the place: a model that reads the place out looks at it; one that cannot look a key up by its
content (synthesizer) cannot find it where it happens to be.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..data.corpus import CorpusIndex, place_in_line, recall_prompt, require_person
from ..data.datasets import QAExample
from ..data.vocab import MASK_ID, Vocab
from ..model.gpt import GPT
from .attention_maps import attention_weights

REGIONS = ("place", "name", "other")


@dataclass(frozen=True)
class ReadOutRow:
    """One person's open-book input: ``ids`` the line cut at recall_chars then ``⁇``; the
    opening ``NAME.`` is ``ids[:name_end]`` and the place ``ids[place_start:place_end]``."""

    ids: list[int]
    name_end: int
    place_start: int
    place_end: int


@dataclass(frozen=True)
class ReadOutAttention:
    """Mean attention of the ``⁇`` query over the people counted: ``mass[r, layer, head]`` for
    region ``REGIONS[r]`` (the three sum to 1 for each layer and head)."""

    mass: np.ndarray  # (3, L, h)
    uniform_place: float  # mean share of the ⁇'s visible keys that are the place's characters
    counted: int  # people whose place is written within the text given
    asked: int

    def region(self, name: str) -> np.ndarray:
        """(L, h) mean mass on one of ``REGIONS``."""
        return self.mass[REGIONS.index(name)]


def read_out_rows(vocab: Vocab, index: CorpusIndex, examples: list[QAExample],
                  recall_chars: int) -> list[ReadOutRow]:
    """The open-book rows of the people whose place is written in their corpus line within its
    first ``recall_chars`` characters (the others have nothing to read the place from)."""
    rows = []
    for ex in examples:
        name = require_person(ex)
        line = index.line_of(name)
        if line is None or not ex.answer:
            continue
        at = place_in_line(line, name, ex.answer)
        if at < 0 or at + len(ex.answer) > recall_chars:
            continue
        ids = vocab.encode(line[:recall_chars], source=ex.source, line=ex.line) + [MASK_ID]
        rows.append(ReadOutRow(ids, len(recall_prompt(name)), at, at + len(ex.answer)))
    return rows


@torch.no_grad()
def read_out_attention(model: GPT, vocab: Vocab, index: CorpusIndex, examples: list[QAExample], *,
                       batch_size: int = 64) -> ReadOutAttention:
    """Per layer and head, where the query at ``⁇`` looks over each person's own line (weights
    from the model's explicit attention path, so every variant works)."""
    rows = read_out_rows(vocab, index, examples, model.config.recall_chars)
    if not rows:
        raise ValueError("no person asked about has their place written within the text the model reads")
    total = None
    for start in range(0, len(rows), batch_size):
        part = rows[start:start + batch_size]
        weights, _ = attention_weights(model, [r.ids for r in part])
        mass = _region_mass(weights, part)  # (3, L, h), summed over the batch
        total = mass if total is None else total + mass
    uniform = float(np.mean([(r.place_end - r.place_start) / len(r.ids) for r in rows]))
    return ReadOutAttention((total / len(rows)).cpu().numpy(), uniform, len(rows), len(examples))


def _region_mass(weights: list[torch.Tensor], rows: list[ReadOutRow]) -> torch.Tensor:
    """Summed over the rows: the ⁇ query's attention on each region, (3, L, h)."""
    B, T = len(rows), weights[0].shape[-1]
    device = weights[0].device
    query = torch.tensor([len(r.ids) - 1 for r in rows], device=device)
    keys = torch.arange(T, device=device)[None, :]
    place = (keys >= torch.tensor([r.place_start for r in rows], device=device)[:, None]) & (
        keys < torch.tensor([r.place_end for r in rows], device=device)[:, None])
    name = keys < torch.tensor([r.name_end for r in rows], device=device)[:, None]
    at_query = torch.stack([w[torch.arange(B, device=device), :, query, :] for w in weights], 1)  # (B, L, h, T)
    on_place = (at_query * place[:, None, None, :]).sum(-1)
    on_name = (at_query * name[:, None, None, :]).sum(-1)
    return torch.stack([on_place, on_name, at_query.sum(-1) - on_place - on_name]).sum(1)
