"""One recipe choice changed, measured: `learn`'s recipe with fields overridden, for the probes
in the lab notebook (the shipped recipe is attnlab/experiments/learn.py's; a probe that wins
three seeds becomes a change there).

    # the whole recipe in a budget, one finetuning field changed
    .venv/bin/python benchmarks/learn_probe.py data --out runs/probe-a --minutes 2 --set finetune.epochs=3
    # another seed of the same probe
    .venv/bin/python benchmarks/learn_probe.py data --out runs/probe-a1 --minutes 2 --set finetune.epochs=3 --seed 1
    # fixed work instead of a time budget (a shared machine then changes the time, not the result)
    .venv/bin/python benchmarks/learn_probe.py runs/sets/species --out runs/probe-b --pretrain-passes 35
    # finetuning variants from one pretrained model (its recipe's finetuning, fields changed)
    .venv/bin/python benchmarks/learn_probe.py runs/sets/species --out runs/probe-c \\
        --from-pretrained runs/probe-b/pretrain --set finetune.read_out_swaps=2

``--set STAGE.FIELD=VALUE`` (STAGE: pretrain or finetune, FIELD a TrainConfig field; or
``model.FIELD``, a ModelConfig field such as model.attention=rotary or model.n_layer=4) and
``--set recipe.NAME=VALUE`` (a constant of learn.py, e.g. recipe.FORMAT_SUBJECTS=1000) may be
repeated. Prints one line: the changes, then each relation's dev count out of N with its 95%
interval, then all relations; the run's results.json holds the rest.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from _common import REPO  # noqa: F401  (puts the checkout's attnlab first on sys.path)

from attnlab.experiments import learn as recipe_module
from attnlab.data import factset


def parse_changes(pairs: list[str]) -> dict[str, dict[str, str]]:
    """``["finetune.epochs=3", ...]`` as {stage: {field: text}}; a malformed pair is an error."""
    changes: dict[str, dict[str, str]] = {"pretrain": {}, "finetune": {}, "recipe": {}, "model": {}}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        stage, dot, field = key.partition(".")
        if not (sep and dot and field) or stage not in changes:
            raise SystemExit(f"--set {pair!r}: expected STAGE.FIELD=VALUE with STAGE pretrain, finetune, model "
                             "or recipe")
        changes[stage][field] = value
    return changes


def typed(current, text: str):
    """``text`` read as the type of ``current`` (booleans from 1/0/true/false; a setting that is
    None, decided by a rule, takes a boolean)."""
    if isinstance(current, bool) or current is None:
        return text.lower() in ("1", "true", "yes")
    return type(current)(text)


def changed_recipe(recipe, changes: dict[str, dict[str, str]], pretrain_passes: float = 0.0):
    """``recipe`` with the stages' (and the model's) fields changed; ``pretrain_passes`` fixes pretraining's work
    (its epochs) in place of its minutes."""
    stages = {}
    for stage in ("pretrain", "finetune"):
        config = getattr(recipe, stage)
        unknown = set(changes[stage]) - {f.name for f in dataclasses.fields(config)}
        if unknown:
            raise SystemExit(f"--set {stage}.{sorted(unknown)[0]}: not a training setting")
        config = dataclasses.replace(config, **{k: typed(getattr(config, k), v) for k, v in changes[stage].items()})
        stages[stage] = config
    model_changes = changes.get("model", {})
    unknown = set(model_changes) - {f.name for f in dataclasses.fields(recipe.model)}
    if unknown:
        raise SystemExit(f"--set model.{sorted(unknown)[0]}: not a model setting")
    stages["model"] = dataclasses.replace(recipe.model, **{k: typed(getattr(recipe.model, k), v)
                                                           for k, v in model_changes.items()})
    if pretrain_passes:
        stages["pretrain"] = dataclasses.replace(stages["pretrain"], minutes=0.0, epochs=pretrain_passes)
    return dataclasses.replace(recipe, **stages)


def set_recipe_constants(changes: dict[str, str]) -> None:
    for name, value in changes.items():
        if not hasattr(recipe_module, name):
            raise SystemExit(f"--set recipe.{name}: learn.py has no such constant")
        setattr(recipe_module, name, typed(getattr(recipe_module, name), value))


def summary(label: str, results: dict) -> str:
    cells = [f"{name} {r['correct']}/{r['total']} ({r['ci95'][0]}-{r['ci95'][1]})"
             for name, r in results["relations"].items()]
    overall = results["overall"]
    return f"{label or 'as shipped'} | " + " | ".join(cells) + f" | all {overall['correct']}/{overall['total']}"


def finetune_only(facts_dir: str, pretrained: Path, out: Path, minutes: float, changes) -> dict:
    """The recipe's finetuning from ``pretrained`` into ``out``, scored as learn scores."""
    from attnlab.core.paths import write_atomically
    from attnlab.training.pipeline import finetune

    facts = factset.load(facts_dir)
    recipe = changed_recipe(recipe_module.recipe_for(facts, minutes), changes)
    finetune(recipe.finetune, run_dir=out, init=pretrained, corpus=facts.corpus, train_file=facts.train,
             overwrite=True)
    write_atomically(out / factset.RECORD_NAME, json.dumps(facts.record(), indent=2) + "\n")
    return recipe_module.score_fact_set(out, facts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("facts", help="a fact-set folder (data for the birthplace set)")
    p.add_argument("--out", required=True, type=Path, help="the probe's run directory (replaced)")
    p.add_argument("--minutes", type=float, default=15.0, help="the budget the recipe is fitted to")
    p.add_argument("--set", action="append", default=[], metavar="STAGE.FIELD=VALUE")
    p.add_argument("--pretrain-passes", type=float, default=0.0, help="fixed pretraining epochs, not minutes")
    p.add_argument("--from-pretrained", type=Path, help="finetune this pretrained model only")
    p.add_argument("--resume", action="store_true", help="continue the probe's interrupted pretraining")
    p.add_argument("--seed", type=int, default=0, help="the recipe's seed (learn --seed)")
    args = p.parse_args(argv)
    changes = parse_changes(args.set)
    if "n_layer" in changes["model"]:  # a probe that sets the depth keeps it (learn.FEWER_LAYERS_BELOW)
        changes["recipe"].setdefault("FEWER_LAYERS_BELOW", "0")
    set_recipe_constants(changes["recipe"])
    label = " ".join(args.set + ([f"pretrain-passes={args.pretrain_passes:g}"] if args.pretrain_passes else [])
                     + ([f"seed={args.seed}"] if args.seed else []))
    if args.from_pretrained:
        results = finetune_only(args.facts, args.from_pretrained, args.out, args.minutes, changes)
    else:
        recipe = changed_recipe(recipe_module.recipe_for(factset.load(args.facts), args.minutes, args.seed), changes,
                                args.pretrain_passes)
        results = recipe_module.learn(args.facts, args.out, minutes=args.minutes, seed=args.seed,
                                      overwrite=not args.resume, resume=args.resume, recipe=recipe)
    print(summary(label, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
