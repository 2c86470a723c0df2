"""The experiment's stages as typed functions: pretrain, finetune, evaluate, stored facts,
baseline (experiments.py builds demo and compare from them). The CLI is a thin layer over
these; so are tests and benchmarks."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from ..core import distributed, logs
from . import rundir
from ..data.batching import CorruptionBatches, PackedBatches, QABatches
from ..model.checkpoint import Checkpoint, load_checkpoint, load_model
from ..config.settings import DEFAULT_CORPUS, DEFAULT_DEV, DEFAULT_TEST, DEFAULT_TRAIN, ModelConfig, TrainConfig
from ..data.datasets import NameDataset, SpanCorruptionDataset, documents, read_qa, read_text
from ..answering.knowledge import CorpusIndex, Stored, measure_stored, require_person
from ..data.splits import finetuning_people, mixed_and_other_people, subject_reader
from ..answering.evaluate import (Answer, Score, evaluate, most_frequent_place, predictions_text, score,
                                  write_predictions)
from ..model.gpt import GPT
from ..core.outputs import OVERWRITE_HINT, refuse_existing, refuse_inputs
from ..core.paths import PathError
from ..data.formats import text_format
from ..data.relations import Schema
from ..data.objectives import (corpus_sequences, mixed, one_fact_per_subject, pack, qa_sequences, refuse_held_out_people,
                               swapped_place_read_outs)
from .shaping import shaping_loss_fn
from ..model.shipped import output_dir
from ..core.devices import resolve_device
from .deadline import Deadline, epochs_for
from .trainer import Plan, TrainResult, default_loss, step_seconds, total_steps, train
from ..data.vocab import MASK_CHAR, Vocab

# The share of --minutes a fitted pretraining aims at: the run re-fits itself to its own pace as
# it goes (attnlab/training/deadline.py), but not in its last tenth, whose steps may still drift,
# and its final checkpoint and the process's end take a little too.
FIT_SHARE = 0.95


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


def pretrain(
    model_config: ModelConfig,
    train_config: TrainConfig,
    *,
    corpus: str | Path = DEFAULT_CORPUS,
    run_dir: str | Path,
    resume: bool = False,
    overwrite: bool = False,
    device: str | None = None,
    log: Callable[[str], None] = logs.note,
    mix_qa: str | Path | None = DEFAULT_TRAIN,
    held_out: tuple[str | Path, ...] = (DEFAULT_DEV, DEFAULT_TEST),
    eval_file: str | Path | None = None,
    vocab_text: str = "",
    on_fit: Callable[[float, int], None] | None = None,
    on_pace: Callable[[float], None] | None = None,
) -> tuple[GPT, Vocab, TrainResult]:
    """Pretraining (``pretrain_in``) in ``run_dir``: a directory holding a checkpoint needs
    ``resume`` (continue that run: the configs and data must be its own, rundir.resumed) or
    ``overwrite`` (replace it). ``on_fit`` is told the epochs a --minutes run fitted and the
    steps of one epoch, before its first step; ``on_pace`` the epochs it fits at its own pace,
    at its first re-fit (deadline.Deadline.on_first_refit)."""
    with rundir.Run.open(run_dir, "pretrain", model_config, train_config, resume=resume, overwrite=overwrite,
                         log=log) as run:
        return pretrain_in(run, corpus=corpus, device=device, mix_qa=mix_qa, held_out=held_out,
                           eval_file=eval_file, vocab_text=vocab_text, on_fit=on_fit, on_pace=on_pace)


def pretrain_in(run: rundir.Run, *, corpus: str | Path = DEFAULT_CORPUS, device: str | None = None,
                mix_qa: str | Path | None = DEFAULT_TRAIN,
                held_out: tuple[str | Path, ...] = (DEFAULT_DEV, DEFAULT_TEST),
                eval_file: str | Path | None = None, vocab_text: str = "",
                on_fit: Callable[[float, int], None] | None = None,
                on_pace: Callable[[float], None] | None = None) -> tuple[GPT, Vocab, TrainResult]:
    """Pretraining on the corpus (SPEC 3, 5) in an opened ``run``: span corruption, or
    next-character prediction on packed lines with training-file QA examples mixed in
    (attnlab/data/objectives.py). ``mix_qa`` people also asked in a ``held_out`` file are
    refused; ``eval_file`` is scored every ``eval_every`` steps; ``vocab_text`` adds characters
    to a new model's vocabulary; ``on_fit`` is told the epochs a --minutes run fitted and the
    steps of one epoch, ``on_pace`` the epochs it fits at its own pace once it has timed its
    first steps (it may raise to stop the run there)."""
    model_config, train_config, log = run.model_config, run.train_config, run.log
    text = read_text(corpus)
    dataset = SpanCorruptionDataset(text, model_config.block_size, vocab=_vocabulary(text, vocab_text))
    model_config = dataclasses.replace(model_config, vocab_size=dataset.vocab_size)
    dev = resolve_device(device or train_config.device)
    model = build_model(model_config, train_config.seed).to(dev)
    mixing = train_config.objective == "lm" and train_config.mix_ratio > 0
    batches, described = _pretraining_batches(text, dataset, model_config, train_config, corpus, mix_qa,
                                              held_out, dev, log)
    deadline = None
    if train_config.minutes and not run.resume:
        run.train_config, deadline = fit_to_minutes(model, batches, train_config, model_config, run.opened, log)
        if on_pace is not None:
            deadline.on_first_refit = lambda steps: on_pace(epochs_for(steps, batches.steps_per_epoch))
        if on_fit is not None:
            on_fit(run.train_config.epochs, batches.steps_per_epoch)
    files = rundir.data_files(corpus=[corpus], mix_qa=[mix_qa] if mixing else [],
                              held_out=[p for p in held_out if mixing and Path(p).is_file()])
    run.check_data(files)
    log(f"pretraining {model_config.attention} ({model.num_parameters():,} parameters) on {corpus} "
        f"({described}) on {dev}; outputs in {run.path}")
    plan = Plan(dataset.vocab, _pretraining_tokens(len(dataset), batches, run.train_config, model_config),
                _loss_fn(train_config), trim=model_config.causal and train_config.objective == "span",
                meta={"stage": "pretrain", "corpus_documents": len(dataset), "data_files": files},
                settings={"stage": "pretrain", "corpus": str(corpus),
                          "mix_qa": str(mix_qa) if train_config.mix_ratio else None},
                desc="pretrain", evaluator=_dev_evaluator(eval_file, corpus, dataset.vocab, train_config),
                deadline=deadline)
    return model, dataset.vocab, train(model, batches, run, plan)


def _pretraining_tokens(documents: int, batches, config: TrainConfig, model_config: ModelConfig) -> int:
    """The schedule's length in tokens: the course's for span corruption; lm runs anneal over
    themselves (the course's decay length is defined for span corruption)."""
    if config.objective == "lm":
        return config.final_tokens or _run_tokens(batches, config, model_config)
    return final_tokens_for(documents, model_config.block_size, config)


def _vocabulary(corpus_text: str, vocab_text: str) -> Vocab | None:
    """The corpus's characters and those of ``vocab_text`` (a fact set's questions, answers and
    relation names: they are read and written too); None leaves the corpus alone to decide."""
    return Vocab.from_text(corpus_text + vocab_text) if vocab_text else None


def fit_to_minutes(model: GPT, batches, config: TrainConfig, model_config: ModelConfig, began: float,
                   log: Callable[[str], None] = logs.note, *, trim: bool | None = None,
                   anneals: bool | None = None) -> tuple[TrainConfig, Deadline]:
    """``config`` with the epochs that fit what is left of ``config.minutes`` since ``began`` on
    this machine (never more than its own), from the time of a few steps of a copy of ``model``
    (trainer.step_seconds: the run itself, its data order and random state are untouched), and
    the deadline the run re-fits itself to as it goes (attnlab/training/deadline.py). ``trim`` and
    ``anneals`` (whether the schedule follows the run's length) default to pretraining's rules."""
    if distributed.environment().world_size > 1:
        raise ValueError("--minutes fits a one-process run (each process would time itself); give --epochs")
    whole = dataclasses.replace(config, max_steps=0)
    seconds = step_seconds(model, batches, config, _run_tokens(batches, config, model_config),
                           loss_fn=_loss_fn(config),
                           trim=model_config.causal and config.objective == "span" if trim is None else trim)
    end = began + FIT_SHARE * 60 * config.minutes
    budget = end - time.perf_counter()
    fitted = math.floor(100 * budget / (seconds * batches.steps_per_epoch)) / 100
    epochs = max(min(config.epochs, fitted), 0.01)
    log(f"--minutes {config.minutes:g}: a step takes {seconds:.3f} s here ({batches.steps_per_epoch} a pass), "
        f"so {epochs:g} of {config.epochs:g} epochs fit"
        + (" (all of them)" if epochs >= config.epochs else "; the run re-fits them to its own pace as it goes"))
    anneals_over_run = config.objective == "lm" and not config.final_tokens if anneals is None else anneals
    deadline = Deadline(end, total_steps(whole, batches.steps_per_epoch), timed_pace=seconds,
                        tokens_per_step=config.batch_size * model_config.block_size if anneals_over_run else 0)
    return dataclasses.replace(config, epochs=epochs), deadline


def _pretraining_batches(text: str, dataset: SpanCorruptionDataset, model_config: ModelConfig,
                         config: TrainConfig, corpus, mix_qa, held_out, device, log: Callable[[str], None]):
    """The objective's batches and how to describe them: span corruption, or packed lm rows."""
    # a mix_ratio already needs the lm objective (TrainConfig), so it alone says people are mixed in
    if config.read_out_swaps and not (config.mix_ratio > 0 and text_format(model_config.qa_format).recalls):
        raise ValueError("--read-out-swaps in pretraining swaps the places of mixed-in people: "
                         "it needs the lm objective with --mix-ratio and the recall format")
    if config.objective == "lm":
        return _lm_batches(text, dataset.vocab, model_config, config, corpus, mix_qa, held_out, device, log)
    return (CorruptionBatches(dataset, config.batch_size, device, config.seed),
            f"{len(dataset):,} documents, span corruption")


def _lm_batches(text: str, vocab: Vocab, model_config: ModelConfig, config: TrainConfig,
                corpus: str | Path, mix_qa: str | Path | None, held_out, device,
                log: Callable[[str], None] = logs.note) -> tuple[PackedBatches, str]:
    """Packed rows of corpus lines (and QA examples) for the lm objective."""
    docs = documents(text)
    fmt, K, block = model_config.qa_format, model_config.recall_chars, model_config.block_size
    schema = Schema.from_list(model_config.relations)
    sequences = corpus_sequences(docs, vocab, block, fmt, K, source=str(corpus))
    line_numbers = list(range(1, len(docs) + 1))  # of each sequence, as lines are left out
    described = f"{len(docs):,} lines"
    if config.mix_ratio > 0:
        if mix_qa is None:
            raise ValueError("--mix-ratio needs --mix-qa FILE (questions of training-file people)")
        mix, unused = mixed_and_other_people(read_qa(mix_qa, labelled=True), config.holdout_fraction,
                                             config.mix_people, subject_of=subject_reader(schema),
                                             order=config.subject_order)
        mix, dropped = refuse_held_out_people(mix, {str(p): read_qa(p) for p in held_out if Path(p).is_file()},
                                              drop=config.mix_overlap == "drop")
        if dropped:
            log(f"left out of the mix, also asked in a held-out file: "
                + "; ".join(f"{e.source}:{e.line} {e.question!r}" for e in dropped))
        index = CorpusIndex(docs)
        if config.mix_people:
            left_out = {index.line_number(require_person(e, schema)) for e in unused}
            sequences, line_numbers = _without_lines(sequences, line_numbers, left_out)
            log(f"--mix-people {config.mix_people}: {len(left_out):,} lines of other training-file people left out")
        if schema.cued and text_format(fmt).recalls:
            mix = one_fact_per_subject(mix, schema)
        qa = qa_sequences(mix, vocab, block, fmt, K, index, schema=schema, quote=model_config.quote)
        count = round(config.mix_ratio * len(docs))
        if text_format(fmt).recalls and count >= len(qa):
            # A recall example holds the person's line: it stands in for the plain line.
            mixed_lines = {index.line_number(require_person(e, schema)) for e in mix}
            sequences, line_numbers = _without_lines(sequences, line_numbers, mixed_lines)
        sequences = mixed(sequences, qa, count, config.seed)
        described = f"{len(sequences) - count:,} lines + {count:,} QA examples of {mix_qa} per epoch"
        if config.read_out_swaps:
            swaps = swapped_place_read_outs(mix, index, vocab, block, K, config.read_out_swaps, config.seed,
                                            schema, distractors=config.swap_distractors,
                                            quote=model_config.quote, novel=config.swap_novel)
            sequences += swaps
            described += f" + {len(swaps):,} swapped-place read-outs of its people"
    rows = pack(sequences, block)
    return PackedBatches(rows, config.batch_size, device, config.seed), f"{described}, packed in {len(rows):,} rows"


def _without_lines(sequences: list, line_numbers: list[int], dropped: set[int]) -> tuple[list, list[int]]:
    """The corpus sequences and their line numbers without the lines ``dropped``."""
    kept = [(s, n) for s, n in zip(sequences, line_numbers) if n not in dropped]
    return [s for s, _ in kept], [n for _, n in kept]


def _run_tokens(batches, config: TrainConfig, model_config: ModelConfig) -> int:
    """Counted tokens of the whole run, all its epochs (the trainer counts rows x width per
    step). Not cut by max_steps: --max-steps stops a run inside its schedule, for every
    objective, so a run stopped early and resumed is the run that was never stopped."""
    whole = dataclasses.replace(config, max_steps=0)
    return total_steps(whole, batches.steps_per_epoch) * config.batch_size * model_config.block_size


def _dev_evaluator(eval_file, corpus, vocab: Vocab, config: TrainConfig):
    """For --eval-every: answers (extracted) and stored facts on a labelled file."""
    if not config.eval_every or not eval_file:
        return None
    examples = read_qa(eval_file, labelled=True)
    index = CorpusIndex(documents(read_text(corpus)))

    def score_now(model: GPT) -> dict[str, Any]:
        answers, result = evaluate(model, vocab, examples)
        stored = measure_stored(model, vocab, index, examples)
        return {"dev_correct": result.correct, "dev_total": result.total,
                "stored": stored.stored, "stored_total": stored.total}

    return score_now


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
    overwrite: bool = False,
    device: str | None = None,
    log: Callable[[str], None] = logs.note,
    eval_file: str | Path | None = None,
    vocab_text: str = "",
) -> tuple[GPT, Vocab, TrainResult]:
    """Finetuning (``finetune_in``) in ``run_dir``: a directory holding a checkpoint needs
    ``resume`` (continue that finetuning run: the configs, ``init`` and data given must be its
    own) or ``overwrite`` (replace it)."""
    given = ({**(model_config.to_dict() if model_config else {}), **(overrides or {})}, train_config.to_dict())
    with rundir.Run.open(run_dir, "finetune", model_config, train_config, resume=resume, overwrite=overwrite,
                         given=given, log=log) as run:
        return finetune_in(run, init=init, overrides=overrides, corpus=corpus, train_file=train_file, device=device,
                           eval_file=eval_file, vocab_text=vocab_text)


def finetune_in(run: rundir.Run, *, init: str | Path | None = None, overrides: dict[str, Any] | None = None,
                corpus: str | Path = DEFAULT_CORPUS, train_file: str | Path = DEFAULT_TRAIN,
                device: str | None = None, eval_file: str | Path | None = None, vocab_text: str = ""
                ) -> tuple[GPT, Vocab, TrainResult]:
    """QA finetuning (SPEC 2, 5) in an opened ``run``, from a pretrained checkpoint (``init``) or
    from scratch (``run.model_config``), in which case the corpus still defines the vocabulary.
    ``overrides`` change fields of a pretrained model's config that add no parameters (dropout,
    logit_scale). A resumed run's ``init``, when given, must be its checkpoint's."""
    train_config = run.train_config
    if run.checkpoint is not None:
        init = _same_init(init, run.checkpoint, run.checkpoint_path)
    dev = resolve_device(device or train_config.device)
    model, vocab, corpus_docs, source = _finetuning_model(run.checkpoint, init, run.model_config, overrides, corpus,
                                                          train_config.seed, dev, vocab_text)
    config = model.config
    recalls = text_format(config.qa_format).recalls  # its examples are built from corpus lines
    reads_corpus = init is None or recalls or not corpus_docs
    if not corpus_docs:
        corpus_docs = len(SpanCorruptionDataset(read_text(corpus), config.block_size))
    if recalls:
        batches, questions = _recall_qa_batches(train_file, corpus, vocab, config, train_config, dev)
    else:
        dataset = _name_dataset(train_file, VocabSource(vocab, config.block_size), train_config.holdout_fraction,
                                train_config.subject_order)
        batches, questions = QABatches(dataset, train_config.batch_size, dev, train_config.seed), len(dataset)
    deadline = None
    if train_config.minutes and not run.resume:  # a share of compare --minutes (compare.Budget)
        run.train_config, deadline = fit_to_minutes(model, batches, train_config, config, run.opened, run.log,
                                                    trim=config.causal and not recalls, anneals=False)
    files = rundir.data_files(train_file=[train_file], corpus=[corpus] if reads_corpus else [])
    run.check_data(files)
    run.log(f"finetuning {config.attention} from {source} on {train_file} ({questions:,} questions, "
            f"{config.qa_format} format) on {dev}; outputs in {run.path}")
    init_text = str(init) if init else None
    plan = Plan(vocab, final_tokens_for(corpus_docs, config.block_size, run.train_config), _loss_fn(train_config),
                trim=config.causal and not recalls, deadline=deadline,
                meta={"stage": "finetune", "init": init_text, "corpus_documents": corpus_docs, "data_files": files},
                settings={"stage": "finetune", "init": init_text, "train_file": str(train_file)},
                desc="finetune", evaluator=_dev_evaluator(eval_file, corpus, vocab, train_config))
    return model, vocab, train(model, batches, run, plan)


def _finetuning_model(ckpt: Checkpoint | None, init, model_config: ModelConfig | None,
                      overrides: dict[str, Any] | None, corpus, seed: int, dev, vocab_text: str = ""
                      ) -> tuple[GPT, Vocab, int, str]:
    """The model to finetune, its vocabulary, the corpus size that sets the schedule (0: not
    known) and where it comes from: a resumed run's checkpoint (its weights are restored by
    the trainer), a pretrained model (``init``) or a new one (``model_config``)."""
    if ckpt is not None:
        return (build_model(ckpt.model_config, seed).to(dev), ckpt.vocab,
                int(ckpt.meta.get("corpus_documents", 0)), f"its checkpoint at step {ckpt.meta['step']}")
    if init is not None:
        pretrained = load_checkpoint(init, training_state=False)  # finetuning starts its own optimiser
        model = pretrained.build_model(**_non_shape_overrides(overrides or {}, init)).to(dev)
        return (model, pretrained.vocab, int(pretrained.meta.get("corpus_documents", 0)),
                f"the pretrained model {init}")
    if model_config is None:
        raise ValueError("finetuning without --init needs a model configuration")
    text = read_text(corpus)
    corpus_dataset = SpanCorruptionDataset(text, model_config.block_size, vocab=_vocabulary(text, vocab_text))
    vocab = corpus_dataset.vocab
    model = build_model(dataclasses.replace(model_config, vocab_size=len(vocab)), seed).to(dev)
    return model, vocab, len(corpus_dataset), "scratch (no pretraining)"


def _same_init(init: str | Path | None, ckpt: Checkpoint, where: Path) -> str | None:
    """The pretrained model a resumed finetuning run started from: ``init`` when given must
    be the checkpoint's (none for a run from scratch)."""
    stored = ckpt.meta.get("init")
    if init is None:
        return stored
    if stored is None or Path(init).resolve() != Path(stored).resolve():
        raise rundir.RunDirError(f"--init {init} contradicts the checkpoint's "
                                 f"{stored or 'none (finetuned from scratch)'} ({where})")
    return stored


def _name_dataset(train_file, source: VocabSource, holdout_fraction: float, order: str) -> NameDataset:
    """The direct-format finetuning examples, less the held-out tail of the file."""
    if not holdout_fraction:
        return NameDataset.from_file(train_file, source)
    kept = finetuning_people(read_qa(train_file, labelled=True), holdout_fraction, order=order)
    return NameDataset("".join(f"{e.question}\t{e.answer}\n" for e in kept), source, source=str(train_file))


def _recall_qa_batches(train_file, corpus, vocab: Vocab, config: ModelConfig, train_config: TrainConfig,
                       device) -> tuple[PackedBatches, int]:
    """Recall-format finetuning examples: each training person's corpus line cut at
    recall_chars, then the place (attnlab/answering/knowledge.py), packed into rows."""
    # A --mix-people recipe finetunes on the people it pretrained with: the lines of the others
    # were never read, and recalling them from scratch undoes what pretraining stored. Those
    # others can still teach the read-out, with their line given and only the place scored.
    schema = Schema.from_list(config.relations)
    examples, others = mixed_and_other_people(read_qa(train_file, labelled=True), train_config.holdout_fraction,
                                              train_config.mix_people, subject_of=subject_reader(schema),
                                              order=train_config.subject_order)
    readers = others[:train_config.read_out_people]
    lines = documents(read_text(corpus))
    index = CorpusIndex(lines)
    sequences = qa_sequences(examples, vocab, config.block_size, config.qa_format, config.recall_chars, index,
                             schema=schema, quote=config.quote)
    sequences += qa_sequences(readers, vocab, config.block_size, config.qa_format, config.recall_chars, index,
                              read_out_only=True, schema=schema, quote=config.quote)
    sequences += swapped_place_read_outs(examples + readers, index, vocab, config.block_size, config.recall_chars,
                                         train_config.read_out_swaps, train_config.seed, schema,
                                         distractors=train_config.swap_distractors, quote=config.quote,
                                         novel=train_config.swap_novel)
    if train_config.replay_lines:  # read-out examples alone wear the stored lines away
        sequences += corpus_sequences(lines, vocab, config.block_size, config.qa_format,
                                      config.recall_chars)
    rows = pack(sequences, config.block_size)
    return PackedBatches(rows, train_config.batch_size, device, train_config.seed), len(examples) + len(readers)


def _loss_fn(config: TrainConfig):
    if config.attn_loss == "none" or config.attn_loss_weight == 0:
        return default_loss
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
    log: Callable[[str], None] = logs.note,
    stored_corpus: str | Path | None = None,
    overwrite: bool = True,
) -> tuple[list[Answer], Score | None, Path]:
    """Answer every question of a QA file, write the predictions (default: beside the
    checkpoint, in a file of their own when ``overrides`` change the model: predictions_name),
    score them if labelled; with ``stored_corpus`` also report how many of the places the
    model stored. The predictions never replace the checkpoint or the question file, and
    without ``overwrite`` no existing file: a file named by ``out`` is refused before any
    decoding; the default file may already hold these very predictions (``learn`` writes a
    run's dev predictions there), and is then kept as it is, while other predictions are refused."""
    dev = resolve_device(device)
    model, vocab, ckpt = load_model(checkpoint, device=str(dev), **(overrides or {}))
    chosen = out is not None
    if out is None:  # beside the checkpoint; a shipped model's go to runs/NAME instead
        out = output_dir(checkpoint) / predictions_name(path, ckpt.model_config, model.config)
    out = Path(out)
    refuse_inputs(out, {"checkpoint": checkpoint, "question file": path}, "the predictions file")
    if chosen:
        refuse_existing([out], overwrite)
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
    if not env.is_main:  # rank 0 alone writes and reports
        return answers, result, out
    written = "written to"
    if not overwrite and not chosen and out.exists():
        if not same_predictions(out, [a.answer for a in answers]):
            raise PathError(out, f"already exists and holds other predictions; {OVERWRITE_HINT}")
        written = "already in"
    else:
        out = write_predictions(out, [a.answer for a in answers], overwrite=overwrite)
    if result is None:
        log(f"{path}: {len(examples)} questions have no labels, so no accuracy can be computed; "
            f"predictions {written} {out} ({seconds:.1f} s)")
    else:
        log(f"{path}: {result.with_interval()} correct; predictions {written} {out} ({seconds:.1f} s)")
    if stored_corpus is not None and result is not None:
        stored = measure_stored(model, vocab, CorpusIndex(documents(read_text(stored_corpus))), examples)
        log(f"{path}: extracted (answered correctly) {result.with_interval()}; stored (greedy completion of the "
            f"person's {stored_corpus} line up to the place) {stored} of the {stored.total} people "
            "whose place the line states")
    return answers, result, out


def same_predictions(path: Path, predictions: list[str]) -> bool:
    """Whether the file at ``path`` holds exactly ``predictions``, as write_predictions writes them."""
    try:
        return path.read_text(encoding="utf-8") == predictions_text(predictions)
    except (OSError, UnicodeDecodeError):
        return False


def predictions_name(path: str | Path, stored: ModelConfig, used: ModelConfig) -> str:
    """predictions-STEM.txt for the checkpoint's own model; a model changed by overrides gets its
    own file (predictions-STEM-argmax.txt), so it never replaces the plain model's predictions."""
    changed = [f.name for f in dataclasses.fields(ModelConfig) if getattr(stored, f.name) != getattr(used, f.name)]
    parts = [str(getattr(used, k)) if k == "attention" else f"{k}{getattr(used, k)}" for k in changed]
    return f"predictions-{'-'.join([Path(path).stem, *parts])}.txt"


def baseline(train_file: str | Path = DEFAULT_TRAIN, eval_file: str | Path = DEFAULT_DEV) -> tuple[str, Score | None]:
    """Answer every question with the training file's most frequent place."""
    place = most_frequent_place(read_qa(train_file, labelled=True))
    examples = read_qa(eval_file)
    return place, score([place] * len(examples), examples)


def stored_facts(checkpoint: str | Path, path: str | Path, corpus: str | Path = DEFAULT_CORPUS,
                 device: str = "auto") -> Stored | None:
    """How many of the labelled people of ``path`` the model stored (None: no labels)."""
    examples = read_qa(path)
    if any(e.answer is None for e in examples):
        return None
    model, vocab, _ = load_model(checkpoint, device=str(resolve_device(device)))
    return measure_stored(model, vocab, CorpusIndex(documents(read_text(corpus))), examples)
