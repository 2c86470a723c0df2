"""Multi-process training and evaluation (issue 7) on CPU with gloo.

One torchrun launch (2 local processes, a free localhost port) runs this file as its worker
script: it trains and evaluates in several ways inside one process group and reports back on
stdout; the tests compare the results with single-process runs made here, in the test
process. Process start-up dominates the cost, so everything shares that one launch.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlab.core import distributed
from attnlab.data.batching import CorruptionBatches, shard_rows
from attnlab.model.checkpoint import load_checkpoint
from attnlab.config.settings import ModelConfig, TrainConfig
from attnlab.data.datasets import SpanCorruptionDataset
from attnlab.training.trainer import default_loss, micro_batches
from attnlab.data.vocab import PAD_ID

# The worker's settings, shared with the single-process references below. A global batch of 4
# over 13 documents makes step 3 a 1-row batch, so one rank has an empty share there; with
# micro_batch_size=1 each rank accumulates over 2 micro-steps (no_sync on the first).
MODEL = dict(block_size=48, n_layer=2, n_head=2, n_embd=16, dropout=0.0)
EXACT = dict(batch_size=4, micro_batch_size=1, length_buckets=2, max_steps=4, rank_streams=False,
             learning_rate=3e-3, warmup_tokens=50, checkpoint_every=0, log_every=1, seed=0,
             device="cpu", compile="off", amp="off")
# Resumption: dropout on and one random stream per rank, so a rank that resumed another
# rank's stream (or the wrong step) would end with different weights.
RESUME = dict(EXACT, rank_streams=True, micro_batch_size=0, max_steps=6)
EVAL_BATCH = 3  # 12 questions -> 4 decoding batches, 2 per rank
PEOPLE = [("Ada Brook", "Paris"), ("Bela Kron", "Lima"), ("Cato Fenn", "Oslo"), ("Dara Vell", "Rome"),
          ("Eli Marsh", "Kyiv"), ("Fay Dunmore", "Paris"), ("Gus Pell", "Lima"), ("Hana Roe", "Oslo"),
          ("Ivo Lind", "Rome"), ("Jun Sato", "Kyiv"), ("Kai Odell", "Paris"), ("Lea Quist", "Lima")]


# ---- the worker: runs under torchrun ---------------------------------------------------------
def _worker(d: Path) -> None:
    import torch.distributed as tdist

    from attnlab import cli
    from attnlab.training.pipeline import finetune, pretrain

    tdist.init_process_group("gloo")
    env = distributed.environment()
    written: list[str] = []
    if env.rank:  # record every file this rank creates, renames or removes under d
        def audit(event: str, args: tuple) -> None:
            watched = {"os.rename", "os.remove", "os.mkdir", "tempfile.mkstemp", "shutil.copyfile"}
            if event == "open" and args[1] and any(c in str(args[1]) for c in "wax+"):
                path = args[0]
            elif event in watched and args:
                path = args[0]
            else:
                return
            if str(d) in str(path):
                written.append(f"{event} {path}")
        sys.addaudithook(audit)

    quiet = lambda _m: None  # noqa: E731
    model = ModelConfig(**MODEL)
    pretrain(model, TrainConfig(**EXACT), corpus=d / "wiki.txt", run_dir=d / "exact", log=quiet)
    finetune(TrainConfig(**EXACT), init=d / "exact", train_file=d / "train.tsv",
             run_dir=d / "exact-ft", log=quiet)
    noisy = ModelConfig(**{**MODEL, "dropout": 0.1})
    pretrain(noisy, TrainConfig(**{**RESUME, "max_steps": 3}), corpus=d / "wiki.txt",
             run_dir=d / "resumed", log=quiet)
    pretrain(noisy, TrainConfig(**RESUME), corpus=d / "wiki.txt", run_dir=d / "resumed",
             resume=True, log=quiet)
    pretrain(noisy, TrainConfig(**RESUME), corpus=d / "wiki.txt", run_dir=d / "straight", log=quiet)
    # The CLI's evaluate command under torchrun (it finds the group set up and tears it down).
    cli.main(["evaluate", str(d / "exact"), "--eval-file", str(d / "dev.tsv"), "--device", "cpu",
              "--batch-size", str(EVAL_BATCH), "--predictions", str(d / "pred-2proc.txt")])
    print("WORKER " + json.dumps({"rank": env.rank, "world": env.world_size, "written": written}),
          flush=True)


# ---- the launch, once per test session ---------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("dist")
    lines = [f"{n}. {n} was born in {p} and lived there." for n, p in PEOPLE]
    (d / "wiki.txt").write_text("\n".join(lines + ["Where was everyone born? We know."]), encoding="utf-8")
    qa = "".join(f"Where was {n} born?\t{p}\n" for n, p in PEOPLE)
    (d / "train.tsv").write_text(qa, encoding="utf-8")
    (d / "dev.tsv").write_text(qa, encoding="utf-8")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}",
           __file__, str(d)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    reports = [json.loads(line[len("WORKER "):]) for line in proc.stdout.splitlines()
               if line.startswith("WORKER ")]
    return {"dir": d, "reports": sorted(reports, key=lambda r: r["rank"]), "stdout": proc.stdout}


def _assert_same_weights(a: dict, b: dict, **tol) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], msg=lambda m: f"{k}: {m}", **tol)


# ---- tests against the launch -------------------------------------------------------------
# Float tolerance: the two runs sum the same terms in a different order (per-rank partial sums,
# gloo all-reduce), so they agree to float32 rounding, amplified a little by AdamW's division
# by sqrt(v) over 4 steps.
TOL = dict(atol=2e-5, rtol=1e-4)


def test_two_processes_train_like_one_with_the_same_global_batch(launched):
    from attnlab.training.pipeline import finetune, pretrain

    d, quiet = launched["dir"], (lambda _m: None)
    assert [r["world"] for r in launched["reports"]] == [2, 2]
    ref = d / "ref"
    pretrain(ModelConfig(**MODEL), TrainConfig(**{**EXACT, "micro_batch_size": 0}),
             corpus=d / "wiki.txt", run_dir=ref / "exact", log=quiet)
    finetune(TrainConfig(**{**EXACT, "micro_batch_size": 0}), init=ref / "exact",
             train_file=d / "train.tsv", run_dir=ref / "exact-ft", log=quiet)
    for name in ("exact", "exact-ft"):
        two = load_checkpoint(d / name)
        one = load_checkpoint(ref / name)
        assert two.meta["step"] == one.meta["step"] == 4
        _assert_same_weights(two.model_state, one.model_state, **TOL)
        # The schedule counts global tokens: the same token counts and learning rates per step.
        m2 = [json.loads(s) for s in (d / name / "metrics.jsonl").read_text().splitlines()]
        m1 = [json.loads(s) for s in (ref / name / "metrics.jsonl").read_text().splitlines()]
        assert [(r["tokens"], r["lr"]) for r in m2] == [(r["tokens"], r["lr"]) for r in m1]
        assert [r["loss"] for r in m2] == pytest.approx([r["loss"] for r in m1], abs=1e-4)


def test_two_process_run_resumes_exactly(launched):
    d = launched["dir"]
    resumed, straight = load_checkpoint(d / "resumed"), load_checkpoint(d / "straight")
    assert resumed.meta["step"] == straight.meta["step"] == 6
    assert "cpu@1" in resumed.rng_state  # rank 1's dropout stream is in the checkpoint
    for k in straight.model_state:
        assert torch.equal(resumed.model_state[k], straight.model_state[k]), k


def test_sharded_evaluation_writes_the_single_process_predictions(launched):
    from attnlab.training.pipeline import evaluate_file

    d = launched["dir"]
    _, score, out = evaluate_file(d / "exact", d / "dev.tsv", out=d / "pred-1proc.txt", device="cpu",
                                  batch_size=EVAL_BATCH, log=lambda _m: None)
    two = (d / "pred-2proc.txt").read_text(encoding="utf-8")
    assert len(two.splitlines()) == 12
    assert two == out.read_text(encoding="utf-8")


def test_only_rank_zero_writes_files(launched):
    rank1 = launched["reports"][1]
    assert rank1["rank"] == 1 and rank1["written"] == []
    d = launched["dir"]
    assert sorted(p.name for p in (d / "exact").iterdir()) == ["checkpoint.safetensors", "config.json",
                                                                 "metrics.jsonl"]
    assert len((d / "exact" / "metrics.jsonl").read_text().splitlines()) == 4  # one writer, 4 steps
    assert launched["stdout"].count("correct; predictions written to") == 1  # one reporter


# ---- in-process pieces ------------------------------------------------------------------------
TEXT = "\n".join(f"Person {i} was born in Place {i % 5} and lived long." for i in range(11))


def test_shared_stream_shards_are_the_one_process_batch():
    data = SpanCorruptionDataset(TEXT, 32, seed=0)
    b = CorruptionBatches(data, 5, "cpu", seed=7)
    for step in (0, 1):  # full batches of 5 (11 documents)
        x1, y1 = b.batch(step)
        parts = [b.batch(step, r, 3, shared_stream=True) for r in range(3)]
        assert torch.equal(torch.cat([p[0] for p in parts]), x1)
        assert torch.equal(torch.cat([p[1] for p in parts]), y1)
        # own streams: the same shares of documents (sizes), different corruption per rank
        own = [b.batch(step, r, 3) for r in range(3)]
        assert [len(p[0]) for p in own] == [len(p[0]) for p in parts] == [2, 2, 1]
        assert torch.equal(b.batch(step, 1, 3)[0], own[1][0])  # deterministic in (step, rank)
    idx = torch.arange(7)
    assert torch.equal(torch.cat([shard_rows(idx, r, 3) for r in range(3)]), idx)


def test_micro_batches_cover_the_share_and_respect_the_limit():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(3, 20, (7, 12), generator=g)
    for i, n in enumerate([12, 3, 7, 1, 9, 12, 5]):  # varied lengths, PAD after them
        y[i, n:] = PAD_ID
    x = torch.randint(3, 20, (7, 12), generator=g)
    for buckets, limit, trim in [(1, 0, True), (2, 3, True), (1, 2, False), (3, 1, True)]:
        parts = micro_batches(x, y, buckets, limit, trim)
        assert all(len(px) <= (limit or 7) for px, _ in parts)
        assert sum(len(px) for px, _ in parts) == 7
        # every row's non-PAD targets survive (trimming only drops all-PAD columns)
        assert sum(int((py != PAD_ID).sum()) for _, py in parts) == int((y != PAD_ID).sum())
    empty = micro_batches(x[:0], y[:0], 2, 1, True)
    assert len(empty) == 1 and bool((empty[0][1] == PAD_ID).all())


def test_an_empty_share_contributes_zero_loss_but_touches_every_parameter():
    from attnlab.model.gpt import GPT

    model = GPT(ModelConfig(vocab_size=40, **MODEL))
    [(x, y)] = micro_batches(torch.zeros(0, 5, dtype=torch.long), torch.zeros(0, 5, dtype=torch.long), 1, 0, True)
    loss, _ = default_loss(model, x, y)
    loss.backward()
    assert float(loss.detach()) == 0.0
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())


def test_rng_states_keep_one_stream_per_rank():
    saved = {"cpu": torch.tensor([1]), "cpu@1": torch.tensor([2]), "cuda@1": torch.tensor([3])}
    assert distributed.rng_state_for(saved, 0) == {"cpu": saved["cpu"]}
    assert distributed.rng_state_for(saved, 1) == {"cpu": saved["cpu@1"], "cuda": saved["cuda@1"]}
    assert distributed.rng_state_for(saved, 2) is None  # written by a 2-process run
    assert distributed.gather_rng_states(saved, distributed.DistEnv()) is saved  # one process


if __name__ == "__main__":  # the torchrun worker
    _worker(Path(sys.argv[1]))
