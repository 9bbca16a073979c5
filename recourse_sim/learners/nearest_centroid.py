"""Nearest-centroid classifier of the OAR paper (Creager & Zemel, Appendix A)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scipy.special import softmax

from recourse_sim.errors import ConfigError
from recourse_sim.lazy import LazyModule, is_tensor
from recourse_sim.learners.base import Learner, State

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds learners without torch
    torch = LazyModule("torch", globals())

# Added under the square root of the squared distance so that ‖x − μ‖ has a finite
# (zero) gradient at x = μ; shifts a distance by at most 1e-6.
_DIST_EPS = 1e-12


def class_sums(
    X: torch.Tensor, y: torch.Tensor, n_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class feature sums (k, d) and row counts (k,) of one batch; differentiable in X."""
    onehot = torch.nn.functional.one_hot(y.long(), n_classes).to(X.dtype)
    return onehot.T @ X, onehot.sum(0)


class NearestCentroid(Learner):
    """Nearest-centroid classifier p(y | x) = softmax_y(−‖x − μ_y‖₂), μ_y = class means.

    Parameters
    ----------
    update_rule : {"refit", "window", "frozen"}
        ``"refit"``: μ_y is the running mean of every row of class y ever seen,
        μ⁺ = (n μ + Σ x) / (n + m). ``"window"``: μ_y is the mean of class y over the
        last ``window`` rounds (the fit counts as one round). ``"frozen"``: μ never
        changes. ``"sgd"`` is not defined
        for this model (its closed-form refit is exact and cheap) and raises ConfigError.
    window : int or None
        Number of rounds kept by the ``"window"`` rule (must be None otherwise).
    n_classes : int or None
        Number of classes k; inferred as ``max(y) + 1`` at fit when None.

    Every class must have rows in the data given to `fit`. A class with no rows in an
    update (or in the whole window) keeps its previous centroid. Distances are
    Euclidean, not squared, as in the paper; hypergradients are exact (closed form).

    State: ``means`` (k, d); ``counts`` (k,) rows seen per class (refit rule); or
    ``window_sums`` (window, k, d) and ``window_counts`` (window, k), the per-class sums
    and counts of the last rounds, oldest first (window rule).
    """

    def __init__(self, update_rule: str = "refit", window: int | None = None, n_classes=None):
        self.update_rule = update_rule
        self.window = window
        self.n_classes = n_classes

    param_keys = ("means",)

    def _check_params(self) -> None:
        if self.update_rule == "sgd":
            raise ConfigError(
                "update_rule='sgd' is not supported by NearestCentroid; use 'refit' or 'window'"
            )
        self._check_window()

    def proba_fn(self, state: State, X: torch.Tensor) -> torch.Tensor:
        diff = X.to(torch.float64)[:, None, :] - state["means"][None, :, :]
        dist = torch.sqrt((diff * diff).sum(-1) + _DIST_EPS)
        return torch.softmax(-dist, dim=1)

    def proba_np(self, state: State, X: np.ndarray) -> np.ndarray:
        if is_tensor(state["means"]):  # a model of `fit`: torch's arithmetic, as runs use
            return super().proba_np(state, X)
        diff = X[:, None, :] - state["means"][None, :, :]
        return softmax(-np.sqrt((diff * diff).sum(-1) + _DIST_EPS), axis=1)

    def _fits_on_numpy(self) -> bool:
        return True

    def _init_state_np(self, X: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
        # `_init_state` on numpy
        onehot = np.eye(len(self.classes_))[y]
        return self._first_state(onehot.T @ X, onehot.sum(0), np.zeros)

    def _init_state(self, X: torch.Tensor, y: torch.Tensor) -> State:
        sums, counts = class_sums(X, y, len(self.classes_))
        return self._first_state(
            sums, counts, lambda shape: torch.zeros(shape, dtype=torch.float64)
        )

    def _first_state(self, sums, counts, zeros) -> State:
        """The state of the fit from its per-class sums (k, d) and counts (k,) (torch
        tensors or numpy arrays; `zeros(shape)`: float64 zeros of that kind)."""
        missing = [k for k, n in enumerate(counts.tolist()) if n == 0]
        if missing:
            raise ConfigError(f"classes {missing} have no rows in the data given to fit")
        means = sums / counts[:, None]
        if self.update_rule == "frozen":
            return {"means": means}
        if self.update_rule == "refit":
            return {"means": means, "counts": counts}
        k, d = sums.shape
        window_sums, window_counts = zeros((self.window, k, d)), zeros((self.window, k))
        window_sums[-1], window_counts[-1] = sums, counts
        return {"means": means, "window_sums": window_sums, "window_counts": window_counts}

    def update_fn(self, state: State, X: torch.Tensor, y: torch.Tensor) -> State:
        if self.update_rule == "frozen":
            return dict(state)
        means = state["means"]
        sums, counts = class_sums(X.to(torch.float64), y, means.shape[0])
        if "counts" in state:  # refit with memory: running means
            total = state["counts"] + counts
            new_sums = state["counts"][:, None] * means + sums
            new = {"counts": total}
        else:  # sliding window: drop the oldest round, append this one
            window_sums = torch.cat([state["window_sums"][1:], sums[None]])
            window_counts = torch.cat([state["window_counts"][1:], counts[None]])
            new_sums, total = window_sums.sum(0), window_counts.sum(0)
            new = {"window_sums": window_sums, "window_counts": window_counts}
        seen = total > 0
        # Division only where a class has rows: keeps gradients free of 0/0 NaNs.
        safe_total = torch.where(seen, total, torch.ones_like(total))
        new["means"] = torch.where(seen[:, None], new_sums / safe_total[:, None], means)
        return new
