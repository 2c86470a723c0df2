"""Training commands: `pretrain` and `finetune`."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Callable

from ..config import ModelConfig
from . import flags


def _main_log(env) -> Callable[[str], None]:
    return print if env.is_main else (lambda _msg: None)


def cmd_pretrain(args: argparse.Namespace) -> int:
    from .. import distributed
    from ..pipeline import pretrain

    with distributed.session(args.device) as (env, device):
        config = dataclasses.replace(flags.train_config_from(args, "pretrain"), device=device)
        pretrain(flags.model_config_from(args), config, corpus=args.corpus,
                 run_dir=args.out_dir or f"runs/pretrain-{args.attention or 'vanilla'}",
                 resume=args.resume, log=_main_log(env), mix_qa=args.mix_qa,
                 held_out=tuple(args.held_out), eval_file=args.eval_file or None)
    return 0


def cmd_finetune(args: argparse.Namespace) -> int:
    from .. import distributed
    from ..pipeline import evaluate_file, finetune

    stage = "finetune" if args.init else "finetune_scratch"
    run_dir = Path(args.out_dir or f"runs/finetune-{args.attention or 'vanilla'}{'' if args.init else '-scratch'}")
    with distributed.session(args.device) as (env, device):
        config = dataclasses.replace(flags.train_config_from(args, stage), device=device)
        finetune(config, run_dir=run_dir, init=args.init,
                 model_config=None if args.init else flags.model_config_from(args),
                 overrides=flags.overrides(args, ModelConfig) if args.init else None,
                 corpus=args.corpus, train_file=args.train_file, resume=args.resume, log=_main_log(env),
                 eval_file=args.eval_file or None)
        if args.eval_file:  # split across ranks; rank 0 writes the predictions
            evaluate_file(run_dir, args.eval_file, device=device)
    return 0


def register(command) -> None:
    p = command("pretrain", "span-corruption or next-character pretraining on the corpus", cmd_pretrain)
    flags.preset(p)
    flags.corpus(p)
    flags.out_dir(p, None, "output directory (default: runs/pretrain-ATTENTION)", old=("--run-dir",))
    flags.resume(p)
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
    flags.resume(p)
    flags.model_flags(p)
    flags.train_flags(p, ("finetune", "finetune_scratch"))
