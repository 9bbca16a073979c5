"""Robust recourse (ROAR, PROBE) against independent answers: brute force over the
parameter ball, linear programs solved by HiGHS, Monte Carlo noise."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import linprog
from scipy.special import logit

from recourse_sim.errors import ConfigError
from recourse_sim.learners import make_learner
from recourse_sim.recourse import ActionSet
from recourse_sim.recourse.robust import (
    probe_invalidation_rate,
    roar_worst_margin,
    roar_worst_proba,
    robust_delta,
)


def _linear(seed: int = 0, d: int = 3, standardize: bool = True):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(300, d)) * np.arange(1, d + 1) + np.linspace(-1, 1, d)
    y = (X @ np.linspace(1.0, -0.5, d) + rng.normal(size=300) > 0).astype(int)
    learner = make_learner("logistic_regression", update_rule="refit", standardize=standardize)
    return learner.fit(X, y), X[learner.fit(X, y).predict(X) == 0]


def _weights_and_bias(learner):
    """(w, b, mu, s): the goal-1 logit is w·(x − mu)/s + b."""
    st = learner.state_
    w = np.asarray(st["coef"])[0]
    b = float(np.asarray(st["intercept"])[0])
    mu = np.asarray(st.get("x_shift", np.zeros(len(w))))
    s = np.asarray(st.get("x_scale", np.ones(len(w))))
    return w, b, mu, s


def test_roar_inner_max_closed_form_equals_brute_force_and_carla_lp():
    """The worst margin over ‖Δθ‖∞ ≤ δ equals the minimum over the ball's vertices (the
    margin is linear in Δ) and CARLA's linear program over the box (linprog)."""
    learner, Xr = _linear(1)
    w, b, mu, s = _weights_and_bias(learner)
    delta = 0.3
    X = Xr[:15]
    goal = np.ones(len(X), np.int64)
    closed = roar_worst_margin(learner, learner.state_, X, goal, delta)
    for x, value in zip(X, closed, strict=True):
        z1 = np.append((x - mu) / s, 1.0)
        theta = np.append(w, b)
        vertices = np.array(list(itertools.product((-delta, delta), repeat=len(theta))))
        brute = ((theta + vertices) @ z1).min()
        lp = linprog(z1, bounds=[(-delta, delta)] * len(theta), method="highs")
        assert value == pytest.approx(brute, abs=1e-12)
        assert value == pytest.approx(theta @ z1 + lp.fun, abs=1e-9)
    # the first-order inner maximisation (used for nonlinear models) is exact here
    p = roar_worst_proba(learner, learner.state_, X, goal, delta)
    np.testing.assert_allclose(logit(p[:, 1]), closed, atol=1e-9)


def _roar_lp(x, w, b, mu, s, delta, required, aset: ActionSet):
    """Independent ROAR min-cost for p ∈ {1, inf} as one LP over (x', u, v[, t]):
    w·(x'−mu)/s + b − δ(Σu + 1) ≥ required, u ≥ ±(x'−mu)/s, v ≥ ±c(x'−x)."""
    d = len(x)
    lo, hi = aset.box(x[None])
    c = aset.weights_
    inf = aset.p == np.inf
    nvar = 3 * d + (1 if inf else 0)
    obj = np.zeros(nvar)
    if inf:
        obj[-1] = 1.0
    else:
        obj[2 * d : 3 * d] = 1.0
    A, ub = [], []
    row = np.zeros(nvar)  # robust margin
    row[:d] = -w / s
    row[d : 2 * d] = delta
    A.append(row)
    ub.append(-(required - b + delta + w @ (mu / s)))
    for j in range(d):
        for sign in (1, -1):
            r = np.zeros(nvar)  # u_j >= sign·(x'_j − mu_j)/s_j
            r[j] = sign / s[j]
            r[d + j] = -1
            A.append(r)
            ub.append(sign * mu[j] / s[j])
            r = np.zeros(nvar)  # v_j >= sign·c_j(x'_j − x_j)
            r[j] = sign * c[j]
            r[2 * d + j] = -1
            A.append(r)
            ub.append(sign * c[j] * x[j])
        if inf:
            r = np.zeros(nvar)  # t >= v_j
            r[2 * d + j] = 1
            r[-1] = -1
            A.append(r)
            ub.append(0.0)
    bounds = [(x[j] + lo[0, j], x[j] + hi[0, j]) for j in range(d)]
    bounds += [(0, None)] * (2 * d) + ([(0, None)] if inf else [])
    res = linprog(obj, A_ub=np.array(A), b_ub=np.array(ub), bounds=bounds, method="highs")
    return res.x[:d] - x if res.status == 0 else None


@pytest.mark.parametrize("p", [1, np.inf])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_roar_min_cost_equals_an_independent_linear_program(p, seed):
    """ROAR's cheapest robust action (alternation + exact linear min-cost) costs what an
    LP of Upadhyay et al.'s closed-form robust constraint costs, to 1e-6."""
    learner, Xr = _linear(seed)
    w, b, mu, s = _weights_and_bias(learner)
    aset = ActionSet(
        n_features=3, p=p, epsilon=50.0, increase_only=[0], cost_weights=[1.0, 0.5, 2.0]
    )
    delta, target = 0.15, 0.6
    X = Xr[:12]
    found = robust_delta(learner, X, 1, aset, "roar", target=target, delta=delta)
    required = logit(target)
    assert aset.contains(X, found).all()
    for x, dx in zip(X, found, strict=True):
        ref = _roar_lp(x, w, b, mu, s, delta, required, aset)
        if ref is None:
            assert not dx.any()
            continue
        assert aset.cost(dx[None])[0] == pytest.approx(aset.cost(ref[None])[0], abs=1e-6)
        worst = roar_worst_margin(learner, learner.state_, (x + dx)[None], np.ones(1, int), delta)
        assert worst[0] >= required - 1e-9


def test_roar_with_radius_zero_is_plain_min_cost():
    learner, Xr = _linear(3)
    aset = ActionSet(n_features=3, p=2, epsilon=20.0)
    from recourse_sim.recourse.individual import individual_delta

    plain = individual_delta(learner, Xr[:20], 1, aset, "linear", objective="min_cost", target=0.5)
    robust = robust_delta(learner, Xr[:20], 1, aset, "roar", target=0.5, delta=0.0)
    np.testing.assert_allclose(robust, plain, atol=1e-12)


def test_probe_linear_rate_is_the_target_and_matches_monte_carlo():
    """PROBE's cheapest action on a linear model has invalidation rate exactly r (closed
    form), and Monte Carlo noise on the action invalidates about that share."""
    learner, Xr = _linear(4)
    aset = ActionSet(n_features=3, p=2, epsilon=50.0, cost_weights=[1.0, 2.0, 0.5], immutable=[2])
    sigma, r = 0.4, 0.15
    X = Xr[:10]
    found = robust_delta(learner, X, 1, aset, "probe", target=0.5, sigma=sigma, invalidation=r)
    rate = probe_invalidation_rate(
        learner, learner.state_, X + found, 1, aset, sigma, need=np.full(len(X), 0.5)
    )
    np.testing.assert_allclose(rate, r, atol=1e-9)
    rng = np.random.default_rng(0)
    noise = rng.normal(size=(200_000, 3)) * sigma * np.array([1.0, 0.5, 0.0])
    for x in X[:3] + found[:3]:
        p = learner.predict_proba(x + noise)[:, 1]
        assert (p < 0.5).mean() == pytest.approx(r, abs=0.005)


def test_probe_min_cost_equals_shifted_linear_program():
    """For a linear model PROBE's constraint is a margin shift: the LP with the required
    margin raised by σ‖c ⊙ D‖ Φ⁻¹(1 − r) (δ = 0 in ROAR's LP) costs the same."""
    from scipy.special import ndtri

    learner, Xr = _linear(5)
    w, b, mu, s = _weights_and_bias(learner)
    aset = ActionSet(n_features=3, p=1, epsilon=50.0, cost_weights=[1.0, 0.5, 2.0])
    sigma, r = 0.3, 0.05
    X = Xr[:10]
    found = robust_delta(learner, X, 1, aset, "probe", target=0.7, sigma=sigma, invalidation=r)
    c = w / s
    shift = sigma * np.linalg.norm(c / aset.weights_) * ndtri(1 - r)
    for x, dx in zip(X, found, strict=True):
        ref = _roar_lp(x, w, b, mu, s, 0.0, logit(0.7) + shift, aset)
        assert aset.cost(dx[None])[0] == pytest.approx(aset.cost(ref[None])[0], abs=1e-6)


@pytest.mark.slow  # the nonlinear search evaluates the worst model per row many times
def test_robust_recourse_on_an_mlp_holds_and_stays_in_the_action_set():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    y = (X @ [1.0, 0.5] + 0.3 * rng.normal(size=300) > 0).astype(int)
    mlp = make_learner("mlp", update_rule="sgd", hidden=(6,), random_state=0, epochs=30).fit(X, y)
    Xr = X[mlp.predict(X) == 0][:4]
    aset = ActionSet(n_features=2, p=2, epsilon=5.0, increase_only=[1])
    goal = np.ones(len(Xr), np.int64)
    roar = robust_delta(mlp, Xr, 1, aset, "roar", target=0.5, delta=0.05, steps=5)
    assert aset.contains(Xr, roar).all()
    worst = roar_worst_proba(mlp, mlp.state_, Xr + roar, goal, 0.05)[:, 1]
    moved = roar.any(1)
    assert moved.any() and (worst[moved] >= 0.5).all()
    assert (mlp.predict_proba(Xr + roar)[moved, 1] > 0.5).all()
    probe = robust_delta(
        mlp, Xr, 1, aset, "probe", target=0.5, sigma=0.2, invalidation=0.2, steps=5
    )
    assert aset.contains(Xr, probe).all()
    rate = probe_invalidation_rate(mlp, mlp.state_, Xr + probe, 1, aset, 0.2, need=np.full(4, 0.5))
    assert (rate[probe.any(1)] <= 0.2 + 1e-12).all()


def test_robust_recourse_rejects_bad_parameters():
    learner, Xr = _linear(0)
    aset = ActionSet(n_features=3)
    with pytest.raises(ConfigError, match="invalidation"):
        robust_delta(learner, Xr[:2], 1, aset, "probe", invalidation=0.7)
    with pytest.raises(ConfigError, match="method"):
        robust_delta(learner, Xr[:2], 1, aset, "wachter")


def test_scenario_robust_method_needs_min_cost(tmp_path):
    from recourse_sim.errors import ConfigError as ScenarioError
    from recourse_sim.scenarios import load_scenario

    with pytest.raises(ScenarioError, match="min_cost"):
        load_scenario(
            "lending_fico",
            {"populations.applicants.method": "roar", "populations.applicants.objective": "budget"},
        )
    sc = load_scenario(
        "lending_fico",
        {"populations.applicants.method": "probe", "populations.applicants.probe_sigma": 0.05},
    )
    assert sc.populations["applicants"].probe_sigma == 0.05


@pytest.mark.parametrize("method", ["roar", "probe"])
def test_robust_seekers_in_lending_get_robust_recourse(method):
    """In lending_fico each successful robust seeker's reports pass the robust decision
    of the model that decided the round; the batched env declines the scenario."""
    import copy

    from recourse_sim.env.batched import native_reason
    from recourse_sim.env.recourse_env import RecourseEnv

    overrides = {
        "populations.black_borrowers.participation": 0,
        "populations.applicants.method": method,
        "populations.applicants.roar_delta": 0.1,
        "populations.applicants.probe_sigma": 0.05,
    }
    windowed = {**overrides, "learner.update_rule": "window", "learner.window": 1}
    assert "robust" in native_reason(RecourseEnv(load_scenario_of("lending_fico", windowed)))
    env = RecourseEnv(load_scenario_of("lending_fico", overrides))
    env.reset(seed=3)
    spec = env.scenario.populations["applicants"]
    for _ in range(2):
        deciding = copy.deepcopy(env.learner)
        env.step(None)
        r = env.state.last_record
        got = r.tried & r.favourable & ~r.favourable_before
        assert got.any()
        x = r.report[got]
        goal = np.ones(len(x), np.int64)
        if method == "roar":
            worst = roar_worst_margin(deciding, deciding.state_, x, goal, spec.roar_delta)
            assert (worst >= logit(0.8) - 1e-9).all()
        else:
            rate = probe_invalidation_rate(
                deciding,
                deciding.state_,
                x,
                goal,
                env.strategies[0].action_set,
                spec.probe_sigma,
                need=np.full(len(x), 0.8),
            )
            assert (rate <= spec.probe_invalidation + 1e-9).all()


def load_scenario_of(name: str, overrides: dict):
    from recourse_sim.scenarios import load_scenario

    return load_scenario(name, overrides)
