"""Checkpoints: one safetensors file holding the model weights, and for resumable checkpoints
the optimiser state and random-number state, with the configs, the vocabulary and the
training state as JSON in the file's metadata. Every write is atomic (temporary file in the
same directory, fsync, rename), so an interrupted write never destroys the last good one;
the temporary files of writes cut short (killed) are removed by the next write into the
directory. A checkpoint honours the umask as every other file does, and its metadata holds a
sha256 of each group of tensors, so weights changed after writing (flipped bytes, another
dtype) are refused at load; files written before the checksums load as they are.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
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
TEMP_PATTERN = ".tmp-*.safetensors"  # save_checkpoint's temporary files (mkstemp prefix and suffix)
_PROCESS_START = time.time()  # temporary files older than this are not this process's


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
    """Atomically write a checkpoint file; the optimiser and RNG state make it resumable.
    A write that fails (full disk, read-only directory) is a one-line CheckpointError naming
    the path, with the previous checkpoint intact and no temporary file left behind."""
    path = Path(path)
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
    header["sha256"] = _checksums(tensors)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_files(path.parent)
        with _uninterrupted_write():
            _write_atomically(path, tensors, {"attnlab": json.dumps(header)})
    except (OSError, SafetensorError) as e:
        raise CheckpointError(f"{path}: cannot write the checkpoint ({_reason(e)}); "
                              "the previous checkpoint, if any, is unchanged") from None
    return path


def _write_atomically(path: Path, tensors: dict[str, Tensor], metadata: dict[str, str]) -> None:
    """Temporary file in the same directory, fsync, rename: ``path`` is either the old file or
    the whole new one. mkstemp makes the file 0600; it gets the umask's mode before the rename."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".safetensors", dir=path.parent)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=metadata)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _umask() -> int:
    """The process's umask (it can only be read by setting it; set back at once)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def _reason(e: Exception) -> str:
    """The error in words; a bare errno (OSError(errno.ENOSPC)) spelled out."""
    if isinstance(e, OSError):
        code = e.errno or next(iter(e.args), None)
        if isinstance(code, int):
            return e.strerror or os.strerror(code)
    return str(e)


def remove_stale_temp_files(directory: str | os.PathLike) -> list[Path]:
    """Remove the temporary files of checkpoint writes that were cut short (a killed process):
    only files named like save_checkpoint's and last written before this process started, so a
    write in progress (this process's, or another's still writing) is never touched."""
    removed = []
    for tmp in Path(directory).glob(TEMP_PATTERN):
        with contextlib.suppress(FileNotFoundError):  # another process may remove it first
            if tmp.is_file() and tmp.stat().st_mtime < _PROCESS_START:
                tmp.unlink()
                removed.append(tmp)
    return removed


class _Writes:
    """Checkpoint writes in progress, and whether an interrupt waits for them to finish."""

    active = 0
    interrupted = False


@contextlib.contextmanager
def _uninterrupted_write():
    """A checkpoint write that a (second) Ctrl-C does not cut short: the signal handler calls
    ``defer_interrupt`` and the KeyboardInterrupt is raised once the write is complete."""
    _Writes.active += 1
    try:
        yield
    finally:
        _Writes.active -= 1
        interrupted = _Writes.interrupted and not _Writes.active
        if not _Writes.active:
            _Writes.interrupted = False
    if interrupted:  # only after a successful write: a failed one raises its own error
        raise KeyboardInterrupt


def defer_interrupt() -> bool:
    """For signal handlers: while a checkpoint is being written, note the interrupt, to be
    raised as KeyboardInterrupt when the write completes, and return True; otherwise False."""
    if _Writes.active:
        _Writes.interrupted = True
        return True
    return False


def _checksums(tensors: dict[str, Tensor]) -> dict[str, str]:
    """sha256 of each group of tensors (model, optim, rng: the name's first part) over every
    tensor's name, dtype, shape and bytes, in name order."""
    hashes: dict[str, Any] = {}
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h = hashes.setdefault(name.partition(".")[0], hashlib.sha256())
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
    return {group: h.hexdigest() for group, h in hashes.items()}


def _verify_checksums(path: Path, header: dict[str, Any], tensors: dict[str, Tensor]) -> None:
    """Refuse weights that changed after they were written; files written before the
    checksums (no "sha256" in the metadata) load as they are."""
    stored = header.get("sha256")
    if stored is None:
        return
    if not isinstance(stored, dict):
        raise CheckpointError(f"{path}: checkpoint metadata is damaged (sha256 is not a table)")
    actual = _checksums(tensors)
    for group in sorted(set(stored) | set(actual)):
        if stored.get(group) != actual.get(group):
            raise CheckpointError(f"{path}: the {group} tensors do not match the checksum written with them "
                                  "(the file was changed or damaged after it was written)")


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
    _verify_checksums(p, header, tensors)
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
