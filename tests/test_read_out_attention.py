"""Where the read-out step looks (attnlab/probing/read_out.py, issue 27): the attention of the
query at ``⁇`` over each person's own line, split into the place, the name and the rest."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from attnlab.data.corpus import CorpusIndex, place_in_line
from attnlab.data.datasets import QAExample
from attnlab.data.vocab import Vocab
from attnlab.model.gpt import GPT
from attnlab.probing.read_out import REGIONS, read_out_attention, read_out_rows

R = 40
LINES = [
    "Ann Lee. Ann Lee was born in Paris in 1900 .",
    "Bo Kim. Bo Kim was born in Oslo .",  # shorter: its ⁇ comes earlier in the same batch
    "Cy Ray. Cy Ray lived long and was born in Rome .",  # Rome begins past the R characters read
]
ASKED = [QAExample(f"Where was {n} born?", p, "t.tsv", i) for i, (n, p) in enumerate(
    [("Ann Lee", "Paris"), ("Bo Kim", "Oslo"), ("Cy Ray", "Rome"), ("Di Noone", "Lima")], 1)]


def _model(tiny_config, vocab: Vocab, attention: str) -> GPT:
    torch.manual_seed(0)
    config = dataclasses.replace(tiny_config, vocab_size=len(vocab), block_size=64, n_embd=16,
                                 attention=attention, qa_format="recall", recall_chars=R)
    return GPT(config).eval()


def test_the_place_is_found_after_the_name_only():
    assert place_in_line("Lima Roe. She was born in Lima .", "Lima Roe", "Lima") == len("Lima Roe. She was born in ")
    assert place_in_line("Bo Kim. Bo Kim was born in Oslo .", "Bo Kim", "Lima") == -1
    assert place_in_line("Bo Kim. Bo Kim was born in Oslo .", "Bo Kim", "") == -1


def test_only_people_whose_place_is_within_the_text_read_are_counted():
    vocab = Vocab.from_text("".join(LINES))
    rows = read_out_rows(vocab, CorpusIndex(LINES), ASKED, R)
    assert [vocab.decode(r.ids[r.place_start:r.place_end]) for r in rows] == ["Paris", "Oslo"]
    assert [vocab.decode(r.ids[:r.name_end]) for r in rows] == ["Ann Lee.", "Bo Kim."]
    assert [vocab.decode(r.ids) for r in rows] == [LINES[0][:R] + "⁇", LINES[1] + "⁇"]


def test_uniform_attention_puts_each_region_its_share_of_the_visible_keys(tiny_config):
    """Zero queries make every score equal: the ⁇ query spreads evenly over the keys up to
    itself, so each region's mass is its length over the row's length, layer by layer."""
    vocab = Vocab.from_text("".join(LINES))
    model = _model(tiny_config, vocab, "vanilla")
    with torch.no_grad():
        for block in model.blocks:
            block.attn.query.weight.zero_()
            block.attn.query.bias.zero_()
    got = read_out_attention(model, vocab, CorpusIndex(LINES), ASKED, batch_size=8)
    lengths = [len(LINES[0][:R]) + 1, len(LINES[1]) + 1]
    place = np.mean([5 / lengths[0], 4 / lengths[1]])
    name = np.mean([8 / lengths[0], 7 / lengths[1]])
    assert (got.counted, got.asked) == (2, 4)
    assert got.mass.shape == (len(REGIONS), tiny_config.n_layer, tiny_config.n_head)
    np.testing.assert_allclose(got.region("place"), place, rtol=1e-5)
    np.testing.assert_allclose(got.region("name"), name, rtol=1e-5)
    np.testing.assert_allclose(got.mass.sum(0), 1.0, rtol=1e-5)
    assert got.uniform_place == pytest.approx(place)


def test_a_synthesizer_told_to_look_at_one_position_puts_its_mass_there(tiny_config):
    """With no content in its queries the synthesizer's scores are its per-position bias b_2:
    a large bias on the first character of the place sends the ⁇ query there, in every layer."""
    vocab = Vocab.from_text("".join(LINES))
    model = _model(tiny_config, vocab, "synthesizer")
    with torch.no_grad():
        for block in model.blocks:
            block.attn.w1.weight.zero_()
            block.attn.w1.bias.zero_()
            block.attn.b2.zero_()
            block.attn.b2[place_in_line(LINES[0], "Ann Lee", "Paris")] = 60.0
    got = read_out_attention(model, vocab, CorpusIndex(LINES), ASKED[:1])
    np.testing.assert_allclose(got.region("place"), 1.0, atol=1e-5)
    np.testing.assert_allclose(got.region("name") + got.region("other"), 0.0, atol=1e-5)


def test_nobody_to_read_is_a_clear_error(tiny_config):
    vocab = Vocab.from_text("".join(LINES))
    with pytest.raises(ValueError, match="no person asked about"):
        read_out_attention(_model(tiny_config, vocab, "vanilla"), vocab, CorpusIndex(LINES), ASKED[2:])
