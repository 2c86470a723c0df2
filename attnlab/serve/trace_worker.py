"""The lab's causal traces, computed in a process of their own.

A trace is hundreds of forward passes; the asks of a class must not wait for it. On a thread of
the server's own process it still held them back: the two share one interpreter lock, so the
Python between a trace's passes keeps the asking thread waiting (and a trace thread of lower
priority that holds the lock when the scheduler sets it aside keeps it waiting longer). In a
process of its own, at a lower priority, a trace takes only the CPU that asks leave.

The worker keeps the model it traced last, keyed by the caller (the run and its weights), so a
model crosses the process boundary once, not at every trace. A model that cannot cross it (an
attention class loaded from a file the worker cannot import, say) is refused with
``NotPortable`` and the caller traces it where it is.
"""

from __future__ import annotations

import io
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Hashable

from ..core import cpu_settings

NICENESS = 10  # how much lower the worker is scheduled than the server (where the OS allows)

_held: dict[Hashable, Any] = {}  # in the worker: the model last sent, by its key
_UNKNOWN, _NOT_LOADED = "unknown", "not loaded"  # the worker's answers other than a trace


class NotPortable(Exception):
    """The model cannot be sent to the worker: trace it in the calling process."""


def _start(niceness: int) -> None:
    """The worker's set-up: a lower priority, one thread (a trace shares the cores with asks)."""
    import torch

    try:
        os.nice(niceness)
    except (AttributeError, OSError):  # no such call on this OS: same priority, still no shared lock
        pass
    torch.set_num_threads(1)


def _run(key: Hashable, payload: bytes | None, task: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """In the worker: ``task(model, vocab, *args, **kwargs)`` with the model of ``key``, loaded
    from ``payload`` when one is sent (replacing the one held)."""
    import torch

    if payload is not None:
        _held.clear()
        try:
            _held[key] = torch.load(io.BytesIO(payload), weights_only=False)
        except Exception:  # noqa: BLE001  (a class the worker cannot import, whatever it raises)
            return _NOT_LOADED
    if key not in _held:
        return _UNKNOWN
    model, vocab = _held[key]
    return task(model, vocab, *args, **kwargs)


def _about_me() -> tuple[int, int]:
    """(pid, niceness) of the worker: what a test checks."""
    return os.getpid(), os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else 0


def _counted_as_own(done) -> None:
    if not done.cancelled() and done.exception() is None:
        cpu_settings.count_as_own(done.result()[0])


def portable(model, vocab) -> bytes:
    """The model and its vocabulary as the worker loads them (NotPortable when they cannot be
    written: a hook or class pickle cannot name)."""
    import torch

    buf = io.BytesIO()
    try:
        torch.save((model, vocab), buf)
    except Exception as e:  # noqa: BLE001  (pickling fails with many error types)
        raise NotPortable(str(e)) from None
    return buf.getvalue()


class TraceWorker:
    """One worker process, started on first use (or ``warm``), restarted if it dies."""

    def __init__(self, niceness: int = NICENESS):
        self.niceness = niceness
        self._pool: ProcessPoolExecutor | None = None
        self._holds: Hashable | None = None  # the key of the model the worker holds

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_start, initargs=(self.niceness,))
            self._holds = None
            # The server chooses its threads by the load of other processes; its worker is not one.
            self._pool.submit(_about_me).add_done_callback(_counted_as_own)
        return self._pool

    def warm(self) -> None:
        """Start the worker now (it imports PyTorch, a few seconds), without waiting for it."""
        self._executor()

    def about(self) -> tuple[int, int]:
        return self._executor().submit(_about_me).result()

    def run(self, key: Hashable, snapshot: Callable[[], bytes], task: Callable[..., Any], *args: Any,
            **kwargs: Any) -> Any:
        """``task(model, vocab, *args, **kwargs)`` in the worker (a module-level function) with the
        model of ``key``, sent as ``snapshot()`` (``portable``) when the worker does not hold it;
        the task's exceptions are raised here. NotPortable when the model cannot be sent or
        loaded there."""
        for _ in range(3):  # a worker that died, or lost the model, gets it once more
            payload = None if self._holds == key else snapshot()
            try:
                got = self._executor().submit(_run, key, payload, task, args, kwargs).result()
            except BrokenProcessPool:
                self._pool = None
                continue
            if isinstance(got, str) and got == _NOT_LOADED:
                self._holds = None
                raise NotPortable("the worker could not load the model")
            if isinstance(got, str) and got == _UNKNOWN:
                self._holds = None
                continue
            self._holds = key
            return got
        raise RuntimeError("the trace worker stopped three times in a row")

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
