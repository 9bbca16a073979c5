"""Feature types in the action set: declarations, membership, projection and repair."""

from __future__ import annotations

import functools
import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from recourse_sim.agents import CollectiveSignal
from recourse_sim.agents.strategies import Controlled
from recourse_sim.errors import ConfigError
from recourse_sim.learners import LogisticRegression, MLPClassifier
from recourse_sim.recourse import ActionSet, individual_recourse
from recourse_sim.recourse.collective import collective_recourse
from recourse_sim.recourse.genre import best_sample

TOL = 1e-9


@st.composite
def typed_problems(draw, n_rows=None):
    """(action set with every feature type, X on the typed lattice, a raw δ).

    Layout: continuous, integer (a step), binary, ordinal, single-column categorical,
    then a one-hot group of 2..4 columns."""
    k = draw(st.integers(2, 4))
    d = 5 + k
    names = ["cont", "count", "flag", "grade", "code"] + [f"level{i}" for i in range(k)]
    step = draw(st.sampled_from([1.0, 2.0, 0.5]))
    grades = np.array(sorted(draw(st.sets(st.integers(-3, 6), min_size=2, max_size=5))), float)
    codes = np.array(sorted(draw(st.sets(st.integers(0, 5), min_size=2, max_size=4))), float)
    monotone = draw(st.sampled_from(["none", "inc", "dec"]))
    # which features are immutable (never the whole set, to keep things moving)
    frozen = draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
    lower = np.full(d, -np.inf)
    upper = np.full(d, np.inf)
    lower[1], upper[1] = draw(st.sampled_from([(-np.inf, np.inf), (-4.0, 6.0)]))
    upper[0] = draw(st.sampled_from([np.inf, 1.5]))
    weights = draw(arrays(np.float64, d, elements=st.floats(0.2, 3)))
    aset = ActionSet(
        d,
        feature_names=names,
        feature_types={
            "count": "integer",
            "flag": "binary",
            "grade": "ordinal",
            "code": "categorical",
        },
        steps={"count": step},
        levels={"grade": grades, "code": codes},
        onehot_groups=[names[5:]],
        immutable=frozen,
        increase_only=[f for f in ("count", "grade") if monotone == "inc" and f not in frozen],
        decrease_only=[f for f in ("flag", "cont") if monotone == "dec" and f not in frozen],
        lower=lower,
        upper=upper,
        max_change=draw(st.sampled_from([np.inf, 3.0])),
        cost_weights=weights,
        p=draw(st.sampled_from([1, 2, np.inf])),
        epsilon=draw(st.floats(0, 6)),
    )
    n = n_rows or draw(st.integers(1, 6))
    rows = []
    for _ in range(n):
        active = draw(st.integers(0, k - 1))
        rows.append(
            [
                draw(st.floats(-2, 1.5)),
                step * draw(st.integers(-4, 6)) if np.isinf(lower[1]) else draw(st.integers(-4, 6)),
                draw(st.sampled_from([0.0, 1.0])),
                draw(st.sampled_from(list(grades))),
                draw(st.sampled_from(list(codes))),
            ]
            + [float(i == active) for i in range(k)]
        )
    X = np.array(rows)
    delta = draw(arrays(np.float64, (n, d), elements=st.floats(-8, 8)))
    return aset, X, delta


def check_typed_feasible(a: ActionSet, X: np.ndarray, d: np.ndarray) -> None:
    """Every rule of the action set, checked one by one (not through `contains` alone)."""
    assert np.all(d[:, a.immutable_mask] == 0)
    assert np.all(d[:, a.increase_mask] >= 0)
    assert np.all(d[:, a.decrease_mask] <= 0)
    assert np.all(np.abs(d) <= a.max_change_ + TOL)
    assert np.all((X + d >= a.lower_ - TOL) | (np.abs(d) <= TOL))
    assert np.all((X + d <= a.upper_ + TOL) | (np.abs(d) <= TOL))
    assert np.all(np.asarray(a.cost(d)) <= a.epsilon + TOL)
    for j in np.flatnonzero(a.types_ == "integer"):
        k = d[:, j] / a.step_[j]
        assert np.allclose(k, np.round(k), atol=1e-9)
    for j in np.flatnonzero(a.types_ == "binary"):
        assert np.isin(X[:, j] + d[:, j], [0.0, 1.0]).all()
    for j, values in a.levels_.items():
        v = X[:, j] + d[:, j]
        assert (np.isclose(v[:, None], values).any(1) | (d[:, j] == 0)).all()
    for g in a.onehot_groups_:
        v = X[:, g] + d[:, g]
        assert np.isin(np.round(v, 12), [0.0, 1.0]).all()
        assert np.allclose(v.sum(1), 1.0)
    assert a.contains(X, d, tol=TOL).all()


def test_types_resolve_by_name_and_index():
    a = ActionSet(
        6,
        feature_names=["a", "b", "c", "d", "e", "f"],
        feature_types={"a": "integer", 1: "binary", "c": "ordinal"},
        steps={"a": 5},
        levels={"c": [3, 1, 2]},
        onehot_groups=[["e", "f"]],
    )
    assert a.types_.tolist() == [
        "integer",
        "binary",
        "ordinal",
        "continuous",
        "categorical",
        "categorical",
    ]
    assert a.step_.tolist() == [5, 0, 0, 0, 0, 0]
    assert a.levels_[2].tolist() == [1, 2, 3]
    assert a.levels_[1].tolist() == [0, 1]
    assert [g.tolist() for g in a.onehot_groups_] == [[4, 5]]
    assert a.discrete_mask.tolist() == [True, True, True, False, True, True]
    assert a.typed and not ActionSet(2).typed
    # the levels' range narrows the bounds the relaxation uses
    assert a.lower_[1:3].tolist() == [0, 1] and a.upper_[1:3].tolist() == [1, 3]
    # replace keeps the types
    assert a.replace(epsilon=3.0).types_.tolist() == a.types_.tolist()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"feature_types": {"a": "integer"}, "steps": {"a": 0}}, r"steps: integer feature 'a'"),
        ({"feature_types": {"a": "integer"}, "steps": {"a": -1}}, r"step -1; it must be > 0"),
        ({"onehot_groups": [[]]}, r"onehot_groups: group 0 has no allowed level"),
        (
            {"onehot_groups": [["b", "c"]], "upper": [9, 0, 0]},
            r"onehot_groups: the group of 'b' has no allowed level",
        ),
        ({"feature_types": {"a": "ordinal"}}, r"levels: ordinal feature 'a' has no allowed"),
        ({"feature_types": {"a": "ordinal"}, "levels": {"a": []}}, r"levels: ordinal feature"),
        (
            {
                "feature_types": {"a": "categorical"},
                "levels": {"a": [1, 2]},
                "increase_only": ["a"],
            },
            r"increase_only: feature 'a' is categorical; a monotone rule",
        ),
        (
            {"onehot_groups": [["b", "c"]], "decrease_only": ["c"]},
            r"decrease_only: feature 'c' is categorical",
        ),
        ({"feature_types": {"a": "real"}}, r"feature_types: feature 'a' has type 'real'"),
        ({"levels": {"a": [1, 2]}}, r"levels: feature 'a' is continuous"),
        ({"onehot_groups": [["a", "b"], ["b", "c"]]}, r"'b' is in two groups"),
    ],
)
def test_bad_type_declarations_name_the_field(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        ActionSet(3, feature_names=["a", "b", "c"], **kwargs)


def test_contains_checks_the_types():
    a = ActionSet(
        4,
        feature_types=["integer", "binary", "continuous", "continuous"],
        onehot_groups=[[2, 3]],
        epsilon=10,
    )
    X = np.array([[1.0, 0.0, 1.0, 0.0]])
    assert a.contains(X, np.array([[2.0, 1.0, -1.0, 1.0]])).all()
    assert a.contains(X, np.zeros((1, 4))).all()
    for bad in ([0.5, 0, 0, 0], [0, 0.49, 0, 0], [0, 0, -1, 0], [0, 0, -0.5, 0.5]):
        assert not a.contains(X, np.array([bad])).any()


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(typed_problems())
def test_projection_respects_every_type(problem):
    a, X, delta = problem
    projected = a.project(X, delta)
    check_typed_feasible(a, X, projected)
    # a feasible δ is left as it is (the nearest rounding of a typed point is itself)
    np.testing.assert_allclose(a.project(X, projected), projected, atol=1e-9)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(typed_problems(), st.sampled_from(["nearest", "toward", "direction"]))
def test_roundings_respect_types_and_box(problem, mode):
    a, X, delta = problem
    relaxed = a.project_rows(X, delta)
    direction = np.sign(delta) if mode == "direction" else None
    rounded = a.rounded(X, relaxed, mode, direction)
    lo, hi = a.box(X)
    assert ((rounded >= lo - TOL) & (rounded <= hi + TOL)).all()
    assert a.respects_types(X, rounded).all()
    if mode == "toward":  # never moves a feature further than the relaxed δ did
        assert (np.abs(rounded) <= np.abs(relaxed) + TOL).all()


def test_projection_of_a_one_hot_group_is_the_nearest_level():
    a = ActionSet(3, onehot_groups=[[0, 1, 2]], epsilon=10)
    X = np.array([[1.0, 0.0, 0.0]] * 3)
    delta = np.array([[-0.9, 0.2, 0.7], [-0.2, 0.1, 0.1], [-1.0, 1.0, 0.0]])
    np.testing.assert_array_equal(
        a.project(X, delta), [[-1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [-1.0, 1.0, 0.0]]
    )


def test_repair_falls_back_to_rounding_towards_x_within_the_budget():
    # the nearest integer (2) costs 2 > ε = 1.6, so the repair rounds towards x (1)
    a = ActionSet(2, feature_types=["integer", "continuous"], p=1, epsilon=1.6)
    out = a.project(np.zeros((1, 2)), np.array([[1.6, 0.0]]))
    np.testing.assert_array_equal(out, [[1.0, 0.0]])


@pytest.mark.parametrize("p", [1, 2, np.inf])
def test_typed_projection_is_the_nearest_point_on_a_small_grid(p):
    """Brute force: with integer/binary features only, the nearest feasible grid point
    is what `project` returns wherever the nearest rounding keeps the budget."""
    a = ActionSet(
        3, feature_types=["integer", "integer", "binary"], p=p, epsilon=2.5, lower=[-3, -3, 0]
    )
    rng = np.random.default_rng(0)
    X = np.array([[0.0, 1.0, 0.0]])
    grid = np.array(list(itertools.product(range(-3, 4), range(-4, 3), range(0, 2))), float)
    feasible = grid[a.contains(np.broadcast_to(X, grid.shape), grid)]
    for _ in range(50):
        delta = rng.normal(size=(1, 3)) * 1.5
        got = a.project(X, delta)
        assert a.contains(X, got).all()
        relaxed = a.project_rows(X, delta)
        if a.contains(X, np.round(relaxed)).all():  # the rounding kept the budget
            dist = np.linalg.norm(feasible - relaxed, axis=1)
            assert np.linalg.norm(got - relaxed) <= dist.min() + 1e-9


def test_torch_in_torch_out():
    a = ActionSet(2, feature_types=["binary", "continuous"], epsilon=2)
    out = a.project(torch.zeros(1, 2), torch.tensor([[0.7, 0.3]]))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([[1.0, 0.3]]))


# -- every method's output respects the types ------------------------------------------


@functools.cache
def _learner(kind: str, d: int):
    """A fitted learner over d features (cached: hypothesis draws the same widths again)."""
    rng = np.random.default_rng(d)
    X = rng.normal(size=(200, d)) * 2
    y = (X @ rng.normal(size=d) + 0.5 * rng.normal(size=200) > 0).astype(np.int64)
    if kind == "logistic":
        return LogisticRegression(C=1.0).fit(X, y)
    torch.manual_seed(0)
    return MLPClassifier(hidden=(8,), fit_epochs=30, random_state=0).fit(X, y)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    typed_problems(n_rows=5),
    st.sampled_from(["pgd", "wachter", "linear"]),
    st.sampled_from(["budget", "min_cost"]),
    st.sampled_from(["logistic", "mlp"]),
)
def test_individual_methods_respect_every_type(problem, method, objective, kind):
    a, X, _ = problem
    learner = _learner(kind, a.n_features)
    res = individual_recourse(learner, X, 1, a, method, objective=objective, steps=15)
    check_typed_feasible(a, X, res.delta)
    if objective == "min_cost":  # a reported success is a real one at the typed δ
        assert (learner.predict(X + res.delta)[res.success] == 1).all()


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(typed_problems(n_rows=4), st.integers(0, 2**31))
def test_genre_projection_respects_every_type(problem, seed):
    a, X, _ = problem
    rng = np.random.default_rng(seed)
    samples = X[:, None, :] + rng.normal(size=(len(X), 3, a.n_features)) * 2
    learner = _learner("logistic", a.n_features)
    for need in (None, np.full(len(X), 0.5)):
        res = best_sample(X, samples, learner, a, need)
        check_typed_feasible(a, X, res.delta)


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(typed_problems(n_rows=6), st.sampled_from(["pgd", "fgm"]), st.integers(0, 2**31))
def test_collective_reports_respect_every_type(problem, method, seed):
    a, X, _ = problem
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, len(X))
    y[:2] = [0, 1]
    members = rng.random(len(X)) < 0.7
    learner = _learner("logistic", a.n_features)
    queries = X[:2] + 0.1
    res = collective_recourse(learner, X, y, queries, 1, a, members=members, steps=5, method=method)
    check_typed_feasible(a, X, res.delta)
    assert (res.delta[~members] == 0).all()
    # the strategies that report a projected move: controlled, collective_signal
    controlled = Controlled("c", None, a)
    action = rng.uniform(-1, 1, (len(X), int(a.actionable.sum())))
    check_typed_feasible(a, X, controlled.perturb(X, action))
    signal = CollectiveSignal(
        "s", SimpleNamespace(signal={"count": 1.4, "flag": 0.6, "level1": 1.0}, set_label=False), a
    )
    moved = signal.act(learner, X, y, members, queries, 1)
    check_typed_feasible(a, X, moved)
