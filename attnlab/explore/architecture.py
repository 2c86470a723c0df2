"""The architecture around attention: merged query-key matrices, the receptive field of
hard attention through layers, and added against concatenated position embeddings."""

from __future__ import annotations

import math

import torch

from ..model.positions import sinusoidal_table
from .base import DTYPE, ExploreOptions, TopicResult, _fmt, _generator, _randn, need, topic


@topic(
    "merged-qk",
    need(lambda o: o.dim >= 2, lambda o: f"needs --dim >= 2 (model width J, head width I = J/2), got {o.dim}"),
    need(lambda o: o.n >= 1, lambda o: f"needs --n >= 1 positions, got {o.n}"))
def topic_merged_qk(o: ExploreOptions) -> TopicResult:
    gen = _generator(o.seed)
    J = o.dim
    widths = sorted({max(1, J // 8), max(1, J // 4), J // 2, J})
    rows = [["head width I", "separate W_Q, W_K", "2 I J", "merged W", "J^2", "cheaper"]]
    counts = []
    ok_counts = True
    for I in widths:
        # Meta-device modules: real parameter shapes, no memory, no draw from the global RNG.
        query = torch.nn.Linear(J, I, bias=False, device="meta")
        key = torch.nn.Linear(J, I, bias=False, device="meta")
        separate = sum(p.numel() for m in (query, key) for p in m.parameters())
        merged = torch.nn.Parameter(torch.empty(J, J, device="meta")).numel()
        ok_counts &= separate == 2 * I * J and merged == J * J
        cheaper = "separate" if separate < merged else ("equal" if separate == merged else "merged")
        counts.append((I, separate, merged))
        rows.append([str(I), str(separate), str(2 * I * J), str(merged), str(J * J), cheaper])
    even = J % 2 == 0
    equal_at_half = (not even) or (2 * (J // 2) * J == J * J)
    I = max(1, J // 2)
    W_Q, W_K = _randn(I, J, gen=gen) / math.sqrt(J), _randn(I, J, gen=gen) / math.sqrt(J)
    x = _randn(o.n, J, gen=gen)
    separate_scores = (x @ W_Q.T) @ (x @ W_K.T).T  # (W_Q x_i) . (W_K x_j)
    W = W_Q.T @ W_K
    merged_scores = x @ W @ x.T  # x_i^T W x_j
    diff = (separate_scores - merged_scores).abs().max().item()
    scale = separate_scores.abs().max().item()
    rank = int(torch.linalg.matrix_rank(W).item())
    ok_scores = diff <= 1e-12 * max(scale, 1.0)
    passed = ok_counts and equal_at_half and ok_scores and rank <= I
    notes = [
        f"model width J={J}; counts measured from nn.Linear(J, I) weights and a (J, J) parameter",
        f"2 I J = J^2 exactly at I = J/2" + ("" if even else " (J odd: no integer I hits it)"),
        f"scores for n={o.n} random x with I={I}: max |(W_Q x_i).(W_K x_j) - x_i^T W x_j| = {_fmt(diff)} "
        f"(largest score {_fmt(scale)})",
        f"W = W_Q^T W_K has rank {rank} <= I = {I}: separate matrices are a low-rank factorisation of W",
    ]
    return TopicResult(
        "merged-qk",
        "Query and key matrices only enter through W = W_Q^T W_K, so scores are x_i^T W x_j; separate "
        "matrices cost 2 I J parameters per head against J^2 merged, equal at I = J/2 "
        "(CS224N self-attention notes).",
        rows,
        notes,
        passed,
        data={"counts": counts, "max_diff": diff, "rank": rank, "I": I},
    )


def dependency_sets(picks: torch.Tensor) -> torch.Tensor:
    """Dependency sets through a hard-attention network with residual connections.

    ``picks`` (..., L, k, T) gives, for every layer, head and position, the position that head
    attends to.  Returns a bool tensor (..., L + 1, T, T): entry [l, i, s] says that position i
    after layer l depends on input position s (layer 0 is the input: the identity).
    """
    *batch, L, k, T = picks.shape
    dep = torch.eye(T, dtype=torch.bool).expand(*batch, T, T).clone()
    out = [dep]
    for layer in range(L):
        new = dep.clone()
        for h in range(k):
            idx = picks[..., layer, h, :].unsqueeze(-1).expand(*batch, T, T)
            new |= torch.gather(dep, -2, idx)
        dep = new
        out.append(dep)
    return torch.stack(out, dim=-3)


def constructed_picks(k: int, L: int, T: int) -> torch.Tensor:
    """Picks reaching the (k+1)^n bound: at layer n, head m at position i picks i + m (k+1)^(n-1) mod T.

    By induction position i after layer n depends on the cyclic block i, ..., i + (k+1)^n - 1:
    the k picked blocks and its own are disjoint and adjacent.
    """
    i = torch.arange(T)
    rows = []
    for layer in range(L):
        step = (k + 1) ** layer
        rows.append(torch.stack([(i + m * step) % T for m in range(1, k + 1)]))
    return torch.stack(rows)  # (L, k, T)


@topic(
    "receptive-field",
    need(lambda o: o.samples >= 1, lambda o: f"needs --samples >= 1 random networks, got {o.samples}"))
def topic_receptive_field(o: ExploreOptions) -> TopicResult:
    gen = _generator(o.seed)
    configs = [(1, 4), (2, 4), (3, 3)]  # (heads k, layers L)
    networks = min(o.samples, 200)
    rows = [["heads k", "layer n", "bound (k+1)^n", "random: max |set|", "random: mean |set|", "constructed: max |set|"]]
    ok = True
    results = []
    for k, L in configs:
        T = (k + 1) ** L
        picks = torch.randint(0, T, (networks, L, k, T), generator=gen)
        sizes = dependency_sets(picks).sum(dim=-1)  # (networks, L+1, T)
        built = dependency_sets(constructed_picks(k, L, T)).sum(dim=-1)  # (L+1, T)
        for n in range(1, L + 1):
            bound = (k + 1) ** n
            rmax = int(sizes[:, n].max().item())
            rmean = sizes[:, n].to(DTYPE).mean().item()
            cmax = int(built[n].max().item())
            cmin = int(built[n].min().item())
            ok &= rmax <= bound and cmax == bound and cmin == bound
            results.append({"k": k, "n": n, "bound": bound, "random_max": rmax, "random_mean": rmean,
                            "constructed_max": cmax, "constructed_min": cmin})
            rows.append([str(k), str(n), str(bound), str(rmax), _fmt(rmean, 2), str(cmax)])
    passed = ok
    notes = [
        f"{networks} random networks per k: every head at every position picks a uniformly random position; "
        "sequence length T = (k+1)^L so the bound can be reached",
        "construction: at layer n head m at position i picks i + m (k+1)^(n-1) (mod T); the picked dependency "
        "sets are disjoint, so every position reaches exactly (k+1)^n",
        f"random never exceeds the bound and the construction meets it at every position: {passed}",
    ]
    return TopicResult(
        "receptive-field",
        "With hard (argmax) attention, k heads and residual connections, a position after n layers depends "
        "on at most (k+1)^n input positions, and the bound is tight (CS224N self-attention notes, exercises).",
        rows,
        notes,
        passed,
        data={"rows": results},
    )


def sinusoidal_positions(n: int, d: int) -> torch.Tensor:
    """The model's sinusoidal table (attnlab/model/positions.py) in float64: p_i[2m] = sin(i w_m),
    p_i[2m+1] = cos(i w_m), w_m = 10000^(-2m/d); so p_i . p_j = sum_m cos((i-j) w_m)."""
    return sinusoidal_table(n, d, dtype=DTYPE)


def fit_relative_bias(pos_scores: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Least-squares table pi[i - j] for an (n, n) matrix: the mean of each diagonal.

    Returns ``(pi indexed by (i - j) + n - 1, max |pos_scores[i, j] - pi[i - j]|)``.
    """
    n = pos_scores.shape[0]
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    offset = (i - j + n - 1).reshape(-1)
    sums = torch.zeros(2 * n - 1, dtype=pos_scores.dtype).index_add_(0, offset, pos_scores.reshape(-1))
    counts = torch.zeros(2 * n - 1, dtype=pos_scores.dtype).index_add_(
        0, offset, torch.ones(n * n, dtype=pos_scores.dtype))
    pi = sums / counts
    residual = (pos_scores - pi[i - j + n - 1]).abs().max().item()
    return pi, residual


def _score_identities(x: torch.Tensor, p: torch.Tensor) -> tuple[float, float]:
    """How far the scores z.z of added (z = x + p) and concatenated (z = [x, p]) embeddings are
    from x.x + p.p + cross and from x.x + p.p: both are 0 up to rounding."""
    z_add = x + p
    z_cat = torch.cat([x, p], dim=1)
    cross = x @ p.T + p @ x.T  # cross[i, j] = x_i . p_j + p_i . x_j
    base = x @ x.T + p @ p.T
    return (z_add @ z_add.T - (base + cross)).abs().max().item(), (z_cat @ z_cat.T - base).abs().max().item()


def _cross_term_sizes(n: int, d: int, gen: torch.Generator) -> tuple[list[tuple[int, float, float]], bool]:
    """(width, measured rms, predicted rms) of the cross term x_i.p_j + p_i.x_j at random
    initialisation, over many draws and several widths, and whether each is within 25%."""
    # Size of the cross terms at random initialisation, over many draws and several widths.
    # Off-diagonal entries have variance 2/d and diagonal ones (2 x_i . p_i) 4/d, so the mean
    # square over an n x n matrix is (2/d)(1 + 1/n).
    cross_rows = []
    cross_ok = True
    for width in sorted({16, 64, 256, d}):
        draws = max(4, min(256, 4_000_000 // (n * width)))
        xs = _randn(draws, n, width, gen=gen) / math.sqrt(width)
        ps = _randn(draws, n, width, gen=gen) / math.sqrt(width)
        cr = xs @ ps.transpose(1, 2)
        cr = cr + cr.transpose(1, 2)
        rms = cr.pow(2).mean().sqrt().item()
        pred = math.sqrt(2.0 / width * (1.0 + 1.0 / n))
        cross_ok &= 0.8 * pred < rms < 1.25 * pred
        cross_rows.append((width, rms, pred))
    return cross_rows, cross_ok


def _relative_bias_errors(x: torch.Tensor, n: int, d: int) -> tuple[float, float, float, torch.Tensor]:
    """With sinusoidal positions the position part p_i . p_j depends only on i - j: how far a
    fitted table pi[i - j] is from the concatenated scores, from the sinusoidal scores, and from
    the closed form; and pi."""
    # Relative bias: with sinusoidal positions the position part p_i . p_j depends only on i - j,
    # so a table pi[i - j] reproduces the concatenated scores exactly.
    p_sin = sinusoidal_positions(n, d)
    s_cat_sin = x @ x.T + p_sin @ p_sin.T
    pi, sin_residual = fit_relative_bias(p_sin @ p_sin.T)
    idx = torch.arange(n)
    s_rel = x @ x.T + pi[idx.unsqueeze(1) - idx.unsqueeze(0) + n - 1]
    rel_diff = (s_rel - s_cat_sin).abs().max().item()
    # pi[delta] also equals the closed form sum_m cos(delta w_m), independent of the fit.
    freq = torch.pow(torch.tensor(10000.0, dtype=DTYPE), -torch.arange(0, d, 2, dtype=DTYPE) / d)
    deltas = torch.arange(-(n - 1), n, dtype=DTYPE)
    closed = torch.cos(deltas.unsqueeze(1) * freq).sum(dim=1)
    closed_diff = (pi - closed).abs().max().item()
    return rel_diff, sin_residual, closed_diff, pi


@topic(
    "positions",
    need(lambda o: o.dim >= 2 and o.dim % 2 == 0, lambda o: f"needs an even --dim >= 2 (sinusoidal positions), got {o.dim}"),
    need(lambda o: o.n >= 2, lambda o: f"needs --n >= 2 positions, got {o.n}"))
def topic_positions(o: ExploreOptions) -> TopicResult:
    # Long for its table, checks and notes (text); the measurements are the two helpers above.
    gen = _generator(o.seed)
    n, d = o.n, o.dim
    # Random initialisation: components N(0, 1/d), so every vector has norm about 1.
    x = _randn(n, d, gen=gen) / math.sqrt(d)
    p = _randn(n, d, gen=gen) / math.sqrt(d)
    add_identity, cat_identity = _score_identities(x, p)
    cross_rows, cross_ok = _cross_term_sizes(n, d, gen)
    cross_rms = next(rms for width, rms, _ in cross_rows if width == d)
    cross_pred = next(pred for width, _, pred in cross_rows if width == d)

    rel_diff, sin_residual, closed_diff, pi = _relative_bias_errors(x, n, d)
    # Contrast: random (learned-at-init) absolute positions do not depend only on i - j.
    _, random_residual = fit_relative_bias(p @ p.T)

    rows = [
        ["quantity", "measured", "expected"],
        ["added: max |z.z - (x.x + p.p + cross)|", _fmt(add_identity), "0"],
        ["concatenated: max |z.z - (x.x + p.p)|", _fmt(cat_identity), "0"],
        *[[f"added, d={width}: rms of cross term x_i.p_j + p_i.x_j", _fmt(rms),
           f"sqrt(2(1+1/n)/d) = {_fmt(pred)}"] for width, rms, pred in cross_rows],
        ["sinusoidal: max |relative-bias scores - concatenated|", _fmt(rel_diff), "0"],
        ["sinusoidal: max |pi[i-j] - sum_m cos((i-j) w_m)|", _fmt(closed_diff), "0"],
        ["random positions: best relative table residual", _fmt(random_residual), "> 0"],
    ]
    tol = 1e-12
    checks = {
        "added = x.x + p.p + cross": add_identity < tol,
        "concatenated has no cross term": cat_identity < tol,
        "cross-term rms within 25% of sqrt(2(1+1/n)/d)": cross_ok,
        "relative bias reproduces concatenated (sinusoidal)": rel_diff < 1e-10 and sin_residual < 1e-10,
        "pi matches closed form": closed_diff < 1e-10,
        "random positions are not relative": random_residual > 1e-6,
    }
    passed = all(checks.values())
    notes = [
        f"n={n} positions, d={d}; token and position embeddings drawn N(0, 1/d) (norm ~1); q = k = z; "
        "cross-term rms over many independent draws per width",
        "at random initialisation in high dimension the cross terms are small (O(1/sqrt d)) but nonzero noise "
        "that mixes content and position; concatenation keeps them apart at the cost of width 2d",
        "relative bias: pi[delta] is the mean of the diagonal i - j = delta of the position scores",
        "checks: " + "; ".join(f"{k}: {v}" for k, v in checks.items()),
    ]
    return TopicResult(
        "positions",
        "Adding position embeddings to token embeddings creates content-position cross terms in q . k that "
        "concatenation avoids; when the position part depends only on i - j, a relative bias pi[i - j] gives "
        "exactly the concatenated scores (CS224N self-attention notes, position representations).",
        rows,
        notes,
        passed,
        data={"add_identity": add_identity, "cat_identity": cat_identity, "cross_rms": cross_rms,
              "cross_pred": cross_pred, "cross_rows": cross_rows, "rel_diff": rel_diff, "closed_diff": closed_diff,
              "random_residual": random_residual, "pi": pi},
    )
