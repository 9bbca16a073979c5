"""Property tests: feasibility of every recourse path, determinism and metric ranges."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recourse_sim import load_scenario, simulate
from recourse_sim.agents import make_strategy
from recourse_sim.learners import LogisticRegression
from recourse_sim.recourse import ActionSet, collective_recourse, individual_recourse

RATES = ("acceptance_rate", "recourse_success_rate", "true_outcome_rate", "model_accuracy")


@st.composite
def action_sets(draw, d: int) -> ActionSet:
    kind = draw(st.lists(st.integers(0, 3), min_size=d, max_size=d))
    return ActionSet(
        d,
        immutable=[j for j in range(d) if kind[j] == 1],
        increase_only=[j for j in range(d) if kind[j] == 2],
        decrease_only=[j for j in range(d) if kind[j] == 3],
        max_change=draw(st.lists(st.floats(0.0, 2.0), min_size=d, max_size=d)),
        cost_weights=draw(st.lists(st.floats(0.1, 3.0), min_size=d, max_size=d)),
        p=draw(st.sampled_from([1, 2, np.inf])),
        epsilon=draw(st.floats(0.0, 3.0)),
    )


def _problem(seed: int, n: int = 60, d: int = 3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) > 0).astype(np.int64)
    if y.min() == y.max():
        y[0] = 1 - y[0]
    return X, y, LogisticRegression(C=1.0).fit(X, y)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(action_sets(3), st.sampled_from(["pgd", "wachter", "linear"]), st.integers(0, 10**6))
def test_individual_recourse_stays_in_its_action_set(action_set, method, seed):
    X, _, model = _problem(seed)
    res = individual_recourse(model, X, 1, action_set, method=method, steps=15)
    assert action_set.contains(X, res.delta).all()
    assert np.all(res.cost >= 0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(action_sets(3), st.integers(0, 10**6), st.floats(0.0, 1.0))
def test_collective_recourse_stays_in_its_action_set(action_set, seed, share):
    X, y, model = _problem(seed)
    members = np.random.default_rng(seed).random(len(X)) < share
    res = collective_recourse(model, X, y, X[:3], 1, action_set, members=members, steps=10)
    assert action_set.contains(X, res.delta).all()
    assert np.all(res.delta[~members] == 0)


def _small_school(epsilon: float, participation: float, homophily: float):
    return load_scenario(
        "school_assignment",
        overrides=[
            "world.cohort_size=300",
            "world.history_size=600",
            f"populations.students.epsilon={epsilon}",
            f"populations.h1_students.epsilon={epsilon}",
            f"populations.h1_students.participation={participation}",
            f"populations.h1_students.graph.homophily={homophily}",
        ],
    )


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.floats(0.0, 2.0),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.integers(0, 2**31 - 1),
)
def test_simulate_is_deterministic_and_metrics_in_range(epsilon, participation, homophily, seed):
    scenario = _small_school(epsilon, participation, homophily)
    first = simulate(scenario, rounds=2, seed=seed)
    pd.testing.assert_frame_equal(first, simulate(scenario, rounds=2, seed=seed))
    for column in RATES:
        values = first[column].dropna()
        assert values.between(0.0, 1.0).all(), column
    assert (first["mean_cost"].dropna() >= 0).all()
    assert (first["mean_cost"].dropna() <= epsilon + 1e-9).all()


def _spec(strategy: str, participation: float) -> SimpleNamespace:
    """The fields of a scenario population block that the strategies read."""
    return SimpleNamespace(
        strategy=strategy,
        participation=participation,
        method="pgd",
        objective="min_cost",
        margin=0.0,
        steps=10,
        horizon=1,
        solver="pgd",
        action="shift",
        budget_levels=4,
        groups=None,
        labels=None,
    )


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    action_sets(3),
    st.integers(0, 10**6),
    st.floats(0.0, 1.0),
    st.sampled_from(["min_cost", "budget"]),
)
def test_every_population_strategy_stays_in_its_action_set(action_set, seed, share, objective):
    X, y, model = _problem(seed)
    rng = np.random.default_rng(seed)
    mask = rng.random(len(X)) < share
    spec = _spec("individual", share)
    spec.objective = objective
    individual = make_strategy("seekers", spec, action_set)
    delta = individual.act(model, X, mask, 1, rng).delta
    assert action_set.contains(X, delta).all()
    assert np.all(delta[~mask] == 0)
    n_actionable = int(action_set.actionable.sum())
    for name, kind, action in (
        ("collective_oar", "shift", None),
        ("controlled", "shift", rng.uniform(-1, 1, size=(2, n_actionable))),
        ("controlled", "oar", rng.uniform(-1, 1, size=4)),
    ):
        spec = _spec(name, share)
        spec.action = kind
        strategy = make_strategy(name, spec, action_set)
        delta = strategy.act(model, X, y, mask, X[:3], 1, action=action)
        assert action_set.contains(X, delta).all(), name
        assert np.all(delta[~mask] == 0), name


@functools.cache
def _genre_state() -> dict:
    """A GenRe strategy fitted once on a 3-feature problem (its model and buffer)."""
    X, _, model = _problem(0, n=120)
    strategy = make_strategy("seekers", _genre_spec(1.0), ActionSet(3, epsilon=1.0))
    strategy.act(model, X, model.predict(X) == 0, 1, np.random.default_rng(0))
    assert strategy.model is not None
    return strategy.get_state()


def _genre_spec(participation: float) -> SimpleNamespace:
    return SimpleNamespace(
        **vars(_spec("genre", participation)),
        retrain_every=10**6,  # the fitted model is reused: no refit inside an example
        memory=500,
        epochs=2,
        layers=1,
        samples=4,
        temperature=10.0,
        lam=5.0,
        gamma=0.7,
    )


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(action_sets(3), st.integers(0, 10**6), st.floats(0.0, 1.0))
def test_genre_strategy_stays_in_its_action_set(action_set, seed, share):
    X, _, model = _problem(seed)
    rng = np.random.default_rng(seed)
    seekers = rng.random(len(X)) < 0.7
    strategy = make_strategy("seekers", _genre_spec(share), action_set)
    strategy.set_state(_genre_state())
    res = strategy.act(model, X, seekers, 1, rng)
    assert action_set.contains(X, res.delta).all()
    assert not (res.tried & ~seekers).any()
    assert np.all(res.delta[~res.tried] == 0) and np.all(res.cost[~res.tried] == 0)
