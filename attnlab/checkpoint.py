"""Checkpoints: one safetensors file holding the model weights, and for resumable checkpoints
the optimiser state and random-number state, with the configs, the vocabulary and the
training state as JSON in the file's metadata. Every write is atomic (temporary file in the
same directory, fsync, rename), so an interrupted write never destroys the last good one.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

from .config import ModelConfig
from .model import GPT
from .vocab import Vocab

FORMAT = "attnlab-checkpoint-1"
CHECKPOINT_NAME = "checkpoint.safetensors"


class CheckpointError(ValueError):
    pass


@dataclass
class Checkpoint:
    model_config: ModelConfig
    vocab: Vocab
    model_state: dict[str, Tensor]
    meta: dict[str, Any] = field(default_factory=dict)  # train config, step, tokens, ...
    optimizer_state: dict | None = None
    rng_state: dict[str, Tensor] | None = None

    def build_model(self, **overrides: Any) -> GPT:
        """The model with its weights; ``overrides`` change config fields that do not change
        parameters (e.g. attention="argmax" on a vanilla checkpoint, dropout)."""
        if "attention" in overrides:  # argmax on a rotary checkpoint means rotary+argmax
            from .attention import attention_override

            overrides = {**overrides, "attention": attention_override(
                self.model_config.attention, overrides["attention"])}
        config = ModelConfig.from_dict({**self.model_config.to_dict(), **overrides})
        model = GPT(config)
        missing, unexpected = model.load_state_dict(self.model_state, strict=False)
        if missing or unexpected:
            raise CheckpointError(
                f"checkpoint weights do not fit attention={config.attention!r}: "
                f"missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}"
            )
        return model


def resolve(path: str | os.PathLike) -> Path:
    """A checkpoint file, or a run directory holding one."""
    p = Path(path)
    if p.is_dir():
        p = p / CHECKPOINT_NAME
    if not p.exists():
        raise CheckpointError(f"{p}: no checkpoint here (train one with `attnlab pretrain` or `finetune`)")
    return p


def _flatten_optimizer(state: dict) -> tuple[dict[str, Tensor], dict]:
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for pid, pstate in state["state"].items():
        for key, value in pstate.items():
            if isinstance(value, Tensor):
                tensors[f"optim.{pid}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(pid), {})[key] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _unflatten_optimizer(tensors: dict[str, Tensor], info: dict) -> dict:
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        _, pid, key = name.split(".", 2)
        state.setdefault(int(pid), {})[key] = value
    for pid, values in info["scalars"].items():
        state.setdefault(int(pid), {}).update(values)
    return {"state": state, "param_groups": info["param_groups"]}


def save_checkpoint(
    path: str | os.PathLike,
    model: torch.nn.Module,
    vocab: Vocab,
    meta: dict[str, Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    rng_state: dict[str, Tensor] | None = None,
) -> Path:
    """Atomically write a checkpoint file; the optimiser and RNG state make it resumable."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = getattr(model, "_orig_mod", model)  # torch.compile wrapper
    model = getattr(model, "module", model)  # DistributedDataParallel wrapper
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    header: dict[str, Any] = {
        "format": FORMAT,
        "model_config": model.config.to_dict(),
        "vocab": vocab.to_list(),
        "meta": meta or {},
    }
    if optimizer is not None:
        opt_tensors, opt_info = _flatten_optimizer(optimizer.state_dict())
        tensors.update(opt_tensors)
        header["optimizer"] = opt_info
    for name, value in (rng_state or {}).items():
        tensors[f"rng.{name}"] = value.cpu().contiguous()
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".safetensors", dir=path.parent)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata={"attnlab": json.dumps(header)})
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def load_checkpoint(path: str | os.PathLike, map_location: str = "cpu") -> Checkpoint:
    """Read and validate a checkpoint; errors name the file and the problem in one line."""
    p = resolve(path)
    try:
        from safetensors import safe_open

        with safe_open(str(p), framework="pt") as f:
            metadata = f.metadata() or {}
        tensors = load_file(str(p), device=map_location)
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{p}: not a readable safetensors checkpoint ({e})") from None
    try:
        header = json.loads(metadata["attnlab"])
        if header.get("format") != FORMAT:
            raise CheckpointError(f"{p}: unknown checkpoint format {header.get('format')!r}")
        config = ModelConfig.from_dict(header["model_config"])
        vocab = Vocab.from_list(header["vocab"])
    except (KeyError, json.JSONDecodeError, TypeError) as e:
        raise CheckpointError(f"{p}: checkpoint metadata is missing or damaged ({e})") from None
    if len(vocab) != config.vocab_size:
        raise CheckpointError(f"{p}: vocabulary has {len(vocab)} entries but the model expects {config.vocab_size}")
    groups: dict[str, dict[str, Tensor]] = {"model": {}, "optim": {}, "rng": {}}
    for name, value in tensors.items():
        prefix, _, rest = name.partition(".")
        groups.setdefault(prefix, {})[rest if prefix != "optim" else name] = value
    optimizer_state = None
    if "optimizer" in header:
        optimizer_state = _unflatten_optimizer(groups["optim"], header["optimizer"])
    return Checkpoint(
        model_config=config,
        vocab=vocab,
        model_state=groups["model"],
        meta=header.get("meta", {}),
        optimizer_state=optimizer_state,
        rng_state=groups["rng"] or None,
    )


def load_model(path: str | os.PathLike, device: str = "cpu", **overrides: Any) -> tuple[GPT, Vocab, Checkpoint]:
    ckpt = load_checkpoint(path)
    model = ckpt.build_model(**overrides).to(device)
    model.eval()
    return model, ckpt.vocab, ckpt
