"""Re-weighting, JTT and χ²-DRO learners against scikit-learn and an independent solver."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from sklearn.linear_model import LogisticRegression as SkLogistic

from recourse_sim.env import RecourseEnv
from recourse_sim.errors import ConfigError
from recourse_sim.learners import LEARNERS, make_learner
from recourse_sim.learners.robust import chi2_worst_case


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 3))
    y = (X[:, 0] + 0.8 * rng.standard_normal(300) > 0.4).astype(int)
    return X, y


def _weights(model, X, y):
    return model.row_weights(None, torch.tensor(X), torch.tensor(y), {}).numpy()


@pytest.mark.parametrize("name", ["reweighted", "jtt", "chi2_dro"])
def test_fit_is_sklearns_weighted_fit(data, name):
    X, y = data
    model = make_learner(name, C=0.7, update_rule="refit", n_classes=2).fit(X, y)
    w = _weights(model, X, y)
    ref = SkLogistic(C=0.7, tol=1e-12, max_iter=10_000).fit(X, y, sample_weight=w)
    np.testing.assert_allclose(model.coef_, ref.coef_, atol=1e-6)
    np.testing.assert_allclose(model.intercept_, ref.intercept_, atol=1e-6)


def test_reweighting_balances_the_classes(data):
    X, y = data
    w = _weights(make_learner("reweighted", n_classes=2).fit(X, y), X, y)
    assert w[y == 1].sum() == pytest.approx(w[y == 0].sum())
    assert w.mean() == pytest.approx(1.0)


def test_jtt_upweights_the_plain_fits_errors(data):
    X, y = data
    model = make_learner("jtt", C=0.7, upweight=4.0, n_classes=2).fit(X, y)
    plain = SkLogistic(C=0.7, tol=1e-12, max_iter=10_000).fit(X, y)
    wrong = plain.predict(X) != y
    assert wrong.any()
    np.testing.assert_array_equal(_weights(model, X, y), np.where(wrong, 4.0, 1.0))


@pytest.mark.parametrize("rho", [0.05, 0.5, 3.0])
def test_chi2_worst_case_is_the_constrained_maximiser(rho):
    loss = np.random.default_rng(1).exponential(size=12)
    n = len(loss)
    q = chi2_worst_case(loss, rho)
    cons = [
        {"type": "eq", "fun": lambda q: q.sum() - 1.0},
        {"type": "ineq", "fun": lambda q: rho - 0.5 * ((n * q - 1.0) ** 2).sum() / n},
    ]
    ref = minimize(
        lambda q: -(q @ loss),
        np.full(n, 1.0 / n),
        constraints=cons,
        bounds=[(0.0, 1.0)] * n,
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 1000},
    )
    assert q @ loss == pytest.approx(-ref.fun, rel=1e-6)
    np.testing.assert_allclose(q, ref.x, atol=1e-4)


def test_gradient_rules_are_refused(data):
    X, y = data
    with pytest.raises(ConfigError, match="update_rule='sgd'"):
        make_learner("jtt", update_rule="sgd").fit(X, y)


@pytest.mark.parametrize("name", ["reweighted", "jtt", "chi2_dro"])
def test_selectable_from_yaml(name):
    env = RecourseEnv("signal_planting", learner__type=name, rounds=2)
    env.reset(seed=0)
    _, _, _, _, info = env.step(None)
    assert type(env.learner) is LEARNERS[name]
    assert info["metrics"][-1]["theta_step"] > 0


def test_chi2_dro_minimises_the_robust_risk(data):
    """At the fitted θ the robust risk's (Danskin) gradient vanishes and no nearby θ is
    lower: the weighted refit at the worst-case weights is the DRO minimiser."""
    X, y = data
    model = make_learner("chi2_dro", rho=0.1, n_classes=2).fit(X, y)
    theta = np.r_[model.coef_[0], model.intercept_]
    Xt, yt = torch.tensor(X), torch.tensor(y)
    value, grad = model.dro_objective(theta, Xt, yt, {})
    assert np.abs(grad).max() < 1e-4 * (1.0 + value)
    rng = np.random.default_rng(0)
    for _ in range(20):
        step = 1e-3 * rng.standard_normal(len(theta))
        assert model.dro_objective(theta + step, Xt, yt, {})[0] >= value - 1e-9
