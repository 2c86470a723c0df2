"""Seconds-long trained models for tests: runs on the real data files (what users do with a run)
and models that have memorised a few given lines."""

from __future__ import annotations

from pathlib import Path

import torch

from attnlab import cli
from attnlab.model.gpt import GPT, lm_loss
from attnlab.data.vocab import Vocab
from tests.conftest import DATA


def train_tiny(run_dir: Path, *extra: str, recall: bool = True) -> Path:
    """A tiny model pretrained for a few steps on data/wiki.txt (recall format: lm objective,
    answers 'Where was NAME born?' by recalling the person's line first)."""
    fmt = ["--objective", "lm", "--qa-format", "recall", "--recall-chars", "40"] if recall else []
    code = cli.main(["pretrain", "--preset", "tiny", *fmt, "--max-steps", "4", "--log-every", "1",
                     "--device", "cpu", "--out-dir", str(run_dir), "--corpus", str(DATA / "wiki.txt"),
                     "--held-out", str(DATA / "birth_dev.tsv"), "--eval-file", "", *extra])
    assert code == 0
    return run_dir


def memorise(model: GPT, vocab: Vocab, texts: list[str], steps: int) -> None:
    """Full-batch next-character training on ``texts`` (padded with PAD, which the loss
    ignores) until the model has them by heart; leaves it in eval mode."""
    ids = [vocab.encode(t) for t in texts]
    T = max(map(len, ids))
    x = torch.zeros(len(ids), T - 1, dtype=torch.long)
    y = torch.zeros(len(ids), T - 1, dtype=torch.long)
    for i, row in enumerate(ids):
        x[i, : len(row) - 1] = torch.tensor(row[:-1])
        y[i, : len(row) - 1] = torch.tensor(row[1:])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = lm_loss(model.run(x)[0], y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def ask_rows(text: str) -> list[dict[str, str]]:
    """The rows of `attnlab ask`'s table (its first line is the header), each as column -> cell:
    the columns start where their names start in the header."""
    header, *rows = [line for line in text.splitlines() if line.strip()]
    names = header.split()
    starts = [header.index(" " + n) + 1 if i else 0 for i, n in enumerate(names)]
    ends = starts[1:] + [None]
    return [{n: row[a:b].strip() for n, a, b in zip(names, starts, ends)} for row in rows]
