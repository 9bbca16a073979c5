"""A learner that defends its update against manipulated reports.

Three guards, each optional (scenario block ``learner.defense``), applied around the
learner's own update θ⁺ = U(θ, X, y):

* **trimmed refit** (``trim``): drop the share of the round's rows with the highest
  loss −log p(y | x) under the current model θ before updating;
* **report-anomaly filter** (``anomaly_quantile``): drop rows whose squared robust
  Mahalanobis distance from the recent kept reports (`robust_location_scatter`: the
  mean and covariance of the reports within 3 MADs of the median on every feature)
  exceeds the χ²_d quantile;
* **rate limit** (``max_step``): θ⁺ = θ + min(1, s / ‖θ̂⁺ − θ‖) (θ̂⁺ − θ), the update
  shrunk to Euclidean length s over the model parameters (``param_keys``, in the
  learner's own, standardised, coordinates).

What OAR sees through: the rate limit is a differentiable map of θ̂⁺ (`limit_step`), so
a collective that knows it can compose it with the update. The two filters choose rows
by thresholds, piecewise constant in the reports: for a fixed choice of rows the update
is the learner's own on the kept rows, and its hypergradient is the learner's with the
dropped rows' gradient zero. The collectives here plan against the undefended update
(they are not told of the defense); `analyses/arms_race.py` measures what that costs
them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.lazy import LazyModule
from recourse_sim.learners.base import Learner, State, as_tensor

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds this without torch
    torch = LazyModule("torch", globals())

__all__ = ["Defense", "limit_step", "robust_location_scatter"]


def limit_step(before: State, after: State, keys: tuple[str, ...], max_step: float) -> State:
    """`after` with its parameters `keys` moved from `before` by at most `max_step`
    (Euclidean norm over all of them); differentiable in `after`."""
    change = {k: after[k] - before[k] for k in keys}
    norm = torch.sqrt(sum((c**2).sum() for c in change.values()))
    scale = torch.clamp(max_step / torch.clamp(norm, min=1e-300), max=1.0)
    out = dict(after)
    for k in keys:
        out[k] = before[k] + scale * change[k]
    return out


def robust_location_scatter(X: np.ndarray, cut: float = 3.0):
    """A robust centre and covariance of the rows X: the mean and covariance of the rows
    within `cut` scaled MADs (1.4826 · MAD, the SD under normality) of the coordinate-wise
    median on every feature that varies. Returns (centre, covariance, mask of the varying
    features), or (None, None, mask) when too few rows remain to estimate them."""
    median = np.median(X, 0)
    mad = 1.4826 * np.median(np.abs(X - median), 0)
    moving = mad > 0  # a feature constant in most rows carries no distance
    k = int(moving.sum())
    if not k:
        return None, None, moving
    z = np.abs(X[:, moving] - median[moving]) / mad[moving]
    core = X[(z <= cut).all(1)][:, moving]
    if len(core) <= 2 * k:
        return None, None, moving
    return core.mean(0), np.cov(core, rowvar=False).reshape(k, k), moving


class Defense:
    """The defense of one deployed model (``learner.defense``), with the recent kept
    reports its anomaly filter compares against."""

    def __init__(self, spec, n_features: int):
        self.spec = spec
        self.history = np.zeros((0, n_features))
        self.dropped_trim = 0  # rows dropped by the trimmed refit in the last update
        self.dropped_anomaly = 0  # rows dropped by the anomaly filter in the last update
        self.trimmed = np.zeros(0, bool)  # per row of the last update: trimmed refit dropped it

    @property
    def active(self) -> bool:
        s = self.spec
        return s.trim > 0 or s.anomaly_quantile is not None or s.max_step is not None

    def keep(self, learner: Learner, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Which rows (a mask) survive the two filters."""
        n = len(X)
        keep = np.ones(n, bool)
        self.dropped_trim = self.dropped_anomaly = 0
        self.trimmed = np.zeros(n, bool)
        if self.spec.anomaly_quantile is not None and n:
            keep &= ~self._anomalous(X)
            self.dropped_anomaly = int(n - keep.sum())
        if self.spec.trim > 0 and keep.any():
            idx = np.flatnonzero(keep)
            proba = learner.predict_proba(X[idx])
            loss = -np.log(np.clip(proba[np.arange(len(idx)), y[idx]], 1e-300, None))
            n_drop = int(np.floor(self.spec.trim * len(idx)))
            if n_drop:
                self.trimmed[idx[np.argsort(-loss, kind="stable")[:n_drop]]] = True
                keep &= ~self.trimmed
            self.dropped_trim = n_drop
        return keep

    def _anomalous(self, X: np.ndarray) -> np.ndarray:
        from scipy.stats import chi2

        # the first round compares the reports with themselves (the estimate is robust
        # to a minority of outliers)
        ref = self.history if len(self.history) > 2 * X.shape[1] else X
        centre, cov, moving = robust_location_scatter(ref)
        if cov is None:
            return np.zeros(len(X), bool)
        diff = X[:, moving] - centre
        d2 = np.einsum("ij,ij->i", diff @ np.linalg.pinv(cov), diff)
        return d2 > chi2.ppf(self.spec.anomaly_quantile, int(moving.sum()))

    def update(self, learner: Learner, X: np.ndarray, y: np.ndarray, start=None) -> np.ndarray:
        """Update `learner` on the rows that survive, then limit its step; returns the
        mask of kept rows."""
        keep = self.keep(learner, X, y)
        before = learner.state_
        if keep.all():
            learner.update(X, y, start=start)
        elif keep.any():
            learner.update(X[keep], y[keep])
        if self.spec.max_step is not None and learner.state_ is not before:
            limited = limit_step(before, learner.state_, learner.param_keys, self.spec.max_step)
            learner.state_ = {k: as_tensor(v).detach() for k, v in limited.items()}
        if self.spec.anomaly_quantile is not None:
            self.history = np.concatenate([self.history, X[keep]])[-self.spec.history :]
        return keep

    def get_state(self) -> dict:
        return {"history": self.history.copy()}

    def set_state(self, state: dict) -> None:
        self.history = np.array(state["history"], dtype=np.float64).reshape(
            -1, self.history.shape[1]
        )
