"""The settings file of ``--config FILE`` on training commands (the flag: attnlab/cli/flags.py):
a run's ``config.json`` (or a TOML file of the same shape), read and checked.

The file has a ``model`` and a ``train`` table of config fields (attnlab/config/settings.py) and
top-level command options (``corpus``, ``train_file``, ``init``, ...), as every run writes
beside its checkpoint. Precedence: preset < file < command line. Settings the command does not
take are left out (a pretraining run's ``objective`` given to finetune), and so is the model
table when finetuning from ``--init`` (the pretrained checkpoint fixes the model), and
``train.device``, which belongs to the machine that ran it, not to the recipe. A setting that
no config has is an error naming it (a typo must not be silently ignored).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from .settings import ModelConfig, TrainConfig, cli_fields, field_problem
from ..data.datasets import DataError, read_text
from ..core.paths import input_file

SECTIONS = {"model": ModelConfig, "train": TrainConfig}
MACHINE_SETTINGS = {"device"}


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The file's settings as {option dest: value}, every name and every config value checked
    (DataError or PathError naming the file, and the key)."""
    path = input_file(path, "config file")
    text = read_text(path)  # bytes that are not UTF-8: a DataError naming the line
    if path.suffix == ".toml":
        import tomllib

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise DataError(str(path), None, f"not valid TOML ({e})") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(str(path), e.lineno, f"not valid JSON ({e.msg})") from None
    if not isinstance(data, dict):
        raise DataError(str(path), None, "expected an object of settings")
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in SECTIONS:
            values.update(_section(path, key, value))
        elif value is not None:
            values[key.replace("-", "_")] = value
    return values


def _section(path: Path, name: str, table: Any) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise DataError(str(path), None, f"'{name}' must be a table of settings")
    fields = {f.name: f for f in dataclasses.fields(SECTIONS[name])}
    flags = {f.name for f in cli_fields(SECTIONS[name])}
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise DataError(str(path), None, f"unknown setting {name}.{unknown[0]} (settings are the fields "
                        f"of {SECTIONS[name].__name__}, attnlab/config/settings.py)")
    for key, value in table.items():
        problem = field_problem(fields[key], value)
        if problem:
            raise DataError(str(path), None, f"{name}.{key} {problem}")
    return {f"{name}.{k}": v for k, v in table.items() if k in flags and k not in MACHINE_SETTINGS}
