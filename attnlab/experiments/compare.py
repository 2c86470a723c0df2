"""`attnlab compare`: every attention variant through the same recipe (pretrain -> finetune ->
dev), over seeds, beside the baseline and a model without pretraining, on the runner
(attnlab/experiments/runner.py); each variant's seeds tested against a reference variant
(attnlab/experiments/results.py). ``CompareSettings`` holds what it trains and where; with
``minutes`` every run it trains fits a share of them (``Budget``)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..config.settings import DEFAULT_CORPUS, DEFAULT_DEV, DEFAULT_TEST, DEFAULT_TRAIN, ModelConfig, TrainConfig
from ..core import bounds, logs
from ..data.datasets import read_qa
from ..model.attention import REGISTRY, attention_class, pin, plugin
from ..model.checkpoint import CHECKPOINT_NAME, load_checkpoint
from . import records as records_module
from .learn import after_pretraining
from .provenance import experiment_settings
from .results import Row
from .runner import Runner

# Of a run's share of --minutes after its pretraining, what its finetuning may take: the rest is
# for scoring it (dev, stored).
FINETUNE_SHARE = 0.7
MIN_STAGE_MINUTES = 0.05  # however little is left, a stage gets this much (a few steps)


@dataclass(frozen=True)
class CompareSettings:
    """What `attnlab compare` trains and where. ``model`` and the three stage configs are the
    recipe every variant goes through; ``variants`` (default: the whole registry; FILE.py:Class
    for your own) are trained ``seeds`` times each (seed k: both stages' seeds plus k) and
    compared with ``reference`` (default: vanilla if chosen, else the first variant). ``scratch``
    adds vanilla finetuned without pretraining. ``reuse`` keeps finished rows, ``resume`` also
    continues interrupted ones, ``overwrite`` starts over. ``records``:
    attnlab/experiments/records.py. ``gather`` trains nothing: the table of the records and the
    rows finished in ``out``. ``only_seeds``: train only these k (the scratch row with k = 0) and
    gather the others. ``minutes`` (0: none): every run trained, pretraining and finetuning,
    fits a share of them (``Budget``); without it every run trains the epochs given."""

    model: ModelConfig
    pretrain: TrainConfig
    finetune: TrainConfig
    finetune_scratch: TrainConfig
    variants: Sequence[str] | None = None
    corpus: str | Path = DEFAULT_CORPUS
    train_file: str | Path = DEFAULT_TRAIN
    dev_file: str | Path = DEFAULT_DEV
    out: str | Path = "runs/compare"
    device: str = "auto"
    scratch: bool = True
    reuse: bool = False
    resume: bool = False
    overwrite: bool = False
    preset: str | None = None  # named in the chart's title
    seeds: int = 1
    reference: str | None = None
    records: str | Path | None = None
    gather: bool = False
    only_seeds: Sequence[int] | None = None
    minutes: float = 0.0


@dataclass
class Budget:
    """compare --minutes: the runs still to train share what is left of ``minutes`` since
    ``began`` equally (a run that ends early leaves its time to the later ones). Within a run's
    share, its pretraining is fitted to the share less what finetuning and scoring take after it
    (learn.after_pretraining, as `learn` reserves), its finetuning to FINETUNE_SHARE of what is left
    of the share when it starts; a stage resumed from its checkpoint keeps the fit it started
    with. ``fit`` is what the runner calls before each stage trains (Runner.fit)."""

    minutes: float
    runs: int  # runs to train: variants x seeds trained now, and the scratch row
    began: float = dataclasses.field(default_factory=time.monotonic)
    clock: Callable[[], float] = time.monotonic
    started: int = 0  # runs started so far
    run_end: float = 0.0  # when the run under way should end (clock time)

    def share(self) -> float:
        """Minutes for the run starting now: what is left, over the runs left."""
        left = self.minutes - (self.clock() - self.began) / 60
        return max(MIN_STAGE_MINUTES, left / max(1, self.runs - self.started))

    def fit(self, stage: str, run_dir: Path, config: TrainConfig) -> TrainConfig:
        """``config`` of ``stage`` (pretrain, finetune, or scratch: a run of finetuning alone)
        with the minutes it fits into."""
        stored = _stored_minutes(run_dir)
        if stage in ("pretrain", "scratch"):  # a run starts
            share = self.share()
            self.started += 1
            self.run_end = self.clock() + 60 * share
            minutes = share - after_pretraining(share) if stage == "pretrain" else FINETUNE_SHARE * share
        else:
            minutes = FINETUNE_SHARE * (self.run_end - self.clock()) / 60
        minutes = stored if stored is not None else round(max(MIN_STAGE_MINUTES, minutes), 2)
        return dataclasses.replace(config, minutes=minutes)


def _stored_minutes(run_dir: Path) -> float | None:
    """The minutes a stage's checkpoint was fitted to (it resumes with them), if it has one."""
    ckpt = run_dir / CHECKPOINT_NAME
    if not ckpt.exists():
        return None
    return load_checkpoint(ckpt, training_state=False).meta.get("train_config", {}).get("minutes")


def compare(s: CompareSettings, log: Callable[[str], None] = logs.note) -> list[Row]:
    """Every variant through pretrain -> finetune -> dev, with the same model shape, seeds and
    data (``CompareSettings``); plus the most-frequent-place baseline and the scratch row.
    Writes results.md/.json and a chart into ``s.out``."""
    variants = [pin(v) for v in (s.variants or REGISTRY)]  # your own attention: its file, pinned
    reference = _check_variants(variants, s.reference, s.seeds)
    trained = _trained_seeds(s.seeds, s.only_seeds, s.gather)
    scratch_trained = s.scratch and 0 in trained
    pretrain_config = _budgeted(s.pretrain, s.minutes, log)
    data = {"corpus": s.corpus, "train": s.train_file, "dev": s.dev_file, "test": DEFAULT_TEST}  # test: held out
    settings = experiment_settings(s.preset, s.model, pretrain_config, s.finetune, s.finetune_scratch, data)
    run = Runner(Path(s.out), s.corpus, s.train_file, s.dev_file, held_out=(s.dev_file, DEFAULT_TEST),
                 device=s.device, reuse=s.reuse or s.gather, resume=s.resume, overwrite=s.overwrite,
                 settings=settings, log=log)
    # gathering touches no run directory: other processes may be training in them
    run.start(([run.out / "scratch"] if scratch_trained else [])
              + [seed_dir(run.out / plugin.dirname(name), k, s.seeds) for name in variants for k in trained])
    if s.minutes:
        run.fit = _budget(s.minutes, len(variants) * len(trained) + scratch_trained, log).fit
    run.out.mkdir(parents=True, exist_ok=True)
    log(f"== attnlab compare: {', '.join(map(plugin.label, variants))}; outputs in {run.out}")
    try:
        rows = _compare_rows(run, dataclasses.replace(s, pretrain=pretrain_config), variants, scratch_trained,
                             trained)
    except KeyboardInterrupt:
        log(f"compare interrupted: finished stages are kept in {run.out}; continue with the same command "
            "plus --resume (in place of --overwrite or --reuse)")
        raise
    # Rows differ in their attention only: the results name the variants instead.
    model = {k: v for k, v in settings["model"].items() if k != "attention"}
    _write_comparison(run, rows, f"dev accuracy on {Path(s.dev_file).name}" + (f", preset {s.preset}" if s.preset else ""),
                      {**settings, "model": model, "variants": variants, "scratch": s.scratch, "seeds": s.seeds,
                       "reference": plugin.label(reference)})
    return rows


def _budgeted(config: TrainConfig, minutes: float, log: Callable[[str], None]) -> TrainConfig:
    """The comparison's pretraining config as its rows record it: with a budget, its minutes
    are the budget's (each run is fitted to its share as it starts); without one, its epochs as
    given (equal_passes)."""
    if minutes:
        return dataclasses.replace(config, minutes=minutes)
    return equal_passes(config, log)


def _budget(minutes: float, runs: int, log: Callable[[str], None]) -> Budget:
    budget = Budget(minutes, runs)
    log(f"--minutes {minutes:g}: {runs} runs to train share them, about {minutes / max(1, runs):.2f} minutes "
        "each (pretraining and finetuning fitted to it, scoring included)")
    return budget


def _write_comparison(run: Runner, rows: list[Row], title: str, settings: dict[str, Any]) -> None:
    run.write(rows, "variant", title, settings=settings, reference=settings["reference"])
    logs.results_via(run.log)(f"\nwrote {run.out / 'results.md'}, {run.out / 'results.json'} and "
                              f"{run.out / 'dev_accuracy.png'}; runs in {run.out}/*/")


def equal_passes(config: TrainConfig, log: Callable[[str], None] = logs.note) -> TrainConfig:
    """A comparison's pretraining: its epochs as given, never fitted to --minutes (a fit follows
    the speed of its own moment and machine, so compared runs would differ in passes)."""
    if not config.minutes:
        return config
    log(f"every run trains the {config.epochs:g} epochs given, not fitted to --minutes {config.minutes:g}: "
        "a fit follows the machine's speed at that moment, so compared runs would differ in passes")
    return dataclasses.replace(config, minutes=0.0)


def _trained_seeds(seeds: int, only_seeds: Sequence[int] | None, gather: bool) -> list[int]:
    """The seed indices this run trains: none when gathering, else ``only_seeds`` (each checked
    to be one of the run's 0..seeds-1) or all of them."""
    if only_seeds is None:
        return [] if gather else list(range(seeds))
    if gather:
        raise ValueError("--only-seeds names seeds to train, and --gather trains none: give one of them")
    outside = sorted({k for k in only_seeds if not 0 <= k < seeds})
    if outside:
        raise ValueError(f"--only-seeds {','.join(map(str, outside))}: with --seeds {seeds} the seed indices "
                         f"are 0 to {seeds - 1}")
    return sorted(set(only_seeds))


def _check_variants(variants: list[str], reference: str | None, seeds: int) -> str:
    """The reference variant, after refusing unknown variants, a variant named twice, a reference
    not among them and a seed count outside 1..100."""
    unknown = [v for v in variants if v not in REGISTRY and not plugin.is_plugin(v)]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(REGISTRY)} "
                         "(or your own: FILE.py:ClassName)")
    twice = sorted({v for v in variants if variants.count(v) > 1})
    if twice:
        raise ValueError(f"the variants name {', '.join(twice)} more than once; name each variant once")
    for v in variants:
        if plugin.is_plugin(v):
            attention_class(v)  # a bad plug-in is refused before anything trains
    if (problem := bounds.COMPARE_SEEDS.problem(seeds)) is not None:
        raise ValueError(f"the number of seeds {problem}")
    if reference and plugin.is_plugin(reference):
        reference = pin(reference)
    reference = reference or ("vanilla" if "vanilla" in variants else variants[0])
    if reference not in variants:
        raise ValueError(f"the reference variant {reference!r} is not among the variants trained "
                         f"({', '.join(variants)})")
    return reference


def seed_dir(variant_dir: Path, k: int, seeds: int) -> Path:
    """Where seed k of a variant trains: VARIANT/ with one seed (as before seeds existed),
    VARIANT/seed-K/ with several (benchmarks/shaping.py lays out its settings alike and finds a
    compare run's seeds by it)."""
    return variant_dir if seeds == 1 else variant_dir / f"seed-{k}"


def _compare_rows(run: Runner, s: CompareSettings, variants: list[str], scratch: bool,
                  trained: Sequence[int]) -> list[Row]:
    model_config, pretrain_config, finetune_config, seeds = s.model, s.pretrain, s.finetune, s.seeds
    rows = [run.baseline()]
    if scratch:
        run.log("== no pretraining: vanilla finetuned from scratch")
        rows.append(run.scratch("vanilla, no pretraining", dataclasses.replace(model_config, attention="vanilla"),
                                s.finetune_scratch))
    # Seed-major: every variant's seed 0 before any seed 1, so that a grid cut short (or built
    # up over days) is balanced across the variants. The rows are listed variant by variant.
    done: dict[tuple[str, int], Row] = {}
    for k in range(seeds):
        for i, name in enumerate(variants, 1):
            seed = pretrain_config.seed + k
            shown = f", seed {seed}" if seeds > 1 else ""
            gather = k not in trained
            run.log(f"== {i}/{len(variants)} {plugin.label(name)}{shown}" + ("" if gather else
                    f": pretrain, finetune, evaluate on {run.dev_file}"))
            row = _variant_row(run, plugin.label(name) + shown, dataclasses.replace(model_config, attention=name),
                               _seeded(pretrain_config, k), _seeded(finetune_config, k),
                               seed_dir(run.out / plugin.dirname(name), k, seeds), s.records, gather)
            if row is not None:
                done[name, k] = row
    missing = [f"{name} seed {pretrain_config.seed + k}" for k in range(seeds) for name in variants
               if (name, k) not in done]
    if missing:
        run.log(f"missing (neither a record nor a finished run): {', '.join(missing)}")
    return rows + [done[name, k] for name in variants for k in range(seeds) if (name, k) in done]


def _variant_row(run: Runner, label: str, model_config: ModelConfig, pretrain_config: TrainConfig,
                 finetune_config: TrainConfig, where: Path, records: str | Path | None,
                 gather: bool) -> Row | None:
    """One (variant, seed): from its record when ``records`` holds one made with these settings,
    else the finished row in ``where`` or (unless ``gather``) trained now; a row that has no
    record yet leaves one. None: gathering, and neither exists."""
    variant, seed = model_config.attention, pretrain_config.seed
    settings = run.recipe_settings(model_config, pretrain_config, finetune_config)
    recorded = records and records_module.find(records, variant, seed, settings, questions=len(read_qa(run.dev_file)))
    if recorded:
        run.log(f"reusing the record {records_module.record_path(records, variant, seed, settings)} "
                f"(made with these settings and attnlab {settings.get('attnlab')})")
        return Row.from_dict(recorded["row"])
    if gather:
        row = run.kept(where, settings)
    else:
        row = run.recipe(label, "variant", model_config, pretrain_config, finetune_config, where)
    if row is None:
        return None
    row.variant, row.seed = plugin.label(variant), seed
    if records:
        predictions = records_module.read_predictions(where / "finetune" / f"predictions-{Path(run.dev_file).stem}.txt")
        path = records_module.save(records, variant, seed, row.to_dict(), settings, predictions)
        run.log(f"recorded {label} in {path}")
    return row


def _seeded(config: TrainConfig, k: int) -> TrainConfig:
    """Seed k of a stage: its seed plus k (k = 0: the config itself)."""
    return dataclasses.replace(config, seed=config.seed + k) if k else config
