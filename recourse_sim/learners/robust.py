"""Deployed models from the collective-action literature: re-weighting, JTT and χ²-DRO.

Ben-Dov, Fawkes, Samadi & Sanyal (ICML 2024, "The Role of Learning Algorithms in
Collective Action") show that how the deployed model weighs its training rows changes what a
collective of a given size achieves. The three learners here are L2 logistic regression
(`LogisticRegression`'s objective and Newton solver) with per-row weights sᵢ,
minimising ``0.5 ‖W‖² + C Σᵢ sᵢ loss(xᵢ, yᵢ)`` on the rows of each (re)fit; they differ
in how the weights are chosen:

* `ReweightedLogisticRegression` (``reweighted``): importance weights that give every
  class the same total weight, sᵢ = n / (k n_{yᵢ}) (mean 1);
* `JTTLogisticRegression` (``jtt``, Just Train Twice, Liu et al. ICML 2021): a first
  fit on the rows finds its error set (the rows it misclassifies); the second fit
  up-weights them by ``upweight`` (the others keep weight 1);
* `ChiSquareDROLogisticRegression` (``chi2_dro``): distributionally robust
  optimisation over the χ² ball around the rows' empirical distribution, sup over q of
  Σ qᵢ lossᵢ subject to ½ Σᵢ (n qᵢ − 1)² / n ≤ ρ. The worst-case q for given losses is
  qᵢ ∝ (lossᵢ − η)₊ with η set so that the constraint binds (`chi2_worst_case`); the
  robust risk is convex in θ and minimised by L-BFGS on its Danskin gradient, and the
  minimiser is the weighted fit with sᵢ = n qᵢ at it.

The weights are recomputed at every refit on the rows it trains on (update rules
``refit``, ``window``, ``frozen``) and held fixed in the refit's implicit
hypergradient (collective recourse sees the weighted refit, not how the weights move).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.errors import ConfigError
from recourse_sim.lazy import LazyModule
from recourse_sim.learners.base import State, check_positive
from recourse_sim.learners.logistic import LogisticRegression
from recourse_sim.learners.logistic_math import scaled

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds learners without torch
    torch = LazyModule("torch", globals())


class _WeightedLogisticRegression(LogisticRegression):
    """L2 logistic regression whose every refit weighs its rows by `row_weights`."""

    _rules = ("refit", "window", "frozen")
    # fixed: an intercept, no recourse loss, no gradient-step rule
    fit_intercept = True
    recourse_loss_weight = 0.0
    action_set = None
    recourse_goal = 1
    epochs = 1
    lr = 0.1

    def __init__(
        self,
        C: float = 1.0,
        update_rule: str = "refit",
        window: int | None = None,
        n_classes: int | None = None,
        tol: float = 1e-10,
        max_iter: int = 100,
        standardize: bool = False,
    ):
        self.C = C
        self.update_rule = update_rule
        self.window = window
        self.n_classes = n_classes
        self.tol = tol
        self.max_iter = max_iter
        self.standardize = standardize

    def row_weights(
        self, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor, scaling: State
    ) -> torch.Tensor:
        """The weights sᵢ (n,) of the rows (X, y) of a refit (θ: the model before it)."""
        raise NotImplementedError

    def _check_params(self) -> None:
        super()._check_params()
        if self.update_rule not in self._rules:
            raise ConfigError(
                f"update_rule={self.update_rule!r}: {type(self).__name__} reweighs the rows "
                f"of each refit; use one of {', '.join(self._rules)}"
            )
        if self.n_classes not in (None, 2) or len(self.classes_) != 2:
            raise ConfigError(f"{type(self).__name__} needs two classes")

    def solve(self, theta0, X, y, scaling, start=None):
        self._weights = self.row_weights(theta0, X.detach(), y, scaling).detach()
        try:
            return super().solve(theta0, X, y, scaling, start)
        finally:
            del self._weights

    def _rows(self, X, Y, delta, scaling):
        Z, Y, _ = super()._rows(X, Y, delta, scaling)
        return Z, Y, getattr(self, "_weights", None)

    def _numpy_refit(self, *args, **kwargs):
        return None  # every refit through `solve`, with the weights

    def fit_weighted(self, X: torch.Tensor, y: torch.Tensor, weights, scaling: State):
        """θ (1, d + 1) of the weighted L2 logistic fit on (X, y) from θ = 0."""
        self._weights = torch.as_tensor(weights, dtype=torch.float64)
        try:
            theta0 = torch.zeros((1, X.shape[1] + 1), dtype=torch.float64)
            return LogisticRegression.solve(self, theta0, X, y, scaling)
        finally:
            del self._weights

    def _losses(self, theta, X, y, scaling) -> torch.Tensor:
        """Per-row cross-entropy of θ on (X, y)."""
        logits = (self.design(scaled(scaling, X)) @ theta.T)[:, 0]
        return torch.nn.functional.softplus(logits) - y.to(torch.float64) * logits

    def _plain(self, X, y, scaling) -> torch.Tensor:
        """θ of the unweighted fit on (X, y)."""
        return self.fit_weighted(X, y, torch.ones(len(X)), scaling)


class ReweightedLogisticRegression(_WeightedLogisticRegression):
    """L2 logistic regression with class-balancing importance weights sᵢ = n / (k n_{yᵢ})
    (module docstring); parameters as `LogisticRegression` (``C``, ``update_rule`` one
    of refit, window, frozen, ``window``, ``n_classes``, ``tol``, ``max_iter``,
    ``standardize``)."""

    def row_weights(self, theta, X, y, scaling):
        counts = torch.bincount(y.long(), minlength=2).to(torch.float64)
        present = counts > 0
        per_class = torch.where(present, len(y) / (present.sum() * counts.clamp(min=1)), 0.0)
        return per_class[y.long()]


class JTTLogisticRegression(_WeightedLogisticRegression):
    """Just Train Twice (Liu et al. 2021) with L2 logistic regression: the rows the plain
    fit misclassifies are up-weighted by ``upweight`` in the second fit.

    Parameters: those of `LogisticRegression` (``C``, ``update_rule``, ``window``, ...)
    plus ``upweight`` (λ_up ≥ 1, the error set's weight).
    """

    def __init__(
        self,
        C: float = 1.0,
        update_rule: str = "refit",
        window: int | None = None,
        n_classes: int | None = None,
        tol: float = 1e-10,
        max_iter: int = 100,
        standardize: bool = False,
        upweight: float = 5.0,
    ):
        super().__init__(C, update_rule, window, n_classes, tol, max_iter, standardize)
        self.upweight = upweight

    def _check_params(self) -> None:
        super()._check_params()
        check_positive("upweight", self.upweight)

    def row_weights(self, theta, X, y, scaling):
        first = self._plain(X, y, scaling)
        wrong = self._losses(first, X, y, scaling) > np.log(2.0)  # p(y | x) < 1/2
        return torch.where(wrong, float(self.upweight), 1.0).to(torch.float64)


def chi2_worst_case(losses: np.ndarray, rho: float) -> np.ndarray:
    """The q in the simplex maximising Σ qᵢ lossᵢ subject to ½ Σ (n qᵢ − 1)² / n ≤ ρ:
    qᵢ ∝ (lossᵢ − η)₊, η found by bisection so that the constraint binds (uniform q
    where all losses are equal; all mass on the largest losses where ρ allows it)."""
    loss = np.asarray(losses, dtype=np.float64)
    n = len(loss)

    def q_of(eta: float) -> np.ndarray:
        excess = np.maximum(loss - eta, 0.0)
        return excess / excess.sum()

    def divergence(q: np.ndarray) -> float:
        return 0.5 * float(((n * q - 1.0) ** 2).sum()) / n

    top = loss.max()
    if np.ptp(loss) == 0.0:
        return np.full(n, 1.0 / n)
    ties = loss == top
    if divergence(ties / ties.sum()) <= rho:
        return ties / ties.sum()
    # divergence(q_of(η)) grows with η from 0 (η → −∞) to the ties' (η → max)
    lo, hi = loss.min() - 1.0, top
    while divergence(q_of(lo)) > rho:
        lo = top - 2.0 * (top - lo)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if divergence(q_of(mid)) > rho:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-13 * (1.0 + abs(top)):
            break
    return q_of(lo)


class ChiSquareDROLogisticRegression(_WeightedLogisticRegression):
    """χ²-DRO with L2 logistic regression (module docstring).

    Minimises J(θ) = 0.5 ‖W‖² + C n sup_q Σ qᵢ lossᵢ(θ) over the χ² ball of radius ρ, a
    convex function whose gradient is the weighted risk's at the worst-case q (Danskin),
    by L-BFGS from the plain fit. At the minimiser θ* is also the weighted fit with
    weights sᵢ = n qᵢ(θ*), which is how the refit (and its implicit hypergradient, the
    weights held fixed) is computed.

    Parameters: those of `LogisticRegression` (as `ReweightedLogisticRegression`) plus
    ``rho`` (the χ² ball's radius ρ > 0).
    """

    def __init__(
        self,
        C: float = 1.0,
        update_rule: str = "refit",
        window: int | None = None,
        n_classes: int | None = None,
        tol: float = 1e-10,
        max_iter: int = 100,
        standardize: bool = False,
        rho: float = 0.1,
    ):
        super().__init__(C, update_rule, window, n_classes, tol, max_iter, standardize)
        self.rho = rho

    def _check_params(self) -> None:
        super()._check_params()
        check_positive("rho", self.rho)

    def dro_objective(self, theta: np.ndarray, X, y, scaling) -> tuple[float, np.ndarray]:
        """J(θ) (θ flat: weights then intercept) and its gradient, at the worst-case q."""
        th = torch.from_numpy(np.asarray(theta, dtype=np.float64)).reshape(1, -1)
        th.requires_grad_(True)
        with torch.enable_grad():
            losses = self._losses(th, X, y, scaling)
            q = torch.from_numpy(chi2_worst_case(losses.detach().numpy(), float(self.rho)))
            value = 0.5 * (th[0, :-1] ** 2).sum() + self.C * len(X) * (q * losses).sum()
            (grad,) = torch.autograd.grad(value, th)
        return float(value.detach()), grad.numpy().ravel()

    def row_weights(self, theta, X, y, scaling):
        from scipy.optimize import minimize

        start = self._plain(X, y, scaling).numpy().ravel()
        res = minimize(
            self.dro_objective,
            start,
            args=(X, y, scaling),
            jac=True,
            method="L-BFGS-B",
            options={"gtol": 1e-9, "ftol": 1e-15, "maxiter": 1000},
        )
        th = torch.from_numpy(res.x).reshape(1, -1)
        losses = self._losses(th, X, y, scaling).numpy()
        return torch.from_numpy(len(X) * chi2_worst_case(losses, float(self.rho)))
