"""How far seekers move: a share of the way, and no further than their effort tolerance."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from recourse_sim.agents.strategies import IndividualResult, adapt, effort_tolerance
from recourse_sim.recourse import ActionSet
from recourse_sim.scenarios import IndividualPopulation


def _spec(**kw) -> IndividualPopulation:
    return IndividualPopulation(strategy="individual", **kw)


def _result(rng, n: int = 200) -> tuple[IndividualResult, ActionSet, np.ndarray]:
    aset = ActionSet(3, cost_weights=[1.0, 2.0, 0.5], p=2, epsilon=2.0, lower=[0, 0, 0])
    X = rng.random((n, 3)) * 3
    delta = aset.project(X, rng.normal(size=(n, 3)))
    tried = rng.random(n) < 0.7
    delta[~tried] = 0.0
    return IndividualResult(delta, tried, np.asarray(aset.cost(delta))), aset, X


def test_full_moves_are_the_recourse_itself():
    res, _, _ = _result(np.random.default_rng(0))
    assert adapt(_spec(), res, np.random.default_rng(1).random(200)) is res


def test_a_share_of_the_way_costs_that_share_and_stays_in_the_action_set():
    rng = np.random.default_rng(2)
    res, aset, X = _result(rng)
    out = adapt(_spec(move=0.3), res, rng.random(200))
    np.testing.assert_allclose(out.delta, 0.3 * res.delta)
    np.testing.assert_allclose(out.cost, np.asarray(aset.cost(out.delta)), atol=1e-12)
    assert aset.contains(X, out.delta).all()
    assert (out.tried == res.tried).all()


@pytest.mark.parametrize(
    "tolerance",
    [{"kind": "uniform", "low": 0.2, "high": 1.5}, {"kind": "lognormal", "median": 0.8}],
)
def test_nobody_spends_more_than_their_tolerance(tolerance):
    rng = np.random.default_rng(3)
    res, aset, X = _result(rng)
    spec = _spec(move=0.9, tolerance=tolerance)
    v = rng.random(200)
    tau = effort_tolerance(spec.tolerance, v)
    out = adapt(spec, res, v)
    assert (out.cost <= np.minimum(tau, 0.9 * res.cost) + 1e-12).all()
    # people within their tolerance go the share `move` of the way; the others stop at it
    inside = 0.9 * res.cost <= tau
    np.testing.assert_allclose(out.cost[inside], 0.9 * res.cost[inside])
    np.testing.assert_allclose(out.cost[~inside & res.tried], tau[~inside & res.tried])
    assert aset.contains(X, out.delta).all()


def test_tolerances_follow_their_distribution():
    v = (np.arange(20_000) + 0.5) / 20_000  # evenly spread quantiles
    uniform = _spec(tolerance={"kind": "uniform", "low": 0.5, "high": 2.0}).tolerance
    assert stats.kstest(effort_tolerance(uniform, v), stats.uniform(0.5, 1.5).cdf).statistic < 1e-3
    lognormal = _spec(tolerance={"kind": "lognormal", "median": 0.8, "sigma": 0.4}).tolerance
    dist = stats.lognorm(s=0.4, scale=0.8)
    assert stats.kstest(effort_tolerance(lognormal, v), dist.cdf).statistic < 1e-3
