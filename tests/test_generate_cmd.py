"""`attnlab generate`: sampling filters, seeds, batching, the loop detector, `--loops`, and the
1/sqrt(d_head) score temperature."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab import cli
from attnlab.model.attention import VanillaAttention
from attnlab.model.checkpoint import save_checkpoint
from attnlab.config.settings import ModelConfig
from attnlab.model.generate import filter_logits
from attnlab.probing.loops import Loop, LoopReport, find_loop
from attnlab.model.gpt import GPT
from attnlab.model.generate import continue_texts
from attnlab.data.vocab import Vocab

VOCAB = Vocab.from_text("abcdefgh ?\n")


def tiny(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    model = GPT(ModelConfig(vocab_size=len(VOCAB), block_size=24, n_layer=2, n_head=2, n_embd=16, dropout=0.0))
    return model.eval()


# ---- sampling filters ----------------------------------------------------------------------
def test_top_k_keeps_exactly_k_even_with_ties():
    logits = torch.tensor([[1.0, 3.0, 3.0, 3.0, 0.0, 3.0], [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]])
    for k in (1, 2, 3, 6):
        kept = torch.isfinite(filter_logits(logits, 1.0, top_k=k))
        assert kept.sum(-1).tolist() == [k, k]
    kept = torch.isfinite(filter_logits(logits, 1.0, top_k=2))
    assert kept[1].tolist() == [True, True, False, False, False, False]
    assert all(logits[0, kept[0]] == 3.0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), p=st.floats(0.05, 0.99), tau=st.floats(0.3, 3.0))
def test_top_p_keeps_the_smallest_prefix_reaching_p(seed, p, tau):
    logits = torch.randn(1, 9, generator=torch.Generator().manual_seed(seed)) * 2
    probs = sorted(((float(v), i) for i, v in enumerate((logits[0] / tau).softmax(-1))), reverse=True)
    expected, mass = set(), 0.0
    for prob, i in probs:  # add tokens by falling probability until the mass reaches p
        expected.add(i)
        mass += prob
        if mass >= p:
            break
    kept = torch.isfinite(filter_logits(logits, tau, top_p=p))[0]
    assert set(kept.nonzero()[:, 0].tolist()) == expected


def test_temperature_divides_the_logits():
    logits = torch.randn(3, 7)
    for tau in (0.5, 1.0, 2.0):
        assert torch.allclose(filter_logits(logits, tau).softmax(-1), (logits / tau).softmax(-1))


def test_seed_reproducibility_and_top_k_one_is_greedy():
    model = tiny()
    prompts = ["ab", "hgf c"]
    a = continue_texts(model, VOCAB, prompts, max_new=15, temperature=1.0, seed=3)
    b = continue_texts(model, VOCAB, prompts, max_new=15, temperature=1.0, seed=3)
    c = continue_texts(model, VOCAB, prompts, max_new=15, temperature=1.0, seed=4)
    assert a == b and a != c
    greedy = continue_texts(model, VOCAB, prompts, max_new=15)
    assert continue_texts(model, VOCAB, prompts, max_new=15, temperature=1.0, top_k=1, seed=9) == greedy


def test_batched_greedy_equals_one_prompt_at_a_time():
    model = tiny(1)
    prompts = ["a", "bcd ef", "h?"]
    batched = continue_texts(model, VOCAB, prompts, max_new=10)
    alone = [continue_texts(model, VOCAB, [p], max_new=10)[0] for p in prompts]
    assert batched == alone


# ---- loop detection ------------------------------------------------------------------------
def test_loops_on_constructed_sequences():
    assert find_loop("abcabcabcabc") == Loop(period=3, start=0, length=12)
    assert find_loop("the start: xyxyxyxyxyxy") == Loop(period=2, start=11, length=12)
    assert find_loop("hello " + "z" * 15) == Loop(period=1, start=6, length=15)
    assert find_loop("abcdefghijklmnopqrstuvwxyz") is None
    assert find_loop("abababab" + "c") is None  # a loop must reach the end
    # the smallest period is reported, not a multiple of it
    assert find_loop("abababababababab").period == 2
    # repeat and length thresholds
    assert find_loop("qabcabc", min_repeats=2, min_length=1) == Loop(3, 1, 6)
    assert find_loop("qabcabc", min_repeats=3, min_length=1) is None
    assert find_loop("aaaaa", min_length=6) is None
    assert find_loop([1, 2, 1, 2, 1, 2], min_length=6) == Loop(2, 0, 6)


def _brute_force(seq: str, min_repeats: float, min_length: int) -> Loop | None:
    """The module's definition, checked literally over every period and start."""
    n = len(seq)
    for p in range(1, n + 1):
        for s in range(n):
            periodic = all(seq[i] == seq[i + p] for i in range(s, n - p))
            if periodic and n - s >= min_repeats * p and n - s >= min_length:
                return Loop(p, s, n - s)
    return None


@settings(max_examples=150, deadline=None)
@given(seq=st.text(alphabet="ab", max_size=24), reps=st.sampled_from([1.0, 2.0, 3.0]),
       length=st.integers(1, 8))
def test_loop_detector_matches_the_definition(seq, reps, length):
    assert find_loop(seq, min_repeats=reps, min_length=length) == _brute_force(seq, reps, length)


def test_loop_report_histogram():
    report = LoopReport()
    for seq in ["xyzzzzzzzzzzzzzzz", "abababababababab", "cdcdcdcdcdcdcdcd", "no loop here"]:
        report.add(find_loop(seq))
    assert (report.total, report.looping) == (4, 3)
    assert dict(report.periods) == {1: 1, 2: 2}
    assert "3/4 continuations loop (75.0%)" in report.summary()


# ---- the command -----------------------------------------------------------------------------
@pytest.fixture
def checkpoint(tmp_path, monkeypatch):
    return save_checkpoint(tmp_path / "ckpt.safetensors", tiny(), VOCAB, {"step": 0})


def test_generate_command_prints_each_continuation(checkpoint, capsys):
    assert cli.main(["generate", str(checkpoint), "ab", "cd e", "--max-new", "8"]) == 0
    out = capsys.readouterr().out
    expected = continue_texts(tiny(), VOCAB, ["ab", "cd e"], max_new=8)
    assert f"[1] ab | {expected[0]}" in out and f"[2] cd e | {expected[1]}" in out
    assert out.count("no loop") + out.count("loops with period") == 2


def test_generate_command_loop_statistics(checkpoint, tmp_path, capsys):
    prompts = tmp_path / "q.tsv"
    prompts.write_text("abc\tx\nhhh\ty\nbad\tz\n")
    assert cli.main(["generate", str(checkpoint), "--loops", str(prompts), "--max-new", "20"]) == 0
    out = capsys.readouterr().out
    texts = continue_texts(tiny(), VOCAB, ["abc", "hhh", "bad"], max_new=20)
    looping = sum(find_loop(t) is not None for t in texts)
    assert f"{looping}/3 continuations loop" in out


def test_generate_command_errors_in_one_line(checkpoint, capsys):
    assert cli.main(["generate", str(checkpoint), "xyz"]) == 2  # x is not in the vocabulary
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'x'" in err
    with pytest.raises(SystemExit) as refused:  # the parser checks the flag's bound
        cli.main(["generate", str(checkpoint), "ab", "--top-p", "0"])
    assert refused.value.code == 2 and "argument --top-p: must be a finite number in (0, 1]" in capsys.readouterr().err


# ---- temperature of the scores (the 1/sqrt(d_head) factor) ----------------------------------
@torch.no_grad()
def _score_variance(attn: VanillaAttention, x: torch.Tensor) -> tuple[float, float]:
    q, k, scale = attn.queries_keys(x, torch.arange(x.shape[1])[None])
    scores = q @ k.transpose(-2, -1)  # (B, h, T, T), unscaled
    off = ~torch.eye(x.shape[1], dtype=torch.bool)  # distinct positions: independent inputs
    return float((scores * scale)[..., off].var()), float(scores[..., off].var())


def test_scaled_scores_have_unit_variance_at_unit_variance_queries_and_keys():
    torch.manual_seed(0)
    C, h = 256, 4
    d_head = C // h
    attn = VanillaAttention(ModelConfig(vocab_size=8, block_size=32, n_embd=C, n_head=h, dropout=0.0))
    # weights N(0, 1/C) and unit-variance inputs give unit-variance query and key components,
    # so q.k sums d_head products of variance 1: variance d_head, and 1 after 1/sqrt(d_head)
    with torch.no_grad():
        for lin in (attn.query, attn.key):
            lin.weight.normal_(0.0, 1.0 / math.sqrt(C))
            lin.bias.zero_()
    x = torch.randn(16, 32, C)
    scaled, raw = _score_variance(attn, x)
    assert scaled == pytest.approx(1.0, rel=0.15)
    assert raw == pytest.approx(d_head, rel=0.15)


def test_score_variance_at_the_models_init():
    # With the model's N(0, 0.02) weights a unit-variance input gives query and key components of
    # variance C * 0.02^2, so the scaled scores have variance (C * 0.02^2)^2: small at the start.
    torch.manual_seed(0)
    C, h = 256, 4
    attn = GPT(ModelConfig(vocab_size=8, block_size=32, n_embd=C, n_head=h, n_layer=1,
                           dropout=0.0)).blocks[0].attn
    scaled, raw = _score_variance(attn, torch.randn(16, 32, C))
    var_qk = C * 0.02**2
    assert scaled == pytest.approx(var_qk**2, rel=0.25)
    assert raw == pytest.approx(var_qk**2 * (C // h), rel=0.25)


def test_survey_loops_counts_every_continuation_and_keeps_the_first_looping_ones(monkeypatch):
    from attnlab.model import generate as generating
    from attnlab.probing.loops import survey_loops

    made = {"ab": "cdcdcdcdcdcdcdcd", "ba": "efgh", "aa": "abababababababab", "bb": "hhhhhhhhhhhhhhhh"}
    monkeypatch.setattr(generating, "continue_texts", lambda model, vocab, prompts, **kw: [made[p] for p in prompts])
    survey = survey_loops(None, VOCAB, list(made), max_new=16, show=2, min_repeats=3, min_length=12)
    assert (survey.report.total, survey.report.looping) == (4, 3)
    assert [(p, t) for p, t, _ in survey.examples] == [("ab", made["ab"]), ("aa", made["aa"])]
    assert [loop.period for _, _, loop in survey.examples] == [2, 2]
