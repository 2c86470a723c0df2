"""`attnlab ask` with no question reads stdin line by line and answers each line as soon as it
is read, through a real pipe, until end of input."""

from __future__ import annotations

import os
import select
import subprocess
import sys

import pytest

import attnlab
from tests.conftest import DATA, REPO
from tests.tiny_runs import ask_rows, train_tiny

HANG_GUARD_S = 120  # only so that a broken build fails instead of hanging; not a speed check


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("ask") / "run")


def _ask_process(run, *extra, unbuffered: bool = False):
    """``unbuffered``: stdout read as raw bytes, a line at a time, so that select() sees every line
    still to be read (a buffered reader may hold the next line while select waits for more)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "attnlab", "ask", str(run), "--device", "cpu", "--abstain", "off",
                             *extra],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=not unbuffered, bufsize=0 if unbuffered else -1, env=env)


def _read_line(stream) -> str:
    ready, _, _ = select.select([stream], [], [], HANG_GUARD_S)
    assert ready, "no answer while stdin was still open: ask waits for end of input"
    return stream.readline().decode("utf-8")


def test_each_question_is_answered_before_the_next_is_sent(run):
    questions = ["Where was Ralf Wadephul born?", "Where was Joseph Baggaley born?"]
    expected = attnlab.load(run, device="cpu").ask(questions)
    proc = _ask_process(run, "--evidence", str(DATA / "wiki.txt"), unbuffered=True)
    header = None
    try:
        for question, answer in zip(questions, expected):
            proc.stdin.write(question.encode("utf-8") + b"\n")
            proc.stdin.flush()
            header = header or _read_line(proc.stdout)  # the table's header comes with the first answer
            (row,) = ask_rows(header + _read_line(proc.stdout))
            assert (row["question"], row["answer"]) == (question, answer.answer.strip())
            assert row["confidence"] == f"{answer.confidence:.2f}"
            assert ("unfinished" in row["note"]) == (not answer.complete)
            assert row["evidence"].startswith(("supported", "not supported", "the corpus does not mention"))
        proc.stdin.write(b"\n")  # blank lines are skipped
        proc.stdin.close()
        assert proc.wait(HANG_GUARD_S) == 0
        assert proc.stdout.read() == b""
    finally:
        proc.kill()


def test_a_line_no_relation_matches_is_answered_so_and_the_rest_answered(run):
    proc = _ask_process(run, "--evidence", "")
    out, err = proc.communicate("Where was Ralf Wadephul born?\nWho is he?\nwhere was joseph baggaley born\n",
                                timeout=HANG_GUARD_S)
    assert proc.returncode == 0, err
    rows = ask_rows(out)
    assert [row["question"] for row in rows] == [
        "Where was Ralf Wadephul born?", "Who is he?", "where was joseph baggaley born"]
    assert rows[1]["answer"] == "I can't parse this"
    assert "Where was {subject} born?" in rows[1]["note"]
    assert rows[2]["answer"] != "I can't parse this"


def test_a_line_with_an_unknown_character_is_reported_and_the_rest_answered(run):
    proc = _ask_process(run, "--evidence", "")
    out, err = proc.communicate("Where was Ralf Wadephul born?\nWhere was ☃ born?\n", timeout=HANG_GUARD_S)
    assert proc.returncode == 2
    assert [row["question"] for row in ask_rows(out)] == ["Where was Ralf Wadephul born?"]
    assert err.startswith("attnlab ask: error: <stdin>:2: character '☃'")


def test_no_questions_at_all_is_an_error(run):
    proc = _ask_process(run, "--evidence", "")
    _, err = proc.communicate("\n\n", timeout=HANG_GUARD_S)
    assert proc.returncode == 2 and "no questions" in err
