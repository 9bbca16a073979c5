"""The strategic model (learner.strategic: s_hinge) against independent computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linprog
from scipy.stats import norm

from recourse_sim.env import RecourseEnv
from recourse_sim.learners.strategic import StrategicLinear, dual_norm
from recourse_sim.recourse import ActionSet


def _blobs(n: int, seed: int):
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1], n // 2)
    X = np.array([[8.5, 0.0], [11.5, 0.0]])[y] + 1.5 * rng.standard_normal((n, 2))
    return X, y


def _max_gain(g: np.ndarray, w: np.ndarray, p: float) -> float:
    """max g·δ subject to ‖w ⊙ δ‖_p ≤ 1, by a linear program (p = 1, ∞) or by the
    Cauchy-Schwarz maximiser δ = (g / w²) / ‖g / w‖₂ evaluated (p = 2)."""
    d = len(g)
    if p == 2:
        delta = (g / w**2) / np.linalg.norm(g / w)
        assert np.linalg.norm(w * delta) == pytest.approx(1.0)
        return float(g @ delta)
    # δ = u - v, u, v ≥ 0
    c = -np.concatenate([g, -g])
    if p == 1:  # Σ w_j (u_j + v_j) ≤ 1
        res = linprog(c, A_ub=np.concatenate([w, w])[None], b_ub=[1.0], bounds=(0, None))
    else:  # w_j (u_j + v_j) ≤ 1 for every j
        A = np.hstack([np.diag(w), np.diag(w)])
        res = linprog(c, A_ub=A, b_ub=np.ones(d), bounds=(0, None))
    assert res.status == 0
    return float(-res.fun)


@pytest.mark.parametrize("p", [1, 2, np.inf])
@pytest.mark.parametrize("weighted", [False, True])
def test_strategic_hinge_loss_recomputed(p, weighted):
    X, y = _blobs(400, 1)
    X = np.hstack([X, np.random.default_rng(2).standard_normal((400, 1))])
    w = np.array([0.5, 2.0, 1.5]) if weighted else np.ones(3)
    aset = ActionSet(3, cost_weights=w, p=p, epsilon=2.0)
    model = StrategicLinear(C=0.5, strength=2.0, action_set=aset).fit(X, y)
    g, b = model.coef_[0], model.intercept_[0]
    # the dual norm as the largest gain per unit cost (a linear program), and as a formula
    gain_lp = _max_gain(g, w, p)
    formula = {1: np.abs(g / w).max(), 2: np.linalg.norm(g / w), np.inf: np.abs(g / w).sum()}[p]
    assert gain_lp == pytest.approx(formula, rel=1e-9)
    assert dual_norm(g, aset) == pytest.approx(formula, rel=1e-12)
    # Levanon & Rosenfeld's s-hinge: max(0, 1 - ỹ (g·x + b) - r ỹ ‖g‖_*), z = 1
    signed = np.where(y == 1, 1.0, -1.0)
    expected = np.maximum(0.0, 1.0 - signed * (X @ g + b) - 2.0 * signed * formula)
    np.testing.assert_allclose(model.strategic_hinge_loss(model.state_, X, y), expected, atol=1e-12)


@pytest.mark.slow
def test_fit_minimises_the_strategic_hinge_risk():
    """The exact (SVM + shift) solution is at least as good as a direct minimisation of
    the non-convex s-hinge risk by gradient steps, and no nearby θ is better."""
    X, y = _blobs(600, 3)
    model = StrategicLinear(C=1.0, strength=2.0).fit(X, y)
    best = model.objective(model.state_, X, y)
    # direct minimisation in torch, from the plain least-squares direction
    Xt, yt = torch.tensor(X), torch.tensor(np.where(y == 1, 1.0, -1.0))
    g = torch.tensor([1.0, 0.0], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([-10.0], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([g, b], lr=0.02)
    for _ in range(3000):
        opt.zero_grad()
        risk = torch.clamp(1 - yt * (Xt @ g + b) - 2.0 * yt * g.norm(), min=0).mean()
        risk = risk + (g**2).sum() / (2 * len(X))
        risk.backward()
        opt.step()
    assert best <= float(risk.detach()) + 1e-6
    rng = np.random.default_rng(0)
    for _ in range(50):
        state = {k: v.clone() for k, v in model.state_.items()}
        state["coef"] += 1e-3 * torch.tensor(rng.standard_normal((1, 2)))
        state["intercept"] += 1e-3 * float(rng.standard_normal())
        assert model.objective(state, X, y) >= best - 1e-12


def test_accuracy_under_the_movers_response_is_the_shifted_models():
    """Movers simulated directly (to the boundary when it costs at most r): the model's
    accuracy under response is the plain SVM's accuracy on the unmoved rows, and near
    the linear optimum Φ(1) on fresh blobs."""
    from sklearn.svm import SVC

    X, y = _blobs(5000, 0)
    model = StrategicLinear(C=1.0, strength=2.0).fit(X, y)
    Xt, yt = _blobs(20000, 1)
    g, b = model.coef_[0], model.intercept_[0]
    s = Xt @ g + b
    distance = -s / np.linalg.norm(g)
    moves = (s < 0) & (distance <= 2.0)
    X_resp = Xt + np.where(moves, distance, 0.0)[:, None] * (g / np.linalg.norm(g))
    accepted = X_resp @ g + b >= -1e-9
    svm = SVC(kernel="linear", C=1.0, tol=1e-8).fit(X, y)
    np.testing.assert_array_equal(accepted, svm.decision_function(Xt) >= -1e-9)
    assert np.mean(accepted == (yt == 1)) == pytest.approx(norm.cdf(1.0), abs=0.01)


def test_anticipates_the_quadratic_best_response_exactly():
    """Against best_response (every row moves by ε g / w², p = 2) the decisions on the
    moved rows are the SVM's on the rows as they were."""
    X, y = _blobs(2000, 4)
    w = np.array([1.0, 2.0])
    aset = ActionSet(2, cost_weights=w, p=2)
    model = StrategicLinear(response="quadratic", strength=0.7, action_set=aset).fit(X, y)
    g, b = model.coef_[0], model.intercept_[0]
    moved = X + 0.7 * g / w**2
    from sklearn.svm import SVC

    svm = SVC(kernel="linear", C=1.0, tol=1e-8).fit(X, y)
    np.testing.assert_allclose(moved @ g + b, svm.decision_function(X), atol=1e-9)


def test_strategic_blobs_scenario_columns(tmp_path):
    """Two rounds of the bundled scenario: acc_under_response and social_burden
    recomputed from the people's rows and the deployed θ."""
    env = RecourseEnv("strategic_blobs")
    env.reset(seed=0)
    g, b = env.learner.coef_[0], env.learner.intercept_[0]
    for _ in range(2):
        c = env.state.cohort
        X, label = c.report.copy(), c.y0 == 1
        _, _, _, _, info = env.step(None)
        everyone = info["metrics"][-1]
        people = env.people()
        assert everyone["acc_under_response"] == pytest.approx(
            np.mean(people["favourable"] == label)
        )
        # least cost: the distance to the boundary (0 if accepted as they are)
        cost = np.maximum(0.0, -(X @ g + b)) / np.linalg.norm(g)
        assert everyone["social_burden"] == pytest.approx(cost[label].mean(), rel=1e-9)
        assert everyone["acc_under_response"] > 0.8
