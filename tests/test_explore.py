"""Tests for ``attnlab explore``: every topic passes with fixed seeds, and its numbers agree with
closed forms worked out here independently of the module's own formulas."""

from __future__ import annotations

import argparse
import math

import pytest
import torch

from attnlab import explore
from attnlab.explore import ExploreError, ExploreOptions
from attnlab.explore.base import _generator as generator
from attnlab.explore.heads import _dot_samples

DEFAULT = ExploreOptions()


@pytest.fixture(scope="module")
def results() -> dict[str, explore.TopicResult]:
    return {r.topic: r for r in explore.run_topics(None, DEFAULT)}


def test_registry_names() -> None:
    assert list(explore.TOPICS) == [
        "copy", "average", "project", "single-vs-multi-head", "routing",
        "temperature", "merged-qk", "receptive-field", "positions",
    ]


@pytest.mark.parametrize("seed", [1, 7, 12345])
def test_all_topics_pass_for_other_seeds(seed: int) -> None:
    results = explore.run_topics(None, ExploreOptions(seed=seed))
    assert [r.topic for r in results] == list(explore.TOPICS)
    assert all(r.passed for r in results), [r.topic for r in results if not r.passed]


def test_deterministic_for_a_seed() -> None:
    a = explore.run_topics(["single-vs-multi-head", "temperature"], DEFAULT)
    b = explore.run_topics(["single-vs-multi-head", "temperature"], DEFAULT)
    assert [r.render() for r in a] == [r.render() for r in b]
    c = explore.run_topics(["temperature"], ExploreOptions(seed=3))
    assert c[0].render() != a[1].render()


def test_render(results) -> None:
    text = results["copy"].render()
    assert text.splitlines()[0] == "== copy =="
    assert "Claim:" in text and "CS224N" in text
    assert "weight on k_j" in text  # the table header
    assert text.rstrip().endswith("Result: PASS")
    failed = explore.TopicResult("x", "c", [["a", "b"], ["1", "2"]], [], False)
    assert failed.render().rstrip().endswith("Result: FAIL")


# ---------------------------------------------------------------------------------------- copy


def test_copy_numbers(results) -> None:
    r = results["copy"]
    assert r.passed
    n = DEFAULT.n
    scales, errors, weights = r.data["scales"], r.data["errors"], r.data["weights"]
    assert DEFAULT.beta in scales and scales == sorted(scales)
    for s, err, w in zip(scales, errors, weights):
        # Orthonormal keys: the aligned key scores s, the other n - 1 score 0.
        assert w == pytest.approx(math.exp(s) / (math.exp(s) + n - 1), rel=1e-12)
        # c - v_j = sum_{i != j}(v_i - v_j) / (e^s + n - 1), so the error relative to s = 0 is
        # n / (e^s + n - 1), whatever the values are.
        assert err / errors[0] == pytest.approx(n / (math.exp(s) + n - 1), rel=1e-8)
    assert errors[0] > 1.0 and errors[-1] < 1e-9


def test_copy_rejects_too_few_keys() -> None:
    with pytest.raises(ExploreError, match="--n >= 2"):
        explore.TOPICS["copy"](ExploreOptions(n=1))
    with pytest.raises(ExploreError, match="--dim >= --n"):
        explore.TOPICS["copy"](ExploreOptions(n=8, dim=4))


# ------------------------------------------------------------------------------------- average


def test_average_matches_formulas(results) -> None:
    r = results["average"]
    assert r.passed
    n = DEFAULT.n
    for b, w, wf in zip(r.data["scales"], r.data["plain"], r.data["fast"]):
        assert w == pytest.approx(math.exp(b) / ((n - 2) + 2 * math.exp(b)), abs=1e-12)
        assert wf == pytest.approx(math.exp(b) / (2 * math.exp(b) + (n - 2) * math.exp(-b)), abs=1e-12)
    assert r.data["plain"][0] == pytest.approx(1 / n) and r.data["fast"][0] == pytest.approx(1 / n)
    assert abs(r.data["plain"][-1] - 0.5) < 1e-3
    # The output is the average of v_a and v_b up to the weight left on the other keys.
    assert r.data["output_error"][-1] < 1e-2 < r.data["output_error"][0]


def test_average_needs_three_keys() -> None:
    with pytest.raises(ExploreError, match="--n >= 3"):
        explore.TOPICS["average"](ExploreOptions(n=2))


def test_average_fails_when_scale_too_small_for_n() -> None:
    # b = 8 (the largest scale for --beta 1) cannot push 510 distractors below 1e-3.
    r = explore.TOPICS["average"](ExploreOptions(n=512, dim=512, beta=1.0))
    assert not r.passed


# ------------------------------------------------------------------------------------- project


def test_project(results) -> None:
    r = results["project"]
    assert r.passed
    for key in ("relative_error", "leak_b", "idempotent", "cross"):
        assert r.data[key] < 1e-12
    # Odd dimension: subspaces of sizes 1 and 2.
    assert explore.TOPICS["project"](ExploreOptions(dim=3, samples=50)).passed


# ------------------------------------------------------------------------- single-vs-multi-head


def test_key_distribution() -> None:
    o = ExploreOptions(samples=20000, dim=16, n=4)
    mu, keys = explore.sample_keys(o, generator(5), o.samples)
    assert torch.allclose(mu @ mu.T, torch.eye(o.n, dtype=mu.dtype), atol=1e-12)
    assert torch.allclose(keys.mean(0), mu, atol=0.03)
    # k_a has variance alpha + 1/2 along mu_a and alpha across it; other keys alpha everywhere.
    along = (keys[:, 0] - mu[0]) @ mu[0]
    across = (keys[:, 0] - mu[0]) @ mu[1]
    other = (keys[:, 1] - mu[1]) @ mu[1]
    alpha = explore.KEY_NOISE
    assert along.var().item() == pytest.approx(alpha + 0.5, rel=0.05)
    assert across.var().item() == pytest.approx(alpha, rel=0.05)
    assert other.var().item() == pytest.approx(alpha, rel=0.05)


def test_single_vs_multi_head(results) -> None:
    r = results["single-vs-multi-head"]
    assert r.passed
    single, multi = r.data["single"], r.data["multi"]
    assert single["iqr"] > 0.8 and single["p05"] < 0.01 and single["p95"] > 0.99
    assert abs(multi["median"] - 0.5) < 0.01 and multi["iqr"] < 0.1
    assert multi["near_half"] > 0.7 > 0.2 > single["near_half"]
    # The weight on v_a read off the output equals the softmax weight of k_a computed here.
    o = DEFAULT
    mu, keys = explore.sample_keys(o, generator(o.seed), o.samples)
    w = torch.softmax(keys @ (o.beta * (mu[0] + mu[1])), dim=-1)[:, 0]
    assert torch.allclose(r.data["w_single"], w, atol=1e-12)
    w1 = torch.softmax(keys @ (o.beta * mu[0]), dim=-1)[:, 0]
    w2 = torch.softmax(keys @ (o.beta * mu[1]), dim=-1)[:, 0]
    assert torch.allclose(r.data["w_multi"], (w1 + w2) / 2, atol=1e-12)


def test_single_vs_multi_head_fails_at_small_scale() -> None:
    assert not explore.TOPICS["single-vs-multi-head"](ExploreOptions(beta=1.0, samples=500)).passed


def test_single_vs_multi_head_plot(tmp_path) -> None:
    r = explore.TOPICS["single-vs-multi-head"](ExploreOptions(samples=200, plot_dir=str(tmp_path / "plots")))
    png = tmp_path / "plots" / "single_vs_multi_head.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(png) in r.render()


# ------------------------------------------------------------------------------------- routing


def test_routing_vectors() -> None:
    beta = 3.0
    s = explore.routing_setup(8, beta, generator(0))
    ua, ub, uc, ud, x = s["ua"], s["ub"], s["uc"], s["ud"], s["x"]
    u = torch.stack([ua, ub, uc, ud])
    assert torch.allclose(u @ u.T, beta**2 * torch.eye(4, dtype=u.dtype), atol=1e-10)
    k, q, v = x @ s["K"].T, x @ s["Q"].T, x @ s["V"].T
    b2 = beta**2
    for got, want in [(k[0], b2 * ud), (k[1], 0 * ud), (k[2], b2 * uc), (q[0], b2 * uc), (q[1], b2 * ud),
                      (q[2], 0 * ud), (v[0], ub), (v[1], 0 * ub), (v[2], ub - uc)]:
        assert torch.allclose(got, want, atol=1e-9)


def test_routing_errors_match_closed_forms(results) -> None:
    r = results["routing"]
    assert r.passed
    for beta, plain, c2, c1 in zip(r.data["betas"], r.data["plain"], r.data["c2"], r.data["c1"]):
        # Plain: c_2 - u_a = (u_d + 2 u_b + u_c - 2 u_a) / (e^{beta^2} + 2).
        assert plain == pytest.approx(math.sqrt(10) / (math.exp(beta**2) + 2), rel=1e-8, abs=1e-15)
        # KQV: position 2 scores beta^6 on position 1: c_2 - u_b = -(u_b + u_c) / (e^{beta^6} + 2).
        e6 = math.exp(min(beta**6, 700.0))
        assert c2 == pytest.approx(math.sqrt(2) / (e6 + 2), rel=1e-8, abs=1e-14)
        # Position 1 scores beta^6 on position 3: c_1 - (u_b - u_c) = (2 u_c - u_b) / (e^{beta^6} + 2).
        assert c1 == pytest.approx(math.sqrt(5) / (e6 + 2), rel=1e-8, abs=1e-14)
    assert r.data["plain"][0] > 0.5  # at beta = 1 nothing is routed cleanly yet


# --------------------------------------------------------------------------------- temperature


def test_temperature(results) -> None:
    r = results["temperature"]
    assert r.passed
    for d, var, scaled, tol in zip(r.data["dims"], r.data["var"], r.data["var_scaled"], r.data["tolerance"]):
        assert scaled == pytest.approx(var / d, rel=1e-10)
        assert abs(var / d - 1) < tol
        assert tol == pytest.approx(5 * math.sqrt((2 + 6 / d) / (DEFAULT.samples - 1)))
    assert r.data["var"][-1] > 500  # unscaled scores at d = 1024 have variance ~1024


def test_temperature_detects_wrong_scaling() -> None:
    # If the dot products had variance d^2 / 4 (say, a 1/2 missing somewhere), the check must fail.
    gen = generator(0)
    dots = _dot_samples(64, 2000, gen) * math.sqrt(64) / 2
    assert abs(dots.var().item() / 64 - 1) > explore.temperature_tolerance(64, 2000)


# ----------------------------------------------------------------------------------- merged-qk


def test_merged_qk(results) -> None:
    r = results["merged-qk"]
    assert r.passed
    J = DEFAULT.dim
    for I, separate, merged in r.data["counts"]:
        assert separate == 2 * I * J and merged == J * J
        assert (separate == merged) == (I == J // 2)
    assert r.data["max_diff"] < 1e-12
    assert r.data["rank"] == r.data["I"] == J // 2
    assert explore.TOPICS["merged-qk"](ExploreOptions(dim=7, n=3)).passed


# ----------------------------------------------------------------------------- receptive-field


def _jacobian_dependencies(picks: torch.Tensor, width: int = 3) -> torch.Tensor:
    """Which inputs each output of a real hard-attention network depends on, via autograd."""
    L, k, T = picks.shape
    gen = torch.Generator().manual_seed(0)
    weights = torch.randn(L, k, width, width, generator=gen, dtype=torch.float64)

    def network(x: torch.Tensor) -> torch.Tensor:
        for layer in range(L):
            x = x + sum(x[picks[layer, h]] @ weights[layer, h] for h in range(k))
        return x

    x0 = torch.randn(T, width, generator=gen, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(network, x0)  # (T, width, T, width)
    return jac.abs().sum(dim=(1, 3)) > 0


def test_dependency_sets_match_autograd() -> None:
    gen = torch.Generator().manual_seed(3)
    for k, L, T in [(1, 3, 10), (2, 2, 12), (3, 2, 20)]:
        picks = torch.randint(0, T, (L, k, T), generator=gen)
        deps = explore.dependency_sets(picks)
        assert deps.shape == (L + 1, T, T)
        assert torch.equal(deps[0], torch.eye(T, dtype=torch.bool))
        assert torch.equal(deps[-1], _jacobian_dependencies(picks))
        sizes = deps.sum(-1)
        for n in range(L + 1):
            assert sizes[n].max() <= (k + 1) ** n


def test_constructed_picks_reach_bound() -> None:
    k, L = 2, 3
    T = (k + 1) ** L
    deps = explore.dependency_sets(explore.constructed_picks(k, L, T))
    for n in range(L + 1):
        for i in (0, 5, T - 1):
            block = {(i + s) % T for s in range((k + 1) ** n)}
            assert set(deps[n, i].nonzero().flatten().tolist()) == block
    assert torch.equal(_jacobian_dependencies(explore.constructed_picks(k, L, T)), deps[-1])


def test_receptive_field_table(results) -> None:
    r = results["receptive-field"]
    assert r.passed
    for row in r.data["rows"]:
        assert row["bound"] == (row["k"] + 1) ** row["n"]
        assert row["random_max"] <= row["bound"]
        assert row["constructed_max"] == row["constructed_min"] == row["bound"]
        assert row["random_mean"] < row["bound"] or row["n"] == 0
    # Random picks overlap, so on average they fall short of the bound at depth.
    deep = [row for row in r.data["rows"] if row["n"] >= 3]
    assert all(row["random_mean"] < 0.9 * row["bound"] for row in deep)


# ----------------------------------------------------------------------------------- positions


def test_positions(results) -> None:
    r = results["positions"]
    assert r.passed
    assert r.data["add_identity"] < 1e-12 and r.data["cat_identity"] < 1e-12
    for width, rms, pred in r.data["cross_rows"]:
        assert rms == pytest.approx(math.sqrt(2 / width * (1 + 1 / DEFAULT.n)), rel=0.1)
    assert r.data["rel_diff"] < 1e-10 and r.data["closed_diff"] < 1e-10
    assert r.data["random_residual"] > 0.1


def test_sinusoidal_dot_products_depend_on_offset_only() -> None:
    p = explore.sinusoidal_positions(12, 16)
    s = p @ p.T
    assert torch.allclose(s[1:, 1:], s[:-1, :-1], atol=1e-12)
    assert torch.allclose(torch.diagonal(s), torch.full((12,), 8.0, dtype=s.dtype))
    pi, residual = explore.fit_relative_bias(s)
    assert residual < 1e-12 and pi.shape == (23,)
    assert pi[11].item() == pytest.approx(8.0)  # offset 0


def test_positions_needs_even_dim() -> None:
    with pytest.raises(ExploreError, match="even --dim"):
        explore.TOPICS["positions"](ExploreOptions(dim=7))


def test_each_topic_registers_what_it_needs() -> None:
    assert set(explore.NEEDS) == set(explore.TOPICS) and all(explore.NEEDS.values())
    assert explore.validate(["routing"], ExploreOptions(dim=3)) == [
        "routing: needs --dim >= 4 (four orthogonal directions u_a..u_d), got 3"]


# ----------------------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    explore.add_arguments(parser)
    return parser


def test_arguments_and_help() -> None:
    parser = _parser()
    args = parser.parse_args([])
    assert args.topic == "all"
    assert (args.dim, args.n, args.beta, args.samples, args.seed, args.plot_dir) == (64, 8, 10.0, 2000, 0, None)
    args = parser.parse_args(["routing", "--dim", "16", "--beta", "4", "--plot", "out"])
    assert (args.topic, args.dim, args.beta, args.plot_dir) == ("routing", 16, 4.0, "out")
    with pytest.raises(SystemExit):
        parser.parse_args(["nonsense"])
    for action in parser._actions:
        if action.dest != "help":
            assert "default" in action.help, action.dest
    text = parser.format_help()
    assert text.count("(default:") == 7  # TOPIC and six options, each once


def test_main_single_topic(capsys) -> None:
    assert explore.main(_parser().parse_args(["copy"])) == 0
    out = capsys.readouterr().out
    assert "== copy ==" in out and "Result: PASS" in out
    assert out.rstrip().splitlines()[-1] == "1 passed, 0 failed"


def test_main_reports_failures(capsys) -> None:
    args = _parser().parse_args(["single-vs-multi-head", "--beta", "1", "--samples", "300"])
    assert explore.main(args) == 1
    assert capsys.readouterr().out.rstrip().endswith("0 passed, 1 failed")


def test_main_rejects_meaningless_options(capsys) -> None:
    from attnlab import cli

    assert cli.main(["explore", "average", "--n", "2"]) == 2
    captured = capsys.readouterr()
    assert "attnlab explore: error: average: needs --n >= 3" in captured.err and captured.out == ""
    # Validation happens before anything runs: "all" with n = 2 prints no topic at all, and
    # each unmet need is its own error line.
    assert cli.main(["explore", "--n", "2", "--dim", "3"]) == 2
    captured = capsys.readouterr()
    assert "== copy ==" not in captured.out
    assert all(line.startswith("attnlab explore: error: ") for line in captured.err.strip().splitlines())
    assert len(captured.err.strip().splitlines()) > 1
    assert explore.validate(["copy", "routing"], ExploreOptions(dim=2, n=2)) == [
        "routing: needs --dim >= 4 (four orthogonal directions u_a..u_d), got 2"]
