"""Shared helpers for the learner tests: the query loss and a finite-difference check."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris

Loss = Callable[[torch.Tensor], torch.Tensor]


@pytest.fixture(scope="session")
def iris() -> tuple[np.ndarray, np.ndarray]:
    X, y = load_iris(return_X_y=True)
    return X, y


def _query_loss(learner, state, y: torch.Tensor, x_query: torch.Tensor, goal: int) -> Loss:
    """L(X) = cross-entropy at the goal class of the updated model at the query points."""

    def loss(X: torch.Tensor) -> torch.Tensor:
        proba = learner.proba_fn(learner.update_fn(state, X, y), x_query)
        return -torch.log(proba[:, goal]).sum()

    return loss


def _hypergrad_errors(
    loss: Loss, X: np.ndarray, *, n_directions: int = 3, h: float = 1e-5, seed: int = 0
) -> tuple[float, np.ndarray]:
    """Largest relative error between autograd and central finite differences of `loss`.

    Compares directional derivatives along `n_directions` random unit directions and
    along the coordinate of largest gradient. Returns (max relative error, gradient).
    """
    X0 = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    loss(X0).backward()
    g = X0.grad.detach()
    rng = np.random.default_rng(seed)
    directions = [torch.tensor(rng.normal(size=X.shape)) for _ in range(n_directions)]
    top = torch.zeros_like(g).reshape(-1)
    top[g.abs().argmax()] = 1.0
    directions.append(top.reshape(g.shape))
    errors = []
    with torch.no_grad():
        for d in directions:
            d = d / d.norm()
            X_base = torch.tensor(X, dtype=torch.float64)
            fd = (loss(X_base + h * d) - loss(X_base - h * d)) / (2 * h)
            ad = (g * d).sum()
            errors.append(abs(float(ad - fd)) / max(abs(float(fd)), 1e-8))
    return max(errors), g.numpy()


@pytest.fixture(scope="session")
def query_loss():
    """`query_loss(learner, state, y, x_query, goal)` → L(X) (see `_query_loss`)."""
    return _query_loss


@pytest.fixture(scope="session")
def hypergrad_errors():
    """`hypergrad_errors(loss, X)` → (max relative error, gradient) (see `_hypergrad_errors`)."""
    return _hypergrad_errors
