"""Committed records of finished comparison runs: one small JSON file per (variant, seed) that
`attnlab compare --records DIR` reuses instead of training that run again, so that a seed grid
can be built up over several days, by several processes, and kept in git.

A record holds what the comparison needs and nothing heavy: the row (counts, stored facts,
pretraining loss, parameters, training seconds, the per-question dev correctness), every
setting the run was made with (preset, model, both stages' training configs with their seeds,
each data file's sha256, the attnlab version) and the dev predictions, one answer per question.
No weights: a record cannot be evaluated again, only compared.

It is found by a key, the sha256 of its settings as results depend on them (data files by
content, logging and checkpoint cadence left out, the attnlab version kept): a run with any
other setting, or made by another attnlab version, has another key and is never reused. The
file is ``DIR/VARIANT/seed-S-KEY.json`` (KEY: the key's first 16 hex digits), so records of
several presets or versions sit side by side, and two processes training different cells never
write the same file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..core.paths import write_atomically

# Training settings that change how a run is logged or saved, not what it trains: they may
# differ between a stored run and the run that reuses it.
NOT_RESULTS = frozenset({"device", "log_every", "checkpoint_every", "tensorboard", "eval_every"})
# Training options added after records were first kept, each with the value that trains exactly
# as before the option existed: at that value it stays out of the key, so older records still
# match; any other value changes the key.
ADDED_SINCE = {"read_out_swaps": 0, "swap_distractors": False, "replay_lines": False, "minutes": 0.0,
               "subject_order": "file", "swap_novel": 0.0}
# Model settings added since, likewise: a model of the course's one question with the answer
# budget that was a constant (answering/formats.py MAX_NEW_CHARS), answering without a quote, is
# the model of older records.
MODEL_ADDED_SINCE = {"answer_chars": 32, "relations": [], "quote": False, "answer_values": []}
TRAIN_STAGES = ("pretrain", "finetune", "finetune_scratch")


def as_before(option: str, value: Any, added: dict[str, Any] = ADDED_SINCE) -> bool:
    """Whether a training option (a model setting, with ``added=MODEL_ADDED_SINCE``) added since
    records were first kept has the value that trains as if it did not exist (so a record or run
    without it was made the same way). Compared as JSON holds it (a tuple of pairs as lists)."""
    return option in added and json.loads(json.dumps(value)) == added[option]


FORMAT = 1  # of the record file; a record of another format is not read


def result_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings a run's results depend on: data files by their sha256 alone, the training
    stages without NOT_RESULTS. The attnlab version stays in."""
    kept: dict[str, Any] = {}
    for key, value in settings.items():
        if key in TRAIN_STAGES and isinstance(value, dict):
            value = {k: v for k, v in value.items()
                     if k not in NOT_RESULTS and not as_before(k, v)}
        elif key == "model" and isinstance(value, dict):
            value = {k: v for k, v in value.items()
                     if not as_before(k, v, MODEL_ADDED_SINCE)}
        elif key == "data" and isinstance(value, dict):
            value = {role: f.get("sha256") if isinstance(f, dict) else f for role, f in value.items()}
        kept[key] = value
    return kept


def settings_key(settings: dict[str, Any]) -> str:
    """The sha256 of the result settings, as canonical JSON."""
    canonical = json.dumps(result_settings(settings), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def record_path(records: str | Path, variant: str, seed: int, settings: dict[str, Any]) -> Path:
    return Path(records) / variant / f"seed-{seed}-{settings_key(settings)[:16]}.json"


def find(records: str | Path, variant: str, seed: int, settings: dict[str, Any],
         questions: int | None = None) -> dict[str, Any] | None:
    """The record of this variant and seed made with exactly these settings, or None. A file at
    the key's path whose settings differ (a key collision, or an edited file) is an error, and
    so is one whose row or dev predictions are damaged (``questions``: how many the dev file
    holds, which its predictions must answer)."""
    path = record_path(records, variant, seed, settings)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable record ({e}); remove it to train that run again") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT or not isinstance(record.get("row"), dict):
        raise ValueError(f"{path}: not a comparison record of format {FORMAT}; remove it to train that run again")
    if result_settings(record.get("settings") or {}) != result_settings(settings):
        raise ValueError(f"{path}: its settings are not the ones its name says; remove it to train that run again")
    problem = row_problem(record["row"], questions)
    predictions = record.get("dev_predictions")
    if problem is None and predictions is not None:
        if not isinstance(predictions, list) or not all(isinstance(p, str) for p in predictions):
            problem = "its dev_predictions are not a list of answers"
        elif questions is not None and len(predictions) != questions:
            problem = f"its dev_predictions hold {len(predictions)} answers for the {questions} dev questions"
    if problem is not None:
        raise ValueError(f"{path}: a damaged record: {problem}; remove it to train that run again")
    return record


# A row's fields (Row.to_dict) and the types they hold; None is allowed for all but the names.
_ROW_FIELDS = {"model": str, "kind": str, "parameters": int, "pretrain_loss": (int, float), "dev_correct": int,
               "dev_total": int, "stored": int, "stored_total": int, "stored_asked": int, "seconds": (int, float),
               "run_dir": str, "dev_each": str, "variant": str, "seed": int}
_KINDS = {str: "text", int: "an integer", (int, float): "a number"}


def row_problem(row: dict[str, Any], questions: int | None = None) -> str | None:
    """What is wrong with a stored row (a record's, or a run's row.json), or None: a field
    missing or of the wrong type, counts that do not add up, or (``questions``: how many the dev
    file holds) a per-question correctness of another length."""
    for name, kind in _ROW_FIELDS.items():
        value = row.get(name)
        if name not in row and name not in ("dev_each", "variant", "seed"):  # the last three came later
            return f"its row has no {name!r}"
        if value is None and name not in ("model", "kind", "run_dir"):
            continue
        if isinstance(value, bool) or not isinstance(value, kind):
            return f"its row's {name!r} is {value!r}, not {_KINDS[kind]}"
    correct, total, each = row.get("dev_correct"), row.get("dev_total"), row.get("dev_each")
    if (correct is None) != (total is None) or (total is not None and not 0 <= correct <= total):
        return f"its row counts {correct!r} of {total!r} dev questions right"
    if each is not None and (set(each) - {"0", "1"} or len(each) != total or each.count("1") != correct):
        return f"its row's dev_each does not mark {correct} of {total} dev questions right"
    if questions is not None and total is not None and total != questions:
        return f"its row scores {total} dev questions, and the dev file holds {questions}"
    return None


def save(records: str | Path, variant: str, seed: int, row: dict[str, Any], settings: dict[str, Any],
         predictions: list[str] | None) -> Path:
    """Write (atomically) the record of a finished run; returns its path."""
    path = record_path(records, variant, seed, settings)
    record = {"format": FORMAT, "variant": variant, "seed": seed, "key": settings_key(settings),
              "row": row, "settings": settings, "dev_predictions": predictions}
    write_atomically(path, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    return path


def read_predictions(path: str | Path) -> list[str] | None:
    """The answers of a predictions file, one a line (None if there is none)."""
    p = Path(path)
    return p.read_text(encoding="utf-8").splitlines() if p.is_file() else None
