"""The mechanisms of the fast knowledge recipes (docs/guides/knowledge.md): the warmup-stable-decay
schedule, Muon's parameter groups and their checkpointed state, and the copy read-out of the
recall answer format. Accuracy and speed are the benchmarks' business (benchmarks/knowledge.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attnlab.model.checkpoint import load_checkpoint
from attnlab.config.settings import ModelConfig, TrainConfig
from attnlab.answering.knowledge import SpanConstraint, WholeWords, answer_by_recall, read_best_spans
from attnlab.model.gpt import GPT
from attnlab.training.pipeline import pretrain
from attnlab.training.trainer import CombinedOptimizer, lr_at, make_optimizer, muon_weights
from attnlab.data.vocab import MASK_ID, Vocab
from tests.tiny_runs import memorise


def test_wsd_holds_the_peak_then_decays_linearly_to_the_floor():
    c = TrainConfig(learning_rate=1e-2, warmup_tokens=100, lr_floor=0.1, schedule="wsd", decay_fraction=0.25)
    final = 1100  # 1,000 tokens after warmup: stable until 850, decay over the last 250
    assert lr_at(50, c, final) == pytest.approx(5e-3)  # warmup unchanged
    assert lr_at(100, c, final) == pytest.approx(1e-2)
    assert lr_at(850, c, final) == pytest.approx(1e-2)  # still the peak at the start of the decay
    assert lr_at(975, c, final) == pytest.approx(1e-2 * (1 - 0.9 * 0.5))  # halfway down, linear
    assert lr_at(1100, c, final) == pytest.approx(1e-3)
    assert lr_at(5000, c, final) == pytest.approx(1e-3)  # the floor is held
    cosine = dataclasses.replace(c, schedule="cosine")
    assert lr_at(850, cosine, final) < 1e-2  # cosine is already decaying there


def test_muon_takes_the_blocks_linear_weights_and_adamw_the_rest(tiny_config):
    model = GPT(tiny_config)
    opt = make_optimizer(model, TrainConfig(optimizer="muon"), torch.device("cpu"))
    assert isinstance(opt, CombinedOptimizer)
    adamw, muon = opt.optimizers
    assert isinstance(muon, torch.optim.Muon)
    names = {id(p): n for n, p in model.named_parameters()}
    orthogonal = {names[id(p)] for g in muon.param_groups for p in g["params"]}
    rest = {names[id(p)] for g in adamw.param_groups for p in g["params"]}
    assert orthogonal == muon_weights(model)
    assert "blocks.0.mlp.0.weight" in orthogonal and "head.weight" in rest and "tok_emb.weight" in rest
    assert all(names[id(p)].endswith("bias") or "ln" in names[id(p)] or names[id(p)] in {"tok_emb.weight", "pos_emb"}
               for p in adamw.param_groups[1]["params"])
    assert orthogonal | rest == set(names.values()) and not orthogonal & rest
    # one learning rate for both: the trainer sets it on every group
    assert len(opt.param_groups) == len(adamw.param_groups) + len(muon.param_groups)


def test_a_muon_wsd_run_resumes_exactly(tiny_data, tmp_path, tiny_config):
    def run(name, steps, resume=False):
        config = TrainConfig(epochs=3, batch_size=4, learning_rate=3e-3, checkpoint_every=0, log_every=1,
                             warmup_tokens=50, seed=0, length_buckets=2, max_steps=steps,
                             optimizer="muon", schedule="wsd")
        return pretrain(tiny_config, config, corpus=tiny_data["corpus"], run_dir=tmp_path / name,
                        resume=resume, log=lambda _m: None)[0]

    full = run("full", 6)
    run("cut", 3)
    resumed = run("cut", 6, resume=True)
    for (n, p), q in zip(full.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(p, q), n
    state = load_checkpoint(tmp_path / "cut").optimizer_state
    assert any("momentum_buffer" in s for s in state["state"].values())  # Muon's state was saved


def test_span_constraint_allows_only_whole_words_of_the_source():
    vocab = Vocab.from_text("in Paris, Pa")
    source = vocab.encode("in Paris, Pa")
    spans = SpanConstraint([source], vocab)
    allowed = lambda so_far: {vocab.itos[i] for i in spans([vocab.encode(so_far)])[0].nonzero().flatten().tolist()}
    assert allowed("") == {"i", "P"}  # word starts only
    assert allowed("Pa") == {"r", "⁇"}  # "Pa" is a whole word at the end; "Par..." continues
    assert allowed("Par") == {"i"}  # no closing inside a word
    assert allowed("Paris") == {",", "⁇"}
    assert allowed("in P") == {"a"}
    ending = Vocab.from_text("at Rome .")
    tail = SpanConstraint([ending.encode("at Rome .")], ending)
    assert {ending.itos[i] for i in tail([ending.encode("Rome")])[0].nonzero().flatten().tolist()} == {"⁇"}
    empty = SpanConstraint([[]], vocab)([[]])
    assert bool(empty.all())  # nothing recalled: the read-out is free


def test_copy_read_out_answers_a_span_of_what_was_recalled(tiny_config):
    texts = ["Ann Lee. Ann Lee was born in Paris in 1900 .⁇Paris⁇",
             "Bo Kim. Bo Kim was born in Oslo .⁇Oslo⁇",
             "Cy Dunn. Cy Dunn was born in Rome .⁇Rome⁇"]
    vocab = Vocab.from_text("".join(texts).replace("⁇", ""))
    torch.manual_seed(0)
    model = GPT(dataclasses.replace(tiny_config, vocab_size=len(vocab), block_size=64, n_embd=32, qa_format="recall", recall_chars=60))
    memorise(model, vocab, texts, steps=150)
    for read_out in ("span", "copy", "free"):
        got = answer_by_recall(model, vocab, ["Ann Lee", "Bo Kim"], 60, read_out=read_out)
        assert [a.answer for a in got] == ["Paris", "Oslo"], read_out
    # an untrained model's copied answers are always whole words of its own recall
    torch.manual_seed(1)
    raw = GPT(dataclasses.replace(tiny_config, vocab_size=len(vocab), block_size=64, n_embd=32, qa_format="recall", recall_chars=60))
    for a in answer_by_recall(raw, vocab, ["Ann Lee", "Bo Kim", "Cy Dunn"], 60):
        recalled = a.recalled[len("Cy Dunn."):]  # the prompt is never copied from
        if a.complete and a.answer and recalled:
            assert a.answer in a.recalled


def test_a_training_value_the_recall_echoes_is_answered_where_no_span_spells_it(tiny_config):
    """The documents write "provinces", the answers say "Province": no span of the recall spells
    it, so without the model's answer values the span read-out cannot give it; with them it does,
    and a value the recall does not echo ("Lima") is never offered."""
    texts = ["Ann Lee. Ann Lee is one of the provinces of Peru .⁇Province⁇",
             "Bo Kim. Bo Kim is one of the states of Chad .⁇State⁇"]
    vocab = Vocab.from_text("".join(texts).replace("⁇", "") + "Lima")
    torch.manual_seed(0)
    config = dataclasses.replace(tiny_config, vocab_size=len(vocab), block_size=80, n_embd=32, qa_format="recall",
                                 recall_chars=50)
    model = GPT(config)
    memorise(model, vocab, texts, steps=200)
    names = ["Ann Lee", "Bo Kim"]
    spans_only = [a.answer for a in answer_by_recall(model, vocab, names, 50)]
    assert "Province" not in spans_only and "State" not in spans_only
    model.config = dataclasses.replace(config, answer_values=(("birthplace", ("Lima", "Province", "State")),))
    answers = answer_by_recall(model, vocab, names, 50)
    assert [a.answer for a in answers] == ["Province", "State"]
    assert all(a.complete and 0 < a.confidence <= 1 for a in answers)


def test_answer_values_are_offered_where_the_recall_writes_them_in_other_letters():
    from attnlab.answering.knowledge import AnswerValues
    from attnlab.data.corpus import alike

    vocab = Vocab.from_text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ,.-")
    config = ModelConfig(relations=(("kind", "What is {subject}?"), ("land", "Where is {subject}?")),
                         answer_values=(("kind", ("Province", "State", "Rural municipality", "Union")),
                                        ("land", ("Brazil", "Peru", "red shrimp", "marsh beetles", "Ines Holmamont"))))
    values = AnswerValues(config, vocab)

    def like(recalled, cue):
        return [vocab.decode(v) for v in values.like(recalled, cue)]

    assert like("one of the provinces of Peru, a rural area", "kind") == ["Province"]
    assert like("the rural municipalities of Peru", "kind") == ["Rural municipality"]  # word for word
    assert like("a Brazilian town", "land") == ["Brazil"]
    assert like("it eats marsh beetles", "land") == []  # written as it is: a span already
    assert like("it eats Marsh Beetles", "land") == ["marsh beetles"]  # in other letters
    assert like("it eats marsh snails and water beetles", "land") == []  # echoed, but not together
    assert like("it eats reef shrimp", "land") == []  # "red" is not "reef": short words must be equal
    assert like("Ines Holmard described it", "land") == []  # a name that opens like another is another
    assert like("a Brazilian town", "kind") == []  # values of another relation never join
    assert like("the Union of states", "nosuch") == []
    one = AnswerValues(ModelConfig(answer_values=(("birthplace", ("Paris",)),)), vocab)
    assert [vocab.decode(v) for v in one.like("born in Parisian exile", None)] == ["Paris"]  # uncued
    assert alike("territory", "territories") and alike("paris", "parisian") and not alike("johnson", "johnston")
    assert alike("peru", "peruvian") and not alike("mali", "malta")  # four letters alike at least
    rivers = AnswerValues(ModelConfig(answer_values=(("birthplace", ("Hymo", "Hymen", "Salva")),)), vocab)
    assert rivers.like("the river Hymo runs through it", None) == []  # "Hymo" is a river: no spelling of "Hymen"
    assert [vocab.decode(v) for v in rivers.like("the river Hymon runs", None)] == ["Hymo"]  # no river "Hymon"
    assert [vocab.decode(v) for v in rivers.like("it stands on the Salv", None)] == ["Salva"]  # a recall cut short


def test_a_value_is_scored_whole_never_as_its_prefix():
    from attnlab.answering.knowledge import WholeRun, _best_of_row

    vocab = Vocab.from_text("ab cd")
    run = [vocab.stoi[c] for c in "ab cd"]
    logp = torch.full((1 + len(run), len(vocab)), -5.0)
    for i, t in enumerate(run):
        logp[i, t] = -0.1  # each character likely
    logp[2, MASK_ID] = -0.1  # and closing after "ab" likelier than after "ab cd"
    words = WholeWords(vocab)
    assert _best_of_row(logp, 1, [list(run)], words)[0] == run[:2]  # a span closes at a word end
    assert _best_of_row(logp, 1, [WholeRun(run)], words)[0] == run  # a value only whole


def _span_score(model, context, span):
    """log P(span then the closing mark | context), by one plain forward pass."""
    from attnlab.data.vocab import MASK_ID

    seq = context + span + [MASK_ID]
    with torch.no_grad():
        logp = model(torch.tensor([seq]))[0][0].float().log_softmax(-1)
    return sum(float(logp[i - 1, seq[i]]) for i in range(len(context), len(seq)))


def test_span_read_out_answers_the_likeliest_whole_word_span(tiny_config):
    """Against brute force on an untrained model: every whole-word span of the source scored
    alone, context + span + closing mark; the read-out's choice is the best of them and its
    log-probabilities are that span's."""
    text = "Ann Lee. Ann Lee was born in New Paris, a town on the Loire river .⁇birthplace⁇"
    vocab = Vocab.from_text(text.replace("⁇", ""))
    words = WholeWords(vocab)
    for seed in range(4):
        torch.manual_seed(seed)
        model = GPT(dataclasses.replace(tiny_config, vocab_size=len(vocab), block_size=128, n_embd=32,
                                        qa_format="recall", recall_chars=80)).eval()
        context = vocab.encode(text)
        source = vocab.encode(text[len("Ann Lee."):text.index("⁇")])
        read = read_best_spans(model, vocab, [context], [source], 24, openings=len(vocab))
        spans = [source[s:e] for s in words.starts(source) for e in range(s + 1, min(s + 24, len(source)) + 1)
                 if words.ends(source, e)]
        scores = {vocab.decode(span): _span_score(model, context, span) for span in spans}
        chosen = vocab.decode(read.tokens[0][:-1])
        assert read.tokens[0][-1] == vocab.stoi["⁇"] and chosen in scores
        assert scores[chosen] == pytest.approx(max(scores.values()), abs=1e-4)
        assert sum(read.logprobs[0]) == pytest.approx(scores[chosen], abs=1e-4)


def test_span_read_out_scores_only_the_likeliest_openings(tiny_config):
    """With one opening, the answer starts with the character the model finds likeliest among
    the words' first characters."""
    text = "Bo Kim. Bo Kim was born in Oslo or Rome .⁇birthplace⁇"
    vocab = Vocab.from_text(text.replace("⁇", ""))
    torch.manual_seed(0)
    model = GPT(dataclasses.replace(tiny_config, vocab_size=len(vocab), block_size=96, n_embd=32,
                                    qa_format="recall", recall_chars=60)).eval()
    context, source = vocab.encode(text), vocab.encode(text[len("Bo Kim."):text.index("⁇")])
    with torch.no_grad():
        first = model(torch.tensor([context]))[0][0, -1].float()
    opening = max({source[s] for s in WholeWords(vocab).starts(source)}, key=lambda t: float(first[t]))
    read = read_best_spans(model, vocab, [context], [source], 16, openings=1)
    assert read.tokens[0][0] == opening


def test_span_read_out_of_a_batch_is_each_row_read_alone(tiny_config):
    """Contexts of different lengths read together, a few a pass, some with no word to read:
    each row's span and log-probabilities are those it gets alone."""
    texts = ["Ann Lee. Ann Lee was born in New Paris, a town .⁇birthplace⁇",
             "Bo Kim. Bo Kim was born in Oslo .⁇birthplace⁇",
             "Cy Dunmore-Hall. Cy was born in Rome or in Lima, they say .⁇birthplace⁇",
             "Di Ng. .⁇birthplace⁇"]
    vocab = Vocab.from_text("".join(texts).replace("⁇", ""))
    torch.manual_seed(1)
    model = GPT(dataclasses.replace(tiny_config, vocab_size=len(vocab), block_size=128, n_embd=32,
                                    qa_format="recall", recall_chars=80)).eval()
    contexts = [vocab.encode(t) for t in texts]
    sources = [vocab.encode(t[t.index(".") + 1:t.index("⁇")]) for t in texts]
    together = read_best_spans(model, vocab, contexts, sources, 16, rows_per_pass=3)
    for c, s, tokens, logprobs in zip(contexts, sources, together.tokens, together.logprobs):
        alone = read_best_spans(model, vocab, [c], [s], 16)
        assert tokens == alone.tokens[0]
        assert logprobs == pytest.approx(alone.logprobs[0], abs=1e-5)


def test_span_read_out_scores_few_runs_and_answers_as_scoring_every_run(monkeypatch):
    """The shipped model's recalls of a few dev people: the read-out scores the likeliest
    opening's runs, then only runs whose first character beats the best span found; its spans
    and log-probabilities are those that scoring every candidate run in one pass gives, from
    fewer scored characters."""
    from pathlib import Path

    from attnlab.answering import knowledge
    from attnlab.model.checkpoint import load_model

    shipped = Path(__file__).resolve().parents[1] / "models" / "cpu"
    model, vocab, _ = load_model(shipped, device="cpu")
    names = ["Ralf Wadephul", "Alfred Mele", "Gustav Ludwig Hertz", "Jan Lenica", "Lindsay Lohan", "Rumi"]
    with torch.no_grad():
        recalls = knowledge._recall_batch(model, vocab, names, model.config.recall_chars)
    contexts = [r.text + [MASK_ID] for r in recalls]
    sources = [r.text[r.prompt_len:] for r in recalls]
    scored: list[int] = []
    score_all = knowledge._KeptContexts.best_spans

    def counting(self, runs, chooser):
        scored.append(sum(len(run) for rows in runs for run in rows))
        return score_all(self, runs, chooser)

    monkeypatch.setattr(knowledge._KeptContexts, "best_spans", counting)
    read = read_best_spans(model, vocab, contexts, sources, model.config.answer_chars, rows_per_pass=len(names))
    bounded = sum(scored)
    with torch.no_grad():
        kept = knowledge._KeptContexts(model, contexts)
        chooser = WholeWords(vocab)
        runs = [chooser.candidates(s, min(model.config.answer_chars, model.config.block_size - len(c)),
                                   kept.first[i], knowledge.SPAN_OPENINGS)
                for i, (c, s) in enumerate(zip(contexts, sources))]
        every = score_all(kept, runs, chooser)
    assert bounded < sum(len(run) for rows in runs for run in rows)
    for tokens, logprobs, (span, expected) in zip(read.tokens, read.logprobs, every):
        assert tokens == span + [MASK_ID]
        assert logprobs == pytest.approx(expected, abs=1e-4)


def test_mix_people_keeps_the_first_n_trainees_held_out_and_unlisted_people(tiny_data):
    from attnlab.data.datasets import read_text
    from attnlab.training.pipeline import _lm_batches
    from tests.conftest import PEOPLE

    text = read_text(tiny_data["corpus"])
    vocab = Vocab.from_text(text)
    model = ModelConfig(vocab_size=len(vocab), block_size=80, n_layer=1, n_head=1, n_embd=8,
                        qa_format="recall", recall_chars=60)
    config = TrainConfig(objective="lm", mix_ratio=3 / 13, mix_people=3, holdout_fraction=0.25, batch_size=4)
    logged = []
    batches, described = _lm_batches(text, vocab, model, config, tiny_data["corpus"], tiny_data["train"],
                                     (), "cpu", log=logged.append)
    rows = [vocab.decode([t for t in row.tolist() if t]) for row in batches.x]
    seen = "".join(rows)
    mixed, left_out, held_out = PEOPLE[:3], PEOPLE[3:9], PEOPLE[9:]
    for name, place in mixed:  # their line, then their place
        assert f"{name}. {name} was born in {place} and lived there.⁇{place}" in seen
    for name, _ in left_out:
        assert f"{name}." not in seen
    for name, place in held_out:  # a plain line: never followed by its place
        assert f"{name}. {name} was born" in seen and f"there.⁇{place}" not in seen.split(f"{name}.")[1][:60]
    assert "Where was everyone born" in seen  # lines of people not in the training file stay
    assert "6 lines of other training-file people left out" in logged[-1]


def test_subject_order_hashed_mixes_and_holds_out_a_sample_the_file_order_does_not_set(tiny_data):
    """Under subject_order "hashed" pretraining mixes in the first three people and holds out
    the last three of an order fixed by a hash of each question, not the file's first and last."""
    import hashlib

    from attnlab.data.datasets import read_text
    from attnlab.training.pipeline import _lm_batches
    from tests.conftest import PEOPLE

    text = read_text(tiny_data["corpus"])
    vocab = Vocab.from_text(text)
    model = ModelConfig(vocab_size=len(vocab), block_size=80, n_layer=1, n_head=1, n_embd=8,
                        qa_format="recall", recall_chars=60)
    config = TrainConfig(objective="lm", mix_ratio=3 / 13, mix_people=3, holdout_fraction=0.25, batch_size=4,
                         subject_order="hashed")
    batches, _ = _lm_batches(text, vocab, model, config, tiny_data["corpus"], tiny_data["train"], (), "cpu",
                             log=lambda _m: None)
    seen = "".join(vocab.decode([t for t in row.tolist() if t]) for row in batches.x)
    ranked = sorted(PEOPLE, key=lambda p: hashlib.blake2b(f"Where was {p[0]} born?".encode(), digest_size=8).digest())
    assert ranked[:3] != PEOPLE[:3]  # the fixture's file order is not the hashed one
    for name, place in ranked[:3]:
        assert f"{name}. {name} was born in {place} and lived there.⁇{place}" in seen
    for name, _ in ranked[3:9]:
        assert f"{name}." not in seen
    for name, place in ranked[9:]:
        assert f"{name}. {name} was born" in seen and f"there.⁇{place}" not in seen.split(f"{name}.")[1][:60]


def test_read_out_swaps_in_pretraining_add_swapped_places_of_the_mixed_people_only(tiny_data):
    from attnlab.data.datasets import read_text
    from attnlab.data.vocab import PAD_ID
    from attnlab.training.pipeline import _lm_batches
    from tests.conftest import PEOPLE

    text = read_text(tiny_data["corpus"])
    vocab = Vocab.from_text(text)
    model = ModelConfig(vocab_size=len(vocab), block_size=80, n_layer=1, n_head=1, n_embd=8,
                        qa_format="recall", recall_chars=60)
    config = TrainConfig(objective="lm", mix_ratio=3 / 13, mix_people=3, holdout_fraction=0.25, batch_size=4,
                         read_out_swaps=2)
    batches, described = _lm_batches(text, vocab, model, config, tiny_data["corpus"], tiny_data["train"],
                                     (), "cpu", log=lambda _m: None)
    inputs = "".join(vocab.decode([t for t in row.tolist() if t]) for row in batches.x)
    scored = "".join(vocab.decode([t for t in row.tolist() if t != PAD_ID]) for row in batches.y)
    assert "6 swapped-place read-outs" in described
    places = {place for _, place in PEOPLE[:3]}
    for name, place in PEOPLE[:3]:  # the true line once, scored whole; two swapped copies
        copies = inputs.split(f"{name}. {name} was born in ")[1:]
        assert len(copies) == 3 and sum(not c.startswith(place + " ") for c in copies) == 2
        assert all(c.split(" ")[0] in places for c in copies)
        assert scored.count(f" {name} was born in ") == 1  # a swapped line is context, never a target
    for name, _ in PEOPLE[3:9]:  # people outside the mix are neither mixed nor swapped
        assert f"{name}." not in inputs



@pytest.mark.parametrize("objective", ["lm", "span"])
def test_read_out_swaps_in_pretraining_without_mixed_people_is_an_error(tiny_data, tmp_path, tiny_config, objective):
    config = TrainConfig(objective=objective, read_out_swaps=2, epochs=1, batch_size=4, checkpoint_every=0)
    with pytest.raises(ValueError, match="needs the lm objective with --mix-ratio"):
        pretrain(tiny_config, config, corpus=tiny_data["corpus"], run_dir=tmp_path / objective, log=lambda _m: None)


def test_read_out_people_add_place_only_examples_of_the_other_trainees(tiny_data):
    from attnlab.data.datasets import read_text
    from attnlab.data.vocab import PAD_ID
    from attnlab.training.pipeline import _recall_qa_batches
    from tests.conftest import PEOPLE

    vocab = Vocab.from_text(read_text(tiny_data["corpus"]))
    model = ModelConfig(vocab_size=len(vocab), block_size=80, n_layer=1, n_head=1, n_embd=8,
                        qa_format="recall", recall_chars=60)
    config = TrainConfig(mix_people=3, read_out_people=4, holdout_fraction=0.25, batch_size=4)
    batches, count = _recall_qa_batches(tiny_data["train"], tiny_data["corpus"], vocab, model, config, "cpu")
    assert count == 7
    inputs = "".join(vocab.decode([t for t in row.tolist() if t]) for row in batches.x)
    scored = "".join(vocab.decode([t for t in row.tolist() if t != PAD_ID]) for row in batches.y)
    for name, place in PEOPLE[:3]:  # pretrained people: line and place, all scored
        assert f" {name} was born in {place} and lived there.⁇{place}⁇" in scored
    for name, place in PEOPLE[3:7]:  # read-out people: the line is given, only the place is scored
        assert f"{name}. {name} was born in {place} and lived there.⁇{place}" in inputs
        assert f"{name} was born" not in scored
    for name, _ in PEOPLE[7:]:  # beyond the count, and the held-out tail, are never seen
        assert f"{name}." not in inputs
    alone, _ = _recall_qa_batches(tiny_data["train"], tiny_data["corpus"], vocab, model,
                                  dataclasses.replace(config, read_out_people=0), "cpu")
    assert "".join(vocab.decode([t for t in row.tolist() if t]) for row in alone.x).count(" was born in ") == 3


def _finetuning_rows(tiny_data, **options):
    """A --mix-people 3 recipe's recall finetuning batches on the tiny data, plain and with
    ``options``: (vocab, plain batches, batches with the options, question counts)."""
    from attnlab.data.datasets import read_text
    from attnlab.training.pipeline import _recall_qa_batches

    vocab = Vocab.from_text(read_text(tiny_data["corpus"]))
    model = ModelConfig(vocab_size=len(vocab), block_size=80, n_layer=1, n_head=1, n_embd=8,
                        qa_format="recall", recall_chars=60)
    config = TrainConfig(mix_people=3, holdout_fraction=0.25, batch_size=4)
    plain, count = _recall_qa_batches(tiny_data["train"], tiny_data["corpus"], vocab, model, config, "cpu")
    changed, same = _recall_qa_batches(tiny_data["train"], tiny_data["corpus"], vocab, model,
                                       dataclasses.replace(config, **options), "cpu")
    return vocab, plain, changed, (count, same)


def test_read_out_swaps_add_swapped_place_examples_of_the_finetuning_people_only(tiny_data):
    from tests.conftest import PEOPLE

    vocab, plain, swapped, _ = _finetuning_rows(tiny_data, read_out_swaps=2)
    text = lambda b: "".join(vocab.decode([t for t in row.tolist() if t]) for row in b.x)  # noqa: E731
    assert text(plain).count(" was born in ") == 3
    assert text(swapped).count(" was born in ") == 3 + 3 * 2  # two swapped copies of each of the 3
    places = {place for _, place in PEOPLE[:3]}
    for name, place in PEOPLE[:3]:
        copies = [chunk for chunk in text(swapped).split(f"{name}. {name} was born in ")[1:]]
        assert sum(not chunk.startswith(place + " ") for chunk in copies) == 2  # the place swapped
        assert all(chunk.split(" ")[0] in places for chunk in copies)  # for a finetuning person's
    for name, _ in PEOPLE[3:]:  # nobody outside the finetuning people is seen
        assert f"{name}." not in text(swapped)


def test_a_fractional_read_out_swaps_count_draws_once_more_for_that_share_of_the_people(tiny_data):
    vocab, plain, swapped, _ = _finetuning_rows(tiny_data, read_out_swaps=1.34)
    text = lambda b: "".join(vocab.decode([t for t in row.tolist() if t]) for row in b.x)  # noqa: E731
    assert text(swapped).count(" was born in ") == 3 + 3 + 1  # one copy each, and one more for 1 of 3
    _, _, third, _ = _finetuning_rows(tiny_data, read_out_swaps=1 / 3)
    assert text(third).count(" was born in ") == 3 + 1


def test_replay_lines_adds_every_corpus_line_as_pretraining_read_it(tiny_data):
    from attnlab.data.datasets import documents, read_text
    from attnlab.data.vocab import PAD_ID

    vocab, plain, replayed, (count, same) = _finetuning_rows(tiny_data, replay_lines=True)
    scored = lambda b: "".join(vocab.decode([t for t in row.tolist() if t != PAD_ID]) for row in b.y)  # noqa: E731
    assert count == same == 3  # the questions are the same; the lines are added to them
    lines = documents(read_text(tiny_data["corpus"]))
    for line in lines:  # every line, held-out people's too
        assert line[1:60] + "⁇" in scored(replayed)  # cut at the recalled characters, no place
    assert sum(line[1:60] + "⁇" not in scored(plain) for line in lines) >= len(lines) - 3  # not without it


def test_open_book_read_out_reads_the_place_from_the_gold_line(tiny_config, tiny_data):
    from attnlab.answering.knowledge import read_out_given_lines
    from attnlab.data.corpus import CorpusIndex
    from attnlab.data.datasets import QAExample, documents, read_text

    lines = ["Ann Lee. Ann Lee was born in Paris in 1900 .", "Bo Kim. Bo Kim was born in Oslo ."]
    texts = [lines[0] + "⁇Paris⁇", lines[1] + "⁇Oslo⁇"]
    vocab = Vocab.from_text("".join(lines))
    torch.manual_seed(0)
    model = GPT(dataclasses.replace(tiny_config, vocab_size=len(vocab), block_size=64, n_embd=32,
                                    qa_format="recall", recall_chars=60))
    memorise(model, vocab, texts, steps=150)
    asked = [QAExample(f"Where was {n} born?", p, "t.tsv", i) for i, (n, p) in enumerate([("Ann Lee", "Paris"), ("Bo Kim", "Oslo")], 1)]
    got = read_out_given_lines(model, vocab, CorpusIndex(lines), asked)
    assert [a.answer for a in got] == ["Paris", "Oslo"]
    assert all(a.recalled == line for a, line in zip(got, lines))
    with pytest.raises(ValueError, match="t.tsv:1: no corpus line"):
        read_out_given_lines(model, vocab, CorpusIndex(lines[1:]), asked[:1])


def _scratch_mask(spans: SpanConstraint, chosen: list[list[int]]) -> torch.Tensor:
    """The copy read-out's masks computed from scratch, the source scanned again at every call
    (how SpanConstraint computed them before it kept each row's matches)."""
    mask = torch.zeros(len(spans.sources), spans.vocab_size, dtype=torch.bool)
    for row, (source, so_far) in enumerate(zip(spans.sources, chosen)):
        starts = spans.occurrences(source, so_far)
        if not starts:
            mask[row] = True
            continue
        n = len(so_far)
        mask[row, [source[s + n] for s in starts if s + n <= spans.last_word[row]]] = True
        if n and any(spans.word_ends(source, s + n) for s in starts):
            mask[row, MASK_ID] = True
    return mask


def test_span_constraint_kept_matches_equal_a_scan_from_scratch():
    """Step by step as generate calls it (each call one token longer, a row sometimes leaving
    the source), and in calls out of order, the masks are the scan's."""
    import random

    vocab = Vocab.from_text("ab c.,x")
    rng = random.Random(0)
    for trial in range(60):
        sources = [vocab.encode("".join(rng.choice("ab c.,") for _ in range(rng.randint(0, 14)))) for _ in range(4)]
        spans, chosen = SpanConstraint(sources, vocab), [[] for _ in sources]
        for step in range(8):
            mask = spans(chosen)
            assert torch.equal(mask, _scratch_mask(spans, chosen)), (trial, step)
            for row in range(len(sources)):
                ok = mask[row].nonzero().flatten().tolist()
                chosen[row] = chosen[row] + [rng.choice(ok) if ok and rng.random() < 0.8 else rng.randrange(len(vocab))]
        shuffled = [c[: rng.randint(0, len(c))] for c in chosen]  # not one token longer: scanned anew
        assert torch.equal(spans(shuffled), _scratch_mask(spans, shuffled))
