"""Typed, frozen configurations and the named presets.

Every field carries its help text in ``metadata["help"]``; the CLI turns each field into a
``--dashed-name`` flag from that, so a new option is added in exactly one place. Configs are
saved as JSON in every checkpoint and beside every run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..core import bounds as b
from ..core.datafiles import DataFile
from ..data.format_names import QA_FORMATS, RECALLING_FORMATS  # the formats: attnlab/data/formats.py
from ..data.subject_orders import DEFAULT_ORDER, SUBJECT_ORDERS

POSITION_SCHEMES = ("learned", "sinusoidal", "none")
POSITION_MODES = ("add", "concat")
OBJECTIVES = ("span", "lm")  # attnlab/data/objectives.py
SWITCH = ("on", "off", "auto")  # attnlab/core/devices.py switch()
ATTN_LOSSES = ("none", "focus", "near")  # none, or attnlab/training/shaping.py SHAPING_LOSSES
MIX_OVERLAPS = ("refuse", "drop")
OPTIMIZERS = ("adamw", "muon")  # attnlab/training/trainer.py make_optimizer
SCHEDULES = ("cosine", "wsd")  # attnlab/training/trainer.py lr_at


def _f(default: Any, help: str, **kw: Any) -> Any:
    """A config field: its help text and, for a number, its ``bound`` (attnlab/core/bounds.py), for
    a name, its ``choices``; the flag's parser, the config's own check and config files all
    read them from here."""
    return field(default=default, metadata={"help": help, **kw})


def field_problem(f: dataclasses.Field, value: Any) -> str | None:
    """What is wrong with ``value`` for field ``f`` ('must be ..., got ...'), or None."""
    kind = str(f.type)
    if "bound" in f.metadata:
        return f.metadata["bound"].problem(value)
    if f.metadata.get("relations"):
        return relations_problem(value)
    if f.metadata.get("answer_values"):
        return answer_values_problem(value)
    if kind == "bool":
        return None if isinstance(value, bool) else f"must be true or false, got {value!r}"
    if not isinstance(value, str):
        return f"must be a string, got {value!r}"
    choices = f.metadata.get("choices")
    if choices and value not in choices:
        return f"must be one of {', '.join(choices)}, got {value!r}"
    return None


def relations_problem(value: Any) -> str | None:
    """What is wrong with a config's ``relations``: a list of [name, question template] pairs."""
    ok = isinstance(value, (list, tuple)) and all(
        isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in value)
    return None if ok else f"must be a list of [name, question] pairs, got {value!r}"


def answer_values_problem(value: Any) -> str | None:
    """What is wrong with a config's ``answer_values``: a list of [relation name, [answer, ...]] pairs."""
    ok = isinstance(value, (list, tuple)) and all(
        isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], (list, tuple))
        and all(isinstance(x, str) for x in p[1]) for p in value)
    return None if ok else f"must be a list of [relation, [answer, ...]] pairs, got {value!r}"


class _Serialisable:
    """JSON round trip for the config dataclasses (saved in checkpoints and run directories).
    Unknown keys are ignored so that checkpoints written by newer versions still load."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def _check_fields(self) -> None:
        """Every field of the right type and in its bounds (ValueError naming the field)."""
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            problem = field_problem(f, getattr(self, f.name))
            if problem:
                raise ValueError(f"{f.name} {problem}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        if not isinstance(d, dict):
            raise TypeError(f"expected an object of {cls.__name__} settings, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in d.items() if k in known})


class Settings(_Serialisable):
    """A method's settings as a typed object (``EditSettings``, ``TraceSettings``:
    attnlab/facts/settings.py; ``AbstainPolicy``: attnlab/trust/policy.py), its fields made with
    ``_f`` as the configs' are: each checked when the object is made (a ValueError naming the
    field), ``None`` allowed where it is the default, and a field with ``parse=int`` (a number
    whose range depends on the model) only checked to be an integer."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.default is None:
                continue
            if f.metadata.get("parse") is int:
                ok = isinstance(value, int) and not isinstance(value, bool)
                problem = None if ok else f"must be an integer, got {value!r}"
            else:
                problem = field_problem(f, value)
            if problem:
                raise ValueError(f"{f.name} {problem}")

    def replace(self, **changes: Any):
        """A copy with ``changes``, checked as when made."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


@dataclass(frozen=True)
class ModelConfig(_Serialisable):
    """The GPT's shape (SPEC section 4). Keyword defaults are the course ("spec") numbers."""

    vocab_size: int = _f(256, "vocabulary size (set from the corpus, never by hand)", cli=False, bound=b.at_least(3))
    block_size: int = _f(128, "longest sequence the model sees (the span-corruption block)", bound=b.at_least(2))
    n_layer: int = _f(4, "number of transformer blocks", bound=b.POSITIVE_INT)
    n_head: int = _f(8, "attention heads per block", bound=b.POSITIVE_INT)
    n_embd: int = _f(256, "model width", bound=b.POSITIVE_INT)
    attention: str = _f("vanilla", "attention variant, by registry name (see `attnlab variants`), or your own: FILE.py:ClassName")
    positions: str = _f("learned", "absolute position scheme: learned, sinusoidal or none",
                         choices=POSITION_SCHEMES)
    position_mode: str = _f("add", "how absolute positions join the token embedding: add or concat",
                             choices=POSITION_MODES)
    position_dim: int = _f(0, "width of the position part with --position-mode concat (0 = n_embd/2)",
                           bound=b.NON_NEGATIVE_INT)
    causal: bool = _f(True, "causal (decoder) masking; --no-causal gives an encoder for analysis")
    dropout: float = _f(0.1, "dropout on embeddings, attention probabilities and residuals", bound=b.FRACTION)
    rel_clip: int = _f(0, "relative attention: clip distances to |i-j| <= k (0 = no clipping)",
                       bound=b.NON_NEGATIVE_INT)
    logit_scale: float = _f(1.0, "output-softmax temperature beta: logits are multiplied by it", bound=b.POSITIVE)
    qa_format: str = _f("direct", "how the model answers: direct (question⁇place⁇, SPEC 2) or recall "
                        "(it first writes what it remembers of the person from 'NAME.', then the place; "
                        "attnlab/answering/formats.py)", choices=QA_FORMATS)
    recall_chars: int = _f(96, "recall format: characters of the person's line the model recalls "
                           "before answering (training lines are cut there)", bound=b.POSITIVE_INT)
    answer_chars: int = _f(32, "the longest answer the model reads out (a fact set's training answers set it)",
                           bound=b.POSITIVE_INT)
    quote: bool = _f(False, "recall format: before its answer the model quotes the sentence of its recall that "
                     "states it, so that the sentence, not the value's first characters, chooses the value")
    relations: tuple = _f((), "the question forms of the model's fact set, [name, question template] pairs "
                          "(empty: the course's one question, 'Where was {subject} born?')", cli=False,
                          relations=True)
    answer_values: tuple = _f((), "recall format, span read-out: each relation's answers in training, [name, [answer, ...]] "
                              "pairs; one that the recalled text writes in other letters is scored beside its spans "
                              "(attnlab/answering/knowledge.py)", cli=False, answer_values=True)

    def __post_init__(self) -> None:
        self._check_fields()
        object.__setattr__(self, "relations", tuple(tuple(p) for p in self.relations))  # JSON gives lists
        object.__setattr__(self, "answer_values", tuple((str(n), tuple(v)) for n, v in self.answer_values))
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.qa_format in RECALLING_FORMATS and not 0 < self.recall_chars < self.block_size:
            raise ValueError(f"recall_chars must be between 1 and block_size-1, got {self.recall_chars}")
        if self.position_mode == "concat" and not 0 < self.pos_width < self.n_embd:
            raise ValueError(f"position_dim must be between 1 and n_embd-1, got {self.pos_width}")

    def to_dict(self) -> dict[str, Any]:
        """As JSON holds it: the relations as lists, so a stored config compares equal."""
        d = super().to_dict()
        d["relations"] = [list(p) for p in self.relations]
        d["answer_values"] = [[n, list(v)] for n, v in self.answer_values]
        return d

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def pos_width(self) -> int:
        """Width of the position embedding: the whole model width when added."""
        if self.position_mode == "add":
            return self.n_embd
        return self.position_dim or self.n_embd // 2



# The course's public name.
GPTConfig = ModelConfig


@dataclass(frozen=True)
class TrainConfig(_Serialisable):
    """One training run (SPEC section 5): optimiser, schedule, batching, checkpoints."""

    epochs: float = _f(650, "passes over the dataset (fractions allowed)", bound=b.POSITIVE)
    batch_size: int = _f(128, "global batch size (examples per optimiser step)", bound=b.POSITIVE_INT)
    learning_rate: float = _f(6e-3, "peak learning rate", bound=b.POSITIVE)
    beta1: float = _f(0.9, "AdamW beta1", bound=b.FRACTION)
    beta2: float = _f(0.95, "AdamW beta2", bound=b.FRACTION)
    weight_decay: float = _f(0.1, "AdamW weight decay on weight matrices (not biases, LayerNorm, embeddings)",
                              bound=b.NON_NEGATIVE)
    optimizer: str = _f("adamw", "adamw, or muon: Muon (orthogonalised momentum, its update scaled to "
                        "AdamW's size so one learning rate serves both) for the blocks' weight matrices, "
                        "AdamW for embeddings, head, biases and norms", choices=OPTIMIZERS)
    schedule: str = _f("cosine", "learning-rate shape after warmup: cosine (decay to the floor at "
                       "final_tokens) or wsd (warmup-stable-decay: the peak held, then a linear decay to "
                       "the floor over the last --decay-fraction of final_tokens)", choices=SCHEDULES)
    decay_fraction: float = _f(0.2, "wsd schedule: the share of final_tokens spent decaying", bound=b.UNIT)
    grad_clip: float = _f(1.0, "clip the global gradient norm to this (0 = off)", bound=b.NON_NEGATIVE)
    warmup_tokens: int = _f(10_240, "linear learning-rate warmup over this many tokens", bound=b.NON_NEGATIVE_INT)
    final_tokens: int = _f(0, "tokens at which cosine decay reaches the floor (0 = 200 * len(pretrain corpus) * block_size)",
                          bound=b.NON_NEGATIVE_INT)
    lr_floor: float = _f(0.1, "learning-rate floor as a fraction of the peak", bound=b.UNIT)
    seed: int = _f(0, "random seed (weights, data order, span corruption)", bound=b.SEED)
    length_buckets: int = _f(0, "split each batch into this many length-sorted micro-batches, each trimmed to its longest example (exact; saves padding work); 0 = auto: 8 on CPU, 1 on CUDA", bound=b.NON_NEGATIVE_INT)
    micro_batch_size: int = _f(0, "most examples one process puts through the model at once; a larger share of the batch is split and its gradients accumulated (0 = no limit)", bound=b.NON_NEGATIVE_INT)
    rank_streams: bool = _f(True, "multi-process runs: each process corrupts its share of the batch with its own random stream (--no-rank-streams: all share one stream, so N processes train exactly like 1)")
    max_steps: int = _f(0, "stop after this many optimiser steps of the full schedule, for every objective: the "
                        "learning rate follows the schedule of all --epochs and the run ends early (resumable to "
                        "more steps); for a whole, shorter schedule give fewer --epochs (fractions allowed) or, "
                        "for span, --final-tokens (0 = run all epochs)", bound=b.NON_NEGATIVE_INT)
    minutes: float = _f(0.0, "fit pretraining into this many minutes of training on this machine: a few timed "
                        "steps before the first set --epochs (never more than given), and the run re-fits them to "
                        "its own pace as it goes, so that it ends in time annealed over itself; evaluations come on "
                        "top (0 = run all --epochs)",
                        stages=("pretrain",), bound=b.NON_NEGATIVE)
    checkpoint_every: int = _f(500, "write a checkpoint every N steps (0 = only at the end)", bound=b.NON_NEGATIVE_INT)
    log_every: int = _f(10, "append metrics to metrics.jsonl every N steps", bound=b.POSITIVE_INT)
    device: str = _f("auto", "cpu, cuda, cuda:N or auto")
    compile: str = _f("auto", "torch.compile the model: on, off, or auto (on for CUDA)", choices=SWITCH)
    amp: str = _f("auto", "bf16 autocast: on, off, or auto (on for CUDA)", choices=SWITCH)
    fast: bool = _f(True, "the fast path: fused scaled_dot_product_attention where the variant allows it and, on CPU, cheap dropout masks (--no-fast: explicit softmax attention, separate q/k/v products, torch's dropout: the same function, slower)")
    attn_loss: str = _f("none", "attention-shaping loss added to the LM loss: none, focus or near",
                        choices=ATTN_LOSSES)
    attn_loss_weight: float = _f(0.0, "weight lambda of the attention-shaping loss", bound=b.NON_NEGATIVE)
    near_max: float = _f(16.0, "L_max: per-row cap of the near (locality) loss", bound=b.POSITIVE)
    objective: str = _f("span", "pretraining objective: span (span corruption, SPEC 3) or lm (next "
                        "character on corpus lines, several packed exactly into each row)", stages=("pretrain",),
                        choices=OBJECTIVES)
    mix_ratio: float = _f(0.0, "lm objective: question-answer examples of --mix-qa people mixed in, per "
                          "corpus line and epoch (0 = none; at most 100, which already repeats each "
                          "question many times)", stages=("pretrain",),
                          bound=b.Bound(float, 0, 100, name="mix_ratio"))
    mix_overlap: str = _f("refuse", "a --mix-qa question also asked in a --held-out file: refuse (an error) or "
                          "drop (leave it out of the mix, and say so)", stages=("pretrain",),
                          choices=MIX_OVERLAPS)
    mix_people: int = _f(0, "recall-format mixing: only the first N training-file people (in --subject-order) are mixed in (their "
                         "lines with their place); the lines of the file's other people, held-out ones "
                         "excepted, are left out of pretraining, so each epoch is spent on fewer, and the "
                         "asked-about, people (0 = every training-file person); recall-format finetuning "
                         "then uses the same N people", stages=("pretrain", "finetune"),
                         bound=b.NON_NEGATIVE_INT)
    read_out_people: int = _f(0, "recall-format finetuning with --mix-people N: also teach the read-out on up "
                              "to this many of the training file's other people (held-out ones excepted): "
                              "their corpus line is given and only the place is scored, so the model learns "
                              "to read places out of lines without learning lines it never pretrained on "
                              "(0 = none)", stages=("finetune",), bound=b.NON_NEGATIVE_INT)
    read_out_swaps: float = _f(0, "recall format: also teach the read-out on this many copies of each finetuning "
                               "(or, in pretraining, mixed-in) person's line with their place replaced by another "
                               "training place (only the place scored), so the model reads the place the line "
                               "states rather than the one it remembers; a fraction gives one copy for that "
                               "share of the people (0 = none)", stages=("pretrain", "finetune"),
                               bound=b.NON_NEGATIVE)
    swap_distractors: bool = _f(False, "recall format, with --read-out-swaps: where a line also names another "
                                "training value of the asked relation (a distractor), a swapped copy exchanges "
                                "the two instead of writing in a random value, so the model learns which wording "
                                "answers the question, not which value looks like an answer",
                                stages=("pretrain", "finetune"))
    swap_novel: float = _f(0.0, "recall format, with --read-out-swaps: the share of swapped copies whose value is no "
                           "value of the set but a disguised one (each letter and digit of a training value "
                           "replaced by another of its kind), so the read-out learns to copy what the line states "
                           "and not to pick among the values it knows (a probe: learn's recipe leaves it off)",
                           stages=("pretrain", "finetune"), bound=b.UNIT)
    replay_lines: bool = _f(False, "recall-format finetuning: also train on every corpus line as pretraining did "
                            "(cut at the recalled characters, no place), so that the finetuning's read-out "
                            "examples do not wear away the lines pretraining stored", stages=("finetune",))
    holdout_fraction: float = _f(0.0, "hold the last fraction of the training file (in --subject-order) out of finetuning (and of "
                                 "pretraining's QA mix), so that `calibrate` and `--abstain auto` fit on "
                                 "people whose labels the model never saw (0 = train on all)",
                                 bound=b.FRACTION)
    subject_order: str = _f(DEFAULT_ORDER, "which training-file people are held out (--holdout-fraction), mixed in "
                            "(--mix-people) and read (--read-out-people): file takes them in the file's order "
                            "(the last held out, the first mixed in); hashed in an order fixed by a hash of each "
                            "subject, whatever the file's order, so that a file sorted by answer or relation "
                            "gives samples of its people rather than slices", stages=("pretrain", "finetune"),
                            choices=SUBJECT_ORDERS)
    eval_every: int = _f(0, "score the dev file (answers and stored facts) every N steps and at the end, "
                         "into metrics.jsonl (0 = only finetuning's final evaluation)",
                         bound=b.NON_NEGATIVE_INT)
    preset: str = _f("", "the preset these settings started from ('' = none recorded): `finetune --init RUN` "
                     "continues with the run's own recipe", cli=False)
    tensorboard: bool = _f(False, "also write the metrics as TensorBoard event files next to metrics.jsonl "
                           "(needs the tensorboard extra: pip install 'attnlab[tensorboard]')")

    def __post_init__(self) -> None:
        self._check_fields()
        if self.mix_ratio > 0 and self.objective != "lm":
            raise ValueError("mix_ratio needs the lm objective (span corruption mixes nothing in)")
        if self.swap_distractors and not self.read_out_swaps:
            raise ValueError("swap_distractors chooses the values of the swapped copies: it needs read_out_swaps > 0")
        if self.swap_novel and not self.read_out_swaps:
            raise ValueError("swap_novel chooses the values of the swapped copies: it needs read_out_swaps > 0")



# The training settings a resumed run may change, each with why: they say how long the run
# goes on, what it logs, and where and how fast the same computation runs (they may change
# floating-point rounding, as another device does, but never the data, the schedule or the
# model). Every other setting comes from the checkpoint. Shown in the training commands' help;
# attnlab/training/rundir.py applies them.
RESUMABLE: dict[str, str] = {
    "max_steps": "where the run stops (not before the checkpoint's step); the schedule stays the checkpoint's",
    "epochs": "likewise",
    "checkpoint_every": "bookkeeping",
    "log_every": "bookkeeping",
    "eval_every": "bookkeeping",
    "tensorboard": "bookkeeping",
    "device": "where the run goes on",
    "compile": "how fast: the same computation",
    "amp": "precision of the same computation (auto follows the device)",
    "fast": "how fast: the same function",
    "length_buckets": "how the batch is cut: the same batch and loss",
    "micro_batch_size": "how the batch is cut: the same batch and loss",
}


# The course's data files, relative to the checkout (the README's commands run from its root).
DATA = DataFile("data")  # resolved when used: from any directory, or --data-dir (datafiles.py)
DEFAULT_CORPUS = DATA / "wiki.txt"
DEFAULT_TRAIN = DATA / "birth_places_train.tsv"
DEFAULT_DEV = DATA / "birth_dev.tsv"
DEFAULT_TEST = DATA / "birth_test_inputs.tsv"


@dataclass(frozen=True)
class Preset:
    """A named bundle: the model shape and the three training runs of the experiment."""

    name: str
    description: str  # one line: what it is for
    model: dict[str, Any]
    pretrain: TrainConfig
    finetune: TrainConfig  # from a pretrained model
    finetune_scratch: TrainConfig  # without pretraining
    expected: str = ""  # how long it takes, and where

    def summary(self) -> str:
        """'NAME: description (layers x width, parameters; expected time)' for --help."""
        m = {**dataclasses.asdict(ModelConfig()), **self.model}
        size = f"{m['n_layer']} layers x {m['n_embd']} wide"
        return f"{self.name}: {self.description} ({size}{'; ' + self.expected if self.expected else ''})"


_SPEC = Preset(
    name="spec",
    description="the course's exact numbers (SPEC sections 4-5): about 2 GPU-hours, learns nothing in CPU minutes",
    expected="about 2 hours on one GPU, days on a CPU",
    model=dict(block_size=128, n_layer=4, n_head=8, n_embd=256),
    pretrain=TrainConfig(epochs=650, batch_size=128, learning_rate=6e-3),
    finetune=TrainConfig(epochs=10, batch_size=256, learning_rate=6e-4),
    finetune_scratch=TrainConfig(epochs=75, batch_size=256, learning_rate=6e-4),
)

# "quick": sized so that `attnlab demo` (pretrain + finetune + no-pretraining finetune + dev
# evaluations) finishes within 15 minutes on a 2-core CPU. Chosen by short probes on this CPU
# (docs/notebook.md, 2026-11-22 "the quick preset"): a 128-wide model with 4 heads (head width 32 runs faster on CPU
# than 16), no dropout (the goal is memorising the corpus, and 20 epochs cannot overfit it; it
# also keeps the fused attention kernel), lr 2e-3 (5e-3 trailed), and the cosine annealed over
# the run itself: final_tokens = 20 epochs x 2,937 documents x 127 counted positions.
_QUICK = Preset(
    name="quick",
    description="the course's recipe (span corruption) cut to CPU size: 1% of dev, kept for comparison",
    expected="about 8 minutes on 2 CPU cores",
    model=dict(block_size=128, n_layer=4, n_head=4, n_embd=128, dropout=0.0),
    pretrain=TrainConfig(epochs=20, batch_size=32, learning_rate=2e-3, length_buckets=4,
                         final_tokens=20 * 2937 * 127),
    finetune=TrainConfig(epochs=10, batch_size=64, learning_rate=6e-4, length_buckets=2),
    finetune_scratch=TrainConfig(epochs=10, batch_size=64, learning_rate=6e-4, length_buckets=2),
)

# "cpu": the recipe whose models know where people were born, on a 2-core CPU (docs/guides/knowledge.md;
# docs/notebook.md lists the probes that chose it). The model recalls the person's corpus
# line before answering (qa_format recall, attnlab/answering/knowledge.py); pretraining is next-character
# prediction on lines cut at recall_chars, with every training-file person's line followed by
# their place (mix_ratio 0.681 = 2,000 of 2,937 lines, each once per epoch).
_CPU = Preset(
    name="cpu",
    description="the first recall-format recipe (AdamW, every training person mixed in), kept for comparison; "
                "the shipped model models/cpu is cpu60's",
    expected="about 22 minutes on 2 CPU cores",
    model=dict(block_size=128, n_layer=4, n_head=4, n_embd=128, dropout=0.0, qa_format="recall",
               recall_chars=96),
    pretrain=TrainConfig(objective="lm", mix_ratio=0.681, mix_overlap="drop", epochs=60, batch_size=16,
                         learning_rate=3e-3, eval_every=1820, checkpoint_every=500),
    # finetuning continues the anneal at a tenth of pretraining's final rate: a few epochs at a low
    # rate add answers, a rate near pretraining's makes the model forget (docs/notebook.md,
    # finetune probes)
    finetune=TrainConfig(epochs=3, batch_size=16, learning_rate=3e-5, checkpoint_every=0),
    finetune_scratch=TrainConfig(epochs=10, batch_size=32, learning_rate=3e-3, checkpoint_every=0),
)

# "cpu15" and "cpu5": the cpu recipe with Muon for the blocks' weight matrices, annealed over
# what fits 15 and 5 minutes of 2 cores (docs/notebook.md has the probes that chose them,
# on held-out training people). Muon stores facts in fewer passes than AdamW at the same
# learning rate; with the copy read-out a stored fact is an answered one.
# The share of its training file cpu15 holds out: the last 400 people, as the shipped model
# does. Kept out of finetuning, their lines pretrained on as dev's are, so the confidence
# correction and the abstention rule are fitted on labels the model never trained on; with a
# hundred, a fifth of them wrong, the fitted correction varied by more than the 0.05 of
# calibration error a run is allowed (docs/notebook.md).
CPU15_HOLDOUT = 0.2
_CPU15 = Preset(
    name="cpu15",
    description="knowledge in 15 minutes: Muon, 500 training people for the answer format, 128 characters recalled, "
                "places read out of swapped copies",
    # 128 recalled characters instead of 96: more training-file places end within them (the
    # 5-minute recipe stores its 96 characters' worth by 5 minutes; more time only helps if there
    # is more to read; the counts are in docs/notebook.md)
    model={**_CPU.model, "block_size": 160, "recall_chars": 128},
    # its pretraining fits itself to 13.2 minutes of the machine it runs on (--minutes; at most 54
    # epochs, what a fast machine trains in them), so that finetuning, whose swapped copies
    # triple its examples, ends within 15. One swapped copy of each format person's line is mixed
    # into every pass (as in `learn` and cpu60): reading is learned at pretraining's rate, over
    # every pass; the copies cost passes, and reading was worth more (docs/notebook.md)
    pretrain=TrainConfig(objective="lm", mix_ratio=500 / 2937, mix_people=500, mix_overlap="drop", epochs=54,
                         minutes=13.2, batch_size=16, learning_rate=3e-3, optimizer="muon", checkpoint_every=500,
                         holdout_fraction=CPU15_HOLDOUT, read_out_swaps=1),
    # one finetuning epoch on the same 500 people: more epochs added nothing beyond one run's
    # noise, and finetuning on people whose lines pretraining left out undid it (it teaches
    # recalling lines the model never read; docs/notebook.md). Those other people
    # still teach the read-out, with their line given and only the place scored (reading places
    # out of unseen people's own lines improves; docs/notebook.md has the probe), each example
    # with two copies of its line whose place is swapped for another, that place scored
    finetune=dataclasses.replace(_CPU.finetune, epochs=1, mix_people=500, read_out_people=1500,
                                 holdout_fraction=CPU15_HOLDOUT, read_out_swaps=2),
    finetune_scratch=_CPU.finetune_scratch,
    expected="15 minutes on 2 CPU cores (its pretraining fitted to them)",
)

# "cpu5": what a 5-minute budget stores best is passes, not size: at equal compute, 3 layers and
# 250 training people for the answer format make more passes than the 4-layer recipe, and facts
# arrive after a number of passes (the probes are in docs/notebook.md). Its pretraining fits itself to 4.6 minutes of the machine it runs on (--minutes), so
# that finetuning ends within 5; its 24 epochs are the most a faster machine trains, and what
# `compare` trains in every run (a comparison is made at equal passes).
_CPU5 = Preset(
    name="cpu5",
    description="knowledge in 5 minutes: cpu15's recipe with 3 layers, 250 training people for the answer "
                "format and 96 characters recalled, fitted to 5 minutes of this machine",
    model={**_CPU.model, "n_layer": 3},
    # cpu5 and the demo hold nobody out and read no swapped copies: their figures were measured
    # so, and a share held out would move them (fewer read-out people, more lines a pass)
    pretrain=dataclasses.replace(_CPU15.pretrain, epochs=24, minutes=4.6, mix_people=250, mix_ratio=250 / 2937,
                                 holdout_fraction=0.0, read_out_swaps=0),
    finetune=dataclasses.replace(_CPU15.finetune, mix_people=250, read_out_people=1100, holdout_fraction=0.0,
                                 read_out_swaps=0),
    finetune_scratch=_CPU.finetune_scratch,
    expected="5 minutes on 2 CPU cores (its pretraining fitted to them)",
)

# "cpu60": the shipped model's recipe (models/cpu), what fits an hour of 2 cores: cpu15's, with
# the hour spent on reading, which is what cpu15 lacks (docs/notebook.md has the error
# breakdown): every training person's line with their place (read-out examples for all of
# them), 160 recalled characters, and the last fifth of the training file held out for checking
# the recipe and fitting abstention (`calibrate`, `--abstain auto`) on people whose labels it
# never saw. Pretraining also mixes in one copy of each of those lines with the place swapped
# for another (the place the line states, not the one remembered), so reading is learned over
# every pass; its finetuning reads eight such copies a person and replays every corpus line so
# that reading does not wear memories away. Its pretraining fits itself to 55 minutes of the
# machine it runs on (at most 80 epochs), so that finetuning ends within the hour.
_CPU60 = Preset(
    name="cpu60",
    description="the shipped model's recipe (models/cpu): cpu15 with every training person mixed in and read with swapped "
                "places, 160 characters, 20% held out, fitted to an hour of this machine",
    model={**_CPU.model, "block_size": 192, "recall_chars": 160},
    pretrain=dataclasses.replace(_CPU15.pretrain, mix_ratio=1600 / 2937, mix_people=0, epochs=80, minutes=55.0,
                                 holdout_fraction=0.2, read_out_swaps=1),
    finetune=dataclasses.replace(_CPU.finetune, epochs=1, holdout_fraction=0.2, read_out_swaps=8, replay_lines=True),
    finetune_scratch=_CPU.finetune_scratch,
    expected="an hour on 2 CPU cores (its pretraining fitted to 55 minutes of them)",
)

# "demo": what `attnlab demo` trains while you wait, within its 15 minutes on 2 cores (every
# row included): the cpu15 recipe annealed over what is left after the other rows. The 52 epochs
# fit that on the CPU the preset was chosen on; a slower CPU fits fewer into the same minutes
# (--minutes), so the demo keeps its time and says what it trained.
_DEMO = Preset(
    name="demo",
    description="the recipe `attnlab demo` trains while you wait (cpu15 fitted to 11 minutes of this machine)",
    model=_CPU.model,
    pretrain=dataclasses.replace(_CPU15.pretrain, epochs=52, minutes=11, holdout_fraction=0.0, read_out_swaps=0),
    finetune=dataclasses.replace(_CPU15.finetune, holdout_fraction=0.0, read_out_swaps=0),
    finetune_scratch=TrainConfig(epochs=4, batch_size=32, learning_rate=3e-3, checkpoint_every=0),
    expected="about 11 minutes on 2 CPU cores (its pretraining fitted to them)",
)

# "tiny": seconds-long runs for tests and smoke checks.
_TINY = Preset(
    name="tiny",
    description="seconds-long runs for tests and smoke checks (knows nothing)",
    expected="seconds",
    model=dict(block_size=80, n_layer=2, n_head=2, n_embd=32, dropout=0.0),
    pretrain=TrainConfig(epochs=1, batch_size=16, learning_rate=3e-3, checkpoint_every=0),
    finetune=TrainConfig(epochs=1, batch_size=16, learning_rate=1e-3, checkpoint_every=0),
    finetune_scratch=TrainConfig(epochs=1, batch_size=16, learning_rate=1e-3, checkpoint_every=0),
)

PRESETS: dict[str, Preset] = {p.name: p for p in (_CPU15, _CPU5, _CPU60, _CPU, _DEMO, _QUICK, _SPEC, _TINY)}
# What pretrain and finetune use unless told: a recipe that knows on a CPU.
DEFAULT_PRESET = "cpu15"
# Retired preset names and what they are called now (accepted with a note).
RENAMED_PRESETS: dict[str, str] = {}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None


def cli_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of a config dataclass that become command-line flags."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("cli", True)]
