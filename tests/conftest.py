"""Shared fixtures: tiny configurations and tiny data files so every test runs in seconds."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

from attnlab.config.settings import ModelConfig, TrainConfig

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data"

# One thread: the tests' tiny models gain little from a second one, and a thread team is what
# collapses when another process takes a core (docs/benchmarks.md "Training next to a busy core").
torch.set_num_threads(1)


@pytest.fixture
def tiny_config() -> ModelConfig:
    return ModelConfig(vocab_size=40, block_size=48, n_layer=2, n_head=2, n_embd=16, dropout=0.0)


@pytest.fixture
def tiny_train() -> TrainConfig:
    return TrainConfig(epochs=1, batch_size=8, learning_rate=3e-3, checkpoint_every=0, log_every=1,
                       warmup_tokens=100, seed=0)


PEOPLE = [
    ("Ada Brook", "Paris"), ("Bela Kron", "Lima"), ("Cato Fenn", "Oslo"), ("Dara Vell", "Rome"),
    ("Eli Marsh", "Kyiv"), ("Fay Dunmore", "Paris"), ("Gus Pell", "Lima"), ("Hana Roe", "Oslo"),
    ("Ivo Lind", "Rome"), ("Jun Sato", "Kyiv"), ("Kai Odell", "Paris"), ("Lea Quist", "Lima"),
]


@pytest.fixture
def tiny_data(tmp_path: Path) -> dict[str, Path]:
    """A corpus of one-line biographies and QA files about the same people."""
    lines = [f"{n}. {n} was born in {p} and lived there." for n, p in PEOPLE]
    corpus = "\n".join(lines + ["Where was everyone born? We know."])
    (tmp_path / "wiki.txt").write_text(corpus, encoding="utf-8")
    qa = "".join(f"Where was {n} born?\t{p}\n" for n, p in PEOPLE)
    (tmp_path / "train.tsv").write_text(qa, encoding="utf-8")
    (tmp_path / "dev.tsv").write_text(qa, encoding="utf-8")
    (tmp_path / "test.tsv").write_text("".join(f"Where was {n} born?\n" for n, _ in PEOPLE), encoding="utf-8")
    return {k: tmp_path / f for k, f in
            [("corpus", "wiki.txt"), ("train", "train.tsv"), ("dev", "dev.tsv"), ("test", "test.tsv")]}


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark_fixture(name: str):
    """A module-scoped fixture giving benchmarks/NAME.py as a module (its folder is on sys.path
    while it is imported, as when the script runs)."""
    @pytest.fixture(scope="module")
    def script():
        sys.path.insert(0, str(BENCHMARKS))
        try:
            yield importlib.import_module(name)
        finally:
            sys.path.remove(str(BENCHMARKS))
    return script
