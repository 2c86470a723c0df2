"""Why several heads and a scale: averaging with two heads against one under noisy keys,
routing information with query, key and value matrices, and the variance of dot products."""

from __future__ import annotations

import math
import os

import torch

from ..core.paths import save_figure
from .base import (
    ExploreOptions, TopicResult, _attend, _fmt, _generator, _orthonormal_columns, _randn, _scale_list, finite_beta,
    need, topic
)


KEY_NOISE = 1e-3  # alpha: the (small) isotropic key variance


def sample_keys(o: ExploreOptions, gen: torch.Generator, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Means ``mu`` (n, d) orthonormal and ``count`` key sets (count, n, d).

    ``k_i ~ N(mu_i, alpha I)`` except ``k_0 = k_a ~ N(mu_a, alpha I + 1/2 mu_a mu_a^T)``.
    """
    mu = _orthonormal_columns(o.dim, o.n, gen).T
    keys = mu + math.sqrt(KEY_NOISE) * _randn(count, o.n, o.dim, gen=gen)
    # Extra variance 1/2 along mu_a: add g * sqrt(1/2) * mu_a with g ~ N(0, 1) (mu_a has unit norm).
    keys[:, 0] += math.sqrt(0.5) * _randn(count, 1, gen=gen) * mu[0]
    return mu, keys


def _spread(x: torch.Tensor) -> dict[str, float]:
    q = torch.quantile(x, torch.tensor([0.05, 0.25, 0.5, 0.75, 0.95], dtype=x.dtype))
    return {
        "mean": x.mean().item(), "std": x.std().item(), "p05": q[0].item(), "q1": q[1].item(),
        "median": q[2].item(), "q3": q[3].item(), "p95": q[4].item(), "iqr": (q[3] - q[1]).item(),
        "near_half": ((x - 0.5).abs() < 0.1).to(x.dtype).mean().item(),
    }


@topic(
    "single-vs-multi-head",
    need(lambda o: o.n >= 2, lambda o: f"needs --n >= 2 keys (a and b), got {o.n}"),
    need(lambda o: o.dim >= o.n, lambda o: f"needs --dim >= --n for orthonormal key means, got dim={o.dim}, n={o.n}"),
    finite_beta(),
    need(lambda o: o.samples >= 10, lambda o: f"needs --samples >= 10 to measure a spread, got {o.samples}"))
def topic_single_vs_multi_head(o: ExploreOptions) -> TopicResult:
    gen = _generator(o.seed)
    mu, keys = sample_keys(o, gen, o.samples)
    values = _orthonormal_columns(o.dim, o.n, gen).T  # orthonormal, so c . v_a is the weight on v_a
    a, b_idx, beta = 0, 1, o.beta
    _, single = _attend(beta * (mu[a] + mu[b_idx]), keys, values)
    _, head1 = _attend(beta * mu[a], keys, values)
    _, head2 = _attend(beta * mu[b_idx], keys, values)
    multi = (head1 + head2) / 2
    w_single = single @ values[a]
    w_multi = multi @ values[a]
    s_single, s_multi = _spread(w_single), _spread(w_multi)
    target = (values[a] + values[b_idx]) / 2
    dist_single = (single - target).norm(dim=1).median().item()
    dist_multi = (multi - target).norm(dim=1).median().item()
    rows = [["", "std", "IQR", "5%", "median", "95%", "frac |w - 1/2| < 0.1", "median ||c - (v_a+v_b)/2||"]]
    for name, s, dist in (("single head", s_single, dist_single), ("two heads", s_multi, dist_multi)):
        rows.append([name, _fmt(s["std"]), _fmt(s["iqr"]), _fmt(s["p05"]), _fmt(s["median"]),
                     _fmt(s["p95"]), _fmt(s["near_half"], 3), _fmt(dist)])
    checks = {
        "single head swings (IQR > 0.5)": s_single["iqr"] > 0.5,
        "two heads: IQR below a quarter of the single-head IQR": s_multi["iqr"] < 0.25 * s_single["iqr"],
        "two heads: median within 0.05 of 1/2": abs(s_multi["median"] - 0.5) < 0.05,
        "two heads: std below half the single-head std": s_multi["std"] < 0.5 * s_single["std"],
    }
    passed = all(checks.values())
    notes = [
        f"{o.samples} key samples, n={o.n}, d={o.dim}, alpha={KEY_NOISE:g}, b={_fmt(beta)}; "
        "table: weight on v_a, measured as c . v_a with orthonormal values",
        "single head q = b (mu_a + mu_b); two heads q_1 = b mu_a, q_2 = b mu_b, outputs averaged",
        "the two-head tail toward 0 comes from samples where k_a's random scale s = 1 + N(0, 1/2) is so "
        "small that b s < ln(n - 1): head 1 then cannot single out k_a; it grows with n and shrinks with b",
        "checks: " + "; ".join(f"{k}: {v}" for k, v in checks.items()),
    ]
    if o.plot_dir:
        path = _plot_histogram(o.plot_dir, w_single, w_multi, beta)
        notes.append(f"histogram written to {path}")
    return TopicResult(
        "single-vs-multi-head",
        "When one key's norm varies randomly, a single head averaging v_a and v_b swings between them, "
        "while two heads that each look up one key and are averaged stay near (v_a + v_b)/2 "
        "(CS224N self-attention notes, multi-head attention).",
        rows,
        notes,
        passed,
        data={"single": s_single, "multi": s_multi, "w_single": w_single, "w_multi": w_multi},
    )


def _plot_histogram(plot_dir: str, w_single: torch.Tensor, w_multi: torch.Tensor, beta: float) -> str:
    # Use the Agg canvas directly so that the global matplotlib backend is left untouched.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    os.makedirs(plot_dir, exist_ok=True)
    path = os.path.join(plot_dir, "single_vs_multi_head.png")
    fig = Figure(figsize=(7, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    bins = [i / 40 for i in range(41)]
    ax.hist(w_single.numpy(), bins=bins, alpha=0.6, label="single head")
    ax.hist(w_multi.numpy(), bins=bins, alpha=0.6, label="two heads, averaged")
    ax.axvline(0.5, color="black", linestyle="--", linewidth=1)
    ax.set_xlabel("weight on v_a in the output")
    ax.set_ylabel("samples")
    ax.set_title(f"Single vs multi-head attention (b = {beta:g})")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    return path


def routing_setup(dim: int, beta: float, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Orthogonal u_a..u_d of norm beta, the inputs x_1..x_3 and the constructed Q, K, V."""
    u = beta * _orthonormal_columns(dim, 4, gen).T
    ua, ub, uc, ud = u
    x = torch.stack([ud + ub, ua, uc + ub])
    V = (torch.outer(ub, ub) - torch.outer(uc, uc)) / beta**2
    K = torch.outer(ud, ud) + torch.outer(uc, uc)
    Q = torch.outer(ud, ua) + torch.outer(uc, ud)
    return {"ua": ua, "ub": ub, "uc": uc, "ud": ud, "x": x, "Q": Q, "K": K, "V": V}


def self_attention(x: torch.Tensor, Q: torch.Tensor | None = None, K: torch.Tensor | None = None,
                   V: torch.Tensor | None = None) -> torch.Tensor:
    """c_i = sum_j softmax_j(q_i . k_j) v_j with q_i = Q x_i, k_j = K x_j, v_j = V x_j (identity if None)."""
    q = x if Q is None else x @ Q.T
    k = x if K is None else x @ K.T
    v = x if V is None else x @ V.T
    return torch.softmax(q @ k.T, dim=-1) @ v


@topic(
    "routing",
    need(lambda o: o.dim >= 4, lambda o: f"needs --dim >= 4 (four orthogonal directions u_a..u_d), got {o.dim}"),
    finite_beta("(the norm of the u's)"))
def topic_routing(o: ExploreOptions) -> TopicResult:
    betas = _scale_list([1, 2, 3], o.beta)
    rows = [["beta", "plain ||c_2 - u_a||/beta", "KQV ||c_2 - u_b||/beta", "KQV ||c_1 - (u_b - u_c)||/beta"]]
    plain_err, c2_err, c1_err = [], [], []
    for beta in betas:
        s = routing_setup(o.dim, beta, _generator(o.seed))
        plain = self_attention(s["x"])
        kqv = self_attention(s["x"], s["Q"], s["K"], s["V"])
        plain_err.append((plain[1] - s["ua"]).norm().item() / beta)
        c2_err.append((kqv[1] - s["ub"]).norm().item() / beta)
        c1_err.append((kqv[0] - (s["ub"] - s["uc"])).norm().item() / beta)
        rows.append([_fmt(beta), _fmt(plain_err[-1]), _fmt(c2_err[-1]), _fmt(c1_err[-1])])
    tol = 1e-3
    passed = plain_err[-1] < tol and c2_err[-1] < tol and c1_err[-1] < tol
    notes = [
        "x_1 = u_d + u_b, x_2 = u_a, x_3 = u_c + u_b with orthogonal u's of norm beta; errors relative to beta",
        "convention: q_i = Q x_i, k_j = K x_j, v_j = V x_j; then k_1 = beta^2 u_d, k_2 = 0, k_3 = beta^2 u_c, "
        "q_1 = beta^2 u_c, q_2 = beta^2 u_d, v_1 = u_b, v_2 = 0, v_3 = u_b - u_c",
        "so position 2 scores beta^6 on position 1 (and 0 elsewhere) and copies v_1 = u_b; position 1 "
        "scores beta^6 on position 3 and copies v_3 = u_b - u_c; plain attention scores beta^2 on itself only",
        f"all relative errors below {tol:g} at beta={_fmt(betas[-1])}: {passed}",
    ]
    return TopicResult(
        "routing",
        "Plain self-attention (q = k = v = x) mostly attends to itself, so c_2 ~ u_a; key, query and value "
        "matrices let a position look up another by content and move information: c_2 ~ u_b, "
        "c_1 ~ u_b - u_c (CS224N self-attention notes).",
        rows,
        notes,
        passed,
        data={"betas": betas, "plain": plain_err, "c2": c2_err, "c1": c1_err},
    )


def _dot_samples(d: int, samples: int, gen: torch.Generator) -> torch.Tensor:
    """``samples`` values of q . k for q, k with independent N(0, 1) components in R^d."""
    out = []
    chunk = max(1, 4_000_000 // max(d, 1))
    remaining = samples
    while remaining > 0:
        m = min(chunk, remaining)
        q, k = _randn(m, d, gen=gen), _randn(m, d, gen=gen)
        out.append((q * k).sum(dim=1))
        remaining -= m
    return torch.cat(out)


def temperature_tolerance(d: int, samples: int) -> float:
    """Five standard errors of a sample variance / true variance for q . k in dimension d.

    Each q_i k_i has variance 1 and fourth moment 9, so q . k has excess kurtosis 6/d and the
    relative standard error of its sample variance is sqrt((2 + 6/d) / (samples - 1)).
    """
    return 5.0 * math.sqrt((2.0 + 6.0 / d) / (samples - 1))


@topic(
    "temperature",
    need(lambda o: o.dim >= 1, lambda o: f"needs --dim >= 1, got {o.dim}"),
    need(lambda o: o.samples >= 100, lambda o: f"needs --samples >= 100 to estimate a variance, got {o.samples}"))
def topic_temperature(o: ExploreOptions) -> TopicResult:
    gen = _generator(o.seed)
    dims = sorted({1, 4, 16, 64, 256, 1024, o.dim})
    rows = [["d", "Var(q.k)", "Var(q.k)/d", "Var(q.k/sqrt d)", "tolerance"]]
    raw, scaled, tols = [], [], []
    ok = True
    for d in dims:
        dots = _dot_samples(d, o.samples, gen)
        var = dots.var().item()
        var_scaled = (dots / math.sqrt(d)).var().item()
        tol = temperature_tolerance(d, o.samples)
        ok &= abs(var / d - 1) < tol and abs(var_scaled - 1) < tol
        raw.append(var)
        scaled.append(var_scaled)
        tols.append(tol)
        rows.append([str(d), _fmt(var), _fmt(var / d), _fmt(var_scaled), _fmt(tol, 3)])
    passed = ok
    notes = [
        f"{o.samples} pairs (q, k) with independent N(0, 1) components per d",
        "tolerance: 5 standard errors of the relative sample variance, sqrt((2 + 6/d)/(samples - 1))",
        "without scaling, scores of size sqrt(d) push softmax toward one-hot and its gradients toward zero",
        f"Var(q.k)/d and Var(q.k/sqrt d) within tolerance of 1 for every d: {passed}",
    ]
    return TopicResult(
        "temperature",
        "For q, k with independent unit-variance components, Var(q . k) = d, so dot-product scores grow "
        "with the dimension; dividing by sqrt(d) keeps their variance near 1 "
        "(scaled dot-product attention, CS224N self-attention notes).",
        rows,
        notes,
        passed,
        data={"dims": dims, "var": raw, "var_scaled": scaled, "tolerance": tols},
    )
