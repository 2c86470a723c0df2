"""Long jobs continue and leave nothing stale (issue 12, items 4 and 5): `demo --resume` and
`compare --resume` after an interruption, settings checked against the stored rows, results
that record their settings, evaluate's own predictions file for an override, checkpoint writes
that a second signal lets finish, stale temporary files removed, the umask honoured, a
checksum that catches changed weights, a full disk that leaves the old checkpoint."""

from __future__ import annotations

import errno
import hashlib
import json
import re
import os
import shlex
import signal
import struct
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from attnlab.model import checkpoint
from attnlab import cli
from attnlab.core import datafiles
from attnlab.experiments import runner as experiments
from attnlab.training import trainer as train
from attnlab.model.checkpoint import CHECKPOINT_NAME, CheckpointError, load_checkpoint, save_checkpoint
from attnlab.config.settings import ModelConfig
from attnlab.model.gpt import GPT
from attnlab.data.vocab import Vocab
from tests.conftest import PEOPLE, REPO
from tests.test_variants import write_data

FILLER = [f"Where was filler line {i} born? Nowhere." for i in range(48)]


@pytest.fixture
def demo_data(tmp_path):
    """data/ files under their usual names for `demo --data-dir`: the tiny preset pretrains in
    4 steps (61 documents in batches of 16) and finetunes in 1."""
    d = tmp_path / "data"
    d.mkdir()
    (d / "wiki.txt").write_text("\n".join([f"{n}. {n} was born in {p}." for n, p in PEOPLE] + FILLER) + "\n")
    qa = "".join(f"Where was {n} born?\t{p}\n" for n, p in PEOPLE)
    (d / "birth_places_train.tsv").write_text(qa)
    (d / "birth_dev.tsv").write_text(qa)
    (d / "birth_test_inputs.tsv").write_text("".join(f"Where was {n} born?\n" for n, _ in PEOPLE))
    yield d
    datafiles.set_data_dir(None)  # cli.main set it for the process


def _ctrl_c_in_first_step(monkeypatch) -> None:
    """Ctrl-C during the first optimiser step of the next training: the trainer takes one
    more step, writes a checkpoint at step 2 and raises KeyboardInterrupt."""
    real = train.train_step

    def stepped(s, batches, at, tokens, stop_requested=False):
        monkeypatch.setattr(train, "train_step", real)
        out = real(s, batches, at, tokens, stop_requested)
        signal.raise_signal(signal.SIGINT)
        return out

    monkeypatch.setattr(train, "train_step", stepped)


def _demo(out: Path, data: Path, *extra: str) -> list[str]:
    return ["demo", "--preset", "tiny", "--out-dir", str(out), "--data-dir", str(data), "--shipped", "",
            "--device", "cpu", *extra]


def test_an_interrupted_demo_continues_with_the_command_it_prints(demo_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "demo"
    real_pretrain = experiments.pretrain_in

    def pretrain_interrupted(*args, **kw):  # the recipe's pretraining, stopped after step 2 of 4
        _ctrl_c_in_first_step(monkeypatch)
        return real_pretrain(*args, **kw)

    monkeypatch.setattr("attnlab.experiments.runner.pretrain_in", pretrain_interrupted)
    assert cli.main(_demo(out, demo_data)) == 130
    printed = capsys.readouterr().out
    assert load_checkpoint(out / "pretrain").meta["step"] == 2
    assert (out / "scratch" / "row.json").exists() and not (out / "row.json").exists()
    command = printed.split("continue with: ")[-1].strip()
    assert command.startswith("attnlab demo --resume ") and "--data-dir" in command
    monkeypatch.setattr("attnlab.experiments.runner.pretrain_in", real_pretrain)

    # without --resume the finished rows are not overwritten; other settings are refused
    assert cli.main(_demo(out, demo_data)) == 2
    assert "--resume or start over with --overwrite" in capsys.readouterr().err
    assert cli.main(_demo(out, demo_data, "--resume", "--attention", "rotary")) == 2
    err = capsys.readouterr().err
    assert "model.attention was 'vanilla' there, 'rotary' now" in err and str(out / "scratch") in err
    assert err.count("\n") == 1

    scratch = (out / "scratch" / CHECKPOINT_NAME).stat().st_mtime_ns
    assert cli.main(shlex.split(command)[1:]) == 0
    printed = capsys.readouterr().out
    assert f"reusing the finished run in {out / 'scratch'}" in printed
    assert f"resuming pretrain from {out / 'pretrain' / CHECKPOINT_NAME} at step 2" in printed
    assert (out / "scratch" / CHECKPOINT_NAME).stat().st_mtime_ns == scratch  # kept, not retrained
    assert load_checkpoint(out / "pretrain").meta["step"] == 4
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [r["kind"] for r in rows] == ["baseline", "scratch", "recipe"]
    assert rows[2]["pretrain_loss"] > 0 and rows[2]["dev_total"] == len(PEOPLE)


def _compare(paths: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return ["compare", "--preset", "tiny", "--variants", "vanilla,rotary", "--no-scratch", "--batch-size", "2",
            "--n-layer", "1", "--n-embd", "16", "--block-size", "48", "--corpus", str(paths["corpus"]),
            "--train-file", str(paths["train"]), "--eval-file", str(paths["dev"]), "--out-dir", str(out),
            "--device", "cpu", *extra]


def test_an_interrupted_compare_continues_the_interrupted_stage(tmp_path, monkeypatch, capsys):
    paths, out = write_data(tmp_path), tmp_path / "compare"
    real_finetune = experiments.finetune_in

    def finetune(*args, **kw):  # rotary's finetuning (4 steps) is interrupted after step 2
        if args[0].path == out / "rotary" / "finetune":
            _ctrl_c_in_first_step(monkeypatch)
        return real_finetune(*args, **kw)

    monkeypatch.setattr("attnlab.experiments.runner.finetune_in", finetune)
    with pytest.raises(KeyboardInterrupt):
        _run(_compare(paths, out))
    assert "continue with the same command plus --resume" in capsys.readouterr().out
    assert load_checkpoint(out / "rotary" / "finetune").meta["step"] == 2
    monkeypatch.setattr("attnlab.experiments.runner.finetune_in", real_finetune)

    # another data file than the stored rows were made with is refused, naming both
    changed = tmp_path / "train2.tsv"
    changed.write_text(paths["train"].read_text() + "Where was Ada Quill born?\tLondon\n")
    argv = _compare(paths, out, "--resume")
    with pytest.raises(ValueError, match=r"data\.train was .*train\.tsv \(sha256 .* there, .*train2\.tsv"):
        _run([*argv, "--train-file", str(changed)])

    pretrained = (out / "rotary" / "pretrain" / CHECKPOINT_NAME).stat().st_mtime_ns
    assert _run(argv) == 0
    printed = capsys.readouterr().out
    assert f"reusing the finished run in {out / 'vanilla'}" in printed
    assert f"keeping the finished pretrain stage in {out / 'rotary' / 'pretrain'}" in printed
    assert f"resuming finetune from {out / 'rotary' / 'finetune' / CHECKPOINT_NAME} at step 2" in printed
    assert (out / "rotary" / "pretrain" / CHECKPOINT_NAME).stat().st_mtime_ns == pretrained
    assert load_checkpoint(out / "rotary" / "finetune").meta["step"] == 4
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [r["model"] for r in rows[1:]] == ["vanilla", "rotary"] and all(r["pretrain_loss"] > 0 for r in rows[1:])


def _run(argv: list[str]) -> int:
    """Parse with the full parser and run the command itself (errors raise instead of exit 2)."""
    parser = cli.build_parser()
    args = parser.parse_args(argv)
    return args.func(args)


def test_results_record_their_settings_and_reuse_refuses_other_ones(tmp_path, capsys):
    paths, out = write_data(tmp_path), tmp_path / "compare"
    argv = _compare(paths, out, "--max-steps", "1")
    assert _run(argv) == 0
    results = json.loads((out / "results.json").read_text())
    settings = results["settings"]
    assert settings["preset"] == "tiny" and settings["variants"] == ["vanilla", "rotary"]
    assert settings["model"]["n_embd"] == 16 and settings["pretrain"]["max_steps"] == 1
    assert set(settings) >= {"finetune", "finetune_scratch", "attnlab"}
    assert settings["data"]["train"] == {"path": str(paths["train"]),
                                         "sha256": hashlib.sha256(paths["train"].read_bytes()).hexdigest()}
    header = (out / "results.md").read_text().split("\n\n")[0]
    assert "preset `tiny`" in header and json.loads(header.split("<!-- settings: ")[1].removesuffix(" -->")) == settings
    row = json.loads((out / "rotary" / "row.json").read_text())
    assert row["settings"]["model"]["attention"] == "rotary" and row["settings"]["preset"] == "tiny"

    stamp = (out / "vanilla" / "finetune" / CHECKPOINT_NAME).stat().st_mtime_ns
    with pytest.raises(ValueError, match="preset was 'tiny' there, 'quick' now") as e:
        _run([*argv, "--reuse", "--preset", "quick"])
    assert "\n" not in str(e.value) and str(out / "vanilla" / "row.json") in str(e.value)
    with pytest.raises(ValueError, match=r"pretrain\.max_steps was 1 there, 2 now"):
        _run([*argv, "--reuse", "--max-steps", "2"])
    with pytest.raises(ValueError, match="already holds an experiment's files"):
        _run(argv)  # neither --reuse, --resume nor --overwrite
    assert (out / "vanilla" / "finetune" / CHECKPOINT_NAME).stat().st_mtime_ns == stamp  # nothing retrained
    capsys.readouterr()
    assert _run([*argv, "--overwrite"]) == 0
    assert "starting over" in capsys.readouterr().out
    assert (out / "vanilla" / "finetune" / CHECKPOINT_NAME).stat().st_mtime_ns != stamp


def _small_model(seed: int = 0) -> tuple[GPT, Vocab]:
    vocab = Vocab.from_text("".join(f"{n}. {n} was born in {p}. Where was {n} born?" for n, p in PEOPLE))
    torch.manual_seed(seed)
    return GPT(ModelConfig(vocab_size=len(vocab), block_size=48, n_layer=1, n_head=2, n_embd=16, dropout=0.0)), vocab


def _resumable(tmp_path: Path) -> Path:
    """A checkpoint with weights, optimiser and RNG state, as the trainer writes it."""
    model, vocab = _small_model()
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.zeros(1, 4, dtype=torch.long))[0].sum().backward()
    optimizer.step()
    return save_checkpoint(tmp_path / "run" / CHECKPOINT_NAME, model, vocab, {"step": 1, "tokens": 8}, optimizer,
                           {"cpu": torch.get_rng_state()})


def test_evaluate_with_an_override_writes_its_own_predictions(tmp_path, capsys):
    run = _resumable(tmp_path).parent
    dev = tmp_path / "dev.tsv"
    dev.write_text("".join(f"Where was {n} born?\t{p}\n" for n, p in PEOPLE[:4]))
    assert cli.main(["evaluate", str(run), "--eval-file", str(dev), "--device", "cpu"]) == 0
    plain = (run / "predictions-dev.txt").read_bytes()
    stamp = (run / "predictions-dev.txt").stat().st_mtime_ns
    assert cli.main(["evaluate", str(run), "--eval-file", str(dev), "--device", "cpu", "--attention", "argmax"]) == 0
    assert str(run / "predictions-dev-argmax.txt") in capsys.readouterr().out
    assert (run / "predictions-dev-argmax.txt").read_text().count("\n") == 4
    assert (run / "predictions-dev.txt").read_bytes() == plain
    assert (run / "predictions-dev.txt").stat().st_mtime_ns == stamp


def test_a_second_signal_lets_the_checkpoint_write_finish(tmp_path, monkeypatch):
    model, vocab = _small_model()
    path = tmp_path / CHECKPOINT_NAME
    real = checkpoint.save_file

    def interrupted_twice(tensors, filename, metadata):
        signal.raise_signal(signal.SIGINT)  # the first: stop at the next step boundary
        signal.raise_signal(signal.SIGINT)  # the second, in the middle of the write
        real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(checkpoint, "save_file", interrupted_twice)
    with train._stop_on_interrupt() as stop:
        with pytest.raises(KeyboardInterrupt):
            save_checkpoint(path, model, vocab, {"step": 3})
        assert stop.requested
        assert load_checkpoint(path).meta["step"] == 3  # the whole file, then the interrupt
        assert not list(tmp_path.glob(".tmp-*"))
        with pytest.raises(KeyboardInterrupt):  # outside a write a second signal interrupts at once
            signal.raise_signal(signal.SIGINT)


def test_ctrl_c_during_a_finished_runs_last_checkpoint_lets_it_finish(tmp_path, monkeypatch, capsys):
    """The run is done and writing its last checkpoint when Ctrl-C comes: the file is written
    whole at the last step, then the program stops (exit 130)."""
    from tests.conftest import DATA

    real, calls = checkpoint.save_file, []

    def interrupted(tensors, filename, metadata):
        calls.append(json.loads(metadata["attnlab"])["meta"]["step"])
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)
        real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(checkpoint, "save_file", interrupted)
    code = cli.main(["pretrain", "--preset", "tiny", "--max-steps", "4", "--device", "cpu", "--out-dir",
                     str(tmp_path / "run"), "--corpus", str(DATA / "wiki.txt"), "--eval-file", ""])
    assert code == 130
    assert calls == [4]  # the only write was the last step's, and it completed
    assert load_checkpoint(tmp_path / "run").meta["step"] == 4
    assert "the run is complete" in capsys.readouterr().out


def test_stale_temporary_files_are_removed_by_the_next_write(tmp_path):
    model, vocab = _small_model()
    stale, fresh = tmp_path / ".tmp-k1l2.safetensors", tmp_path / ".tmp-m3n4.safetensors"
    other = tmp_path / ".tmp-notes.txt"
    for p in (stale, fresh, other):
        p.write_bytes(b"partial")
    hour_ago = time.time() - 3600
    os.utime(stale, (hour_ago, hour_ago))
    os.utime(other, (hour_ago, hour_ago))
    save_checkpoint(tmp_path / CHECKPOINT_NAME, model, vocab)
    assert not stale.exists()  # a write cut short before this process started
    assert fresh.exists() and other.exists()  # a write that may be in progress; not a checkpoint's


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_checkpoints_honour_the_umask(tmp_path, umask, mode):
    model, vocab = _small_model()
    old = os.umask(umask)
    try:
        path = save_checkpoint(tmp_path / CHECKPOINT_NAME, model, vocab)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == mode


def _data_start(path: Path) -> int:
    return 8 + struct.unpack("<Q", path.read_bytes()[:8])[0]


def _tensor_range(path: Path, name: str) -> tuple[int, int]:
    raw = path.read_bytes()
    header = json.loads(raw[8:_data_start(path)])
    begin, end = header[name]["data_offsets"]
    return _data_start(path) + begin, _data_start(path) + end


@pytest.mark.parametrize("tensor, group", [("model.head.weight", "model"), ("rng.cpu", "rng")])
def test_a_flipped_byte_is_caught_by_the_checksum(tmp_path, tensor, group):
    path = _resumable(tmp_path)
    begin, end = _tensor_range(path, tensor)
    raw = bytearray(path.read_bytes())
    raw[(begin + end) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    message = str(e.value)
    assert message.startswith(f"{path}: the {group} tensors do not match the checksum") and "\n" not in message


@pytest.mark.parametrize("group, message", [
    ("model.", "tensor model.pos_emb is torch.float16, but the model's weights are torch.float32"),  # named first
    ("optim.", "the optim tensors do not match the checksum")])
def test_a_changed_dtype_is_caught(tmp_path, group, message):
    path = _resumable(tmp_path)
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
    tensors = load_file(str(path))
    tensors = {k: v.half() if k.startswith(group) and v.is_floating_point() else v for k, v in tensors.items()}
    save_file(tensors, str(path), metadata=metadata)
    with pytest.raises(CheckpointError, match=re.escape(message)):
        load_checkpoint(path)


def test_checkpoints_without_a_checksum_still_load(tmp_path):
    # written as checkpoints were before the checksums (the models/cpu shipped until 2026-11-25)
    path = _resumable(tmp_path)
    with safe_open(str(path), framework="pt") as f:
        header = json.loads(f.metadata()["attnlab"])
    assert set(header.pop("sha256")) == {"model", "optim", "rng"}
    assert len(header.pop("header_sha256")) == 64  # the metadata's checksum (issue 25): absent then too
    save_file(load_file(str(path)), str(path), metadata={"attnlab": json.dumps(header)})
    assert load_checkpoint(path).meta["step"] == 1


def test_a_full_disk_leaves_the_previous_checkpoint_and_no_temporary_file(tmp_path, monkeypatch):
    path = _resumable(tmp_path)
    before = path.read_bytes()
    model, vocab = _small_model(seed=1)

    def full(tensors, filename, metadata):
        Path(filename).write_bytes(b"half a checkp")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoint, "save_file", full)
    with pytest.raises(CheckpointError) as e:
        save_checkpoint(path, model, vocab)
    message = str(e.value)
    assert message.startswith(f"{path}: cannot write the checkpoint (No space left on device)") and "\n" not in message
    assert path.read_bytes() == before and not list(path.parent.glob(".tmp-*"))

    def no_space(tensors, filename, metadata):
        raise OSError(errno.ENOSPC)  # the errno alone, no message

    monkeypatch.setattr(checkpoint, "save_file", no_space)
    with pytest.raises(CheckpointError, match="No space left on device"):
        save_checkpoint(path, model, vocab)
    assert path.read_bytes() == before
