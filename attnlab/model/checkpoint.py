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
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor

from ..config.settings import ModelConfig, TrainConfig
from .attention.merged_qk import scaled_state
from .attention.plugin import PluginError
from ..core import logs
from ..core.devices import resolve_device
from .gpt import GPT
from ..data.vocab import Vocab

FORMAT = "attnlab-checkpoint-1"
# A checkpoint of an edited model (attnlab edit): format 1 plus the list of its edits in the
# metadata ("edits") and, for gated edits, the codebook's tensors ("edit.*", attnlab/codebook.py).
# The model's own tensors are unchanged by a gated edit. Unedited models are still written as 1.
FORMAT_EDITED = "attnlab-checkpoint-2"
FORMATS = (FORMAT, FORMAT_EDITED)
CHECKPOINT_NAME = "checkpoint.safetensors"
TEMP_PATTERN = ".tmp-*.safetensors"  # save_checkpoint's temporary files (mkstemp prefix and suffix)
# safetensors' own: save_file writes .tmpXXXXXX (Rust's tempfile) beside its target, then renames it
SAFETENSORS_TEMP = re.compile(r"\.tmp[A-Za-z0-9]{6}")
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
    path: Path | None = None  # the file it was read from, named in every error about it
    edits: list[dict[str, Any]] = field(default_factory=list)  # format 2: the edits made, in order
    edit_layer: int | None = None  # format 2: the layer of the gated edits' codebook
    edit_state: dict[str, Tensor] = field(default_factory=dict)  # format 2: the codebook's tensors
    checked: ModelConfig | None = field(default=None, init=False, repr=False, compare=False)  # check_weights passed

    def build_model(self, **overrides: Any) -> GPT:
        """The model with its weights; ``overrides`` change config fields that do not change
        parameters (e.g. attention="argmax" on a vanilla checkpoint, dropout)."""
        if "attention" in overrides:  # argmax on a rotary checkpoint means rotary+argmax
            from .attention import attention_override

            overrides = {**overrides, "attention": attention_override(
                self.model_config.attention, overrides["attention"])}
        config = ModelConfig.from_dict({**self.model_config.to_dict(), **overrides})
        if config != self.checked:  # load_checkpoint checked the stored config already
            self.check_weights(config)
        model = GPT.from_state(config, self.model_state)  # no random weights made to be overwritten
        if self.edits:
            from .codebook import restore

            restore(model, self.edits, self.edit_layer, self.edit_state)
        return model

    def check_weights(self, config: ModelConfig | None = None) -> None:
        """Every tensor the model of ``config`` (default: the stored one) has, with its shape
        and dtype, and no other; a CheckpointError naming the first tensor that disagrees. The
        model is laid out on the meta device, so nothing is allocated, however large a damaged
        config says the model is."""
        config = config or self.model_config
        where = self.path or "checkpoint"
        try:
            with torch.device("meta"):
                expected = GPT(config).state_dict()
        except (ValueError, RuntimeError) as e:  # an unknown variant; sizes past what torch can index
            if isinstance(e, PluginError):  # the user's attention file: its own line says it all
                raise CheckpointError(f"{where}: {_flat(e)}") from None
            raise CheckpointError(f"{where}: no model can be built from its config ({_flat(e)})") from None
        missing = sorted(expected.keys() - self.model_state.keys())
        unexpected = sorted(self.model_state.keys() - expected.keys())
        if missing or unexpected:
            raise CheckpointError(f"{where}: checkpoint weights do not fit attention={config.attention!r}: "
                                  f"missing {missing[:3]}, unexpected {unexpected[:3]}")
        for name, want in expected.items():
            got = self.model_state[name]
            if got.shape != want.shape:
                raise CheckpointError(f"{where}: tensor model.{name} has shape {list(got.shape)}, but the "
                                      f"model config gives it {list(want.shape)}")
            if got.dtype != want.dtype:
                raise CheckpointError(f"{where}: tensor model.{name} is {got.dtype}, but the model's "
                                      f"weights are {want.dtype}")
        self.checked = config


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
    from .codebook import saved_edits

    edits, edit_tensors = saved_edits(model)
    if edits is not None:
        header.update(format=FORMAT_EDITED, edits=edits)
        tensors.update({f"edit.{k}": v for k, v in edit_tensors.items()})
    if optimizer is not None:
        opt_tensors, opt_info = _flatten_optimizer(optimizer.state_dict())
        tensors.update(opt_tensors)
        header["optimizer"] = opt_info
    for name, value in (rng_state or {}).items():
        tensors[f"rng.{name}"] = value.cpu().contiguous()
    header["sha256"] = _checksums(tensors)
    header["header_sha256"] = _header_checksum(header)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_files(path.parent)
        with _uninterrupted_write():
            _write_atomically(path, tensors, {"attnlab": json.dumps(header)})
    except (OSError, SafetensorError) as e:
        raise CheckpointError(f"{path}: cannot write the checkpoint ({_reason(e)}); "
                              "the previous checkpoint, if any, is unchanged") from None
    keep_plugin_source(path.parent, model.config.attention)
    return path


def keep_plugin_source(directory: Path, attention: str) -> Path | None:
    """A copy of an attention plug-in's source beside the checkpoint (RUN/attention/FILE), so
    the run keeps the code its pinned hash names; None for the registry's variants."""
    from .attention import base_name, plugin

    name = base_name(attention)
    if not plugin.is_plugin(name):
        return None
    source = plugin.source_of(name)
    copy = directory / plugin.SOURCE_DIR / source.name
    data = source.read_bytes()
    if not copy.exists() or copy.read_bytes() != data:
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(data)
    return copy


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


def temp_files(directory: str | os.PathLike) -> list[Path]:
    """The temporary files of checkpoint writes in ``directory``: save_checkpoint's and those
    safetensors makes while writing one of them."""
    directory = Path(directory)
    return [*directory.glob(TEMP_PATTERN), *(p for p in directory.glob(".tmp*") if SAFETENSORS_TEMP.fullmatch(p.name))]


def remove_stale_temp_files(directory: str | os.PathLike) -> list[Path]:
    """Remove the temporary files of checkpoint writes that were cut short (a killed process):
    only files named like save_checkpoint's and last written before this process started, so a
    write in progress (this process's, or another's still writing) is never touched."""
    removed = []
    for tmp in temp_files(directory):
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


def _verify_checksums(path: Path, header: dict[str, Any], tensors: dict[str, Tensor], *,
                      every_group: bool = True) -> None:
    """Refuse weights that changed after they were written; files written before the
    checksums (no "sha256" in the metadata) load as they are. ``every_group=False``: only the
    groups read (answering reads the model's tensors alone)."""
    stored = header.get("sha256")
    if stored is None:
        return
    if not isinstance(stored, dict):
        raise CheckpointError(f"{path}: checkpoint metadata is damaged (sha256 is not a table)")
    actual = _checksums(tensors)
    for group in sorted(set(stored) | set(actual) if every_group else set(actual)):
        if stored.get(group) != actual.get(group):
            raise CheckpointError(f"{path}: the {group} tensors do not match the checksum written with them "
                                  "(the file was changed or damaged after it was written)")


def load_checkpoint(path: str | os.PathLike, map_location: str = "cpu", *,
                    training_state: bool = True) -> Checkpoint:
    """Read and validate a checkpoint: its metadata (every key and JSON type) and its weights
    (each tensor's shape and dtype against the stored model config). Every error is a one-line
    CheckpointError naming the file. ``training_state=False`` (answering, evaluating): the
    optimiser and random state are neither read nor needed, so damage there does not matter."""
    p = resolve(path)
    try:
        with safe_open(str(p), framework="pt", device=map_location) as f:
            metadata = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()
                       if training_state or k.startswith(("model.", "edit."))}
    except (SafetensorError, OSError, RuntimeError) as e:
        raise CheckpointError(f"{p}: not a readable safetensors checkpoint ({_flat(e)})") from None
    header = _header(p, metadata)
    config, vocab, meta = _configs(p, header)
    groups: dict[str, dict[str, Tensor]] = {"model": {}, "optim": {}, "rng": {}, "edit": {}}
    for name, value in tensors.items():
        prefix, _, rest = name.partition(".")
        groups.setdefault(prefix, {})[rest if prefix != "optim" else name] = value
    optimizer_state = None
    if training_state and "optimizer" in header:
        optimizer_state = _optimizer_state(p, groups["optim"], header["optimizer"], meta)
    ckpt = Checkpoint(
        model_config=config,
        vocab=vocab,
        model_state=scaled_state(groups["model"], config.n_embd),  # merged_qk written before its W was scaled
        meta=meta,
        optimizer_state=optimizer_state,
        rng_state=(groups["rng"] or None) if training_state else None,
        path=p,
    )
    if header["format"] == FORMAT_EDITED:
        from .codebook import check_edits

        try:
            ckpt.edits, ckpt.edit_layer, ckpt.edit_state = check_edits(header, groups["edit"], config)
        except ValueError as e:
            raise CheckpointError(f"{p}: {e}") from None
    elif groups["edit"]:
        raise CheckpointError(f"{p}: format {FORMAT} holds no edits, but the file has edit tensors "
                              f"(an edited model is written as {FORMAT_EDITED})")
    ckpt.check_weights()  # the more precise message first: which tensor does not fit the config
    _verify_checksums(p, header, tensors, every_group=training_state)
    _verify_header(p, header)
    _refuse_non_finite(p, ckpt.model_state)
    return ckpt


def _header_checksum(header: dict[str, Any]) -> str:
    """sha256 of the metadata answering reads (configs, vocabulary, meta, the tensors'
    checksums) in a canonical JSON form: the tensors' checksums do not cover what they mean.
    The optimiser's layout is left out: answering never reads it, and resuming checks it."""
    body = {k: v for k, v in header.items() if k not in ("header_sha256", "optimizer")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _verify_header(p: Path, header: dict[str, Any]) -> None:
    """Refuse metadata changed after writing (a vocabulary edited by hand answers with other
    characters); files written before this checksum load as they are."""
    stored = header.get("header_sha256")
    if stored is not None and stored != _header_checksum(header):
        raise CheckpointError(f"{p}: the checkpoint's metadata (configs, vocabulary, training record) does not "
                              "match the checksum written with it (changed or damaged after it was written)")


def _refuse_non_finite(p: Path, model_state: dict[str, Tensor]) -> None:
    """Weights that are NaN or infinite answer nonsense (a checksum of NaNs is still valid)."""
    for name, tensor in sorted(model_state.items()):
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"{p}: tensor model.{name} holds NaN or infinite values; these weights "
                                  "cannot answer (a diverged or damaged run)")


def _flat(e: BaseException) -> str:
    return " ".join(str(e).splitlines())


def _header(p: Path, metadata: dict[str, str]) -> dict[str, Any]:
    if "attnlab" not in metadata:
        raise CheckpointError(f"{p}: no attnlab metadata in this safetensors file (not an attnlab checkpoint)")
    try:
        header = json.loads(metadata["attnlab"])
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{p}: checkpoint metadata is not valid JSON ({e.msg})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{p}: checkpoint metadata is a JSON {type(header).__name__}, not an object")
    if header.get("format") not in FORMATS:
        raise CheckpointError(f"{p}: unknown checkpoint format {header.get('format')!r} (this attnlab reads "
                              f"{' and '.join(FORMATS)}; a newer attnlab may have written it)")
    for key in ("model_config", "vocab"):
        if key not in header:
            raise CheckpointError(f"{p}: checkpoint metadata has no '{key}'")
    return header


# The training state a checkpoint's meta may carry, by key: its JSON type (absent is fine).
_META_TYPES: dict[str, tuple[type, ...]] = {
    "stage": (str,), "init": (str, type(None)), "corpus_documents": (int,), "final_tokens": (int,),
    "step": (int,), "tokens": (int,), "train_cpu_s": (int, float), "train_config": (dict,)}


def _configs(p: Path, header: dict[str, Any]) -> tuple[ModelConfig, Vocab, dict[str, Any]]:
    """The model config, vocabulary and meta of a header, each checked."""
    try:
        config = ModelConfig.from_dict(header["model_config"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{p}: model_config: {_flat(e)}") from None
    if not isinstance(header["vocab"], list):
        raise CheckpointError(f"{p}: vocab must be a list of characters, got a JSON {type(header['vocab']).__name__}")
    try:
        vocab = Vocab.from_list(header["vocab"])
    except ValueError as e:
        raise CheckpointError(f"{p}: vocab: {_flat(e)}") from None
    if len(vocab) != config.vocab_size:
        raise CheckpointError(f"{p}: vocabulary has {len(vocab)} entries but the model expects {config.vocab_size}")
    meta = header.get("meta", {})
    if not isinstance(meta, dict):
        raise CheckpointError(f"{p}: meta must be an object, got a JSON {type(meta).__name__}")
    for key, types in _META_TYPES.items():
        value = meta.get(key)
        if key in meta and (not isinstance(value, types) or isinstance(value, bool)):
            raise CheckpointError(f"{p}: meta.{key} has the wrong type ({value!r})")
    if "train_config" in meta:
        try:
            TrainConfig.from_dict(meta["train_config"])
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{p}: meta.train_config: {_flat(e)}") from None
    return config, vocab, meta


def _optimizer_state(p: Path, tensors: dict[str, Tensor], info: Any, meta: dict[str, Any]) -> dict:
    """The optimiser state of a resumable checkpoint, which must also say where the run stood."""
    for key in ("step", "tokens"):
        if key not in meta:
            raise CheckpointError(f"{p}: a resumable checkpoint needs meta.{key}, and this one has none")
    groups = info.get("param_groups") if isinstance(info, dict) else None
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise CheckpointError(f"{p}: the optimizer state is damaged (param_groups is not a list of objects); "
                              "answering does not need it, resuming does")
    try:
        return _unflatten_optimizer(tensors, info)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{p}: the optimizer state is damaged ({type(e).__name__}: {_flat(e)}); "
                              "answering does not need it, resuming does") from None


def load_model(path: str | os.PathLike, device: str = "cpu", **overrides: Any) -> tuple[GPT, Vocab, Checkpoint]:
    """The model of a checkpoint, in eval mode, for answering (no optimiser state read), on
    ``device``: auto (CUDA when there is one), cpu, cuda or cuda:N. ``overrides`` change config
    fields that add no parameters (e.g. attention="argmax"). The one model loader:
    ``attnlab.load`` wraps it."""
    ckpt = load_checkpoint(path, training_state=False)
    model = ckpt.build_model(**overrides).to(resolve_device(str(device)))
    model.eval()
    stored, used = ckpt.model_config.attention, model.config.attention
    if _scores_of(used) != _scores_of(stored):  # argmax (hard weights of the same scores) is no change
        logs.warn(f"{ckpt.path}: trained with {stored} attention, run here with {used}: its weights were "
                  f"not trained for {_scores_of(used)}'s attention scores")
    logs.detail(f"loaded {ckpt.path}: {model.num_parameters():,} parameters ({model.config.attention}, "
                f"{model.config.n_layer} layers, {model.config.qa_format} answers) on {next(model.parameters()).device}")
    return model, ckpt.vocab, ckpt


def _scores_of(attention: str) -> str:
    """The variant whose attention scores ``attention`` computes: rotary for rotary+argmax,
    vanilla for argmax (the hard weights of vanilla's scores)."""
    from .attention import ArgmaxAttention, base_name

    base = base_name(attention)
    return "vanilla" if base == ArgmaxAttention.name else base
