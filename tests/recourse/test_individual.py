"""Individual recourse: feasibility, optimality against closed forms and HiGHS."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from recourse_sim.errors import ConfigError
from recourse_sim.learners import LogisticRegression
from recourse_sim.recourse import ActionSet, individual_recourse
from recourse_sim.recourse.linear_program import (
    linear_program_closed_form,
    linear_program_highs,
)


@pytest.fixture(scope="module")
def binary_problem():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4))
    y = (X @ np.array([1.5, -1.0, 0.5, 0.0]) + 0.3 * rng.normal(size=400) > 0).astype(np.int64)
    return X, y, LogisticRegression(C=10.0).fit(X, y)


def random_action_set(rng, d, p):
    kind = rng.integers(0, 4, size=d)
    return ActionSet(
        d,
        immutable=np.flatnonzero(kind == 1).tolist(),
        increase_only=np.flatnonzero(kind == 2).tolist(),
        decrease_only=np.flatnonzero(kind == 3).tolist(),
        max_change=rng.uniform(0.1, 2.0, size=d),
        cost_weights=rng.uniform(0.2, 2.0, size=d),
        p=p,
        epsilon=float(rng.uniform(0.1, 2.0)),
    )


@pytest.mark.parametrize("p", [1, np.inf])
def test_linear_closed_form_matches_highs(p):
    rng = np.random.default_rng(1)
    for _ in range(5):
        a = random_action_set(rng, 5, p)
        X = torch.as_tensor(rng.normal(size=(20, 5)))
        g = torch.as_tensor(rng.normal(size=(20, 5)))
        exact = linear_program_closed_form(g, X, a)
        lp = linear_program_highs(g, X, a)
        assert a.contains(X.numpy(), exact.numpy()).all()
        np.testing.assert_allclose((g * exact).sum(1), (g * lp).sum(1), atol=1e-7)


def test_linear_closed_form_l2_matches_slsqp():
    rng = np.random.default_rng(2)
    a = random_action_set(rng, 4, 2)
    X = rng.normal(size=(6, 4))
    g = rng.normal(size=(6, 4))
    exact = linear_program_closed_form(torch.as_tensor(g), torch.as_tensor(X), a).numpy()
    lo, hi = a.box(X)
    for i in range(len(X)):
        res = minimize(
            lambda d, i=i: g[i] @ d,
            np.zeros(4),
            jac=lambda d, i=i: g[i],
            bounds=list(zip(lo[i], hi[i], strict=True)),
            constraints=[
                {"type": "ineq", "fun": lambda d: a.epsilon**2 - np.sum((a.weights_ * d) ** 2)}
            ],
            method="SLSQP",
            options={"ftol": 1e-12, "maxiter": 500},
        )
        assert g[i] @ exact[i] <= res.fun + 1e-6


@pytest.mark.parametrize("method", ["pgd", "wachter", "linear"])
@pytest.mark.parametrize("p", [1, 2, np.inf])
def test_every_method_is_feasible_and_never_hurts(binary_problem, method, p):
    X, _, model = binary_problem
    a = ActionSet(4, immutable=[3], increase_only=[0], max_change=1.0, p=p, epsilon=0.8)
    res = individual_recourse(model, X, 1, a, method=method)
    assert a.contains(X, res.delta).all()
    assert np.all(res.delta[:, 3] == 0)
    base = -np.log(model.predict_proba(X)[:, 1])
    assert np.all(res.loss <= base + 1e-9) or method == "linear"
    np.testing.assert_array_equal(res.success, model.predict(X + res.delta) == 1)
    np.testing.assert_allclose(res.cost, a.cost(res.delta))


def test_linear_delta_raises_the_positive_score(binary_problem):
    X, _, model = binary_problem
    a = ActionSet(4, immutable=[3], increase_only=[0], max_change=1.0, p=1, epsilon=0.8)
    res = individual_recourse(model, X, 1, a, method="linear")
    before = model.predict_proba(X)[:, 1]
    after = model.predict_proba(X + res.delta)[:, 1]
    assert np.all(after >= before)
    assert np.mean(after > before) > 0.99


def test_pgd_reaches_the_closed_form_optimum_for_a_linear_model(binary_problem):
    # for logistic regression and an ℓ2 ball, the best δ is ε · w/‖w‖ (no box)
    X, _, model = binary_problem
    a = ActionSet(4, p=2, epsilon=0.5)
    res = individual_recourse(model, X[:50], 1, a, method="pgd", steps=200)
    w = model.coef_.ravel()
    best = X[:50] + 0.5 * w / np.linalg.norm(w)
    optimum = -np.log(model.predict_proba(best)[:, 1])
    np.testing.assert_allclose(res.loss, optimum, rtol=1e-4, atol=1e-8)


def test_wachter_is_cheaper_than_pgd(binary_problem):
    X, _, model = binary_problem
    a = ActionSet(4, p=2, epsilon=2.0)
    pgd = individual_recourse(model, X, 1, a, method="pgd")
    wachter = individual_recourse(model, X, 1, a, method="wachter", lam=0.5)
    assert wachter.cost.mean() < pgd.cost.mean()


def test_per_row_goals_and_bad_arguments(binary_problem):
    X, _, model = binary_problem
    a = ActionSet(4, epsilon=0.3)
    goals = np.arange(len(X)) % 2
    res = individual_recourse(model, X, goals, a, method="pgd", steps=20)
    base = -np.log(model.predict_proba(X)[np.arange(len(X)), goals])
    assert np.all(res.loss <= base + 1e-12)
    with pytest.raises(ConfigError, match="method='gd'"):
        individual_recourse(model, X, 1, a, method="gd")
    with pytest.raises(ConfigError, match="3 features"):
        individual_recourse(model, X, 1, ActionSet(3), method="pgd")


def test_pgd_steps_follow_the_cost_metric():
    # a feature in large units with a small cost weight (like a credit score in points at
    # 0.01 per point) must be able to use its whole budget, as in unit-free problems
    rng = np.random.default_rng(3)
    X = np.c_[rng.uniform(300, 850, 300), rng.normal(size=300)]
    y = (X[:, 0] / 100 + X[:, 1] + 0.5 * rng.normal(size=300) > 6).astype(np.int64)
    model = LogisticRegression(C=1.0).fit(X, y)
    a = ActionSet(2, immutable=[1], increase_only=[0], cost_weights=[0.01, 1.0], epsilon=0.5)
    res = individual_recourse(model, X, 1, a, method="pgd", steps=50)
    np.testing.assert_allclose(res.delta[:, 0], 50.0, rtol=1e-6)  # the budget: 50 points


# -- the closed-form descent against autograd --------------------------------------------
# "pgd" on a binary logistic regression follows its margin; on softmax it takes the
# closed-form gradient; "wachter" with λ = 0 descends the same objective through autograd.


@pytest.mark.parametrize("p", [2, np.inf, 1])
@pytest.mark.parametrize("standardize", [False, True])
def test_margin_pgd_matches_the_autograd_descent(p, standardize):
    from recourse_sim.recourse.individual import _descent

    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 4)) * [1.0, 10.0, 0.1, 1.0]
    y = (X @ np.array([1.0, 0.1, -5.0, 0.0]) + 0.3 * rng.normal(size=300) > 0).astype(np.int64)
    learner = LogisticRegression(C=10.0, standardize=standardize).fit(X, y)
    a = random_action_set(rng, 4, p)
    goal = 1 - y[:60]  # every row wants the other class
    state = learner.state()
    fast = _descent(learner, state, X[:60], goal, a, "pgd", 10, None, 0.0)
    slow = _descent(learner, state, X[:60], goal, a, "wachter", 10, None, 0.0)

    margin = learner.goal_margin_coef(state, goal)
    loss = -np.log(learner.predict_proba(X[:60] + slow)[np.arange(60), goal])
    # −log p(goal) near p = 1 resolves only ~1e-16 in p: there the autograd descent's
    # pick among later iterates is rounding; the margin's (the furthest) is no worse
    resolved = loss > 1e-6
    assert resolved.sum() >= 30
    np.testing.assert_allclose(fast[resolved], slow[resolved], atol=1e-9, rtol=1e-9)
    assert np.all((fast * margin).sum(1) >= (slow * margin).sum(1) - 1e-9)


def test_closed_form_pgd_matches_autograd_for_softmax():
    from recourse_sim.recourse.individual import _descent

    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 3))
    y = np.argmax(X @ rng.normal(size=(3, 3)), axis=1)
    learner = LogisticRegression(C=1.0).fit(X, y)
    a = ActionSet(3, increase_only=[0], cost_weights=[1.0, 0.5, 2.0], p=2, epsilon=1.5)
    goal = (y[:50] + 1) % 3
    state = learner.state()
    fast = _descent(learner, state, X[:50], goal, a, "pgd", 8, None, 0.0)
    slow = _descent(learner, state, X[:50], goal, a, "wachter", 8, None, 0.0)
    np.testing.assert_allclose(fast, slow, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("method", ["pgd", "wachter", "linear"])
def test_individual_delta_is_individual_recourses_delta(binary_problem, method):
    from recourse_sim.recourse.individual import individual_delta

    X, _, model = binary_problem
    a = ActionSet(4, immutable=[3], increase_only=[0], max_change=1.0, p=2, epsilon=0.8)
    goals = np.arange(len(X)) % 2
    for X_in in (X[:50], torch.as_tensor(X[:50])):
        full = individual_recourse(model, X_in, goals[:50], a, method=method, steps=7)
        alone = individual_delta(model, X_in, goals[:50], a, method=method, steps=7)
        assert isinstance(alone, np.ndarray) and alone.dtype == np.float64
        np.testing.assert_array_equal(alone, full.delta)
    state = model.state()  # the learner's own state is only read
    individual_delta(model, X[:20], 1, a, method=method)
    assert all(torch.equal(model.state_[k], state[k]) for k in state)
