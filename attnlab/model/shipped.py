"""Shipped models: a run directory reduced to what answering needs (weights-only checkpoint with
its configs and vocabulary) plus ``provenance.json`` (command, commit, wall time, accuracy).

A shipped model works as a run directory for every command (evaluate, ask, finetune --init),
but nothing is ever written into it: outputs that would go into a run directory go to
``runs/NAME`` beside its ``models/`` directory instead (``output_dir``), never into the current
directory by surprise.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .checkpoint import CHECKPOINT_NAME, load_checkpoint, save_checkpoint

PROVENANCE = "provenance.json"


def is_shipped(run: str | os.PathLike) -> bool:
    path = Path(run)
    return (path if path.is_dir() else path.parent).joinpath(PROVENANCE).is_file()


def output_dir(run: str | os.PathLike) -> Path:
    """Where a command writes what belongs to a run (predictions): the run directory itself,
    or, for a shipped model, which stays as shipped, ``runs/NAME`` beside the ``models/``
    directory holding it (the checkout's runs/, whatever the current directory)."""
    path = Path(run)
    directory = path if path.is_dir() else path.parent
    if is_shipped(directory):
        directory = directory.resolve()
        root = directory.parent.parent if directory.parent.name == "models" else directory.parent
        return root / "runs" / directory.name
    return directory


def ship(run: str | os.PathLike, out: str | os.PathLike, provenance: dict[str, Any]) -> Path:
    """Write ``out``/checkpoint.safetensors (weights, configs, vocabulary, training metadata;
    no optimiser or random state) and ``out``/provenance.json. Refuses to overwrite."""
    out = Path(out)
    if (out / CHECKPOINT_NAME).exists():
        raise FileExistsError(f"{out / CHECKPOINT_NAME}: a model is already shipped here; remove it first")
    ckpt = load_checkpoint(run)
    model = ckpt.build_model()
    save_checkpoint(out / CHECKPOINT_NAME, model, ckpt.vocab, ckpt.meta)
    tmp = out / f".tmp-{PROVENANCE}"
    tmp.write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out / PROVENANCE)
    return out
