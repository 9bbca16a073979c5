"""A best response on typed features: every value stays on its type (integer steps,
binary, ordinal and categorical levels, one-hot groups), in its box (bounds, immutables,
monotone directions), and for p = 2 it is the typed optimum (brute force)."""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recourse_sim.agents.strategies import best_response_delta
from recourse_sim.recourse import ActionSet

# columns: 0 continuous (bounded), 1 integer (step 2), 2 binary, 3 ordinal,
# 4 single-column categorical, 5-7 a one-hot group, 8 immutable integer, 9 integer up-only
TYPES = {
    1: "integer",
    2: "binary",
    3: "ordinal",
    4: "categorical",
    8: "integer",
    9: "integer",
}
LEVELS = {3: [0.0, 1.0, 2.5, 4.0], 4: [1.0, 2.0, 3.0]}


def _action_set(p: float, weights: np.ndarray) -> ActionSet:
    return ActionSet(
        n_features=10,
        immutable=[8],
        increase_only=[9, 3],
        lower=[-1.0, -4.0, -np.inf, -np.inf, -np.inf, -np.inf, -np.inf, -np.inf, 0, 0],
        upper=[2.0, 6.0, np.inf, np.inf, np.inf, np.inf, np.inf, np.inf, 10, 5],
        cost_weights=weights,
        p=p,
        feature_types=TYPES,
        steps={1: 2.0},
        levels=LEVELS,
        onehot_groups=[[5, 6, 7]],
    )


def _rows(rng: np.random.Generator, n: int) -> np.ndarray:
    X = np.zeros((n, 10))
    X[:, 0] = rng.uniform(-1, 2, n)
    X[:, 1] = 2.0 * rng.integers(-2, 4, n)
    X[:, 2] = rng.integers(0, 2, n)
    X[:, 3] = rng.choice(LEVELS[3], n)
    X[:, 4] = rng.choice(LEVELS[4], n)
    X[np.arange(n), 5 + rng.integers(0, 3, n)] = 1.0
    X[:, 8] = rng.integers(0, 10, n)
    X[:, 9] = rng.integers(0, 5, n)
    return X


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    p=st.sampled_from([1, 2, np.inf]),
    eps=st.floats(0.05, 30.0),
)
def test_best_response_leaves_no_value_off_its_type(seed, p, eps):
    rng = np.random.default_rng(seed)
    aset = _action_set(p, rng.uniform(0.3, 3.0, 10))
    X = _rows(rng, 40)
    coef = rng.normal(0, 2, 10)
    delta = best_response_delta(aset, X, coef, eps)
    lo, hi = aset.box(X)
    assert (delta >= lo - 1e-12).all() and (delta <= hi + 1e-12).all()
    assert aset.respects_types(X, delta).all()
    new = X + delta
    assert np.allclose(new[:, 1] / 2, np.round(new[:, 1] / 2))  # whole steps of 2
    assert np.isin(new[:, 2], [0.0, 1.0]).all()
    assert np.isin(new[:, 3], LEVELS[3]).all() and np.isin(new[:, 4], LEVELS[4]).all()
    assert np.isin(new[:, 5:8], [0.0, 1.0]).all() and (new[:, 5:8].sum(1) == 1).all()
    assert (delta[:, 8] == 0).all() and (delta[:, 9] >= 0).all()
    # never worse than staying put, nor than the continuous answer rounded onto the types
    u = delta @ coef - np.asarray(aset.cost(delta)) ** 2 / (2 * eps)
    assert (u >= -1e-12).all()


def _brute_force(aset: ActionSet, x: np.ndarray, coef: np.ndarray, eps: float) -> float:
    """max u over every combination of allowed values (the continuous feature 0 on a
    fine grid, refined by its closed form since u is separable for p = 2)."""
    lo, hi = aset.box(x[None])
    lo, hi = lo[0], hi[0]
    choices = []
    for j in range(10):
        if j in (5, 6, 7):
            continue
        if j == 0:
            c = np.clip(eps * coef[0] / aset.weights_[0] ** 2, lo[0], hi[0])
            choices.append([c])
        elif j in (1, 8, 9):
            s = aset.step_[j]
            ks = np.arange(np.ceil(lo[j] / s), np.floor(hi[j] / s) + 1)
            choices.append(list(ks * s))
        else:
            values = aset.levels_[j]
            v = values[(values - x[j] >= lo[j]) & (values - x[j] <= hi[j])] - x[j]
            choices.append([0.0, *v])
    groups = [np.zeros(3)] + [np.eye(3)[k] - x[5:8] for k in range(3)]
    best = -np.inf
    for combo in product(*choices):
        for move in groups:
            d = np.zeros(10)
            d[[0, 1, 2, 3, 4, 8, 9]] = combo
            d[5:8] = move
            best = max(best, d @ coef - float(aset.cost(d[None])[0]) ** 2 / (2 * eps))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_p2_typed_best_response_is_the_brute_force_optimum(seed):
    rng = np.random.default_rng(seed)
    aset = _action_set(2, rng.uniform(0.3, 3.0, 10))
    X = _rows(rng, 3)
    coef = rng.normal(0, 2, 10)
    eps = float(rng.uniform(0.5, 8.0))
    delta = best_response_delta(aset, X, coef, eps)
    for x, d in zip(X, delta, strict=True):
        got = d @ coef - float(aset.cost(d[None])[0]) ** 2 / (2 * eps)
        assert got == pytest.approx(_brute_force(aset, x, coef, eps), abs=1e-9)


def test_untyped_best_response_is_unchanged_by_the_typed_path():
    """Continuous features only: the closed form x + ε g / w² clipped, as before."""
    rng = np.random.default_rng(0)
    aset = ActionSet(n_features=3, lower=[-1, -np.inf, -np.inf], cost_weights=[1.0, 2.0, 0.5])
    X = rng.normal(size=(5, 3))
    coef = np.array([-2.0, 1.0, 0.3])
    lo, hi = aset.box(X)
    np.testing.assert_array_equal(
        best_response_delta(aset, X, coef, 1.5), np.clip(1.5 * coef / aset.weights_**2, lo, hi)
    )


def test_validate_note_blames_only_bounds_the_scenario_sets():
    """A binary feature's [0, 1] and an ordinal one's range of levels are its type, not
    a bound: the note names them as typed, and names a bound only where one was set."""
    from recourse_sim.agents.strategies import best_response_bounds

    names = ["income", "owns_car", "grade"]
    typed = dict(
        n_features=3,
        feature_names=names,
        feature_types={"owns_car": "binary", "grade": "ordinal"},
        levels={"grade": [1, 2, 3]},
    )
    note = best_response_bounds(ActionSet(**typed))
    assert "bounds in force" not in note
    assert "owns_car (binary)" in note and "grade (ordinal)" in note
    note = best_response_bounds(ActionSet(**typed, upper=[np.inf, np.inf, 2.0]))
    assert "bounds in force on grade" in note
    assert best_response_bounds(ActionSet(n_features=2)) is None
