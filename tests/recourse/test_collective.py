"""Collective recourse (OAR Eq. 3): optimality, hypergradients, feasibility, determinism."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recourse_sim.errors import ConfigError
from recourse_sim.learners import LogisticRegression, NearestCentroid
from recourse_sim.learners.mlp import MLPClassifier
from recourse_sim.recourse import ActionSet
from recourse_sim.recourse.collective import (
    CollectiveResult,
    collective_hypergradient,
    collective_recourse,
)


def blobs(n_per_class: int = 4, d: int = 2, k: int = 3, seed: int = 0):
    """k well-separated Gaussian blobs; labels 0..k-1."""
    rng = np.random.default_rng(seed)
    centres = 3.0 * rng.normal(size=(k, d))
    X = np.concatenate([c + 0.5 * rng.normal(size=(n_per_class, d)) for c in centres])
    y = np.repeat(np.arange(k), n_per_class)
    return X, y


def nc_closed_form_loss(means, query, goal, radius):
    """Optimal goal cross-entropy when centroid c can move anywhere within `radius[c]`.

    p(y | x) = softmax(−‖x − μ_y‖) and the loss d_goal + log Σ exp(−d_y) increases in
    d_goal and decreases in every other d_c, and each centroid only sets its own
    distance: so the goal centroid moves straight at the query (at most onto it) and
    every other centroid straight away from it.
    """
    dist = np.linalg.norm(query - means, axis=1)
    best = dist + radius
    best[goal] = max(dist[goal] - radius[goal], 0.0)
    return best[goal] + np.log(np.exp(-best).sum())


# -- optimality ----------------------------------------------------------------------


@pytest.mark.parametrize(("rule", "horizon"), [("window", 1), ("refit", 1), ("refit", 3)])
def test_nearest_centroid_matches_closed_form(rule, horizon):
    X, y = blobs(n_per_class=3)
    learner = NearestCentroid(update_rule=rule, window=1 if rule == "window" else None).fit(X, y)
    means = learner.state()["means"].numpy()
    query, goal, eps = 0.25 * means[0] + 0.75 * means[1], 0, 0.7
    members = np.array([1, 1, 0, 1, 1, 1, 1, 0, 0], dtype=bool)
    res = collective_recourse(
        learner, X, y, query, goal, ActionSet(2, epsilon=eps), horizon, members=members
    )
    # a class mean moves by the average member shift: at most ε·(members/rows); the
    # refit rule averages the old round with H perturbed ones, scaling by H / (H + 1)
    share = np.bincount(y, weights=members) / np.bincount(y)
    radius = eps * share * (horizon / (horizon + 1) if rule == "refit" else 1.0)
    expected = nc_closed_form_loss(means, query, goal, radius)
    assert res.query_loss_after == pytest.approx(expected, abs=1e-9)
    assert res.query_loss_after < res.query_loss_before
    # and the argmin: each class's mean shift points at (goal) or away from the query
    shift = np.stack([res.delta[y == c].mean(0) for c in range(3)])
    towards = (query - means) / np.linalg.norm(query - means, axis=1, keepdims=True)
    sign = np.where(np.arange(3) == goal, 1.0, -1.0)[:, None]
    np.testing.assert_allclose(shift, sign * eps * share[:, None] * towards, atol=1e-9)

    # independent check: no random feasible batch perturbation does better
    rng = np.random.default_rng(1)
    z = rng.normal(size=(200, *X.shape))
    z *= eps * rng.uniform(size=(200, len(X), 1)) ** 0.5 / np.linalg.norm(z, axis=2, keepdims=True)
    z[:, ~members] = 0.0
    sampled = [collective_hypergradient(learner, X, y, query, goal, dz, horizon)[0] for dz in z]
    assert res.query_loss_after <= min(sampled) + 1e-12


def test_fgm_is_the_papers_one_shot_step():
    X, y = blobs()
    learner = NearestCentroid(update_rule="window", window=1).fit(X, y)
    means = learner.state()["means"].numpy()
    query = 0.25 * means[0] + 0.75 * means[1]
    res = collective_recourse(learner, X, y, query, 0, ActionSet(2, epsilon=0.5), method="fgm")
    # every member spends the whole budget on one normalised gradient step
    np.testing.assert_allclose(res.cost, 0.5, rtol=1e-12)
    assert res.query_loss_after < res.query_loss_before
    assert len(res.loss_history) == 2


# -- hypergradients against central finite differences -------------------------------


def learners():
    yield "nc-window", NearestCentroid(update_rule="window", window=1), 1
    yield "nc-refit-H3", NearestCentroid(update_rule="refit"), 3
    yield "logreg-window", LogisticRegression(C=2.0, update_rule="window", window=1), 1
    yield "logreg-refit-H2", LogisticRegression(C=2.0, update_rule="refit"), 2
    yield "logreg-sgd-H3", LogisticRegression(update_rule="sgd", epochs=3, lr=0.5), 3
    mlp = MLPClassifier(hidden=(6,), activation="tanh", epochs=4, lr=0.2, random_state=0)
    yield "mlp-sgd-H2", mlp.set_params(fit_epochs=50), 2


@pytest.mark.parametrize(
    ("name", "learner", "horizon"), list(learners()), ids=[c[0] for c in learners()]
)
def test_hypergradient_matches_finite_differences(name, learner, horizon, rel=1e-5, h=1e-6):
    X, y = blobs(n_per_class=4, d=3)
    learner.fit(X, y)
    rng = np.random.default_rng(2)
    queries = X[[0, 5]] + 0.3 * rng.normal(size=(2, 3))
    goals = np.array([1, 2])
    delta = 0.2 * rng.normal(size=X.shape)
    loss, grad = collective_hypergradient(learner, X, y, queries, goals, delta, horizon)
    assert np.isfinite(loss)
    assert np.abs(grad).max() > 1e-6, f"{name}: degenerate (zero) hypergradient"

    def loss_at(d):
        return collective_hypergradient(learner, X, y, queries, goals, d, horizon)[0]

    # directional derivatives along random directions and single coordinates: each
    # checks the whole gradient in one projection, at two solves apiece
    directions = [rng.normal(size=delta.shape) for _ in range(3)]
    for idx in [(0, 0), (5, 1), (11, 2)]:
        directions.append(np.zeros_like(delta))
        directions[-1][idx] = 1.0
    for v in directions:
        fd = (loss_at(delta + h * v) - loss_at(delta - h * v)) / (2 * h)
        analytic = float((grad * v).sum())
        assert analytic == pytest.approx(fd, rel=rel, abs=1e-3 * rel), name


@pytest.mark.slow
def test_implicit_mlp_hypergradient_matches_finite_differences():
    # implicit differentiation is exact only at a converged refit: L-BFGS to a tight
    # tolerance, no damping; a wider difference step keeps the refit's own residual
    # (about 1e-9 in θ) from swamping the quotient
    mlp = MLPClassifier(
        hidden=(6,),
        activation="tanh",
        update_rule="window",
        window=1,
        hypergrad="implicit",
        weight_decay=1e-2,
        fit_epochs=500,
        tol=1e-12,
        cg_damping=0.0,
        random_state=0,
    )
    test_hypergradient_matches_finite_differences("mlp-window-implicit", mlp, 1, rel=1e-2, h=1e-4)


# -- feasibility, members, horizon, determinism ---------------------------------------


@pytest.mark.parametrize("p", [1, 2, np.inf])
def test_every_perturbation_lies_in_its_action_set(p):
    X, y = blobs(n_per_class=6, d=4)
    learner = LogisticRegression(update_rule="window", window=1).fit(X, y)
    action_set = ActionSet(
        4,
        immutable=[0],
        increase_only=[1],
        decrease_only=[2],
        lower=[-np.inf, -np.inf, -1.0, -np.inf],
        upper=[np.inf, 2.0, np.inf, np.inf],
        max_change=[np.inf, np.inf, np.inf, 0.3],
        cost_weights=[1.0, 2.0, 0.5, 1.0],
        p=p,
        epsilon=0.8,
    )
    rng = np.random.default_rng(3)
    members = rng.uniform(size=len(X)) < 0.7
    res = collective_recourse(
        learner, X, y, X[:3] + 0.1, [1, 2, 0], action_set, members=members, steps=30
    )
    assert action_set.contains(X, res.delta, tol=1e-9).all()
    assert np.all(res.delta[~members] == 0.0)
    assert np.all(res.delta[:, 0] == 0.0)
    np.testing.assert_allclose(res.cost, action_set.cost(res.delta))
    assert res.query_loss_after <= res.query_loss_before


def test_non_members_keep_their_features():
    X, y = blobs()
    learner = NearestCentroid(update_rule="refit").fit(X, y)
    members = np.zeros(len(X), dtype=bool)
    members[[0, 4, 8]] = True
    res = collective_recourse(learner, X, y, X[5], 0, ActionSet(2, epsilon=1.0), members=members)
    assert np.all(res.delta[~members] == 0.0)
    assert np.all(res.cost[members] > 0.99)
    nobody = collective_recourse(
        learner, X, y, X[5], 0, ActionSet(2), members=np.zeros(len(X), dtype=bool)
    )
    assert np.all(nobody.delta == 0.0)
    assert nobody.query_loss_after == nobody.query_loss_before


@pytest.mark.slow
def test_horizon_one_is_the_one_step_update():
    X, y = blobs()
    learner = LogisticRegression(update_rule="refit").fit(X, y)
    args = (learner, X, y, X[[1, 6]], [2, 0], ActionSet(2, epsilon=0.5))
    default, one = collective_recourse(*args), collective_recourse(*args, horizon=1)
    np.testing.assert_array_equal(default.delta, one.delta)
    # state_after is exactly one application of the learner's update to X + Δ
    with torch.no_grad():
        manual = learner.update_fn(
            learner.state(), torch.tensor(X + one.delta), torch.tensor(y, dtype=torch.long)
        )
    for key, value in manual.items():
        torch.testing.assert_close(one.state_after[key], value, rtol=0, atol=1e-12)
    proba = learner.proba_fn(manual, torch.tensor(X[[1, 6]])).numpy()
    np.testing.assert_allclose(one.query_proba_after, proba, atol=1e-12)
    np.testing.assert_array_equal(one.success, proba.argmax(1) == [2, 0])


def test_window_of_one_round_makes_the_horizon_irrelevant():
    X, y = blobs()
    learner = NearestCentroid(update_rule="window", window=1).fit(X, y)
    args = (learner, X, y, X[5], 0, ActionSet(2, epsilon=0.5))
    one, five = collective_recourse(*args, horizon=1), collective_recourse(*args, horizon=5)
    np.testing.assert_allclose(five.delta, one.delta, atol=1e-12)
    assert five.query_loss_after == pytest.approx(one.query_loss_after, abs=1e-12)


def test_longer_horizon_helps_under_memory():
    X, y = blobs()
    learner = NearestCentroid(update_rule="refit").fit(X, y)
    args = (learner, X, y, X[5], 0, ActionSet(2, epsilon=0.5))
    losses = [collective_recourse(*args, horizon=h).query_loss_after for h in (1, 3, 5)]
    assert losses[0] > losses[1] > losses[2]


@pytest.mark.slow
@pytest.mark.parametrize("random_start", [False, True])
def test_same_inputs_give_identical_outputs(random_start):
    X, y = blobs(n_per_class=5, d=3)
    learner = MLPClassifier(hidden=(5,), epochs=2, fit_epochs=20, random_state=0).fit(X, y)
    kw = dict(horizon=2, steps=15, random_start=random_start, seed=7)
    a = collective_recourse(learner, X, y, X[:2], [1, 2], ActionSet(3, epsilon=0.4), **kw)
    b = collective_recourse(learner, X, y, X[:2], [1, 2], ActionSet(3, epsilon=0.4), **kw)
    assert isinstance(a, CollectiveResult)
    np.testing.assert_array_equal(a.delta, b.delta)
    np.testing.assert_array_equal(a.loss_history, b.loss_history)
    assert a.query_loss_after == b.query_loss_after
    if random_start:
        c = collective_recourse(
            learner, X, y, X[:2], [1, 2], ActionSet(3, epsilon=0.4), **(kw | {"seed": 8})
        )
        assert not np.array_equal(a.delta, c.delta)


@pytest.mark.slow
def test_init_is_projected_and_never_worsened():
    X, y = blobs()
    learner = LogisticRegression(update_rule="window", window=1).fit(X, y)
    small = ActionSet(2, epsilon=0.3)
    members = np.arange(len(X)) % 3 > 0
    args = (learner, X, y, X[[1, 6]], [2, 0])
    first = collective_recourse(*args, small, members=members, steps=20)
    # continuation: the smaller budget's solution is feasible for the larger one
    more = collective_recourse(*args, small.replace(epsilon=0.6), members=members, init=first.delta)
    assert more.loss_history[0] == pytest.approx(first.query_loss_after, abs=1e-12)
    assert more.query_loss_after <= first.query_loss_after
    # an infeasible start is projected first (non-members zeroed, rows shrunk to ε)
    wild = collective_recourse(*args, small, members=members, init=np.full(X.shape, 5.0))
    assert small.contains(X, wild.delta).all()
    assert np.all(wild.delta[~members] == 0.0)


def test_learner_is_not_modified():
    X, y = blobs()
    learner = NearestCentroid(update_rule="refit").fit(X, y)
    before = learner.state()
    collective_recourse(learner, X, y, X[5], 0, ActionSet(2, epsilon=1.0))
    for key, value in learner.state().items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"horizon": 0}, "horizon"),
        ({"steps": 0}, "steps"),
        ({"method": "adam"}, "method"),
        ({"members": np.ones(3, dtype=bool)}, "members"),
        ({"goals": 7}, "goals"),
        ({"goals": [0, 1]}, "goals"),
        ({"queries": np.zeros(5)}, "queries"),
        ({"init": np.zeros((2, 2))}, "init"),
        ({"init": np.zeros((12, 2)), "random_start": True}, "init"),
    ],
)
def test_bad_arguments_raise_config_error(change, match):
    X, y = blobs()
    learner = NearestCentroid(update_rule="refit").fit(X, y)
    kw = dict(queries=X[5], goals=0, action_set=ActionSet(2)) | change
    with pytest.raises(ConfigError, match=match):
        collective_recourse(learner, X, y, **kw)


def test_warm_started_refits_change_nothing_beyond_tolerance(monkeypatch):
    # each evaluation's Newton refits start from the previous evaluation's solution
    rng = np.random.default_rng(5)
    X0 = rng.normal(size=(300, 3))
    y0 = (X0 @ [1.0, -1.0, 0.5] > 0).astype(np.int64)
    X = rng.normal(size=(300, 3))
    y = (X @ [1.0, -1.0, 0.5] + 0.3 * rng.normal(size=300) > 0).astype(np.int64)
    learner = LogisticRegression(update_rule="refit").fit(X0, y0)
    queries = X[np.argsort(learner.predict_proba(X)[:, 1])[:10]]
    aset = ActionSet(3, immutable=[2], cost_weights=[1.0, 2.0, 1.0], epsilon=0.5)
    kwargs = dict(horizon=2, steps=8)
    warm = collective_recourse(learner, X, y, queries, 1, aset, **kwargs)
    cold_update = LogisticRegression.warm_update_fn
    monkeypatch.setattr(
        LogisticRegression,
        "warm_update_fn",
        lambda self, st, X, y, start: cold_update(self, st, X, y, None),
    )
    cold = collective_recourse(learner, X, y, queries, 1, aset, **kwargs)
    np.testing.assert_allclose(warm.delta, cold.delta, atol=1e-9)
    np.testing.assert_allclose(warm.loss_history, cold.loss_history, rtol=1e-10)
    assert warm.query_loss_before == pytest.approx(cold.query_loss_before, rel=1e-12)
    assert warm.query_loss_after == pytest.approx(cold.query_loss_after, rel=1e-12)
    for key in ("coef", "intercept"):
        np.testing.assert_allclose(warm.state_after[key], cold.state_after[key], atol=1e-10)


# -- fast paths against the general ones ---------------------------------------------------


def _refit_problem(rule: str, standardize: bool, seed: int = 3):
    rng = np.random.default_rng(seed)
    X0 = rng.normal(loc=2.0, scale=[1.0, 3.0, 0.5], size=(80, 3))
    y0 = (X0 @ [1.0, -0.3, 2.0] + rng.normal(size=80) > 4.0).astype(np.int64)
    X = rng.normal(loc=2.0, scale=[1.0, 3.0, 0.5], size=(60, 3))
    y = (X @ [1.0, -0.3, 2.0] + rng.normal(size=60) > 4.0).astype(np.int64)
    window = 1 if rule == "window" else None
    learner = LogisticRegression(update_rule=rule, window=window, standardize=standardize)
    learner.fit(X0, y0)
    queries = X[np.argsort(learner.predict_proba(X)[:, 1])[:7]]
    return learner, X, y, queries, 0.3 * rng.normal(size=X.shape)


@pytest.mark.parametrize("rule", ["window", "refit"])
@pytest.mark.parametrize("standardize", [False, True])
def test_closed_form_refit_hypergradient_equals_autograd(rule, standardize, monkeypatch):
    learner, X, y, queries, delta = _refit_problem(rule, standardize)
    goals = np.array([1, 1, 0, 1, 1, 0, 1])
    closed = collective_hypergradient(learner, X, y, queries, goals, delta)
    # without the closed form the loss is differentiated by autograd through the refit
    monkeypatch.setattr(LogisticRegression, "refit_hypergradient", lambda *a: None)
    graph = collective_hypergradient(learner, X, y, queries, goals, delta)
    assert closed[0] == pytest.approx(graph[0], rel=1e-12)
    np.testing.assert_allclose(closed[1], graph[1], rtol=1e-9, atol=1e-12)


def test_closed_form_of_a_single_class_refit_keeps_the_model():
    learner, X, _, queries, delta = _refit_problem("window", False)
    y = np.ones(len(X), np.int64)
    loss, grad = collective_hypergradient(learner, X, y, queries, 1, delta)
    assert np.all(grad == 0.0)
    assert loss == pytest.approx(float(-np.log(learner.predict_proba(queries)[:, 1]).mean()))


def test_warm_started_closed_form_refits_change_nothing_beyond_tolerance(monkeypatch):
    # horizon 1: each evaluation's Newton starts at the previous solution and takes
    # its first step with the previous Hessian factor
    learner, X, y, queries, _ = _refit_problem("refit", False)
    aset = ActionSet(3, increase_only=[0], cost_weights=[1.0, 2.0, 0.5], epsilon=1.0)
    warm = collective_recourse(learner, X, y, queries, 1, aset, steps=8)
    closed_form = LogisticRegression.refit_hypergradient
    monkeypatch.setattr(
        LogisticRegression,
        "refit_hypergradient",
        lambda self, st, X, delta, y, start, Q, goal, factor: closed_form(
            self, st, X, delta, y, None, Q, goal
        ),
    )
    cold = collective_recourse(learner, X, y, queries, 1, aset, steps=8)
    np.testing.assert_allclose(warm.delta, cold.delta, atol=1e-9)
    np.testing.assert_allclose(warm.loss_history, cold.loss_history, rtol=1e-10)
    for key in ("coef", "intercept"):
        np.testing.assert_allclose(warm.state_after[key], cold.state_after[key], atol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("standardize", [False, True])
def test_fast_pgd_steps_at_many_features_equal_the_autograd_path(standardize, monkeypatch):
    # d = 40 (the column-major numpy design and the fused descent step of the fast path;
    # the benchmark's d = 100 takes the same path): whole projected-gradient runs agree
    # with autograd through the torch refit on a row-major design
    rng = np.random.default_rng(11)
    n, d = 400, 40
    w = rng.normal(size=d) / np.sqrt(d)
    X0, X = rng.normal(size=(n, d)), rng.normal(size=(n, d))
    y0 = (X0 @ w + 0.5 * rng.normal(size=n) > 0).astype(np.int64)
    y = (X @ w + 0.5 * rng.normal(size=n) > 0).astype(np.int64)
    learner = LogisticRegression(update_rule="window", window=1, standardize=standardize)
    learner.fit(X0, y0)
    queries = X[np.argsort(learner.predict_proba(X)[:, 1])[:10]]
    aset = ActionSet(d, p=2, epsilon=0.5)
    fast = collective_recourse(learner, X, y, queries, 1, aset, steps=6)
    monkeypatch.setattr(LogisticRegression, "refit_hypergradient", lambda *a: None)
    graph = collective_recourse(learner, X, y, queries, 1, aset, steps=6)
    assert len(fast.loss_history) == 7
    assert fast.loss_history[-1] < fast.loss_history[0]
    np.testing.assert_allclose(fast.loss_history, graph.loss_history, rtol=1e-9)
    np.testing.assert_allclose(fast.delta, graph.delta, atol=1e-9)


@pytest.mark.parametrize(
    ("p", "bounds", "members"),
    [(2, {}, False), (2, {}, True), (np.inf, {"lower": -0.3, "increase_only": [0]}, False)],
)
def test_descent_over_blocks_of_rows_equals_the_whole_batch(p, bounds, members, monkeypatch):
    # a separable projection lets each step run over blocks of rows that stay in
    # cache; the factored gradient's rows are then formed a block at a time. The
    # iterates are those of one pass over the whole batch.
    import recourse_sim.recourse.collective as collective

    rng = np.random.default_rng(3)
    n, d = 600, 6
    w = rng.normal(size=d)
    X0, X = rng.normal(size=(n, d)), rng.normal(size=(n, d))
    y0 = (X0 @ w + rng.normal(size=n) > 0).astype(np.int64)
    y = (X @ w + rng.normal(size=n) > 0).astype(np.int64)
    learner = LogisticRegression(update_rule="window", window=1).fit(X0, y0)
    queries = X[np.argsort(X @ w)[:5]]
    aset = ActionSet(d, p=p, epsilon=0.5, **bounds)
    chosen = (np.arange(n) % 3 == 0) if members else None

    def run():
        return collective_recourse(learner, X, y, queries, 1, aset, steps=8, members=chosen)

    whole = run()
    monkeypatch.setattr(collective, "_BLOCK_BYTES", 8 * d * 128)  # blocks of 128 rows
    blocks = run()
    assert len(whole.loss_history) > 3
    np.testing.assert_array_equal(blocks.loss_history, whole.loss_history)
    np.testing.assert_array_equal(blocks.delta, whole.delta)
    if members:
        assert not blocks.delta[~chosen].any()


@pytest.mark.parametrize("p", [1, 2])  # a projection by search, and a separable one
def test_no_members_is_a_fixed_point(p):
    learner, X, y, queries, _ = _refit_problem("window", False)
    none = np.zeros(len(X), bool)
    res = collective_recourse(learner, X, y, queries, 1, ActionSet(X.shape[1], p=p), members=none)
    assert not res.delta.any()
    assert len(res.loss_history) == 1


def test_rejected_trials_are_overwritten_not_kept():
    # a step that raises the loss is discarded and its array reused for the next
    # trial: the descent still returns the best iterate, and non-members stay at 0
    learner, X, y, queries, _ = _refit_problem("window", False)
    members = np.arange(len(X)) % 2 == 0
    aset = ActionSet(X.shape[1], epsilon=3.0)
    res = collective_recourse(
        learner, X, y, queries, 1, aset, steps=25, step_size=3.0, members=members
    )
    history = res.loss_history
    assert np.all(np.diff(history) <= 0)
    assert np.any(np.diff(history) == 0)  # some trials were rejected
    assert not res.delta[~members].any()
    assert res.query_loss_after == pytest.approx(history[-1], rel=1e-12)


def _reference_step(grad, delta, lo, hi, action_set, length):
    """Δ + length · the unit-cost steepest-descent direction, written plainly."""
    d = -grad.copy()
    d[((d < 0) & (delta <= lo)) | ((d > 0) & (delta >= hi))] = 0.0
    w = action_set.weights_.copy()
    w[w == 0] = w[w > 0].mean() if (w > 0).any() else 1.0
    if action_set.p == np.inf:
        return delta + length * np.sign(d) / w
    out = np.zeros_like(d)
    for i in range(len(d)):
        norm = np.linalg.norm(d[i] / w)
        if norm > 0:
            out[i] = d[i] / w**2 / norm
    return delta + length * out


@pytest.mark.parametrize("p", [1, 2, np.inf])
@pytest.mark.parametrize("weights", [[1.0, 1.0, 1.0, 1.0], [2.0, 1.0, 0.0, 0.5]])
@pytest.mark.parametrize("bounded", [False, True])
def test_descent_step_matches_its_plain_definition(p, weights, bounded):
    from recourse_sim.recourse.collective import _Box

    rng = np.random.default_rng(4)
    X = rng.normal(size=(50, 4))
    extra = dict(increase_only=[0], lower=[-np.inf, -0.2, -np.inf, -np.inf]) if bounded else {}
    aset = ActionSet(4, cost_weights=weights, p=p, epsilon=1.0, **extra)
    lo, hi = aset.box(X)
    lo[:5], hi[:5] = 0.0, 0.0  # non-members
    delta = aset.project(X, rng.normal(size=X.shape))
    delta[:5] = 0.0
    delta[5:10] = lo[5:10]  # rows on their lower bounds
    grad = rng.normal(size=X.shape)
    grad[10] = 0.0  # a row with no descent direction
    box = _Box((lo, hi), aset)
    expected = _reference_step(grad, delta, lo, hi, aset, 0.3)
    np.testing.assert_allclose(box.step(delta, grad, 0.3), expected, rtol=1e-13, atol=1e-15)
    if not bounded:  # everyone a member, no bounds: the box is skipped altogether
        free = _Box(None, aset)
        infinite = np.full(X.shape, np.inf)
        np.testing.assert_allclose(
            free.step(delta, grad, 0.3),
            _reference_step(grad, delta, -infinite, infinite, aset, 0.3),
            rtol=1e-13,
            atol=1e-15,
        )
