"""Calibration measures against values worked out by hand on small arrays."""

from __future__ import annotations

import pytest

from attnlab.trust.calibration import (
    abstained_predictions, accuracy_at_coverage, auroc, coverage_curve, ece_by_chance, expected_calibration_error,
    finetuning_people, held_out_people, conformal_count, reliability_bins
)

CONF = [0.1, 0.38, 0.35, 0.8]
RIGHT = [False, False, True, True]


def test_ece_by_hand():
    # 15 bins of width 1/15: 0.1 falls in bin 1, 0.35 and 0.38 in bin 5 (1/3, 2/5], 0.8 in bin 11.
    # bin 1: |0 - 0.1| = 0.1; bin 5: |0.5 - 0.365| = 0.135; bin 11: |1 - 0.8| = 0.2
    expected = 0.25 * 0.1 + 0.5 * 0.135 + 0.25 * 0.2
    assert expected_calibration_error(CONF, RIGHT) == pytest.approx(0.1425)
    assert expected_calibration_error(CONF, RIGHT) == pytest.approx(expected)
    bins = reliability_bins(CONF, RIGHT)
    assert len(bins) == 15 and [b.count for b in bins] == [0, 1, 0, 0, 0, 2] + [0] * 5 + [1, 0, 0, 0]
    assert bins[5].mean_confidence == pytest.approx(0.365) and bins[5].accuracy == 0.5


def test_ece_edges_perfect_and_worst():
    assert expected_calibration_error([1.0, 1.0], [True, True]) == 0.0
    assert expected_calibration_error([0.0, 1.0], [True, False]) == 1.0
    assert [b.count for b in reliability_bins([0.0, 1.0], [True, False])][::14] == [1, 1]  # 0 and 1 land inside


def test_ece_by_chance_by_hand():
    # one answer at 0.5 scores |1 - 0.5| or |0 - 0.5| whichever mark it draws
    assert ece_by_chance([0.5]) == pytest.approx((0.5, 0.5))
    # two answers at 0.5 in one bin: one right and one wrong (half the draws) score 0, both alike 0.5
    assert ece_by_chance([0.5, 0.5]) == pytest.approx((0.0, 0.5))
    # sure answers are always as sure as they are right
    assert ece_by_chance([0.0, 1.0, 1.0]) == pytest.approx((0.0, 0.0))


def test_ece_by_chance_is_the_spread_of_calibrated_marks_and_narrows_with_more_answers():
    import numpy as np

    rng = np.random.default_rng(7)
    confidence = list(rng.uniform(0.05, 0.95, 300))
    low, high = ece_by_chance(confidence)
    assert 0.0 < low < high < 0.2
    # marks drawn from the confidence itself (independently of the range's own draws) fall inside
    # about 95% of the time; a confidence 0.2 too sure, hardly ever
    calibrated = [expected_calibration_error(confidence, list(rng.random(300) < confidence)) for _ in range(200)]
    too_sure = [expected_calibration_error(confidence, list(rng.random(300) < np.array(confidence) - 0.2))
                for _ in range(200)]
    assert 0.88 <= np.mean([low <= e <= high for e in calibrated]) <= 1.0
    assert np.mean([e > high for e in too_sure]) > 0.95
    assert ece_by_chance(confidence * 10)[1] < high / 2  # ten times the answers, a third of the spread


def test_ece_by_chance_refuses_what_ece_refuses():
    with pytest.raises(ValueError, match="no answers"):
        ece_by_chance([])
    with pytest.raises(ValueError, match="must lie in"):
        ece_by_chance([1.5])


def test_auroc_by_hand():
    # right {0.35, 0.8} against wrong {0.1, 0.38}: 0.35 beats 0.1 only, 0.8 beats both: 3 of 4 pairs
    assert auroc(CONF, RIGHT) == pytest.approx(0.75)
    assert auroc([0.5, 0.5], [True, False]) == 0.5  # a tie counts one half
    assert auroc([0.2, 0.9, 0.9, 0.1], [False, True, False, False]) == pytest.approx((1 + 0.5 + 1) / 3)
    assert auroc([0.3, 0.4], [True, True]) is None  # no wrong answers: undefined


def test_accuracy_at_coverage_and_curve():
    assert accuracy_at_coverage(CONF, RIGHT, 0.1) == (1, 1)  # ceil(0.4) = 1: the 0.8 answer
    assert accuracy_at_coverage(CONF, RIGHT, 0.5) == (1, 2)  # 0.8 right, 0.38 wrong
    assert accuracy_at_coverage(CONF, RIGHT, 1.0) == (2, 4)
    assert coverage_curve(CONF, RIGHT) == ([0.25, 0.5, 0.75, 1.0], [1.0, 0.5, 2 / 3, 0.5])
    with pytest.raises(ValueError, match="coverage"):
        accuracy_at_coverage(CONF, RIGHT, 0)


def test_a_threshold_keeps_the_conformal_count_of_right_answers_and_abstains_below_it():
    """k of n held-out right answers kept: a new right answer ranks among the n + 1 uniformly, so it
    is kept with probability k / (n + 1), which must reach the target."""
    assert conformal_count(360, 0.97) == 351  # 0.97 * 361 = 350.17; 350 of 360 would give 96.95%
    assert 351 / 361 >= 0.97 > 350 / 361
    assert conformal_count(4, 0.5) == 3  # ceil(2.5), where ceil(0.5 * 4) = 2 would keep 2 of 5 ranks
    assert conformal_count(4, 1.0) == 4  # at most all of them
    assert conformal_count(4, 0.0) == 0
    assert abstained_predictions(["a", "b", "c", "d"], CONF, 0.36) == ["", "b", "", "d"]
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        conformal_count(4, 1.5)


def test_held_out_people_are_the_last_fraction_of_the_training_file(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("".join(f"Where was P{i} born?\tX{i}\n" for i in range(20)))
    held = held_out_people(path, 0.1)
    assert [e.answer for e in held] == ["X18", "X19"]
    from attnlab.data.datasets import read_qa

    kept = finetuning_people(read_qa(path), 0.1)
    assert len(kept) == 18 and not {e.question for e in kept} & {e.question for e in held}
    with pytest.raises(ValueError, match="holdout-fraction"):
        held_out_people(path, 1.0)


def test_the_fitted_confidence_threshold_answers_the_conformal_count_of_held_out_right_answers():
    """Nine held-out right answers and a target of 0.75: the rule answers ceil(0.75 * 10) = 8 of
    them; answering 75% of the nine themselves would take ceil(6.75) = 7."""
    from attnlab.trust.abstention import HeldOut, rules_from

    confidence = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05]
    right = [True] * 9 + [False]
    held = HeldOut("ten people", right, confidence, [1.0] * 10)
    rules = rules_from(held, 0.75)
    assert rules["confidence"].confidence == 0.2  # the 8th most confident right answer, not the 7th (0.3)
    # one joint check of the name and the answer keeps the same count: every name equally
    # familiar here, so the 8th most confident right answer again sets it
    from attnlab.trust.abstention import joint_score
    assert rules["both"].joint == pytest.approx(joint_score(1.0, 0.2)) and "(the 8 with" in rules["both"].how
    assert "9.1% of new real names" in rules["name"].how  # (0 + 1) / (10 + 1) of real people below it


def test_the_joint_check_weighs_the_name_against_the_answers_odds():
    """ln(familiarity) + logit(score): a name ten times less familiar needs an answer whose odds
    are ten times higher; a name of probability 0 is never answered, and a score of 1 does not
    outweigh every name."""
    import math

    from attnlab.trust.abstention import JOINT_ABOVE_ALL, HeldOut, Rule, joint_score, rules_from

    assert joint_score(0.1, 0.5) == pytest.approx(math.log(0.1))
    assert joint_score(0.01, 10 / 11) == pytest.approx(joint_score(0.1, 0.5))
    assert joint_score(0.0, 0.99) == -math.inf and joint_score(1e-9, 1.0) < joint_score(1.0, 0.5)
    rule = Rule(None, None, joint=joint_score(0.1, 0.5))
    assert rule.answers(0.5, 0.1) and rule.answers(0.92, 0.01) and not rule.answers(0.9, 0.01)
    assert not rule.answers(0.99, None) and rule.needs_familiarity  # no name read: not answered
    assert rule.describe().startswith("abstain when ln(name familiarity) + logit(confidence) <")
    # an invented name the name check alone lets through, with a doubtful answer, is withheld:
    # the least familiar held-out name sets the name check; the joint check weighs both
    held = HeldOut("six", [True] * 5 + [False], [0.9, 0.9, 0.9, 0.9, 0.6, 0.3], [0.5, 0.5, 0.5, 0.5, 0.05, 0.5])
    rules = rules_from(held, 0.5)
    assert rules["name"].answers(0.3, 0.06) and not rules["both"].answers(0.3, 0.06)
    none_right = HeldOut("three", [False] * 3, [0.9, 0.8, 0.7], [0.5] * 3)
    assert rules_from(none_right, 0.5)["both"].joint == JOINT_ABOVE_ALL  # nothing to keep: nothing answered
    assert not rules_from(none_right, 0.5)["both"].answers(1.0, 1.0)


def test_the_name_checks_share_counts_each_held_out_person_once():
    """(k + 1) / (n + 1): k of the n held-out people below the threshold, each person's least
    familiar question counted once."""
    from attnlab.trust.abstention import HeldOut, name_check_share

    held = HeldOut("four people", [True] * 8, [0.5] * 8, [0.9, 0.9, 0.1, 0.1, 0.5, 0.6, 0.7, 0.7],
                   names=["a", "a", "b", "b", "c", "c", "d", "d"])
    assert name_check_share(held, 0.5) == pytest.approx(2 / 5)  # b below
    assert name_check_share(held, 0.65) == pytest.approx(3 / 5)  # b and c (its least: 0.5)
    unnamed = HeldOut("eight answers", [True] * 8, [0.5] * 8, held.familiarity)
    assert name_check_share(unnamed, 0.5) == pytest.approx(3 / 9)
