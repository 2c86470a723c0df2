"""Bad input anywhere in the command line (issue 12, item 1): each case is refused with exit code
2 and one line on stderr naming the path (and line) or the flag, before anything is written."""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import math
import os
import shlex
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from attnlab.model import checkpoint
from attnlab import cli
from attnlab.core import paths
from attnlab.config.settings import ModelConfig, TrainConfig
from tests.conftest import DATA, PEOPLE
from tests.tiny_runs import train_tiny

WIKI = DATA / "wiki.txt"


# ---- helpers ---------------------------------------------------------------------------------
def exit_code(argv: list[str]) -> int:
    """The command line's exit code, whether the parser exits (SystemExit) or the command returns."""
    try:
        return cli.main(argv)
    except SystemExit as e:
        return e.code


def refused(argv: list[str] | str, capsys) -> str:
    """Run a command that must be refused: exit code 2 and exactly one line on stderr (as a
    terminal shows it: a progress bar redrawn with carriage returns and then cleared is no
    line), which is returned."""
    argv = shlex.split(argv) if isinstance(argv, str) else argv
    code = exit_code(argv)
    err = capsys.readouterr().err
    assert code == 2, f"exit code {code} for {argv}: {err}"
    lines = [shown for line in err.split("\n") if (shown := line.rsplit("\r", 1)[-1].strip())]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def temporaries(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(".tmp")]


def rewrite(src: Path, dst: Path, *, header=None, tensors=None, raw: str | None = None) -> Path:
    """A copy of checkpoint ``src`` in run directory ``dst`` with its metadata JSON changed by
    ``header(dict)`` (or replaced by ``raw``) and its tensors by ``tensors(dict)``."""
    with safe_open(str(src / checkpoint.CHECKPOINT_NAME), "pt") as f:
        meta = json.loads(f.metadata()["attnlab"])
        weights = {k: f.get_tensor(k) for k in f.keys()}
    if header is not None:
        header(meta)  # changes it in place
    if tensors is not None:
        tensors(weights)
    dst.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(dst / checkpoint.CHECKPOINT_NAME), metadata={"attnlab": raw if raw is not None else json.dumps(meta)})
    return dst


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A tiny pretrained run (direct format) whose checkpoint holds optimiser state."""
    return train_tiny(tmp_path_factory.mktemp("bad-input") / "run", recall=False)


@pytest.fixture
def files(tmp_path, run) -> dict[str, str]:
    """Placeholders of the argv templates below: a run, a directory, a file, good inputs, an
    output directory that must stay absent."""
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "a-file").write_text("not a directory\n")
    (tmp_path / "qa.tsv").write_text("".join(f"Where was {n} born?\t{p}\n" for n, p in PEOPLE[:3]))
    return {"run": str(run), "dir": str(tmp_path / "a-dir"), "file": str(tmp_path / "a-file"),
            "tsv": str(tmp_path / "qa.tsv"), "wiki": str(WIKI), "out": str(tmp_path / "out")}


def command(template: str, files: dict[str, str]) -> list[str]:
    return shlex.split(template.format(**files))


# ---- input files: a directory or an unreadable file ------------------------------------------
INPUTS = [
    ("pretrain --preset tiny --device cpu --corpus {dir} --out-dir {out}", "--corpus"),
    ("pretrain --preset tiny --device cpu --config {dir} --out-dir {out}", "config file"),
    ("pretrain --preset tiny --device cpu --objective lm --mix-ratio 0.5 --mix-qa {dir} --out-dir {out}", "--mix-qa"),
    ("finetune --preset tiny --device cpu --train-file {dir} --out-dir {out}", "--train-file"),
    ("finetune --preset tiny --device cpu --init {run} --train-file {tsv} --eval-file {dir} --out-dir {out}", "--eval-file"),
    ("evaluate {run} --eval-file {dir} --device cpu", "--eval-file"),
    ("evaluate {run} --eval-file {tsv} --stored --corpus {dir} --predictions {out}/p.txt", "--corpus"),
    ("ask {run} 'Where was Ada Brook born?' --evidence {dir}", "--evidence"),
    ("ask {run} 'Where was Ada Brook born?' --abstain auto --holdout-file {dir}", "--holdout-file"),
    ("baseline --train-file {dir} --eval-file {tsv}", "--train-file"),
    ("baseline --train-file {tsv} --eval-file {dir}", "--eval-file"),
    ("variants --preset tiny --corpus {dir}", "--corpus"),
    ("compare --preset tiny --corpus {dir} --out-dir {out}", "--corpus"),
    ("generate {run} --loops {dir}", "--loops"),
    ("attention {run} --over {dir}", "--over"),
    ("trace {run} --over {dir} --out-dir {out}", "--over"),
    ("calibrate {run} --eval-file {dir} --out-dir {out}", "--eval-file"),
    ("audit {run} --corpus {dir} --out-dir {out}", "--corpus"),
    ("edit {run} --person 'Ada Brook' --place Paris --corpus {dir} --out-dir {out}", "--corpus"),
]


@pytest.mark.parametrize("template, what", INPUTS, ids=[t.split()[0] + " " + w for t, w in INPUTS])
def test_a_directory_given_as_an_input_file_is_refused(files, capsys, template, what):
    err = refused(command(template, files), capsys)
    assert f"{files['dir']}: {what} is a directory, not a file" in err
    assert not Path(files["out"]).exists()


@pytest.mark.parametrize("template", [
    "evaluate {dir} --eval-file {tsv}", "finetune --preset tiny --init {dir} --train-file {tsv} --out-dir {out}",
    "plot {dir} --image {out}/x.png"])
def test_a_directory_without_a_checkpoint_or_metrics_is_refused(files, capsys, template):
    err = refused(command(template, files), capsys)
    assert files["dir"] in err and ("no checkpoint here" in err or "no metrics here" in err)
    assert not Path(files["out"]).exists()


@pytest.fixture
def unreadable(monkeypatch):
    """Make files unreadable: chmod 000, and where this runs as root (whom permissions do not
    stop) the reads themselves fail as they would for anyone else."""
    paths_denied: set[str] = set()

    def deny(path: Path) -> Path:
        path.chmod(0)
        paths_denied.add(os.path.abspath(path))
        return path

    if os.geteuid() == 0:
        real_open, real_safe_open = open, checkpoint.safe_open

        def guarded(opener):
            def wrapper(file, *args, **kwargs):
                if os.path.abspath(file) in paths_denied:
                    raise PermissionError(errno.EACCES, "Permission denied", str(file))
                return opener(file, *args, **kwargs)
            return wrapper

        monkeypatch.setattr(paths, "open", guarded(real_open), raising=False)
        monkeypatch.setattr(checkpoint, "safe_open", guarded(real_safe_open))
    return deny


@pytest.mark.parametrize("template, what", [
    ("pretrain --preset tiny --device cpu --corpus {denied} --out-dir {out}", "--corpus"),
    ("evaluate {run} --eval-file {denied}", "--eval-file"),
    ("finetune --preset tiny --config {denied} --out-dir {out}", "config file"),
    ("baseline --train-file {denied} --eval-file {tsv}", "--train-file"),
])
def test_an_unreadable_input_file_is_refused(files, tmp_path, unreadable, capsys, template, what):
    denied = unreadable(Path(shutil.copy(files["tsv"], tmp_path / "denied.txt")))
    err = refused(command(template, {**files, "denied": str(denied)}), capsys)
    assert f"{denied}: cannot read {what} (Permission denied)" in err
    assert not Path(files["out"]).exists()


def test_an_unreadable_checkpoint_is_refused_naming_it(files, tmp_path, unreadable, capsys):
    copy_ = tmp_path / "copy"
    shutil.copytree(files["run"], copy_)
    unreadable(copy_ / checkpoint.CHECKPOINT_NAME)
    err = refused(command("evaluate {copy} --eval-file {tsv}", {**files, "copy": str(copy_)}), capsys)
    assert f"{copy_ / checkpoint.CHECKPOINT_NAME}: not a readable safetensors checkpoint" in err
    assert not list(copy_.glob("predictions-*"))


# ---- output paths: a file, a read-only directory, a full disk ---------------------------------
OUTPUTS = [
    ("pretrain --preset tiny --device cpu --corpus {wiki} --eval-file '' --out-dir {file}", "--out-dir"),
    ("finetune --preset tiny --device cpu --init {run} --train-file {tsv} --eval-file '' --out-dir {file}", "--out-dir"),
    ("compare --preset tiny --train-file {tsv} --eval-file {tsv} --out-dir {file}", "--out-dir"),
    ("demo --out-dir {file}", "--out-dir"),
    ("calibrate {run} --eval-file {tsv} --out-dir {file}", "--out-dir"),
    ("audit {run} --out-dir {file}", "--out-dir"),
    ("trace {run} 'Where was Ada Brook born?' --out-dir {file}", "--out-dir"),
    ("attention {run} 'Ada' --out-dir {file}", "--out-dir"),
    ("edit {run} --person 'Ada Brook' --place Paris --out-dir {file}", "--out-dir"),
    ("explore copy --plot {file}", "--plot"),
]


@pytest.mark.parametrize("template, what", OUTPUTS, ids=[t.split()[0] for t, _ in OUTPUTS])
def test_an_output_directory_that_is_a_file_is_refused(files, capsys, template, what):
    before = sha(Path(files["file"]))
    err = refused(command(template, files), capsys)
    assert f"{files['file']}: {what} is a file, not a directory" in err
    assert sha(Path(files["file"])) == before


def test_an_output_directory_under_a_file_is_refused(files, capsys):
    err = refused(command("pretrain --preset tiny --corpus {wiki} --out-dir {file}/run", files), capsys)
    assert f"{files['file']}/run: --out-dir cannot be created: {files['file']} is a file" in err


@pytest.mark.parametrize("template, what", [
    ("evaluate {run} --eval-file {tsv} --predictions {dir}", "--predictions"),
    ("plot {run} --image {dir}", "--image"),
])
def test_an_output_file_that_is_a_directory_is_refused(files, capsys, template, what):
    err = refused(command(template, files), capsys)
    assert f"{files['dir']}: {what} is a directory, not a file" in err
    assert not list(Path(files["run"]).glob("predictions-*"))


@pytest.fixture
def read_only(monkeypatch):
    """Make a directory read-only: chmod 555, and where this runs as root (whom permissions do
    not stop) the permission check answers as it would for anyone else."""
    denied: list[str] = []

    def make(directory: Path) -> Path:
        directory.chmod(0o555)
        denied.append(os.path.abspath(directory))
        return directory

    if os.geteuid() == 0:
        real_access = os.access
        monkeypatch.setattr(paths.os, "access", lambda p, mode, **kw: (
            False if os.path.abspath(p) in denied and mode & os.W_OK else real_access(p, mode, **kw)))
    yield make
    for directory in denied:
        os.chmod(directory, 0o755)


@pytest.mark.parametrize("template", [
    "pretrain --preset tiny --corpus {wiki} --eval-file '' --out-dir {ro}/new",
    "evaluate {ro}/run --eval-file {tsv}",  # predictions go beside the checkpoint
    "evaluate {run} --eval-file {tsv} --predictions {ro}/p.txt",
    "calibrate {ro}/run --eval-file {tsv} --out-dir {ro}/calibration",
])
def test_a_read_only_output_directory_is_refused(files, tmp_path, read_only, capsys, template):
    ro = tmp_path / "ro"
    shutil.copytree(files["run"], ro / "run")
    listing = sorted(p.name for p in ro.rglob("*"))
    read_only(ro / "run")
    read_only(ro)
    err = refused(command(template, {**files, "ro": str(ro)}), capsys)
    assert str(ro) in err and "cannot write here (no permission, or a read-only file system)" in err
    assert sorted(p.name for p in ro.rglob("*")) == listing


def _disk_full(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_keeps_the_earlier_predictions(files, tmp_path, monkeypatch, capsys):
    out = tmp_path / "predictions.txt"
    out.write_text("the earlier predictions\n")
    monkeypatch.setattr(paths.os, "fsync", _disk_full)  # the write fails as on a full disk
    err = refused(command("evaluate {run} --eval-file {tsv} --predictions {p} --overwrite", {**files, "p": str(out)}),
                  capsys)
    assert err == f"attnlab evaluate: error: {out}: No space left on device"
    assert out.read_text() == "the earlier predictions\n" and temporaries(tmp_path) == []


@pytest.mark.parametrize("failure", [
    OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
    SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"),  # what safetensors raises
], ids=["OSError", "SafetensorError"])
def test_a_full_disk_keeps_the_earlier_checkpoint(files, tmp_path, monkeypatch, capsys, failure):
    run = Path(shutil.copytree(files["run"], tmp_path / "run"))
    before = sha(run / checkpoint.CHECKPOINT_NAME)

    def save_file(*_args, **_kwargs):
        raise failure

    monkeypatch.setattr(checkpoint, "save_file", save_file)
    code = exit_code(["pretrain", "--preset", "tiny", "--max-steps", "6", "--log-every", "1", "--device", "cpu",
                      "--out-dir", str(run), "--corpus", str(WIKI),
                      "--held-out", str(DATA / "birth_dev.tsv"), "--eval-file", "", "--resume"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("attnlab ")]
    assert code == 2 and len(errors) == 1 and "No space left on device" in errors[0] and str(run) in errors[0]
    assert sha(run / checkpoint.CHECKPOINT_NAME) == before and temporaries(run) == []


def test_write_atomically_leaves_no_temporary_and_honours_the_umask(tmp_path, monkeypatch):
    target = tmp_path / "out.txt"
    old = os.umask(0o022)
    try:
        paths.write_atomically(target, "one\n")
    finally:
        os.umask(old)
    assert target.read_text() == "one\n" and (target.stat().st_mode & 0o777) == 0o644
    monkeypatch.setattr(paths.os, "replace", _disk_full)
    with pytest.raises(OSError) as failed:
        paths.write_atomically(target, "two\n")
    assert failed.value.filename == str(target)
    assert target.read_text() == "one\n" and temporaries(tmp_path) == []


# ---- checkpoint metadata and weights ----------------------------------------------------------
def _set(path: str, value):
    """A header change: set the dotted ``path`` to ``value``."""
    def change(header):
        *parents, key = path.split(".")
        node = header
        for p in parents:
            node = node[p]
        node[key] = value
    return change


def _drop(key: str):
    return lambda header: header.pop(key)


def _tensor(change):
    def apply(weights):
        name = "model.tok_emb.weight"
        weights[name] = change(weights[name])
    return apply


DAMAGE = [
    ("not JSON", dict(raw="{not json"), "checkpoint metadata is not valid JSON"),
    ("a JSON list", dict(raw="[1, 2]"), "checkpoint metadata is a JSON list, not an object"),
    ("no format", dict(header=_drop("format")), "unknown checkpoint format None"),
    ("no model_config", dict(header=_drop("model_config")), "checkpoint metadata has no 'model_config'"),
    ("no vocab", dict(header=_drop("vocab")), "checkpoint metadata has no 'vocab'"),
    ("model_config a string", dict(header=_set("model_config", "small")), "model_config: expected an object"),
    ("n_head a string", dict(header=_set("model_config.n_head", "2")), "model_config: n_head must be an integer >= 1, got '2'"),
    ("n_layer a bool", dict(header=_set("model_config.n_layer", True)), "model_config: n_layer must be an integer >= 1, got True"),
    ("dropout null", dict(header=_set("model_config.dropout", None)), "model_config: dropout must be a finite number in [0, 1), got None"),
    ("positions unknown", dict(header=_set("model_config.positions", "spiral")), "positions must be one of"),
    ("attention unknown", dict(header=_set("model_config.attention", "psychic")), "no model can be built from its config"),
    ("n_embd disagrees", dict(header=_set("model_config.n_embd", 64)), "has shape [80, 32], but the model config gives it [80, 64]"),
    ("n_layer disagrees", dict(header=_set("model_config.n_layer", 3)), "missing ['blocks.2."),
    ("a model too large to lay out", dict(header=_set("model_config.n_embd", 10**12)), "no model can be built"),
    ("vocab a number", dict(header=_set("vocab", 5)), "vocab must be a list of characters, got a JSON int"),
    ("vocab of words", dict(header=lambda h: h["vocab"].__setitem__(5, "ab")), "vocabulary entry 5 is 'ab'"),
    ("vocab shorter", dict(header=lambda h: h["vocab"].pop()), "vocabulary has"),
    ("meta a list", dict(header=_set("meta", [])), "meta must be an object, got a JSON list"),
    ("meta.step a string", dict(header=_set("meta.step", "four")), "meta.step has the wrong type ('four')"),
    ("meta.train_config out of bounds", dict(header=_set("meta.train_config.batch_size", 0)),
     "meta.train_config: batch_size must be an integer >= 1, got 0"),
    ("a tensor of another dtype", dict(tensors=_tensor(lambda t: t.half())),
     "tensor model.tok_emb.weight is torch.float16, but the model's weights are torch.float32"),
    ("a tensor of another shape", dict(tensors=_tensor(lambda t: t[:-1].clone())), "tensor model.tok_emb.weight has shape"),
    ("a tensor missing", dict(tensors=lambda w: w.pop("model.tok_emb.weight")), "missing ['tok_emb.weight']"),
]


@pytest.mark.parametrize("damage, problem", [d[1:] for d in DAMAGE], ids=[d[0] for d in DAMAGE])
def test_damaged_checkpoint_metadata_is_refused_naming_the_checkpoint(files, tmp_path, capsys, damage, problem):
    damaged = rewrite(Path(files["run"]), tmp_path / "damaged", **damage)
    err = refused(command("evaluate {damaged} --eval-file {tsv}", {**files, "damaged": str(damaged)}), capsys)
    assert err.startswith(f"attnlab evaluate: error: {damaged / checkpoint.CHECKPOINT_NAME}: ")
    assert problem in err
    assert not list(damaged.glob("predictions-*"))


@pytest.mark.parametrize("damage", [_drop("optimizer"), _set("optimizer.param_groups", 5),
                                    _set("optimizer.scalars", "lost"), _set("optimizer", [])],
                         ids=["none", "param_groups", "scalars", "a list"])
def test_evaluate_does_not_need_the_optimizer_state(files, tmp_path, capsys, damage):
    damaged = rewrite(Path(files["run"]), tmp_path / "damaged", header=damage)
    assert cli.main(["evaluate", str(damaged), "--eval-file", files["tsv"], "--device", "cpu"]) == 0
    assert (damaged / "predictions-qa.txt").is_file()


def test_resuming_from_a_damaged_optimizer_state_is_refused(files, tmp_path, capsys):
    damaged = rewrite(Path(files["run"]), tmp_path / "damaged", header=_set("optimizer.param_groups", 5))
    with pytest.raises(checkpoint.CheckpointError, match="the optimizer state is damaged"):
        checkpoint.load_checkpoint(damaged)
    assert checkpoint.load_checkpoint(damaged, training_state=False).optimizer_state is None


# ---- the corpus --------------------------------------------------------------------------------
@pytest.mark.parametrize("content, problem", [
    ("", "the corpus is empty"), ("\n \n\t\n", "the corpus is empty"),
    ("Ada Brook.\nshe was \u2047 born\n", ":2: contains the reserved character"),
    ("caf\xe9".encode("latin-1"), ":1: not valid UTF-8"),
])
@pytest.mark.parametrize("template", [
    "pretrain --preset tiny --corpus {corpus} --out-dir {out}",
    "finetune --preset tiny --corpus {corpus} --train-file {tsv} --out-dir {out}",
    "variants --preset tiny --corpus {corpus}",
])
def test_an_empty_or_unusable_corpus_is_refused(files, tmp_path, capsys, content, problem, template):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(content if isinstance(content, bytes) else content.encode())
    err = refused(command(template, {**files, "corpus": str(corpus)}), capsys)
    assert f"{corpus}" in err and problem in err
    assert not Path(files["out"]).exists()


def test_a_question_file_without_questions_is_refused(files, tmp_path, capsys):
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n  \n")
    err = refused(command("evaluate {run} --eval-file {empty}", {**files, "empty": str(empty)}), capsys)
    assert f"{empty}: no questions" in err
    err = refused(command("baseline --train-file {empty} --eval-file {tsv}", {**files, "empty": str(empty)}), capsys)
    assert f"{empty}: no questions" in err


def test_a_question_longer_than_the_block_is_refused_naming_its_line(files, tmp_path, capsys):
    long = tmp_path / "long.tsv"
    long.write_text("Where was Ada Brook born?\nWhere was " + "A" * 100 + " born?\n")
    err = refused(command("evaluate {run} --eval-file {long}", {**files, "long": str(long)}), capsys)
    assert f"{long}:2: the question and its mark are 117 characters, more than the model's block_size 80" in err


# ---- --device ----------------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["tpu", "cuda:99", "garbage", "", "meta"])
@pytest.mark.parametrize("template", [
    "pretrain --preset tiny --corpus {wiki} --out-dir {out}", "evaluate {run} --eval-file {tsv}",
    "ask {run} 'Where was Ada Brook born?'", "demo --out-dir {out}"])
def test_a_device_this_machine_does_not_have_is_refused_by_the_parser(files, capsys, device, template):
    with pytest.raises(SystemExit) as exit_:
        cli.main([*command(template, files), "--device", device])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and err.count("\n") == 0 and "argument --device: device" in err
    assert not Path(files["out"]).exists() and not list(Path(files["run"]).glob("predictions-*"))


def test_cuda_on_a_machine_without_cuda_is_refused(files, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    err = refused(command("pretrain --preset tiny --corpus {wiki} --out-dir {out} --device cuda", files), capsys)
    assert "argument --device: device 'cuda': CUDA is not available on this machine" in err
    assert not Path(files["out"]).exists()


# ---- numeric flags -------------------------------------------------------------------------------
# Checked when the command starts, before any work (their messages predate the parser's checks).
RUNTIME_CHECKED = {"--abstain-below", "--keep-right", "--holdout-fraction", "--names", "--layer"}


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    return next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices


def bounded_flags() -> list[tuple[str, str, object]]:
    """(command, flag, bound) for every option whose parser checks a bound."""
    return [(name, a.option_strings[0], a.type.bound) for name, p in _subcommands().items()
            for a in p._actions if a.option_strings and hasattr(a.type, "bound")]


def test_every_numeric_option_is_checked():
    for name, parser in _subcommands().items():
        for a in parser._actions:
            if a.type in (int, float):
                assert a.option_strings[0] in RUNTIME_CHECKED, f"{name} {a.option_strings}: a number with no bound"
    checked = {flag for _, flag, _ in bounded_flags()}
    assert {"--batch-size", "--n-head", "--n-layer", "--n-embd", "--epochs", "--max-steps", "--learning-rate",
            "--log-every", "--warmup-tokens", "--weight-decay", "--final-tokens", "--grad-clip", "--lr-floor",
            "--rel-clip", "--dropout", "--samples", "--noise", "--n", "--dim", "--beta", "--temperature",
            "--top-p", "--max-new", "--eval-every", "--checkpoint-every", "--mix-ratio"} <= checked


def _bad_values(bound) -> list[str]:
    values = ["-1", "nan", "inf", "-inf", "1e999", "twelve", ""]
    if not bound.holds(0) and not bound.holds(0.0):
        values.append("0")
    if bound.high is not None:
        values.append(repr(bound.high + 1))
    return values


@pytest.mark.parametrize("name, flag, bound", bounded_flags(), ids=[f"{c} {f}" for c, f, _ in bounded_flags()])
def test_the_parser_refuses_every_senseless_number(name, flag, bound, capsys):
    parser = _subcommands()[name]
    for value in _bad_values(bound):
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args([f"{flag}={value}"])
        err = capsys.readouterr().err.strip()
        assert exit_.value.code == 2 and err.count("\n") == 0, (value, err)
        assert f"argument {flag}" in err and f"must be {bound.describe()}, got {value!r}" in err


@pytest.mark.parametrize("flags, problem", [
    ("--batch-size 0", "argument --batch-size: must be an integer >= 1, got '0'"),
    ("--n-head 0", "argument --n-head: must be an integer >= 1"),
    ("--epochs 0", "argument --epochs: must be a finite number > 0"),
    ("--learning-rate nan", "argument --learning-rate: must be a finite number > 0, got 'nan'"),
    ("--log-every 0", "argument --log-every"), ("--warmup-tokens -1", "argument --warmup-tokens"),
    ("--weight-decay=-0.1", "argument --weight-decay"), ("--grad-clip inf", "argument --grad-clip"),
    ("--lr-floor 1.5", "argument --lr-floor: must be a finite number in [0, 1], got '1.5'"),
    ("--rel-clip -1", "argument --rel-clip: must be an integer >= 0, got '-1'"),
    ("--dropout 1", "argument --dropout: must be a finite number in [0, 1), got '1'"),
    ("--n-head 3", "n_embd=32 is not divisible by n_head=3"),  # each value fine, not together
])
def test_pretrain_refuses_senseless_settings_before_writing(files, capsys, flags, problem):
    err = refused(command("pretrain --preset tiny --corpus {wiki} --out-dir {out} " + flags, files), capsys)
    assert problem in err and not Path(files["out"]).exists()


@pytest.mark.parametrize("template, problem", [
    ("evaluate {run} --eval-file {tsv} --batch-size -1", "argument --batch-size: must be an integer >= 1, got '-1'"),
    ("evaluate {run} --eval-file {tsv} --abstain-below nan", "--abstain-below must lie in [0, 1], got nan"),
    ("ask {run} 'Where was Ada Brook born?' --keep-right inf", "--keep-right must lie in [0, 1], got inf"),
    ("calibrate {run} --eval-file {tsv} --out-dir {out} --holdout-fraction 1", "--holdout-fraction must lie in (0, 1)"),
    ("audit {run} --out-dir {out} --names=-5", "--names must be a positive number of people, got -5"),
    ("trace {run} 'Where was Ada Brook born?' --out-dir {out} --samples 0", "argument --samples"),
    ("trace {run} 'Where was Ada Brook born?' --out-dir {out} --noise nan", "argument --noise"),
    ("edit {run} --person 'Ada Brook' --place Paris --out-dir {out} --layer 7", "--layer 7 is out of range"),
    ("generate {run} abc --top-p 0", "argument --top-p: must be a finite number in (0, 1]"),
    ("generate {run} abc --temperature=-1", "argument --temperature"),
    ("explore --n 0", "argument --n: must be an integer >= 1"),
    ("explore --beta inf", "argument --beta: must be a finite number > 0, got 'inf'"),
])
def test_other_commands_refuse_senseless_numbers(files, capsys, template, problem):
    err = refused(command(template, files), capsys)
    assert problem in err and not Path(files["out"]).exists()


def test_every_numeric_config_field_has_a_bound_the_config_checks():
    for cls in (ModelConfig, TrainConfig):
        for f in cls.__dataclass_fields__.values():
            if str(f.type) in ("int", "float"):
                assert "bound" in f.metadata, f"{cls.__name__}.{f.name}"
    with pytest.raises(ValueError, match="n_head must be an integer >= 1, got 0"):
        ModelConfig(n_head=0)
    with pytest.raises(ValueError, match=r"lr_floor must be a finite number in \[0, 1\], got 1.5"):
        TrainConfig(lr_floor=1.5)
    with pytest.raises(ValueError, match="learning_rate must be a finite number > 0, got nan"):
        TrainConfig(learning_rate=math.nan)
    with pytest.raises(ValueError, match="n_layer must be an integer >= 1, got True"):
        ModelConfig(n_layer=True)
    with pytest.raises(ValueError, match="compile must be one of on, off, auto, got 'yes'"):
        TrainConfig(compile="yes")
    assert TrainConfig(epochs=3).epochs == 3  # a JSON integer is a fine number


# ---- choices -----------------------------------------------------------------------------------
def choice_flags() -> list[tuple[str, str, list[str]]]:
    return [(name, a.option_strings[0], list(a.choices)) for name, p in _subcommands().items()
            for a in p._actions if a.option_strings and a.choices is not None]


def test_the_enum_flags_of_the_issue_have_choices():
    flags = {flag for _, flag, _ in choice_flags()}
    assert {"--attention", "--objective", "--qa-format", "--positions", "--position-mode", "--compile", "--amp",
            "--attn-loss", "--mix-overlap", "--preset", "--abstain"} <= flags


@pytest.mark.parametrize("name, flag, choices", choice_flags(), ids=[f"{c} {f}" for c, f, _ in choice_flags()])
def test_an_unknown_choice_is_refused_and_the_choices_are_in_the_help(name, flag, choices, capsys):
    parser = _subcommands()[name]
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args([f"{flag}=bogus"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and err.count("\n") == 0 and f"argument {flag}: invalid choice: 'bogus'" in err
    from attnlab.cli.flags import format_help_all

    text = format_help_all(parser)  # --help-all: every flag (--help shows the common ones)
    if flag == "--preset":  # listed one per line with what each is for (issue 30)
        lines = [ln.strip() for ln in text.splitlines()]
        assert all(any(ln.startswith(f"{c}: ") for ln in lines) for c in choices)
    else:
        assert f"{flag} {{{','.join(choices)}}}" in " ".join(text.split())


# ---- empty texts ---------------------------------------------------------------------------------
@pytest.mark.parametrize("template, problem", [
    ("ask {run} ''", "<argument>:1: empty question"),
    ("ask {run} 'Where was Ada Brook born?' '   '", "<argument>:2: empty question"),
    ("attention {run} '' --out-dir {out}", "<argument>:1: empty TEXT to draw"),
    ("generate {run} ''", "<argument>:1: empty prompt"),
    ("trace {run} '' --out-dir {out}", "<argument>: empty question"),
    ("edit {run} --person '' --place Paris --out-dir {out}", "--person is empty"),
    ("edit {run} --person 'Ada Brook' --place ' ' --out-dir {out}", "--place is empty"),
    ("edit {run} --subject 'Ada Brook' --answer '' --out-dir {out}", "--place is empty"),
])
def test_an_empty_question_or_text_is_refused(files, capsys, template, problem):
    err = refused(command(template, files), capsys)
    assert problem in err and not Path(files["out"]).exists()


# ---- config files --------------------------------------------------------------------------------
@pytest.mark.parametrize("content, problem", [
    ({"train": {"batch_size": "8"}}, "train.batch_size must be an integer >= 1, got '8'"),
    ({"train": {"learning_rate": None}}, "train.learning_rate must be a finite number > 0, got None"),
    ({"model": {"n_head": 0}}, "model.n_head must be an integer >= 1, got 0"),
    ({"model": {"attention": "psychic"}}, "model.attention must be one of vanilla,"),
    ({"train": {"compile": "maybe"}}, "train.compile must be one of on, off, auto, got 'maybe'"),
    ({"corpus": 5}, "corpus must be a string, got 5"),
    ({"held_out": "data/birth_dev.tsv"}, "held_out must be a list of strings"),
    ({"resume": "yes"}, "resume must be true or false, got 'yes'"),
])
def test_a_config_file_value_of_the_wrong_type_names_the_file_and_key(files, tmp_path, capsys, content, problem):
    settings = tmp_path / "config.json"
    settings.write_text(json.dumps(content))
    err = refused(command("pretrain --preset tiny --out-dir {out} --config {c}", {**files, "c": str(settings)}), capsys)
    assert err.startswith(f"attnlab pretrain: error: {settings}: {problem}")
    assert not Path(files["out"]).exists()
