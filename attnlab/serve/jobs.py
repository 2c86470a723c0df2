"""The lab's training jobs: a fact set learned in a budget of minutes (`attnlab learn`'s library
call), started from the page, watched while it runs, and added to the runs when it is done.

One job runs at a time, the others wait in order (at most MAX_WAITING). Everything the page
sees lives on disk in the serve folder, each file written atomically: ``jobs.json`` (the queue,
written by the server) and ``jobs/N/progress.json`` (written by the job's own process,
worker.py), so a reload of the page finds the job where it is, and a server started again
finds the jobs of the last one: a job that was running when it stopped is reported as
interrupted (its partial output kept; the page may resume it in that same directory, once),
jobs still waiting start in turn.

A job writes only a new run directory inside the serve folder, named as `attnlab learn`
names its default (``learn-FACTSNAME``, then ``-2``, ``-3``...): never an existing directory.
The fact sets are those the server was started with, chosen by number: the page never names
a path.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..core.paths import write_atomically
from .lab import LabError
from .worker import PROGRESS

MAX_WAITING = 3
BUDGET = (1.0, 15.0)  # minutes a job may be given, as the class would use them
STATE_FILE = "jobs.json"
FINISHED = ("done", "failed", "cancelled", "interrupted")


@dataclass(frozen=True)
class FactChoice:
    """A fact set the server offers for training."""

    name: str
    root: Path
    description: str
    relations: tuple[str, ...]

    @classmethod
    def of(cls, facts) -> "FactChoice":
        return cls(facts.name, Path(facts.root), facts.description, tuple(facts.schema.names))


class Jobs:
    """The queue of training jobs over the fact sets ``choices``, kept in ``folder``.

    ``on_done(run_dir, choice)`` is called (from the watching thread) when a job's run is
    written. ``enabled=False``: the queue is shown, nothing can be started (--no-train)."""

    def __init__(self, folder: str | Path, choices: list[FactChoice], on_done: Callable[[Path, FactChoice], None],
                 *, enabled: bool = True, budget: tuple[float, float] = BUDGET, watch: bool = True):
        self.folder = Path(folder)
        self.choices = choices
        self.on_done = on_done
        self.enabled = enabled
        self.budget = budget
        self.lock = threading.Lock()
        self.process: subprocess.Popen | None = None
        self.jobs: list[dict[str, Any]] = self._recovered()
        self._stop = threading.Event()
        if watch:
            threading.Thread(target=self._watch, daemon=True, name="attnlab-jobs").start()

    # ---- the state on disk -------------------------------------------------------------------
    def _recovered(self) -> list[dict[str, Any]]:
        """The last server's jobs: a running one is interrupted, waiting ones still wait."""
        path = self.folder / STATE_FILE
        if not path.exists():
            return []
        try:
            jobs = json.loads(path.read_text(encoding="utf-8"))["jobs"]
        except (ValueError, KeyError, OSError) as e:
            raise ValueError(f"{path}: not a jobs file the lab wrote ({e}); move it away to start afresh") from None
        for job in jobs:
            if job["state"] == "running":
                alive = _alive(job.get("pid"))
                job.update(state="interrupted", finished=time.time(),
                           error=f"the server stopped while it ran; its partial output stays in {job['run_dir']}"
                                 + (f" (its process {job['pid']} may still be running)" if alive else ""))
        self._save(jobs)
        return jobs

    def _save(self, jobs: list[dict[str, Any]] | None = None) -> None:
        write_atomically(self.folder / STATE_FILE, json.dumps({"jobs": jobs if jobs is not None else self.jobs},
                                                              indent=1) + "\n")

    def progress(self, job: dict[str, Any]) -> dict[str, Any] | None:
        path = self.folder / "jobs" / str(job["id"]) / PROGRESS
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # not written yet
            return None

    def learned_runs(self) -> list[tuple[Path, Path]]:
        """(run directory, fact-set folder) of each finished job whose run is still there."""
        return [(Path(j["run_dir"]), Path(j["facts_dir"])) for j in self.jobs
                if j["state"] == "done" and (Path(j["run_dir"]) / "checkpoint.safetensors").is_file()]

    # ---- what the page asks ------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        with self.lock:
            jobs = [dict(job, progress=self.progress(job)) for job in self.jobs]
        return {"enabled": self.enabled, "budget": list(self.budget),
                "fact_sets": [{"id": i, "name": c.name, "description": c.description, "relations": list(c.relations)}
                              for i, c in enumerate(self.choices)],
                "jobs": jobs[::-1]}  # newest first

    def start(self, fact_set: int, minutes: float) -> dict[str, Any]:
        """A new job, waiting its turn (it starts at once when none runs)."""
        if not self.enabled:
            raise LabError("training is turned off on this server (--no-train)", 403)
        if not 0 <= fact_set < len(self.choices):
            raise LabError(f"no fact set {fact_set}: this server offers 0 to {len(self.choices) - 1}", 404)
        low, high = self.budget
        if not low <= minutes <= high:
            raise LabError(f"the budget must be {low:g} to {high:g} minutes, got {minutes:g}")
        with self.lock:
            if sum(j["state"] == "waiting" for j in self.jobs) >= MAX_WAITING:
                raise LabError(f"{MAX_WAITING} jobs are already waiting; start this one when one has run", 429)
            choice = self.choices[fact_set]
            job = {"id": 1 + max((j["id"] for j in self.jobs), default=0), "fact_set": choice.name,
                   "facts_dir": str(choice.root), "fact_set_id": fact_set, "minutes": minutes, "state": "waiting",
                   "created": time.time(), "started": None, "finished": None, "run_dir": None, "error": None}
            self.jobs.append(job)
            self._save()
        self.poll()
        return job

    def cancel(self, job_id: int) -> dict[str, Any]:
        self.poll()  # a job that has just ended is finished, not cancelled
        with self.lock:
            job = next((j for j in self.jobs if j["id"] == job_id), None)
            if job is None:
                raise LabError(f"no job {job_id}", 404)
            if job["state"] in FINISHED:
                raise LabError(f"job {job_id} has already {job['state'].replace('done', 'finished')}", 409)
            if job["state"] == "running" and self.process is not None:
                self.process.send_signal(signal.SIGTERM)
                self.process.wait(30)
                self.process = None
            job.update(state="cancelled", finished=time.time(),
                       error=None if job["run_dir"] is None else f"its partial output stays in {job['run_dir']}")
            self._save()
        self.poll()
        return job

    def resume(self, job_id: int) -> dict[str, Any]:
        """A new job that continues an interrupted or cancelled one in its own run directory
        (`attnlab learn --resume`): the only directory a job ever writes twice is its own."""
        if not self.enabled:
            raise LabError("training is turned off on this server (--no-train)", 403)
        with self.lock:
            old = next((j for j in self.jobs if j["id"] == job_id), None)
            if old is None:
                raise LabError(f"no job {job_id}", 404)
            if old["state"] not in ("interrupted", "cancelled") or not old["run_dir"]:
                raise LabError(f"job {job_id} is {old['state']}: only an interrupted or cancelled job that "
                               "had started can be resumed", 409)
            if any(j.get("resumes") == job_id for j in self.jobs):
                raise LabError(f"job {job_id} has been resumed already (see the jobs above it)", 409)
            job = {**{k: old[k] for k in ("fact_set", "facts_dir", "fact_set_id", "minutes")},
                   "id": 1 + max(j["id"] for j in self.jobs), "state": "waiting", "created": time.time(),
                   "started": None, "finished": None, "run_dir": None, "error": None, "resumes": job_id,
                   "resume_dir": old["run_dir"]}
            self.jobs.append(job)
            self._save()
        self.poll()
        return job

    # ---- running them ------------------------------------------------------------------------
    def poll(self) -> None:
        """Note a finished job (and add its run), start the next waiting one."""
        finished = None
        with self.lock:
            running = next((j for j in self.jobs if j["state"] == "running"), None)
            if running is not None and self.process is not None and self.process.poll() is not None:
                finished = self._finish(running, self.process.returncode)
                self.process, running = None, None
            waiting = next((j for j in self.jobs if j["state"] == "waiting"), None)
            if running is None and waiting is not None:
                self._launch(waiting)
        if finished is not None:
            job, choice = finished
            try:
                self.on_done(Path(job["run_dir"]), choice)
            except Exception as e:  # the run is written; only serving it failed
                with self.lock:
                    job.update(error=f"the run is written but could not be served: {' '.join(str(e).split())}")
                    self._save()

    def _finish(self, job: dict[str, Any], code: int):
        progress = self.progress(job) or {}
        done = code == 0 and progress.get("state") == "done"
        job.update(state="done" if done else "failed", finished=time.time(),
                   error=None if done else progress.get("error") or f"the job's process ended with code {code}")
        self._save()
        return (job, self.choices[job["fact_set_id"]]) if done else None

    def _launch(self, job: dict[str, Any]) -> None:
        job_dir = self.folder / "jobs" / str(job["id"])
        job_dir.mkdir(parents=True, exist_ok=True)
        if job.get("resume_dir"):
            run_dir = Path(job["resume_dir"])
        else:
            run_dir = self._new_run_dir(Path(job["facts_dir"]).resolve().name)
            run_dir.mkdir(parents=True)  # claimed now, so no later job takes the name
        job.update(state="running", started=time.time(), run_dir=str(run_dir))
        self._save()
        with open(job_dir / "log.txt", "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "attnlab.serve.worker", str(job_dir), job["facts_dir"], str(run_dir),
                 repr(float(job["minutes"])), *(["resume"] if job.get("resume_dir") else [])],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        job["pid"] = self.process.pid
        self._save()

    def _new_run_dir(self, name: str) -> Path:
        base = self.folder / f"learn-{name}"
        candidates = (base if n == 1 else base.with_name(f"{base.name}-{n}") for n in range(1, 10_000))
        return next(p for p in candidates if not p.exists())

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.poll()
            except Exception as e:  # keep watching: the next poll may succeed (a full disk freed)
                print(f"attnlab serve: jobs: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Stop watching, and stop a running job (reported as interrupted by the next server)."""
        self._stop.set()
        with self.lock:
            if self.process is not None and self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                self.process.wait(30)


def _alive(pid: int | None) -> bool:
    """Whether a process of that number exists (a job's worker the last server left running)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: the number was reused
        return False
    return True
