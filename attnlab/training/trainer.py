"""The trainer (SPEC section 5): it gets a model, a batch source and a loss function, and owns
the optimiser, the token-based schedule, clipping, mixed precision, logging, checkpoints and
resumption. What it asks of the model: ``no_weight_decay()`` names (make_optimizer) and the
fast/plain switch (attnlab/model/fastpath.py); the default loss is the language-model loss.

``train`` is built from named parts that the benchmarks reuse: ``restore_state`` (fresh or
resumed), ``prepare_step`` + ``train_step`` (one optimiser step), ``MetricsLog`` (metrics.jsonl)
and ``_stop_on_interrupt`` (Ctrl-C and SIGTERM end at a step boundary with a checkpoint). The
run directory's rules (its lock, resume or overwrite, config.json) are attnlab/training/rundir.py's:
``train`` receives the ``rundir.Run`` that holds them and a ``Plan`` of what the stage asks.
A loss or weights that are no longer finite stop the run (``Diverged``) without a checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from copy import deepcopy
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn

from ..core.progress import progress_bar
from ..core import cpu_settings
from . import rundir
from ..core import distributed as dist
from ..data.batching import Batches, length_buckets
from ..model.checkpoint import Checkpoint, save_checkpoint
from ..config.settings import TrainConfig
from ..core.devices import allow_tf32, fast_bfloat16, switch
from ..model.fastpath import set_fast
from .metrics_sinks import MetricsSink, NoSink, metrics_sink
from .muon import Muon
from .deadline import Deadline, epochs_for
from ..model.gpt import lm_loss
from ..data.vocab import PAD_ID, Vocab

LossFn = Callable[[nn.Module, Tensor, Tensor], tuple[Tensor, dict[str, Tensor]]]


def lr_at(tokens: int, config: TrainConfig, final_tokens: int) -> float:
    """Learning rate after ``tokens`` tokens: linear warmup, then the schedule's decay from the
    peak to ``lr_floor * peak``, reached at ``final_tokens`` and held after: cosine (SPEC
    section 5), or wsd, the peak held until the last ``decay_fraction`` of ``final_tokens`` and
    a linear decay over it (a run can then be stopped and annealed at any point)."""
    peak = config.learning_rate
    if tokens < config.warmup_tokens:
        return peak * tokens / max(1, config.warmup_tokens)
    progress = min(1.0, (tokens - config.warmup_tokens) / max(1, final_tokens - config.warmup_tokens))
    if config.schedule == "wsd":
        stable = 1.0 - config.decay_fraction
        decayed = 0.0 if progress <= stable else (progress - stable) / max(config.decay_fraction, 1e-12)
        return peak * (1.0 - (1.0 - config.lr_floor) * decayed)
    return peak * (config.lr_floor + (1 - config.lr_floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def make_optimizer(model: nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """AdamW with decay on weight matrices only: not on biases, LayerNorm weights, embeddings
    or position tables (SPEC 5, as minGPT). With ``optimizer="muon"`` the blocks' linear
    weights go to Muon instead (``muon_weights``), the rest stays with AdamW."""
    exempt = model.no_weight_decay()
    muon = muon_weights(model) if config.optimizer == "muon" else set()
    decay, no_decay, orthogonal = [], [], []
    for name, p in model.named_parameters():
        if name in muon:
            orthogonal.append(p)
        else:
            (decay if p.ndim >= 2 and name not in exempt else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = device.type == "cuda"
    adamw = torch.optim.AdamW(
        groups, lr=config.learning_rate, betas=(config.beta1, config.beta2),
        fused=fused or None, foreach=None if fused else True,
    )
    if not orthogonal:
        return adamw
    # match_rms_adamw scales each orthogonalised update to AdamW's typical size, so the one
    # learning rate and schedule of the run serve both optimisers (Moonlight, Liu et al. 2025).
    return CombinedOptimizer(adamw, Muon(
        orthogonal, lr=config.learning_rate, weight_decay=config.weight_decay,
        adjust_lr_fn="match_rms_adamw", ns_dtype=torch.bfloat16 if fast_bfloat16(device) else torch.float32))


def muon_weights(model: nn.Module) -> set[str]:
    """Names of the weight matrices of the linear layers inside the transformer blocks: the
    hidden matrices Muon is made for (embeddings and the output head stay with AdamW)."""
    return {f"{module_name}.weight" for module_name, module in model.named_modules()
            if module_name.startswith("blocks.") and isinstance(module, nn.Linear)}


class CombinedOptimizer(torch.optim.Optimizer):
    """Several optimisers over disjoint parameters, stepped together, with one state dict
    (parameter ids renumbered in order) that checkpoints save and restore like any other."""

    def __init__(self, *optimizers: torch.optim.Optimizer):
        self.optimizers = optimizers
        self.defaults = {}
        self.state = {}  # each optimiser keeps its own; this one exists for torch's hooks

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [g for o in self.optimizers for g in o.param_groups]

    def step(self, closure=None):
        for o in self.optimizers:
            o.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        state, groups, offset = {}, [], 0
        for o in self.optimizers:
            sd = o.state_dict()
            state.update({pid + offset: v for pid, v in sd["state"].items()})
            groups += [{**g, "params": [pid + offset for pid in g["params"]]} for g in sd["param_groups"]]
            offset += sum(len(g["params"]) for g in sd["param_groups"])
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = list(state_dict["param_groups"])
        offset = 0
        for o in self.optimizers:
            mine, groups = groups[:len(o.param_groups)], groups[len(o.param_groups):]
            pids = [pid for g in mine for pid in g["params"]]
            o.load_state_dict({
                "state": {int(pid) - offset: state_dict["state"][pid] for pid in pids if pid in state_dict["state"]},
                "param_groups": [{**g, "params": [pid - offset for pid in g["params"]]} for g in mine],
            })
            offset += len(pids)


def default_loss(model: nn.Module, x: Tensor, y: Tensor, segments: Tensor | None = None
                 ) -> tuple[Tensor, dict[str, Tensor]]:
    """Summed cross-entropy over non-PAD targets (the trainer divides by the batch's count);
    ``segments`` for packed rows (attnlab/data/objectives.py)."""

    logits, _ = model(x) if segments is None else model(x, segments=segments)
    return lm_loss(logits, y, reduction="sum"), {}


@dataclass
class TrainResult:
    steps: int
    tokens: int
    final_loss: float
    seconds: float
    tokens_per_second: float
    checkpoint: Path | None
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class TrainState:
    """Where a run stands: optimiser steps taken, tokens counted, training CPU seconds."""

    step: int = 0
    tokens: int = 0
    cpu_seconds: float = 0.0
    saved_step: int | None = None  # of the last checkpoint written (or resumed from)


class Diverged(ValueError):
    """The loss or the weights are no longer finite: the run stops without a checkpoint of them."""


def total_steps(config: TrainConfig, steps_per_epoch: float) -> int:
    steps = math.ceil(config.epochs * steps_per_epoch)
    return min(steps, config.max_steps) if config.max_steps else steps


def _rng_state(device: torch.device) -> dict[str, Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_state(model: nn.Module, optimizer: torch.optim.Optimizer, config: TrainConfig,
                  ckpt: Checkpoint | None, device: torch.device) -> TrainState:
    """A fresh start (``ckpt`` None: seed this rank's dropout stream) or the state of a
    checkpoint written by ``train`` (rundir.Run.open): weights, optimiser, step, tokens, CPU
    clock and this rank's random stream."""
    env = dist.environment()
    if ckpt is None:
        torch.manual_seed(config.seed + env.rank)  # dropout stream; per-rank offset
        return TrainState()
    model.load_state_dict(ckpt.model_state)
    optimizer.load_state_dict(ckpt.optimizer_state)
    step = int(ckpt.meta["step"])
    state = TrainState(step, int(ckpt.meta["tokens"]), float(ckpt.meta.get("train_cpu_s", 0.0)), saved_step=step)
    rng = dist.rng_state_for(ckpt.rng_state, env.rank)  # this rank's own dropout stream
    if rng:
        torch.set_rng_state(rng["cpu"])
        if "cuda" in rng and device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"], device)
    elif env.rank:  # written with fewer processes: a fresh per-rank stream
        torch.manual_seed(config.seed + env.rank + state.step)
    return state


@dataclass
class Stepper:
    """Everything one optimiser step needs besides the batch (``prepare_step`` builds it)."""

    model: nn.Module  # whose parameters are clipped and stepped
    forward_model: nn.Module  # the same model, compiled and/or wrapped for DDP
    optimizer: torch.optim.Optimizer
    config: TrainConfig
    final_tokens: int
    loss_fn: LossFn = default_loss
    trim: bool = True
    buckets: int = 1
    use_amp: bool = False
    env: dist.DistEnv = field(default_factory=dist.environment)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def prepare_step(model: nn.Module, optimizer: torch.optim.Optimizer, config: TrainConfig, *,
                 final_tokens: int, loss_fn: LossFn = default_loss, trim: bool = True) -> Stepper:
    """The model set to the config's path and wrapped (compile, DDP) for ``train_step``."""
    device = next(model.parameters()).device
    env = dist.environment()
    # 0 = auto: on CPU compute is the limit and padding is half of it; on a GPU many small
    # micro-batches would leave it idle (untested there, so the GPU default is the safe one).
    buckets = config.length_buckets or (8 if device.type == "cpu" else 1)
    amp = switch(config.amp, device)
    allow_tf32(device, amp)
    set_fast(model, config.fast)  # fused attention and cheap dropout masks, or the plain code
    compiled = torch.compile(model) if switch(config.compile, device) else model
    return Stepper(model, dist.wrap(compiled, device, env), optimizer, config, final_tokens, loss_fn,
                   trim, buckets, amp, env)


@dataclass
class StepOutcome:
    tokens: int  # counted after this step
    batch_tokens: int  # counted in this step (global batch)
    lr: float
    loss_sum: Tensor  # this rank's summed loss (detached; all-reduce for the global value)
    n_targets: Tensor  # the global batch's non-PAD targets
    extras: dict[str, Tensor]  # this rank's share of each extra term's global-batch mean
    stopping: bool  # some rank was asked to stop: all stop after this step
    shapes: list[tuple[int, ...]]  # (rows, width) of each micro-batch run (for FLOP counts)


def train_step(s: Stepper, batches: Batches, step: int, tokens: int, stop_requested: bool = False) -> StepOutcome:
    """One optimiser step on the global batch number ``step`` (this rank's share of it)."""
    env, config, device = s.env, s.config, s.device
    if env.world_size == 1:
        x, y, *packed = batches.batch(step)
        global_rows = len(x)
    else:
        x, y, *packed = batches.batch(step, env.rank, env.world_size, shared_stream=not config.rank_streams)
        global_rows = len(batches.indices(step))
    segments = packed[0] if packed else None  # PackedBatches: rows of several sequences
    # Every target position counts, PAD included, as in the course (SPEC 5), over the global
    # batch: 1 and N processes with the same global batch share one schedule.
    batch_tokens = global_rows * y.shape[1]
    tokens += batch_tokens
    lr = lr_at(tokens, config, s.final_tokens)
    for group in s.optimizer.param_groups:
        group["lr"] = lr
    # One all-reduce: the global non-PAD target count, and whether any rank was interrupted
    # (all ranks must stop at the same step, or the next collective hangs).
    counts = dist.all_reduce_sum(torch.stack([(y != PAD_ID).sum(), torch.tensor(
        int(stop_requested), device=device)]), env)
    n_targets = counts[0].clamp(min=1)
    stopping = stop_requested if env.world_size == 1 else bool(counts[1] > 0)
    micro = micro_batches(x, y, s.buckets, config.micro_batch_size, s.trim, segments)
    total, extras = _accumulate_gradients(s, micro, global_rows, n_targets, has_rows=len(x) > 0)
    if config.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(s.model.parameters(), config.grad_clip)
    s.optimizer.step()
    s.optimizer.zero_grad(set_to_none=True)
    return StepOutcome(tokens, batch_tokens, lr, total, n_targets, extras, stopping,
                       [tuple(m[0].shape) for m in micro])


def _accumulate_gradients(s: Stepper, micro: list[tuple[Tensor, ...]], global_rows: int, n_targets: Tensor,
                          has_rows: bool) -> tuple[Tensor, dict[str, Tensor]]:
    """Forward and backward over the micro-batches; returns the summed loss and the extras."""
    device, world = s.device, s.env.world_size
    total = torch.zeros((), device=device)
    extras_sum: dict[str, Tensor] = {}
    for i, (xm, ym, *seg) in enumerate(micro):
        part = len(xm) / global_rows if has_rows else 0.0  # its fraction of the global batch
        # Gradients are all-reduced once, on the last micro-step (DDP no_sync before).
        with dist.maybe_no_sync(s.forward_model, i == len(micro) - 1), (
            torch.autocast(device.type, dtype=torch.bfloat16) if s.use_amp else contextlib.nullcontext()
        ):
            loss_sum, extras = s.loss_fn(s.forward_model, xm, ym, *seg)
            # Normalise by the global target count; DDP averages over ranks, so scale back.
            loss = loss_sum * world / n_targets
            for k, v in sorted(extras.items()):  # per-example means -> global-batch mean
                if part:  # an empty share (short last batch) has a NaN mean
                    loss = loss + v * part * world
                extras_sum[k] = extras_sum.get(k, torch.zeros((), device=device)) + (
                    v.detach() * part if part else 0.0)
        loss.backward()
        total += loss_sum.detach()
    return total, extras_sum


class MetricsLog:
    """metrics.jsonl and the in-memory history: a loss record every ``log_every`` steps (tokens
    per second over the window since the last one) and evaluations, each with the training CPU
    time so far (evaluation excluded). Only rank 0 writes the file, and hands each row to
    ``sink`` too (attnlab/training/metrics_sinks.py: TensorBoard event files with --tensorboard)."""

    def __init__(self, path: Path, write: bool, cpu_seconds: float = 0.0, sink: MetricsSink | None = None):
        self.path, self.write = path, write
        self.sink = sink or NoSink()
        self.history: list[dict[str, Any]] = []
        self.clock = _TrainingCPUClock(cpu_seconds)
        self.start = time.perf_counter()
        self.eval_wall = 0.0  # wall seconds spent in evaluations since start
        self.window_tokens, self.window_start = 0, self.start
        self.loss = float("nan")

    def append(self, record: dict[str, Any]) -> None:
        self.history.append(record)
        if self.write:
            with open(self.path, "a") as f:
                f.write(json_row(record) + "\n")
            self.sink(record)

    def close(self) -> None:
        self.sink.close()

    def training(self, step: int, out: StepOutcome, env: dist.DistEnv) -> dict[str, Any]:
        """The loss record after ``step`` steps (collective: every rank calls it)."""
        self.loss = float(dist.all_reduce_sum(out.loss_sum, env) / out.n_targets)
        extras = {k: dist.all_reduce_sum(v, env) for k, v in sorted(out.extras.items())}
        now = time.perf_counter()
        tps = self.window_tokens / max(now - self.window_start, 1e-9)
        self.window_tokens, self.window_start = 0, now
        record = {"step": step, "tokens": out.tokens, "loss": round(self.loss, 5), "lr": out.lr,
                  "tokens_per_s": round(tps, 1), "elapsed_s": round(now - self.start, 2)}
        record.update({k: round(float(v), 5) for k, v in extras.items()})
        self.append(record)
        return record

    def evaluation(self, step: int, tokens: int, evaluator: Callable[[], dict[str, Any]]) -> None:
        """An evaluation row: its scores, and the training CPU and wall seconds so far with the
        evaluations left out (``train_wall_s``: since this process started or resumed)."""
        began = time.perf_counter()
        with self.clock.paused():
            record = {"step": step, "tokens": tokens, "train_cpu_s": round(self.clock.seconds(), 2),
                      "train_wall_s": round(began - self.start - self.eval_wall, 2),
                      "elapsed_s": round(began - self.start, 2), **evaluator()}
        record["eval_s"] = round(time.perf_counter() - began, 2)
        self.eval_wall += record["eval_s"]
        self.append(record)


def json_row(record: dict[str, Any]) -> str:
    """A metrics row as strict JSON: a NaN or infinite number is written as null."""
    return json.dumps({k: None if isinstance(v, float) and not math.isfinite(v) else v
                       for k, v in record.items()}, allow_nan=False)


PROBE_STEPS = 10  # timed steps of step_seconds (a second of a knowledge preset's run)


def step_seconds(model: nn.Module, batches: Batches, config: TrainConfig, final_tokens: int, *,
                 probes: int = PROBE_STEPS, loss_fn: LossFn = default_loss, trim: bool = True) -> float:
    """Mean wall seconds of one optimiser step of this run on this machine: ``probes`` steps
    spread over the first epoch's batches (rows of every length), after one warm-up step, taken
    by a copy of ``model`` with its own optimiser. ``model``, the batches and torch's random
    state are as they were (the run that follows is the run that was never timed)."""
    copy = deepcopy(model)
    with torch.random.fork_rng(devices=[]):
        stepper = prepare_step(copy, make_optimizer(copy, config, batches.device), config,
                               final_tokens=final_tokens, loss_fn=loss_fn, trim=trim)
        spread = max(1, batches.steps_per_epoch // probes)
        times = []
        for i in range(probes + 1):
            start = time.perf_counter()
            train_step(stepper, batches, (i * spread) % batches.steps_per_epoch, 0)
            times.append(time.perf_counter() - start)
    return sum(times[1:]) / probes


@dataclass
class Plan:
    """What a stage asks of the trainer besides the model, its batches and its run: the vocabulary
    saved with each checkpoint, the schedule's length (``final_tokens``), the loss, what
    checkpoints (``meta``) and config.json (``settings``) record, the progress bar's ``desc``, an
    ``evaluator`` (with ``eval_every``: scores the model every N steps and at the end) and a
    ``deadline`` (--minutes: the run's length is re-fitted to it, ``_refit``)."""

    vocab: Vocab
    final_tokens: int
    loss_fn: LossFn = default_loss
    trim: bool = True
    meta: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    desc: str = "train"
    evaluator: Callable[[nn.Module], dict[str, Any]] | None = None
    deadline: Deadline | None = None


def train(model: nn.Module, batches: Batches, run: rundir.Run, plan: Plan) -> TrainResult:
    """Train ``model`` in place with ``run.train_config``; checkpoints and metrics.jsonl go to the
    run's directory (rundir.Run.open claimed it and reconciled its configs with the checkpoint
    it continues, if any: then the schedule keeps that checkpoint's final_tokens). Once the run
    starts, config.json records ``plan.settings`` with the model and training configs."""
    env, config, device, log = dist.environment(), run.train_config, batches.device, run.log
    optimizer = make_optimizer(model, config, device)
    final_tokens = plan.final_tokens
    if run.checkpoint is not None:  # the schedule the run started with, whatever its length now
        final_tokens = int(run.checkpoint.meta.get("final_tokens", final_tokens))
    state = restore_state(model, optimizer, config, run.checkpoint, device)
    steps = total_steps(config, batches.steps_per_epoch)
    _check_steps(steps, state.step, config, run.checkpoint_path)
    if run.resume:
        log(f"resuming {plan.desc} from {run.checkpoint_path} at step {state.step} ({state.tokens:,} tokens)")
    stepper = prepare_step(model, optimizer, config, final_tokens=final_tokens, loss_fn=plan.loss_fn, trim=plan.trim)
    meta = dict(plan.meta, train_config=config.to_dict(), final_tokens=final_tokens)
    metrics = MetricsLog(run.path / rundir.METRICS_NAME, env.is_main, state.cpu_seconds,
                         metrics_sink(run.path, config.tensorboard and env.is_main))
    run.dir.start(state.step, {**plan.settings, "model": model.config.to_dict(), "train": config.to_dict()})
    checkpoint = functools.partial(_checkpoint, run.checkpoint_path, stepper, plan.vocab, meta, state, metrics)
    scores = (None if plan.evaluator is None or not config.eval_every or not env.is_main
              else (lambda: plan.evaluator(model)))
    start_tokens, deadline = state.tokens, plan.deadline
    refit = deadline and functools.partial(_refit, deadline, stepper, meta, metrics, config, batches.steps_per_epoch)
    steps = _steps(stepper, batches, state, steps, metrics, checkpoint, scores, run.checkpoint_path, plan.desc, log,
                   refit)
    if deadline and deadline.refits:
        log(deadline.summary(config.epochs, meta["train_config"]["epochs"]))
    with _stop_on_interrupt() as stop:  # a Ctrl-C now lets the last checkpoint finish first
        checkpoint(steps)
    if stop.requested:
        log(f"interrupted: the run is complete, its checkpoint written to {run.checkpoint_path}")
        raise KeyboardInterrupt
    dist.barrier(env)
    seconds = time.perf_counter() - metrics.start
    return TrainResult(steps=steps, tokens=state.tokens, final_loss=metrics.loss, seconds=seconds,
                       tokens_per_second=(state.tokens - start_tokens) / max(seconds, 1e-9),
                       checkpoint=run.checkpoint_path if env.is_main else None, history=metrics.history)


def _check_steps(steps: int, at: int, config: TrainConfig, ckpt_path: Path) -> None:
    """A resumed run may not end before its checkpoint's step: that step is never rewritten."""
    if steps >= at:
        return
    limit = f"--max-steps {config.max_steps}" if config.max_steps == steps else f"--epochs {config.epochs}"
    raise rundir.RunDirError(f"{limit} ends the run at step {steps}, before the checkpoint's step {at} "
                             f"({ckpt_path}); give a later end, or start a new run")


def _refit(deadline: Deadline, stepper: Stepper, meta: dict[str, Any], metrics: MetricsLog, config: TrainConfig,
           steps_per_epoch: int, step: int, steps: int) -> int:
    """The run's steps, re-fitted to ``deadline`` when one is due: the epochs that give them
    go into the checkpoints (a resumed run keeps the last fit) and, where the run anneals over
    itself (``deadline.tokens_per_step``), its schedule's final_tokens follow."""
    now = time.perf_counter()
    if not deadline.due(step, steps, now, metrics.eval_wall):
        return steps
    fitted = dataclasses.replace(config, epochs=epochs_for(deadline.steps_for(step, now, metrics.eval_wall),
                                                           steps_per_epoch))
    meta["train_config"]["epochs"] = fitted.epochs
    if deadline.tokens_per_step:
        whole = total_steps(dataclasses.replace(fitted, max_steps=0), steps_per_epoch)
        stepper.final_tokens = meta["final_tokens"] = whole * deadline.tokens_per_step
    return total_steps(fitted, steps_per_epoch)


def _steps(stepper: Stepper, batches: Batches, state: TrainState, steps: int, metrics: MetricsLog,
           checkpoint: Callable[[int], None], scores, ckpt_path: Path, desc: str, log,
           refit: Callable[[int, int], int] | None = None) -> int:
    """The optimiser steps from ``state.step`` to ``steps`` (or to what ``refit`` makes of
    them before each step), with logging, evaluations and checkpoints; a non-finite loss stops
    them (Diverged). Returns the steps the run ended at."""
    config, env = stepper.config, stepper.env
    # Under the `attnlab` program: fewer threads while another process takes a core (a team
    # thread sharing a core stalls every parallel region; docs/benchmarks.md "Training next to a
    # busy core"), all of them again when it is free.
    threads = cpu_settings.thread_adapter() if stepper.device.type == "cpu" else None
    stepper.model.train()
    bar = progress_bar(None, initial=state.step, total=steps, desc=desc,
               disable=not env.is_main, dynamic_ncols=True, leave=True)
    step = state.step
    # Ctrl-C finishes the current step, writes a checkpoint and stops: no work is lost.
    try:
        with _stop_on_interrupt() as stop:
            while step < steps:
                if refit is not None and steps != (steps := refit(step, steps)):
                    bar.total = steps
                out = train_step(stepper, batches, step, state.tokens, stop.requested)
                if threads is not None:
                    threads.check()
                state.tokens = out.tokens
                metrics.window_tokens += out.batch_tokens
                last = step == steps - 1 or out.stopping
                if step % config.log_every == 0 or last:
                    metrics.training(step + 1, out, env)
                    if not math.isfinite(metrics.loss):  # all ranks see the same reduced loss
                        raise _diverged(ckpt_path, f"the loss became {metrics.loss} by step {step + 1} "
                                        f"(learning rate {out.lr:.3g})", state)
                    bar.set_postfix(loss=f"{metrics.loss:.3f}", lr=f"{out.lr:.2e}",
                                    tok_s=f"{metrics.history[-1]['tokens_per_s']:,.0f}")
                if scores and ((step + 1) % config.eval_every == 0 or last) and not out.stopping:
                    metrics.evaluation(step + 1, state.tokens, scores)
                if out.stopping:
                    _stop(checkpoint, step + 1, bar, ckpt_path, log)
                if config.checkpoint_every and (step + 1) % config.checkpoint_every == 0 and step + 1 < steps:
                    checkpoint(step + 1)
                step += 1
                bar.update(1)
    finally:
        bar.close()
        metrics.close()
    return steps


def _diverged(ckpt_path: Path, what: str, state: TrainState) -> Diverged:
    kept = ("no checkpoint was written" if state.saved_step is None
            else f"the last good checkpoint (step {state.saved_step}) stays in {ckpt_path}")
    return Diverged(f"{ckpt_path.parent}: training diverged: {what}; stopped without saving these weights, "
                    f"{kept} (a lower --learning-rate may help)")


def _checkpoint(path: Path, s: Stepper, vocab: Vocab, meta: dict[str, Any], state: TrainState,
                metrics: MetricsLog, at_step: int) -> None:
    """Weights, optimiser, every rank's random stream and where the run stands, into ``path``
    (collective: every rank calls it; rank 0 writes). Weights that are no longer finite are
    never written (Diverged; every rank holds the same weights, so all stop)."""
    if not bool(torch.stack([torch.isfinite(p).all() for p in s.model.parameters()]).all()):
        raise _diverged(path, f"the weights are no longer finite at step {at_step}", state)
    rng = dist.gather_rng_states(_rng_state(s.device), s.env)
    if s.env.is_main:
        save_checkpoint(path, s.model, vocab, dict(meta, step=at_step, tokens=state.tokens,
                        train_cpu_s=round(metrics.clock.seconds(), 2)), s.optimizer, rng)
    state.saved_step = at_step


def _stop(checkpoint: Callable[[int], None], at_step: int, bar, ckpt_path: Path, log) -> None:
    """Stop handling: a checkpoint at the step boundary, then KeyboardInterrupt."""
    checkpoint(at_step)
    bar.close()
    log(f"interrupted: checkpoint at step {at_step} written to {ckpt_path}; continue with --resume")
    raise KeyboardInterrupt


def micro_batches(
    x: Tensor, y: Tensor, buckets: int, micro_batch_size: int, trim: bool,
    segments: Tensor | None = None,
) -> list[tuple[Tensor, ...]]:
    """A rank's share of the batch cut for the forward passes whose gradients accumulate into
    one step: ``buckets`` length-sorted trimmed parts, more if a part would exceed
    ``micro_batch_size`` rows (0 = no limit). A rank with no rows (a last batch shorter than
    the number of ranks) still runs one pass, on a single PAD token whose loss is 0, so it
    joins DDP's gradient all-reduce. Packed rows (``segments``) are nearly full, so they are
    only split by ``micro_batch_size``, each part carrying its segments: (x, y, segments)."""
    if len(x) == 0:
        empty = [x.new_full((1, 1), PAD_ID), y.new_full((1, 1), PAD_ID)]
        return [tuple(empty if segments is None else empty + [segments.new_full((1, 1), -1)])]
    parts = max(1, buckets)
    if micro_batch_size > 0:
        parts = max(parts, math.ceil(len(x) / micro_batch_size))
    if segments is not None:
        parts = math.ceil(len(x) / micro_batch_size) if micro_batch_size > 0 else 1
        return list(zip(x.tensor_split(parts), y.tensor_split(parts), segments.tensor_split(parts)))
    if trim:
        out = length_buckets(x, y, parts)
    else:
        out = [(a, b) for a, b in zip(x.tensor_split(parts), y.tensor_split(parts)) if len(a)]
    return out or [(x, y)]


class _TrainingCPUClock:
    """This process's CPU time (all threads) spent training: evaluations are paused out, and
    a resumed run continues from the checkpoint's count, so learning curves can be drawn
    against CPU-minutes of training."""

    def __init__(self, before: float = 0.0):
        self._start = time.process_time() - before
        self._paused = 0.0

    def seconds(self) -> float:
        return time.process_time() - self._start - self._paused

    @contextlib.contextmanager
    def paused(self):
        t = time.process_time()
        try:
            yield
        finally:
            self._paused += time.process_time() - t


class _StopFlag:
    requested = False


@contextlib.contextmanager
def _stop_on_interrupt():
    """Turn SIGINT (Ctrl-C) and SIGTERM (torchrun, job schedulers) into a flag checked between
    steps, so the run stops at a step boundary with a checkpoint; a second signal interrupts
    at once, except during a checkpoint write, which it lets finish first (the interrupt is
    raised when the file is complete: checkpoint.defer_interrupt). Main thread only (signal
    handlers cannot be set elsewhere)."""
    import signal
    import threading

    from ..model.checkpoint import defer_interrupt

    flag = _StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, frame):
        if not flag.requested:
            flag.requested = True
        elif not defer_interrupt():
            raise KeyboardInterrupt

    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
