"""The numerics of logistic regression shared by the single learner and the batched
refits: the logistic function and softplus without overflow, standardisation, a
Cholesky factor with a ridge where the Hessian is singular."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scipy.linalg.lapack import dpotrf

from recourse_sim.lazy import LazyModule
from recourse_sim.learners.base import State

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds learners without torch
    torch = LazyModule("torch", globals())

__all__ = [
    "ARMIJO",
    "F_SLACK",
    "MIN_STEP",
    "binary_goal_loss",
    "cholesky",
    "one_class",
    "scaled",
    "sigmoid",
    "sigmoid_of",
    "softplus",
    "softplus_sigmoid",
    "standardisation",
    "standardisation_arrays",
]

# Armijo constant and smallest step fraction of the backtracking line search.
ARMIJO = 1e-4
MIN_STEP = 1e-10
# Relative slack of the Armijo test, a few float64 roundings of the risk.
F_SLACK = 1e-13


def standardisation(X: torch.Tensor) -> State:
    """``x_shift`` (means) and ``x_scale`` (population SDs, 1 for a constant feature) of X."""
    X = X.detach().to(torch.float64)
    scale = X.std(0, correction=0)
    return {"x_shift": X.mean(0), "x_scale": torch.where(scale > 0, scale, torch.ones_like(scale))}


def standardisation_arrays(X: np.ndarray) -> dict[str, np.ndarray]:
    """`standardisation` on numpy: ``x_shift`` (means) and ``x_scale`` (population SDs,
    1 for a constant feature) of X."""
    scale = X.std(0)
    return {"x_shift": X.mean(0), "x_scale": np.where(scale > 0, scale, 1.0)}


def scaled(scaling: State, X: torch.Tensor) -> torch.Tensor:
    """X standardised with ``x_shift``/``x_scale`` of `scaling` (X itself without them)."""
    if "x_scale" not in scaling:
        return X
    return (X - scaling["x_shift"]) / scaling["x_scale"]


def sigmoid(z: np.ndarray) -> np.ndarray:
    """The logistic function, exp taken of −|z| only (no overflow); faster than expit."""
    return sigmoid_of(z, np.exp(-np.abs(z)))


def sigmoid_of(z: np.ndarray, e: np.ndarray) -> np.ndarray:
    """The logistic function of z from e = exp(−|z|): 1 / (1 + e) where z ≥ 0, else
    e / (1 + e). The numerator is picked by 0/1 masks rather than np.where (branchy on
    mixed signs, and twice as slow); the numbers are the same, NaN included."""
    nonnegative = z >= 0
    s = e * ~nonnegative
    s += nonnegative
    s /= 1.0 + e
    return s


def one_class(y: torch.Tensor) -> bool:
    """Whether the labels y hold one class at most (numpy: cheaper than torch on a
    round's worth)."""
    y = y.detach().numpy()
    return len(y) == 0 or bool((y == y[0]).all())


def binary_goal_loss(p1: np.ndarray, goal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the goal cross-entropy −log p(goal) of a binary model with P(class 1) =
    p1 (the probability clamped at 1e-300) and its derivative in the logit (0 below the
    clamp, which has no gradient)."""
    p_goal = np.where(goal == 1, p1, 1.0 - p1)
    residual = np.where(p_goal < 1e-300, 0.0, p1 - (goal == 1))
    return -np.log(np.maximum(p_goal, 1e-300)), residual


def softplus(z: np.ndarray) -> np.ndarray:
    """log(1 + exp(z)) without overflow."""
    return np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z)))


def softplus_sigmoid(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`softplus` and `sigmoid` of z (the same numbers) from one exp."""
    e = np.exp(-np.abs(z))
    return np.maximum(z, 0.0) + np.log1p(e), sigmoid_of(z, e)


def cholesky(H: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of the Hessian; adds a growing ridge if H is numerically
    singular (e.g. separable data drive p(1 − p) and so the unpenalised intercept's
    curvature to 0). LAPACK's dpotrf directly: numpy's wrapper costs more than the
    factorisation of a small Hessian."""
    L, info = dpotrf(H, lower=1, clean=1)
    if info == 0:
        return L
    ridge = 1e-12 * (1.0 + np.abs(H.diagonal()).max())
    eye = np.eye(len(H))
    while True:
        L, info = dpotrf(H + ridge * eye, lower=1, clean=1)
        if info == 0:
            return L
        ridge *= 10.0
