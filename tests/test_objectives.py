"""The lm objective: exact packing, QA mixing and the guard that keeps held-out people out."""

from __future__ import annotations

import pytest
import torch

from attnlab.model.attention import REGISTRY
from attnlab.config.settings import ModelConfig
from attnlab.data.datasets import DataError, QAExample
from attnlab.data.corpus import CorpusIndex
from attnlab.model.attention.masks import segments as segment_mask
from attnlab.model.gpt import GPT, lm_loss
from attnlab.model.positions import segment_positions
from attnlab.data.objectives import (Sequence, corpus_sequences, mixed, pack, qa_sequences, refuse_held_out_people,
                                    swapped_place_read_outs)
from attnlab.data.vocab import MASK_CHAR, PAD_ID, Vocab

DOCS = ["Ada Brook. Ada Brook was born in Paris.", "Bo Li. Bo Li was born in Lima, a city.",
        "Cy Ng. Born in Oslo.", "Di Fo. Di Fo was born in Rome and died in Kyiv."]


def _vocab() -> Vocab:
    return Vocab.from_text("\n".join(DOCS) + "Where?")


def _qa(name: str, place: str, line: int = 1, source: str = "train.tsv") -> QAExample:
    return QAExample(f"Where was {name} born?", place, source, line)


@pytest.mark.parametrize("attention", sorted(REGISTRY))
def test_a_packed_row_gives_each_line_the_loss_it_has_alone(attention):
    vocab = _vocab()
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=len(vocab), block_size=64, n_layer=2, n_head=2, n_embd=16,
                            dropout=0.0, attention=attention)).eval()
    seqs = corpus_sequences(DOCS, vocab, 64, "direct", 0)
    rows = pack(seqs, 64)
    assert len(rows) < len(seqs)  # several lines share a row
    logits, _ = model(rows.x, segments=rows.segments)  # the trainer's call
    packed = lm_loss(logits, rows.y, reduction="none").view(rows.y.shape)
    for r in range(len(rows)):
        for s in rows.segments[r].unique().tolist():
            if s < 0:
                continue
            where = rows.segments[r] == s
            x, y = rows.x[r, where][None], rows.y[r, where][None]
            alone = lm_loss(model.run(x)[0], y, reduction="none")
            torch.testing.assert_close(packed[r, where], alone, rtol=1e-5, atol=1e-5)


def test_packing_keeps_every_target_once_and_counts_positions_from_each_start():
    vocab = _vocab()
    seqs = corpus_sequences(DOCS, vocab, 64, "direct", 0)
    rows = pack(seqs, 64)
    assert int((rows.y != PAD_ID).sum()) == sum(len(s.ids) - 1 for s in seqs)
    positions = segment_positions(rows.segments)
    for r in range(len(rows)):
        for s in rows.segments[r].unique().tolist():
            if s >= 0:
                pos = positions[r, rows.segments[r] == s]
                assert pos.tolist() == list(range(len(pos)))


def test_padding_positions_see_only_themselves():
    mask = segment_mask(torch.tensor([[0, 0, 1, -1]]))[0, 0]
    assert mask.tolist() == [[True, False, False, False], [True, True, False, False],
                             [False, False, True, False], [False, False, False, True]]


def test_direct_qa_sequences_leave_the_question_out_of_the_loss():
    vocab = _vocab()
    (seq,) = qa_sequences([_qa("Bo Li", "Lima")], vocab, 64, "direct", 0, None)
    assert vocab.decode(seq.ids) == f"Where was Bo Li born?{MASK_CHAR}Lima{MASK_CHAR}"
    rows = pack([seq], 64)
    scored = vocab.decode(rows.y[0][rows.y[0] != PAD_ID])
    assert scored == f"{MASK_CHAR}Lima{MASK_CHAR}"


def test_recall_qa_sequences_are_the_persons_line_then_the_place():
    vocab = _vocab()
    index = CorpusIndex(DOCS)
    (seq,) = qa_sequences([_qa("Bo Li", "Lima")], vocab, 64, "recall", 20, index)
    assert vocab.decode(seq.ids) == DOCS[1][:20] + MASK_CHAR + "Lima" + MASK_CHAR
    assert seq.unscored == 0
    with pytest.raises(DataError, match=r"train.tsv:7: no corpus line opens with 'Zed Q.'"):
        qa_sequences([_qa("Zed Q", "Lima", line=7)], vocab, 64, "recall", 20, index)


def test_swapped_read_outs_put_another_training_place_where_the_place_stands():
    vocab = _vocab()
    index = CorpusIndex(DOCS)
    people = [_qa("Ada Brook", "Paris"), _qa("Bo Li", "Lima"), _qa("Di Fo", "Rome"), _qa("Cy Ng", "Bergen")]
    seqs = swapped_place_read_outs(people, index, vocab, 64, 60, 3, seed=0)
    assert len(seqs) == 9  # Cy Ng's line does not state Bergen: nothing made from it
    for seq, person in zip(seqs, [p for p in people[:3] for _ in range(3)]):
        text = vocab.decode(seq.ids)
        line, new = text[:seq.unscored], text[seq.unscored + 1:-1]
        old = person.answer
        assert new != old and new in {"Paris", "Lima", "Rome", "Bergen"}  # the file's own places
        original = index.line_of(person.question[len("Where was "):-len(" born?")])
        assert line == original.replace(old, new, 1)[:60]  # the place's first mention swapped
        assert text[seq.unscored] == MASK_CHAR  # only the place after the line is scored
    assert seqs == swapped_place_read_outs(people, index, vocab, 64, 60, 3, seed=0)  # seeded
    # a place that would stand past the recalled characters gives no example
    assert swapped_place_read_outs(people[:1], index, vocab, 64, 25, 5, seed=0) == []


def test_swapped_read_outs_can_exchange_the_answer_with_a_distractor_the_line_names():
    docs = ["Ada Brook. Ada Brook was born in Paris, not in Old Lima.", "Bo Li. Bo Li was born in Old Lima.",
            "Di Fo. Di Fo was born in Rome.", "Cy Ng. Cy Ng was born in Paris."]
    vocab, index = Vocab.from_text("\n".join(docs) + "Where?"), CorpusIndex(docs)
    people = [_qa("Ada Brook", "Paris"), _qa("Bo Li", "Old Lima"), _qa("Di Fo", "Rome"), _qa("Cy Ng", "Paris")]
    seqs = swapped_place_read_outs(people, index, vocab, 80, 60, 2, seed=0, distractors=True)
    texts = [vocab.decode(s.ids) for s in seqs]
    # Ada Brook's line names another training place: the two change places and that one is the answer
    exchanged = "Ada Brook. Ada Brook was born in Old Lima, not in Paris." + MASK_CHAR + "Old Lima" + MASK_CHAR
    assert texts[:2] == [exchanged, exchanged]
    # lines without a distractor get a random other place, as without the option
    assert len(texts) == 8
    for text, person in zip(texts[2:], [p for p in people[1:] for _ in range(2)]):
        line, new = text.split(MASK_CHAR)[:2]
        assert new in {"Paris", "Rome", "Old Lima"} - {person.answer} and line.endswith(f"born in {new}.")
    plain = swapped_place_read_outs(people, index, vocab, 80, 60, 2, seed=0)
    assert vocab.decode(plain[0].ids) != exchanged  # off by default: Ada's copies write in random places
    # the exchanged answer must stand whole within the recalled characters, where it now stands
    eve = ["Eve Ho. Not Rome but Paris.", "Di Fo. Di Fo was born in Rome."]
    vocab, index = Vocab.from_text("\n".join(eve) + "Where?"), CorpusIndex(eve)
    pair = [_qa("Eve Ho", "Paris"), _qa("Di Fo", "Rome")]
    (fits,) = swapped_place_read_outs(pair, index, vocab, 80, 26, 1, seed=0, distractors=True)[:1]
    assert vocab.decode(fits.ids) == "Eve Ho. Not Paris but Rome" + MASK_CHAR + "Rome" + MASK_CHAR
    cut = swapped_place_read_outs(pair, index, vocab, 80, 25, 1, seed=0, distractors=True)
    assert not any(vocab.decode(s.ids).startswith("Eve") for s in cut)  # "Rome" would end past 25


def test_swapped_read_outs_can_write_in_disguised_values_only_copying_can_answer():
    """With ``novel``, that share of the swapped copies gets a value of the right shape that no
    training value is (each letter and digit redrawn from the values' own), so that the model
    must copy what the line states; none at 0, all at 1; seeded; every character in the vocab."""
    vocab = _vocab()
    index = CorpusIndex(DOCS)
    people = [_qa("Ada Brook", "Paris"), _qa("Bo Li", "Lima"), _qa("Di Fo", "Rome")]
    known = {"Paris", "Lima", "Rome"}
    plain = swapped_place_read_outs(people, index, vocab, 64, 60, 3, seed=0)
    assert plain == swapped_place_read_outs(people, index, vocab, 64, 60, 3, seed=0, novel=0.0)  # draws unchanged
    every = swapped_place_read_outs(people, index, vocab, 64, 60, 3, seed=0, novel=1.0)
    assert len(every) == len(plain) == 9
    for seq in every:
        line, new = vocab.decode(seq.ids).split(MASK_CHAR)[:2]
        assert new not in known and new[0].isupper() and new[1:].islower() and len(new) in (4, 5)
        assert set(new) <= set("PLR") | set("arisoe" + "im") and f"born in {new}" in line
    assert every == swapped_place_read_outs(people, index, vocab, 64, 60, 3, seed=0, novel=1.0)  # seeded
    half = swapped_place_read_outs(people, index, vocab, 64, 60, 40, seed=1, novel=0.5)
    share = sum(vocab.decode(s.ids).split(MASK_CHAR)[1] not in known for s in half) / len(half)
    assert 0.3 < share < 0.7


def test_a_disguised_value_keeps_its_shape():
    import random

    from attnlab.data.objectives import alphabet_of, disguised

    alphabet = alphabet_of(["Paul Braun", "1958", "O'Neil-Smith"])
    assert alphabet == {"upper": "BNOPS", "lower": "aehilmnrtu", "digit": "1589"}
    out = disguised("O'Neil-Smith 1901", alphabet, random.Random(0))
    assert len(out) == 17 and out[1] == "'" and out[6] == "-" and out[12] == " "
    assert out[0].isupper() and out[2].isupper() and out[13:].isdigit() and set(out[13:]) <= set("1589")


def test_mixing_adds_qa_examples_in_proportion_to_the_corpus():
    corpus = [Sequence([2, 3, 4])] * 10
    qa = [Sequence([5, 6, i]) for i in range(4)]
    out = mixed(corpus, qa, 5, seed=0)  # 5 QA sequences: each once, one of them twice
    extra = out[10:]
    assert len(out) == 15
    counts = sorted(sum(s is q for s in extra) for q in qa)
    assert counts == [1, 1, 1, 2]
    assert mixed(corpus, qa, 0, seed=0) == corpus


def test_mixing_refuses_people_asked_in_dev_or_test():
    train = [_qa("Ada Brook", "Paris", 1), _qa("Bo Li", "Lima", 2)]
    dev = [_qa("Bo Li", "Lima", 9, "dev.tsv")]
    test = [QAExample("Where was Cy Ng born?", None, "test.tsv", 3)]
    refuse_held_out_people(train, {"test.tsv": test})  # Cy Ng is not mixed: nothing to refuse
    with pytest.raises(DataError) as err:
        refuse_held_out_people(train, {"dev.tsv": dev, "test.tsv": test})
    assert str(err.value) == ("train.tsv:2: 'Where was Bo Li born?' is also asked in dev.tsv line 9: "
                              "only training-file people may be mixed into pretraining "
                              "(--mix-overlap drop leaves such questions out)")
    with pytest.raises(DataError, match="test.tsv line 3"):
        refuse_held_out_people([_qa("Cy Ng", "Oslo")], {"test.tsv": test})
    kept, dropped = refuse_held_out_people(train, {"dev.tsv": dev}, drop=True)
    assert kept == train[:1] and dropped == train[1:]


def test_distractor_exchanges_need_swapped_copies():
    from attnlab.config.settings import TrainConfig

    with pytest.raises(ValueError, match="swap_distractors .* needs read_out_swaps > 0"):
        TrainConfig(swap_distractors=True)
    assert TrainConfig(swap_distractors=True, read_out_swaps=1).swap_distractors
    with pytest.raises(ValueError, match="swap_novel .* needs read_out_swaps > 0"):
        TrainConfig(swap_novel=0.5)
    with pytest.raises(ValueError):
        TrainConfig(swap_novel=1.5, read_out_swaps=1)
