"""Evaluation (SPEC section 6), the baseline, and the whole pipeline end to end on tiny data."""

from __future__ import annotations


import pytest
import torch

from attnlab.config.settings import TrainConfig
from attnlab.data.datasets import QAExample, read_qa
from attnlab.answering.evaluate import extract_answer, most_frequent_place, score, write_predictions
from attnlab.training.pipeline import baseline, evaluate_file, finetune, pretrain

from tests.conftest import DATA, PEOPLE


def test_answer_is_text_between_first_and_second_mask():
    assert extract_answer("Where was X born?⁇Paris⁇garbage") == "Paris"
    assert extract_answer("Where was X born?⁇Paris") == "Paris"
    assert extract_answer("no mask at all") == ""


def test_accuracy_on_a_small_hand_made_labelled_file(tmp_path):
    f = tmp_path / "gold.tsv"
    f.write_text("Q1?\tParis\nQ2?\tLima\n\nQ3?\tZürich\r\nQ4?\tOslo\n", encoding="utf-8")
    examples = read_qa(f)
    result = score(["Paris", "Rome", "Zürich", "oslo"], examples)
    assert (result.correct, result.total) == (2, 4) and str(result) == "2/4 (50.0%)"
    assert score(["x"], [QAExample("Q?", None, "f", 1)]) is None


def test_baseline_is_computed_and_scores_five_percent_on_dev():
    place, result = baseline(DATA / "birth_places_train.tsv", DATA / "birth_dev.tsv")
    train = read_qa(DATA / "birth_places_train.tsv")
    counts = {p: sum(e.answer == p for e in train) for p in {e.answer for e in train}}
    assert counts[place] == max(counts.values())
    assert place == "London" and (result.correct, result.total) == (25, 500) and f"{result.percent:.1f}" == "5.0"


def test_most_frequent_place_breaks_ties_by_first_appearance():
    ex = [QAExample("a", "B", "f", 1), QAExample("b", "A", "f", 2), QAExample("c", "A", "f", 3),
          QAExample("d", "B", "f", 4)]
    assert most_frequent_place(ex) == "B"


def test_predictions_file_is_in_input_order(tmp_path):
    out = write_predictions(tmp_path / "p.txt", ["b", "a", "Zürich"])
    assert out.read_text(encoding="utf-8") == "b\na\nZürich\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model pretrained and finetuned for a few seconds on the tiny corpus."""
    import tests.conftest as c

    tmp = tmp_path_factory.mktemp("e2e")
    lines = [f"{n}. {n} was born in {p} and lived there." for n, p in c.PEOPLE]
    (tmp / "wiki.txt").write_text("\n".join(lines + ["Where was everyone born? We know."]))
    (tmp / "train.tsv").write_text("".join(f"Where was {n} born?\t{p}\n" for n, p in c.PEOPLE))
    (tmp / "test.tsv").write_text("".join(f"Where was {n} born?\n" for n, _ in c.PEOPLE))
    from attnlab.config.settings import ModelConfig

    config = ModelConfig(block_size=48, n_layer=2, n_head=2, n_embd=48, dropout=0.0)
    torch.manual_seed(0)
    pre = TrainConfig(epochs=40, batch_size=8, learning_rate=3e-3, warmup_tokens=200, checkpoint_every=0,
                      log_every=50)
    pretrain(config, pre, corpus=tmp / "wiki.txt", run_dir=tmp / "pre", log=lambda _m: None)
    ft = TrainConfig(epochs=60, batch_size=12, learning_rate=2e-3, warmup_tokens=200, checkpoint_every=0,
                     log_every=50)
    finetune(ft, run_dir=tmp / "ft", init=tmp / "pre", train_file=tmp / "train.tsv", log=lambda _m: None)
    return tmp


def test_end_to_end_tiny_model_answers_clearly_above_chance(trained, capsys):
    answers, result, out = evaluate_file(trained / "ft", trained / "train.tsv", device="cpu")
    chance = max(sum(p == q for _, q in PEOPLE) for _, p in PEOPLE)  # most frequent place
    assert result.correct >= chance + 4, [a.answer for a in answers]
    assert out.read_text().splitlines() == [a.answer for a in answers]
    assert all(0.0 <= a.confidence <= 1.0 for a in answers)
    assert f"{result.correct}/{result.total}" in capsys.readouterr().out


def test_unlabelled_file_gets_predictions_and_a_clear_statement(trained, capsys):
    answers, result, out = evaluate_file(trained / "ft", trained / "test.tsv", device="cpu")
    assert result is None and len(out.read_text().splitlines()) == len(PEOPLE)
    assert "no accuracy can be computed" in capsys.readouterr().out


def test_argmax_evaluation_of_a_vanilla_checkpoint(trained):
    answers, _, _ = evaluate_file(trained / "ft", trained / "test.tsv", out=trained / "argmax.txt",
                                  device="cpu", overrides={"attention": "argmax"})
    assert len(answers) == len(PEOPLE)


def test_wilson_interval_matches_hand_computed_values():
    from attnlab.answering.evaluate import Score, wilson_interval

    # 25/500: p = 0.05, z = 1.96: centre = (0.05 + 3.8415/1000) / 1.0076829 = 0.053431,
    # half = 1.96 * sqrt(0.05*0.95/500 + 3.8415/1e6) / 1.0076829 = 0.019337 -> [0.034094, 0.072768]
    low, high = wilson_interval(25, 500)
    assert abs(low - 0.034094) < 5e-6 and abs(high - 0.072768) < 5e-6
    # k = 0: [0, z^2 / (n + z^2)] = [0, 3.8415 / 503.8415 = 0.007624]
    low, high = wilson_interval(0, 500)
    assert abs(low) < 1e-12 and abs(high - 0.007624) < 5e-6
    assert Score(25, 500).with_interval() == "25/500 (5.0%) [95% CI 3.4-7.3%]"
