"""What an experiment's rows are made with (its settings: preset, configs, data files with
their sha256, attnlab version) and how two such records differ: a kept row, a continued stage
or a reused record must have been made with the settings of the run that keeps it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._version import __version__
from ..config.settings import ModelConfig, TrainConfig
from ..core.paths import file_sha256
# NOT_RESULTS: training settings that change how a run is logged or saved, not what it trains
from .records import NOT_RESULTS, TRAIN_STAGES, as_before


def experiment_settings(preset: str | None, model_config: ModelConfig, pretrain_config: TrainConfig,
                        finetune_config: TrainConfig, scratch_config: TrainConfig,
                        data: dict[str, Any]) -> dict[str, Any]:
    """What an experiment's rows are made with: the preset's name, the model config, the three
    training configs (the device left out: it may change), each data file's path and sha256,
    and the attnlab version (recorded, not compared)."""
    configs = dict(zip(TRAIN_STAGES, (pretrain_config, finetune_config, scratch_config)))
    return {"preset": preset, "model": model_config.to_dict(),
            **{stage: stage_settings(c) for stage, c in configs.items()},
            "data": {role: data_file(path) for role, path in data.items()}, "attnlab": __version__}


def stage_settings(config: TrainConfig) -> dict[str, Any]:
    """A training stage's config as settings record it: the device left out (it may change)."""
    return {k: v for k, v in config.to_dict().items() if k != "device"}


def data_file(path: Any) -> dict[str, Any]:
    """A data file as recorded in settings: where it was read and what it held."""
    p = Path(path)
    return {"path": str(p), "sha256": file_sha256(p) if p.is_file() else None}


def settings_differences(stored: dict[str, Any], current: dict[str, Any],
                         prefix: str = "") -> list[tuple[str, str, str]]:
    """(setting, stored value, current value) for every setting that differs, in the order of
    ``current``; data files compare by content, logging and checkpoint cadence not at all."""
    differences = []
    for key in [*current, *(k for k in stored if k not in current)]:
        name, old, new = f"{prefix}{key}", stored.get(key, _UNSET), current.get(key, _UNSET)
        if name == "attnlab" or (prefix.rstrip(".") in TRAIN_STAGES and key in NOT_RESULTS):
            continue
        if prefix.rstrip(".") in TRAIN_STAGES and all(v is _UNSET or as_before(key, v) for v in (old, new)):
            continue  # an option added since, at the value that trains as before it existed
        if _is_data_file(old) and _is_data_file(new):
            if old["sha256"] != new["sha256"]:
                differences.append((name, _shown_file(old), _shown_file(new)))
        elif isinstance(old, dict) and isinstance(new, dict):
            differences += settings_differences(old, new, f"{name}.")
        elif old != new:
            differences.append((name, _shown(old), _shown(new)))
    return differences


_UNSET = object()


def _is_data_file(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"path", "sha256"}


def _shown_file(value: dict[str, Any]) -> str:
    return f"{value['path']} (sha256 {str(value['sha256'])[:12]})" if value["sha256"] else f"{value['path']} (missing)"


def _shown(value: Any) -> str:
    return "(not set)" if value is _UNSET else repr(value)


def check_settings(source: Path, stored: dict[str, Any] | None, current: dict[str, Any]) -> None:
    """A one-line error if what ``source`` records was made with other settings than ``current``."""
    if not isinstance(stored, dict):
        raise ValueError(f"{source}: records no settings (written before attnlab recorded them), so it cannot "
                         "be checked against this run: start over with --overwrite")
    differences = settings_differences(stored, current)
    if differences:
        shown = "; ".join(f"{name} was {old} there, {new} now" for name, old, new in differences[:3])
        more = f" (and {len(differences) - 3} more)" if len(differences) > 3 else ""
        raise ValueError(f"{source}: made with other settings than this run: {shown}{more}; run with the "
                         "settings it was made with, or start over with --overwrite")
