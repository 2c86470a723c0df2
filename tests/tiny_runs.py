"""Seconds-long trained models on the real data files, for tests of what users do with a run."""

from __future__ import annotations

from pathlib import Path

from attnlab import cli
from tests.conftest import DATA


def train_tiny(run_dir: Path, *extra: str, recall: bool = True) -> Path:
    """A tiny model pretrained for a few steps on data/wiki.txt (recall format: lm objective,
    answers 'Where was NAME born?' by recalling the person's line first)."""
    fmt = ["--objective", "lm", "--qa-format", "recall", "--recall-chars", "40"] if recall else []
    code = cli.main(["pretrain", "--preset", "tiny", *fmt, "--max-steps", "4", "--log-every", "1",
                     "--device", "cpu", "--out-dir", str(run_dir), "--corpus", str(DATA / "wiki.txt"),
                     "--mix-qa", str(DATA / "birth_places_train.tsv"),
                     "--held-out", str(DATA / "birth_dev.tsv"), "--eval-file", "", *extra])
    assert code == 0
    return run_dir
