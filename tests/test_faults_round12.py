"""The fault corpus of issue 45 (item 4, "Found by the audit of this round"): each case is a clear
one-line error (exit status 2 and nothing written for a command's bad input) or the right result.
The serve cases are in test_serve.py, next to the other bad requests."""

from __future__ import annotations

import pytest

import attnlab
from tests.conftest import REPO

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
    with pytest.raises(TypeError, match=f"a question must be a string or a list of strings, got {kind}"):
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
