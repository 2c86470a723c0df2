"""One training job of the lab, in its own process: ``python -m attnlab.serve.worker JOB_DIR
FACTS_DIR RUN_DIR MINUTES [resume]``. It runs `attnlab learn`'s library call (experiments/learn.py) and
writes what the page draws into JOB_DIR/progress.json, always atomically and only there:

- the stage and the last log lines, as learn reports them;
- the training loss against minutes (the stage's metrics.jsonl, read every few seconds);
- dev accuracy per relation against minutes: each checkpoint the run writes (pretraining's
  periodic ones and its last, then the finetuned model) is asked a sample of the dev questions
  (at most SAMPLE_PER_RELATION per relation, so a point costs seconds, not minutes), and at the
  end the whole dev set as learn scores it;
- each relation's most-frequent-answer baseline, drawn beside the curve.

Its own process so that a cancel is a signal (the server never waits on a training step), and
so that a job's threads never hold the lab's answers back beyond what the CPU shares.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from ..core.paths import write_atomically

PROGRESS = "progress.json"
SAMPLE_PER_RELATION = 40
POLL_SECONDS = 2.0
KEPT_LOG_LINES = 12
KEPT_LOSSES = 300


class Progress:
    """The job's progress.json: updated under a lock, written whole and atomically."""

    def __init__(self, job_dir: Path, run_dir: Path, minutes: float):
        self.path = job_dir / PROGRESS
        self.lock = threading.Lock()
        self.began = time.time()
        self.state: dict[str, Any] = {"state": "running", "stage": "starting", "began": self.began,
                                      "minutes": minutes, "run_dir": str(run_dir), "baseline": {},
                                      "points": [], "loss": [], "log": [], "error": None, "results": None}
        self.write()

    def elapsed(self) -> float:
        return round((time.time() - self.began) / 60, 3)

    def update(self, **changes: Any) -> None:
        with self.lock:
            self.state.update(changes)
            self._write()

    def append(self, key: str, item: Any, keep: int | None = None) -> None:
        with self.lock:
            self.state[key] = (self.state[key] + [item])[-keep:] if keep else self.state[key] + [item]
            self._write()

    def write(self) -> None:
        with self.lock:
            self._write()

    def _write(self) -> None:
        write_atomically(self.path, json.dumps(self.state) + "\n")

    def log(self, message: str) -> None:
        """learn's log hook: the stage follows its messages."""
        line = " ".join(str(message).split())
        stage = next((s for key, s in (("pretraining", "pretraining"), ("finetuning", "finetuning")) if
                      line.startswith(key)), None)
        with self.lock:
            self.state["log"] = (self.state["log"] + [line])[-KEPT_LOG_LINES:]
            if stage:
                self.state["stage"] = stage
            self._write()


def dev_sample(facts) -> list:
    """At most SAMPLE_PER_RELATION dev questions of each relation, in file order."""
    from ..data.datasets import read_qa

    taken: dict[str, int] = {}
    sample = []
    for e in read_qa(facts.dev, labelled=True):
        name = facts.schema.require(e).relation.name
        if taken.get(name, 0) < SAMPLE_PER_RELATION:
            taken[name] = taken.get(name, 0) + 1
            sample.append(e)
    return sample


def score_checkpoint(run: Path, facts, examples: list) -> dict[str, float]:
    """Percent right per relation of ``examples`` asked of the model in ``run``."""
    from ..answering.evaluate import answer_questions, score_by_relation
    from ..model.checkpoint import load_model

    model, vocab, _ = load_model(run, device="cpu")
    answers = answer_questions(model, vocab, examples)
    scores = score_by_relation([a.answer for a in answers], examples, facts.schema)
    return {name: round(s.percent, 1) for name, s in scores.items()}


def baseline(facts) -> dict[str, float]:
    """Each relation's most-frequent-answer accuracy on the dev set (learn's baseline)."""
    from ..answering.evaluate import most_frequent_by_relation
    from ..data.datasets import read_qa

    common = most_frequent_by_relation(read_qa(facts.train, labelled=True), facts.schema)
    right: dict[str, list[bool]] = {}
    for e in read_qa(facts.dev, labelled=True):
        name = facts.schema.require(e).relation.name
        right.setdefault(name, []).append(e.answer == common.get(name))
    return {name: round(100 * sum(r) / len(r), 1) for name, r in right.items()}


class Watcher(threading.Thread):
    """Every POLL_SECONDS: the newest loss, and a dev point for each new checkpoint."""

    def __init__(self, progress: Progress, facts, run: Path):
        super().__init__(daemon=True)
        self.progress, self.facts, self.run_dir = progress, facts, run
        self.sample = dev_sample(facts)
        self.seen: dict[Path, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(POLL_SECONDS):
            try:
                self.look()
            except Exception as e:  # a checkpoint being replaced as it is read: the next look sees it
                self.progress.log(f"(progress: {type(e).__name__})")

    def look(self) -> None:
        for stage, folder in (("pretrained", self.run_dir / "pretrain"), ("finetuned", self.run_dir)):
            ckpt = folder / "checkpoint.safetensors"
            if ckpt.exists() and self.seen.get(ckpt) != (written := ckpt.stat().st_mtime):
                self.seen[ckpt] = written
                self.point(stage, folder, written)
        self.losses()

    def point(self, stage: str, folder: Path, written: float) -> None:
        """The checkpoint scored, placed at the minute it was written (not when scoring ended)."""
        scores = score_checkpoint(folder, self.facts, self.sample)
        minutes = round(max(0.0, written - self.progress.began) / 60, 3)
        self.progress.append("points", {"minutes": minutes, "stage": stage, "relations": scores,
                                        "questions": len(self.sample)})

    def losses(self) -> None:
        stage = "pretrain" if self.progress.state["stage"] in ("starting", "pretraining") else ""
        metrics = self.run_dir / stage / "metrics.jsonl"
        if not metrics.exists():
            return
        lines = metrics.read_text(encoding="utf-8").splitlines()
        last = next((json.loads(x) for x in reversed(lines) if '"loss"' in x), None)
        if last is not None:
            self.progress.append("loss", [self.progress.elapsed(), round(last["loss"], 4), stage or "finetune"],
                                 keep=KEPT_LOSSES)


def main(job_dir: str, facts_dir: str, run_dir: str, minutes: str, resume: str = "") -> int:
    from ..data import factset
    from ..experiments.learn import learn

    job, run = Path(job_dir), Path(run_dir)
    progress = Progress(job, run, float(minutes))
    try:
        facts = factset.load(facts_dir)
        progress.update(baseline=baseline(facts))
        watcher = Watcher(progress, facts, run)
        watcher.start()
        results = learn(facts.root, run, minutes=float(minutes), log=progress.log, resume=resume == "resume")
        watcher.stop.set()
        watcher.join()
        final = {name: r["percent"] for name, r in results["relations"].items()}
        progress.append("points", {"minutes": progress.elapsed(), "stage": "final", "relations": final,
                                   "questions": results["overall"]["total"]})
        progress.update(state="done", stage="done", results=results["relations"],
                        overall=results["overall"])
        return 0
    except Exception as e:
        progress.update(state="failed", error=" ".join(str(e).split()) or type(e).__name__)
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
