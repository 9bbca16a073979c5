"""PerfGD and the two-point derivative-free rule on a toy with a known performative optimum."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from recourse_sim.errors import ConfigError
from recourse_sim.learners import LogisticRegression
from recourse_sim.learners.performative import PerformativeLogisticRegression

# A fixed population on one feature; class 0 responds to the model with a location shift
# linear in its weight (x = x0 + A w): the distribution map is known, so the performative
# risk PR(w, b) is a smooth function of two numbers whose minimiser a simplex search finds.
N, A, C = 2000, 1.0, 1.0
_rng = np.random.default_rng(0)
Y = np.repeat([0, 1], N // 2)
X0 = np.where(Y == 1, 1.0, -1.0)[:, None] + _rng.standard_normal((N, 1))


def respond(w: float) -> np.ndarray:
    return X0 + A * w * (Y == 0)[:, None]


def performative_risk(theta) -> float:
    w, b = theta
    z = respond(w)[:, 0] * w + b
    return float(np.mean(np.logaddexp(0.0, z) - Y * z) + w * w / (2 * C * N))


@pytest.fixture(scope="module")
def optimum():
    res = minimize(
        performative_risk,
        [1.0, 0.0],
        method="Nelder-Mead",
        options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 10000},
    )
    return res.x


def _play(learner, rounds: int):
    for _ in range(rounds):
        learner.update(respond(learner.coef_[0, 0]), Y)
    return learner


def test_perfgd_reaches_the_performative_optimum(optimum):
    model = _play(PerformativeLogisticRegression(C=C, update_rule="perfgd", lr=1.0).fit(X0, Y), 80)
    theta = np.r_[model.coef_[0], model.intercept_]
    np.testing.assert_allclose(theta, optimum, atol=5e-3)
    # repeated risk minimisation stops at the stable point, which is worse
    rrm = _play(LogisticRegression(C=C, update_rule="window", window=1).fit(X0, Y), 50)
    stable = np.r_[rrm.coef_[0], rrm.intercept_]
    assert performative_risk(stable) > performative_risk(optimum) + 0.05
    assert abs(stable[0] - optimum[0]) > 0.3


def test_dfo_reaches_the_performative_optimum(optimum):
    model = PerformativeLogisticRegression(
        C=C, update_rule="dfo", lr=0.5, perturbation=0.05, random_state=3
    ).fit(X0, Y)
    _play(model, 1500)
    centre = model.state_["centre"].numpy()[0]
    np.testing.assert_allclose(centre, optimum, atol=5e-3)
    # the deployed model alternates around the centre, δ away
    deployed = np.r_[model.coef_[0], model.intercept_]
    assert np.linalg.norm(deployed - centre) == pytest.approx(0.05)


def test_dfo_is_reproducible():
    a = _play(PerformativeLogisticRegression(update_rule="dfo", random_state=1).fit(X0, Y), 6)
    b = _play(PerformativeLogisticRegression(update_rule="dfo", random_state=1).fit(X0, Y), 6)
    np.testing.assert_array_equal(a.coef_, b.coef_)


def test_unknown_rule_named():
    with pytest.raises(ConfigError, match="update_rule='rgd'"):
        PerformativeLogisticRegression(update_rule="rgd").fit(X0, Y)


@pytest.mark.parametrize("rule", ["perfgd", "dfo"])
def test_state_keeps_its_shapes(rule):
    """Checkpoints compare a restored state with a fresh learner's: no entry may grow."""
    model = PerformativeLogisticRegression(update_rule=rule).fit(X0, Y)
    shapes = {k: tuple(v.shape) for k, v in model.state_.items()}
    _play(model, 7)
    assert {k: tuple(v.shape) for k, v in model.state_.items()} == shapes
