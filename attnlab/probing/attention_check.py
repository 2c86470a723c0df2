"""The checks a grader would run on an attention layer (``attnlab check-attention``), in seconds.

``check_attention("FILE.py:ClassName")`` builds the layer on a small config (or a registry
variant by name) and runs, each to a pass or fail with its reason and the smallest failing
example: output shape and dtype (and finite values); causality, by gradients, for every
position; batch independence; the same output in training and eval mode without dropout;
no dropout at inference, and in training finite, causal outputs with dropout;
gradients reaching every parameter; the parameter count against vanilla; determinism under a
seed; the KV-cache decode against the full forward (the lab's interface promises it; the
course's does not, so it is skipped there); and with ``same_as``, equality to a lab variant
(1e-6 of the output's scale) after copying its weights across by name, or, where the names
differ, by role (docs/guides/your-attention.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import Tensor, nn

from ..config.settings import ModelConfig
from ..model.attention import KVCache, base_name, build_attention, masks, plugin
from ..model.attention.base import Attention, DotProductAttention
from ..model.attention.rotary import RotaryAttention
from ..model.attention.synthesizer import SynthesizerAttention

TOL = 1e-6  # equality with a lab variant, relative to the output's largest entry (at least 1)
GRAD_TOL = 1e-10  # a gradient this small counts as none (masked keys give exactly zero)
STD = 0.3  # weights drawn N(0, STD): large enough that a missing scale or a leak shows


@dataclass
class Check:
    name: str
    status: str  # pass, fail or skip
    reason: str
    example: str = ""  # the smallest failing example, for a failure


@dataclass
class Report:
    attention: str
    interface: str
    parameters: int
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"attention": self.attention, "interface": self.interface, "parameters": self.parameters,
                "passed": self.passed, "checks": [dataclasses.asdict(c) for c in self.checks]}

    def text(self) -> str:
        lines = [f"check-attention {self.attention} ({self.interface} interface, {self.parameters:,} parameters)"]
        for c in self.checks:
            lines.append(f"  {c.status.upper() if c.status == 'fail' else c.status:4}  {c.name}: {c.reason}")
            if c.example:
                lines.append(f"        smallest failing example: {c.example}")
        failed = sum(c.status == "fail" for c in self.checks)
        lines.append(f"{failed} of {len(self.checks)} checks failed" if failed else "every check passed")
        return "\n".join(lines)


def check_config(attention: str, **changes: Any) -> ModelConfig:
    """The small config the checks build layers with: 4 heads of width 8, 16 positions."""
    base = dict(vocab_size=8, block_size=16, n_layer=1, n_head=4, n_embd=32, dropout=0.0, attention=attention)
    return ModelConfig(**{**base, **changes})


class Subject:
    """The layer under test: how to build it (seeded), run it and name errors in its code."""

    def __init__(self, name: str, config: ModelConfig):
        self.name, self.config = name, config
        self.source = plugin.source_of(base_name(name)) if plugin.is_plugin(name) else None
        self.layer = self.build(0)

    @property
    def course(self) -> bool:
        return isinstance(self.layer, plugin.CourseAttention)

    def build(self, seed: int, **changes: Any) -> Attention:
        torch.manual_seed(seed)
        layer = build_attention(dataclasses.replace(self.config, **changes) if changes else self.config)
        randomise(layer, seed)
        return layer.eval()

    def run(self, x: Tensor, layer: Attention | None = None) -> Tensor:
        positions = torch.arange(x.shape[1])[None]
        return (layer or self.layer)(x, positions)[0]

    def error(self, e: Exception, doing: str) -> str:
        if self.source is None:
            return f"{type(e).__name__} while {doing}: {e}"
        return plugin.user_error(e, self.source, doing)


def randomise(layer: nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * STD)


def inputs(B: int, T: int, C: int, seed: int = 1) -> Tensor:
    return torch.randn(B, T, C, generator=torch.Generator().manual_seed(seed))


def check_attention(name: str, same_as: str | None = None, *, config: ModelConfig | None = None) -> Report:
    """Every check on the attention ``name`` (FILE.py:ClassName, package.module:ClassName or a
    registry variant); ``same_as`` a lab variant it should equal after copying weights."""
    subject = Subject(name, config or check_config(name))
    count = sum(p.numel() for p in subject.layer.parameters())
    report = Report(plugin.label(name), "course" if subject.course else "lab", count)
    checks: list[tuple[str, Callable[[Subject], Check]]] = [
        ("shape and dtype", shape_and_dtype), ("causality", causality),
        ("batch independence", batch_independence), ("train and eval alike", train_equals_eval),
        ("no dropout in eval", no_dropout_in_eval), ("dropout in training", dropout_in_training),
        ("gradients reach every parameter", gradients_reach), ("parameter count", parameter_count),
        ("deterministic under a seed", deterministic), ("KV-cache decode", cache_decode)]
    if same_as is not None:
        checks.append((f"same as {same_as}", lambda s: same_as_variant(s, same_as)))
    for title, check in checks:
        try:
            result = check(subject)
        except Exception as e:  # noqa: BLE001: the user's code may raise anything: a failure
            result = Check(title, "fail", subject.error(e, f"checking {title}"))
        result.name = title
        report.checks.append(result)
    return report


def shape_and_dtype(s: Subject) -> Check:
    C = s.config.n_embd
    for dtype in (torch.float32, torch.float64):
        try:
            y = s.run(inputs(2, 8, C).to(dtype), s.layer.to(dtype))
        except Exception as e:  # noqa: BLE001: the user's code may raise anything
            return Check("", "fail", s.error(e, "checking shape and dtype") + runs_at_block_only(s))
        finally:
            s.layer.to(torch.float32)
        if not isinstance(y, Tensor) or y.shape != (2, 8, C) or y.dtype != dtype:
            got = f"{tuple(y.shape)} {y.dtype}" if isinstance(y, Tensor) else type(y).__name__
            return Check("", "fail", f"input (2, 8, {C}) {dtype} gave {got}; expected (2, 8, {C}) {dtype}",
                         f"x = torch.randn(2, 8, {C}, dtype={dtype})")
        if not bool(torch.isfinite(y).all()):
            bad = (~torch.isfinite(y)).nonzero()[0].tolist()
            return Check("", "fail", "the output holds NaN or infinite values (a row with no visible key?)",
                         f"T=8, output[{bad[0]}, {bad[1]}] is {y[tuple(bad)].item()}")
    return Check("", "pass", f"(B, T, {C}) in, (B, T, {C}) out, in float32 and float64, finite")


def runs_at_block_only(s: Subject) -> str:
    """A hint, where the layer fails on 8 positions, that it runs on exactly block_size."""
    try:
        with torch.no_grad():
            s.run(inputs(2, s.config.block_size, s.config.n_embd))
    except Exception:  # noqa: BLE001
        return ""
    return (f" (it runs with T={s.config.block_size}, the block size, only: a mask or table not cut to the "
            "input's length, as mask[:, :, :T, :T]?)")


def dependence(s: Subject, x: Tensor, out: Callable[[Tensor], Tensor]) -> Tensor:
    """|d out(y).sum() / d x| for the layer's output y."""
    x = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(out(s.run(x)).sum(), x, allow_unused=True)
    return torch.zeros_like(x) if g is None else g.abs()


def causality(s: Subject) -> Check:
    """For every position t, no gradient from output t to a later input; at the smallest T."""
    if not s.config.causal:
        return Check("", "skip", "the config is bidirectional")
    C = s.config.n_embd
    for T in range(2, s.config.block_size + 1):
        x = inputs(1, T, C)
        for t in range(T - 1):
            g = dependence(s, x, lambda y: y[0, t]).sum(-1)[0]  # (T,)
            later = (g[t + 1:] > GRAD_TOL).nonzero()
            if len(later):
                j = t + 1 + int(later[0])
                return Check("", "fail", f"output position {t} depends on input position {j}, a later one "
                             f"({leak_kind(s)})", f"T={T}: d output[{t}] / d x[{j}] has size {float(g[j]):.3g}")
    return Check("", "pass", f"no output depends on a later input (every position, T=2..{s.config.block_size})")


def leak_kind(s: Subject) -> str:
    """What the pattern of later inputs each output depends on (at the full block) suggests."""
    T = s.config.block_size
    x = inputs(1, T, s.config.n_embd)
    seen = [{j for j in range(t + 1, T) if float(dependence(s, x, lambda y: y[0, t]).sum(-1)[0, j]) > GRAD_TOL}
            for t in range(T - 1)]
    if all(later == {t + 1} for t, later in enumerate(seen)):
        return "off by one: each position also sees the next, as with tril(..., diagonal=1)"
    if all(later == set(range(t + 1, T)) for t, later in enumerate(seen)):
        return ("every position sees every later one: the mask applied after the softmax, future scores "
                "filled with 0 rather than -inf, or the softmax over the queries' axis?")
    return "an irregular leak: heads split or merged with view() where a transpose is needed?"


def batch_independence(s: Subject) -> Check:
    C = s.config.n_embd
    for T in range(1, 9):
        g = dependence(s, inputs(2, T, C), lambda y: y[0]).sum(-1)[1]  # row 0's output vs row 1's input
        if bool((g > GRAD_TOL).any()):
            j = int((g > GRAD_TOL).nonzero()[0])
            return Check("", "fail", "row 0's output depends on row 1's input (a reshape or reduction across "
                         "the batch?)", f"B=2, T={T}: d output[0] / d x[1, {j}] is not zero")
    return Check("", "pass", "no row's output depends on another row's input")


def beyond_tolerance(got: Tensor, reference: Tensor) -> float | None:
    """The largest difference of ``got`` from ``reference`` when it exceeds TOL (relative to the
    reference's size, at least 1), else None."""
    diff = float((got - reference).abs().max())
    return diff if diff > TOL * max(1.0, float(reference.abs().max())) else None


def train_equals_eval(s: Subject) -> Check:
    x = inputs(2, 8, s.config.n_embd)
    with torch.no_grad():
        evaluated = s.run(x)
        trained = s.run(x, s.layer.train())
    s.layer.eval()
    diff = beyond_tolerance(trained, evaluated)
    if diff is not None:
        return Check("", "fail", "with dropout 0 the output differs between train() and eval() (a dropout "
                     "rate not read from the config, or other train-only behaviour)",
                     f"B=2, T=8: largest difference {diff:.3g}")
    return Check("", "pass", "with dropout 0, train() and eval() give the same output")


def no_dropout_in_eval(s: Subject) -> Check:
    """Built with dropout 0.5 (the same weights), the layer in eval() must give the output of
    dropout 0: ``F.dropout(x, p)`` drops unless told ``training=self.training``, at inference too."""
    dropping = s.build(0, dropout=0.5)
    for T in range(2, s.config.block_size + 1):
        x = inputs(2, T, s.config.n_embd)
        with torch.no_grad():
            plain, evaluated = s.run(x), s.run(x, dropping)
        diff = beyond_tolerance(evaluated, plain)
        if diff is not None:
            return Check("", "fail", "built with dropout 0.5, the layer in eval() differs from dropout 0: it drops "
                         "at inference (F.dropout(x, p) needs training=self.training; nn.Dropout follows eval())",
                         f"T={T}, B=2, dropout 0.5, eval(): largest difference {diff:.3g}")
    return Check("", "pass", "built with dropout 0.5, eval() gives the dropout-0 output: no dropout at inference")


def dropout_in_training(s: Subject) -> Check:
    """Built with dropout 0.5 and in train(), the layer must still give finite values that no
    later input reaches: dropout applied to the masked scores before the softmax multiplies a
    dropped -inf by 0, which is NaN, so training diverges at its first step while every check in
    eval() passes."""
    dropping = s.build(0, dropout=0.5).train()
    C = s.config.n_embd
    for T in range(2, s.config.block_size + 1):
        torch.manual_seed(T)
        x = inputs(2, T, C).requires_grad_(True)
        y = s.run(x, dropping)
        if not bool(torch.isfinite(y).all()):
            b, t = ((~torch.isfinite(y.detach())).nonzero()[0, :2]).tolist()
            return Check("", "fail", "built with dropout 0.5, the layer in train() gives NaN or infinite values "
                         "(dropout applied to the scores before the softmax turns a dropped -inf into NaN: "
                         "drop the attention weights after the softmax)",
                         f"T={T}, B=2, dropout 0.5, train(): output[{b}, {t}] is {float(y.detach()[b, t].sum()):.3g}")
        for t in range(T - 1):
            (g,) = torch.autograd.grad(y[:, t].sum(), x, retain_graph=True, allow_unused=True)
            later = [] if g is None else (g[:, t + 1:].abs().sum((0, 2)) > GRAD_TOL).nonzero()
            if len(later):
                j = t + 1 + int(later[0])
                return Check("", "fail", f"built with dropout 0.5, in train() output position {t} depends on input "
                             f"position {j}, a later one (a mask applied in eval() only?)", f"T={T}, B=2, dropout 0.5, train(): d output[{t}] / d x[{j}]")
    with torch.no_grad():
        x = inputs(2, s.config.block_size, C)
        drops = beyond_tolerance(s.run(x, dropping), s.run(x)) is not None
    how = "and it drops" if drops else "though nothing is dropped: no dropout in the layer (a choice, not an error)"
    return Check("", "pass", f"built with dropout 0.5, train() gives finite outputs no later input reaches, {how}")


def gradients_reach(s: Subject) -> Check:
    x = inputs(2, 8, s.config.n_embd)
    layer = s.layer
    params = dict(layer.named_parameters())
    grads = torch.autograd.grad(s.run(x).square().sum(), list(params.values()), allow_unused=True)
    missing = [n for (n, _), g in zip(params.items(), grads) if g is None]
    if missing:
        return Check("", "fail", f"no gradient reaches {', '.join(missing)} (not used in the forward, or "
                     "detached)", f"B=2, T=8, loss = output.square().sum(): {missing[0]}.grad is None")
    zero = [n for (n, _), g in zip(params.items(), grads) if float(g.abs().max()) <= GRAD_TOL]
    note = f"; exactly zero for {', '.join(zero)} (a key bias is: the softmax cancels it)" if zero else ""
    return Check("", "pass", f"every one of {len(params)} parameters gets a gradient{note}")


def parameter_count(s: Subject) -> Check:
    mine = sum(p.numel() for p in s.layer.parameters())
    vanilla = sum(p.numel() for p in build_attention(dataclasses.replace(s.config, attention="vanilla")).parameters())
    change = f"{(mine - vanilla) / vanilla:+.0%}" if vanilla else ""
    return Check("", "pass", f"{mine:,} parameters; vanilla has {vanilla:,} ({change}) at n_embd "
                 f"{s.config.n_embd}, {s.config.n_head} heads, block {s.config.block_size}")


def deterministic(s: Subject) -> Check:
    x = inputs(2, 8, s.config.n_embd)
    torch.manual_seed(7)
    first = build_attention(s.config)
    torch.manual_seed(7)
    second = build_attention(s.config)
    for (name, a), b in zip(first.state_dict().items(), second.state_dict().values()):
        if not torch.equal(a, b):
            return Check("", "fail", f"two layers built under the same seed differ in {name}",
                         "torch.manual_seed(7) before each build")
    with torch.no_grad():
        y1, y2 = s.run(x, first.eval()), s.run(x, first)
    if not torch.equal(y1, y2):
        return Check("", "fail", "the same input gives different outputs in eval mode (randomness outside "
                     "dropout?)", f"B=2, T=8: largest difference {float((y1 - y2).abs().max()):.3g}")
    return Check("", "pass", "the same seed builds the same layer; the same input gives the same output")


def cache_decode(s: Subject) -> Check:
    """Decoding position by position from the cache equals the full forward (lab interface)."""
    if s.course:
        return Check("", "skip", "the course interface promises no cache (the lab runs the module again on "
                     "the cached inputs)")
    if not s.config.causal:
        return Check("", "skip", "the config is bidirectional")
    T = 8
    x, pos = inputs(2, T, s.config.n_embd), torch.arange(T)[None]
    for fast in (True, False):
        layer = s.layer.set_fast(fast)
        with torch.no_grad():
            full = layer(x, pos)[0]
            cache = KVCache()
            steps = [layer(x[:, :1], pos[:, :1], cache=cache)[0]]
            for t in range(1, T):
                allowed = masks.causal(1, t + 1)[None, None]
                steps.append(layer(x[:, t:t + 1], pos[:, t:t + 1], allowed=allowed, cache=cache,
                                   key_positions=pos[:, :t + 1])[0])
        decoded = torch.cat(steps, 1)
        bad = ((decoded - full).abs() > 1e-5 * max(1.0, float(full.abs().max()))).any(-1).any(0)
        if bool(bad.any()):
            t = int(bad.nonzero()[0])
            return Check("", "fail", f"decoding from the KV cache differs from the full forward "
                         f"({'fast' if fast else 'plain'} path)", f"T={T}: position {t}")
    s.layer.set_fast(True)
    return Check("", "pass", "position-by-position decoding equals the full forward (fast and plain paths)")


def same_as_variant(s: Subject, variant: str) -> Check:
    """After copying ``variant``'s (random) weights in, the outputs agree to TOL. Weights are
    copied by name; a layer whose names differ but whose parameters all belong to linear layers
    (nanoGPT's fused ``c_attn`` and ``c_proj``) gets them by role: each assignment of the
    variant's linear layers to its own by shape is tried, and the one closest to the variant's
    output is compared (``role_assignments``)."""
    reference = s.build(3, attention=variant)
    by_name = weight_map(s.layer, reference)
    if isinstance(by_name, str):
        tried = role_assignments(s.layer, reference)
        if not tried:
            return Check("", "fail", f"cannot copy {variant}'s weights: {by_name}")
        x = inputs(2, s.config.block_size, s.config.n_embd)
        with torch.no_grad():
            want = s.run(x, reference)
            assignment = min(tried, key=lambda a: float((s.run(x, loaded(s, reference, a)) - want).abs().max()))
        how = f"by role ({describe(assignment)}; the names differ from {variant}'s)"
    else:
        assignment, how = {name: [ref] for name, ref in by_name.items()}, "by name"
    mine = loaded(s, reference, assignment)
    with torch.no_grad():
        for T in range(1, s.config.block_size + 1):
            x = inputs(2, T, s.config.n_embd)
            got, want = s.run(x, mine), s.run(x, reference)
            diff = (got - want).abs()
            if not bool((diff <= TOL * max(1.0, float(want.abs().max()))).all()):
                b, t, c = (int(i) for i in (diff == diff.max()).nonzero()[0])
                mistake = explained_by(s, mine, reference)
                why = (f"it equals {variant} with {mistake}" if mistake
                       else "missing scale, wrong mask or head split?")
                return Check("", "fail", f"the output differs from {variant}'s with the same weights, copied "
                             f"{how} (largest difference {float(diff.max()):.3g}; {why})",
                             f"T={T}: output[{b}, {t}, {c}] is {float(got[b, t, c]):.6g}, {variant} gives "
                             f"{float(want[b, t, c]):.6g}")
    return Check("", "pass", f"equal to {variant} to {TOL:g} for T=1..{s.config.block_size} after copying its "
                 f"{sum(map(len, assignment.values()))} weight tensors {how}")


def _scaled(scale: Callable[[int, int], float]) -> Callable[[type, int], dict[str, Callable]]:
    """Hooks making a query-key class score with ``scale(d, C)``: d a head's width in the
    layer under test, C the model's width."""
    def hooks(cls: type, d: int) -> dict[str, Callable]:
        def queries_keys(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, float]:
            q, k, _ = cls.queries_keys(self, x, positions)
            return q, k, scale(d, self.config.n_embd)
        return {"queries_keys": queries_keys}
    return hooks


def _keys_queries_swapped(cls: type, d: int) -> dict[str, Callable]:
    """Scores computed as k q^T (each key against the later queries) where the course has q k^T."""
    def queries_keys(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, float]:
        q, k, scale = cls.queries_keys(self, x, positions)
        return k, q, scale
    return {"queries_keys": queries_keys}


def _rotary_halves(cls: type, d: int) -> dict[str, Callable]:
    """Rotary pairing coordinate i with i + e/2 (GPT-NeoX's rotate_half) instead of 2i with 2i+1."""
    def with_positions(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        e = q.shape[-1]
        order = torch.arange(e).view(2, e // 2).t().reshape(-1)  # 0, e/2, 1, e/2+1, ...
        q, k = cls.with_positions(self, q[..., order], k[..., order], positions)
        back = torch.argsort(order)
        return q[..., back], k[..., back]
    return {"with_positions": with_positions}


def _rotary_values(cls: type, d: int) -> dict[str, Callable]:
    """Rotary applied to the values as well as the queries and keys."""
    def projections(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor, float]:
        q, k, v, scale = cls.projections(self, x, positions)
        return q, k, self.with_positions(v, v, positions)[0], scale
    return {"projections": projections}


def _rotary_one_side(side: str) -> Callable[[type, int], dict[str, Callable]]:
    """Rotary applied to the queries only, or to the keys only."""
    def hooks(cls: type, d: int) -> dict[str, Callable]:
        def with_positions(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
            rq, rk = cls.with_positions(self, q, k, positions)
            return (rq, k) if side == "queries" else (q, rk)
        return {"with_positions": with_positions}
    return hooks


def _rotary_reversed(cls: type, d: int) -> dict[str, Callable]:
    """Rotary turning each pair by -angle (sin's sign flipped): flipping each pair's second
    coordinate before and after the course's rotation turns it the other way."""
    def with_positions(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        flip = torch.ones(q.shape[-1], dtype=q.dtype, device=q.device)
        flip[1::2] = -1
        rq, rk = cls.with_positions(self, q * flip, k * flip, positions)
        return rq * flip, rk * flip
    return {"with_positions": with_positions}


def _rotary_frequencies(cls: type, d: int) -> dict[str, Callable]:
    """Rotary with angles t * base^(-i/e) for pair i, where the course has base^(-2i/e)."""
    def tables(self) -> dict[str, Tensor]:
        e = self.head_dim
        angles = torch.arange(self.config.block_size, dtype=torch.float32)[:, None] * \
            10_000.0 ** (-torch.arange(e // 2, dtype=torch.float32) / e)
        return {"cos": angles.cos(), "sin": angles.sin()}
    return {"tables": tables}


def _synthesizer_without_relu(cls: type, d: int) -> dict[str, Callable]:
    """The synthesizer's hidden layer without its ReLU."""
    def queries_keys(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, float]:
        _, k, scale = cls.queries_keys(self, x, positions)
        return self.split_heads(self.w1(x)), k, scale
    return {"queries_keys": queries_keys}


def _synthesizer_without_b2(cls: type, d: int) -> dict[str, Callable]:
    """The synthesizer's scores without the bias b_2."""
    def score_bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return torch.zeros_like(cls.score_bias(self, q_pos, k_pos))
    return {"score_bias": score_bias}


# A student's usual slips, each as (what the layer does, the reference class it is made in, the
# heads it attends with (None: the config's), the hooks that make it in that class).
SLIPS: tuple[tuple[str, type, int | None, Callable[[type, int], dict[str, Callable]]], ...] = (
    ("scores not scaled by 1/sqrt(d/h)", DotProductAttention, None, _scaled(lambda d, C: 1.0)),
    ("scores scaled by 1/sqrt(n_embd), the model's width, not 1/sqrt(n_embd/n_head), a head's",
     DotProductAttention, None, _scaled(lambda d, C: C ** -0.5)),
    ("scores scaled by 1/(d/h) instead of 1/sqrt(d/h)", DotProductAttention, None, _scaled(lambda d, C: 1.0 / d)),
    ("scores multiplied by sqrt(d/h) instead of divided", DotProductAttention, None, _scaled(lambda d, C: d ** 0.5)),
    ("the scores' two factors swapped: k @ q^T where the course computes q @ k^T", DotProductAttention, None,
     _keys_queries_swapped),
    ("one head of the full width: the input never split into heads", DotProductAttention, 1,
     _scaled(lambda d, C: C ** -0.5)),
    ("one head of the full width (the input never split into heads), scaled by 1/sqrt(d/h)",
     DotProductAttention, 1, _scaled(lambda d, C: d ** -0.5)),
    ("coordinates paired as (i, i + e/2), GPT-NeoX's rotate_half, where the course pairs (2i, 2i+1)",
     RotaryAttention, None, _rotary_halves),
    ("the rotation applied to the values too", RotaryAttention, None, _rotary_values),
    ("the rotation applied to the queries only, not the keys", RotaryAttention, None, _rotary_one_side("queries")),
    ("the rotation applied to the keys only, not the queries", RotaryAttention, None, _rotary_one_side("keys")),
    ("each pair turned by -angle (the sign of sin flipped)", RotaryAttention, None, _rotary_reversed),
    ("angles t * 10000^(-i/e) where the course has 10000^(-2i/e)", RotaryAttention, None, _rotary_frequencies),
    ("no ReLU after X A_i + b_1", SynthesizerAttention, None, _synthesizer_without_relu),
    ("no b_2 added to the scores", SynthesizerAttention, None, _synthesizer_without_b2),
    ("scores scaled by 1/sqrt(d/h), which the synthesizer does not do", SynthesizerAttention, None,
     _scaled(lambda d, C: d ** -0.5)),
)


def explained_by(s: Subject, mine: nn.Module, reference: nn.Module) -> str | None:
    """Which of SLIPS, made in the reference's class with the same weights, gives the layer's
    output at every length; None when none does (or none applies to the reference)."""
    d, C = s.config.n_embd // s.config.n_head, s.config.n_embd
    xs = [inputs(2, T, C) for T in range(1, s.config.block_size + 1)]
    with torch.no_grad():
        outputs = [s.run(x, mine) for x in xs]  # the layer's, once for every slip
    for what, family, heads, hooks in SLIPS:
        if not isinstance(reference, family):
            continue
        config = dataclasses.replace(reference.config, n_head=heads or s.config.n_head)
        slipped = slipped_reference(reference, config, hooks(type(reference), d))
        with torch.no_grad():
            if all(beyond_tolerance(out, s.run(x, slipped)) is None for x, out in zip(xs, outputs)):
                return what
    return None


def slipped_reference(reference: Attention, config: ModelConfig, hooks: dict[str, Callable]) -> Attention:
    """``reference``'s class with ``hooks`` in place of its methods, built on ``config``, with its weights."""
    cls = type(reference)
    slipped = type(cls.__name__, (cls,), hooks)(config)
    with torch.no_grad():
        params = dict(slipped.named_parameters())
        for name, p in reference.named_parameters():
            params[name].copy_(p)
    return slipped.eval()


def loaded(s: Subject, reference: nn.Module, assignment: dict[str, list[str]]) -> Attention:
    """The layer under test (seed 0) with each parameter set from the reference's named
    parameters, stacked along the first dimension where it takes several."""
    mine = s.build(0)
    ref = dict(reference.named_parameters())
    with torch.no_grad():
        params = dict(mine.named_parameters())
        for name, sources in assignment.items():
            params[name].copy_(torch.cat([ref[r] for r in sources]))
    return mine


def describe(assignment: dict[str, list[str]]) -> str:
    weights = [(name, sources) for name, sources in assignment.items() if name.endswith("weight")]
    return ", ".join(f"{name.removeprefix('inner.').removesuffix('.weight')} <- "
                     f"{'+'.join(r.removesuffix('.weight') for r in sources)}" for name, sources in weights)


MAX_ASSIGNMENTS = 720  # role assignments tried at most (six linear layers in any order)


def role_assignments(layer: nn.Module, reference: nn.Module) -> list[dict[str, list[str]]]:
    """Every way to give each linear layer of ``layer`` a run of the reference's linear layers
    (same input width, output widths adding up to its own, each reference layer used once, biases
    present alike), as parameter name -> reference names stacked; [] when a parameter of either
    belongs to no linear layer, or no way fits."""
    mine, theirs = _linears(layer), _linears(reference)
    if mine is None or theirs is None:
        return []
    found: list[dict[str, list[str]]] = []

    def extend(i: int, used: tuple[str, ...], assignment: dict[str, list[str]]) -> None:
        if len(found) >= MAX_ASSIGNMENTS:
            return
        if i == len(mine):
            if len(used) == len(theirs):
                found.append(assignment)
            return
        name, linear = mine[i]
        for run in _runs(linear, [(n, m) for n, m in theirs if n not in used]):
            step = {f"{name}.weight": [f"{n}.weight" for n, _ in run]}
            if linear.bias is not None:
                step[f"{name}.bias"] = [f"{n}.bias" for n, _ in run]
            extend(i + 1, used + tuple(n for n, _ in run), {**assignment, **step})

    extend(0, (), {})
    return found


def _linears(module: nn.Module) -> list[tuple[str, nn.Linear]] | None:
    """The module's linear layers by name, or None when some parameter belongs to none."""
    linears = [(n, m) for n, m in module.named_modules() if isinstance(m, nn.Linear)]
    covered = {f"{n}.{p}" for n, m in linears for p, _ in m.named_parameters(recurse=False)}
    return linears if {n for n, _ in module.named_parameters()} == covered else None


def _runs(linear: nn.Linear, free: list[tuple[str, nn.Linear]], taken: tuple = ()):
    """Ordered runs of ``free`` linear layers that stack into ``linear``'s weight."""
    width = sum(m.out_features for _, m in taken)
    if width == linear.out_features:
        yield taken
        return
    for n, m in free:
        if (m.in_features == linear.in_features and width + m.out_features <= linear.out_features
                and (m.bias is None) == (linear.bias is None) and all(n != t for t, _ in taken)):
            yield from _runs(linear, free, taken + ((n, m),))


def weight_map(layer: nn.Module, reference: nn.Module) -> dict[str, str] | str:
    """Each parameter of ``layer`` -> the reference's of the same name (a course module's
    ``inner.`` prefix dropped) and shape; or what does not fit."""
    ref = {n: p.shape for n, p in reference.named_parameters()}
    mapping, problems = {}, []
    for name, p in layer.named_parameters():
        short = name.removeprefix("inner.")
        if short not in ref:
            problems.append(f"{short} has no counterpart")
        elif ref[short] != p.shape:
            problems.append(f"{short} is {list(p.shape)}, the variant's {list(ref[short])}")
        else:
            mapping[name] = short
    unmatched = sorted(set(ref) - set(mapping.values()))
    if unmatched:
        problems.append(f"the variant's {', '.join(unmatched)} not found")
    return "; ".join(problems) if problems else mapping

