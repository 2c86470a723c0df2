"""Recall decoded several characters a step from guesses looked up in the training corpus
(answering/drafts.py, model/generate.py ``_drafted``): the guesses, and that a model asked with
them recalls and answers exactly as without them, in fewer steps when it stored its lines."""

from __future__ import annotations

import pytest

import attnlab
from attnlab.answering.drafts import CorpusDraft
from attnlab.data.corpus import recall_string
from attnlab.data.datasets import read_qa, read_text
from attnlab.data.vocab import MASK_ID, Vocab
from tests.conftest import DATA
from tests.tiny_runs import memorise, train_tiny

CORPUS = "Ada Brook. Ada Brook was born in Paris.\nBela Kron. Bela Kron was born in Lima and sang.\n"


def test_a_guess_is_what_follows_the_text_so_far_in_the_corpus_up_to_the_line_end():
    vocab = Vocab.from_text(CORPUS)
    draft = CorpusDraft(CORPUS, vocab, guess_chars=12)
    assert vocab.decode(draft(0, vocab.encode("Bela Kron. "))) == "Bela Kron wa"
    guess = draft(0, vocab.encode("Kron was born in Lima and"))  # the line ends: the recall's closing mark
    assert guess[-1] == MASK_ID and vocab.decode(guess[:-1]) == " sang."
    assert draft(0, vocab.encode("Lima was born in Ada")) == []  # nowhere in the corpus: no guess


def test_the_longest_context_found_decides_the_guess():
    corpus = "Ann Lee. Ann Lee was born in Rome.\nBo Tan. Bo Tan was born in Oslo.\n"
    vocab = Vocab.from_text(corpus)
    draft = CorpusDraft(corpus, vocab, guess_chars=4)
    # " was born in " is in both lines; with the name before it, only in Bo Tan's
    assert vocab.decode(draft(0, vocab.encode("Bo Tan. Bo Tan was born in "))) == "Oslo"
    assert vocab.decode(draft(0, vocab.encode("was born in "))) == "Rome"  # 8 characters: the first line


def test_a_guess_stops_at_a_character_the_model_cannot_write():
    vocab = Vocab.from_text("Ada Brook. Ada was born in Pari")
    draft = CorpusDraft("Ada Brook. Ada was born in Paris\u00e9 ok.\n", vocab, guess_chars=12)
    assert vocab.decode(draft(0, vocab.encode("Ada Brook. Ada "))) == "was born in "
    assert vocab.decode(draft(0, vocab.encode("Brook. Ada was born in "))) == "Paris"


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A tiny recall model of data/wiki.txt (the course's corpus, which a model without a fact
    set recalls) that has its first six people's recall strings by heart."""
    model = attnlab.load(train_tiny(tmp_path_factory.mktemp("drafts") / "run"), device="cpu")
    lines = read_text(DATA / "wiki.txt").split("\n")[:6]
    memorise(model.gpt, model.vocab, [recall_string(line, model.config.recall_chars) for line in lines], 300)
    return model, lines


def test_asking_with_the_corpus_s_guesses_answers_as_without_in_fewer_steps(stored):
    model, lines = stored
    assert isinstance(model.recall_draft(), CorpusDraft)  # the course's corpus, no fact set recorded
    names = {line.split(".")[0] for line in lines}
    questions = [e.question for e in read_qa(DATA / "birth_places_train.tsv") if e.question[10:-6] in names]
    assert questions
    calls = []
    run = model.gpt.run
    model.gpt.run = lambda *a, **k: calls.append(1) or run(*a, **k)
    try:
        drafted = model.ask(questions, abstain=None)
        with_draft = len(calls)
        model._draft, calls[:] = False, []  # as a model whose corpus cannot be read
        assert model.recall_draft() is None
        plain = model.ask(questions, abstain=None)
    finally:
        del model.gpt.run
        model._draft = None
    assert [(a.answer, a.recalled) for a in drafted] == [(a.answer, a.recalled) for a in plain]
    assert [a.confidence for a in drafted] == pytest.approx([a.confidence for a in plain], rel=1e-4)
    assert any(a.recalled.startswith(line[:20]) for a in plain for line in lines)  # it did store them
    assert with_draft < len(calls)


def test_a_direct_model_has_no_guesses(tmp_path):
    model = attnlab.load(train_tiny(tmp_path / "direct", recall=False), device="cpu")
    assert model.config.qa_format == "direct" and model.recall_draft() is None


def test_a_drafted_recall_keeps_each_row_s_keys_and_values_as_a_plain_pass_computes_them(stored):
    """``generate(keep_cache=True)``: each row's kept keys and values are those one forward pass
    over its prompt and new tokens gives, for as many positions as were fed."""
    import torch

    from attnlab.model.attention import KVCache
    from attnlab.model.generate import generate

    model, lines = stored
    gpt, vocab = model.gpt, model.vocab
    prompts = [vocab.encode(line.split(".")[0] + ".") for line in lines[:4]] + [vocab.encode("Zed Q.")]
    read = generate(gpt, prompts, 40, stop_token=MASK_ID, draft=model.recall_draft(), keep_cache=True)
    assert read.kept is not None and len(read.kept) == len(prompts)
    for prompt, tokens, kept in zip(prompts, read.tokens, read.kept):
        n = kept[0][0].shape[1]
        assert len(prompt) <= n <= len(prompt) + len(tokens)
        caches = [KVCache() for _ in gpt.blocks]
        with torch.no_grad():
            gpt.run(torch.tensor([(prompt + tokens)[:n]]), caches=caches)
        for (k, v), cache in zip(kept, caches):
            assert torch.allclose(k, cache.k[0], atol=1e-5) and torch.allclose(v, cache.v[0], atol=1e-5)


def test_the_read_out_starts_from_the_recall_s_kept_keys_and_values(stored, monkeypatch):
    """Asked with guesses, the read-out reuses what the recall computed (and answers as
    without guesses: the test above)."""
    from attnlab.answering import knowledge

    model, lines = stored
    used = []
    aligned = knowledge._left_aligned
    monkeypatch.setattr(knowledge, "_left_aligned", lambda *a: used.append(1) or aligned(*a))
    name = lines[0].split(".")[0]
    model.ask([f"Where was {name} born?"], abstain=None)
    assert used
