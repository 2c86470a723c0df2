"""The experiment's stages as typed functions: pretrain, finetune, evaluate, baseline, demo.
The CLI is a thin layer over these; so are tests and benchmarks."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from . import distributed
from .batching import CorruptionBatches, QABatches
from .checkpoint import load_checkpoint
from .config import ModelConfig, TrainConfig
from .data import NameDataset, SpanCorruptionDataset, read_qa, read_text
from .evaluate import Answer, Score, evaluate, most_frequent_place, score, write_predictions
from .model import GPT
from .train import TrainResult, resolve_device, train
from .vocab import MASK_CHAR, Vocab

DATA = Path("data")
DEFAULT_CORPUS = DATA / "wiki.txt"
DEFAULT_TRAIN = DATA / "birth_places_train.tsv"
DEFAULT_DEV = DATA / "birth_dev.tsv"
DEFAULT_TEST = DATA / "birth_test_inputs.tsv"


@dataclass(frozen=True)
class VocabSource:
    """What NameDataset needs from a "pretraining dataset": its vocabulary and block size."""

    vocab: Vocab
    block_size: int


def final_tokens_for(corpus_docs: int, block_size: int, config: TrainConfig) -> int:
    """SPEC 5: 200 * len(pretrain_dataset) * block_size unless the config sets it."""
    return config.final_tokens or 200 * corpus_docs * block_size


def build_model(config: ModelConfig, seed: int) -> GPT:
    torch.manual_seed(seed)  # the same seed gives the same initial weights
    return GPT(config)


def _log_config(run_dir: Path, **parts: Any) -> None:
    from .distributed import environment

    if not environment().is_main:  # under torchrun only rank 0 writes files
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(parts, indent=2, default=str) + "\n")


def pretrain(
    model_config: ModelConfig,
    train_config: TrainConfig,
    *,
    corpus: str | Path = DEFAULT_CORPUS,
    run_dir: str | Path,
    resume: bool = False,
    device: str | None = None,
    log: Callable[[str], None] = print,
) -> tuple[GPT, Vocab, TrainResult]:
    """Span-corruption pretraining on the corpus (SPEC 3, 5)."""
    run_dir = Path(run_dir)
    text = read_text(corpus)
    dataset = SpanCorruptionDataset(text, model_config.block_size)
    model_config = dataclasses.replace(model_config, vocab_size=dataset.vocab_size)
    dev = resolve_device(device or train_config.device)
    model = build_model(model_config, train_config.seed).to(dev)
    final_tokens = final_tokens_for(len(dataset), model_config.block_size, train_config)
    log(f"pretraining {model_config.attention} ({model.num_parameters():,} parameters) on {corpus} "
        f"({len(dataset):,} documents) on {dev}; outputs in {run_dir}")
    _log_config(run_dir, stage="pretrain", model=model_config.to_dict(), train=train_config.to_dict(),
                corpus=str(corpus))
    batches = CorruptionBatches(dataset, train_config.batch_size, dev, train_config.seed)
    result = train(model, batches, train_config, vocab=dataset.vocab, run_dir=run_dir,
                   final_tokens=final_tokens, resume=resume, trim=model_config.causal,
                   meta={"stage": "pretrain", "corpus_documents": len(dataset)},
                   desc="pretrain", log=log, loss_fn=_loss_fn(train_config))
    return model, dataset.vocab, result


def finetune(
    train_config: TrainConfig,
    *,
    run_dir: str | Path,
    init: str | Path | None = None,
    model_config: ModelConfig | None = None,
    overrides: dict[str, Any] | None = None,
    corpus: str | Path = DEFAULT_CORPUS,
    train_file: str | Path = DEFAULT_TRAIN,
    resume: bool = False,
    device: str | None = None,
    log: Callable[[str], None] = print,
) -> tuple[GPT, Vocab, TrainResult]:
    """QA finetuning (SPEC 2, 5), from a pretrained checkpoint (``init``) or from scratch
    (``model_config``), in which case the corpus still defines the vocabulary. ``overrides``
    change fields of a pretrained model's config that add no parameters (dropout, logit_scale)."""
    run_dir = Path(run_dir)
    dev = resolve_device(device or train_config.device)
    if init is not None:
        ckpt = load_checkpoint(init)
        model = ckpt.build_model(**_non_shape_overrides(overrides or {}, init)).to(dev)
        vocab, corpus_docs = ckpt.vocab, int(ckpt.meta.get("corpus_documents", 0))
        source = f"the pretrained model {init}"
    else:
        if model_config is None:
            raise ValueError("finetuning without --init needs a model configuration")
        text = read_text(corpus)
        corpus_dataset = SpanCorruptionDataset(text, model_config.block_size)
        vocab, corpus_docs = corpus_dataset.vocab, len(corpus_dataset)
        model = build_model(dataclasses.replace(model_config, vocab_size=len(vocab)), train_config.seed).to(dev)
        source = "scratch (no pretraining)"
    config = model.config
    if not corpus_docs:
        corpus_docs = len(SpanCorruptionDataset(read_text(corpus), config.block_size))
    dataset = NameDataset.from_file(train_file, VocabSource(vocab, config.block_size))
    final_tokens = final_tokens_for(corpus_docs, config.block_size, train_config)
    log(f"finetuning {config.attention} from {source} on {train_file} ({len(dataset):,} questions) "
        f"on {dev}; outputs in {run_dir}")
    _log_config(run_dir, stage="finetune", init=str(init) if init else None, model=config.to_dict(),
                train=train_config.to_dict(), train_file=str(train_file))
    batches = QABatches(dataset, train_config.batch_size, dev, train_config.seed)
    result = train(model, batches, train_config, vocab=vocab, run_dir=run_dir, final_tokens=final_tokens,
                   resume=resume, trim=config.causal,
                   meta={"stage": "finetune", "init": str(init) if init else None,
                         "corpus_documents": corpus_docs},
                   desc="finetune", log=log, loss_fn=_loss_fn(train_config))
    return model, vocab, result


def _loss_fn(config: TrainConfig):
    if config.attn_loss == "none" or config.attn_loss_weight == 0:
        from .train import default_loss

        return default_loss
    from .shaping import shaping_loss_fn

    return shaping_loss_fn(config.attn_loss, config.attn_loss_weight, near_max=config.near_max)


def _non_shape_overrides(overrides: dict[str, Any], init: str | Path) -> dict[str, Any]:
    """The overrides a finetune may apply to a pretrained model: those that add no parameters."""
    allowed = {"dropout", "logit_scale"}
    refused = sorted(set(overrides) - allowed)
    if refused:
        raise ValueError(f"{init}: a pretrained model's {', '.join(refused)} cannot change when finetuning "
                         f"(only {', '.join(sorted(allowed))} can)")
    return overrides


def evaluate_file(
    checkpoint: str | Path,
    path: str | Path,
    *,
    out: str | Path | None = None,
    device: str = "auto",
    batch_size: int = 256,
    overrides: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
) -> tuple[list[Answer], Score | None, Path]:
    """Answer every question of a QA file, write the predictions, score them if labelled."""
    from .checkpoint import load_model

    dev = resolve_device(device)
    model, vocab, ckpt = load_model(checkpoint, device=str(dev), **(overrides or {}))
    examples = read_qa(path)
    start = time.perf_counter()
    env = distributed.environment()
    if env.world_size == 1:
        answers, result = evaluate(model, vocab, examples, batch_size=batch_size, progress=True)
    else:  # each rank decodes whole single-process batches; all gather them in input order
        answers = distributed.sharded_map(
            lambda part: evaluate(model, vocab, part, batch_size=batch_size, progress=env.is_main)[0],
            examples, env, key=lambda e: len(vocab.encode(e.question + MASK_CHAR)), chunk=batch_size)
        result = score([a.answer for a in answers], examples)
    seconds = time.perf_counter() - start
    if out is None:
        ckpt_path = Path(checkpoint)
        out = (ckpt_path if ckpt_path.is_dir() else ckpt_path.parent) / f"predictions-{Path(path).stem}.txt"
    out = Path(out)
    if not env.is_main:  # rank 0 alone writes and reports
        return answers, result, out
    out = write_predictions(out, [a.answer for a in answers])
    if result is None:
        log(f"{path}: {len(examples)} questions have no labels, so no accuracy can be computed; "
            f"predictions written to {out} ({seconds:.1f} s)")
    else:
        log(f"{path}: {result} correct; predictions written to {out} ({seconds:.1f} s)")
    return answers, result, out


def baseline(train_file: str | Path = DEFAULT_TRAIN, eval_file: str | Path = DEFAULT_DEV) -> tuple[str, Score | None]:
    """Answer every question with the training file's most frequent place."""
    place = most_frequent_place(read_qa(train_file, labelled=True))
    examples = read_qa(eval_file)
    return place, score([place] * len(examples), examples)


@dataclass
class DemoRow:
    model: str
    dev: Score | None
    seconds: float | None
    where: str


def demo(
    preset_name: str = "quick",
    *,
    out: str | Path = "runs/demo",
    attention: str = "vanilla",
    device: str = "auto",
    model_overrides: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
) -> list[DemoRow]:
    """The main job: baseline, vanilla without pretraining, vanilla pretrained + finetuned, all
    scored on the dev set, with test-set predictions from the pretrained model."""
    from .config import get_preset

    preset = get_preset(preset_name)
    out = Path(out)
    model_config = ModelConfig(**{**preset.model, "attention": attention, **(model_overrides or {})})
    rows: list[DemoRow] = []

    log(f"== attnlab demo: preset {preset.name!r} ({preset.description}); outputs in {out}")
    log("== 1/4 baseline: the training file's most frequent place")
    place, base = baseline(DEFAULT_TRAIN, DEFAULT_DEV)
    log(f'always answering "{place}": {base} on {DEFAULT_DEV}')
    rows.append(DemoRow(f'baseline ("{place}")', base, None, "-"))

    log("== 2/4 finetune without pretraining")
    start = time.perf_counter()
    finetune(dataclasses.replace(preset.finetune_scratch, device=device), run_dir=out / "scratch",
             model_config=model_config, log=log)
    secs = time.perf_counter() - start
    _, dev_score, pred = evaluate_file(out / "scratch", DEFAULT_DEV, device=device, log=log)
    rows.append(DemoRow(f"{attention}, no pretraining", dev_score, secs, str(out / "scratch")))

    log("== 3/4 pretrain with span corruption")
    start = time.perf_counter()
    pretrain(model_config, dataclasses.replace(preset.pretrain, device=device), run_dir=out / "pretrain", log=log)
    pre_secs = time.perf_counter() - start

    log("== 4/4 finetune the pretrained model, evaluate on dev, predict test")
    start = time.perf_counter()
    finetune(dataclasses.replace(preset.finetune, device=device), run_dir=out / "finetune",
             init=out / "pretrain", log=log)
    secs = pre_secs + time.perf_counter() - start
    _, dev_score, _ = evaluate_file(out / "finetune", DEFAULT_DEV, device=device, log=log)
    evaluate_file(out / "finetune", DEFAULT_TEST, device=device, log=log)
    rows.append(DemoRow(f"{attention}, pretrained + finetuned", dev_score, secs, str(out / "finetune")))

    log("")
    log(results_table(rows))
    log(f"\ncheckpoints: {out}/*/checkpoint.safetensors; predictions: {out}/finetune/predictions-*.txt")
    (out / "results.md").write_text(results_table(rows) + "\n")
    return rows


def results_table(rows: list[DemoRow]) -> str:
    lines = ["| model | dev accuracy | training time | run |", "| --- | --- | --- | --- |"]
    for r in rows:
        acc = "-" if r.dev is None else str(r.dev)
        secs = "-" if r.seconds is None else f"{r.seconds:.0f} s"
        lines.append(f"| {r.model} | {acc} | {secs} | {r.where} |")
    return "\n".join(lines)
