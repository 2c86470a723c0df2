"""Statistics for comparisons (attnlab/experiments/comparison.py) and `attnlab compare --seeds`."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from attnlab.experiments import comparison, records
from attnlab.experiments import compare as experiments
from attnlab.experiments.results import Compared, Row, comparison_record, comparison_table
from tests.test_variants import run_cli, write_data

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("k, n, expected", [
    (0, 0, 1.0),                      # no discordant questions: no evidence at all
    (0, 5, 2 / 32),                   # 0.0625: five one-sided disagreements are not enough
    (6, 6, 2 / 64),                   # 0.03125: six are
    (1, 10, 2 * (1 + 10) / 1024),     # 0.021484375
    (2, 12, 2 * (1 + 12 + 66) / 4096),  # 0.0385742..., scipy.stats.binomtest(2, 12).pvalue
    (5, 10, 1.0),                     # an even split, capped at 1
])
def test_the_exact_binomial_p_value_matches_hand_computed_values(k, n, expected):
    assert comparison.binomial_two_sided(k, n) == pytest.approx(expected, rel=1e-12)
    assert comparison.binomial_two_sided(n - k, n) == pytest.approx(expected, rel=1e-12)  # two-sided


def test_the_binomial_p_value_of_large_counts_agrees_with_the_normal_approximation():
    # 290 of 500 discordant questions one way: with the continuity correction
    # z = (|290 - 250| - 1/2) / sqrt(500 / 4) = 3.533
    z = 39.5 / math.sqrt(125)
    normal = math.erfc(z / math.sqrt(2))
    assert comparison.binomial_two_sided(290, 500) == pytest.approx(normal, rel=0.05)


def test_identical_answers_give_p_1_and_no_detectable_difference():
    answers = [1, 0, 1, 1, 0, 0, 1]
    test = comparison.paired_test([answers, answers], [answers, answers])
    assert (test.combined.wins, test.combined.losses, test.combined.p) == (0, 0, 1.0)
    assert test.verdict == "no detectable difference"
    assert all(m.p == 1.0 for m in test.per_seed)


def test_one_sided_disagreements_give_the_exact_binomial_value_and_a_direction():
    reference = [0] * 6 + [1] * 10
    model = [1] * 6 + [1] * 10  # right on the six the reference missed, nothing lost
    better = comparison.paired_test([model], [reference])
    assert (better.combined.wins, better.combined.losses) == (6, 0)
    assert better.combined.p == pytest.approx(2 / 2**6)
    assert better.verdict == "better"
    worse = comparison.paired_test([reference], [model])
    assert (worse.combined.wins, worse.combined.losses, worse.verdict) == (0, 6, "worse")
    five = comparison.paired_test([model[1:]], [reference[1:]])  # 5 vs 0: p = 0.0625
    assert five.combined.p == pytest.approx(0.0625) and five.verdict == "no detectable difference"


def test_seeds_are_combined_by_summing_their_discordant_pairs():
    reference = [0, 0, 0, 1, 1]
    model = [1, 1, 1, 1, 1]  # 3 wins per seed: p = 0.25 alone
    test = comparison.paired_test([model, model], [reference, reference])
    assert [m.p for m in test.per_seed] == [pytest.approx(0.25)] * 2
    assert (test.combined.wins, test.combined.losses) == (6, 0)
    assert test.combined.p == pytest.approx(2 / 64) and test.verdict == "better"
    # seeds that disagree with each other cancel: 3 wins in one, 3 losses in the other
    mixed = comparison.paired_test([model, reference], [reference, model])
    assert (mixed.combined.wins, mixed.combined.losses, mixed.combined.p) == (3, 3, 1.0)
    assert mixed.verdict == "no detectable difference"
    record = test.to_dict()
    assert record["per_seed"] == [{"wins": 3, "losses": 0, "p": 0.25}] * 2 and record["verdict"] == "better"


@pytest.mark.parametrize("wins, losses, p, expected", [
    (10, 2, 0.04, "better"), (2, 10, 0.04, "worse"), (10, 2, 0.05, "no detectable difference"),
    (10, 2, 0.2, "no detectable difference"), (0, 0, 1.0, "no detectable difference"),
])
def test_the_verdict_needs_p_below_alpha_and_takes_the_direction_of_the_split(wins, losses, p, expected):
    assert comparison.verdict(comparison.McNemar(wins, losses, p)) == expected


def test_one_seed_interval_is_the_question_bootstrap():
    runs = [[1] * 250 + [0] * 250]
    s = comparison.summarise(runs)
    assert s.counts == (250,) and s.total == 500 and s.mean == 0.5
    half = 1.959964 * math.sqrt(0.25 / 500)  # 0.0438: the normal interval of 250/500
    assert s.interval[0] == pytest.approx(0.5 - half, abs=0.006)
    assert s.interval[1] == pytest.approx(0.5 + half, abs=0.006)
    assert comparison.summarise(runs) == s  # reproducible
    assert s.shown().startswith("50.0% [95% CI ")


def test_the_interval_widens_with_the_seed_variance():
    # two seeds far apart: each alone has a narrow question interval, the mean over seeds does not
    high, low = [1] * 400 + [0] * 100, [1] * 100 + [0] * 400
    s = comparison.summarise([high, low])
    assert s.counts == (400, 100) and s.mean == pytest.approx(0.5)
    assert s.interval[0] < 0.3 and s.interval[1] > 0.7
    alike = comparison.summarise([high, high])
    assert alike.interval[1] - alike.interval[0] < 0.1
    assert comparison.summarise([[1] * 20] * 3).interval == (1.0, 1.0)


def test_bad_correctness_arrays_are_refused():
    with pytest.raises(ValueError, match="0/1"):
        comparison.mcnemar([0, 2, 1], [0, 1, 1])
    with pytest.raises(ValueError, match="different numbers of questions"):
        comparison.mcnemar([0, 1], [0, 1, 1])
    with pytest.raises(ValueError, match="same seeds"):
        comparison.paired_test([[1, 0]], [[1, 0], [0, 1]])
    with pytest.raises(ValueError, match="same questions"):
        comparison.summarise([[1, 0], [1, 0, 1]])
    with pytest.raises(ValueError, match="reference"):
        comparison.compare_models({"a": [[1]]}, "b")


def test_compare_models_tests_every_model_but_the_reference():
    runs = {"ref": [[0, 0, 0, 0, 0, 0, 1]], "new": [[1, 1, 1, 1, 1, 1, 1]]}
    result = comparison.compare_models(runs, "ref")
    assert result["ref"][1] is None and result["new"][1].verdict == "better"
    assert result["new"][0].counts == (7,) and result["ref"][0].counts == (1,)


def test_holm_multiplies_the_ith_smallest_p_by_m_minus_i_plus_1_and_keeps_the_order_monotone():
    # sorted 0.01, 0.03, 0.04: 3 x 0.01 = 0.03; 2 x 0.03 = 0.06; 1 x 0.04 = 0.04, raised to 0.06
    assert comparison.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert comparison.holm([0.5, 0.6]) == [1.0, 1.0]  # capped at 1
    assert comparison.holm([0.02]) == [0.02] and comparison.holm([]) == []
    with pytest.raises(ValueError, match="p-values"):
        comparison.holm([1.5])


def _compared(p: float, wins: int, losses: int) -> Compared:
    combined = comparison.McNemar(wins, losses, p)
    test = comparison.PairedTest((), combined, comparison.verdict(combined))
    return Compared([0], comparison.summarise([[1, 0]]), None, test, [0])


def test_a_table_of_several_tests_shows_their_holm_adjusted_p_values():
    compared = {"ref": Compared([0], comparison.summarise([[1, 1]]), None, None),
                "a": _compared(0.004, 1, 9), "b": _compared(0.03, 8, 2), "c": _compared(0.9, 5, 5)}
    table = comparison_table(compared, "ref")
    # a: 3 x 0.004 = 0.012, still worse; b: 2 x 0.03 = 0.06, its "better" does not stand; c: 0.9
    assert "Holm-adjusted p over the 3 tests against ref" in table
    assert "a 0.012 (worse), b 0.06, c 0.9." in table
    assert "| b | 0 |" in table and "| better |" in table  # the per-test verdict stays in its row
    record = comparison_record(compared, "ref")["variants"]
    assert record["a"]["test"]["p_holm"] == pytest.approx(0.012) and record["ref"]["test"] is None
    assert "Holm" not in comparison_table({"ref": compared["ref"], "a": compared["a"]}, "ref")  # one test


def test_correctness_is_read_from_a_predictions_file(tmp_path):
    labelled = tmp_path / "dev.tsv"
    labelled.write_text("Where was A born?\tParis\nWhere was B born?\tRome\nWhere was C born?\tOslo\n")
    predictions = tmp_path / "predictions.txt"
    predictions.write_text("Paris\n\nOslo\n")
    assert comparison.read_correctness(predictions, labelled).tolist() == [True, False, True]
    predictions.write_text("Paris\n")
    with pytest.raises(ValueError, match="1 predictions for the 3 questions"):
        comparison.read_correctness(predictions, labelled)


def _compare_argv(paths, out, *extra):
    return ["compare", "--preset", "tiny", "--variants", "vanilla,rotary", "--no-scratch", "--max-steps", "1",
            "--n-layer", "1", "--n-embd", "16", "--block-size", "48", "--batch-size", "4",
            "--corpus", str(paths["corpus"]), "--train-file", str(paths["train"]),
            "--eval-file", str(paths["dev"]), "--out-dir", str(out), "--device", "cpu", *extra]


def test_compare_with_two_seeds_shows_each_seeds_count_and_the_paired_test(tmp_path, capsys):
    paths, out = write_data(tmp_path), tmp_path / "compare"
    assert run_cli(_compare_argv(paths, out, "--seeds", "2", "--seed", "3")) == 0
    record = json.loads((out / "results.json").read_text())
    rows = {(r["variant"], r["seed"]): r for r in record["rows"] if r["variant"]}
    assert sorted(rows) == [("rotary", 3), ("rotary", 4), ("vanilla", 3), ("vanilla", 4)]
    for (variant, seed), r in rows.items():  # seed k trained both stages with --seed + k, in its own directory
        assert r["run_dir"] == str(out / variant / f"seed-{seed - 3}")
        for stage in ("pretrain", "finetune"):
            config = json.loads((out / variant / f"seed-{seed - 3}" / stage / "config.json").read_text())
            assert config["train"]["seed"] == seed
        assert len(r["dev_each"]) == r["dev_total"] and r["dev_each"].count("1") == r["dev_correct"]
    compared = record["comparison"]
    assert compared["reference"] == "vanilla" and record["settings"]["seeds"] == 2
    rotary = compared["variants"]["rotary"]
    assert rotary["counts"] == [rows["rotary", 3]["dev_correct"], rows["rotary", 4]["dev_correct"]]
    expected = comparison.paired_test([[c == "1" for c in rows["rotary", s]["dev_each"]] for s in (3, 4)],
                                      [[c == "1" for c in rows["vanilla", s]["dev_each"]] for s in (3, 4)])
    assert rotary["test"] == {**expected.to_dict(), "seeds": [3, 4], "p_holm": expected.combined.p}  # one test
    assert compared["variants"]["vanilla"]["test"] is None
    table = (out / "results.md").read_text()
    line = next(t for t in table.splitlines() if t.startswith("| rotary | 3, 4 |"))
    counts = f"{rows['rotary', 3]['dev_correct']}, {rows['rotary', 4]['dev_correct']} of 4"
    assert counts in line and expected.verdict in line and "crossed bootstrap" in table
    assert "| vanilla | 3, 4 |" in table and "| reference |" in table
    capsys.readouterr()

    # a changed setting is never reused: the stored seed-0 run was made with --seed 3
    with pytest.raises(ValueError, match="seed was 3 there, 5 now"):
        run_cli(_compare_argv(paths, out, "--seeds", "2", "--seed", "5", "--reuse"))
    assert run_cli(_compare_argv(paths, out, "--seeds", "2", "--seed", "3", "--reuse")) == 0
    assert capsys.readouterr().out.count("reusing the finished run") == 4
    assert json.loads((out / "results.json").read_text()) == record


def test_compare_refuses_a_reference_it_does_not_train_and_zero_seeds(tmp_path):
    paths = write_data(tmp_path)
    with pytest.raises(ValueError, match="reference variant 'relative' is not among"):
        run_cli(_compare_argv(paths, tmp_path / "a", "--reference", "relative"))
    with pytest.raises(SystemExit) as exit_:  # the parser refuses it
        run_cli(_compare_argv(paths, tmp_path / "b", "--seeds", "0"))
    assert exit_.value.code == 2
    with pytest.raises(ValueError, match=r"number of seeds must be an integer in \[1, 100\], got 0"):  # and the library
        experiments.compare(experiments.CompareSettings(*[None] * 4, variants=["vanilla"], seeds=0, out=tmp_path / "c"))
    assert not any((tmp_path / d).exists() for d in "abc")


def test_compare_trains_seed_by_seed_and_records_every_run_for_reuse(tmp_path, capsys):
    paths, records = write_data(tmp_path), tmp_path / "records"
    argv = _compare_argv(paths, tmp_path / "a", "--seeds", "2", "--seed", "3", "--records", str(records))
    assert run_cli(argv) == 0
    out = capsys.readouterr()
    # seed-major: every variant's first seed before any second seed (a partial grid is balanced)
    started = [line for line in (out.out + out.err).splitlines() if line.startswith("== ") and ", seed" in line]
    assert [line.split(":")[0] for line in started] == [
        "== 1/2 vanilla, seed 3", "== 2/2 rotary, seed 3", "== 1/2 vanilla, seed 4", "== 2/2 rotary, seed 4"]
    first = json.loads((tmp_path / "a" / "results.json").read_text())
    files = sorted(p.relative_to(records).as_posix().split("-")[0:2] for p in records.rglob("*.json"))
    assert files == [["rotary/seed", "3"], ["rotary/seed", "4"], ["vanilla/seed", "3"], ["vanilla/seed", "4"]]
    record = json.loads(next((records / "rotary").glob("seed-4-*.json")).read_text())
    row = next(r for r in first["rows"] if r["variant"] == "rotary" and r["seed"] == 4)
    assert record["row"] == row and record["settings"]["pretrain"]["seed"] == 4  # settings, metrics
    assert len(record["dev_predictions"]) == 4 and not list(records.rglob("*.safetensors"))  # predictions, no weights
    predictions = tmp_path / "a" / "rotary" / "seed-1" / "finetune" / "predictions-dev.txt"
    assert record["dev_predictions"] == predictions.read_text().splitlines()

    # another output directory, the same settings: every run comes from the records, none is trained
    assert run_cli(argv[:-6] + ["--out-dir", str(tmp_path / "b"), "--seeds", "2", "--seed", "3",
                                "--records", str(records)]) == 0
    out = capsys.readouterr()
    assert (out.out + out.err).count("reusing the record") == 4
    assert not (tmp_path / "b" / "vanilla").exists()
    assert json.loads((tmp_path / "b" / "results.json").read_text())["comparison"] == first["comparison"]

    # a changed setting is never reused: --seed 5 finds no record, so gathering finds nothing
    assert run_cli(_compare_argv(paths, tmp_path / "c", "--seeds", "2", "--seed", "5", "--records", str(records),
                                 "--gather")) == 0
    out = capsys.readouterr()
    err = out.out + out.err
    assert "reusing" not in err and "missing (neither a record nor a finished run): vanilla seed 5, rotary seed 5, " \
        "vanilla seed 6, rotary seed 6" in err
    assert not (tmp_path / "c" / "vanilla").exists()


def test_separate_processes_train_one_grids_seeds_with_only_seeds(tmp_path, capsys):
    paths, records = write_data(tmp_path), tmp_path / "records"
    share = lambda out, *extra: _compare_argv(paths, tmp_path / out, "--seeds", "2", "--records", str(records),
                                              *extra)  # noqa: E731
    assert run_cli(share("a", "--only-seeds", "1")) == 0  # the second seed only: the first is not trained
    out = capsys.readouterr()
    assert "missing (neither a record nor a finished run): vanilla seed 0, rotary seed 0" in out.out + out.err
    assert not (tmp_path / "a" / "vanilla" / "seed-0").exists() and (tmp_path / "a" / "vanilla" / "seed-1").is_dir()
    assert sorted(p.name.split("-")[1] for p in records.rglob("*.json")) == ["1", "1"]
    # the other process trains the first seed and takes the second from the records: the whole grid
    assert run_cli(share("b", "--only-seeds", "0")) == 0
    out = capsys.readouterr()
    assert (out.out + out.err).count("reusing the record") == 2 and "missing" not in out.out + out.err
    assert not (tmp_path / "b" / "vanilla" / "seed-1").exists()
    compared = json.loads((tmp_path / "b" / "results.json").read_text())["comparison"]["variants"]
    assert compared["vanilla"]["seeds"] == [0, 1] and compared["rotary"]["test"]["seeds"] == [0, 1]
    with pytest.raises(ValueError, match="with --seeds 2 the seed indices are 0 to 1"):
        run_cli(share("c", "--only-seeds", "1,2"))
    with pytest.raises(ValueError, match="--gather trains none"):
        run_cli(share("c", "--only-seeds", "0", "--gather"))
    with pytest.raises(SystemExit) as exit_:  # the parser refuses what is no seed index
        run_cli(share("c", "--only-seeds", "1,x"))
    assert exit_.value.code == 2 and not (tmp_path / "c").exists()


def test_a_partial_grid_is_gathered_and_tested_on_the_seeds_it_shares(tmp_path, capsys):
    paths, records = write_data(tmp_path), tmp_path / "records"
    assert run_cli(_compare_argv(paths, tmp_path / "a", "--seeds", "2")) == 0  # trained without records
    capsys.readouterr()
    # gathering the finished runs of an output directory records them
    assert run_cli(_compare_argv(paths, tmp_path / "a", "--seeds", "2", "--records", str(records), "--gather")) == 0
    out = capsys.readouterr()
    assert (out.out + out.err).count("recorded ") == 4 and len(list(records.rglob("*.json"))) == 4
    assert "missing" not in out.out + out.err
    next((records / "vanilla").glob("seed-1-*.json")).unlink()  # the reference's second seed is missing
    assert run_cli(_compare_argv(paths, tmp_path / "b", "--seeds", "2", "--records", str(records), "--gather")) == 0
    out = capsys.readouterr()
    assert "missing (neither a record nor a finished run): vanilla seed 1" in out.out + out.err
    compared = json.loads((tmp_path / "b" / "results.json").read_text())["comparison"]["variants"]
    assert compared["vanilla"]["seeds"] == [0] and compared["rotary"]["seeds"] == [0, 1]
    assert compared["rotary"]["test"]["seeds"] == [0] and len(compared["rotary"]["test"]["per_seed"]) == 1
    assert "(seeds 0) |" in (tmp_path / "b" / "results.md").read_text()
    with pytest.raises(ValueError, match="--overwrite starts over: it cannot be combined with"):
        run_cli(_compare_argv(paths, tmp_path / "b", "--gather", "--overwrite"))


def test_a_record_is_found_by_its_result_settings_only():
    settings = {"preset": "tiny", "model": {"attention": "vanilla"}, "attnlab": "0.3.0",
                "pretrain": {"seed": 0, "log_every": 10}, "finetune": {"seed": 0},
                "data": {"dev": {"path": "data/dev.tsv", "sha256": "ab"}}}
    key = records.settings_key(settings)
    same = {**settings, "pretrain": {"seed": 0, "log_every": 99}, "data": {"dev": {"path": "/x/dev.tsv", "sha256": "ab"}}}
    assert records.settings_key(same) == key  # logging cadence and a data file's path do not matter
    for changed in ({**settings, "pretrain": {"seed": 1, "log_every": 10}}, {**settings, "attnlab": "0.3.1"},
                    {**settings, "data": {"dev": {"path": "data/dev.tsv", "sha256": "cd"}}}):
        assert records.settings_key(changed) != key  # a seed, the code version, a data file's content do


def test_an_option_added_since_a_record_keeps_its_key_only_at_its_old_behaviour():
    settings = {"preset": "tiny", "attnlab": "0.3.0", "pretrain": {"seed": 0}, "finetune": {"seed": 0}}
    key = records.settings_key(settings)
    for option, old in records.ADDED_SINCE.items():
        at_old = {**settings, "finetune": {"seed": 0, option: old}}
        assert records.settings_key(at_old) == key  # the record made before the option still matches
        changed = {**settings, "finetune": {"seed": 0, option: 8 if isinstance(old, int) and not isinstance(old, bool) else True}}
        assert records.settings_key(changed) != key


def test_a_model_setting_added_since_a_record_keeps_its_key_only_at_its_old_value():
    settings = {"preset": "tiny", "attnlab": "0.3.0", "model": {"attention": "vanilla"}, "pretrain": {"seed": 0}}
    key = records.settings_key(settings)
    now = {**settings, "model": {"attention": "vanilla", "answer_chars": 32, "relations": [], "quote": False}}
    assert records.settings_key(now) == key  # the course's one question, the old answer budget, no quote
    for changed in ({"answer_chars": 18}, {"relations": [["country", "Which country is {subject} in?"]]},
                    {"quote": True}):
        assert records.settings_key({**settings, "model": {"attention": "vanilla", **changed}}) != key


def test_the_committed_compare_records_are_found_by_todays_settings(tmp_path, capsys):
    """The variants guide's table is gathered from benchmarks/records/compare, training nothing:
    today's cpu15 settings at the records' training options find each recorded seed."""
    from attnlab import cli

    out = tmp_path / "table"
    argv = ["compare", "--preset", "cpu15", "--variants", "vanilla", "--seeds", "3", "--no-scratch", "--compile",
            "off", "--amp", "off", "--holdout-fraction", "0", "--read-out-swaps", "0", "--records",
            str(REPO / "benchmarks" / "records" / "compare"), "--gather", "--out-dir", str(out)]
    assert cli.main(argv) == 0
    text = capsys.readouterr()
    assert "missing" not in text.out + text.err and "419, 415, 413 of 500" in text.out


def test_a_run_made_before_an_option_existed_resumes_at_the_options_old_behaviour(tmp_path):
    from attnlab.experiments.provenance import check_settings

    stored = {"preset": "tiny", "finetune": {"seed": 0}}
    for option, old in records.ADDED_SINCE.items():
        check_settings(tmp_path / "settings.json", stored, {"preset": "tiny", "finetune": {"seed": 0, option: old}})
        with pytest.raises(ValueError, match=f"finetune.{option} was \\(not set\\) there"):
            check_settings(tmp_path / "settings.json", stored,
                           {"preset": "tiny", "finetune": {"seed": 0, option: 3 if option == "read_out_swaps" else True}})


def test_a_record_whose_settings_do_not_match_its_name_is_refused(tmp_path):
    settings = {"preset": "tiny", "attnlab": "0.3.0", "pretrain": {"seed": 0}}
    path = records.save(tmp_path, "vanilla", 0, Row("vanilla", "variant").to_dict(), settings, ["Paris"])
    assert records.find(tmp_path, "vanilla", 0, settings)["dev_predictions"] == ["Paris"]
    assert records.find(tmp_path, "vanilla", 1, settings) is None
    stored = json.loads(path.read_text())
    path.write_text(json.dumps({**stored, "settings": {**settings, "preset": "cpu5"}}))
    with pytest.raises(ValueError, match="its settings are not the ones its name says"):
        records.find(tmp_path, "vanilla", 0, settings)
    path.write_text("{")
    with pytest.raises(ValueError, match="not a readable record"):
        records.find(tmp_path, "vanilla", 0, settings)


def test_gathering_touches_no_run_directory(tmp_path, capsys):
    # another process may be writing a checkpoint there: gathering must not clean up its files
    from attnlab.model.checkpoint import TEMP_PATTERN

    paths, out = write_data(tmp_path), tmp_path / "grid"
    writing = out / "vanilla" / "seed-0" / "pretrain" / TEMP_PATTERN.replace("*", "x")
    writing.parent.mkdir(parents=True)
    writing.write_bytes(b"half a checkpoint")
    os.utime(writing, (0, 0))  # older than this process: what a start-up clean-up removes
    assert run_cli(_compare_argv(paths, out, "--seeds", "2", "--gather")) == 0
    assert writing.exists()
    out_ = capsys.readouterr()
    assert "missing (neither a record nor a finished run): vanilla seed 0, rotary seed 0" in out_.out + out_.err


def test_compare_trains_a_fitted_presets_epochs_in_every_run(tmp_path, monkeypatch, capsys):
    # a preset fitted to --minutes (cpu5) would give each compared run the passes its own moment's
    # speed allows; compare trains the preset's epochs in every run instead, and says so
    import dataclasses

    from attnlab.config.settings import PRESETS, get_preset
    from attnlab.training import pipeline

    tiny = get_preset("tiny")
    monkeypatch.setitem(PRESETS, "timed", dataclasses.replace(
        tiny, name="timed", pretrain=dataclasses.replace(tiny.pretrain, epochs=2, minutes=0.25)))
    monkeypatch.setattr(pipeline, "step_seconds", lambda *a, **k: pytest.fail("compare fitted a run to --minutes"))
    paths, out = write_data(tmp_path), tmp_path / "compare"
    argv = _compare_argv(paths, out)
    argv[argv.index("tiny")] = "timed"
    assert run_cli(argv) == 0
    said = capsys.readouterr()
    assert "every run trains the 2 epochs given, not fitted to --minutes 0.25" in said.out + said.err
    for variant in ("vanilla", "rotary"):
        config = json.loads((out / variant / "pretrain" / "config.json").read_text())["train"]
        assert config["epochs"] == 2 and config["minutes"] == 0
