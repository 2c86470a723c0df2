"""A lab over the shipped model models/cpu and a seconds-trained tiny run, on a few dev
questions, for the tests of `attnlab serve` (test_serve*.py)."""

from __future__ import annotations

from pathlib import Path

from attnlab.api import load
from attnlab.data.datasets import read_corpus, read_qa
from tests.conftest import DATA, REPO
from tests.tiny_runs import train_tiny

SHIPPED = REPO / "models" / "cpu"
DEV_LINES = 12  # includes "Ralf Wadephul" (Berlin), whom models/cpu answers right
STAT_LINES = 200  # an edit's key statistics: enough for a test, a tenth of the default


def small_dev(directory: Path) -> Path:
    lines = (DATA / "birth_dev.tsv").read_text(encoding="utf-8").splitlines()[:DEV_LINES]
    path = directory / "dev.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def make_lab(directory: Path, tiny_run: Path, rule=None):
    """Runs 0 (models/cpu, with ``rule``) and 1 (the tiny run); edits are saved in directory/out."""
    from attnlab.serve.lab import Lab, Run

    corpus = read_corpus(DATA / "wiki.txt").split("\n")
    runs = [Run(str(SHIPPED), load(SHIPPED, device="cpu"), rule), Run(str(tiny_run), load(tiny_run, device="cpu"))]
    return Lab(runs, corpus, read_qa(small_dev(directory), labelled=True), directory / "out",
               stat_lines=STAT_LINES)


def tiny(directory: Path) -> Path:
    return train_tiny(directory / "tiny")
