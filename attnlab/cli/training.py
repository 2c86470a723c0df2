"""Training commands: `pretrain` and `finetune`."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Callable

from ..checkpoint import CHECKPOINT_NAME
from ..config import ModelConfig, TrainConfig
from . import flags


def _main_log(env) -> Callable[[str], None]:
    return print if env.is_main else (lambda _msg: None)


def _configs(args: argparse.Namespace, stage: str, run_dir: Path, device: str
             ) -> tuple[ModelConfig | None, TrainConfig]:
    """The run's configs: from the preset and the flags (no model config when finetuning from
    --init: the pretrained model has one), or with --resume from the run's checkpoint and the
    flags given (a contradiction is an error, rundir.resumed)."""
    if not args.resume:
        model = None if stage == "finetune" else flags.model_config_from(args)
        return model, dataclasses.replace(flags.train_config_from(args, stage), device=device)
    from .. import rundir

    ckpt = rundir.resumable(run_dir, "finetune" if stage.startswith("finetune") else stage)
    return rundir.resumed_configs(ckpt, flags.overrides(args, ModelConfig),
                                  {**flags.overrides(args, TrainConfig), "device": device}, run_dir / CHECKPOINT_NAME)


def cmd_pretrain(args: argparse.Namespace) -> int:
    from .. import distributed
    from ..pipeline import pretrain

    run_dir = Path(args.out_dir or f"runs/pretrain-{args.attention or 'vanilla'}")
    with distributed.session(args.device) as (env, device):
        model_config, config = _configs(args, "pretrain", run_dir, device)
        pretrain(model_config, config, corpus=args.corpus, run_dir=run_dir, resume=args.resume,
                 overwrite=args.overwrite, log=_main_log(env), mix_qa=args.mix_qa,
                 held_out=tuple(args.held_out), eval_file=args.eval_file or None)
    return 0


def cmd_finetune(args: argparse.Namespace) -> int:
    from .. import distributed
    from ..pipeline import evaluate_file, finetune

    stage = "finetune" if args.init else "finetune_scratch"
    run_dir = Path(args.out_dir or f"runs/finetune-{args.attention or 'vanilla'}{'' if args.init else '-scratch'}")
    with distributed.session(args.device) as (env, device):
        model_config, config = _configs(args, stage, run_dir, device)
        # From --init the pretrained model fixes the configuration but for the flags given.
        from_init = args.init and not args.resume
        finetune(config, run_dir=run_dir, init=args.init, model_config=model_config,
                 overrides=flags.overrides(args, ModelConfig) if from_init else None,
                 corpus=args.corpus, train_file=args.train_file, resume=args.resume, overwrite=args.overwrite,
                 log=_main_log(env), eval_file=args.eval_file or None)
        if args.eval_file:  # split across ranks; rank 0 writes the predictions
            evaluate_file(run_dir, args.eval_file, device=device)
    return 0


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

    p = command("finetune", "finetune on birth-place questions (from --init, or from scratch)", cmd_finetune)
    flags.preset(p)
    p.add_argument("--init", default=None, help="pretrained checkpoint or run directory (default: none, no pretraining)")
    flags.corpus(p, "corpus that defines the vocabulary when there is no --init (and the lines of the recall format)")
    flags.train_file(p)
    flags.eval_file(p, "labelled file to score after training ('' to skip)")
    flags.out_dir(p, None, "output directory (default: runs/finetune-ATTENTION[-scratch])", old=("--run-dir",))
    flags.resume_or_overwrite(p)
    flags.model_flags(p)
    flags.train_flags(p, ("finetune", "finetune_scratch"))
