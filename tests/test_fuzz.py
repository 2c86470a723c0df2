"""Fuzzing the command line (issue 12, item 7): random malformed question files, corpora,
checkpoint metadata and flag values, run through the entry point in-process. A run may end in
exit code 0 (the input was fine) or 2 (refused); never in a traceback (any other exception), and
never in 0 when the input is invalid by the independent checks written here. Bounded in time:
a few dozen examples per property, no deadline, no example database."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import save_file

from attnlab import cli
from attnlab.model.checkpoint import CHECKPOINT_NAME
from tests.conftest import DATA, PEOPLE
from tests.tiny_runs import train_tiny

FUZZ = settings(max_examples=30, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PAD, MASK = "\u25a1", "\u2047"


def run_cli(argv: list[str]) -> tuple[int, str]:
    """Exit code and stderr of the command line run in-process; any exception other than the
    parser's SystemExit(2) escapes, failing the property (a traceback)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli.main(argv)
        except SystemExit as e:
            if e.code != 2:
                raise
            code = 2
    return code, err.getvalue()


def error_lines(err: str) -> list[str]:
    """The lines a terminal shows (progress bars redrawn with \\r are not lines)."""
    return [shown for line in err.split("\n") if (shown := line.rsplit("\r", 1)[-1].strip())]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """A tiny trained run (direct format, with optimiser state) and a good question file."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "qa.tsv").write_text("".join(f"Where was {n} born?\t{p}\n" for n, p in PEOPLE[:4]))
    return {"root": root, "run": train_tiny(root / "run", recall=False), "qa": root / "qa.tsv"}


# ---- random flag values --------------------------------------------------------------------
def _subcommands() -> dict[str, argparse.ArgumentParser]:
    return next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices


def _base(command: str, world: dict[str, Path]) -> list[str]:
    """A command line that would run (cheaply) as it is: the fuzzed flag is added to it."""
    run, qa, out = str(world["run"]), str(world["qa"]), str(world["root"] / "flag-out")
    return {
        "pretrain": ["--preset", "tiny", "--max-steps", "1", "--corpus", str(DATA / "wiki.txt"), "--eval-file", "",
                     "--out-dir", out],
        "finetune": ["--preset", "tiny", "--max-steps", "1", "--init", run, "--train-file", qa, "--eval-file", "",
                     "--out-dir", out],
        "evaluate": [run, "--eval-file", qa, "--predictions", f"{out}/p.txt"],
        "ask": [run, "Where was Ada Brook born?", "--evidence", ""],
        "compare": ["--preset", "tiny", "--out-dir", out], "demo": ["--out-dir", out],
        "variants": ["--preset", "tiny"], "plot": [run, "--image", f"{out}/x.png"],
        "generate": [run, "abc"], "attention": [run, "abc", "--out-dir", out], "explore": ["copy"],
        "calibrate": [run, "--eval-file", qa, "--out-dir", out], "audit": [run, "--names", "5", "--out-dir", out],
        "trace": [run, "Where was Ada Brook born?", "--out-dir", out],
        "edit": [run, "--person", "Ada Brook", "--place", "Paris", "--out-dir", out],
        "edits": [run], "synth": ["bios", "--people", "4", "--out-dir", out],
    }.get(command, [])


def _options() -> list[tuple[str, str, str]]:
    """(command, flag, kind) of every option that takes a number, a choice or a device."""
    found = []
    for name, parser in _subcommands().items():
        for a in parser._actions:
            if not a.option_strings or a.nargs == 0:
                continue
            if a.choices is not None:
                found.append((name, a.option_strings[0], "choice"))
            elif a.type in (int, float) or hasattr(a.type, "bound"):
                found.append((name, a.option_strings[0], "number"))
            elif a.dest == "device":
                found.append((name, a.option_strings[0], "device"))
    return found


OPTIONS = _options()


def _certainly_not_a_setting(text: str) -> bool:
    """No numeric option takes this: not a number, not finite, or below zero."""
    try:
        value = float(text)
    except ValueError:
        return True
    return not math.isfinite(value) or value < 0


NOT_A_NUMBER = st.one_of(
    st.integers(max_value=-1).map(str),
    st.floats(max_value=-1e-12, allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-0.5", "", " ", "1,5", "0x10", "one"]),
    st.text(max_size=8).filter(_certainly_not_a_setting))
NOT_A_DEVICE = st.one_of(st.sampled_from(["tpu", "cuda:99", "gpu", "CPU", "meta", "xla", ""]),
                         st.text(max_size=10).filter(lambda s: not re.fullmatch(r"auto|cpu(:\d+)?|cuda(:\d+)?|mps", s)))


@FUZZ
@given(data=st.data(), option=st.sampled_from(OPTIONS))
def test_random_bad_flag_values_are_refused(world, data, option):
    command, flag, kind = option
    if kind == "choice":
        choices = next(a.choices for a in _subcommands()[command]._actions if flag in a.option_strings)
        value = data.draw(st.text(max_size=12).filter(lambda s: s not in choices), label="value")
    else:
        value = data.draw(NOT_A_DEVICE if kind == "device" else NOT_A_NUMBER, label="value")
    code, err = run_cli([command, *_base(command, world), f"{flag}={value}"])
    assert code == 2, f"{command} {flag}={value!r} was accepted"
    assert len(error_lines(err)) == 1, err
    assert not (world["root"] / "flag-out").exists()


# ---- random question files -----------------------------------------------------------------
QUESTIONISH = st.text(alphabet=st.sampled_from(list("Where was Ada Brook born? \t\r\xa0é漢\u2047\u25a1\ufeff.,")), max_size=40)
TSV_LINES = st.lists(st.one_of(
    QUESTIONISH,
    st.builds(lambda q, p: f"{q}\t{p}", QUESTIONISH, QUESTIONISH),
    st.sampled_from([f"Where was {n} born?\t{p}" for n, p in PEOPLE] + [f"Where was {n} born?" for n, _ in PEOPLE]),
), max_size=6)


def tsv_problem(raw: bytes, labelled: bool | None) -> str | None:
    """Why a question file is invalid, checked independently of attnlab/data/datasets.py (None: valid)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8"
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return "no questions"
    if any(PAD in line or MASK in line for line in lines):
        return "a reserved character"
    tabbed = any("\t" in line for line in lines)
    if labelled and not tabbed:
        return "no labels"
    if tabbed:
        for line in lines:
            parts = line.split("\t")
            # read as it comes (labelled None), "question<TAB>" is an unlabelled question
            if len(parts) != 2 or not parts[0].strip() or (labelled and not parts[1].strip()):
                return "not question<TAB>answer"
    return None


@FUZZ
@given(lines=TSV_LINES, ending=st.sampled_from(["\n", "\r\n", ""]), garbage=st.binary(max_size=3))
def test_random_question_files(world, lines, ending, garbage):
    bad = world["root"] / "fuzz.tsv"
    raw = ending.join(lines).encode("utf-8") + garbage
    bad.write_bytes(raw)
    good = str(world["qa"])

    code, err = run_cli(["baseline", "--train-file", str(bad), "--eval-file", good])
    assert code == (2 if tsv_problem(raw, labelled=True) else 0), err
    code, err = run_cli(["baseline", "--train-file", good, "--eval-file", str(bad)])
    assert code == (2 if tsv_problem(raw, labelled=None) else 0), err

    predictions = world["root"] / "fuzz-predictions.txt"
    predictions.unlink(missing_ok=True)
    code, err = run_cli(["evaluate", str(world["run"]), "--eval-file", str(bad), "--predictions", str(predictions)])
    if tsv_problem(raw, labelled=None):  # a valid file may still hold a character the model lacks
        assert code == 2, err
    assert code in (0, 2)
    if code == 2:
        assert len(error_lines(err)) == 1 and str(bad) in err, err
        assert not predictions.exists()


# ---- random corpora ----------------------------------------------------------------------------
CORPUS_TEXT = st.text(alphabet=st.sampled_from(list("Ada was born in Paris. \t\n\r\xa0é漢\u2047\u25a1\ufeff")), max_size=60)


def corpus_problem(raw: bytes) -> str | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8"
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        return "empty"
    if PAD in text or MASK in text:
        return "a reserved character"
    return None


@settings(FUZZ, max_examples=12)
@given(text=CORPUS_TEXT, garbage=st.binary(max_size=2))
def test_random_corpora(world, text, garbage):
    corpus = world["root"] / "fuzz-corpus.txt"
    raw = text.encode("utf-8") + garbage
    corpus.write_bytes(raw)
    out = world["root"] / "corpus-run"
    shutil.rmtree(out, ignore_errors=True)
    code, err = run_cli(["pretrain", "--preset", "tiny", "--max-steps", "1", "--batch-size", "2", "--device", "cpu",
                         "--corpus", str(corpus), "--eval-file", "", "--out-dir", str(out)])
    problem = corpus_problem(raw)
    assert code == (2 if problem else 0), (problem, err)
    if problem:
        assert len(error_lines(err)) == 1 and str(corpus) in err, err
        assert not out.exists()
    else:
        assert (out / CHECKPOINT_NAME).is_file()


# ---- random damage to checkpoint metadata --------------------------------------------------------
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 10**6), st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6)

FIELD_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "tuple": (list,)}


def _original(world) -> tuple[dict, dict]:
    with safe_open(str(world["run"] / CHECKPOINT_NAME), "pt") as f:
        return json.loads(f.metadata()["attnlab"]), {k: f.get_tensor(k) for k in f.keys()}


def _wrong_type(field: str, value) -> bool:
    """A model_config value of the wrong JSON type (bool is no number here)."""
    from attnlab.config.settings import ModelConfig

    kind = str(ModelConfig.__dataclass_fields__[field].type)
    if kind in ("int", "float") and isinstance(value, bool):
        return True
    return not isinstance(value, FIELD_TYPES[kind])


@st.composite
def damage(draw, header: dict):
    """(new metadata text, expected exit codes) for one random damage to ``header``."""
    h = json.loads(json.dumps(header))
    where = draw(st.sampled_from(["raw", "top", "model_config", "meta", "optimizer"]))
    if where == "raw":
        return draw(st.text(max_size=30)), {2}
    if where == "top":
        key = draw(st.sampled_from(["format", "model_config", "vocab"]))
        if draw(st.booleans()):
            del h[key]
        else:
            h[key] = draw(JSON_VALUES.filter(lambda v: v != header[key]))
        return json.dumps(h), {2}
    if where == "model_config":
        key = draw(st.sampled_from(sorted(h["model_config"])))
        if draw(st.booleans()):
            del h["model_config"][key]  # the field's default: may or may not fit the weights
            return json.dumps(h), {0, 2}
        value = draw(JSON_VALUES)
        h["model_config"][key] = value
        return json.dumps(h), ({2} if _wrong_type(key, value) else {0, 2})
    if where == "meta":
        if draw(st.booleans()):
            h["meta"] = draw(JSON_VALUES.filter(lambda v: not isinstance(v, dict)))
            return json.dumps(h), {2}
        key = draw(st.sampled_from(sorted(h["meta"])))
        h["meta"][key] = draw(JSON_VALUES)
        return json.dumps(h), {0, 2}
    # the optimiser state: answering never needs it
    if draw(st.booleans()):
        h.pop("optimizer", None)
    else:
        h["optimizer"] = draw(JSON_VALUES)
    return json.dumps(h), {0}


@FUZZ
@given(data=st.data())
def test_random_damage_to_checkpoint_metadata(world, data):
    header, tensors = _original(world)
    metadata, expected = data.draw(damage(header), label="damage")
    damaged = world["root"] / "damaged"
    shutil.rmtree(damaged, ignore_errors=True)
    damaged.mkdir()
    save_file(tensors, str(damaged / CHECKPOINT_NAME), metadata={"attnlab": metadata})
    code, err = run_cli(["evaluate", str(damaged), "--eval-file", str(world["qa"]), "--device", "cpu"])
    assert code in expected, err
    if code == 2:
        assert len(error_lines(err)) == 1 and str(damaged / CHECKPOINT_NAME) in err, err
        assert not list(damaged.glob("predictions-*"))
