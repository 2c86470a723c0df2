"""The character vocabulary (SPEC 2): ids, round trips and error messages."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.data.datasets import NameDataset, SpanCorruptionDataset, read_text
from attnlab.data.vocab import MASK_CHAR, MASK_ID, PAD_CHAR, PAD_ID, Vocab, VocabError

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture(scope="module")
def wiki_text() -> str:
    return read_text(DATA / "wiki.txt")


def test_reserved_ids_and_chars() -> None:
    assert (PAD_ID, MASK_ID) == (0, 1)
    assert PAD_CHAR == "\u25a1" and MASK_CHAR == "\u2047"
    v = Vocab.from_text("cab\nb")
    assert v.itos == [PAD_CHAR, MASK_CHAR, "\n", "a", "b", "c"]
    assert v.stoi[PAD_CHAR] == PAD_ID and v.stoi[MASK_CHAR] == MASK_ID
    assert len(v) == 6


def test_wiki_vocabulary_has_256_entries(wiki_text: str) -> None:
    assert len(wiki_text) == 418_351
    v = Vocab.from_text(wiki_text)
    assert len(v) == 256
    assert v.itos[2:] == sorted(set(wiki_text))
    assert "\n" in v.stoi  # newline is part of the corpus, hence of the vocabulary


def test_encode_decode_round_trip(wiki_text: str) -> None:
    v = Vocab.from_text(wiki_text)
    line = wiki_text.split("\n")[5]
    ids = v.encode(line)
    assert all(2 <= i < len(v) for i in ids)
    assert v.decode(ids) == line
    t = v.encode_tensor(line)
    assert t.dtype == torch.long and t.shape == (len(line),)
    assert v.decode(t) == line
    assert v.decode([PAD_ID, MASK_ID]) == PAD_CHAR + MASK_CHAR


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet="abcxyz Zürich\n", max_size=40))
def test_round_trip_property(s: str) -> None:
    v = Vocab.from_text("abcxyz Zürich\n")
    assert v.decode(v.encode(s)) == s


def test_list_round_trip_through_json(wiki_text: str) -> None:
    v = Vocab.from_text(wiki_text)
    back = Vocab.from_list(json.loads(json.dumps(v.to_list())))
    assert back == v and back.itos == v.itos
    assert v != Vocab.from_text("abc")
    # to_list is a copy: changing it cannot change the vocabulary
    items = v.to_list()
    items.append("!")
    assert len(v) == 256


@pytest.mark.parametrize(
    "itos",
    [
        ["a", MASK_CHAR, "b"],  # PAD missing
        [PAD_CHAR, "a", MASK_CHAR],  # MASK not at id 1
        [PAD_CHAR, MASK_CHAR, "a", "a"],  # duplicate
        [PAD_CHAR, MASK_CHAR, "ab"],  # not a single character
    ],
)
def test_invalid_lists_rejected(itos: list[str]) -> None:
    with pytest.raises(ValueError):
        Vocab(itos)


@pytest.mark.parametrize("reserved", [PAD_CHAR, MASK_CHAR])
def test_corpus_with_reserved_char_rejected(reserved: str) -> None:
    with pytest.raises(ValueError, match="reserved"):
        Vocab.from_text("abc" + reserved)


def test_vocab_error_message_format() -> None:
    v = Vocab.from_text("abc")
    with pytest.raises(VocabError) as e:
        v.encode("abé", source="data/birth_dev.tsv", line=17)
    assert str(e.value) == (
        "data/birth_dev.tsv:17: character 'é' (U+00E9) is not in the vocabulary"
    )
    assert isinstance(e.value, ValueError) and not isinstance(e.value, KeyError)
    with pytest.raises(VocabError) as e:
        v.encode("a\tb")
    assert str(e.value) == "<input>: character '\\t' (U+0009) is not in the vocabulary"
    assert "\n" not in str(e.value)
    with pytest.raises(VocabError) as e:
        v.encode("z", line=3)
    assert str(e.value).startswith("<input>:3: character 'z' (U+007A)")
    again = pickle.loads(pickle.dumps(e.value))
    assert str(again) == str(e.value)


def test_unknown_char_in_qa_file_names_file_line_and_code_point(
    wiki_text: str, tmp_path: Path
) -> None:
    path = tmp_path / "qa.tsv"
    path.write_text(
        "Where was Ann born?\tRome\n\nWhere was Bo born?\tSnow\u2603ville\n", encoding="utf-8"
    )
    wiki = SpanCorruptionDataset(wiki_text, 128)
    with pytest.raises(VocabError) as e:
        NameDataset.from_file(path, wiki)
    assert str(e.value) == (
        f"{path}:3: character '\u2603' (U+2603) is not in the vocabulary"
    )


def test_decode_rejects_bad_ids() -> None:
    v = Vocab.from_text("ab")
    with pytest.raises(ValueError, match="outside"):
        v.decode([7])
    with pytest.raises(ValueError):
        v.decode(torch.zeros(2, 2, dtype=torch.long))
