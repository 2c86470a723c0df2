"""Where training metrics go besides metrics.jsonl: TensorBoard event files (``--tensorboard``).

The trainer hands every metrics row it appends to metrics.jsonl to a sink as well; the rows of
a run (loss, lr, tokens/s per --log-every step; dev counts per --eval-every evaluation) become
TensorBoard scalars in event files next to metrics.jsonl, so ``tensorboard --logdir runs``
shows every run. TensorBoard is an optional extra (``pip install 'attnlab[tensorboard]'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class MissingExtra(ValueError):
    """An optional package a requested feature needs is not installed (a one-line CLI error)."""


class MetricsSink(Protocol):
    def __call__(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class NoSink:
    def __call__(self, record: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardSink:
    """Each numeric field of a metrics row as a scalar at the row's step: ``train/KEY`` for
    training rows (those with a loss), ``eval/KEY`` for evaluation rows, plus
    ``eval/dev_accuracy`` where the row has dev_correct and dev_total."""

    def __init__(self, run_dir: str | Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise MissingExtra("--tensorboard needs the tensorboard package: "
                               "pip install 'attnlab[tensorboard]' (or pip install tensorboard)") from None
        self.writer = SummaryWriter(log_dir=str(run_dir))

    def __call__(self, record: dict[str, Any]) -> None:
        step = int(record["step"])
        group = "train" if "loss" in record else "eval"
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(f"{group}/{key}", value, step)
        if record.get("dev_total"):
            self.writer.add_scalar("eval/dev_accuracy", record["dev_correct"] / record["dev_total"], step)
        self.writer.flush()  # a run stopped at any point leaves its curves readable

    def close(self) -> None:
        self.writer.close()


def metrics_sink(run_dir: str | Path, tensorboard: bool) -> MetricsSink:
    return TensorBoardSink(run_dir) if tensorboard else NoSink()
