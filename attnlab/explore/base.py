"""What every topic of ``attnlab explore`` shares: the options, the result, the registry
(``@topic(name, *needs)``: a topic registers itself with what it needs of the options), the
validation and the small numerical helpers.

Conventions used throughout: a query ``q`` attends over keys ``k_1..k_n`` with weights
``alpha = softmax(k_j . q)`` (no ``1/sqrt(d)`` unless a topic says so) and the output is
``c = sum_j alpha_j v_j``.  Computations that check identities run in float64.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

DTYPE = torch.float64

from .options import ExploreError, ExploreOptions  # noqa: E402 (torch-free: the command line reads them)


@dataclass
class TopicResult:
    topic: str
    claim: str
    table: list[list[str]]  # first row is the header
    notes: list[str]
    passed: bool
    # Raw measured numbers (for tests and programmatic use); not printed.
    data: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        lines = [f"== {self.topic} ==", f"Claim: {self.claim}"]
        if self.table:
            lines.append(_format_table(self.table))
        lines.extend(f"  - {note}" for note in self.notes)
        lines.append(f"Result: {'PASS' if self.passed else 'FAIL'}")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def _format_table(rows: list[list[str]]) -> str:
    widths = [max(len(str(row[c])) for row in rows if c < len(row)) for c in range(len(rows[0]))]
    out = []
    for r, row in enumerate(rows):
        out.append("  " + "  ".join(str(cell).rjust(widths[c]) for c, cell in enumerate(row)))
        if r == 0:
            out.append("  " + "  ".join("-" * w for w in widths))
    return "\n".join(out)


def _fmt(x: float, digits: int = 4) -> str:
    x = float(x)
    if x == 0.0:
        return "0"
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if 1e-3 <= abs(x) < 1e5:
        return f"{x:.{digits}f}".rstrip("0").rstrip(".")
    return f"{x:.{digits - 1}e}"


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def _randn(*shape: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=DTYPE)


def _orthonormal_columns(d: int, m: int, gen: torch.Generator) -> torch.Tensor:
    """A ``d x m`` matrix with orthonormal columns (needs ``m <= d``), from QR of a Gaussian."""
    q, r = torch.linalg.qr(_randn(d, m, gen=gen))
    # Fix the sign ambiguity of QR so the result is a deterministic function of the sample.
    return q * torch.sign(torch.diagonal(r)).unsqueeze(0)


def _attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dot-product attention of query ``q`` (..., d) over ``keys`` (..., n, d).

    Returns ``(weights (..., n), output (..., d_v))``.
    """
    scores = (keys @ q.unsqueeze(-1)).squeeze(-1)
    weights = torch.softmax(scores, dim=-1)
    return weights, (weights.unsqueeze(-2) @ values).squeeze(-2)


def _scale_list(base: list[float], beta: float) -> list[float]:
    return sorted(set(float(x) for x in base) | {float(beta)})



# --------------------------------------------------------------------------------------------
# The registry: each topic registers itself with what it needs of the options
# --------------------------------------------------------------------------------------------

Topic = Callable[[ExploreOptions], TopicResult]
Need = Callable[[ExploreOptions], "str | None"]  # an error message when the options fall short

TOPICS: dict[str, Topic] = {}
NEEDS: dict[str, tuple[Need, ...]] = {}


def need(holds: Callable[[ExploreOptions], bool], message: Callable[[ExploreOptions], str]) -> Need:
    return lambda o: None if holds(o) else message(o)


dim_holds_n = need(lambda o: o.dim >= o.n,
                   lambda o: f"needs --dim >= --n for orthonormal keys, got dim={o.dim}, n={o.n}")


def finite_beta(what: str = "") -> Need:
    return need(lambda o: math.isfinite(o.beta) and o.beta > 0,
                lambda o: f"needs a positive finite --beta{' ' + what if what else ''}, got {o.beta}")


def topic(name: str, *needs: Need) -> Callable[[Topic], Topic]:
    """Register a topic under ``name``; calling it first checks ``needs`` (ExploreError)."""

    def register(fn: Topic) -> Topic:
        @functools.wraps(fn)
        def checked(o: ExploreOptions) -> TopicResult:
            errors = requirements(name, o)
            if errors:
                raise ExploreError(errors)
            return fn(o)

        TOPICS[name], NEEDS[name] = checked, needs
        return checked

    return register


def requirements(name: str, o: ExploreOptions) -> list[str]:
    """What ``o`` lacks for topic ``name``: one message per unmet need."""
    return [f"{name}: {message}" for check in NEEDS[name] if (message := check(o))]
