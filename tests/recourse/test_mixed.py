"""Exact cheapest recourse over mixed feature types (`recourse_sim.recourse.mixed`)
against brute force and against a mixed-integer program formulated here, independently,
and solved by HiGHS (`scipy.optimize.milp`)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import Bounds, LinearConstraint, milp

from recourse_sim.data import load
from recourse_sim.learners import LogisticRegression
from recourse_sim.recourse import ActionSet, cheapest, individual_recourse, mixed
from recourse_sim.recourse.mixed import mixed_cheapest_recourse

# -- small problems against brute force ------------------------------------------------

# continuous, integer (step 1), integer (step 0.5), binary, ordinal {1..4}, one-hot of 3
TYPES = ["continuous", "integer", "integer", "binary", "ordinal"] + ["categorical"] * 3
LOWER = np.r_[-3.0, 0, 0, 0, 1, 0, 0, 0]
UPPER = np.r_[3.0, 6, 3, 1, 4, 1, 1, 1]


def _small(rng, p, trial):
    x = np.r_[
        rng.normal(),
        rng.integers(0, 5),
        rng.integers(0, 4) * 0.5,
        rng.integers(0, 2),
        rng.integers(1, 5),
        np.eye(3)[rng.integers(3)],
    ]
    aset = ActionSet(
        8,
        lower=LOWER,
        upper=UPPER,
        cost_weights=rng.uniform(0.2, 2.0, 8),
        p=p,
        epsilon=100.0,
        increase_only=[4] if trial % 3 == 0 else (),
        immutable=[0] if trial % 4 == 0 else (),
        feature_types=TYPES,
        steps=[1.0, 1.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0],
        levels={4: [1.0, 2.0, 3.0, 4.0]},
        onehot_groups=[[5, 6, 7]],
    )
    return x, aset


def _brute_force(x, c, gap, lo, hi, w, p):
    """Every typed choice of the discrete features; the continuous feature 0 then moves
    exactly as far as the gap needs (the cheapest way to close it alone)."""

    def grid(step, low, high):
        return np.arange(np.ceil(low / step - 1e-9), np.floor(high / step + 1e-9) + 1) * step

    def within(m, j):
        return lo[j] - 1e-9 <= m <= hi[j] + 1e-9

    levels3 = [v - x[3] for v in (0, 1) if within(v - x[3], 3)]
    levels4 = [v - x[4] for v in (1, 2, 3, 4) if within(v - x[4], 4)]
    group = [
        np.eye(3)[k] - x[5:]
        for k in range(3)
        if all(within(m, 5 + i) for i, m in enumerate(np.eye(3)[k] - x[5:]))
    ]
    best = np.inf
    for a, b, e, f, g in itertools.product(
        grid(1.0, lo[1], hi[1]), grid(0.5, lo[2], hi[2]), levels3, levels4, group
    ):
        delta = np.r_[0.0, a, b, e, f, g]
        short = gap - c @ delta
        if short > 0:
            if c[0] == 0 or not (lo[0] - 1e-12 <= short / c[0] <= hi[0] + 1e-12):
                continue
            delta[0] = short / c[0]
        best = min(best, np.linalg.norm(w * delta, ord=p))
    return best


@pytest.mark.slow
@pytest.mark.parametrize("p", [1, 2, np.inf])
def test_mixed_matches_brute_force(p):
    rng = np.random.default_rng(0)
    solved = 0
    for trial in range(60):
        x, aset = _small(rng, p, trial)
        c = rng.normal(size=(1, 8))
        gap = np.array([rng.uniform(0.0, 4.0)])
        found = mixed_cheapest_recourse(c, gap, x[None], aset)
        lo, hi = aset.box(x[None])
        best = _brute_force(x, c[0], gap[0], lo[0], hi[0], aset.weights_, p)
        assert bool(found.reachable[0]) == np.isfinite(best)
        if np.isfinite(best):
            solved += 1
            assert found.cost[0] == pytest.approx(best, rel=1e-9, abs=1e-12)
            assert c[0] @ found.delta[0] >= gap[0] * (1 - 1e-12)  # (to rounding)
            assert aset.replace(epsilon=1e9).contains(x[None], found.delta)[0]
    assert solved > 40


def _random_instances(rng, p, n_sets: int, n_rows: int):
    """`n_sets` random action sets over `TYPES` (random immutable features, monotone
    ordinal, cost weights), each with `n_rows` random rows, score gradients and gaps.
    Half of the numbers lie on a coarse grid (weights in {0.25, 0.5, 1, 2}, gradients and
    gaps in tenths), where a move meets the gap exactly and floating-point sums leave
    residues such as 2e-16: the cases a comparison with the gap must not get wrong."""
    for _ in range(n_sets):
        immutable = [j for j in range(5) if rng.random() < 0.35]
        on_grid = rng.random() < 0.5
        aset = _small(rng, p, 1)[1].replace(
            immutable=immutable,
            increase_only=[4] if 4 not in immutable and rng.random() < 0.3 else (),
            cost_weights=rng.choice([0.25, 0.5, 1.0, 2.0], 8)
            if on_grid
            else rng.uniform(0.2, 2, 8),
        )
        X = np.array([_small(rng, p, 1)[0] for _ in range(n_rows)])
        grid = rng.random(n_rows) < 0.5
        c = np.where(
            grid[:, None], rng.integers(-3, 4, (n_rows, 8)) * 0.1, rng.normal(size=(n_rows, 8))
        )
        gap = np.where(grid, rng.integers(1, 25, n_rows) * 0.1, rng.uniform(0.0, 4.0, n_rows))
        yield aset, X, c, gap


def _assert_one_row_equals_batched(c, gap, X, aset):
    """Each row asked alone gets the batched call's answer: the same reachability and
    the same cost (to the searches' 1e-12 relative optimality). (Rows that need nothing,
    gap ≤ 0, are answered before any search: asked together only, δ = 0.)"""
    together = mixed_cheapest_recourse(c, gap, X, aset)
    reachable, cost = np.ones(len(X), bool), np.zeros(len(X))
    for i in np.flatnonzero(gap > 0):
        alone = mixed_cheapest_recourse(c[i : i + 1], gap[i : i + 1], X[i : i + 1], aset)
        reachable[i], cost[i] = alone.reachable[0], alone.cost[0]
    np.testing.assert_array_equal(reachable, together.reachable)
    np.testing.assert_allclose(cost, together.cost, rtol=1e-12)
    return together


@pytest.mark.parametrize(
    "p", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(np.inf, marks=pytest.mark.slow)]
)
def test_one_row_search_equals_the_batched_search(p):
    """2,000 random mixed-type problems: each asked alone equals the same rows asked
    together. With p = 1 a few rows are searched one at a time, best first on Python
    floats (`mixed._best_first`), many rows together breadth first on arrays; both test
    a node against the gap up to rounding (`mixed._reached`), so a residue of
    floating-point subtraction drops no feasible node on either path."""
    rng = np.random.default_rng(1)
    reachable = 0
    for aset, X, c, gap in _random_instances(rng, p, n_sets=25, n_rows=80):
        reachable += _assert_one_row_equals_batched(c, gap, X, aset).reachable.sum()
    assert 1000 < reachable < 2000


@pytest.mark.parametrize("p", [1, 2, np.inf])
def test_budget_skips_only_rows_dearer_than_it(p):
    """Rows whose relaxed optimum costs more than the budget are not searched (δ 0, cost
    inf); every other row's answer is the one without a budget, to the bit."""
    rng = np.random.default_rng(2)
    aset = _small(rng, p, 1)[1]
    X = np.array([_small(rng, p, 1)[0] for _ in range(60)])
    c = rng.normal(size=(60, 8))
    gap = rng.uniform(0.0, 4.0, 60)
    full = mixed_cheapest_recourse(c, gap, X, aset)
    budget = float(np.median(full.cost[full.reachable]))
    cut = mixed_cheapest_recourse(c, gap, X, aset, budget)
    kept = full.cost <= budget
    assert 10 < kept.sum() < 50
    assert (cut.delta[kept] == full.delta[kept]).all() and (cut.cost[kept] == full.cost[kept]).all()
    assert (cut.reachable == full.reachable).all()
    skipped = np.isinf(cut.cost) & full.reachable
    assert skipped.any() and (full.cost[skipped] > budget).all()
    assert (cut.delta[skipped] == 0).all()
    assert cut.searched_rows < full.searched_rows


def test_short_row_helpers_equal_numpy():
    """The column-by-column row reductions, running sums and sorting networks of the
    search give numpy's answers to the bit (ends are ≥ 0 and not NaN)."""
    rng = np.random.default_rng(3)
    for k in range(10):
        m = np.where(rng.random((500, k)) < 0.3, 0.0, rng.choice([0.5, 1.0, 2.0, np.inf], (500, k)))
        assert np.array_equal(mixed._sorted_rows(m).view(np.uint64), np.sort(m, 1).view(np.uint64))
        b = rng.random((500, k)) < 0.3
        assert (mixed._rows_any(b) == b.any(1)).all() and (mixed._rows_all(b) == b.all(1)).all()
        if k:
            assert (cheapest._first_true(b) == np.argmax(b, 1)).all()
        # ties: a stable sort keeps their order, which the slopes carried along show
        t, slope = np.round(m, 0), rng.normal(size=(500, k))
        order = np.argsort(t, axis=1, kind="stable")
        t_s, s_s = cheapest._sorted_by_end(t, slope)
        assert np.array_equal(t_s, np.take_along_axis(t, order, 1))
        assert np.array_equal(
            s_s.view(np.uint64), np.take_along_axis(slope, order, 1).view(np.uint64)
        )
        wide = slope * 10.0 ** rng.integers(-8, 8, (500, k))  # (rounding shows the order)
        assert np.array_equal(cheapest._row_sums(wide).view(np.uint64), wide.sum(1).view(np.uint64))
        zeros = np.full((3, k), -0.0)
        assert np.array_equal(
            cheapest._row_sums(zeros).view(np.uint64), zeros.sum(1).view(np.uint64)
        )
        cum = cheapest._cumsum_rows(slope)
        assert np.array_equal(cum.view(np.uint64), np.cumsum(slope, 1).view(np.uint64))


# -- German credit, every rejected row, against an independent MILP --------------------


@pytest.fixture(scope="module")
def german_typed():
    """German credit with its types: whole-number features integer (step 1), the two
    1..4 codes ordinal, the 0/1 features binary, and the checking account a one-hot
    group of three levels (the column of the third level, 'some balance', added here).
    Everything may change but sex, foreign worker and people liable; age only up."""
    ds = load("german")
    names = list(ds.feature_names)
    X = np.asarray(ds.X, dtype=np.float64)
    negative, none = names.index("checking_account_negative"), names.index("checking_account_none")
    X = np.c_[X, 1.0 - X[:, negative] - X[:, none]]
    names.append("checking_account_some")
    types = dict(zip(ds.feature_names, ds.feature_types, strict=True))
    types |= {"installment_rate": "ordinal", "present_residence_since": "ordinal"}
    group = ["checking_account_negative", "checking_account_none", "checking_account_some"]
    learner = LogisticRegression(C=1.0).fit(X, ds.y)

    def action_set(p, epsilon):
        return ActionSet(
            len(names),
            feature_names=names,
            immutable=["sex_male", "foreign_worker_yes", "number_of_people_liable_for"],
            increase_only=["age"],
            lower=X.min(0),
            upper=X.max(0),
            cost_weights=1.0 / X.std(0),
            p=p,
            epsilon=epsilon,
            feature_types=[types.get(n, "categorical") for n in names],
            levels={"installment_rate": [1, 2, 3, 4], "present_residence_since": [1, 2, 3, 4]},
            onehot_groups=[group],
        )

    return learner, X, action_set


def _logit(learner, X: np.ndarray):
    """A fitted logistic regression's (gradient c of the logit in x, logit of each row)."""
    state = learner.state_
    coef = state["coef"].numpy()[0]
    scale = state["x_scale"].numpy() if "x_scale" in state else np.ones_like(coef)
    shift = state["x_shift"].numpy() if "x_shift" in state else np.zeros_like(coef)
    logit = ((X - shift) / scale) @ coef + float(state["intercept"].numpy()[0])
    return coef / scale, logit


def _milp_min_cost(x, c, gap, aset: ActionSet):
    """The typed min-cost problem as one mixed-integer program, written from the action
    set's declaration alone. Variables, per feature: an integer feature k⁺, k⁻ ≥ 0
    integer (δ = step·(k⁺ − k⁻)); a continuous one δ⁺, δ⁻ ≥ 0; a feature with levels, or
    a one-hot group, a 0/1 indicator per value (exactly one on); p = ∞ adds t ≥ every
    |w_j δ_j|. Returns the optimal δ, or None where infeasible."""
    d = aset.n_features
    lo, hi = (b[0] for b in aset.box(x[None]))
    w = aset.weights_
    in_group = {j for g in aset.onehot_groups_ for j in g}
    cols = []  # (kind, feature, value): the variables
    for j in range(d):
        if j in in_group:
            continue
        if j in aset.levels_:
            cols += [("level", j, v) for v in aset.levels_[j]]
        else:
            cols += [("up", j, None), ("down", j, None)]
    for gi, g in enumerate(aset.onehot_groups_):
        cols += [("group", gi, k) for k in range(len(g))]
    nv = len(cols) + 1  # + t
    D = np.zeros((d, nv))  # δ = D·v + const
    const = np.zeros(d)
    upper = np.full(nv, np.inf)
    integrality = np.zeros(nv)
    rows, lbs, ubs = [], [], []
    for i, (kind, j, v) in enumerate(cols):
        if kind in ("up", "down"):
            s = aset.step_[j] if aset.types_[j] == "integer" else 1.0
            D[j, i] = s if kind == "up" else -s
            integrality[i] = aset.types_[j] == "integer"
            upper[i] = (hi[j] if kind == "up" else -lo[j]) / s
            if integrality[i]:
                upper[i] = np.floor(upper[i] + 1e-9)
        elif kind == "level":
            D[j, i] = v
            integrality[i], upper[i] = 1, 1
            const[j] = -x[j]
            if not (lo[j] - 1e-9 <= v - x[j] <= hi[j] + 1e-9) and v != x[j]:
                upper[i] = 0  # a level the box rules out
        else:
            col = aset.onehot_groups_[j][v]
            D[col, i] = 1.0
            integrality[i], upper[i] = 1, 1
            const[col] = -x[col]
    for key in {(k, j) for k, j, _ in cols if k in ("level", "group")}:
        a = np.zeros(nv)
        a[[i for i, (k, j, _) in enumerate(cols) if (k, j) == key]] = 1.0
        rows.append(a)
        lbs.append(1.0)
        ubs.append(1.0)
    for g in aset.onehot_groups_:  # each column's move stays in its box
        for col in g:
            rows.append(D[col])
            lbs.append(lo[col] - const[col] - 1e-9)
            ubs.append(hi[col] - const[col] + 1e-9)
    rows.append(c @ D)  # the score reaches the gap
    lbs.append(gap - c @ const)
    ubs.append(np.inf)
    # |w_j δ_j| per feature as a linear function of v: up/down parts, or per value
    weighted = np.zeros((d, nv))
    for i, (kind, j, v) in enumerate(cols):
        if kind in ("up", "down"):
            weighted[j, i] = w[j] * abs(D[j, i])
        elif kind == "level":
            weighted[j, i] = w[j] * abs(v - x[j])
        else:
            col = aset.onehot_groups_[j][v]
            for other in aset.onehot_groups_[j]:
                weighted[other, i] = w[other] * abs((other == col) - x[other])
    if aset.p == 1:
        obj = weighted.sum(0)
    else:
        obj = np.zeros(nv)
        obj[-1] = 1.0
        for j in range(d):
            a = weighted[j].copy()
            a[-1] = -1.0
            rows.append(a)
            lbs.append(-np.inf)
            ubs.append(0.0)
    res = milp(
        obj * 1e6,  # (HiGHS stops within an absolute gap of 1e-6: make that 1e-12)
        constraints=LinearConstraint(np.array(rows), lbs, ubs),
        integrality=integrality,
        bounds=Bounds(0.0, upper),
        options={"mip_rel_gap": 0.0, "presolve": False},
    )
    if res.status == 2:
        return None
    assert res.x is not None, res.message
    return (
        D @ np.round(np.where(integrality > 0, res.x, 0.0))
        + D @ np.where(integrality > 0, 0.0, res.x)
        + const
    )


@pytest.mark.slow
@pytest.mark.parametrize("p", [1, np.inf])
def test_min_cost_german_matches_independent_milp(german_typed, p):
    """min_cost on every rejected German row equals the MILP optimum within 1e-6
    relative, and succeeds exactly where the MILP's optimum is within the budget."""
    learner, X, action_set = german_typed
    rejected = X[learner.predict(X) == 0]
    free = action_set(p, 1e9)
    c, logit = _logit(learner, rejected)
    gap = -logit + 1e-12 * (1.0 + np.abs(logit))
    reference = [_milp_min_cost(x, c, g, free) for x, g in zip(rejected, gap, strict=True)]
    solvable = np.array([r is not None for r in reference])
    ref_cost = np.array([free.cost(r[None])[0] if r is not None else np.inf for r in reference])
    # a budget that half of the rows' optimum fits in: success must follow it exactly
    epsilon = float(np.median(ref_cost[solvable])) * 1.001
    aset = action_set(p, epsilon)
    res = individual_recourse(learner, rejected, 1, aset, method="linear", objective="min_cost")
    expected = solvable & (ref_cost <= epsilon)
    assert 0 < expected.sum() < len(rejected)
    np.testing.assert_array_equal(res.success, expected)
    assert aset.contains(rejected, res.delta).all()
    np.testing.assert_allclose(res.cost[expected], ref_cost[expected], rtol=1e-6)
    # without a budget: every solvable row, every cost
    res = individual_recourse(learner, rejected, 1, free, method="linear", objective="min_cost")
    np.testing.assert_array_equal(res.success, solvable)
    np.testing.assert_allclose(res.cost[solvable], ref_cost[solvable], rtol=1e-6)


@pytest.fixture(scope="module")
def german_scenario():
    """German credit as the lending_german scenario declares it: its action set (credit
    amount and age actionable, the dataset's own types: integers) and its learner (a
    logistic regression, C = 1) fitted on every row."""
    from recourse_sim.env.recourse_env import RecourseEnv
    from recourse_sim.scenarios import load_scenario

    env = RecourseEnv(load_scenario("lending_german"))
    ds = load("german")
    X = np.asarray(ds.X, dtype=np.float64)
    return LogisticRegression(C=1.0).fit(X, ds.y), X, env.action_set


@pytest.mark.slow
@pytest.mark.parametrize("p", [1, 2, np.inf])
@pytest.mark.parametrize("features", ["german_scenario", "german_typed"])
def test_every_german_row_alone_equals_the_batched_search(request, features, p):
    """Every German credit row, asked alone, gets the answer of all rows asked together,
    for the decision at P(good) ≥ 0.5 and at ≥ 0.9: with the lending_german scenario's
    action set and with every feature but three free to move over German's own types
    (integers, ordinal codes, binaries, the checking account's one-hot group)."""
    learner, X, action_set = request.getfixturevalue(features)
    aset = (
        action_set.replace(p=p, epsilon=1e9)
        if features == "german_scenario"
        else action_set(p, 1e9)
    )
    c, logit = _logit(learner, X)
    c = np.broadcast_to(c, X.shape)
    searched = 0
    for required in (0.0, np.log(9.0)):  # P(good) ≥ 0.5, ≥ 0.9
        gap = required - logit
        gap = gap + 1e-12 * (1.0 + np.abs(required) + np.abs(logit))  # (as `linear_min_cost`)
        searched += (gap > 0).sum()
        _assert_one_row_equals_batched(c, gap, X, aset)
    assert searched > 900


# -- nonlinear min_cost: never "no recourse" where the budget answer gets the decision --


@pytest.fixture(scope="module")
def german_mlp():
    from recourse_sim.learners import MLPClassifier

    ds = load("german")
    X = np.asarray(ds.X, dtype=np.float64)
    Z = (X - X.mean(0)) / X.std(0)
    model = MLPClassifier(hidden=(20, 20), random_state=0, fit_epochs=300).fit(Z, ds.y)
    rejected = Z[model.predict(Z) == 0][:80]
    names = list(ds.feature_names)
    actionable = ["duration", "credit_amount", "installment_rate", "age"]
    return model, rejected, names, actionable


@pytest.mark.slow
@pytest.mark.parametrize("method", ["pgd", "wachter", "linear"])
@pytest.mark.parametrize("typed", [False, True])
def test_nonlinear_min_cost_succeeds_where_budget_does(german_mlp, method, typed):
    model, rejected, names, actionable = german_mlp
    aset = ActionSet(
        len(names),
        feature_names=names,
        immutable=[n for n in names if n not in actionable],
        increase_only=["age"],
        p=2,
        epsilon=1.0,
        # (standardised units: a whole-number step of 0.5 SD stands in for integers)
        feature_types={"duration": "integer", "age": "integer"} if typed else None,
        steps={"duration": 0.5, "age": 0.5} if typed else None,
    )
    budget = individual_recourse(model, rejected, 1, aset, method=method, steps=50)
    cheap = individual_recourse(
        model, rejected, 1, aset, method=method, objective="min_cost", steps=50
    )
    assert budget.success.any() and not budget.success.all()
    assert not (budget.success & ~cheap.success).any()
    assert aset.contains(rejected, cheap.delta).all()
    # where both succeed, min_cost is no dearer than the budget answer
    both = budget.success & cheap.success
    assert (cheap.cost[both] <= budget.cost[both] * (1 + 1e-9)).all()
