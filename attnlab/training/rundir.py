"""A training run's directory and its rules (issue 12): a run is never overwritten by accident,
two processes never train into one directory, and a resumed run is the checkpoint's run.

- ``claim`` holds the directory for a run: a lock file (``train.lock``: pid and host, created
  with O_CREAT|O_EXCL; a lock whose process no longer runs on this host is stale and taken
  over), and the rule that a directory holding a checkpoint is trained into only with
  ``resume`` (continue it) or ``overwrite`` (replace it). Under torchrun rank 0 holds the lock.
- ``RunDir.start``, right before the first step: a new run removes what an earlier one left
  (checkpoint, metrics, TensorBoard events); a resumed one drops the metrics rows past its
  checkpoint's step; both then write config.json. Nothing is written before that.
- ``resumable`` / ``resumed`` / ``check_data``: resuming takes the model, the schedule and the
  data from the checkpoint; a setting given that contradicts it is an error naming the flag and
  both values, except the settings of ``RESUMABLE``.
- ``Run.open`` is the one owner of a stage's run: it claims the directory once, reconciles the
  settings given with the checkpoint once (resume, overwrite) and hands the pipeline and the
  trainer one object holding the effective configs and the checkpoint to continue. A directory
  written without training (an edited model, `attnlab edit`) has no configs to reconcile: its
  writer holds it with ``claim`` alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

from ..core import distributed, logs
from ..model.checkpoint import CHECKPOINT_NAME, Checkpoint, load_checkpoint, temp_files
from ..core.paths import file_sha256, write_atomically
from ..config.settings import RESUMABLE, ModelConfig, TrainConfig, cli_fields

LOCK_NAME = "train.lock"
METRICS_NAME = "metrics.jsonl"
CONFIG_NAME = "config.json"
EVENTS_PATTERN = "events.out.tfevents.*"  # TensorBoard's files (attnlab/training/metrics_sinks.py)

C = TypeVar("C")


class RunDirError(ValueError):
    """A run-directory rule broken: one line per problem in ``messages`` (the CLI prints each)."""

    def __init__(self, messages: list[str] | str):
        self.messages = [messages] if isinstance(messages, str) else list(messages)
        super().__init__("; ".join(self.messages))


def resumable_flags() -> str:
    """The settings of RESUMABLE as flags, for help texts."""
    return ", ".join(_flag(name) for name in RESUMABLE)


# ---- holding the directory --------------------------------------------------------------------
@dataclasses.dataclass
class RunDir:
    """A claimed run directory; ``earlier`` lists what an earlier run left in it when claimed."""

    path: Path
    resume: bool
    writes: bool  # rank 0: the one process that writes files
    earlier: list[Path] = dataclasses.field(default_factory=list)

    @property
    def checkpoint(self) -> Path:
        return self.path / CHECKPOINT_NAME

    def start(self, step: int, config: dict[str, Any]) -> None:
        """The run begins (right before its first step): a new run replaces an earlier one's
        files; a resumed one keeps the metrics rows up to its checkpoint's ``step``. Then
        config.json records ``config``."""
        if not self.writes:
            return
        if self.resume:
            keep_metrics_until(self.path / METRICS_NAME, step)
        else:
            for old in self.earlier:
                old.unlink(missing_ok=True)
        write_atomically(self.path / CONFIG_NAME, json.dumps(config, indent=2, default=str) + "\n")


@contextlib.contextmanager
def claim(run_dir: str | Path, *, resume: bool = False, overwrite: bool = False,
          log: Callable[[str], None] = logs.note) -> Iterator[RunDir]:
    """Hold ``run_dir`` for one run (the lock, then the checkpoint rule); on the way out, also
    on an error or Ctrl-C, the lock is removed and so are directories made here and left
    empty. Claimed once per run, by ``Run.open``."""
    run_dir = Path(run_dir)
    if resume and overwrite:
        raise RunDirError(f"{run_dir}: --resume continues the run there and --overwrite replaces it; give one")
    if not distributed.environment().is_main:
        yield _checked(run_dir, resume, overwrite, writes=False)
        return
    made = _make_dirs(run_dir)
    try:
        lock = _acquire(run_dir / LOCK_NAME, log)
        try:
            yield _checked(run_dir, resume, overwrite, writes=True)
        finally:
            _release(run_dir / LOCK_NAME, lock)
    finally:
        for d in made:  # deepest first; stops at the first that is not empty
            try:
                d.rmdir()
            except OSError:
                break


def _checked(run_dir: Path, resume: bool, overwrite: bool, writes: bool) -> RunDir:
    """The checkpoint rule: a directory holding a checkpoint needs resume or overwrite, and
    resume needs one."""
    ckpt = run_dir / CHECKPOINT_NAME
    if ckpt.exists() and not (resume or overwrite):
        raise RunDirError(f"{run_dir} already holds a run ({ckpt}): pass --resume to continue it or "
                          "--overwrite to replace it (or choose another --out-dir)")
    if resume and not ckpt.exists():
        raise FileNotFoundError(f"{ckpt}: nothing to resume (no checkpoint in {run_dir})")
    earlier = [p for p in (ckpt, run_dir / METRICS_NAME) if p.exists()] + sorted(run_dir.glob(EVENTS_PATTERN))
    return RunDir(run_dir, resume, writes, earlier)


def _make_dirs(path: Path) -> list[Path]:
    """Make ``path`` and its missing parents; returns the ones made, deepest first."""
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise RunDirError(f"{path}: not a directory (a run directory is needed here)") from None
    except OSError as e:
        raise RunDirError(f"{path}: cannot make the run directory ({e.strerror})") from None
    return missing


# ---- the lock file ----------------------------------------------------------------------------
def _acquire(path: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """Create the lock file atomically with this process's pid and host; a stale lock (its
    process no longer runs on this host) is taken over with a note."""
    mine = {"pid": os.getpid(), "host": socket.gethostname()}
    for _ in range(5):  # a lock that vanishes or goes stale while looked at: try again
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _read_lock(path)
            if holder is None:
                continue  # removed meanwhile
            if not _stale(holder):
                raise RunDirError(_in_use(path, holder)) from None
            # Re-read right before removing, so a lock just taken by another process stays.
            if _read_lock(path) == holder:
                path.unlink(missing_ok=True)
                log(f"note: {path} was left by process {holder['pid']}, which no longer runs on this host: "
                    "taken over")
                _remove_dead_writes(path.parent)
            continue
        except OSError as e:
            raise RunDirError(f"{path}: cannot create the lock file ({e.strerror})") from None
        _write_lock(fd, path, mine)
        return mine
    raise RunDirError(f"{path}: could not take the lock; another process keeps taking it")


def _remove_dead_writes(run_dir: Path) -> None:
    """Checkpoint writes the dead lock holder left half done: only the holder writes checkpoints
    here, so every temporary checkpoint file is its own (the age rule of
    checkpoint.remove_stale_temp_files cannot see this when the resuming process is older than
    the killed one, as a long-lived Python session is)."""
    for tmp in temp_files(run_dir):
        tmp.unlink(missing_ok=True)


def _write_lock(fd: int, path: Path, mine: dict[str, Any]) -> None:
    """Fill the lock just created; if that fails (a full disk), remove it, so that an empty
    lock does not refuse every later run as "in use by another process"."""
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(mine, f)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        path.unlink(missing_ok=True)
        raise RunDirError(f"{path}: cannot write the lock file ({e.strerror or e}); nothing was written") from None


def _read_lock(path: Path) -> dict[str, Any] | None:
    """The lock's holder; None when the file is gone; {} when it cannot be read (being written,
    or damaged): treated as held."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    ok = isinstance(data, dict) and isinstance(data.get("pid"), int) and isinstance(data.get("host"), str)
    return data if ok else {}


def _stale(holder: dict[str, Any]) -> bool:
    return bool(holder) and holder["host"] == socket.gethostname() and not _alive(holder["pid"])


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    if os.name == "nt":  # os.kill(pid, 0) would interrupt it there; assume it runs
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _in_use(path: Path, holder: dict[str, Any]) -> str:
    if not holder:
        who = "another process (the lock file cannot be read)"
    elif holder["host"] == socket.gethostname():
        who = f"process {holder['pid']} on this host"
    else:
        who = f"process {holder['pid']} on host {holder['host']}"
    return (f"{path.parent} is in use by {who} ({path}); wait for that run to end, or remove the "
            "lock file if no run is using the directory")


def _release(path: Path, mine: dict[str, Any]) -> None:
    if _read_lock(path) == mine:
        path.unlink(missing_ok=True)


# ---- files a run writes -----------------------------------------------------------------------
def keep_metrics_until(path: Path, step: int) -> None:
    """Drop the rows of metrics.jsonl past ``step`` (and a torn last line): what a resumed run
    appends then follows its checkpoint without duplicate steps."""
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [ln for ln in lines if _row_step(ln) is not None and _row_step(ln) <= step]
    if len(kept) != len(lines):
        write_atomically(path, "".join(ln if ln.endswith("\n") else ln + "\n" for ln in kept))


def _row_step(line: str) -> int | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row.get("step") if isinstance(row, dict) and isinstance(row.get("step"), int) else None


# ---- resuming: the checkpoint's run -----------------------------------------------------------
def resumable(run_dir: str | Path, stage: str | None) -> Checkpoint:
    """The run directory's checkpoint, checked to continue a ``stage`` run (None: any)."""
    path = Path(run_dir) / CHECKPOINT_NAME
    if not path.exists():
        raise FileNotFoundError(f"{path}: nothing to resume (no checkpoint in {run_dir})")
    ckpt = load_checkpoint(path)
    if ckpt.optimizer_state is None or "train_config" not in ckpt.meta:
        raise RunDirError(f"{path}: this checkpoint has no optimizer state or training settings and "
                          "cannot be resumed")
    found = ckpt.meta.get("stage")
    if stage is not None and found != stage:
        raise RunDirError(f"{path} is a {found or 'unknown'} run's checkpoint, not a {stage} run's: "
                          f"--resume continues a run with the command that started it")
    return ckpt


def resumed_configs(ckpt: Checkpoint, model_given: Mapping[str, Any], train_given: Mapping[str, Any],
                    checkpoint: Path) -> tuple[ModelConfig, TrainConfig]:
    """The checkpoint's model and training configs with the given settings (``resumed``);
    every contradiction of either is reported at once."""
    stored = (ckpt.model_config, TrainConfig.from_dict(ckpt.meta["train_config"]))
    configs, problems = [], []
    for config, given in zip(stored, (model_given, train_given)):
        try:
            configs.append(resumed(config, given, checkpoint))
        except RunDirError as e:
            problems += e.messages
    if problems:
        raise RunDirError(problems)
    return configs[0], configs[1]


def _same_plugin(name: str, given: Any, stored: Any) -> bool:
    """An --attention FILE.py:ClassName given on resuming names the checkpoint's pinned plug-in
    when its file still has the pinned content (a changed file is refused when the model is built)."""
    from ..model.attention import pin, plugin

    if name != "attention" or not plugin.is_plugin(str(given)):
        return False
    try:
        return pin(str(given)) == stored
    except ValueError:
        return False


def resumed(stored: C, given: Mapping[str, Any], checkpoint: Path) -> C:
    """``stored`` (a config from the checkpoint) with the ``given`` settings of RESUMABLE
    applied; any other given setting that differs from the stored one is an error naming the
    flag and both values. Settings not given (None) are the checkpoint's."""
    fields = {f.name for f in cli_fields(type(stored))}
    changes, contradictions = {}, []
    for name, value in given.items():
        if name not in fields or value is None:
            continue
        if name in RESUMABLE and isinstance(stored, TrainConfig):
            changes[name] = value
        elif value != getattr(stored, name) and not _same_plugin(name, value, getattr(stored, name)):
            contradictions.append(f"{_given(name, value)} contradicts the checkpoint's "
                                  f"{_value(name, getattr(stored, name))} ({checkpoint})")
    if contradictions:
        raise RunDirError(contradictions)
    return dataclasses.replace(stored, **changes)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _given(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return _flag(name) if value else _flag(f"no_{name}")
    return f"{_flag(name)} {value}"


def _value(name: str, value: Any) -> str:
    return _given(name, value) if isinstance(value, bool) else str(value)


# ---- the data a run trains on -------------------------------------------------------------
def data_files(**files: Iterable[str | Path | None]) -> dict[str, list[dict[str, str]]]:
    """Each option's files (path as given, SHA-256 of the contents), recorded in the
    checkpoint's meta so that a resume on other data is refused."""
    return {name: [{"path": str(p), "sha256": file_sha256(p)} for p in paths if p]
            for name, paths in files.items()}


def check_data(ckpt: Checkpoint, files: dict[str, list[dict[str, str]]], checkpoint: Path) -> None:
    """The data of a resumed run must be the checkpoint's: same contents (the path may differ)."""
    recorded = ckpt.meta.get("data_files") or {}  # none in checkpoints of older versions
    problems = []
    for name, now in files.items():
        then = recorded.get(name)
        if then is not None and sorted(f["sha256"] for f in now) != sorted(f["sha256"] for f in then):
            problems.append(f"{_flag(name)} {_paths(now)} contradicts the checkpoint's {_paths(then)} "
                            f"(other contents) ({checkpoint})")
    if problems:
        raise RunDirError(problems)


def _paths(files: list[dict[str, str]]) -> str:
    return " ".join(f["path"] for f in files) or "(none)"



# ---- the run: one owner of a stage's directory, configs and checkpoint -------------------------
@dataclasses.dataclass
class Run:
    """A stage's run, opened once (``Run.open``): its claimed directory, the effective configs
    (the settings given, or with resume the checkpoint's with the settings given) and the
    checkpoint it continues (None for a new run). The pipeline may refine ``train_config``
    before training (--minutes fits its epochs); the trainer reads everything from here."""

    dir: RunDir
    stage: str  # the checkpoint's stage: pretrain or finetune
    model_config: ModelConfig | None  # None: finetuning from a pretrained model that has one
    train_config: TrainConfig
    checkpoint: Checkpoint | None = None
    log: Callable[[str], None] = logs.note
    opened: float = dataclasses.field(default_factory=time.perf_counter)  # --minutes counts from here

    @property
    def path(self) -> Path:
        return self.dir.path

    @property
    def resume(self) -> bool:
        return self.checkpoint is not None

    @property
    def checkpoint_path(self) -> Path:
        return self.dir.checkpoint

    @classmethod
    @contextlib.contextmanager
    def open(cls, path: str | Path, stage: str, model_config: ModelConfig | None, train_config: TrainConfig, *,
             resume: bool = False, overwrite: bool = False, given: tuple[Mapping[str, Any], Mapping[str, Any]]
             | None = None, log: Callable[[str], None] = logs.note) -> Iterator["Run"]:
        """Claim ``path`` for a ``stage`` run and, with ``resume``, take the configs from its
        checkpoint with the settings ``given`` (model, training; default: the configs passed,
        whole) applied: a contradiction is an error naming the flag (``resumed``)."""
        opened = time.perf_counter()
        with claim(path, resume=resume, overwrite=overwrite, log=log) as held:
            if not resume:
                yield cls(held, stage, model_config, train_config, None, log, opened)
                return
            ckpt = resumable(held.path, stage)
            if given is None:
                given = ({**(model_config.to_dict() if model_config else {})}, train_config.to_dict())
            model_config, train_config = resumed_configs(ckpt, given[0], _fitted_epochs(ckpt, given[1]),
                                                         held.checkpoint)
            yield cls(held, stage, model_config, train_config, ckpt, log, opened)

    def check_data(self, files: dict[str, list[dict[str, str]]]) -> None:
        """A resumed run's data must be its checkpoint's (``check_data``); a new run records it."""
        if self.checkpoint is not None:
            check_data(self.checkpoint, files, self.checkpoint_path)


def _fitted_epochs(ckpt: Checkpoint, given: Mapping[str, Any]) -> Mapping[str, Any]:
    """The settings given, with the epochs of a run fitted to --minutes when it resumes with the
    same minutes (or none given): the fit's epochs, so that the same command resumes it."""
    stored = ckpt.meta.get("train_config") or {}
    minutes = stored.get("minutes") if given.get("minutes") is None else given["minutes"]
    if stored.get("minutes") and minutes == stored["minutes"]:
        return {**given, "epochs": stored["epochs"]}
    return given
