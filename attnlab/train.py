"""The trainer (SPEC section 5). It knows nothing of GPT: it gets a model, a batch source and a
loss function, and owns the optimiser, the token-based schedule, clipping, mixed precision,
logging, checkpoints and resumption.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from . import distributed as dist
from .batching import Batches, length_buckets
from .checkpoint import CHECKPOINT_NAME, load_checkpoint, save_checkpoint
from .config import TrainConfig
from .vocab import PAD_ID, Vocab

LossFn = Callable[[nn.Module, Tensor, Tensor], tuple[Tensor, dict[str, Tensor]]]


def lr_at(tokens: int, config: TrainConfig, final_tokens: int) -> float:
    """Learning rate after ``tokens`` tokens: linear warmup, then cosine decay from the peak to
    ``lr_floor * peak``, reached at ``final_tokens`` and held after (SPEC section 5)."""
    peak = config.learning_rate
    if tokens < config.warmup_tokens:
        return peak * tokens / max(1, config.warmup_tokens)
    progress = min(1.0, (tokens - config.warmup_tokens) / max(1, final_tokens - config.warmup_tokens))
    return peak * (config.lr_floor + (1 - config.lr_floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _switch(value: str, device: torch.device) -> bool:
    if value not in ("on", "off", "auto"):
        raise ValueError(f"expected on, off or auto, got {value!r}")
    return value == "on" or (value == "auto" and device.type == "cuda")


def make_optimizer(model: nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with decay on weight matrices only: not on biases, LayerNorm weights, embeddings
    or position tables (SPEC 5, as minGPT)."""
    exempt = model.no_weight_decay()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 and name not in exempt else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = device.type == "cuda"
    return torch.optim.AdamW(
        groups, lr=config.learning_rate, betas=(config.beta1, config.beta2),
        fused=fused or None, foreach=None if fused else True,
    )


def default_loss(model: nn.Module, x: Tensor, y: Tensor, segments: Tensor | None = None
                 ) -> tuple[Tensor, dict[str, Tensor]]:
    """Summed cross-entropy over non-PAD targets (the trainer divides by the batch's count);
    ``segments`` for packed rows (attnlab/objectives.py)."""
    from .model import lm_loss

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


def _rng_state(device: torch.device) -> dict[str, Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def train(
    model: nn.Module,
    batches: Batches,
    config: TrainConfig,
    *,
    vocab: Vocab,
    run_dir: str | Path,
    final_tokens: int,
    loss_fn: LossFn = default_loss,
    resume: bool = False,
    meta: dict[str, Any] | None = None,
    trim: bool = True,
    desc: str = "train",
    log: Callable[[str], None] = print,
    evaluator: Callable[[nn.Module], dict[str, Any]] | None = None,
) -> TrainResult:
    """Train ``model`` in place; checkpoints and metrics.jsonl go to ``run_dir``.
    ``evaluator`` (with ``config.eval_every``): scores the model every N steps and at the end;
    its numbers join metrics.jsonl with the training CPU time so far (evaluation excluded)."""
    run_dir = Path(run_dir)
    env = dist.environment()
    device = batches.device
    ckpt_path = run_dir / CHECKPOINT_NAME
    optimizer = make_optimizer(model, config, device)
    step, tokens, cpu_before = 0, 0, 0.0
    if resume:
        if not ckpt_path.exists():
            raise FileNotFoundError(f"{ckpt_path}: nothing to resume (no checkpoint in {run_dir})")
        ckpt = load_checkpoint(ckpt_path)
        if ckpt.optimizer_state is None:
            raise ValueError(f"{ckpt_path}: this checkpoint has no optimizer state and cannot be resumed")
        model.load_state_dict(ckpt.model_state)
        optimizer.load_state_dict(ckpt.optimizer_state)
        step, tokens = int(ckpt.meta["step"]), int(ckpt.meta["tokens"])
        cpu_before = float(ckpt.meta.get("train_cpu_s", 0.0))
        rng = dist.rng_state_for(ckpt.rng_state, env.rank)  # this rank's own dropout stream
        if rng:
            torch.set_rng_state(rng["cpu"])
            if "cuda" in rng and device.type == "cuda":
                torch.cuda.set_rng_state(rng["cuda"], device)
        elif env.rank:  # written with fewer processes: a fresh per-rank stream
            torch.manual_seed(config.seed + env.rank + step)
        log(f"resuming {desc} from {ckpt_path} at step {step} ({tokens:,} tokens)")
    else:
        torch.manual_seed(config.seed + env.rank)  # dropout stream; per-rank offset

    total_steps = math.ceil(config.epochs * batches.steps_per_epoch)
    if config.max_steps:
        total_steps = min(total_steps, config.max_steps)
    use_amp = _switch(config.amp, device)
    # 0 = auto: on CPU compute is the limit and padding is half of it; on a GPU many small
    # micro-batches would leave it idle (untested there, so the GPU default is the safe one).
    buckets = config.length_buckets or (8 if device.type == "cpu" else 1)
    if device.type == "cuda":
        # TF32 for the fp32 matmuls that autocast leaves (a process-wide PyTorch setting).
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if hasattr(model, "fast"):  # GPT: fused attention and cheap dropout masks, or the plain code
        model.fast = config.fast
    compiled = torch.compile(model) if _switch(config.compile, device) else model
    forward_model = dist.wrap(compiled, device, env)
    meta = dict(meta or {}, train_config=config.to_dict(), final_tokens=final_tokens)

    cpu_clock = _TrainingCPUClock(cpu_before)

    def checkpoint(at_step: int) -> None:
        rng = dist.gather_rng_states(_rng_state(device), env)  # collective: every rank's stream
        if env.is_main:
            save_checkpoint(ckpt_path, model, vocab, dict(meta, step=at_step, tokens=tokens,
                            train_cpu_s=round(cpu_clock.seconds(), 2)), optimizer, rng)

    def evaluate_now(at_step: int) -> None:
        if evaluator is None or not config.eval_every or not env.is_main:
            return
        with cpu_clock.paused():
            record = {"step": at_step, "tokens": tokens, "train_cpu_s": round(cpu_clock.seconds(), 2),
                      "elapsed_s": round(time.perf_counter() - start, 2), **evaluator(model)}
        history.append(record)
        with open(metrics_file, "a") as f:
            f.write(json.dumps(record) + "\n")

    metrics_file = run_dir / "metrics.jsonl"
    if env.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
    history: list[dict[str, Any]] = []
    model.train()
    start = time.perf_counter()
    start_tokens = tokens
    window_tokens, window_start = 0, start
    loss_value = float("nan")
    bar = tqdm(range(step, total_steps), initial=step, total=total_steps, desc=desc,
               disable=not env.is_main, dynamic_ncols=True, leave=True)
    # Ctrl-C finishes the current step, writes a checkpoint and stops: no work is lost.
    with _stop_on_interrupt() as stop:
        for step in bar:
            # This rank's share of the step's global batch (all of it for one process).
            if env.world_size == 1:
                x, y, *packed = batches.batch(step)
                global_rows = len(x)
            else:
                x, y, *packed = batches.batch(step, env.rank, env.world_size, shared_stream=not config.rank_streams)
                global_rows = len(batches.indices(step))
            segments = packed[0] if packed else None  # PackedBatches: rows of several sequences
            # Every target position counts, PAD included, as in the course (SPEC 5), over the
            # global batch: 1 and N processes with the same global batch share one schedule.
            batch_tokens = global_rows * y.shape[1]
            tokens += batch_tokens
            lr = lr_at(tokens, config, final_tokens)
            for group in optimizer.param_groups:
                group["lr"] = lr
            # One all-reduce: the global non-PAD target count, and whether any rank was
            # interrupted (all ranks must stop at the same step, or the next collective hangs).
            counts = dist.all_reduce_sum(torch.stack([(y != PAD_ID).sum(), torch.tensor(
                int(stop.requested), device=device)]), env)
            n_targets = counts[0].clamp(min=1)
            stopping = stop.requested if env.world_size == 1 else bool(counts[1] > 0)
            micro = micro_batches(x, y, buckets, config.micro_batch_size, trim, segments)
            total = torch.zeros((), device=device)
            extras_sum: dict[str, Tensor] = {}
            for i, (xm, ym, *seg) in enumerate(micro):
                part = len(xm) / global_rows if len(x) else 0.0  # its fraction of the global batch
                # Gradients are all-reduced once, on the last micro-step (DDP no_sync before).
                with dist.maybe_no_sync(forward_model, i == len(micro) - 1), (
                    torch.autocast(device.type, dtype=torch.bfloat16) if use_amp else contextlib.nullcontext()
                ):
                    loss_sum, extras = loss_fn(forward_model, xm, ym, *seg)
                    # Normalise by the global target count; DDP averages over ranks, so scale back.
                    loss = loss_sum * env.world_size / n_targets
                    for k, v in sorted(extras.items()):  # per-example means -> global-batch mean
                        if part:  # an empty share (short last batch) has a NaN mean
                            loss = loss + v * part * env.world_size
                        extras_sum[k] = extras_sum.get(k, torch.zeros((), device=device)) + (
                            v.detach() * part if part else 0.0)
                loss.backward()
                total += loss_sum.detach()
            if config.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            window_tokens += batch_tokens
            last = step == total_steps - 1 or stopping
            if step % config.log_every == 0 or last:
                loss_value = float(dist.all_reduce_sum(total, env) / n_targets)
                extras_sum = {k: dist.all_reduce_sum(v, env) for k, v in sorted(extras_sum.items())}
                now = time.perf_counter()
                tps = window_tokens / max(now - window_start, 1e-9)
                window_tokens, window_start = 0, now
                record = {"step": step + 1, "tokens": tokens, "loss": round(loss_value, 5), "lr": lr,
                          "tokens_per_s": round(tps, 1), "elapsed_s": round(now - start, 2)}
                record.update({k: round(float(v), 5) for k, v in extras_sum.items()})
                history.append(record)
                bar.set_postfix(loss=f"{loss_value:.3f}", lr=f"{lr:.2e}", tok_s=f"{tps:,.0f}")
                if env.is_main:
                    with open(metrics_file, "a") as f:
                        f.write(json.dumps(record) + "\n")
            if config.eval_every and ((step + 1) % config.eval_every == 0 or last) and not stopping:
                evaluate_now(step + 1)
            if stopping:
                checkpoint(step + 1)
                bar.close()
                log(f"interrupted: checkpoint at step {step + 1} written to {ckpt_path}; "
                    "continue with --resume")
                raise KeyboardInterrupt
            if config.checkpoint_every and (step + 1) % config.checkpoint_every == 0 and step + 1 < total_steps:
                checkpoint(step + 1)
    bar.close()
    checkpoint(total_steps)
    dist.barrier(env)
    seconds = time.perf_counter() - start
    return TrainResult(
        steps=total_steps, tokens=tokens, final_loss=loss_value, seconds=seconds,
        tokens_per_second=(tokens - start_tokens) / max(seconds, 1e-9),
        checkpoint=ckpt_path if env.is_main else None, history=history,
    )


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
    at once. Main thread only (signal handlers cannot be set elsewhere)."""
    import signal
    import threading

    flag = _StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, frame):
        if flag.requested:
            raise KeyboardInterrupt
        flag.requested = True

    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
