"""Training commands: `pretrain` and `finetune`."""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Callable

from ..core import logs, paths
from ..config.settings import DEFAULT_PRESET, PRESETS, ModelConfig, TrainConfig
from . import flags


def _main_log(env, say: Callable[[str], None] = logs.note) -> Callable[[str], None]:
    """``say`` on the main process; the other ranks of a torchrun say nothing."""
    return say if env.is_main else (lambda _msg: None)


def _open_run(args: argparse.Namespace, stage: str, run_dir: Path, config: TrainConfig, device: str, log):
    """The run of ``stage`` in ``run_dir`` (rundir.Run.open), from the preset and the flags (no
    model config when finetuning from --init: the pretrained model has one), or with --resume
    from the run's checkpoint with the flags given (a contradiction is an error, rundir.resumed)."""
    from ..training import rundir

    new_model = stage != "finetune" and not args.resume
    model = _with_fact_set(args, flags.model_config_from(args)) if new_model else None
    given = (flags.overrides(args, ModelConfig), {**flags.overrides(args, TrainConfig), "device": device})
    return rundir.Run.open(run_dir, "finetune" if stage.startswith("finetune") else stage, model,
                           dataclasses.replace(config, device=device), resume=args.resume, overwrite=args.overwrite,
                           given=given if args.resume else None, log=log)


def cmd_pretrain(args: argparse.Namespace) -> int:
    from ..core import distributed
    from ..training.pipeline import pretrain_in
    from .summary import training_summary

    run_dir = Path(args.out_dir or f"runs/pretrain-{args.attention or 'vanilla'}")
    args.out_dir = str(run_dir)
    config = flags.train_config_from(args, "pretrain")
    args.mix_qa = flags.mix_qa_file(args, config)
    _check_pretrain_files(args, config)
    start = time.monotonic()
    with distributed.session(args.device) as (env, device), \
            _open_run(args, "pretrain", run_dir, config, device, _main_log(env)) as run:
        _, _, result = pretrain_in(run, corpus=args.corpus, mix_qa=args.mix_qa, held_out=tuple(args.held_out),
                                   eval_file=args.eval_file or None, vocab_text=_vocab_text(args))
        _main_log(env, logs.result)(training_summary("pretraining", run_dir, result, time.monotonic() - start, [
            f"attnlab finetune --init {run_dir} --out-dir {run_dir}-finetuned",
            f"attnlab evaluate {run_dir}   (or: attnlab plot {run_dir})"]))
    return 0


def _with_fact_set(args: argparse.Namespace, model_config: ModelConfig) -> ModelConfig:
    """A new model of --facts DIR: its config names the set's relations (a resumed run keeps its
    checkpoint's)."""
    facts = getattr(args, "fact_set", None)
    if facts is None or args.resume:
        return model_config
    return dataclasses.replace(model_config, relations=facts.schema.to_list())


def _vocab_text(args: argparse.Namespace) -> str:
    """A new model of --facts DIR takes the question files' characters into its vocabulary too."""
    facts = getattr(args, "fact_set", None)
    return "" if facts is None or args.resume else facts.vocabulary_text()


def _check_pretrain_files(args: argparse.Namespace, config: TrainConfig) -> None:
    """Every file pretraining reads, and its output directory, before anything is written."""
    from ..data.datasets import read_corpus, read_qa, read_questions

    read_corpus(paths.input_file(args.corpus, "--corpus"))
    if config.mix_ratio > 0:
        read_questions(paths.input_file(args.mix_qa, "--mix-qa"), labelled=True)
        for held_out in args.held_out:
            read_qa(paths.input_file(held_out, "--held-out"))
    if args.eval_file and config.eval_every:
        read_questions(paths.input_file(args.eval_file, "--eval-file"), labelled=True)
    paths.output_dir(args.out_dir, "--out-dir")


def cmd_finetune(args: argparse.Namespace) -> int:
    from ..core import distributed
    from ..training.pipeline import evaluate_file, finetune_in
    from .summary import training_summary

    stage = "finetune" if args.init else "finetune_scratch"
    args.preset = args.preset or (run_recipe(args.init) if args.init else DEFAULT_PRESET)
    args.out_dir = args.out_dir or f"runs/finetune-{args.attention or 'vanilla'}{'' if args.init else '-scratch'}"
    run_dir = Path(args.out_dir)
    _check_finetune_files(args)
    start, score = time.monotonic(), None
    with distributed.session(args.device) as (env, device), \
            _open_run(args, stage, run_dir, flags.train_config_from(args, stage), device, _main_log(env)) as run:
        # From --init the pretrained model fixes the configuration but for the flags given.
        from_init = args.init and not args.resume
        _, _, result = finetune_in(run, init=args.init, overrides=flags.overrides(args, ModelConfig) if from_init
                                   else None, corpus=args.corpus, train_file=args.train_file,
                                   eval_file=args.eval_file or None, vocab_text=_vocab_text(args))
        if run.train_config.holdout_fraction and env.is_main:  # ask reads the rule instead of fitting it each time
            from .trust import store_fitted_rule

            store_fitted_rule(run_dir, args.train_file, device, _main_log(env))
        if args.eval_file:  # split across ranks; rank 0 writes the predictions
            _, score, _ = evaluate_file(run_dir, args.eval_file, device=device)
        _main_log(env, logs.result)(training_summary("finetuning", run_dir, result, time.monotonic() - start, [
            f'attnlab ask {run_dir} "Where was Ada Lovelace born?"',
            f"attnlab calibrate {run_dir}   (or: attnlab evaluate {run_dir} --eval-file FILE)"], dev=score))
    return 0


def run_recipe(init: str) -> str:
    """The preset a run was trained with: its checkpoint's record, else the ``preset`` of a
    shipped model's provenance.json, else the default preset (said on stderr). Finetuning
    continues with it, so a short finetune of a model never uses another recipe's rates."""
    import json

    from ..model.checkpoint import load_checkpoint, resolve

    recorded = load_checkpoint(init).meta.get("train_config", {}).get("preset")
    provenance = resolve(init).parent / "provenance.json"
    if not recorded and provenance.is_file():
        recorded = json.loads(provenance.read_text(encoding="utf-8")).get("preset")
    if recorded in PRESETS:
        return recorded
    logs.note(f"note: {init} does not record its preset; finetuning with preset {DEFAULT_PRESET!r} "
              "(choose with --preset)", stderr=True)
    return DEFAULT_PRESET


def _check_finetune_files(args: argparse.Namespace) -> None:
    """Every file finetuning reads, and its output directory, before anything is written. The
    corpus is read from scratch (it defines the vocabulary), and from --init only for some runs
    (the recall format), so there it may be missing."""
    from ..data.datasets import read_corpus, read_questions
    from ..model.checkpoint import resolve

    if args.init:
        resolve(args.init)
    corpus = paths.input_file(args.corpus, "--corpus", required=not args.init)
    if corpus.exists():
        read_corpus(corpus)
    read_questions(paths.input_file(args.train_file, "--train-file"), labelled=True)
    if args.eval_file:
        read_questions(paths.input_file(args.eval_file, "--eval-file"))
    paths.output_dir(args.out_dir, "--out-dir")


def register(command) -> None:
    p = command("pretrain", "span-corruption or next-character pretraining on the corpus", cmd_pretrain)
    flags.preset(p)
    flags.corpus(p)
    flags.out_dir(p, None, "output directory (default: runs/pretrain-ATTENTION)", old=("--run-dir",))
    flags.resume_or_overwrite(p)
    flags.mixing(p)
    flags.eval_file(p, "labelled file scored every --eval-every steps ('' to skip)")
    flags.model_flags(p)
    flags.train_flags(p, ("pretrain",))

    p = command("finetune", "finetune on a fact set's questions (the birthplace questions by default), from --init or from scratch", cmd_finetune)
    flags.preset(p, None, f"named recipe; from --init the run's own (default: the --init run's preset, "
                          f"else {DEFAULT_PRESET})")
    p.add_argument("--init", default=None, help="pretrained checkpoint or run directory (default: none, no pretraining)")
    flags.corpus(p, "corpus that defines the vocabulary when there is no --init (and the lines of the recall format)")
    flags.train_file(p)
    flags.eval_file(p, "labelled file to score after training ('' to skip)")
    flags.out_dir(p, None, "output directory (default: runs/finetune-ATTENTION[-scratch])", old=("--run-dir",))
    flags.resume_or_overwrite(p)
    flags.model_flags(p)
    flags.train_flags(p, ("finetune", "finetune_scratch"))
