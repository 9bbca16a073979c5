"""ActionSet: declarations, projection feasibility, idempotence and optimality."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from recourse_sim.errors import ConfigError, InfeasibleActionSetError
from recourse_sim.recourse import ActionSet

TOL = 1e-9
finite = st.floats(-5, 5, allow_nan=False, allow_infinity=False)


@st.composite
def action_sets(draw, d=None):
    d = d or draw(st.integers(1, 6))
    kind = draw(arrays(np.int8, d, elements=st.integers(0, 3)))  # free, immutable, inc, dec
    lower = draw(arrays(np.float64, d, elements=st.one_of(finite, st.just(-np.inf))))
    width = draw(arrays(np.float64, d, elements=st.floats(0, 5)))
    upper = np.where(np.isfinite(lower), lower + width, np.inf)
    max_change = draw(arrays(np.float64, d, elements=st.one_of(st.floats(0, 3), st.just(np.inf))))
    weights = draw(arrays(np.float64, d, elements=st.one_of(st.floats(0.1, 3), st.just(0.0))))
    return ActionSet(
        d,
        immutable=np.flatnonzero(kind == 1).tolist(),
        increase_only=np.flatnonzero(kind == 2).tolist(),
        decrease_only=np.flatnonzero(kind == 3).tolist(),
        lower=lower,
        upper=upper,
        max_change=max_change,
        cost_weights=weights,
        p=draw(st.sampled_from([1, 2, np.inf])),
        epsilon=draw(st.floats(0, 4)),
    )


@st.composite
def problems(draw):
    a = draw(action_sets())
    n = draw(st.integers(1, 5))
    X = draw(arrays(np.float64, (n, a.n_features), elements=finite))
    delta = draw(arrays(np.float64, (n, a.n_features), elements=st.floats(-20, 20)))
    return a, X, delta


def check_feasible(a: ActionSet, X: np.ndarray, d: np.ndarray) -> None:
    assert np.all(d[:, a.immutable_mask] == 0)
    assert np.all(d[:, a.increase_mask] >= 0)
    assert np.all(d[:, a.decrease_mask] <= 0)
    assert np.all(np.abs(d) <= a.max_change_ + TOL)
    outside_before_lo = X < a.lower_  # a bound x already breaks only forbids moving further
    assert np.all((X + d >= a.lower_ - TOL) | (outside_before_lo & (d >= -TOL)))
    outside_before_hi = X > a.upper_
    assert np.all((X + d <= a.upper_ + TOL) | (outside_before_hi & (d <= TOL)))
    assert np.all(a.cost(d) <= a.epsilon + TOL)
    assert a.contains(X, d, tol=TOL).all()


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(problems())
def test_projection_is_feasible_and_idempotent(problem):
    a, X, delta = problem
    d = a.project(X, delta)
    check_feasible(a, X, d)
    np.testing.assert_allclose(a.project(X, d), d, atol=TOL, rtol=0)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(problems(), st.integers(0, 2**32 - 1))
def test_projection_is_nearest_feasible_point(problem, seed):
    # any other feasible point is at least as far from δ as the projection
    a, X, delta = problem
    d = a.project(X, delta)
    rng = np.random.default_rng(seed)
    others = a.project(
        np.repeat(X, 20, axis=0), rng.normal(scale=3, size=(20 * len(X), X.shape[1]))
    )
    dist = np.linalg.norm(d - delta, axis=1)
    other_dist = np.linalg.norm(others - np.repeat(delta, 20, axis=0), axis=1).reshape(len(X), 20)
    assert np.all(dist[:, None] <= other_dist + 1e-7)


def test_l2_projection_matches_closed_form_without_box():
    a = ActionSet(3, p=2, epsilon=2.0)
    delta = np.array([[3.0, 4.0, 0.0], [0.1, 0.2, 0.3]])
    d = a.project(np.zeros_like(delta), delta)
    np.testing.assert_allclose(d[0], [1.2, 1.6, 0.0], atol=1e-12)
    np.testing.assert_array_equal(d[1], delta[1])


def test_l1_projection_matches_soft_threshold():
    a = ActionSet(3, p=1, epsilon=1.0)
    d = a.project(np.zeros((1, 3)), np.array([[2.0, 0.5, -1.0]]))
    np.testing.assert_allclose(d, [[1.0, 0.0, 0.0]], atol=1e-12)  # threshold 1


def test_torch_in_torch_out_and_cost():
    a = ActionSet(2, increase_only=[0], p=np.inf, epsilon=0.5)
    d = a.project(torch.zeros(1, 2), torch.tensor([[-1.0, 2.0]], dtype=torch.float64))
    assert isinstance(d, torch.Tensor)
    assert d.tolist() == [[0.0, 0.5]]
    assert float(a.cost(d)[0]) == 0.5


def test_features_by_name():
    a = ActionSet(
        3, feature_names=["age", "income", "debt"], immutable=["age"], decrease_only=["debt"]
    )
    assert a.immutable_mask.tolist() == [True, False, False]
    assert a.actionable.tolist() == [False, True, True]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"lower": [0, 2], "upper": [1, 1]}, InfeasibleActionSetError, "lower bound 2.0 is above"),
        ({"epsilon": -0.1}, InfeasibleActionSetError, "epsilon must be"),
        ({"immutable": ["b"], "increase_only": ["b"]}, InfeasibleActionSetError, "'b' is declared"),
        ({"increase_only": [0], "decrease_only": [0]}, InfeasibleActionSetError, "'a' is declared"),
        ({"immutable": ["zz"]}, ConfigError, "unknown feature 'zz'"),
        ({"immutable": [5]}, ConfigError, "index 5 out of range"),
        ({"p": 3}, ConfigError, "p must be 1, 2 or inf"),
        ({"cost_weights": [1, -1]}, ConfigError, "cost weight -1.0"),
        ({"max_change": [1, 2, 3]}, ConfigError, "expected 2 values"),
    ],
)
def test_bad_declarations_raise_typed_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        ActionSet(2, feature_names=["a", "b"], **kwargs)


# -- fast paths against the multiplier search -------------------------------------------


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(problems())
def test_projection_fast_paths_match_the_root_search(problem):
    # rows within the budget after the box clip and single-feature sets skip the search
    a, X, delta = problem
    fast = a.project(X, delta)
    searched = a.project_rows(X, delta, root_search_only=True)
    np.testing.assert_allclose(fast, searched, atol=1e-9, rtol=1e-9)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(action_sets(), st.integers(0, 2**32 - 1))
def test_projection_of_many_rows_matches_one_row_at_a_time(a, seed):
    # only the rows outside the budget enter the search: no row depends on another
    rng = np.random.default_rng(seed)
    X = rng.normal(scale=3, size=(12, a.n_features))
    delta = rng.normal(scale=3, size=(12, a.n_features))
    together = a.project(X, delta)
    alone = np.concatenate([a.project(X[i : i + 1], delta[i : i + 1]) for i in range(12)])
    np.testing.assert_allclose(together, alone, atol=1e-12, rtol=0)


@pytest.mark.parametrize(
    "a",
    [
        ActionSet(4, p=2, epsilon=1.5),
        ActionSet(4, p=2, cost_weights=[2.0, 0.0, 2.0, 2.0], epsilon=1.5),
        ActionSet(4, p=np.inf, lower=-1.0, increase_only=[0], cost_weights=[1, 2, 0, 1]),
    ],
)
@pytest.mark.parametrize("seed", range(5))
def test_separable_projection_of_parts_equals_the_whole(a, seed):
    # a separable projection may run over blocks of rows (a descent step over a large
    # batch does): the same numbers, bit for bit, as projecting the batch whole
    rng = np.random.default_rng(seed)
    X = rng.normal(scale=3, size=(40, a.n_features))
    delta = rng.normal(scale=3, size=(40, a.n_features))
    project = a.projection(X)
    assert project.separable
    whole = project(delta)
    parts = np.concatenate([project(delta[i : i + 7], slice(i, i + 7)) for i in range(0, 40, 7)])
    np.testing.assert_array_equal(parts, whole)


def test_which_projections_are_separable():
    X = np.zeros((3, 2))
    assert ActionSet(2, p=2).projection(X).separable  # the ball's scaling
    assert ActionSet(2, p=np.inf, lower=0.0).projection(X).separable  # a clip
    assert not ActionSet(2, p=2, lower=0.0).projection(X).separable  # a search
    assert not ActionSet(2, p=2, cost_weights=[1.0, 2.0]).projection(X).separable
    assert not ActionSet(2, p=1).projection(X).separable


@pytest.mark.parametrize("p", [1, 2])
def test_single_actionable_feature_projection_is_a_clip(p):
    a = ActionSet(
        3,
        immutable=[0, 2],
        lower=[-np.inf, 0.0, -np.inf],
        cost_weights=[1.0, 4.0, 1.0],
        p=p,
        epsilon=2.0,
    )
    X = np.array([[0.0, 1.0, 0.0], [0.0, 3.0, 0.0], [5.0, 0.2, 1.0]])
    delta = np.array([[9.0, 3.0, 9.0], [0.0, -7.0, 0.0], [0.0, -0.1, 0.0]])
    d = a.project(X, delta)
    # |δ₁| ≤ ε / w₁ = 0.5, x₁ + δ₁ ≥ 0, the others immutable
    np.testing.assert_array_equal(d, [[0.0, 0.5, 0.0], [0.0, -0.5, 0.0], [0.0, -0.1, 0.0]])
    np.testing.assert_allclose(d, a.project_rows(X, delta, root_search_only=True), atol=1e-12)
    assert np.all(a.cost(d) <= a.epsilon)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("weights", [None, [1.0, 0.0, 3.0, 0.5]])
@pytest.mark.parametrize("bounded", [False, True])
def test_projection_shortcuts_match_the_root_search(p, weights, bounded):
    # equal weights (p = 2): the ball's scaling wherever it lands in the box; no bound
    # at all: no box to clip to or check
    rng = np.random.default_rng(7)
    extra = dict(lower=-0.4, increase_only=[3]) if bounded else {}
    a = ActionSet(4, cost_weights=weights, p=p, epsilon=1.5, **extra)
    assert a.boxless is not bounded
    X = rng.normal(size=(400, 4))
    delta = rng.normal(scale=2.0, size=(400, 4))
    delta[:3] = 0.0
    fast = a.project(X, delta)
    np.testing.assert_allclose(
        fast, a.project_rows(X, delta, root_search_only=True), atol=1e-9, rtol=1e-9
    )
    assert np.all(a.cost(fast) <= a.epsilon)
    assert a.contains(X, fast, tol=0.0).all()


def test_projection_of_the_wrong_width_names_the_shapes():
    a = ActionSet(3, lower=0.0)
    with pytest.raises(ConfigError, match=r"delta has shape \(2, 4\), the action set has 3"):
        a.project(np.zeros((2, 4)), np.zeros((2, 4)))
    with pytest.raises(ConfigError, match="the action set has 3 features"):
        a.projection(np.zeros((2, 3)))(np.zeros((2, 4)))
