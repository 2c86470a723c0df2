"""The fault suite (issue 25, item 9): one table of faults over every command, each with the exit
code it must end with, words its one-line message must hold, and the files that must keep their
bytes (or stay absent). The classes of fault: bad input, an output that exists, a file the command
reads named as its output, a concurrent writer (a live process holding the run, another writer
creating the output meanwhile), a read-only output directory and a full disk. Then kill -9 at
random points of a tiny training run: resuming gives the uninterrupted run's tensors, byte for byte.

A new command gets a row here (``test_every_command_has_a_row`` fails until it does).
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from attnlab import cli
from attnlab.model import checkpoint
from attnlab.training import rundir
from tests.conftest import DATA, PEOPLE, REPO
from tests.test_bad_input import read_only  # noqa: F401  (the fixture: a read-only directory, also for root)
from tests.tiny_runs import train_tiny

HANG_GUARD_S = 300  # only so that a broken build fails instead of hanging; not a speed check


@dataclass(frozen=True)
class Fault:
    name: str
    argv: str  # a template: {run} a copy of a tiny run, {tmp} the test's directory, {dev} a labelled file,
    # {unlabelled}, {file} an existing file, {wiki} the corpus, {birth_dev}, {ro} a read-only directory
    code: int
    words: tuple[str, ...]  # templates, each in the message
    unchanged: tuple[str, ...] = ()  # templates of files whose bytes (or absence) must stay as they were
    setup: str | None = None  # a name in _setup, done before the files are looked at
    other: str | None = None  # a template: the file another writer made meanwhile, which must keep its bytes


def _faults() -> list[Fault]:
    resume = ("pretrain --preset tiny --max-steps 6 --log-every 1 --device cpu --out-dir {run} --corpus {wiki} "
              "--held-out {birth_dev} --eval-file '' --resume")
    edit = "edit {run} --person 'Ralf Wadephul' --place Paris --device cpu"
    return [
        # pretrain
        Fault("pretrain: a run is there", "pretrain --preset tiny --corpus {wiki} --eval-file '' --device cpu "
              "--out-dir {run}", 2, ("already holds a run", "--resume", "--overwrite"), ("{run}/checkpoint.safetensors",)),
        Fault("pretrain: another process holds the run", resume, 2, ("{run} is in use by process", "on this host"),
              ("{run}/checkpoint.safetensors", "{run}/metrics.jsonl"), setup="lock_run"),
        Fault("pretrain: full disk", resume, 2, ("No space left on device",), ("{run}/checkpoint.safetensors",),
              setup="full_disk"),
        Fault("pretrain: read-only directory", "pretrain --preset tiny --corpus {wiki} --eval-file '' --device cpu "
              "--out-dir {ro}/new", 2, ("{ro}", "cannot write here"), ("{ro}/new",)),
        # finetune
        Fault("finetune: no such --init", "finetune --preset tiny --init {tmp}/missing --train-file {dev} "
              "--out-dir {tmp}/out --device cpu", 2, ("{tmp}/missing", "no checkpoint here"), ("{tmp}/out",)),
        Fault("finetune: read-only directory", "finetune --preset tiny --init {run} --train-file {dev} --eval-file '' "
              "--out-dir {ro}/ft --device cpu", 2, ("cannot write here",), ("{ro}/ft",)),
        # evaluate
        Fault("evaluate: predictions onto the checkpoint", "evaluate {run} --eval-file {dev} --device cpu "
              "--predictions {run}/checkpoint.safetensors --overwrite", 2, ("this command reads",),
              ("{run}/checkpoint.safetensors",)),
        Fault("evaluate: predictions onto the questions", "evaluate {run} --eval-file {dev} --device cpu "
              "--predictions {dev} --overwrite", 2, ("this command reads",), ("{dev}",)),
        Fault("evaluate: predictions exist", "evaluate {run} --eval-file {dev} --device cpu --predictions {file}", 2,
              ("{file}: already exists; pass --overwrite",), ("{file}",)),
        Fault("evaluate: another writer meanwhile", "evaluate {run} --eval-file {dev} --device cpu --abstain off "
              "--predictions {tmp}/pred.txt", 2, ("{tmp}/pred.txt", "was written by another process meanwhile"),
              setup="race_predictions", other="{tmp}/pred.txt"),
        Fault("evaluate: full disk", "evaluate {run} --eval-file {dev} --device cpu --predictions {file} --overwrite",
              2, ("{file}: No space left on device",), ("{file}",), setup="full_disk"),
        # ask
        Fault("ask: empty question", "ask {run} '' --device cpu", 2, ("<argument>:1: empty question",)),
        Fault("ask: two lines in a question", "ask {run} 'Where was Ada\nLovelace born?' --device cpu", 2,
              ("<argument>:1: a question is one line",)),
        Fault("ask: no checkpoint", "ask {tmp}/missing 'Where was Ada Lovelace born?' --device cpu", 2,
              ("no checkpoint here",)),
        # baseline
        Fault("baseline: no training file", "baseline --train-file {tmp}/missing.tsv --eval-file {dev}", 2,
              ("{tmp}/missing.tsv: --train-file does not exist",)),
        # demo
        Fault("demo: --out-dir is a file", "demo --out-dir {file} --device cpu", 2,
              ("{file}: --out-dir is a file, not a directory",), ("{file}",)),
        Fault("demo: read-only directory", "demo --preset tiny --out-dir {ro}/demo --device cpu", 2,
              ("cannot write here",), ("{ro}/demo",)),
        # compare
        Fault("compare: --variants ''", "compare --preset tiny --variants '' --out-dir {tmp}/c --corpus {wiki} "
              "--train-file {dev} --eval-file {dev} --device cpu", 2, ("names no variant",), ("{tmp}/c",)),
        Fault("compare: unknown variant", "compare --preset tiny --variants vanilla,psychic --out-dir {tmp}/c "
              "--corpus {wiki} --train-file {dev} --eval-file {dev} --device cpu", 2, ("unknown variant", "psychic"),
              ("{tmp}/c",)),
        Fault("compare: read-only directory", "compare --preset tiny --variants vanilla --out-dir {ro}/c "
              "--corpus {wiki} --train-file {dev} --eval-file {dev} --device cpu", 2, ("cannot write here",),
              ("{ro}/c",)),
        # variants
        Fault("variants: unknown preset", "variants --preset psychic", 2, ("invalid choice", "psychic")),
        # plot
        Fault("plot: the image exists", "plot {run} --image {file}", 2, ("{file}: already exists",), ("{file}",)),
        Fault("plot: full disk", "plot {run} --image {file} --overwrite", 2, ("{file}: No space left on device",),
              ("{file}",), setup="full_disk"),
        # generate
        Fault("generate: empty prompt", "generate {run} '' --device cpu", 2, ("<argument>:1: empty prompt",)),
        # attention
        Fault("attention: the heatmaps exist", "attention {run} Ada --out-dir {tmp}/maps --device cpu", 2,
              ("{tmp}/maps/layer0.png: already exists",), ("{tmp}/maps/layer0.png",), setup="heatmap"),
        Fault("attention: read-only directory", "attention {run} Ada --out-dir {ro}/maps --device cpu", 2,
              ("cannot write here",), ("{ro}/maps",)),
        # explore
        Fault("explore: --plot is a file", "explore copy --plot {file}", 2, ("{file}: --plot is a file",), ("{file}",)),
        Fault("explore: unknown topic", "explore psychic", 2, ("invalid choice", "psychic")),
        # calibrate
        Fault("calibrate: no labels", "calibrate {run} --eval-file {unlabelled} --out-dir {tmp}/cal --device cpu", 2,
              ("no answer label",), ("{tmp}/cal",)),
        Fault("calibrate: another writer meanwhile", "calibrate {run} --eval-file {dev} --out-dir {tmp}/cal "
              "--abstain off --device cpu", 2, ("calibration.json", "was written by another process meanwhile"),
              setup="race_calibration", other="{tmp}/cal/calibration.json"),
        Fault("calibrate: read-only directory", "calibrate {run} --eval-file {dev} --out-dir {ro}/cal --device cpu",
              2, ("cannot write here",), ("{ro}/cal",)),
        # audit
        Fault("audit: too many names", "audit {run} --names 3000000 --device cpu", 2, ("at most 100,000",)),
        Fault("audit: full disk", "audit {run} --names 5 --eval-file {dev} --out-dir {tmp}/audit --overwrite "
              "--device cpu", 2, ("No space left on device",),
              ("{tmp}/audit/audit.json", "{tmp}/audit/audit.png", "{tmp}/audit/invented.txt"), setup="earlier_audit"),
        # trace
        Fault("trace: nothing to trace", "trace {run} --out-dir {tmp}/trace --device cpu", 2,
              ("give a QUESTION to trace",), ("{tmp}/trace",)),
        Fault("trace: read-only directory", "trace {run} 'Where was Ralf Wadephul born?' --out-dir {ro}/trace "
              "--device cpu", 2, ("cannot write here",), ("{ro}/trace",)),
        # edit
        Fault("edit: two edits into one new directory", edit + " --out-dir {tmp}/edited", 2,
              ("{tmp}/edited is in use by process",), ("{tmp}/edited/checkpoint.safetensors",), setup="lock_edit"),
        Fault("edit: into the original run", edit + " --out-dir {run}", 2, ("is the original run",),
              ("{run}/checkpoint.safetensors",)),
        Fault("edit: read-only directory", edit + " --out-dir {ro}/edited", 2, ("cannot write here",), ("{ro}/edited",)),
        # edits
        Fault("edits: no checkpoint", "edits {tmp}/missing", 2, ("no checkpoint here",)),
        # serve
        Fault("serve: port out of range", "serve {run} --port 70000", 2, ("--port", "got '70000'")),
        # learn
        Fault("learn: no such fact-set folder", "learn {tmp}/nowhere --out-dir {tmp}/learned", 2,
              ("{tmp}/nowhere: no such fact-set folder",), ("{tmp}/learned",)),
        Fault("learn: a folder without facts.toml", "learn {tmp} --out-dir {tmp}/learned", 2,
              ("{tmp}/facts.toml: missing",), ("{tmp}/learned",)),
        Fault("learn: no minutes", "learn {tmp} --minutes 0 --out-dir {tmp}/learned", 2,
              ("--minutes", "got '0'"), ("{tmp}/learned",)),
        # check-attention
        Fault("check-attention: no such file", "check-attention {tmp}/nope.py:Attn", 2,
              ("{tmp}/nope.py: no such file",)),
        # export
        Fault("export: no checkpoint", "export {tmp}/missing {tmp}/tl", 2, ("no checkpoint here",), ("{tmp}/tl",)),
        Fault("export: OUT is a file", "export {run} {file}", 2, ("{file}: OUT is a file",), ("{file}",)),
        Fault("export: into the run", "export {run} {run} --overwrite", 2, ("is the run this command reads",),
              ("{run}/config.json",)),
        Fault("export: an export is there", "export {run} {tmp}", 2, ("{tmp}/config.json: already exists",
              "--overwrite"), ("{tmp}/config.json",), setup="export_there"),
        Fault("export: read-only directory", "export {run} {ro}/tl", 2, ("cannot write here",), ("{ro}/tl",)),
        # synth
        Fault("synth: --out-dir not empty", "synth bios --people 8 --out-dir {tmp}", 2,
              ("{tmp}: is not empty",), ("{file}",)),
        Fault("synth: --out-dir is a file", "synth bios --people 8 --out-dir {file}", 2,
              ("{file}: --out-dir is a file",), ("{file}",)),
        Fault("synth: read-only directory", "synth bios --people 8 --out-dir {ro}/bios", 2,
              ("cannot write here",), ("{ro}/bios",)),
    ]


FAULTS = _faults()


# ---- the world each row runs in ----------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """A seconds-long recall-format run on the real data files; each row gets a copy."""
    return train_tiny(tmp_path_factory.mktemp("faults") / "run")


@pytest.fixture
def world(tiny_run, tmp_path, read_only) -> dict[str, str]:  # noqa: F811
    run = Path(shutil.copytree(tiny_run, tmp_path / "run"))
    (tmp_path / "a-file").write_text("the user's earlier work\n")
    dev = tmp_path / "dev.tsv"
    dev.write_text("".join(line + "\n" for line in (DATA / "birth_dev.tsv").read_text().splitlines()[:6]))
    unlabelled = tmp_path / "questions.txt"
    unlabelled.write_text("".join(line.split("\t")[0] + "\n" for line in dev.read_text().splitlines()))
    ro = tmp_path / "ro"
    ro.mkdir()
    read_only(ro)
    return {"run": str(run), "tmp": str(tmp_path), "dev": str(dev), "unlabelled": str(unlabelled),
            "file": str(tmp_path / "a-file"), "wiki": str(DATA / "wiki.txt"),
            "birth_dev": str(DATA / "birth_dev.tsv"), "ro": str(ro)}


class LiveHolder:
    """Another process (a sleeping one) whose lock file holds a run directory."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

    def hold(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        lock = {"pid": self.proc.pid, "host": socket.gethostname()}
        (directory / rundir.LOCK_NAME).write_text(__import__("json").dumps(lock))

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _full_disk(monkeypatch) -> None:
    """Every write from now on fails as on a full disk: file writes (their fsync), figures and
    checkpoints."""
    import matplotlib.figure

    def no_space(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", no_space)
    monkeypatch.setattr(checkpoint, "save_file", no_space)


OTHER_OUTPUT = "the other process's output\n"


def _another_writer(monkeypatch, module, name: str, target: str) -> None:
    """``module.name`` (a writer taking the path first) preceded, for the file called ``target``,
    by another process writing that file: the command's own write then finds it there."""
    real = getattr(module, name)

    def racing(path, *args, **kwargs):
        if Path(path).name == target:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(OTHER_OUTPUT)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(module, name, racing)


def _setup(name: str | None, world: dict[str, str], monkeypatch, holder: LiveHolder) -> None:
    tmp, run = Path(world["tmp"]), Path(world["run"])
    if name is None:
        return
    if name == "lock_run":
        holder.hold(run)
    elif name == "lock_edit":
        holder.hold(tmp / "edited")
    elif name == "full_disk":
        _full_disk(monkeypatch)
    elif name == "race_predictions":
        from attnlab.training import pipeline

        _another_writer(monkeypatch, pipeline, "write_predictions", "pred.txt")
    elif name == "race_calibration":
        from attnlab.trust import calibrate

        _another_writer(monkeypatch, calibrate, "write_output", "calibration.json")
    elif name == "heatmap":
        (tmp / "maps").mkdir()
        (tmp / "maps" / "layer0.png").write_bytes(b"an earlier heatmap")
    elif name == "export_there":
        (tmp / "config.json").write_text("an earlier export's config\n")
    elif name == "earlier_audit":
        (tmp / "audit").mkdir()
        for f in ("audit.json", "audit.png", "invented.txt"):
            (tmp / "audit" / f).write_text(f"the earlier {f}\n")
        _full_disk(monkeypatch)
    else:
        raise AssertionError(f"no setup {name!r}")


def _state(path: Path) -> str | None:
    """A file's bytes as a digest, a directory's listing, or None when nothing is there."""
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    if path.is_dir():
        return "dir: " + ",".join(sorted(p.name for p in path.rglob("*")))
    return None


def _exit_code(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as e:  # argparse's refusals
        return e.code


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault(fault: Fault, world, monkeypatch, capsys):
    holder = LiveHolder() if fault.setup in ("lock_run", "lock_edit") else None
    try:
        _setup(fault.setup, world, monkeypatch, holder)
        watched = [Path(t.format(**world)) for t in fault.unchanged]
        before = [_state(p) for p in watched]
        code = _exit_code(shlex.split(fault.argv.format(**world)) if "\n" not in fault.argv
                          else _split_keeping_newlines(fault.argv.format(**world)))
    finally:
        if holder is not None:
            holder.stop()
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("attnlab ")]
    assert code == fault.code, err
    assert len(errors) == 1 and "Traceback" not in err, err  # one line, no traceback
    for words in fault.words:
        assert words.format(**world) in errors[0], errors[0]
    assert [_state(p) for p in watched] == before
    if fault.other is not None:  # the other writer's file is kept whole
        assert Path(fault.other.format(**world)).read_text() == OTHER_OUTPUT
    assert not list(Path(world["tmp"]).rglob(".tmp-*"))  # no temporary file left anywhere


def _split_keeping_newlines(command: str) -> list[str]:
    """shlex.split, but a newline inside quotes stays in its word."""
    return [w.replace("\x00", "\n") for w in shlex.split(command.replace("\n", "\x00"))]


def test_every_command_has_a_row():
    commands = set(cli.build_parser()._subparsers._group_actions[0].choices)
    covered = {f.argv.split()[0] for f in FAULTS}
    assert commands <= covered, sorted(commands - covered)


def test_every_class_of_fault_has_rows():
    setups = [f.setup for f in FAULTS]
    for kind in ("lock_run", "lock_edit", "full_disk", "race_predictions", "race_calibration"):
        assert kind in setups, kind
    assert sum("{ro}" in f.argv for f in FAULTS) >= 6  # a read-only output directory, per command that writes


def test_an_experiments_records_are_written_atomically(tmp_path, monkeypatch):
    """demo and compare write settings.json, stages.json, results.md/.json and their chart through a
    temporary file: a full disk (or a kill) leaves the earlier file whole."""
    from attnlab.answering.evaluate import Score
    from attnlab.experiments import results, runner

    record = tmp_path / "settings.json"
    record.write_text('{"earlier": true}\n')
    _full_disk(monkeypatch)
    with pytest.raises(OSError, match="No space left on device"):
        runner._write_json(record, {"later": True})
    with pytest.raises(OSError, match="No space left on device"):
        results.plot_dev_accuracy([results.Row("baseline", "baseline", Score(1, 4))], tmp_path / "dev_accuracy.png", "t")
    assert record.read_text() == '{"earlier": true}\n' and sorted(p.name for p in tmp_path.iterdir()) == [
        "settings.json"]


# ---- kill -9 at random points of a tiny training run ------------------------------------------------
KILL_STEPS = 60
KILL_AFTER_ROWS = sorted(random.Random(25).sample(range(3, 45), 2))  # metrics rows written before the kill


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("kill") / "wiki.txt"
    path.write_text("\n".join(f"{n}. {n} was born in {p} and lived there." for n, p in PEOPLE), encoding="utf-8")
    return path


def _training(corpus: Path, out: Path, *extra: str) -> list[str]:
    return ["pretrain", "--preset", "tiny", "--objective", "lm", "--corpus", str(corpus), "--epochs", "40",
            "--batch-size", "2", "--dropout", "0.1", "--max-steps", str(KILL_STEPS), "--checkpoint-every", "1",
            "--log-every", "1", "--eval-file", "", "--held-out", "--device", "cpu", "--out-dir", str(out), *extra]


@pytest.fixture(scope="module")
def uninterrupted(corpus) -> Path:
    out = corpus.parent / "straight"
    assert cli.main(_training(corpus, out)) == 0
    return out


def _rows(metrics: Path) -> int:
    try:
        return metrics.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(path), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


@pytest.mark.parametrize("rows", KILL_AFTER_ROWS)
def test_kill_9_during_training_then_resume_gives_the_uninterrupted_run(corpus, uninterrupted, tmp_path, rows):
    out = tmp_path / "cut"
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    log = open(tmp_path / "log.txt", "w")
    proc = subprocess.Popen([sys.executable, "-m", "attnlab", *_training(corpus, out), "--no-cpu-settings"],
                            env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while proc.poll() is None and _rows(out / "metrics.jsonl") < rows and time.monotonic() < deadline:
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
        proc.wait(HANG_GUARD_S)
    finally:
        proc.kill()
        log.close()
    assert proc.returncode == -signal.SIGKILL, (tmp_path / "log.txt").read_text()  # killed, not finished
    assert _rows(out / "metrics.jsonl") < KILL_STEPS + 1
    assert cli.main(_training(corpus, out, "--resume")) == 0  # the dead process's lock is taken over
    resumed, whole = _tensors(out / checkpoint.CHECKPOINT_NAME), _tensors(uninterrupted / checkpoint.CHECKPOINT_NAME)
    assert resumed.keys() == whole.keys()
    for name, value in whole.items():  # weights, optimiser state and random state
        assert resumed[name].dtype == value.dtype and torch.equal(resumed[name], value), name
    assert not (out / rundir.LOCK_NAME).exists() and not list(out.glob(".tmp-*"))
