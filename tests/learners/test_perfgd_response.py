"""PerfGD with the response's own derivative (``jacobian="response"``), against the
environment's best response (`best_response_delta`): its Jacobian against central finite
differences of that response, its step against finite differences of the performative
risk, and its limit against the performative optimum that scipy finds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from recourse_sim.agents.best_response import best_response_delta
from recourse_sim.errors import ConfigError
from recourse_sim.learners import LogisticRegression
from recourse_sim.learners.performative import PerformativeLogisticRegression, response_move
from recourse_sim.recourse import ActionSet

N, C, EPS = 400, 1.0, 1.0
_rng = np.random.default_rng(0)
Y = np.repeat([0, 1], N // 2)
X0 = np.where(Y[:, None] == 1, 0.5, -0.5) + _rng.standard_normal((N, 4))


def action_set(p=2) -> ActionSet:
    """A cap that stops some moves up, a max_change, a monotone and an immutable feature,
    unequal cost weights."""
    return ActionSet(
        4,
        upper=[0.8, np.inf, np.inf, np.inf],
        max_change=[np.inf, 0.3, np.inf, np.inf],
        decrease_only=[2],
        immutable=[3],
        cost_weights=[1.0, 2.0, 0.5, 1.0],
        p=p,
    )


def coef_in_x(model, theta: np.ndarray) -> np.ndarray:
    """The class-1 log-odds' weights in the units of x of a packed θ (D,)."""
    coef = theta[:-1]
    if "x_scale" in model.state_:
        coef = coef / model.state_["x_scale"].numpy().reshape(-1)
    return coef


def reports(model, theta, aset, classes=None) -> np.ndarray:
    """The environment's reports: x₀ + the best response to θ of the responding rows."""
    delta = best_response_delta(aset, X0, coef_in_x(model, theta), EPS)
    if classes is not None:
        delta[~np.isin(Y, classes)] = 0.0
    return X0 + delta


def fitted(aset, standardize=False, classes=None, **kw) -> PerformativeLogisticRegression:
    model = PerformativeLogisticRegression(
        C=C,
        jacobian="response",
        action_set=aset,
        strength=EPS,
        responding_classes=classes,
        standardize=standardize,
        **kw,
    ).fit(X0, Y)
    # a model whose weights make the monotone feature's move possible (negative weight)
    theta = np.array([0.9, 0.6, -0.7, 0.4, -0.2])
    if standardize:
        theta[:-1] *= model.state_["x_scale"].numpy().reshape(-1)
    model.state_.update(model.unpack(torch.from_numpy(theta)[None]))
    return model


def theta_of(model) -> np.ndarray:
    return model.pack(model.state_).numpy()[0].copy()


@pytest.mark.parametrize("p", [1, 2, np.inf])
def test_the_move_is_the_environments_response_without_bounds(p):
    aset = action_set(p).replace(upper=None, max_change=None)
    coef = np.array([0.9, 0.6, -0.7, 0.4])
    move = response_move(torch.from_numpy(coef), aset, EPS).numpy()
    np.testing.assert_allclose(move, best_response_delta(aset, X0[:1], coef, EPS)[0], atol=1e-15)


@pytest.mark.parametrize(
    ("p", "standardize", "classes"),
    [(2, False, None), (2, True, None), (1, False, None), (np.inf, True, None), (2, False, (0,))],
)
def test_jacobian_equals_finite_differences_of_the_environments_response(p, standardize, classes):
    aset = action_set(p)
    model = fitted(aset, standardize, classes)
    theta = theta_of(model)
    X = reports(model, theta, aset, classes)
    scaling = {k: model.state_[k] for k in ("x_shift", "x_scale") if k in model.state_}
    th = torch.from_numpy(theta)[None]
    moving = model.moving(th, torch.from_numpy(X), torch.from_numpy(Y), scaling).numpy()
    jac = model.response_jacobian(th, scaling).numpy()  # (d, D)
    ours = moving[:, :, None] * jac[None]  # (n, d, D)
    h = 1e-6
    up = [reports(model, theta + h * e, aset, classes) for e in np.eye(len(theta))]
    down = [reports(model, theta - h * e, aset, classes) for e in np.eye(len(theta))]
    fd = (np.stack(up, axis=-1) - np.stack(down, axis=-1)) / (2 * h)
    np.testing.assert_allclose(ours, fd, atol=1e-6)
    # the case is not trivial: the response moves, and a bound stops some moves
    assert np.abs(fd).max() > 0.1
    if p == 2 and classes is None:
        assert 0 < moving[:, 0].sum() < N


def performative_risk(model, theta, aset, classes=None) -> float:
    """PR(θ): mean cross-entropy of θ on the reports it induces, + ‖W‖² / (2 C n)."""
    X = reports(model, theta, aset, classes)
    if "x_scale" in model.state_:
        X = (X - model.state_["x_shift"].numpy()) / model.state_["x_scale"].numpy()
    z = X @ theta[:-1] + theta[-1]
    return float(np.mean(np.logaddexp(0.0, z) - Y * z) + theta[:-1] @ theta[:-1] / (2 * C * N))


@pytest.mark.parametrize(
    ("p", "standardize", "classes"), [(2, False, None), (np.inf, True, None), (2, True, (0,))]
)
def test_step_is_minus_lr_times_the_performative_gradient(p, standardize, classes):
    aset = action_set(p)
    lr = 0.5
    model = fitted(aset, standardize, classes, lr=lr)
    theta = theta_of(model)
    model.update(reports(model, theta, aset, classes), Y)
    step = (theta - theta_of(model)) / lr
    h = 1e-6
    fd = np.array(
        [
            (
                performative_risk(model, theta + h * e, aset, classes)
                - performative_risk(model, theta - h * e, aset, classes)
            )
            / (2 * h)
            for e in np.eye(len(theta))
        ]
    )
    np.testing.assert_allclose(step, fd, rtol=1e-6, atol=1e-9)


# -- a small world whose stable point is not its optimum ---------------------------------

M = 1000
_rng2 = np.random.default_rng(1)
Y2 = np.repeat([0, 1], M // 2)
X2 = np.where(Y2[:, None] == 1, 0.5, -0.5) + _rng2.standard_normal((M, 3))
# a cap on the first feature stops the moves of those near it: the shift is not uniform,
# so the intercept cannot absorb it
CAPPED = ActionSet(3, immutable=[2], upper=[0.5, np.inf, np.inf], cost_weights=[1.0, 2.0, 1.0])


def respond2(coef: np.ndarray) -> np.ndarray:
    return X2 + best_response_delta(CAPPED, X2, coef, EPS)


def risk2(theta: np.ndarray) -> float:
    z = respond2(theta[:3]) @ theta[:3] + theta[3]
    return float(np.mean(np.logaddexp(0.0, z) - Y2 * z) + theta[:3] @ theta[:3] / (2 * C * M))


@pytest.fixture(scope="module")
def optimum() -> np.ndarray:
    res = minimize(
        risk2,
        np.zeros(4),
        method="Nelder-Mead",
        options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 20000, "maxfev": 20000},
    )
    return res.x


def _play(model, rounds: int) -> np.ndarray:
    for _ in range(rounds):
        model.update(respond2(model.coef_[0]), Y2)
    return np.r_[model.coef_[0], model.intercept_]


def test_perfgd_with_the_response_reaches_the_performative_optimum(optimum):
    exact = PerformativeLogisticRegression(
        C=C, lr=5.0, jacobian="response", action_set=CAPPED, strength=EPS
    ).fit(X2, Y2)
    theta = _play(exact, 60)
    # PR is not convex: each row the cap stops adds a kink, and PerfGD stops at a
    # stationary point 1.6e-6 above the minimum, along a flat valley of (w₀, b)
    assert risk2(theta) - risk2(optimum) < 1e-5
    np.testing.assert_allclose(theta, optimum, atol=0.03)
    # repeated risk minimisation stops at the stable point, further from the optimum
    stable = _play(LogisticRegression(C=C, update_rule="window", window=1).fit(X2, Y2), 30)
    assert risk2(stable) - risk2(optimum) > 1e-3
    # the Jacobian estimated from past class means misses the cap: it stops short
    estimated = _play(PerformativeLogisticRegression(C=C, lr=2.0).fit(X2, Y2), 60)
    assert risk2(estimated) - risk2(optimum) > 100 * (risk2(theta) - risk2(optimum))


def test_response_jacobian_needs_its_response():
    with pytest.raises(ConfigError, match="needs the response's action_set"):
        PerformativeLogisticRegression(jacobian="response").fit(X2, Y2)
    with pytest.raises(ConfigError, match="option of perfgd, not dfo"):
        PerformativeLogisticRegression(
            update_rule="dfo", jacobian="response", action_set=CAPPED
        ).fit(X2, Y2)
    with pytest.raises(ConfigError, match="jacobian='exact' is not one of"):
        PerformativeLogisticRegression(jacobian="exact").fit(X2, Y2)
    typed = CAPPED.replace(feature_types={0: "integer"})
    with pytest.raises(ConfigError, match="continuous response; 0 move by whole steps"):
        PerformativeLogisticRegression(jacobian="response", action_set=typed).fit(X2, Y2)
