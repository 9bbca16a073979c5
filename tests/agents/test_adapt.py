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


def test_typed_moves_stay_on_the_types_and_caps():
    """A share of an integer, yes/no or one-hot move is a whole one: never beyond the
    share where a cap binds, and on the recourse's side where just enough binds."""
    rng = np.random.default_rng(4)
    n = 300
    aset = ActionSet(
        5,
        feature_types=["integer", "binary", "continuous", "continuous", "continuous"],
        onehot_groups=[[3, 4]],
        cost_weights=[1.0, 2.0, 0.5, 1.0, 1.0],
        p=1,
        epsilon=6.0,
    )
    X = np.column_stack(
        [
            rng.integers(0, 5, n),
            rng.integers(0, 2, n),
            rng.random(n),
            np.eye(2)[rng.integers(0, 2, n)],
        ]
    ).astype(float)
    delta = aset.project(X, rng.normal(size=(n, 5)) * 3)
    tried = rng.random(n) < 0.8
    delta[~tried] = 0.0
    res = IndividualResult(delta, tried, np.asarray(aset.cost(delta)))
    v = rng.random(n)
    spec = _spec(move=0.7, tolerance={"kind": "uniform", "low": 0.2, "high": 3.0})
    out = adapt(spec, res, v, action_set=aset, X=X)
    assert aset.contains(X, out.delta).all()
    np.testing.assert_allclose(out.cost, np.asarray(aset.cost(out.delta)))
    cap = np.minimum(effort_tolerance(spec.tolerance, v), 0.7 * res.cost)
    assert (out.cost <= cap + 1e-12).all()  # the caps hold after rounding
    enough = rng.random(n)
    out = adapt(_spec(), res, v, enough, action_set=aset, X=X)
    assert aset.contains(X, out.delta).all()
    # on the recourse's side of the share, and never beyond the recourse itself
    share = enough[:, None] * delta
    assert (np.abs(out.delta) >= np.abs(share) - 1e-12)[:, :2].all()
    assert (np.abs(out.delta) <= np.abs(delta) + 1e-12).all()
