"""The fault corpus of issue 45 (item 4, "Found by the audit of this round"): each case is a clear
one-line error (exit status 2 and nothing written for a command's bad input) or the right result.
The serve cases are in test_serve.py, next to the other bad requests."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import attnlab
from attnlab import cli
from attnlab.experiments import compare as experiments
from tests.conftest import DATA, REPO
from tests.test_bad_input import exit_code, refused
from tests.test_facts import run  # noqa: F401  (run: test_facts's fixture, a tiny recall model)
from tests.test_variants import write_data
from tests.tiny_runs import train_tiny

SHIPPED = REPO / "models" / "cpu"
RALF = "Where was Ralf Wadephul born?"


@pytest.fixture(scope="module")
def model():
    return attnlab.load(SHIPPED, device="cpu")


# ---- the Python API ----------------------------------------------------------------------------
@pytest.mark.parametrize("path", [5, None, 2.5])
def test_load_of_something_that_is_no_path_says_so(path):
    with pytest.raises(TypeError, match="load takes the path of a run directory or a checkpoint file, got"):
        attnlab.load(path)


@pytest.mark.parametrize("questions, kind", [({"q": 1}, "dict"), ({RALF: 1}, "dict"), (b"Where", "bytes"), (5, "int")])
def test_ask_of_no_question_is_a_type_error(model, questions, kind):
    with pytest.raises(TypeError, match=fr"ask takes a question \(str\) or a list of them, got {kind}"):
        model.ask(questions)


def test_run_with_cache_of_an_empty_text_says_so(model):
    with pytest.raises(ValueError, match="a text of at least one character"):
        model.run_with_cache("")
    with pytest.raises(TypeError, match="takes a text"):
        model.run_with_cache(None)


def test_run_with_cache_takes_one_name_as_a_string(model):
    _, cache = model.run_with_cache(RALF, "embed")
    assert list(cache) == ["embed"] and cache["embed"].shape[:2] == (1, len(RALF))
    _, cache = model.run_with_cache(RALF, "blocks.0.mlp.out")
    assert list(cache) == ["blocks.0.mlp.out"]


# ---- compare -----------------------------------------------------------------------------------
def _compare(paths, out, *extra: str) -> list[str]:
    return ["compare", "--preset", "tiny", "--variants", "vanilla", "--no-scratch", "--max-steps", "1",
            "--n-layer", "1", "--n-embd", "16", "--block-size", "48", "--batch-size", "4",
            "--corpus", str(paths["corpus"]), "--train-file", str(paths["train"]),
            "--eval-file", str(paths["dev"]), "--out-dir", str(out), "--device", "cpu", *extra]


@pytest.mark.parametrize("extra", [("--seeds", "1000000"), ("--seeds", "101"), ("--seeds", "1000000", "--gather")])
def test_compare_refuses_a_senseless_number_of_seeds_at_once(tmp_path, capsys, extra):
    with pytest.raises(ValueError, match=r"the number of seeds must be an integer in \[1, 100\], got 1000000"):
        experiments.compare(experiments.CompareSettings(*[None] * 4, variants=["vanilla"], seeds=1_000_000,
                                                       out=tmp_path / "lib"))
    assert not (tmp_path / "lib").exists()
    paths = write_data(tmp_path)
    message = refused(_compare(paths, tmp_path / "out", *extra), capsys)
    assert "--seeds" in message and "[1, 100]" in message
    assert not (tmp_path / "out").exists()


def test_compare_refuses_a_variant_named_twice_before_writing(tmp_path, capsys):
    paths = write_data(tmp_path)
    message = refused(_compare(paths, tmp_path / "out", "--variants", "vanilla,rotary,vanilla"), capsys)
    assert "vanilla more than once" in message
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A finished tiny compare (one variant, one seed) with its record; tests change copies."""
    where = tmp_path_factory.mktemp("recorded")
    paths = write_data(where)
    assert cli.main(_compare(paths, where / "out", "--records", str(where / "records"))) == 0
    return paths, where / "records"


def _garbled(recorded, tmp_path, change) -> tuple[list[str], Path]:
    paths, records = recorded
    copy = tmp_path / "records"
    shutil.copytree(records, copy)
    [path] = copy.rglob("*.json")
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))
    return _compare(paths, tmp_path / "again", "--records", str(copy)), path


def test_a_record_is_reused_as_it_is(recorded, tmp_path):
    argv, _ = _garbled(recorded, tmp_path, lambda r: None)
    assert cli.main(argv) == 0
    assert (tmp_path / "again" / "results.md").exists() and not (tmp_path / "again" / "vanilla").exists()


@pytest.mark.parametrize("change, problem", [
    (lambda r: r.update(dev_predictions=r["dev_predictions"][:2]), "dev_predictions hold 2 answers for the 4 dev"),
    (lambda r: r["row"].update(parameters="1234"), "'parameters' is '1234', not an integer"),
    (lambda r: r["row"].update(dev_correct="3"), "'dev_correct' is '3', not an integer"),
    (lambda r: r["row"].update(pretrain_loss=[1]), "'pretrain_loss' is [1], not a number"),
    (lambda r: r["row"].update(dev_each="1"), "dev_each does not mark"),
    (lambda r: r["row"].update(dev_correct=9), "counts 9 of 4"),
    (lambda r: r["row"].pop("model"), "no 'model'"),
])
def test_a_damaged_record_is_refused_naming_the_file(recorded, tmp_path, capsys, change, problem):
    argv, path = _garbled(recorded, tmp_path, change)
    message = refused(argv, capsys)
    assert str(path) in message and problem in message and "remove it" in message
    assert not (tmp_path / "again" / "results.md").exists()


# ---- edit --undo --json ------------------------------------------------------------------------
def test_undo_with_json_prints_its_document(run, tmp_path, capsys):  # noqa: F811  (run: test_facts's fixture)
    edited, undone = tmp_path / "a", tmp_path / "u"
    assert cli.main(["edit", str(run / "run"), "--person", "Ana Linda", "--place", "Lima", "--out-dir", str(edited),
                     "--corpus", str(run / "wiki.txt"), "--train-file", "", "--eval-file", ""]) == 0
    capsys.readouterr()
    assert cli.main(["edit", str(edited), "--undo", "1", "--out-dir", str(undone), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["undone"]["id"] == 1 and document["undone"]["person"] == "Ana Linda"
    assert document["edits"] == [] and document["run_dir"] == str(undone)
    assert sorted(document["written"]) == sorted(str(undone / f) for f in ("checkpoint.safetensors", "edits.json"))


# ---- evaluate --attention ----------------------------------------------------------------------
@pytest.mark.parametrize("attention, noted", [("rotary", True), ("argmax", False)])
def test_evaluating_with_other_attention_scores_says_so(run, tmp_path, caplog, attention, noted):  # noqa: F811
    argv = ["evaluate", str(run / "run"), "--eval-file", str(run / "dev.tsv"), "--abstain", "off", "--device", "cpu",
            "--predictions", str(tmp_path / "p.txt"), "--attention", attention]
    with caplog.at_level("INFO", logger="attnlab"):
        assert cli.main(argv) == 0
    note = f"trained with vanilla attention, run here with {attention}: its weights were not trained for"
    assert (note in caplog.text) == noted, caplog.text


# ---- pretrain: a held-out file mixed in, two names of one flag ---------------------------------
PRETRAIN = ["pretrain", "--preset", "tiny", "--objective", "lm", "--mix-ratio", "0.1", "--max-steps", "1",
            "--device", "cpu", "--eval-file", ""]


@pytest.mark.parametrize("copy", [False, True])
@pytest.mark.parametrize("held_out", [[], [str(DATA / "birth_dev.tsv")]])
def test_pretraining_refuses_to_mix_in_a_held_out_file(tmp_path, capsys, copy, held_out):
    mix = DATA / "birth_dev.tsv"
    if copy:
        mix = Path(shutil.copy(mix, tmp_path / "questions.tsv"))
    message = refused([*PRETRAIN, "--mix-qa", str(mix), "--out-dir", str(tmp_path / "run"), "--held-out", *held_out],
                      capsys)
    assert f"--mix-qa {mix}:" in message and "the held-out evaluation file" in message
    assert "birth_dev.tsv" in message and not (tmp_path / "run").exists()


def test_the_training_file_may_still_be_mixed_in(tmp_path):
    assert cli.main([*PRETRAIN, "--mix-qa", str(DATA / "birth_places_train.tsv"), "--out-dir", str(tmp_path / "run"),
                     "--corpus", str(DATA / "wiki.txt"), "--mix-overlap", "drop"]) == 0


@pytest.mark.parametrize("order", ["new first", "old first"])
def test_out_dir_and_its_old_name_with_two_values_are_refused(tmp_path, capsys, order):
    a, b = ["--out-dir", str(tmp_path / "A")], ["--run-dir", str(tmp_path / "B")]
    code = exit_code([*PRETRAIN, *(a + b if order == "new first" else b + a)])
    err = capsys.readouterr().err
    assert code == 2 and "set the same option (--out-dir" in err and "give it once" in err, err
    assert not (tmp_path / "A").exists() and not (tmp_path / "B").exists()
    if order == "new first":
        assert len(err.strip().splitlines()) == 1, err


def test_out_dir_and_its_old_name_with_one_value_are_one_option(tmp_path, capsys):
    argv = ["pretrain", "--preset", "tiny", "--max-steps", "1", "--device", "cpu", "--eval-file", "",
            "--corpus", str(DATA / "wiki.txt"), "--out-dir", str(tmp_path / "A"), "--run-dir", str(tmp_path / "A")]
    assert cli.main(argv) == 0 and (tmp_path / "A" / "checkpoint.safetensors").exists()
    assert "--run-dir is deprecated; use --out-dir" in capsys.readouterr().err


# ---- kill -9 during a checkpoint write: safetensors' own temporary file ------------------------
def test_safetensors_temporary_files_of_a_killed_write_are_removed(tmp_path):
    from attnlab.model.checkpoint import remove_stale_temp_files

    old = [tmp_path / ".tmpoMBETZ", tmp_path / ".tmp-x1y2.safetensors"]  # safetensors', save_checkpoint's
    kept = [tmp_path / ".tmpNow123", tmp_path / ".tmpab", tmp_path / ".tmp-1234-results.md", tmp_path / "notes.txt"]
    for p in old + kept:
        p.write_bytes(b"x")
    for p in old + kept[1:]:
        os.utime(p, (0, 0))  # left by an earlier process; .tmpNow123 is being written now
    assert sorted(remove_stale_temp_files(tmp_path)) == sorted(old)
    assert all(p.exists() for p in kept)


def test_resuming_after_kill_9_leaves_no_safetensors_temporary(tmp_path):
    run_dir = train_tiny(tmp_path / "run", recall=False)
    left = run_dir / ".tmpQz81Lk"  # what a kill -9 inside safetensors' save_file leaves
    left.write_bytes(b"\0" * 1000)
    os.utime(left, (0, 0))
    train_tiny(run_dir, "--resume", "--max-steps", "5", recall=False)
    assert not left.exists() and not list(run_dir.glob(".tmp*"))


# ---- audit on a corpus too small to invent people ----------------------------------------------
def test_audit_on_a_tiny_corpus_names_the_file(run, tmp_path, capsys):  # noqa: F811
    corpus = tmp_path / "one.txt"
    corpus.write_text("Ana Lindi. Ana Lindi was born in Oslo.\n")
    message = refused(["audit", str(run / "run"), "--corpus", str(corpus), "--eval-file", str(run / "dev.tsv"),
                       "--train-file", str(run / "dev.tsv"), "--holdout-file", str(run / "dev.tsv"),
                       "--out-dir", str(tmp_path / "audit"), "--device", "cpu", "--names", "3"], capsys)
    assert f"{corpus}: too few subjects to recombine their names" in message
    assert not (tmp_path / "audit").exists()


# ---- a second Ctrl-C while the interpreter shuts down ------------------------------------------
SHUTDOWN = """
import atexit, os, signal, sys, time
from attnlab.__main__ import main

def ctrl_c():  # registered after torch's: runs before them, as a Ctrl-C in the middle of shutdown
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.5)

atexit.register(ctrl_c)
sys.argv = ["attnlab", "variants", "--preset", "tiny"]
sys.exit(main())
"""


def test_ctrl_c_during_shutdown_prints_nothing(tmp_path):
    def as_from_a_terminal():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", SHUTDOWN], env=env, capture_output=True, text=True, timeout=120,
                          preexec_fn=as_from_a_terminal)
    assert done.returncode == 0 and "| vanilla |" in done.stdout, done.stderr
    assert "KeyboardInterrupt" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
