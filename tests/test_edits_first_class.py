"""Edits as part of the model (issue 45, item 2): the model declares its edits and its codebook,
the codebook is applied through the hook point ``blocks.L.resid_post``, editing has an error of
its own, and one relation of a model of several relations can be edited (issue 49)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from attnlab.config.settings import ModelConfig
from attnlab.data.vocab import MASK_CHAR, Vocab
from attnlab.facts import correction, edit as editing, gated_edit as gated_editing
from attnlab.facts.errors import EditError, EditFailed
from attnlab.facts.trace import TraceError
from attnlab.model.codebook import attach, codebook_of
from attnlab.model.gpt import GPT
from attnlab.model.hooks import capturing

TEXT = "Ab Cd. Ab Cd was born in Lima. The capital is Oslo.?Where was born capital birthplace"


def _model(relations=(), seed=0) -> tuple[GPT, Vocab]:
    torch.manual_seed(seed)
    vocab = Vocab.from_text(TEXT)
    config = ModelConfig(vocab_size=len(vocab), block_size=64, n_layer=2, n_head=2, n_embd=16, dropout=0.0,
                         qa_format="recall", recall_chars=24, answer_chars=6, relations=relations)
    return GPT(config).eval(), vocab


def test_a_model_declares_its_edits_and_codebook():
    model, _ = _model()
    assert model.edits == [] and model.edit_codebook is None and codebook_of(model) is None
    assert "edits" in vars(model)  # an attribute of the model, not a getattr default
    book = attach(model, 1)
    assert codebook_of(model) is book and dict(model.named_children())["edit_codebook"] is book
    assert not any(k.startswith("edit_codebook") for k in model.state_dict())  # never in the weights


def test_the_codebook_patches_the_hook_point_and_a_deep_copy_carries_its_own():
    model, vocab = _model()
    book = attach(model, 1)
    x = torch.tensor([vocab.encode("Ab Cd. Ab")])
    with torch.no_grad():
        clean = model.run(x)[0]
        with capturing(model, ["blocks.1.resid_post"]) as cache:
            model.run(x)
        stream = cache["blocks.1.resid_post"]
    copied = copy.deepcopy(model)
    # One entry firing at every position of this text (its radius reaches them all), in the copy only.
    key = stream[0, 0]
    radius = float((stream[0] - key).norm(dim=-1).max()) + 1.0
    codebook_of(copied).add(key[None], torch.ones(1, key.shape[0]), torch.tensor([radius]), owner=1)
    with torch.no_grad():
        assert torch.equal(model.run(x)[0], clean)  # the original's codebook is still empty
        with capturing(copied, ["blocks.1.resid_post"]) as after:
            changed = copied.run(x)[0]
    assert not torch.equal(changed, clean)
    # The hook point reads the stream after the codebook: the value added everywhere.
    assert torch.allclose(after["blocks.1.resid_post"], stream + 1.0)
    assert len(book) == 0 and len(codebook_of(copied)) == 1


def test_edit_requests_raise_edit_errors_not_trace_errors():
    model, vocab = _model()
    docs = ["Ab Cd. Ab Cd was born in Lima."]
    with pytest.raises(EditError, match="no line of the corpus is about this person") as refused:
        correction.check_edit_request(model, vocab, "Cd Ab", "Lima", docs, None)
    assert not isinstance(refused.value, TraceError)
    model.edits = [{"id": 1, "person": "Ab Cd", "old_answer": "Lima", "place": "Oslo"}]
    with pytest.raises(EditError, match="already edited"):
        correction.check_edit_request(model, vocab, "Ab Cd", "Oslo", docs, None)
    assert issubclass(EditFailed, EditError) and issubclass(EditError, ValueError)
    model.config = dataclasses.replace(model.config, relations=[["sea", "Which sea is {subject} in?"]])
    with pytest.raises(EditError, match="--subject 'Cd Ab': no document of the corpus is about this subject"):
        correction.check_edit_request(model, vocab, "Cd Ab", "Lima", docs, None)  # a fact set's words


def test_one_relation_of_a_model_of_several_is_edited_with_its_cue_given():
    model, vocab = _model(relations=(("birthplace", "Where was {subject} born?"),
                                     ("capital", "What is the capital of {subject}?")))
    with pytest.raises(EditError, match="several relations .*name the one"):
        editing.question_about(model, "Ab Cd")
    with pytest.raises(EditError, match="no relation 'sea'"):
        editing.question_about(model, "Ab Cd", "sea")
    assert editing.question_about(model, "Ab Cd", "capital") == "What is the capital of Ab Cd?"
    target = editing.edit_input(model, vocab, "Ab Cd", "Oslo", "capital")
    tail = f"{MASK_CHAR}capital{MASK_CHAR}Oslo{MASK_CHAR}"
    assert target.text.endswith(tail)
    cue_at = len(target.text) - len(tail) + 1
    assert set(range(cue_at, cue_at + len("capital") + 1)) <= set(target.given)  # the cue and its mark: given
    assert target.place_at[-1] == cue_at + len("capital") + 1  # the answer after the cue
    # The edit also writes the subject's other answers after the edited recall: the recalled
    # line, the other relation's cue (birthplace) and the answer the model gives it.
    [other] = gated_editing.other_relation_texts(model, vocab, target, "capital")
    recalled = target.text[:target.text.index(MASK_CHAR)]
    answer = editing.answer_of(model, vocab, "Ab Cd", "birthplace")
    assert other == f"{recalled}{MASK_CHAR}birthplace{MASK_CHAR}{answer}{MASK_CHAR}"
    assert recalled and gated_editing.other_relation_texts(model, vocab, target, None) == []
    one, vocab1 = _model()
    plain = editing.edit_input(one, vocab1, "Ab Cd", "Oslo")
    assert plain.text.endswith(f"{MASK_CHAR}Oslo{MASK_CHAR}") and "capital" not in plain.text[-12:]


# A recall model of two relations that has memorised each island's line and both answers after it.
ISLES = ["Ara", "Bel", "Cor", "Dun", "Eth", "Fal", "Gan", "Hol"]
SEAS = ["North Sea", "South Sea", "Red Sea", "Dead Sea"]
CAPITALS = ["Lima", "Oslo", "Rome", "Kyiv", "Bern", "Riga", "Baku", "Nuuk"]
ISLE_RELATIONS = (("sea", "Which sea is {subject} in?"), ("capital", "What is the capital of {subject}?"))


@pytest.fixture(scope="module")
def isles():
    from attnlab.data.corpus import recall_string
    from tests.tiny_runs import memorise

    lines = {i: f"{i}. It lies in the {SEAS[k % 4]}. Its capital is {CAPITALS[k]}." for k, i in enumerate(ISLES)}
    answers = {i: {"sea": SEAS[k % 4], "capital": CAPITALS[k]} for k, i in enumerate(ISLES)}
    vocab = Vocab.from_text("\n".join(lines.values()) + "?" + "".join(q for _, q in ISLE_RELATIONS) + "seacapital")
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=len(vocab), block_size=96, n_layer=2, n_head=2, n_embd=48, dropout=0.0,
                         qa_format="recall", recall_chars=64, answer_chars=10, relations=ISLE_RELATIONS)
    model = GPT(config)
    texts = [recall_string(lines[i], 64, answers[i][r], r) for i in ISLES for r in ("sea", "capital")]
    memorise(model, vocab, texts, steps=1000)
    return model, vocab, texts


def test_an_edit_of_one_relation_leaves_the_subjects_other_relation_as_it_was(isles):
    """The recalled line is read by both relations, so the sea edit rewrites what the capital is
    read from; the edit writes the capital's answer after the edited line too (it moved for 6 of
    16 such edits of this model before it did)."""
    from attnlab.answering.evaluate import answer_questions
    from attnlab.data.datasets import QAExample

    model, vocab, texts = isles
    ask = lambda m, isle, r: answer_questions(m, vocab, [QAExample(dict(ISLE_RELATIONS)[r].format(subject=isle),  # noqa: E731
                                                                   None, "<test>", 1)])[0].answer
    negatives = gated_editing.Negatives.of(model, vocab, texts, 1)
    for k, isle in enumerate(ISLES[:4]):
        for relation, other, new in (("sea", "capital", SEAS[(k + 1) % 4]), ("capital", "sea", CAPITALS[(k + 3) % 8])):
            before = ask(model, isle, other)
            edited, g = gated_editing.gated_edit(model, vocab, isle, new, negatives, owner=1, relation=relation)
            assert ask(edited, isle, relation) == new and ask(model, isle, relation) != new
            assert ask(edited, isle, other) == before, (isle, relation, new)
            assert g.kept_relations == [other] and new in g.target.text


def test_a_quoting_models_edit_quotes_the_edited_sentence_and_keeps_the_other_relation():
    """A model that quotes the stating sentence before each answer (ModelConfig.quote) is edited
    in its own format: the edit input and the other relation's text carry the sentence as the
    edited recall states it, and the other relation's answer stays."""
    from attnlab.answering.evaluate import answer_questions
    from attnlab.data.datasets import QAExample
    from attnlab.data.corpus import CorpusIndex
    from attnlab.data.formats import text_format
    from attnlab.data.relations import Schema
    from tests.tiny_runs import memorise

    lines = [f"{i}. It lies in the {SEAS[k % 4]}. Its capital is {CAPITALS[k]}." for k, i in enumerate(ISLES)]
    asked = [QAExample(dict(ISLE_RELATIONS)[r].format(subject=i), a, "train.tsv", 1)
             for k, i in enumerate(ISLES) for r, a in (("sea", SEAS[k % 4]), ("capital", CAPITALS[k]))]
    vocab = Vocab.from_text("\n".join(lines) + "?" + "".join(q for _, q in ISLE_RELATIONS) + "seacapital")
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=len(vocab), block_size=160, n_layer=2, n_head=2, n_embd=48, dropout=0.0,
                         qa_format="recall", recall_chars=64, answer_chars=10, relations=ISLE_RELATIONS, quote=True)
    model = GPT(config)
    schema = Schema.from_list(ISLE_RELATIONS)
    texts = [text_format("recall").example_text(e, 64, CorpusIndex(lines), schema=schema, quote=True)[0] for e in asked]
    memorise(model, vocab, texts, steps=1000)
    ask = lambda m, isle, r: answer_questions(m, vocab, [QAExample(dict(ISLE_RELATIONS)[r].format(subject=isle),  # noqa: E731
                                                                   None, "<test>", 1)])[0]
    assert (ask(model, "Ara", "sea").answer, ask(model, "Ara", "sea").quoted) == ("North Sea", "It lies in the North Sea")
    target = editing.edit_input(model, vocab, "Ara", "Red Sea", "sea")
    assert target.text.endswith(f"{MASK_CHAR}sea{MASK_CHAR}It lies in the Red Sea{MASK_CHAR}Red Sea{MASK_CHAR}")
    assert target.place_at[-1] == len(target.text) - len("Red Sea") - 1  # the new place, after the quote
    [other] = gated_editing.other_relation_texts(model, vocab, target, "sea")
    assert other.endswith(f"{MASK_CHAR}capital{MASK_CHAR}Its capital is Lima{MASK_CHAR}Lima{MASK_CHAR}")
    negatives = gated_editing.Negatives.of(model, vocab, texts, 1)
    edited, _ = gated_editing.gated_edit(model, vocab, "Ara", "Red Sea", negatives, owner=1, relation="sea")
    assert ask(edited, "Ara", "sea").answer == "Red Sea" and ask(edited, "Ara", "capital").answer == "Lima"


def test_attnlab_edit_changes_one_relation_of_a_model_of_several(isles, tmp_path, capsys, monkeypatch):
    """The command line edits one relation (--relation), reports the subject's other relations
    before and after, records the relation with the edit, and refuses an edit that names none;
    it reads the checkpoint once per edit (its relations are checked on the model it edits)."""
    import json

    from attnlab import cli
    from attnlab.model import checkpoint
    from attnlab.model.checkpoint import load_model, save_checkpoint

    reads = []
    read = checkpoint.load_checkpoint
    monkeypatch.setattr(checkpoint, "load_checkpoint", lambda *a, **k: reads.append(a[0]) or read(*a, **k))

    model, vocab, _ = isles
    run = tmp_path / "run"
    save_checkpoint(run / "checkpoint.safetensors", model, vocab, meta={})
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"{i}. It lies in the {SEAS[k % 4]}. Its capital is {CAPITALS[k]}."
                                for k, i in enumerate(ISLES)) + "\n")
    base = ["edit", str(run), "--person", "Bel", "--place", "Red Sea", "--corpus", str(corpus), "--train-file", "",
            "--stat-lines", "0", "--eval-file", ""]
    assert cli.main([*base, "--out-dir", str(tmp_path / "none")]) == 2
    assert "several relations" in capsys.readouterr().err and not (tmp_path / "none").exists()
    # the course's dev file asks a question this model has no relation for: refused before any work
    assert cli.main([*base[:-1], "data/birth_dev.tsv", "--relation", "sea", "--out-dir", str(tmp_path / "none")]) == 2
    assert "matches no relation" in capsys.readouterr().err and not (tmp_path / "none").exists()
    reads.clear()
    assert cli.main([*base, "--relation", "sea", "--out-dir", str(tmp_path / "edited"), "--json"]) == 0
    assert len(reads) == 1, reads
    report = json.loads(capsys.readouterr().out)
    assert report["relation"] == "sea" and report["answer_after"] == "Red Sea"
    assert report["other_relations"] == {"capital": {"before": "Oslo", "after": "Oslo"}}
    edited, _, ckpt = load_model(tmp_path / "edited")
    assert ckpt.edits[-1]["relation"] == "sea" and editing.answer_of(edited, vocab, "Bel", "sea") == "Red Sea"
    assert editing.answer_of(edited, vocab, "Bel", "capital") == "Oslo"
    capsys.readouterr()
    assert cli.main(["edits", str(tmp_path / "edited")]) == 0  # the list names each edit's relation
    listed = capsys.readouterr().out.splitlines()
    assert listed[0] == "| edit | subject | relation | old answer | new answer | method | layer | parameters added |"
    assert listed[2].startswith(f"| 1 | Bel | sea | {ckpt.edits[-1]['old_answer']} | Red Sea | ")


def test_the_web_lab_edits_the_relation_it_is_given(isles, tmp_path):
    """`attnlab serve`'s edit takes subject, relation and value: the same library edit."""
    from attnlab.api import load
    from attnlab.data.datasets import QAExample
    from attnlab.model.checkpoint import save_checkpoint
    from attnlab.serve.lab import Lab, LabError, Run

    model, vocab, _ = isles
    save_checkpoint(tmp_path / "run" / "checkpoint.safetensors", model, vocab, meta={})
    corpus = [f"{i}. It lies in the {SEAS[k % 4]}. Its capital is {CAPITALS[k]}." for k, i in enumerate(ISLES)]
    dev = [QAExample(f"What is the capital of {i}?", CAPITALS[k], "dev.tsv", k + 1) for k, i in enumerate(ISLES)]
    lab = Lab([Run("run", load(tmp_path / "run", device="cpu"))], corpus, dev, tmp_path / "out", stat_lines=0)
    with pytest.raises(LabError, match="several relations"):
        lab.edit(0, "Cor", "Kyiv")
    report = lab.edit(0, "Cor", "Kyiv", relation="capital")
    assert report["question"] == "What is the capital of Cor?" and report["new_answer"] == "Kyiv"
    assert report["other_relations"]["sea"]["before"] == report["other_relations"]["sea"]["after"]
    assert report["others_changed"] == 0  # the other islands' capitals
