"""`export`: a lab model for another tool (attnlab/interop/tlens.py: TransformerLens)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core import paths
from ..core.outputs import refuse_existing
from . import flags
from .results import GoalNotMet, add_json_flag, publish

TARGETS = ("transformer-lens",)


def cmd_export(args: argparse.Namespace) -> int:
    from ..api import load
    from ..interop.tlens import FILES, LogitMismatch

    out = paths.output_dir(args.out_dir, "OUT")
    run = Path(args.checkpoint)
    run = run if run.is_dir() else run.parent  # a checkpoint file's run is its folder
    if out.exists() and run.exists() and out.resolve() == run.resolve():
        raise paths.PathError(out, "is the run this command reads; choose another folder")
    refuse_existing([out / f for f in FILES], args.overwrite)  # before the model is loaded and checked
    model = load(args.checkpoint, device=args.device, **flags.load_facts(args))
    try:
        done = model.export(args.out_dir, to=args.to, eval_file=args.eval_file, overwrite=args.overwrite,
                            source=args.checkpoint)
    except LogitMismatch as e:  # it ran, but the copy is not the model: nothing written
        raise GoalNotMet(str(e)) from None
    print(f"{done.out}: a TransformerLens model ({', '.join(done.to_dict()['files'])}); its logits equal the "
          f"lab's to within {done.difference:.2g} in float64 ({done.float32_difference:.2g} in float32) at "
          f"{done.positions} positions of {done.texts} texts of {done.check_file}. Load it with "
          f"{done.out}/load.py (README.md there)")
    publish(args, done.to_dict())
    return 0


def register(command) -> None:
    p = command("export", "write a model for another tool: TransformerLens (a TransformerBridge whose "
                "logits equal the lab's, checked before writing)", cmd_export)
    p.add_argument("checkpoint", help="checkpoint file or run directory")
    p.add_argument("out_dir", metavar="OUT", help="the folder to write (config.json, weights.safetensors, "
                   "vocab.json, load.py, README.md)")
    p.add_argument("--to", choices=TARGETS, default=TARGETS[0],
                   help="the tool (default: transformer-lens; needs the interop extra: "
                        "pip install 'attnlab[interop]')")
    flags.eval_file(p, "the questions on whose texts (in the model's answer format) the exported logits are "
                    "checked against the lab's, to 1e-5, before anything is written")
    flags.overwrite(p, "the files of an earlier export in OUT")
    add_json_flag(p)
    flags.device(p)
