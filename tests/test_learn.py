"""`attnlab learn DIR`: a fact set learned by one command (attnlab/experiments/learn.py), and the
commands that then use the run's own fact set without being told."""

from __future__ import annotations

import json
import math

import pytest

from attnlab import cli
from attnlab.data import factset
from attnlab.data.splits import held_out_people, subject_reader
from attnlab.experiments import learn as learn_recipe
from attnlab.experiments.learn import (LEAST_PASSES, PRETRAIN_READ_OUT_SWAPS, READ_OUT_SWAPS, SWAP_NOVEL,
                                      budget_check, calibration_fraction, layers_for, recipe_for, results_table)

from .test_factsets import write_set


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    root = tmp_path_factory.mktemp("learn")
    facts = write_set(root / "towns")
    out = root / "run"
    assert cli.main(["learn", str(facts), "--minutes", "0.1", "--out-dir", str(out)]) == 0
    return facts, out


def test_learn_writes_a_model_its_fact_set_and_scores_per_relation(learned):
    facts, out = learned
    assert (out / "checkpoint.safetensors").is_file() and (out / "pretrain" / "checkpoint.safetensors").is_file()
    results = json.loads((out / "results.json").read_text())
    assert set(results["relations"]) == {"country", "river"}
    assert all(r["total"] == 2 and "baseline" in r and len(r["ci95"]) == 2 for r in results["relations"].values())
    assert results["overall"]["total"] == 4
    assert results["fact_set"]["digest"] == factset.load(facts).digest()
    assert json.loads((out / "factset.json").read_text())["digest"] == results["fact_set"]["digest"]
    assert len((out / "predictions-dev.txt").read_text().splitlines()) == 4
    # pretraining told learn the passes it fitted before its first step; the passes made are
    # counted from the steps it took (a --minutes run re-fits them as it goes)
    assert results["pretraining_passes_fitted"] > 0 and results["pretraining_passes"] > 0
    assert "steps_per_pass" not in results


def test_the_summary_puts_the_chance_range_beside_the_ece(learned):
    _, out = learned
    results = json.loads((out / "results.json").read_text())
    calibration = results["calibration"]
    low, high = calibration.get("ece_corrected_by_chance") or calibration["ece_by_chance"]
    text = results_table(results)
    assert f"ECE {calibration['ece']:.3f} (15 bins)" in text
    assert f"(a calibrated confidence scores {low:.3f}-{high:.3f} on these 4 answers by chance alone)" in text
    # a run written before the range was kept still prints its ECE
    calibration.pop("ece_by_chance"), calibration.pop("ece_corrected_by_chance", None)
    assert "by chance alone" not in results_table(results) and f"ECE {calibration['ece']:.3f}" in results_table(results)


def test_a_budget_too_short_to_store_facts_is_said_before_training(tmp_path):
    recipe = recipe_for(factset.load(write_set(tmp_path / "towns")), 2)
    said, fitted = [], {}
    check = budget_check(2, recipe, fitted, said.append)
    check(LEAST_PASSES / 2)
    assert fitted == {"pretraining_passes": LEAST_PASSES / 2, "pretraining_passes_fitted": LEAST_PASSES / 2,
                      "budget_short": True}
    assert len(said) == 1 and said[0].startswith("warning: 2 minutes fit")
    # about twice the pretraining minutes would fit enough passes
    assert f"about {int(-(-(2 - recipe.pretrain_minutes + 2 * recipe.pretrain_minutes) // 1))} minutes" in said[0]
    said.clear(), fitted.clear()
    budget_check(2, recipe, fitted, said.append)(LEAST_PASSES)
    assert said == [] and fitted == {"pretraining_passes": LEAST_PASSES, "pretraining_passes_fitted": LEAST_PASSES}


def test_ask_and_evaluate_use_the_runs_own_fact_set(learned, capsys):
    facts, out = learned
    capsys.readouterr()
    assert cli.main(["ask", str(out), "which river flows through dunmoor", "Who founded Brisk?", "--json",
                     "--abstain", "off"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[0]["relation"] == "river" and rows[0]["problem"] is None
    assert rows[0]["question"] == "Which river flows through Dunmoor?"  # the corpus's spelling
    assert rows[1]["answer"] is None and rows[1]["problem"].startswith("I can't parse this")
    # the towns' values open with different letters: learned without quoting, nothing quoted
    assert rows[0]["quoted"] is None and rows[1]["quoted"] is None
    predictions = out.parent / "p.txt"
    assert cli.main(["evaluate", str(out), "--eval-file", str(facts / "dev.tsv"), "--predictions",
                     str(predictions), "--abstain", "off"]) == 0
    assert len(predictions.read_text().splitlines()) == 4


def test_another_fact_set_is_refused_unless_asked_for(learned, tmp_path, capsys):
    _, out = learned
    other = write_set(tmp_path / "other", dev="Which country is Eskby in?\tDrin\n")
    code = cli.main(["evaluate", str(out), "--facts", str(other), "--predictions", str(tmp_path / "p.txt")])
    assert code == 2 and "learned another fact set" in capsys.readouterr().err
    assert not (tmp_path / "p.txt").exists()
    assert cli.main(["evaluate", str(out), "--facts", str(other), "--other-facts", "--abstain", "off",
                     "--predictions", str(tmp_path / "p.txt")]) == 0
    assert len((tmp_path / "p.txt").read_text().splitlines()) == 1


def test_a_run_whose_set_moved_is_asked_with_the_copy_named(learned, tmp_path, capsys):
    """--facts naming a copy of the run's own set (its folder moved away) is that set: ask uses
    it without --other-facts, and the loaded model carries it."""
    import shutil

    facts, out = learned
    copy = shutil.copytree(facts, tmp_path / "copy")
    run = shutil.copytree(out, tmp_path / "run")
    record = json.loads((run / "factset.json").read_text())
    record.update(path=str(tmp_path / "gone"), absolute=str(tmp_path / "gone"))
    (run / "factset.json").write_text(json.dumps(record))
    capsys.readouterr()
    assert cli.main(["ask", str(run), "which river flows through dunmoor", "--abstain", "off"]) == 2
    assert "no longer there: name its folder with --facts DIR" in capsys.readouterr().err
    assert cli.main(["ask", str(run), "--facts", str(copy), "which river flows through dunmoor", "--json",
                     "--abstain", "off"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["relation"] == "river"
    from attnlab import load

    assert load(run, facts=copy).fact_set.root == copy
    with (copy / "corpus.txt").open("a") as f:  # the copy changed: another set, taken only when asked for
        f.write("Zzz. A line added since.\n")
    assert cli.main(["ask", str(run), "--facts", str(copy), "which river flows through dunmoor", "--abstain", "off"]) == 2
    assert "learned another fact set" in capsys.readouterr().err
    assert cli.main(["ask", str(run), "--facts", str(copy), "--other-facts", "which river flows through dunmoor",
                     "--abstain", "off"]) == 0
    assert load(run, facts=copy, other_facts=True).fact_set.root == copy


def test_learn_refuses_an_existing_run_and_a_bad_fact_set(learned, tmp_path, capsys):
    facts, out = learned
    before = (out / "checkpoint.safetensors").stat().st_mtime_ns
    assert cli.main(["learn", str(facts), "--minutes", "0.1", "--out-dir", str(out)]) == 2
    assert "already holds" in capsys.readouterr().err
    assert (out / "checkpoint.safetensors").stat().st_mtime_ns == before
    bad = write_set(tmp_path / "bad", train="Who founded Ardale?\tNobody\n")
    assert cli.main(["learn", str(bad), "--out-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "train.tsv:1:" in err and "matches no relation" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_the_recall_stops_at_the_recipes_longest_and_says_what_it_leaves_out(tmp_path, monkeypatch):
    facts = factset.load(write_set(tmp_path / "towns"))
    whole = recipe_for(facts, 15)
    assert whole.sizes.out_of_reach == 0 and whole.model.recall_chars > 40
    monkeypatch.setattr(learn_recipe, "RECALL_MOST", 40)
    capped = recipe_for(facts, 15)
    assert capped.model.recall_chars == 40 and capped.model.block_size < whole.model.block_size
    # the answers written past the 40th character are counted, for learn's warning
    assert capped.sizes.out_of_reach == capped.sizes.beyond(40) > 0


def test_the_recipe_is_derived_from_the_data(tmp_path):
    facts = factset.load(write_set(tmp_path / "towns"))
    recipe = recipe_for(facts, 15)
    assert recipe.model.relations == tuple(tuple(p) for p in facts.schema.to_list())
    assert recipe.model.recall_chars == factset.sizes(facts).recall_chars
    # values that open differently: no quote (factset.shared_openings), the block without one
    assert not recipe.model.quote and recipe.model.block_size == factset.sizes(facts).block_size
    assert recipe.format_subjects == 3  # every training subject: fewer than the recipe's cap
    assert recipe.pretrain.minutes < 15 and recipe.pretrain.mix_people == 3
    # finetuning reads swapped copies and is fitted to what pretraining leaves of the budget
    assert recipe.finetune.read_out_swaps == READ_OUT_SWAPS > 0
    # pretraining reads swapped copies of its format subjects too, over every pass
    assert recipe.pretrain.read_out_swaps == PRETRAIN_READ_OUT_SWAPS > 0 and recipe.pretrain.mix_ratio > 0
    # the copies' values are the set's own (none disguised: SWAP_NOVEL)
    assert recipe.pretrain.swap_novel == recipe.finetune.swap_novel == SWAP_NOVEL == 0.0
    assert 0 < recipe.finetune.minutes <= 15 - recipe.pretrain_minutes + 1e-9
    assert layers_for(10_000) == 4 and layers_for(20_000) == 3 and layers_for(100_000) == 2
    # each relation's training answers, most frequent first, for the span read-out's look-alikes
    assert recipe.model.answer_values == (("country", ("Velm", "Tarn")), ("river", ("Orna", "Kessa", "Drin")))


def test_the_answer_values_leave_out_the_held_out_subjects(tmp_path):
    """The last tenth of the training subjects is held out for the abstention fit: their answers
    are not among the values the read-out may give."""
    towns = [f"Town{chr(65 + i)}" for i in range(25)]
    corpus = "".join(f"{t}. {t} lies in Land{t[-1]}. The Orna flows through it.\n" for t in towns)
    train = "".join(f"Which country is {t} in?\tLand{t[-1]}\n" for t in towns[:22])
    facts = factset.load(write_set(tmp_path / "towns", corpus=corpus, train=train,
                                   dev="".join(f"Which country is {t} in?\tLand{t[-1]}\n" for t in towns[22:])))
    values = dict(recipe_for(facts, 15).model.answer_values)
    held = {facts.schema.require(e).subject
            for e in held_out_people(facts.train, calibration_fraction(22), subject_reader(facts.schema), order="hashed")}
    assert len(held) == 3  # a tenth of 22, rounded up
    assert values["country"] == tuple(f"Land{t[-1]}" for t in towns[:22] if t not in held)
    assert values["river"] == ()


def test_learn_takes_its_subjects_in_an_order_its_file_does_not_set(tmp_path):
    """A training file sorted by answer (an export of a table) has its ends unlike the rest:
    taken in the file's order, the held-out subjects would all be the last country's towns and
    the format subjects the first's. learn takes a sample fixed by a hash of each subject, the
    same however the file is ordered, in pretraining and finetuning alike."""
    towns = [(f"Town{i:02d}", f"Land{'ABCD'[i // 10]}") for i in range(40)]
    corpus = "".join(f"{t}. {t} lies in {c}.\n" for t, c in towns)
    rows = [f"Which country is {t} in?\t{c}\n" for t, c in towns]
    sorted_set = factset.load(write_set(tmp_path / "sorted", corpus=corpus, train="".join(rows[:36]),
                                        dev="".join(rows[36:])))
    shuffled_set = factset.load(write_set(tmp_path / "shuffled", corpus=corpus, train="".join(rows[:36][::-1]),
                                          dev="".join(rows[36:])))
    recipes = [recipe_for(f, 15) for f in (sorted_set, shuffled_set)]
    assert {r.pretrain.subject_order for r in recipes} == {r.finetune.subject_order for r in recipes} == {"hashed"}
    assert [[name, sorted(values)] for name, values in recipes[0].model.answer_values] == \
        [[name, sorted(values)] for name, values in recipes[1].model.answer_values]  # of the same subjects

    def held(facts):
        return [e.answer for e in held_out_people(facts.train, recipes[0].finetune.holdout_fraction,
                                                  subject_reader(facts.schema), order="hashed")]

    assert sorted(held(sorted_set)) == sorted(held(shuffled_set))  # the same subjects, whatever the order
    assert len(set(held(sorted_set))) > 1  # not one country's towns, as the file's last four are
    in_file_order = held_out_people(sorted_set.train, recipes[0].finetune.holdout_fraction)
    assert {e.answer for e in in_file_order} == {"LandD"}


def test_mixed_peoples_lines_are_dropped_by_line_number(tmp_path):
    """Lines of people left out, then of mixed people, are dropped by their own line numbers
    (the second filter once counted positions in the already-filtered list)."""
    import dataclasses

    from attnlab.config.settings import ModelConfig, get_preset
    from attnlab.data.datasets import read_text
    from attnlab.data.vocab import Vocab
    from attnlab.training.pipeline import _lm_batches

    names = ["Ann Aa", "Dev One", "Bob Bb", "Dev Two", "Cy Cc"]
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"{n}. {n} was born in Rome.\n" for n in names) + "Where was it?\n")
    train = tmp_path / "t.tsv"
    train.write_text("Where was Cy Cc born?\tRome\nWhere was Ann Aa born?\tRome\nWhere was Bob Bb born?\tRome\n")
    text = read_text(corpus)
    model = ModelConfig(**{**get_preset("tiny").model, "qa_format": "recall", "recall_chars": 40, "block_size": 80})
    config = dataclasses.replace(get_preset("cpu15").pretrain, mix_people=1, mix_ratio=1 / 6, minutes=0, holdout_fraction=0)
    _, described = _lm_batches(text, Vocab.from_text(text), model, config, corpus, train, (), "cpu", lambda m: None)
    assert described.startswith("3 lines + 1 QA examples")  # Dev One, Dev Two, the question line


def test_the_python_api_loads_the_runs_fact_set(learned, tmp_path):
    import attnlab
    from attnlab.data.datasets import DataError

    facts, out = learned
    model = attnlab.load(out)
    assert model.fact_set.name == "towns" and model.evaluate().score.total == 4  # its dev file by default
    assert model.ask(["which country is dunmoor in"])[0].relation == "country"
    other = write_set(tmp_path / "other", dev="Which country is Eskby in?\tDrin\n")
    with pytest.raises(DataError, match="learned another fact set"):
        attnlab.load(out, facts=other)
    assert attnlab.load(out, facts=facts).fact_set.root == facts


def test_read_or_recall_counts_each_read_out_on_the_same_recalls(learned, capsys):
    """benchmarks/read_or_recall.py: a row per read-out and relation, whose kinds add up to the
    relation's questions; an unknown read-out is refused."""
    import sys
    from pathlib import Path

    import attnlab

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import read_or_recall

    facts, out = learned
    assert read_or_recall.main([str(out), "--read-outs", "span,copy,span-no-values"]) == 0
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    assert sorted((r[0].strip("| "), r[1]) for r in rows) == [
        ("copy", "country"), ("copy", "river"), ("span", "country"), ("span", "river"),
        ("span-no-values", "country"), ("span-no-values", "river")]
    for r in rows:
        assert int(r[2]) == int(r[3]) + sum(int(c.strip(" |")) for c in r[5:])
    model_values = attnlab.load(out).config.answer_values
    assert model_values and all(values for _, values in model_values)  # learn stored them with the model
    with pytest.raises(SystemExit):
        read_or_recall.main([str(out), "--read-outs", "greedy"])


def test_learn_fits_its_abstention_rule_on_training_subjects_it_held_out(tmp_path):
    """A set with enough training subjects: a tenth of them (every question about each, the last
    in the run's hashed subject order) is held out of finetuning, the rule and temperature are fitted on them and stored with the
    run, and results.json reports the ECE raw and after the temperature."""
    from attnlab.data.splits import held_out_people
    from attnlab.experiments.learn import calibration_fraction

    names = [f"Town{chr(65 + i // 26)}{chr(97 + i % 26)}" for i in range(30)]
    rows = [(t, ("Velm", "Tarn", "Sorn")[i % 3], ("Orna", "Kessa", "Drin")[i % 3]) for i, t in enumerate(names)]
    qa = lambda part: "".join(f"Which river flows through {t}?\t{r}\nWhich country is {t} in?\t{c}\n" for t, c, r in part)
    corpus = "\n".join(f"{t}. It trades with Zarn. {t} lies in {c}. The {r} flows through it." for t, c, r in rows)
    facts = write_set(tmp_path / "towns30", corpus=corpus + "\n", train=qa(rows[:24]), dev=qa(rows[24:]))
    out = tmp_path / "run"
    assert cli.main(["learn", str(facts), "--minutes", "0.1", "--out-dir", str(out)]) == 0
    fraction = calibration_fraction(24)
    schema = factset.load(facts).schema
    subject = lambda e: schema.require(e).subject
    held = held_out_people(facts / "train.tsv", fraction, subject, order="hashed")
    assert len({subject(e) for e in held}) == 3 and len(held) == 6
    stored = json.loads((out / "abstention.json").read_text())
    assert stored["held_out"]["people"] == 6  # three subjects, both of their questions
    assert "6 held-out questions" in stored["rules"]["confidence"]["how"]  # questions, not people
    assert stored["policy"]["holdout_fraction"] == pytest.approx(fraction)
    config = json.loads((out / "config.json").read_text())
    assert config["train"]["holdout_fraction"] == pytest.approx(fraction)
    assert config["train"]["subject_order"] == stored["policy"]["subject_order"] == "hashed"
    results = json.loads((out / "results.json").read_text())
    corrected = {"correction", "ece_corrected", "ece_corrected_by_chance"} if stored["correction"] else set()
    assert set(results["calibration"]) == {"bins", "ece", "ece_by_chance"} | corrected
    low, high = results["calibration"]["ece_corrected_by_chance" if stored["correction"] else "ece_by_chance"]
    assert 0.0 <= low <= high <= 1.0
    if stored["correction"]:  # recall answers: the parts weighed apart or not (cross-validation chooses),
        # and the rules threshold the chance
        assert stored["correction"]["method"] in ("confidence parts", "beta calibration")
        assert stored["rules"]["both"]["score"] == stored["rules"]["confidence"]["score"] == "chance"
        import attnlab

        model = attnlab.load(out)
        answer = model.ask("Which country is TownAa in?", abstain=None)[0]
        assert answer.parts is not None and math.isclose(sum(answer.parts), math.log(answer.confidence))
        assert answer.chance_right == model.correction().chance(answer.confidence, answer.parts)

    # rescoring refits the stored rule and scores again, keeping what the run records of training
    from attnlab.experiments.learn import rescore

    (out / "abstention.json").unlink()
    (out / "results.json").write_text(json.dumps({**results, "calibration": {"stale": 1}, "overall": {}}))
    again = rescore(out)
    assert json.loads((out / "abstention.json").read_text()) == stored
    assert again == results == json.loads((out / "results.json").read_text())
    (facts / "dev.tsv").write_text(qa(rows[25:]))  # the fact set changed: its scores would not be the run's
    with pytest.raises(ValueError, match="has changed since the run learned it"):
        rescore(out)


def test_a_subject_is_never_both_held_out_and_trained_on():
    from attnlab.data.datasets import QAExample
    from attnlab.data.splits import finetuning_people

    examples = [QAExample(f"Q{i} {s}", "a", "f", i + 1) for i, s in enumerate("abcabdcde")]
    subject = lambda e: e.question.split()[1]
    kept = finetuning_people(examples, 0.4, subject)  # subjects a b c d e: the last two held out
    assert {subject(e) for e in kept} == {"a", "b", "c"}
    assert len(kept) == 6
    assert finetuning_people(examples, 0.4) == examples[:5]  # by lines without a subject reader
    hashed = finetuning_people(examples, 0.4, subject, order="hashed")  # two subjects held out, as a sample
    assert len({subject(e) for e in hashed}) == 3 and set(hashed) <= set(examples)
    assert [e for e in hashed if subject(e) == "a"] == [examples[0], examples[3]]  # a subject's questions together


def test_a_set_whose_values_share_their_openings_is_learned_quoting(tmp_path, monkeypatch):
    """Years of one firm open alike (1813, 1900): the read-out cannot choose among them by their
    first character, so the recipe quotes the stating sentence first; the block holds it."""
    from attnlab.experiments import learn

    firms = [("Ardco", "Velm", "1813", "1900"), ("Brisk", "Tarn", "1900", "1761"), ("Colt", "Velm", "1761", "1813"),
             ("Dunn", "Sorn", "1813", "1761"), ("Esk", "Tarn", "1900", "1813")]
    toml = ('name = "firms"\ndescription = "invented firms"\n'
            '[[relation]]\nname = "city"\nquestion = "Which city is {subject} based in?"\n'
            '[[relation]]\nname = "founded"\nquestion = "When was {subject} founded?"\n')
    corpus = "\n".join(f"{f}. Its works burned in {other}. It was founded in {y}. It is based in {c}."
                        for f, c, y, other in firms) + "\n"

    def qa(part):
        return "".join(f"Which city is {f} based in?\t{c}\nWhen was {f} founded?\t{y}\n" for f, c, y, _ in part)

    facts = factset.load(write_set(tmp_path / "firms", toml=toml, corpus=corpus, train=qa(firms[:3]), dev=qa(firms[3:])))
    shared = factset.shared_openings(facts, factset.sizes(facts).recall_chars)
    assert shared == {"city": 0.0, "founded": 1.0}  # every firm's other year opens with 1 too
    recipe = recipe_for(facts, 15)
    assert recipe.model.quote and recipe.model.block_size == factset.sizes(facts, quote=True).block_size
    assert "after quoting their sentence" in recipe.describe()
    monkeypatch.setattr(learn, "QUOTE", False)  # the rule can be overridden (benchmarks/learn_probe.py)
    assert not recipe_for(facts, 15).model.quote


def test_an_edit_in_python_reads_the_runs_own_fact_set(learned, monkeypatch):
    """`attnlab.load(RUN).edit(...)` takes the person's line and the training answers from the
    fact set the run learned, as `attnlab edit RUN` does, not from the course's files."""
    import attnlab
    from attnlab import api

    facts, out = learned
    seen = {}

    class Stop(Exception):
        pass

    def record(model, vocab, person, place, docs, *, trained, corpus_name, **kw):
        seen.update(docs=docs, trained=trained, corpus=corpus_name)
        raise Stop

    monkeypatch.setattr(api, "edit_fact", record)
    with pytest.raises(Stop):
        attnlab.load(out).edit("Ardale", "Tarn", relation="country")
    assert seen["corpus"] == str(facts / "corpus.txt")
    assert seen["docs"][0].startswith("Ardale. ")
    assert "Which country is Ardale in?" in {e.question for e in seen["trained"]}


def test_answers_not_written_in_their_documents_are_told_before_training(tmp_path):
    """A set whose answers are mostly not written in their documents is warned, with what the
    read-out can still do (answers written in other letters)."""
    from attnlab.experiments.learn import _say_out_of_reach

    towns = ["Ardale", "Brisk", "Colver"]
    corpus = "".join(f"{t}. It is one of the provinces of Velm. The Orna flows through it.\n" for t in towns)
    train = "".join(f"Which country is {t} in?\tProvince of Velm\n" for t in towns)
    facts = factset.load(write_set(tmp_path / "s", corpus=corpus, train=train))
    said = []
    _say_out_of_reach(factset.sizes(facts), 96, said.append)
    assert len(said) == 1 and said[0].startswith("warning: of 3 training answers, 3 are not written")
    assert '"provinces" for "Province"' in said[0]
    said.clear()
    _say_out_of_reach(factset.sizes(factset.load(write_set(tmp_path / "ok"))), 96, said.append)
    assert said == []


def test_the_suggested_question_is_one_the_run_answered_right(tmp_path):
    """learn's "next: attnlab ask" shows the model knowing a fact: the first dev question its
    predictions got right, not simply the first (which it may not know, or its document may not
    say); with no right answer, or no predictions, the first dev question."""
    from attnlab.cli.learning import example_question

    facts = factset.load(write_set(tmp_path / "towns"))
    dev = [line.split("\t") for line in facts.dev.read_text().splitlines()]
    run = tmp_path / "run"
    run.mkdir()
    assert example_question(facts, run) == dev[0][0]
    (run / "predictions-dev.txt").write_text("".join(f"not {a}\n" for _, a in dev[:2]) + f"{dev[2][1]}\n" +
                                             "".join(f"{a}\n" for _, a in dev[3:]))
    assert example_question(facts, run) == dev[2][0]
    (run / "predictions-dev.txt").write_text("".join("nowhere\n" for _ in dev))
    assert example_question(facts, run) == dev[0][0]
    course = factset.load("data")  # its dev file is birth_dev.tsv: the predictions learn writes are named after it
    labels = [line.split("\t") for line in course.dev.read_text().splitlines()]
    (run / "predictions-birth_dev.txt").write_text("nowhere\nnowhere\n" + f"{labels[2][1]}\n")
    assert example_question(course, run) == labels[2][0]


def test_a_machine_short_of_passes_for_the_loads_depth_takes_fewer_layers(tmp_path):
    # the passes wanted grow with the block: what the model writes of a subject
    assert learn_recipe.passes_wanted(300) == 3 * learn_recipe.passes_wanted(100) > 0
    enough = 25.0
    assert learn_recipe.shallower_layers(3, enough, enough) == 3 and learn_recipe.shallower_layers(2, 1, enough) == 2
    # a step costs as layers + SHALLOWER_COST: the deepest model expected to fit enough passes
    cost = learn_recipe.SHALLOWER_COST
    just = enough * (3 + cost) / (4 + cost)  # four layers' passes that three layers turn into enough
    assert learn_recipe.shallower_layers(4, just + 0.01, enough) == 3
    assert learn_recipe.shallower_layers(4, just - 0.5, enough) == 2
    assert learn_recipe.shallower_layers(4, 1, enough) == 2  # never under two
    recipe = recipe_for(factset.load(write_set(tmp_path / "towns")), 15)
    wanted = learn_recipe.passes_wanted(recipe.model.block_size)
    handed = []
    check = learn_recipe.depth_check(recipe, lambda passes, steps: handed.append(passes))
    check(wanted)
    assert handed == [wanted]
    if recipe.model.n_layer > 2:
        with pytest.raises(learn_recipe.TooDeep) as deep:
            check(wanted - 1)
        assert (deep.value.layers, deep.value.passes) == (recipe.model.n_layer, wanted - 1) and handed == [wanted]
        assert deep.value.fewer == learn_recipe.shallower_layers(recipe.model.n_layer, wanted - 1, wanted)


def test_learn_begins_pretraining_again_with_the_layers_the_fit_calls_for(tmp_path, monkeypatch):
    """The fit before pretraining's first step finds too few passes for four layers: learn
    starts pretraining again with two (the time of the first fit taken from the budget), says
    so, records it, and a resumed run continues with the layers chosen."""
    monkeypatch.setattr(learn_recipe, "LAYERS_BY_LOAD", (10 ** 12, 10 ** 12))  # four layers by the load
    monkeypatch.setattr(learn_recipe, "FEWER_LAYERS_BELOW", 10 ** 9)  # no budget fits enough passes
    facts, out, said = write_set(tmp_path / "towns"), tmp_path / "run", []
    results = learn_recipe.learn(facts, out, minutes=0.1, log=said.append)
    assert results["deeper_fit"]["layers"] == 4 and results["recipe"]["model"]["n_layer"] == 2
    assert results["recipe"]["pretrain"]["minutes"] <= recipe_for(factset.load(facts), 0.1).pretrain_minutes
    assert any("4 layers fit" in line and "begins again with 2 layers" in line for line in said)
    saved = json.loads((out / "pretrain" / "config.json").read_text())
    assert saved["model"]["n_layer"] == 2 and json.loads((out / "config.json").read_text())["model"]["n_layer"] == 2
    resumed = learn_recipe.as_pretrained(recipe_for(factset.load(facts), 0.1), out / "pretrain")
    assert (resumed.model.n_layer, resumed.pretrain.minutes) == (2, saved["train"]["minutes"])


def test_learn_begins_again_shallower_when_the_runs_own_pace_fits_too_few_passes(tmp_path, monkeypatch):
    """The steps timed before pretraining promise every pass to three layers; the run's own
    first steps fit fewer than the depth wants: at its first re-fit learn starts pretraining
    again with two layers (in the same directory, nothing of the deeper start left), says which
    pace decided, and records it."""
    from attnlab.training import pipeline

    monkeypatch.setattr(learn_recipe, "LAYERS_BY_LOAD", (0, 10 ** 12))  # three layers by the load
    monkeypatch.setattr(pipeline, "step_seconds", lambda *args, **kwargs: 1e-9)  # an optimistic timing
    facts, out, said = write_set(tmp_path / "towns"), tmp_path / "run", []
    recipe = recipe_for(factset.load(facts), 0.2)
    assert recipe.model.n_layer == 3
    # the passes wanted lie just under all of them (what the optimistic timing fits)
    monkeypatch.setattr(learn_recipe, "FEWER_LAYERS_BELOW", 99 * recipe.pretrain.epochs / recipe.model.block_size)
    results = learn_recipe.learn(facts, out, minutes=0.2, log=said.append)
    assert results["deeper_fit"]["layers"] == 3 and results["deeper_fit"]["pace"] == "run"
    assert results["deeper_fit"]["passes"] < 0.99 * recipe.pretrain.epochs
    assert "pretraining_passes_paced" in results  # the two-layer run's own first re-fit, recorded
    assert results["recipe"]["model"]["n_layer"] == 2
    assert any("3 layers fit" in line and "at the pace of its first steps" in line
               and "begins again with 2 layers" in line for line in said)
    assert json.loads((out / "pretrain" / "config.json").read_text())["model"]["n_layer"] == 2
    rows = [json.loads(line) for line in (out / "pretrain" / "metrics.jsonl").read_text().splitlines()]
    steps = [row["step"] for row in rows if "loss" in row]
    assert steps == sorted(steps) and steps[0] == 1  # the deeper start's rows are gone


def test_resume_continues_the_run_begun_and_refuses_another_in_words(tmp_path):
    """learn records what a run was begun with before training (learning.json): --resume with
    another budget or seed, or after the fact set changed, is refused naming what differs (not
    a preset field the user never set); a refused start never rewrites the record."""
    from attnlab.experiments.learn import BEGUN, _begin

    facts = factset.load(write_set(tmp_path / "towns"))
    out = tmp_path / "run"
    _begin(out, facts, {"minutes": 1.5, "seed": 0, "pretrained": True}, resume=False, overwrite=False)
    record = json.loads((out / BEGUN).read_text())
    assert record["fact_set"]["digest"] == facts.digest() and record["minutes"] == 1.5
    _begin(out, facts, {"minutes": 1.5, "seed": 0, "pretrained": True}, resume=True, overwrite=False)
    with pytest.raises(ValueError, match=r"was begun with --minutes 1.5, --seed 0, not --minutes 2, --seed 1: "
                                         "resume it with the same"):
        _begin(out, facts, {"minutes": 2.0, "seed": 1, "pretrained": True}, resume=True, overwrite=False)
    (out / "pretrain").mkdir()
    (out / "pretrain" / "checkpoint.safetensors").write_bytes(b"")  # an interrupted pretraining
    _begin(out, facts, {"minutes": 3.0, "seed": 0, "pretrained": True}, resume=False, overwrite=False)
    assert json.loads((out / BEGUN).read_text()) == record  # pretraining will refuse this start: record kept
    with (facts.root / facts.corpus.name).open("a") as f:
        f.write("Zzz. A line added since.\n")
    with pytest.raises(ValueError, match="differs from it now"):
        _begin(out, factset.load(facts.root), {"minutes": 1.5, "seed": 0, "pretrained": True}, resume=True,
               overwrite=False)


def test_baseline_of_several_relations_gives_each_its_own_most_frequent_answer(tmp_path, capsys):
    """Always answering one value for every relation scores a city question with a year: the
    baseline gives each relation its own most frequent answer, as learn's table does."""
    facts = write_set(tmp_path / "towns")
    capsys.readouterr()
    assert cli.main(["baseline", "--facts", str(facts)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["country", "river", "all"]
    train = [line.split("\t") for line in (facts / "train.tsv").read_text().splitlines()]
    from collections import Counter

    country = Counter(a for q, a in train if q.startswith("Which country")).most_common(1)[0][0]
    assert f'country: most frequent answer in {facts / "train.tsv"}: "{country}"' in lines[0]
    assert "all: each relation's most frequent answer on" in lines[2]


def test_serve_reads_each_run_with_the_fact_set_it_learned(learned, tmp_path):
    """A lab of runs that learned different sets: each run's dev view, evidence and abstention fit
    are its own set's, not the first run's."""
    import shutil

    from attnlab.cli import build_parser, flags
    from attnlab.cli.serving import build_lab

    facts, run = learned
    other = write_set(tmp_path / "towns-b", dev="Which country is Dunmoor in?\tSorn\n")  # another dev file
    second = tmp_path / "second"
    shutil.copytree(run, second)
    (second / "abstention.json").unlink(missing_ok=True)
    (second / "factset.json").write_text(json.dumps(factset.load(other).record()), encoding="utf-8")
    argv = ["serve", str(run), str(second), "--out-dir", str(tmp_path / "serve"), "--device", "cpu"]
    args = build_parser().parse_args(argv)
    flags.apply_fact_set(args)
    flags.resolve_data_paths(args)
    lab = build_lab(args)
    try:
        first, own = lab.runs
        assert first.facts is None and len(lab.facts_of(first).dev) == 4  # the lab's: the first run's set
        assert len(own.facts.dev) == 1 and lab.facts_of(own).dev[0].question == "Which country is Dunmoor in?"
        assert str(facts / "train.tsv") in first.rule.how and str(other / "train.tsv") in own.rule.how
    finally:
        lab.close()
