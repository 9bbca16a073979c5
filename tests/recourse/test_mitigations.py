"""Altmeyer et al.'s mitigations (ClaPROAR, gravitational) against independent answers:
finite differences of the external cost, hand-computed costs, and on a 2-D linear toy
the counterfactuals measured against the plain cheapest recourse and Wachter's search."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recourse_sim.errors import ConfigError
from recourse_sim.learners import make_learner
from recourse_sim.recourse import ActionSet
from recourse_sim.recourse.individual import individual_delta
from recourse_sim.recourse.mitigations import external_cost, mitigated_delta, target_centroid
from recourse_sim.scenarios import load_scenario


def _toy(seed: int = 0):
    """Two Gaussian blobs in 2-D, a logistic regression that remembers its rows, and
    rows of the unfavourable blob."""
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(-1.5, 0.7, (200, 2)), rng.normal(1.5, 0.7, (200, 2))])
    y = np.repeat([0, 1], 200)
    learner = make_learner("logistic_regression", update_rule="refit", standardize=False)
    return learner.fit(X, y), X, y


def _numeric_grad(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central differences of a scalar function of one row."""
    g = np.zeros_like(x)
    for j in range(len(x)):
        e = np.zeros_like(x)
        e[j] = h
        g[j] = (f(x + e) - f(x - e)) / (2 * h)
    return g


@pytest.mark.parametrize("method", ["claproar", "gravitational"])
def test_external_cost_gradient_equals_finite_differences(method):
    learner, X, y = _toy()
    aset = ActionSet(n_features=2, p=2, epsilon=10.0, cost_weights=[1.0, 2.0])
    centroid = X[y == 1].mean(0)
    # rows already labelled favourable (claproar's cost is counted there) and off the centroid
    rows = np.array([[0.4, 0.9], [1.0, -0.2], [2.5, 2.5]])
    goal = torch.ones(len(rows), dtype=torch.long)

    def cost(x: np.ndarray) -> float:
        t = torch.from_numpy(x[None])
        c = external_cost(learner, learner.state_, t, goal[:1], method, aset, centroid)
        return float(c[0])

    Xt = torch.from_numpy(rows).requires_grad_(True)
    c = external_cost(learner, learner.state_, Xt, goal, method, aset, centroid)
    (grad,) = torch.autograd.grad(c.sum(), Xt)
    for i, x in enumerate(rows):
        np.testing.assert_allclose(grad[i].numpy(), _numeric_grad(cost, x), rtol=1e-6, atol=1e-8)


def test_external_costs_equal_their_definitions():
    """ClaPROAR: −log p(goal | x') where x' has the goal label, 0 where not;
    gravitational: the weighted ℓ2 distance to the centroid."""
    learner, *_ = _toy()
    aset = ActionSet(n_features=2, p=2, epsilon=10.0, cost_weights=[1.0, 2.0])
    rows = np.array([[0.4, 0.9], [-1.0, -1.0]])
    goal = torch.ones(2, dtype=torch.long)
    p = learner.predict_proba(rows)[:, 1]
    assert p[0] > 0.5 > p[1]
    clap = external_cost(learner, learner.state_, torch.from_numpy(rows), goal, "claproar", aset)
    np.testing.assert_allclose(clap.numpy(), [-np.log(p[0]), 0.0], rtol=1e-10)
    c = np.array([1.0, 2.0])
    grav = external_cost(
        learner, learner.state_, torch.from_numpy(rows), goal, "gravitational", aset, c
    )
    expected = np.sqrt((((rows - c) * [1.0, 2.0]) ** 2).sum(1))
    np.testing.assert_allclose(grav.numpy(), expected, rtol=1e-9)


def test_target_centroid_is_the_goal_rows_mean():
    learner, X, y = _toy()
    np.testing.assert_allclose(
        target_centroid(learner, learner.state_, X[:5], 1), X[y == 1].mean(0)
    )
    sgd = make_learner("logistic_regression", update_rule="sgd", standardize=False).fit(X, y)
    favoured = X[sgd.predict(X) == 1]
    np.testing.assert_allclose(target_centroid(sgd, sgd.state_, X, 1), favoured.mean(0))


def test_on_a_linear_toy_mitigated_recourse_ends_deeper_and_nearer_the_centroid():
    """Measured on 40 rejected rows: the plain cheapest recourse ends on the boundary
    (p = 0.5); both mitigations end in the favourable class with a higher probability
    than it and than Wachter's search without the external cost, and gravitational
    nearer the favourable centroid than both."""
    learner, X, y = _toy(1)
    aset = ActionSet(n_features=2, p=2, epsilon=6.0)
    Xn = X[:200][learner.predict(X[:200]) == 0][:40]
    centroid = X[y == 1].mean(0)
    plain = individual_delta(learner, Xn, 1, aset, "linear", objective="min_cost", target=0.5)
    wachter = mitigated_delta(learner, Xn, 1, aset, "claproar", weight=0.0)

    def proba(d):
        return learner.predict_proba(Xn + d)[:, 1]

    def distance(d):
        return np.linalg.norm(Xn + d - centroid, axis=1)

    np.testing.assert_allclose(proba(plain), 0.5, atol=1e-6)
    for method in ("claproar", "gravitational"):
        d = mitigated_delta(learner, Xn, 1, aset, method)
        assert aset.contains(Xn, d).all()
        assert (proba(d) > 0.5).all()
        assert proba(d).mean() > proba(wachter).mean() > proba(plain).mean()
        assert distance(d).mean() < distance(plain).mean()
    grav = mitigated_delta(learner, Xn, 1, aset, "gravitational")
    assert distance(grav).mean() < 0.6 * distance(wachter).mean()


def test_mitigated_recourse_stays_in_a_typed_action_set():
    learner, X, _ = _toy(2)
    Xi = np.round(X[:200][learner.predict(X[:200]) == 0][:10])
    aset = ActionSet(n_features=2, p=1, epsilon=8.0, feature_types=["integer", "continuous"])
    for method in ("claproar", "gravitational"):
        d = mitigated_delta(learner, Xi, 1, aset, method, steps=10)
        assert aset.contains(Xi, d).all() and aset.respects_types(Xi, d).all()


def test_bad_arguments_are_one_clear_error():
    learner, X, _ = _toy()
    aset = ActionSet(n_features=2, p=2, epsilon=1.0)
    with pytest.raises(ConfigError, match="method='wachter'"):
        mitigated_delta(learner, X[:2], 1, aset, "wachter")
    with pytest.raises(ConfigError, match="weight"):
        mitigated_delta(learner, X[:2], 1, aset, "claproar", weight=-1.0)


def test_scenarios_take_the_methods_with_the_budget_objective_only():
    for method in ("claproar", "gravitational"):
        sc = load_scenario(
            "lending_german",
            {"populations.applicants.method": method, "populations.applicants.objective": "budget"},
        )
        assert sc.populations["applicants"].mitigation_weight == 5.0
    with pytest.raises(ConfigError, match="objective 'budget' only"):
        load_scenario("lending_german", {"populations.applicants.method": "claproar"})


@pytest.mark.parametrize("method", ["claproar", "gravitational"])
def test_a_run_with_mitigated_seekers_moves_them_and_the_batched_env_refuses_it(method):
    from recourse_sim.env import RecourseEnv
    from recourse_sim.env.batched_scope import native_reason
    from recourse_sim.simulate import simulate

    overrides = {
        "world.cohort_size": 100,
        "world.history_size": 300,
        "rounds": 2,
        "populations.students.method": method,
        "populations.students.objective": "budget",
    }
    sc = load_scenario("school_assignment_controlled", overrides)
    assert "students': recourse other than same-round min_cost" in native_reason(RecourseEnv(sc))
    metrics = simulate(load_scenario("school_assignment", overrides), seed=0)
    everyone = metrics[metrics["group"] == "all"]
    assert (everyone["n_seekers"] > 0).all() and (everyone["mean_cost"] > 0).all()
