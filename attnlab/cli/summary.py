"""The few lines a training command ends with: what was trained, the final loss, the last dev
score (extracted, and stored where measured, each with its 95% interval), wall time, where
the outputs are and the command to run next."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..answering.evaluate import Score


def training_summary(stage: str, run_dir: Path, result, wall_s: float, next_commands: list[str],
                     dev: Score | None = None) -> str:
    """``result``: train.TrainResult; ``dev``: a score measured after training (finetune
    --eval-file), else the last evaluation row of the run's history, if any."""
    lines = [f"{stage} done: {result.steps:,} steps, {result.tokens:,} tokens, final loss "
             f"{result.final_loss:.4f}, wall time {_duration(wall_s)}"]
    lines += _dev_lines(dev, result.history)
    lines.append(f"outputs: {result.checkpoint or run_dir / 'checkpoint.safetensors'}, "
                 f"{run_dir / 'metrics.jsonl'}, {run_dir / 'config.json'}")
    lines += [f"next: {c}" for c in next_commands]
    return "\n".join(lines)


def _dev_lines(dev: Score | None, history: list[dict[str, Any]]) -> list[str]:
    if dev is not None:
        return [f"dev: {dev.with_interval()} answered correctly (extracted)"]
    row = next((r for r in reversed(history) if "dev_correct" in r), None)
    if row is None:
        return []
    line = (f"dev at step {row['step']:,}: {Score(row['dev_correct'], row['dev_total']).with_interval()} "
            "answered correctly (extracted)")
    if "stored" in row:
        line += f"; {Score(row['stored'], row['stored_total']).with_interval()} stored"
    return [line]


def _duration(seconds: float) -> str:
    minutes, s = divmod(round(seconds), 60)
    return f"{minutes} min {s} s" if minutes else f"{seconds:.1f} s"
