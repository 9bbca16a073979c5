"""Population strategies: the registry and each strategy's act()."""

from __future__ import annotations

import numpy as np
import pytest

import recourse_sim.agents as agents
from recourse_sim.agents import REGISTRY, Controlled, Individual, make_strategy
from recourse_sim.errors import ConfigError
from recourse_sim.learners import make_learner
from recourse_sim.recourse import ActionSet
from recourse_sim.scenarios import (
    STRATEGIES,
    ControlledPopulation,
    IndividualPopulation,
)


def test_registry_matches_the_scenario_schema():
    assert tuple(REGISTRY) == STRATEGIES
    assert "genre" in REGISTRY


def test_unknown_strategy_names_the_valid_ones():
    class Spec:
        strategy = "telepathy"

    with pytest.raises(ConfigError) as info:
        make_strategy("p", Spec(), ActionSet(2))
    for name in STRATEGIES:
        assert name in str(info.value)


def _fitted():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(-1, 0.5, (50, 2)), rng.normal(1, 0.5, (50, 2))])
    y = np.repeat([0, 1], 50)
    return make_learner("logistic_regression").fit(X, y), X, y


def test_individual_acts_only_for_participating_seekers():
    learner, X, _ = _fitted()
    aset = ActionSet(2, epsilon=0.5)
    spec = IndividualPopulation(
        strategy="individual", participation=1.0, epsilon=0.5, objective="budget"
    )
    s = make_strategy("p", spec, aset)
    assert isinstance(s, Individual)
    seekers = np.zeros(100, bool)
    seekers[:10] = True
    res = s.act(learner, X, seekers, 1, np.random.default_rng(0))
    assert np.array_equal(res.tried, seekers)
    assert not res.delta[~seekers].any() and res.delta[seekers].any()
    assert aset.contains(X, res.delta).all()
    assert (res.cost[seekers] <= 0.5 + 1e-9).all()
    nobody = make_strategy("p", spec.model_copy(update={"participation": 0.0}), aset)
    assert not nobody.act(learner, X, seekers, 1, np.random.default_rng(0)).tried.any()


def test_controlled_applies_a_direction_per_class_within_the_action_set():
    learner, X, y = _fitted()
    aset = ActionSet(2, decrease_only=[1], epsilon=0.3, lower=[-np.inf, -1.0])
    spec = ControlledPopulation(strategy="controlled", epsilon=0.3)
    s = make_strategy("p", spec, aset)
    assert isinstance(s, Controlled) and s.actionable_index.tolist() == [0, 1]
    members = np.ones(100, bool)
    members[::2] = False
    action = np.array([[1.0, 1.0], [-1.0, -1.0]])
    delta = s.act(learner, X, y, members, X[:1], 1, action=action)
    assert not delta[~members].any()
    assert aset.contains(X, delta).all()
    class0 = members & (y == 0)
    # feature 1 may only go down: class 0's upward push on it is cut to zero
    assert (delta[class0, 0] > 0).all() and (delta[class0, 1] == 0).all()
    class1 = members & (y == 1)
    assert (delta[class1] <= 0).all() and (delta[class1] < 0).any()


def test_package_exports():
    for name in agents.__all__:
        assert hasattr(agents, name)
