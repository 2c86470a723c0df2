"""What one attention head can do: copy a value, average two, and (with the value
matrix) project a mixture back onto one subspace."""

from __future__ import annotations

import math

from .base import (
    ExploreOptions, TopicResult, _attend, _fmt, _generator, _orthonormal_columns, _randn, _scale_list, dim_holds_n,
    finite_beta, need, topic
)


@topic(
    "copy",
    need(lambda o: o.n >= 2, lambda o: f"needs --n >= 2 keys (one to copy, others to ignore), got {o.n}"),
    dim_holds_n, finite_beta("(the largest scale)"))
def topic_copy(o: ExploreOptions) -> TopicResult:
    gen = _generator(o.seed)
    keys = _orthonormal_columns(o.dim, o.n, gen).T  # (n, d), orthonormal rows
    values = _randn(o.n, o.dim, gen=gen)
    j = 0
    # With orthonormal keys and q = s k_j the scores are s (for j) and 0, so every other key
    # gets weight 1 / (e^s + n - 1) and c - v_j = sum_{i != j} (v_i - v_j) / (e^s + n - 1).
    spread = (values - values[j]).sum(dim=0).norm().item()
    scales = _scale_list([0, 1, 2, 4, 8, 16, 32], o.beta)
    rows = [["scale s", "weight on k_j", "||c - v_j||", "formula"]]
    errors, formulas, weights = [], [], []
    for s in scales:
        w, c = _attend(s * keys[j], keys, values)
        err = (c - values[j]).norm().item()
        formula = spread * math.exp(-s) / (1.0 + (o.n - 1) * math.exp(-s))
        errors.append(err)
        formulas.append(formula)
        weights.append(w[j].item())
        rows.append([_fmt(s), _fmt(w[j].item(), 6), _fmt(err), _fmt(formula)])
    monotone = all(b <= a * (1 + 1e-12) + 1e-300 for a, b in zip(errors, errors[1:]))
    matches = all(abs(e - f) <= 1e-9 * max(f, 1e-300) + 1e-12 * spread for e, f in zip(errors, formulas))
    vnorm = values[j].norm().item()
    small = errors[-1] <= 1e-3 * vnorm
    passed = monotone and matches and small
    notes = [
        f"n={o.n} orthonormal keys in d={o.dim}, random values, q = s k_j; ||v_j|| = {_fmt(vnorm)}",
        "formula: ||sum_{i!=j} (v_i - v_j)|| / (e^s + n - 1)  (all other keys score 0)",
        f"error shrinks monotonically: {monotone}; matches formula: {matches}; "
        f"error at s={_fmt(scales[-1])} below 1e-3 ||v_j||: {small}",
    ]
    return TopicResult(
        "copy",
        "Attention can copy: if the query is aligned with one key and scaled up, softmax puts "
        "almost all weight on that key and the output approaches its value (CS224N self-attention notes).",
        rows,
        notes,
        passed,
        data={"scales": scales, "errors": errors, "formula": formulas, "weights": weights, "value_norm": vnorm},
    )


def average_weight(b: float, n: int) -> float:
    """Weight on k_a for q = b (k_a + k_b) over n orthonormal keys: e^b / ((n-2) + 2 e^b)."""
    return 1.0 / (2.0 + (n - 2) * math.exp(-b))


def average_weight_fast(b: float, n: int) -> float:
    """Weight on k_a for q = b (k_a + k_b - sum of the other keys): e^b / (2 e^b + (n-2) e^-b)."""
    return 1.0 / (2.0 + (n - 2) * math.exp(-2.0 * b))


@topic(
    "average",
    need(lambda o: o.n >= 3, lambda o: f"needs --n >= 3 keys (a, b and at least one other), got {o.n}"),
    dim_holds_n, finite_beta())
def topic_average(o: ExploreOptions) -> TopicResult:
    gen = _generator(o.seed)
    keys = _orthonormal_columns(o.dim, o.n, gen).T
    values = _randn(o.n, o.dim, gen=gen)
    a, b_idx = 0, 1
    others = keys[2:].sum(dim=0)
    target = (values[a] + values[b_idx]) / 2
    scales = _scale_list([0, 1, 2, 4, 8], o.beta)
    rows = [["b", "w_a", "w_b", "formula", "|w_a - 1/2|", "fast w_a", "fast formula", "||c - mean v||"]]
    plain, fast, plain_f, fast_f, out_err = [], [], [], [], []
    ok_formula = True
    for b in scales:
        w, c = _attend(b * (keys[a] + keys[b_idx]), keys, values)
        wf, _ = _attend(b * (keys[a] + keys[b_idx] - others), keys, values)
        f, ff = average_weight(b, o.n), average_weight_fast(b, o.n)
        ok_formula &= abs(w[a].item() - f) < 1e-12 and abs(w[b_idx].item() - f) < 1e-12
        ok_formula &= abs(wf[a].item() - ff) < 1e-12 and abs(wf[b_idx].item() - ff) < 1e-12
        plain.append(w[a].item())
        fast.append(wf[a].item())
        plain_f.append(f)
        fast_f.append(ff)
        out_err.append((c - target).norm().item())
        rows.append([
            _fmt(b), _fmt(w[a].item(), 6), _fmt(w[b_idx].item(), 6), _fmt(f, 6),
            _fmt(abs(w[a].item() - 0.5)), _fmt(wf[a].item(), 6), _fmt(ff, 6), _fmt(out_err[-1]),
        ])
    approaches = abs(plain[-1] - 0.5) < 1e-3 and abs(fast[-1] - 0.5) < 1e-3
    faster = all(abs(pf - 0.5) <= abs(pp - 0.5) + 1e-12 for pp, pf in zip(plain[1:], fast[1:]))
    passed = ok_formula and approaches and faster
    notes = [
        f"n={o.n} orthonormal keys in d={o.dim}; plain: q = b (k_a + k_b), fast: q = b (k_a + k_b - sum_other k)",
        "plain formula e^b / ((n-2) + 2 e^b): a and b score b, the others 0",
        "fast formula e^b / (2 e^b + (n-2) e^-b): the others score -b, so the gap to 1/2 shrinks like e^-2b",
        f"measured = formula (1e-12): {ok_formula}; both within 1e-3 of 1/2 at b={_fmt(scales[-1])}: {approaches}; "
        f"fast variant always closer to 1/2: {faster}",
    ]
    return TopicResult(
        "average",
        "Attention can average: a query equal to the (scaled) sum of two orthonormal keys splits "
        "the weight evenly between them, tending to 1/2 each as the scale grows (CS224N self-attention notes).",
        rows,
        notes,
        passed,
        data={"scales": scales, "plain": plain, "fast": fast, "plain_formula": plain_f,
              "fast_formula": fast_f, "output_error": out_err},
    )


@topic(
    "project",
    need(lambda o: o.dim >= 2, lambda o: f"needs --dim >= 2 (two orthogonal subspaces), got {o.dim}"),
    need(lambda o: o.samples >= 1, lambda o: f"needs --samples >= 1, got {o.samples}"))
def topic_project(o: ExploreOptions) -> TopicResult:
    gen = _generator(o.seed)
    basis = _orthonormal_columns(o.dim, o.dim, gen)
    r = o.dim // 2
    A, B = basis[:, :r], basis[:, r:]
    count = min(o.samples, 1000)
    v_a = _randn(count, r, gen=gen) @ A.T  # rows in span(A)
    v_b = _randn(count, o.dim - r, gen=gen) @ B.T  # rows in span(B)
    M = A @ A.T
    recovered = (v_a + v_b) @ M.T
    rel_err = ((recovered - v_a).norm(dim=1) / v_a.norm(dim=1)).max().item()
    kills_b = ((v_b @ M.T).norm(dim=1) / v_b.norm(dim=1)).max().item()
    idempotent = (M @ M - M).abs().max().item()
    cross = (A.T @ B).abs().max().item()
    mixed_ratio = (v_b.norm(dim=1) / v_a.norm(dim=1)).median().item()
    rows = [
        ["quantity", "measured", "ideal"],
        ["max ||M(v_a + v_b) - v_a|| / ||v_a||", _fmt(rel_err), "0"],
        ["max ||M v_b|| / ||v_b||", _fmt(kills_b), "0"],
        ["max |M M - M|", _fmt(idempotent), "0"],
        ["max |A^T B|", _fmt(cross), "0"],
        ["median ||v_b|| / ||v_a|| (size of the distractor)", _fmt(mixed_ratio), "-"],
    ]
    tol = 1e-12
    passed = rel_err < tol and kills_b < tol and idempotent < tol and cross < tol
    notes = [
        f"A: {r} and B: {o.dim - r} orthonormal columns of one random orthogonal matrix in d={o.dim}; "
        f"{count} random pairs (v_a, v_b)",
        f"all residuals below {tol:g} (float64 round-off): {passed}",
    ]
    return TopicResult(
        "project",
        "A value matrix can project: if v_a lies in subspace A and v_b in an orthogonal subspace B, "
        "the projector M = A A^T recovers v_a from the mixture v_a + v_b exactly (CS224N self-attention notes).",
        rows,
        notes,
        passed,
        data={"relative_error": rel_err, "leak_b": kills_b, "idempotent": idempotent, "cross": cross},
    )
