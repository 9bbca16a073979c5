"""Ross et al.: recourse-aware training (λ) and the PARE threshold (PAC confidence sets)."""

from __future__ import annotations

import itertools
import pickle
from fractions import Fraction
from math import comb

import numpy as np
import pytest
import torch
from scipy.stats import binom
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.metrics import f1_score

from recourse_sim.errors import ConfigError
from recourse_sim.learners import LogisticRegression, MLPClassifier, make_learner
from recourse_sim.recourse import ActionSet
from recourse_sim.recourse.ross import (
    PareThreshold,
    binomial_error_budget,
    max_f1_threshold,
    pac_threshold,
    pare_threshold,
    recourse_delta,
    recourse_rates,
    recourse_scores,
)

# Ross's Δ on a toy problem: feature 0 is immutable and strongly predictive, feature 1
# is actionable (|δ| ≤ 0.75) and only weakly predictive.
TOY_SET = ActionSet(2, immutable=[0], max_change=0.75, p=np.inf, epsilon=0.75)


@pytest.fixture(scope="module")
def toy():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 2))
    y = (2.0 * X[:, 0] + 0.3 * X[:, 1] + 0.5 * rng.normal(size=400) > 0).astype(np.int64)
    return X, y


def small_mlp(lam: float = 0.0, **kwargs) -> MLPClassifier:
    params = dict(
        hidden=(16,),
        activation="tanh",
        fit_epochs=15,
        fit_lr=0.02,
        batch_size=64,
        random_state=0,
        recourse_loss_weight=lam,
        action_set=TOY_SET,
    )
    return MLPClassifier(**(params | kwargs))


def neg_recourse(model, X, method="linear") -> float:
    g = model.predict_proba(X)[:, 1]
    return recourse_rates(g, recourse_scores(model, X, TOY_SET, method=method), 0.5)[0]


# -- δ* ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["logistic", "mlp"])
def test_recourse_delta_raises_the_positive_score(toy, kind):
    X, y = toy
    model = LogisticRegression().fit(X, y) if kind == "logistic" else small_mlp().fit(X, y)
    Xt = torch.as_tensor(X)
    delta = recourse_delta(model, model.state(), Xt, TOY_SET)
    assert TOY_SET.contains(X, delta.numpy()).all()
    assert torch.all(delta[:, 0] == 0) and torch.all(delta[:, 1].abs() == 0.75)
    before = model.predict_proba(X)[:, 1]
    after = model.predict_proba(X + delta.numpy())[:, 1]
    if kind == "logistic":  # the logit is linear in x: δ* is the exact maximiser of g
        assert np.all(after > before)
        w = model.coef_[0, 1]
        np.testing.assert_array_equal(delta[:, 1].numpy(), 0.75 * np.sign(w))
    else:  # first order: g rises along δ* for (nearly) every row
        assert np.mean(after > before) > 0.95
        assert after.mean() > before.mean()


def _vertex_minimum(g: np.ndarray, lo: np.ndarray, hi: np.ndarray, w, eps, p) -> float:
    """min gᵀδ over {lo ≤ δ ≤ hi, ‖w ⊙ δ‖_p ≤ ε} by enumerating every vertex: each
    choice of d active constraints among the box faces and the ball's facets."""
    d = len(g)
    rows, rhs = [], []
    for j in range(d):
        e = np.eye(d)[j]
        rows += [e, -e]
        rhs += [hi[j], -lo[j]]
    signs = itertools.product((-1.0, 1.0), repeat=d)
    if p == 1:  # Σ sⱼ wⱼ δⱼ ≤ ε for every sign pattern s
        for s in signs:
            rows.append(np.array(s) * w)
            rhs.append(eps)
    else:  # |wⱼ δⱼ| ≤ ε
        for j in range(d):
            e = np.eye(d)[j] * w[j]
            rows += [e, -e]
            rhs += [eps, eps]
    A, b = np.array(rows), np.array(rhs)
    best = np.inf
    for active in itertools.combinations(range(len(A)), d):
        M = A[list(active)]
        if abs(np.linalg.det(M)) < 1e-12:
            continue
        v = np.linalg.solve(M, b[list(active)])
        if np.all(A @ v <= b + 1e-9):
            best = min(best, float(g @ v))
    return best


@pytest.mark.parametrize("p", [1, np.inf])
def test_recourse_delta_matches_brute_force_vertex_search(p):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 3))
    y = (X @ np.array([1.0, -2.0, 0.5]) + rng.normal(size=200) > 0).astype(np.int64)
    model = LogisticRegression().fit(X, y)
    for trial in range(6):
        kind = rng.integers(0, 4, size=3)
        kind[trial % 3] = 0  # keep at least one free feature
        a = ActionSet(
            3,
            immutable=np.flatnonzero(kind == 1).tolist(),
            increase_only=np.flatnonzero(kind == 2).tolist(),
            decrease_only=np.flatnonzero(kind == 3).tolist(),
            max_change=rng.uniform(0.2, 1.5, size=3),
            cost_weights=rng.uniform(0.5, 2.0, size=3),
            p=p,
            epsilon=float(rng.uniform(0.3, 1.5)),
        )
        Xq = torch.as_tensor(rng.normal(size=(4, 3)))
        delta = recourse_delta(model, model.state(), Xq, a).numpy()
        # the LP objective: the input gradient of the goal loss −log g(x)
        Xg = Xq.clone().requires_grad_(True)
        loss = -torch.log(model.proba_fn(model.state(), Xg)[:, 1]).sum()
        (grad,) = torch.autograd.grad(loss, Xg)
        lo, hi = (np.asarray(b) for b in a.box(Xq.numpy()))
        for i in range(len(Xq)):
            g = grad[i].numpy()
            best = _vertex_minimum(g, lo[i], hi[i], a.weights_, a.epsilon, p)
            assert g @ delta[i] == pytest.approx(best, abs=1e-9)


# -- recourse-aware training ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["logistic", "mlp"])
def test_recourse_loss_raises_recourse_of_negatives(toy, kind):
    X, y = toy

    def fit(lam):
        if kind == "logistic":
            return LogisticRegression(recourse_loss_weight=lam, action_set=TOY_SET).fit(X, y)
        return small_mlp(lam).fit(X, y)

    base, ours = fit(0.0), fit(1.0)
    for method in ("linear", "pgd"):
        assert neg_recourse(ours, X, method) > neg_recourse(base, X, method) + 0.2


def test_lambda_zero_is_plain_training(toy):
    X, y = toy
    for make in (
        lambda **kw: LogisticRegression(**kw),
        lambda **kw: MLPClassifier(hidden=(4,), fit_epochs=3, batch_size=100, random_state=1, **kw),
    ):
        plain = make().fit(X, y)
        with_set = make(action_set=TOY_SET, recourse_loss_weight=0.0).fit(X, y)
        np.testing.assert_array_equal(plain.param_vector(), with_set.param_vector())


def test_logistic_recourse_fit_matches_sklearn_on_the_augmented_data(toy):
    """For one free actionable feature, δ* = ±0.75 on it for every row (the sign of its
    weight), so the recourse-aware optimum is a weighted logistic regression on
    [X; X + δ*] with labels [y; 1] and weights [1; λ] for one of the two signs."""
    X, y = toy
    lam, C = 0.7, 2.0
    ours = LogisticRegression(C=C, recourse_loss_weight=lam, action_set=TOY_SET).fit(X, y)

    def objective(clf, X_aug, y_aug, weight):
        z = X_aug @ clf.coef_[0] + clf.intercept_[0]
        loss = np.logaddexp(0.0, z) - y_aug * z
        return 0.5 * clf.coef_[0] @ clf.coef_[0] + C * weight @ loss

    candidates = []
    for sign in (-1.0, 1.0):
        X_aug = np.vstack([X, X + np.array([0.0, 0.75 * sign])])
        y_aug = np.r_[y, np.ones(len(X), dtype=np.int64)]
        weight = np.r_[np.ones(len(X)), np.full(len(X), lam)]
        clf = SkLogisticRegression(C=C, tol=1e-12, max_iter=10_000).fit(
            X_aug, y_aug, sample_weight=weight
        )
        if np.sign(clf.coef_[0, 1]) == sign:  # δ* consistent with the fitted weights
            candidates.append((objective(clf, X_aug, y_aug, weight), clf))
    _, best = min(candidates, key=lambda c: c[0])
    np.testing.assert_allclose(ours.coef_, best.coef_, atol=1e-5)
    np.testing.assert_allclose(ours.intercept_, best.intercept_, atol=1e-5)


def _fd_error(loss, X: np.ndarray, h: float = 1e-6, seed: int = 0) -> float:
    """Relative error of autograd against central differences along random directions."""
    X0 = torch.tensor(X, requires_grad=True)
    loss(X0).backward()
    rng = np.random.default_rng(seed)
    errors = []
    with torch.no_grad():
        for _ in range(3):
            d = torch.as_tensor(rng.normal(size=X.shape))
            d /= d.norm()
            base = torch.as_tensor(X)
            fd = (loss(base + h * d) - loss(base - h * d)) / (2 * h)
            errors.append(abs(float((X0.grad * d).sum() - fd)) / max(abs(float(fd)), 1e-8))
    return max(errors)


@pytest.mark.parametrize("kind", ["logistic_refit", "logistic_sgd", "mlp_sgd"])
def test_hypergradient_with_recourse_loss_matches_finite_differences(toy, kind):
    X, y = toy
    if kind == "logistic_refit":
        model = LogisticRegression(recourse_loss_weight=0.5, action_set=TOY_SET)
    elif kind == "logistic_sgd":
        model = LogisticRegression(update_rule="sgd", recourse_loss_weight=0.5, action_set=TOY_SET)
    else:
        model = small_mlp(0.5, epochs=3, lr=0.1)
    model.fit(X[:200], y[:200])
    state, y_new, query = model.state(), torch.as_tensor(y[200:260]), torch.as_tensor(X[:5])

    def loss(X_new):
        return -torch.log(model.proba_fn(model.update_fn(state, X_new, y_new), query)[:, 1]).sum()

    assert _fd_error(loss, X[200:260]) < 1e-4


def test_mlp_refit_update_with_recourse_loss(toy):
    X, y = toy
    model = small_mlp(0.5, update_rule="refit", hypergrad="implicit", fit_epochs=10)
    model.fit(X[:200], y[:200]).update(X[200:], y[200:])
    proba = model.predict_proba(X)
    np.testing.assert_allclose(proba.sum(1), 1.0)
    assert neg_recourse(model, X) > neg_recourse(small_mlp().fit(X, y), X)


def test_options_through_make_learner_clone_and_pickle(toy):
    X, y = toy
    model = make_learner("logistic_regression", recourse_loss_weight=0.5, action_set=TOY_SET)
    assert clone(model).get_params()["recourse_loss_weight"] == 0.5
    model.fit(X, y)
    again = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(again.predict_proba(X), model.predict_proba(X))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"recourse_loss_weight": -0.1}, "recourse_loss_weight"),
        ({"recourse_loss_weight": 0.5, "action_set": None}, "needs an action_set"),
        ({"action_set": ActionSet(3)}, "3 features"),
        ({"action_set": {"max_change": 0.75}}, "ActionSet"),
        ({"recourse_goal": 2}, "recourse_goal"),
    ],
)
@pytest.mark.parametrize("cls", [LogisticRegression, MLPClassifier])
def test_bad_recourse_options_rejected(toy, cls, kwargs, match):
    X, y = toy
    with pytest.raises(ConfigError, match=match):
        cls(**kwargs).fit(X, y)


# -- the PAC bound -------------------------------------------------------------------------


def _exact_budget(n: int, eps: Fraction, alpha: Fraction) -> int:
    """k* in exact rational arithmetic."""
    cdf, k = Fraction(0), -1
    for h in range(n + 1):
        cdf += comb(n, h) * eps**h * (1 - eps) ** (n - h)
        if cdf > alpha:
            break
        k = h
    return k


@pytest.mark.parametrize(
    ("n", "eps", "alpha", "expected"),
    [
        (58, "1/20", "1/20", -1),  # 0.95^58 = 0.051 > 0.05: not even zero errors
        (59, "1/20", "1/20", 0),  # 0.95^59 = 0.0485: the classic "59 draws" rule
        (100, "1/20", "1/20", 1),  # F(1) = 0.037, F(2) = 0.118
        (10, "1/2", "1/2", 4),  # F(4) = 386/1024, F(5) = 638/1024
        (1000, "1/10", "1/100", 78),
    ],
)
def test_binomial_budget_hand_computed(n, eps, alpha, expected):
    assert _exact_budget(n, Fraction(eps), Fraction(alpha)) == expected
    assert binomial_error_budget(n, float(Fraction(eps)), float(Fraction(alpha))) == expected


def test_binomial_budget_matches_scipy():
    for n in (1, 5, 30, 59, 100, 733, 5000):
        for eps in (0.01, 0.05, 0.1, 0.25, 0.5):
            for alpha in (0.01, 0.05, 0.1, 0.5):
                k = binomial_error_budget(n, eps, alpha)
                # conservative at exact ties (e.g. F(2; 5, 0.5) = 0.5): float rounding
                # may stop one short of a CDF value equal to α, never past it
                assert binom.cdf(k + 1, n, eps) > alpha * (1 - 1e-12)
                if k >= 0:
                    assert binom.cdf(k, n, eps) <= alpha * (1 + 1e-9)


def test_bad_levels_rejected():
    for bad in (0.0, 1.0, -0.1, 2):
        with pytest.raises(ConfigError, match="epsilon"):
            binomial_error_budget(10, bad, 0.1)
        with pytest.raises(ConfigError, match="alpha"):
            binomial_error_budget(10, 0.1, bad)
    with pytest.raises(ConfigError, match="NaN"):
        pac_threshold([0.1, np.nan], 0.1, 0.1)


def test_pac_threshold_is_the_largest_with_at_most_k_below():
    rng = np.random.default_rng(0)
    scores = np.round(rng.uniform(size=300), 2)  # with ties
    k = binomial_error_budget(300, 0.1, 0.05)
    tau = pac_threshold(scores, 0.1, 0.05)
    assert tau == np.sort(scores)[k]
    assert (scores < tau).sum() <= k
    larger = np.unique(scores[scores > tau])[0]
    assert (scores < larger).sum() > k


def test_pac_threshold_with_too_few_rows_warns_and_accepts_everyone():
    with pytest.warns(UserWarning, match="too few"):
        assert pac_threshold(np.full(20, 0.9), 0.05, 0.05) == 0.0


@pytest.mark.slow
def test_pac_coverage_by_simulation():
    """Uniform scores: P[s < τ] = τ, so τ̂ fails (rate < 1 − ε) exactly when τ̂ > ε,
    i.e. with probability P[Binomial(n, ε) ≤ k*] ≤ α. Check both, over 4,000 draws."""
    n, eps, alpha, draws = 200, 0.1, 0.1, 4000
    rng = np.random.default_rng(1)
    k = binomial_error_budget(n, eps, alpha)
    taus = np.array([pac_threshold(rng.uniform(size=n), eps, alpha) for _ in range(draws)])
    failures = np.mean(taus > eps)
    expected = binom.cdf(k, n, eps)
    assert expected <= alpha
    assert abs(failures - expected) < 4 * np.sqrt(expected * (1 - expected) / draws)
    assert failures <= alpha


def test_pare_coverage_on_a_synthetic_calibration_set():
    """A fixed model and Δ; draw many calibration sets from the population, certify τ̂ on
    each, and measure the true recourse rate at τ̂ on a large independent sample."""
    rng = np.random.default_rng(2)

    def population(n):
        X = rng.normal(size=(n, 2))
        return X, (X[:, 0] + 0.5 * X[:, 1] + 0.5 * rng.normal(size=n) > 0).astype(np.int64)

    model = LogisticRegression().fit(*population(500))
    a = ActionSet(2, immutable=[0], max_change=0.5, p=np.inf, epsilon=0.5)
    pool, _ = population(40_000)
    pool_scores = recourse_scores(model, pool, a)  # s(x) is a function of x alone
    test_scores = np.sort(recourse_scores(model, population(200_000)[0], a))
    n, eps, alpha, draws = 150, 0.1, 0.1, 1500
    taus = np.array([pac_threshold(rng.choice(pool_scores, n), eps, alpha) for _ in range(draws)])
    true_rate = 1.0 - np.searchsorted(test_scores, taus, side="left") / len(test_scores)
    assert np.mean(true_rate >= 1 - eps) >= 1 - alpha - 0.02
    # and pare_threshold computes the same τ̂ from the rows themselves
    X_cal = pool[:n]
    result = pare_threshold(model, X_cal, a, epsilon=eps, alpha=alpha)
    assert isinstance(result, PareThreshold)
    assert result.upper == result.threshold == pac_threshold(pool_scores[:n], eps, alpha)
    assert result.max_errors == binomial_error_budget(n, eps, alpha)


# -- threshold selection (§4.2) and metrics -----------------------------------------------


@pytest.mark.slow
def test_max_f1_threshold_exact_and_grid():
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, size=300)
    scores = np.clip(0.3 * y + rng.uniform(size=300) * 0.7, 0, 1).round(2)

    def f1(t):
        return f1_score(y, (scores >= t).astype(int), zero_division=0)

    best = max_f1_threshold(scores, y)
    brute = max(np.r_[np.unique(scores), 1.0], key=f1)
    assert f1(best) == pytest.approx(f1(brute))
    capped = max_f1_threshold(scores, y, upper=0.4)
    assert capped <= 0.4
    assert f1(capped) == pytest.approx(max(f1(t) for t in np.r_[scores[scores <= 0.4], 0.4]))
    grid = max_f1_threshold(scores, y, upper=0.8, n_grid=10)
    assert grid in np.linspace(0, 0.8, 10)
    assert f1(grid) == max(f1(t) for t in np.linspace(0, 0.8, 10))


def test_pare_threshold_selects_f1_best_below_the_bound(toy):
    X, y = toy
    model = LogisticRegression(recourse_loss_weight=0.5, action_set=TOY_SET).fit(X, y)
    result = pare_threshold(model, X, TOY_SET, epsilon=0.05, alpha=0.05, y_cal=y)
    assert result.threshold in np.linspace(0, result.upper, 10)
    g = model.predict_proba(X)[:, 1]
    best = recourse_scores(model, X, TOY_SET)
    assert recourse_rates(g, best, result.threshold)[1] >= recourse_rates(g, best, result.upper)[1]
    assert recourse_rates(g, best, result.upper)[1] >= 1 - 0.05  # on the calibration rows


def test_recourse_rates_and_scores():
    g = np.array([0.1, 0.4, 0.6, 0.9])
    best = np.array([0.3, 0.7, 0.6, 0.9])
    neg, every = recourse_rates(g, best, 0.5)
    assert neg == 0.5 and every == 0.75
    assert np.isnan(recourse_rates(g, best, 0.0)[0])
    with pytest.raises(ConfigError, match="method"):
        recourse_scores(LogisticRegression(), g[:, None], ActionSet(1), method="lime")
