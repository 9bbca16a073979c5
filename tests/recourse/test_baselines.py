"""Growing spheres and nearest-neighbour recourse: validity, feasibility, brute force."""

from __future__ import annotations

import numpy as np
import pytest

from recourse_sim.errors import ConfigError
from recourse_sim.learners import LogisticRegression
from recourse_sim.recourse import ActionSet
from recourse_sim.recourse.baselines import growing_spheres, nearest_neighbour_recourse

W = np.array([1.0, 1.0, 0.3])  # the toy boundary: x₀ + x₁ + 0.3·x₂ = 1


def score(X: np.ndarray) -> np.ndarray:
    """h(x) of the toy problem; feature 2 is a binary feature."""
    return 1.0 / (1.0 + np.exp(-12.0 * (X @ W - 1.0)))


@pytest.fixture
def negatives() -> np.ndarray:
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(size=(300, 2)), rng.integers(0, 2, size=300)])
    return X[score(X) < 0.5][:40]


# --------------------------------------------------------------------- growing spheres
def test_growing_spheres_valid_feasible_and_near_the_boundary(negatives):
    actions = ActionSet(3, immutable=[2], lower=0, upper=1, p=2, epsilon=2.0)
    result = growing_spheres(negatives, score, actions, n_samples=500, random_state=0)
    assert result.success.all()
    assert actions.contains(negatives, result.delta).all()
    np.testing.assert_array_equal(result.delta[:, 2], 0.0)
    # the closest favourable point is at ℓ2 distance (1 − wᵀx) / ‖w_free‖ from x
    optimal = (1.0 - negatives @ W) / np.sqrt(2.0)
    assert np.all(result.cost >= optimal - 1e-9)
    assert np.mean(result.cost - optimal) < 0.1
    np.testing.assert_allclose(result.cost, np.linalg.norm(result.delta, axis=1))


def test_growing_spheres_snaps_levels_and_respects_directions(negatives):
    actions = ActionSet(3, increase_only=[2], decrease_only=[1], lower=0, upper=1, epsilon=3.0)
    levels = {2: np.array([0.0, 1.0])}
    result = growing_spheres(negatives, score, actions, levels=levels, random_state=1)
    after = negatives + result.delta
    assert result.success.all()
    assert actions.contains(negatives, result.delta).all()
    assert np.isin(after[:, 2], [0.0, 1.0]).all()


def test_growing_spheres_sparse_step_changes_fewer_features(negatives):
    actions = ActionSet(3, lower=0, upper=1, epsilon=3.0)
    levels = {2: np.array([0.0, 1.0])}
    kwargs = {"levels": levels, "n_samples": 300, "random_state": 2}
    dense = growing_spheres(negatives, score, actions, sparse=False, **kwargs)
    sparse = growing_spheres(negatives, score, actions, sparse=True, **kwargs)
    assert sparse.success.all()
    assert np.all((sparse.delta != 0).sum(1) <= (dense.delta != 0).sum(1))


def test_growing_spheres_leaves_favourable_rows_and_is_seeded():
    X = np.array([[0.9, 0.9, 0.0], [0.1, 0.2, 1.0]])
    actions = ActionSet(3, immutable=[2], lower=0, upper=1, epsilon=2.0)
    a = growing_spheres(X, score, actions, n_samples=100, random_state=5)
    np.testing.assert_array_equal(a.delta[0], 0.0)
    assert a.success.all()
    b = growing_spheres(X, score, actions, n_samples=100, random_state=5)
    np.testing.assert_array_equal(a.delta, b.delta)


def test_growing_spheres_gives_up_when_nothing_is_reachable():
    X = np.array([[0.1, 0.1, 0.0]])
    actions = ActionSet(3, immutable=[2], lower=0, upper=0.3, epsilon=2.0)  # line out of reach
    result = growing_spheres(X, score, actions, n_samples=50, max_layers=50, random_state=0)
    np.testing.assert_array_equal(result.delta, 0.0)
    assert not result.success.any()


def test_growing_spheres_accepts_a_learner():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 2))
    y = (X.sum(1) > 0).astype(np.int64)
    learner = LogisticRegression(C=10.0).fit(X, y)
    negatives = X[learner.predict(X) == 0][:10]
    actions = ActionSet(2, p=2, epsilon=10.0)
    result = growing_spheres(negatives, learner, actions, n_samples=200, random_state=0)
    assert result.success.all()


def test_growing_spheres_rejects_bad_arguments(negatives):
    actions = ActionSet(3)
    with pytest.raises(ConfigError, match="features"):
        growing_spheres(negatives[:, :2], score, actions)
    with pytest.raises(ConfigError, match="n_samples"):
        growing_spheres(negatives, score, actions, n_samples=0)
    with pytest.raises(ConfigError, match="first_radius"):
        growing_spheres(negatives, score, actions, first_radius=-1.0)


# ------------------------------------------------------------ nearest-neighbour recourse
def test_nnr_matches_brute_force(negatives):
    rng = np.random.default_rng(1)
    pool = np.column_stack([rng.uniform(size=(150, 2)), rng.integers(0, 2, size=150)])
    actions = ActionSet(3, immutable=[2], increase_only=[0], lower=0, upper=1, p=1, epsilon=0.8)
    result = nearest_neighbour_recourse(negatives, pool, score, actions, threshold=0.6)
    for x, delta in zip(negatives, result.delta, strict=True):
        best, best_cost = np.zeros(3), np.inf
        for c in pool:
            d = c - x
            if score(c[None])[0] > 0.6 and actions.contains(x[None], d[None])[0]:
                if np.abs(d).sum() < best_cost:
                    best, best_cost = d, np.abs(d).sum()
        np.testing.assert_allclose(delta, best)
    assert actions.contains(negatives, result.delta).all()
    reached = (result.delta != 0).any(1)
    assert reached.any() and result.success[reached].all()
    assert not result.success[~reached].any()  # no candidate: stay put, still rejected


def test_nnr_without_candidates_stays_put(negatives):
    actions = ActionSet(3)
    result = nearest_neighbour_recourse(negatives, negatives, score, actions)
    np.testing.assert_array_equal(result.delta, 0.0)
    assert not result.success.any()


def test_nnr_rejects_bad_arguments(negatives):
    actions = ActionSet(3)
    with pytest.raises(ConfigError, match="pool"):
        nearest_neighbour_recourse(negatives, np.zeros((5, 2)), score, actions)
    with pytest.raises(ConfigError, match="threshold"):
        nearest_neighbour_recourse(negatives, negatives, score, actions, threshold=1.0)
