"""QA parsing and layout (SPEC 2) and span corruption, reference and batched (SPEC 3)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.data.datasets import (
    CharCorruptionDataset, DataError, NameDataset, QAExample, SpanCorruptionDataset, corrupt_batch, documents,
    parse_qa, qa_string, qa_tensors, read_qa, read_text, span_corruption_string, trim_batch
)
from attnlab.data.vocab import MASK_CHAR, MASK_ID, PAD_CHAR, PAD_ID, Vocab

DATA = Path(__file__).resolve().parent.parent / "data"
LONG_DOC = "".join(chr(ord("a") + i % 26) for i in range(200))  # longer than any truncation


@pytest.fixture(scope="module")
def wiki() -> SpanCorruptionDataset:
    return SpanCorruptionDataset(read_text(DATA / "wiki.txt"), 128, seed=0)


# --------------------------------------------------------------------------- helpers


def check_rearranged(s: str, doc: str, block_size: int) -> tuple[int, int, int]:
    """Assert the SPEC 3 properties of one string; return (trunc_len, mask_len, mask_start)."""
    assert len(s) == block_size
    body = s.rstrip(PAD_CHAR)
    assert PAD_CHAR not in body, "padding only at the end"
    assert body.count(MASK_CHAR) == 3 and body.endswith(MASK_CHAR)
    prefix, suffix, masked, _ = body.split(MASK_CHAR)
    n = len(prefix) + len(masked) + len(suffix)
    assert prefix + masked + suffix == doc[:n], "pieces must re-form the start of the document"
    assert n <= int(3 * block_size / 4)
    assert n >= 4 or n == len(doc)
    assert 1 <= len(masked) <= max(1, n // 2 - 1)
    return n, len(masked), len(prefix)


def whole_strings(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Rebuild the (B, T+1) rearranged ids from x, y = s[:, :-1], s[:, 1:]."""
    assert torch.equal(x[:, 1:], y[:, :-1])
    return torch.cat([x, y[:, -1:]], dim=1)


def batch_stats(s: torch.Tensor) -> np.ndarray:
    """(trunc_len, mask_len, mask_start) per row, read off the three MASK positions."""
    pos = (s == MASK_ID).nonzero()[:, 1].view(-1, 3)  # (B, 3): start, n-m+1, n+2
    n = pos[:, 2] - 2
    return torch.stack([n, pos[:, 2] - pos[:, 1] - 1, pos[:, 0]], dim=1).numpy()


def reference_stats(doc: str, block_size: int, draws: int, seed: int) -> np.ndarray:
    rng = random.Random(seed)
    out = []
    for _ in range(draws):
        _, info = span_corruption_string(doc, block_size, rng)
        out.append((info["trunc_len"], info["mask_len"], info["mask_start"]))
    return np.array(out)


def chi2_rejects(a: np.ndarray, b: np.ndarray) -> bool:
    """Two-sample chi-square homogeneity test at alpha = 1e-4.

    Values with fewer than 20 draws in total are pooled into one bin so the chi-square
    approximation holds; the critical value is Wilson-Hilferty's (z = 3.719 for 1e-4).
    """
    values, counts = np.unique(np.concatenate([a, b]), return_counts=True)
    rare = values[counts < 20]
    pooled = lambda v: np.where(np.isin(v, rare), values.min() - 1, v)  # noqa: E731
    bins = np.unique(pooled(values))
    ca = (pooled(a)[:, None] == bins[None, :]).sum(axis=0).astype(float)
    cb = (pooled(b)[:, None] == bins[None, :]).sum(axis=0).astype(float)
    tot = ca + cb
    ea, eb = tot * len(a) / tot.sum(), tot * len(b) / tot.sum()
    stat = float(((ca - ea) ** 2 / ea + (cb - eb) ** 2 / eb).sum())
    k = len(bins) - 1
    critical = k * (1 - 2 / (9 * k) + 3.719 * math.sqrt(2 / (9 * k))) ** 3
    return stat > critical


def ks_rejects(a: np.ndarray, b: np.ndarray) -> bool:
    """Two-sample Kolmogorov-Smirnov at alpha = 0.001 (c = 1.949; conservative for integers)."""
    grid = np.union1d(a, b)
    fa = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    fb = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    d = np.abs(fa - fb).max()
    return d > 1.949 * math.sqrt((len(a) + len(b)) / (len(a) * len(b)))


def batch_for(doc_texts: list[str], block_size: int, index: list[int], seed: int):
    ds = SpanCorruptionDataset("\n".join(doc_texts), block_size)
    docs, lengths = ds.doc_tensor()
    g = torch.Generator().manual_seed(seed)
    x, y = corrupt_batch(docs, lengths, torch.tensor(index), block_size, g)
    return ds, x, y


# ---------------------------------------------------------------- span corruption (SPEC 3)


def test_reference_properties_over_many_draws() -> None:
    block_size, rng = 128, random.Random(1234)
    vocab = Vocab.from_text(LONG_DOC)
    stats = []
    for _ in range(4000):
        s, info = span_corruption_string(LONG_DOC, block_size, rng)
        got = check_rearranged(s, LONG_DOC, block_size)
        assert got == (info["trunc_len"], info["mask_len"], info["mask_start"])
        ids = vocab.encode_tensor(s)
        x, y = ids[:-1], ids[1:]
        assert len(x) == len(y) == block_size - 1 and torch.equal(x[1:], y[:-1])
        stats.append(got)
    n, m, _ = np.array(stats).T
    assert set(n.tolist()) == set(range(4, int(3 * block_size / 4) + 1)), "every L reachable"
    assert abs(m.mean() - n.mean() / 4) < 1.5
    assert len(set(m.tolist())) > 10, "masked length must vary"
    # conditionally too: a 40-character document is usually kept whole (L >= 40)
    infos = [span_corruption_string(LONG_DOC[:40], block_size, rng)[1] for _ in range(3000)]
    m40 = np.array([info["mask_len"] for info in infos if info["trunc_len"] == 40])
    assert len(m40) > 1500 and abs(m40.mean() - 10) < 1.5
    assert m40.min() == 1 and m40.max() == 19


def test_short_document_stays_whole() -> None:
    rng = random.Random(7)
    lengths = {span_corruption_string("abc", 128, rng)[1]["trunc_len"] for _ in range(200)}
    assert lengths == {3}
    lengths = {span_corruption_string("abcdef", 128, rng)[1]["trunc_len"] for _ in range(200)}
    assert lengths == {4, 5, 6}


def test_dataset_item_is_course_compatible(wiki: SpanCorruptionDataset) -> None:
    assert CharCorruptionDataset is SpanCorruptionDataset
    assert len(wiki) == 2937 and len(wiki.documents) == 2937
    assert wiki.vocab_size == 256 and wiki.block_size == 128
    assert wiki.PAD_CHAR == PAD_CHAR and wiki.MASK_CHAR == MASK_CHAR
    assert wiki.stoi[PAD_CHAR] == 0 and wiki.itos[1] == MASK_CHAR
    for i in (0, 1, 2936):
        x, y = wiki[i]
        assert x.dtype == y.dtype == torch.long
        assert x.shape == y.shape == (127,)
        assert torch.equal(x[1:], y[:-1])
        check_rearranged(wiki.vocab.decode(torch.cat([x, y[-1:]])), wiki.documents[i], 128)


def test_dataset_seed_is_reproducible() -> None:
    text = "\n".join([LONG_DOC, "short one", LONG_DOC[::-1]])
    a, b = SpanCorruptionDataset(text, 64, seed=3), SpanCorruptionDataset(text, 64, seed=3)
    for i in [0, 1, 2, 0, 2]:
        assert all(torch.equal(u, v) for u, v in zip(a[i], b[i]))


def test_doc_tensor(wiki: SpanCorruptionDataset) -> None:
    docs, lengths = wiki.doc_tensor()
    assert docs.shape == (2937, int(lengths.max())) and docs.dtype == torch.long
    assert lengths.tolist() == [len(d) for d in wiki.documents]
    assert wiki.vocab.decode(docs[3, : lengths[3]]) == wiki.documents[3]
    assert (docs[3, lengths[3] :] == PAD_ID).all()
    assert wiki.doc_tensor()[0] is docs  # cached


def test_corrupt_batch_properties() -> None:
    block_size = 128
    doc_texts = [LONG_DOC, "tiny", "ab", "a short document of 33 characters"]
    index = [i % len(doc_texts) for i in range(4000)]
    ds, x, y = batch_for(doc_texts, block_size, index, seed=11)
    assert x.shape == y.shape == (4000, block_size - 1) and x.dtype == torch.long
    s = whole_strings(x, y)
    rows = [ds.vocab.decode(row) for row in s]
    stats = np.array([check_rearranged(r, doc_texts[i], block_size) for r, i in zip(rows, index)])
    n, m, _ = stats[np.array(index) == 0].T
    assert set(n.tolist()) == set(range(4, 97)), "every L reachable"
    assert abs(m.mean() - n.mean() / 4) < 1.5 and len(set(m.tolist())) > 10
    assert set(stats[np.array(index) == 1, 0].tolist()) == {4}
    assert set(stats[np.array(index) == 2, 0].tolist()) == {2}


@pytest.mark.parametrize("doc_len", [200, 13])
def test_batch_matches_reference_distribution(doc_len: int) -> None:
    block_size, draws = 32, 20_000
    doc = LONG_DOC[:doc_len]
    ref = reference_stats(doc, block_size, draws, seed=5)
    _, x, y = batch_for([doc], block_size, [0] * draws, seed=5)
    fast = batch_stats(whole_strings(x, y))
    # exact supports and range end points: off-by-ones in any range show up here first
    for col in range(2):
        assert set(ref[:, col].tolist()) == set(fast[:, col].tolist())
    if doc_len == 200:
        assert set(ref[:, 0].tolist()) == set(range(4, 25))
        assert set(ref[:, 1].tolist()) == set(range(1, 12))
    for n, m, start in (ref.T, fast.T):
        assert n.min() == 4 and n.max() == min(24, doc_len)
        assert (m == 1).any() and (m == np.maximum(1, n // 2 - 1)).any()
        assert (m <= np.maximum(1, n // 2 - 1)).all() and (m >= 1).all()
        assert (start == 0).any() and (start == n - m).any()
        assert (start >= 0).all() and (start <= n - m).all()
    # then the shapes: marginals, and the joint (trunc_len, mask_len)
    joint = lambda a: a[:, 0] * 100 + a[:, 1]  # noqa: E731
    for a, b in [(ref[:, c], fast[:, c]) for c in range(3)] + [(joint(ref), joint(fast))]:
        assert not chi2_rejects(a, b)
        assert not ks_rejects(a, b)


def test_distribution_tests_have_power() -> None:
    """The thresholds above do catch an off-by-one in a range at these sample sizes."""
    draws = 20_000
    ref = reference_stats(LONG_DOC, 32, draws, seed=5)
    # truncation range one shorter: int(3*31/4) = 23 instead of 24
    short = reference_stats(LONG_DOC, 31, draws, seed=6)
    assert chi2_rejects(ref[:, 0], short[:, 0])
    # masked length drawn from [1, n//2] instead of [1, n//2 - 1], same truncation lengths
    rng = np.random.default_rng(0)
    n = ref[:, 0]
    wrong_m = rng.integers(1, np.maximum(1, n // 2) + 1)
    assert chi2_rejects(ref[:, 1], wrong_m) and ks_rejects(ref[:, 1], wrong_m)
    right_m = rng.integers(1, np.maximum(1, n // 2 - 1) + 1)
    assert not chi2_rejects(ref[:, 1], right_m) and not ks_rejects(ref[:, 1], right_m)


@settings(max_examples=60, deadline=None)
@given(
    doc=st.text(alphabet="abc xyz.", min_size=1, max_size=90),
    block_size=st.integers(6, 100),
    seed=st.integers(0, 2**32),
)
def test_tiny_and_odd_block_sizes(doc: str, block_size: int, seed: int) -> None:
    s, info = span_corruption_string(doc, block_size, random.Random(seed))
    n, m, start = info["trunc_len"], info["mask_len"], info["mask_start"]
    t = doc[:n]
    full = t[:start] + MASK_CHAR + t[start + m :] + MASK_CHAR + t[start : start + m] + MASK_CHAR
    assert len(s) == block_size
    assert s == (full + PAD_CHAR * block_size)[:block_size]  # cut only when B < 12
    if block_size >= 12:
        check_rearranged(s, doc, block_size)
    _, x, y = batch_for([doc], block_size, [0, 0], seed=seed)
    assert x.shape == (2, block_size - 1) and torch.equal(x[:, 1:], y[:, :-1])
    if block_size >= 12:
        vocab = Vocab.from_text(doc)
        for row in whole_strings(x, y):
            check_rearranged(vocab.decode(row), doc, block_size)


def test_block_size_too_small() -> None:
    with pytest.raises(ValueError, match="block_size"):
        span_corruption_string("abcdef", 5, random.Random(0))


def test_trim_batch_is_exact() -> None:
    _, x, y = batch_for([LONG_DOC[:30], LONG_DOC[:10]], 64, [0, 1, 1], seed=2)
    tx, ty = trim_batch(x, y)
    w = tx.shape[1]
    assert 1 <= w < x.shape[1]
    assert torch.equal(tx, x[:, :w]) and torch.equal(ty, y[:, :w])
    assert (y[:, w:] == PAD_ID).all() and (ty[:, -1] != PAD_ID).any()
    # a causal stand-in model gives the same loss on the trimmed batch
    torch.manual_seed(0)
    emb, head = torch.nn.Embedding(64, 8), torch.nn.Linear(8, 64)

    def loss(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        h = emb(xb).cumsum(dim=1)  # (B, T, 8): position t sees only positions <= t
        logits = head(h)  # (B, T, V)
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, 64), yb.reshape(-1), ignore_index=PAD_ID
        )

    assert torch.allclose(loss(x, y), loss(tx, ty))
    all_pad = torch.zeros(2, 5, dtype=torch.long)
    assert trim_batch(all_pad, all_pad)[1].shape == (2, 1)


# ------------------------------------------------------------------------ QA (SPEC 2)


def test_documents_drops_empty_lines() -> None:
    assert documents("a\n\nb c\n") == ["a", "b c"]


def test_qa_layout_by_hand() -> None:
    vocab = Vocab.from_text("Q ab?Rome")
    example = QAExample("Q ab?", "Rome", "<hand>", 1)
    assert qa_string("Q ab?", "Rome", 14) == "Q ab?⁇Rome⁇□□□"
    x, y = qa_tensors(example, vocab, 14)
    assert vocab.decode(x) == "Q ab?⁇Rome⁇□□"
    assert vocab.decode(y) == "□□□□⁇Rome⁇□□□"
    assert x.dtype == y.dtype == torch.long and x.shape == y.shape == (13,)
    # the loss sees only ⁇Rome⁇: every question-predicting target is PAD (ignored)
    assert (y[:4] == PAD_ID).all() and y[4].item() == MASK_ID
    with pytest.raises(ValueError, match="11 characters"):
        qa_string("Q ab?", "Rome", 10)


def test_name_dataset_course_api(wiki: SpanCorruptionDataset) -> None:
    train = NameDataset.from_file(DATA / "birth_places_train.tsv", wiki)
    assert len(train) == 2000 and len(train.examples) == 2000
    assert train.vocab == wiki.vocab and train.vocab_size == 256 and train.block_size == 128
    assert train.PAD_CHAR == PAD_CHAR and train.MASK_CHAR == MASK_CHAR
    assert train.stoi is wiki.vocab.stoi and train.itos == wiki.itos
    ex = train.examples[0]
    x, y = train[0]
    assert x.shape == y.shape == (127,) and x.dtype == y.dtype == torch.long
    q = len(ex.question)
    assert (y[: q - 1] == PAD_ID).all()
    assert wiki.vocab.decode(y[q - 1 :]).rstrip(PAD_CHAR) == f"⁇{ex.answer}⁇"
    assert wiki.vocab.decode(x).startswith(f"{ex.question}⁇{ex.answer}⁇")
    xs, ys = train.tensors()
    assert xs.shape == ys.shape == (2000, 127)
    assert torch.equal(xs[0], x) and torch.equal(ys[0], y)
    # course form: the TSV content as a string
    dev = NameDataset(open(DATA / "birth_dev.tsv", encoding="utf-8").read(), wiki)
    assert len(dev) == 500


def test_non_ascii_place_is_kept(wiki: SpanCorruptionDataset) -> None:
    ds = NameDataset("Where was Hans Muster born?\tZürich\n", wiki)
    assert ds.examples[0].answer == "Zürich"
    x, y = ds[0]
    assert "⁇Zürich⁇" in wiki.vocab.decode(y)


def test_too_long_example_names_file_and_line(wiki: SpanCorruptionDataset, tmp_path: Path) -> None:
    path = tmp_path / "long.tsv"
    path.write_text("Where?\tRome\n" + "Q" * 130 + "\tParis\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{path}:2: QA string is 137 characters"):
        NameDataset.from_file(path, wiki)


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        ("a?\tRome\nno tab here\n", 2, "expected 'question<TAB>answer', found no tab"),
        ("a?\tRome\tParis\n", 1, "expected 'question<TAB>answer', found 2 tabs"),
        ("a?\tRome\n\n  \tParis\n", 3, "empty question"),
        ("a?\tRome\nb?\t  \n", 2, "empty answer"),
        ("a?\tRome\nb?\tNa\xefve\u2047\n", 2, "reserved character"),
    ],
)
def test_malformed_tsv(tmp_path: Path, content: str, line: int, problem: str) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as e:
        read_qa(path, labelled=True)
    msg = str(e.value)
    assert msg.startswith(f"{path}:{line}: ") and problem in msg and "\n" not in msg
    assert (e.value.source, e.value.line) == (str(path), line)


def test_an_empty_answer_is_an_unlabelled_question_in_a_file_read_as_it_comes(tmp_path: Path) -> None:
    path = tmp_path / "test.tsv"
    path.write_text("Where was A born?\tRome\nWhere was B born?\t\n", encoding="utf-8")
    assert [e.answer for e in read_qa(path)] == ["Rome", None]
    with pytest.raises(DataError, match=r"test.tsv:2: empty answer"):
        read_qa(path, labelled=True)  # a training file needs every answer


def test_lenient_formatting_accepted(tmp_path: Path) -> None:
    path = tmp_path / "ok.tsv"
    text = "\ufeffWhere was A born?\tRome\r\n\r\n   \r\nWhere was B born?\t Zürich \r\n\n"
    path.write_bytes(text.encode("utf-8"))
    got = read_qa(path)
    assert [(e.question, e.answer, e.line) for e in got] == [
        ("Where was A born?", "Rome", 1),
        ("Where was B born?", "Zürich", 4),
    ]
    assert got[0].source == str(path)
    assert parse_qa(text) == [
        QAExample("Where was A born?", "Rome", "<input>", 1),
        QAExample("Where was B born?", "Zürich", "<input>", 4),
    ]


def test_unlabelled_test_inputs() -> None:
    got = read_qa(DATA / "birth_test_inputs.tsv")
    assert len(got) == 437
    assert all(e.answer is None for e in got)
    assert got[0].question == "Where was Adam Bright born?" and got[-1].line == 437
    with pytest.raises(DataError, match=r"birth_test_inputs.tsv:1: .*found no tab"):
        read_qa(DATA / "birth_test_inputs.tsv", labelled=True)


def test_labelled_files() -> None:
    dev = read_qa(DATA / "birth_dev.tsv")
    assert len(dev) == 500 and dev[0] == QAExample(
        "Where was Bryan Dubreuiel born?", "Atlanta", str(DATA / "birth_dev.tsv"), 1
    )
    with pytest.raises(DataError, match="unlabelled"):
        read_qa(DATA / "birth_dev.tsv", labelled=False)


def test_mixed_file_is_an_error() -> None:
    with pytest.raises(DataError, match=r"^mixed.tsv:1: .*found no tab \(line 3 has one"):
        parse_qa("q1?\n\nq2?\tRome\n", "mixed.tsv")


def test_unlabelled_example_cannot_be_trained(wiki: SpanCorruptionDataset) -> None:
    ex = QAExample("Where?", None, "t.tsv", 9)
    with pytest.raises(DataError, match="^t.tsv:9: "):
        qa_tensors(ex, wiki.vocab, 128)


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.tsv"
    path.write_bytes("a?\tRome\nb?\tZürich\n".encode("latin-1"))
    with pytest.raises(DataError, match=rf"^{path}:2: not valid UTF-8"):
        read_qa(path)


def test_read_text_normalises_newlines(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"\xef\xbb\xbfone\r\ntwo\rthree\n")
    assert read_text(path) == "one\ntwo\nthree\n"
    assert documents(read_text(DATA / "wiki.txt"))[-1] != ""
