"""Causal tracing (Meng et al. 2022, "Locating and Editing Factual Associations in GPT", ROME,
section 2): where in the network does the model carry the fact that answers a question?

Three runs of the same input. Clean: as is. Corrupted: Gaussian noise added to the token
embeddings of the person's name (at every occurrence in the input: a recalled line may repeat
the name), so the model can no longer read who is asked about. Restored:
corrupted, except that one hidden state -- one (layer, position) of the residual stream, of an
MLP output or of an attention output -- is copied from the clean run. The probability of the
clean answer that a restored state brings back says how much of the fact that state carries.

Everything is done through the model's named hook points (attnlab/model/hooks.py: ``embed``,
``blocks.L.resid_post``, ``blocks.L.mlp.out``, ``blocks.L.attn.out``), forward hooks on the
unchanged model, so it works for every attention variant.

**The answer point.** The model writes its answer character by character, so "the input" and
"the answer" are defined where the place is produced from the weights:

- ``direct`` format: the input is ``question⁇`` and the answer the model's greedy place.
- ``recall`` format: the model is given ``NAME.``, writes what it remembers of the person, then
  ``⁇`` and the place. When its recalled text spells the answer after the opening, that is where
  the fact is retrieved (the later copy after ``⁇`` is a read-out): the input is the recalled
  text up to the answer's first occurrence. Otherwise it is the whole recalled text and ``⁇``.

**Probability of the clean answer**: the product of the probabilities of the answer's
characters under teacher forcing after the input (no closing mark), i.e. the probability that
the model spells exactly those characters next.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from ..model.gpt import GPT
from ..model.hooks import capturing, hook_point
from ..core.paths import save_figure
from ..data.vocab import MASK_CHAR, Vocab
from ..core.plotting import pyplot

KINDS = ("residual", "mlp", "attention")  # what one restoration copies from the clean run


class TraceError(ValueError):
    """Bad input to tracing or editing, reported as one line."""


# ---- the answer point ------------------------------------------------------------------------
@dataclass(frozen=True)
class AnswerPoint:
    question: str
    name: str
    context: str  # what the model has read when it starts spelling the answer
    answer: str  # the model's own (clean, greedy) answer
    name_start: int  # the name's characters are context[name_start:name_end]
    name_end: int
    in_recall: bool  # recall format and the answer is spelled inside the recalled text

    @property
    def name_last(self) -> int:
        return self.name_end - 1

    @property
    def name_starts(self) -> list[int]:
        """Where the name begins in the context: the question's (or the recall opening's) name
        and every later occurrence, e.g. a recalled line that repeats the name. All are
        corrupted, or the model could read the person from an uncorrupted copy."""
        return occurrences(self.context, self.name, self.name_start)


def occurrences(text: str, name: str, first: int) -> list[int]:
    """Start of every non-overlapping occurrence of ``name`` in ``text`` from ``first`` on."""
    starts, at = [], first
    while (at := text.find(name, at)) >= 0:
        starts.append(at)
        at += len(name)
    return starts


def name_in(question: str, name: str | None, schema=None) -> str:
    """The subject a question is about: ``name`` if given (it must occur in the question), else
    the subject of one of ``schema``'s question forms (default: the course's ``Where was NAME
    born?``)."""
    from ..data.relations import Schema

    if name is None:
        schema = schema or Schema()
        asked = schema.parse(question)
        if asked is None:
            forms = " or ".join(repr(r.template) for r in schema.relations)
            raise TraceError(f"cannot tell who {question!r} is about: ask {forms}, or give the name")
        name = asked.subject
    elif not name or name not in question:
        raise TraceError(f"the name {name!r} does not occur in the question {question!r}")
    return name


def answer_point(model: GPT, vocab: Vocab, question: str, name: str | None = None) -> AnswerPoint:
    """Where the model produces its answer to ``question`` (see the module docstring)."""
    from ..answering.formats import answer_format

    from ..data.relations import Schema

    name = name_in(question, name, Schema.from_list(model.config.relations))
    vocab.encode(question, source="<question>")  # a one-line error for an unknown character
    fmt = answer_format(model.config.qa_format)
    got = fmt.answer_one(model, vocab, question, name)
    read = fmt.reading(question, name, got, model.config.recall_chars)
    # an answer spelled in what the model wrote (a recalled line) is produced where it was written
    at = read.text.find(got.answer, read.prompt_len) if got.answer else -1
    if at >= 0:
        context, inside = read.text[:at], True
    else:
        context, inside = read.text + MASK_CHAR, False
    return AnswerPoint(question, name, context, got.answer, read.name_start, read.name_start + len(name), inside)


# ---- hooks -----------------------------------------------------------------------------------
# What one restoration copies, by kind: the hook point (attnlab/model/hooks.py) of each layer.
POINTS = {"residual": "blocks.{}.resid_post", "mlp": "blocks.{}.mlp.out", "attention": "blocks.{}.attn.out"}


def point_name(kind: str, layer: int) -> str:
    """The hook point holding the hidden state of ``kind`` at ``layer``: the residual stream
    after the block, its MLP's output or its attention's output."""
    return POINTS[kind].format(layer)


@torch.no_grad()
def record_states(model: GPT, ids: Tensor) -> tuple[Tensor, dict[tuple[str, int], Tensor]]:
    """One clean forward pass of ids (1, T): logits and every hidden state (kind, layer) -> (T, C)."""
    keys = {point_name(kind, layer): (kind, layer) for kind in KINDS for layer in range(model.config.n_layer)}
    with capturing(model, keys) as cache:
        logits, _ = model.run(ids)
    return logits, {key: cache[name][0].clone() for name, key in keys.items()}


@contextlib.contextmanager
def corrupted(model: GPT, starts: list[int], noise: Tensor | None):
    """Add ``noise`` (n, C_tok) to the token embeddings of positions s..s+n-1 of every row, for
    each s in ``starts`` (the same noise at each occurrence of the name)."""
    if noise is None:
        yield
        return

    def add(out):
        out = out.clone()
        for start in starts:
            out[:, start:start + noise.shape[0]] += noise.to(out.dtype)
        return out

    with hook_point(model, "embed").patch(add):
        yield


@contextlib.contextmanager
def restored(model: GPT, plan: list[list[tuple[str, int, int]]], clean: dict[tuple[str, int], Tensor]):
    """Row b of the batch gets each state (kind, layer, position) of ``plan[b]`` copied from the
    clean run's ``clean`` states."""
    by_module: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
    for row, states in enumerate(plan):
        for kind, layer, pos in states:
            rows, positions = by_module.setdefault((kind, layer), ([], []))
            rows.append(row)
            positions.append(pos)
    with contextlib.ExitStack() as stack:
        for (kind, layer), (rows, positions) in by_module.items():
            r, p = torch.tensor(rows), torch.tensor(positions)
            source = clean[(kind, layer)]

            def patch(hidden, r=r, p=p, source=source):
                hidden = hidden.clone()
                hidden[r, p] = source[p].to(hidden.dtype)
                return hidden
            stack.enter_context(hook_point(model, point_name(kind, layer)).patch(patch))
        yield


def answer_probability(logits: Tensor, answer_ids: list[int], context_len: int) -> Tensor:
    """(B,) probability of spelling ``answer_ids`` after the first ``context_len`` positions,
    from the logits of the teacher-forced sequence context + answer."""
    n = len(answer_ids)
    logp = logits[:, context_len - 1:context_len - 1 + n].float().log_softmax(-1)
    target = torch.tensor(answer_ids, device=logits.device).expand(logits.shape[0], n)
    return logp.gather(-1, target[..., None]).squeeze(-1).sum(-1).exp()


# ---- tracing ---------------------------------------------------------------------------------
@dataclass
class Trace:
    point: AnswerPoint
    clean: float  # probability of the clean answer, clean run
    corrupted: float  # ... corrupted run, averaged over the noise samples
    recovered: dict[str, np.ndarray] = field(default_factory=dict)  # kind -> (L, T) averaged
    samples: int = 0
    noise: float = 0.0


def noise_scale(model: GPT) -> float:
    """The standard deviation of the token embedding weights: the unit of ``--noise``."""
    return float(model.tok_emb.weight.detach().float().std())


def sample_noise(model: GPT, n_chars: int, noise: float, samples: int, seed: int) -> list[Tensor]:
    """``samples`` seeded Gaussian noise tensors (n_chars, C_tok), std ``noise`` x embedding std."""
    gen = torch.Generator().manual_seed(seed)
    width = model.tok_emb.weight.shape[1]
    scale = noise * noise_scale(model)
    device = model.tok_emb.weight.device
    return [(torch.randn(n_chars, width, generator=gen) * scale).to(device) for _ in range(samples)]


@torch.no_grad()
def patched_probabilities(model: GPT, ids: Tensor, answer_ids: list[int], context_len: int,
                          starts: list[int], noise: Tensor | None, plan: list[list[tuple[str, int, int]]],
                          clean: dict[tuple[str, int], Tensor], batch_size: int = 128) -> Tensor:
    """Probability of the answer for each row of ``plan`` (restorations), all rows corrupted by
    the same ``noise`` at the name's occurrences ``starts``."""
    out = []
    for i in range(0, len(plan), batch_size):
        part = plan[i:i + batch_size]
        with corrupted(model, starts, noise), restored(model, part, clean):
            logits, _ = model.run(ids.expand(len(part), -1))
        out.append(answer_probability(logits, answer_ids, context_len))
    return torch.cat(out)


def trace_plan(n_layer: int, n_positions: int, kinds=KINDS) -> list[list[tuple[str, int, int]]]:
    """One row per single restoration, kind-major, then layer, then position."""
    return [[(kind, layer, pos)] for kind in kinds for layer in range(n_layer)
            for pos in range(n_positions)]


@torch.no_grad()
def trace(model: GPT, vocab: Vocab, question: str, *, name: str | None = None, noise: float = 3.0,
          samples: int = 10, seed: int = 0, kinds=KINDS, point: AnswerPoint | None = None) -> Trace:
    """Causal trace of one question: the recovered probability of the clean answer for every
    (kind, layer, position) of the answer point's context."""
    if samples < 1:
        raise TraceError(f"--samples must be at least 1, got {samples}")
    if noise < 0:
        raise TraceError(f"--noise must be non-negative, got {noise}")
    model.eval()
    point = point or answer_point(model, vocab, question, name)
    if not point.answer:
        raise TraceError(f"the model gives no answer to {question!r}: nothing to trace")
    ctx_ids = vocab.encode(point.context)
    answer_ids = vocab.encode(point.answer)
    ids = torch.tensor([ctx_ids + answer_ids], device=model.tok_emb.weight.device)
    if ids.shape[1] > model.config.block_size:
        raise TraceError(f"the input and answer ({ids.shape[1]} characters) exceed the block "
                         f"({model.config.block_size})")
    logits, clean_states = record_states(model, ids)
    clean = float(answer_probability(logits, answer_ids, len(ctx_ids))[0])
    L, T = model.config.n_layer, len(ctx_ids)
    plan = [[]] + trace_plan(L, T, kinds)  # row 0: corrupted, nothing restored
    total = torch.zeros(len(plan), dtype=torch.float64)
    for eps in sample_noise(model, point.name_end - point.name_start, noise, samples, seed):
        total += patched_probabilities(model, ids, answer_ids, len(ctx_ids), point.name_starts, eps,
                                       plan, clean_states).double().cpu()
    mean = (total / samples).numpy()
    recovered = {kind: mean[1 + k * L * T: 1 + (k + 1) * L * T].reshape(L, T) for k, kind in enumerate(kinds)}
    return Trace(point, clean, float(mean[0]), recovered, samples, noise)


# ---- averaging over questions ----------------------------------------------------------------
NAME_TAIL = 4  # the name's last characters shown one by one, aligned on its last character
AFTER = 3  # characters right after the name shown one by one
END = 4  # the input's last characters shown one by one, aligned on its end


def aligned_columns(point: AnswerPoint) -> tuple[list[str], list[int]]:
    """Each context position's column on the aligned axis, and the axis labels. Positions are
    aligned on the name's last character and on the input's end; the stretches between (the
    name's middle, the text between name and end, anything before the name) are pooled."""
    labels = aligned_labels()
    s, e, T = point.name_start, point.name_end, len(point.context)
    cols = []
    for p in range(T):
        if p < s:
            c = "before name"
        elif p < e:
            back = e - 1 - p
            c = f"name[-{back + 1}]" if back < NAME_TAIL else ("name[0]" if p == s else "name (middle)")
        elif T - 1 - p < END:
            c = f"end[-{T - p}]"
        elif p - e < AFTER:
            c = f"after+{p - e + 1}"
        else:
            c = "text (middle)"
        cols.append(labels.index(c))
    return labels, cols


def aligned_labels() -> list[str]:
    return (["before name", "name[0]", "name (middle)"]
            + [f"name[-{k}]" for k in range(NAME_TAIL, 0, -1)]
            + [f"after+{k}" for k in range(1, AFTER + 1)] + ["text (middle)"]
            + [f"end[-{k}]" for k in range(END, 0, -1)])


@dataclass
class AveragedTrace:
    labels: list[str]
    recovered: dict[str, np.ndarray]  # kind -> (L, columns); NaN where no question has the column
    counts: np.ndarray  # (columns,) how many questions have each column
    clean: float  # mean clean probability
    corrupted: float  # mean corrupted probability
    n: int  # questions averaged over
    asked: int  # questions in the file


def average_traces(traces: list[Trace], asked: int) -> AveragedTrace:
    """Per question, each column is the mean over its positions; then the mean over questions."""
    labels = aligned_labels()
    kinds = list(traces[0].recovered) if traces else list(KINDS)
    L = traces[0].recovered[kinds[0]].shape[0] if traces else 0
    sums = {k: np.zeros((L, len(labels))) for k in kinds}
    counts = np.zeros(len(labels))
    for t in traces:
        _, cols = aligned_columns(t.point)
        cols = np.array(cols)
        present = np.unique(cols)
        counts[present] += 1
        for k in kinds:
            for c in present:
                sums[k][:, c] += t.recovered[k][:, cols == c].mean(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        recovered = {k: sums[k] / counts for k in kinds}
    n = len(traces)
    return AveragedTrace(labels, recovered, counts, float(np.mean([t.clean for t in traces])) if n else 0.0,
                         float(np.mean([t.corrupted for t in traces])) if n else 0.0, n, asked)


# ---- reporting -------------------------------------------------------------------------------
_SHOWN = {" ": "␣", "\n": "↵", "\t": "⇥"}


def char_labels(text: str) -> list[str]:
    return [_SHOWN.get(c, c) for c in text]


def table(recovered: dict[str, np.ndarray], labels: list[str]) -> str:
    """Markdown table: one row per (kind, layer), one column per position."""
    lines = ["| state | layer | " + " | ".join(labels) + " |",
             "| --- | --- | " + " | ".join("---" for _ in labels) + " |"]
    for kind, grid in recovered.items():
        for layer, row in enumerate(grid):
            cells = " | ".join("" if np.isnan(v) else f"{v:.3f}" for v in row)
            lines.append(f"| {kind} | {layer} | {cells} |")
    return "\n".join(lines)


def strongest(recovered: dict[str, np.ndarray], labels: list[str]) -> dict[str, tuple[int, str, float]]:
    """Per kind, the (layer, position label, recovered probability) of the largest effect."""
    out = {}
    for kind, grid in recovered.items():
        filled = np.where(np.isnan(grid), -np.inf, grid)
        layer, col = np.unravel_index(int(np.argmax(filled)), grid.shape)
        out[kind] = (int(layer), labels[col], float(grid[layer, col]))
    return out


def plot(recovered: dict[str, np.ndarray], labels: list[str], path, title: str = "",
         low: float | None = None, high: float | None = None) -> None:
    """One heatmap per kind side by side: positions along x, layers down, colour = recovered
    probability of the clean answer on a fixed scale, from ``low`` (the corrupted probability)
    to ``high`` (the clean one), or 0-1 when they are not given or not apart: a min-max scale
    would paint noise between nearly equal values as a finding. The colour bar says which."""
    plt = pyplot()

    kinds = list(recovered)
    L, T = recovered[kinds[0]].shape
    width = max(5.0, 0.16 * T + 1.5)
    fig, axes = plt.subplots(len(kinds), 1, figsize=(width, (0.45 * L + 1.3) * len(kinds)), squeeze=False)
    vmin, vmax, scale = colour_scale(low, high)
    for ax, kind in zip(axes[:, 0], kinds):
        image = ax.imshow(recovered[kind], aspect="auto", cmap="Purples", interpolation="nearest",
                          vmin=vmin, vmax=vmax)
        ax.set_title(f"restoring the {'residual stream' if kind == 'residual' else kind + ' output'}",
                     fontsize=9)
        ax.set_xticks(range(T), labels, fontsize=max(4, min(8, 500 // max(T, 1))),
                      rotation=90 if max(map(len, labels)) > 1 else 0)
        ax.set_yticks(range(L), [str(l) for l in range(L)], fontsize=8)
        ax.set_ylabel("layer", fontsize=8)
        bar = fig.colorbar(image, ax=ax, fraction=0.02, pad=0.01)
        bar.set_label(scale, fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def colour_scale(low: float | None, high: float | None) -> tuple[float, float, str]:
    """The heatmap's (vmin, vmax, colour-bar label): corrupted..clean probability, else 0..1."""
    if low is not None and high is not None and high - low > 1e-6:
        return low, high, f"P(clean answer): corrupted {low:.3f} .. clean {high:.3f}"
    return 0.0, 1.0, "P(clean answer), 0..1"
