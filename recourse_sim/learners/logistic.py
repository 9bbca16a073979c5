"""L2-regularised logistic regression with Newton refits and implicit hypergradients."""

from __future__ import annotations

import warnings

import torch
from sklearn.exceptions import ConvergenceWarning

from recourse_sim.learners.base import (
    Learner,
    State,
    check_positive,
    first_memory,
    remember,
)

# Armijo constant and smallest step fraction of the backtracking line search.
_ARMIJO = 1e-4
_MIN_STEP = 1e-10
# Relative slack of the Armijo test, a few float64 roundings of the risk.
_F_SLACK = 1e-13


def _cholesky(H: torch.Tensor) -> torch.Tensor:
    """Cholesky factor of the Hessian; adds a growing ridge if H is numerically singular
    (e.g. separable data drive p(1 − p) and so the unpenalised intercept's curvature to 0)."""
    L, info = torch.linalg.cholesky_ex(H)
    ridge = 1e-12 * (1.0 + H.diagonal().abs().max().item())
    while info.item() > 0:
        L, info = torch.linalg.cholesky_ex(H + ridge * torch.eye(len(H), dtype=H.dtype))
        ridge *= 10.0
    return L


class LogisticRegression(Learner):
    """L2-regularised logistic regression, scikit-learn's objective exactly.

    Minimises ``0.5 ‖W‖² + C Σᵢ loss(xᵢ, yᵢ)`` (intercept not penalised): binary
    problems use one logit and the sigmoid, k > 2 classes the multinomial softmax, as
    ``sklearn.linear_model.LogisticRegression(C=C)``. Multinomial intercepts are only
    defined up to a common shift; like scikit-learn we return the ones summing to zero.

    Parameters
    ----------
    C : float
        Inverse regularisation strength (> 0); larger C means weaker regularisation.
    update_rule : {"refit", "window", "sgd"}
        ``"refit"``: Newton refit on every row seen so far. ``"window"``: Newton refit
        on the last ``window`` rounds (the fit is the first round). ``"sgd"``:
        ``epochs`` warm-started full-batch gradient steps on the new round only.
    window : int or None
        Rounds kept by the ``"window"`` rule (must be None otherwise).
    epochs : int
        Number of gradient steps per update of the ``"sgd"`` rule.
    lr : float
        Step size of the ``"sgd"`` rule, on the per-row objective
        ``mean loss + ‖W‖² / (2 C m)`` of a round of m rows (same minimiser as the refit).
    fit_intercept : bool
        Whether to learn an (unpenalised) intercept.
    n_classes : int or None
        Number of classes k; inferred as ``max(y) + 1`` at fit when None.
    tol : float
        Newton stops when its step is at most ``tol · (1 + max |θ|)`` in every entry.
    max_iter : int
        Maximum Newton iterations per (re)fit; a ConvergenceWarning reports the last
        step size when it is reached.

    Hypergradients. ``"refit"``/``"window"``: θ* is solved to ``tol`` without a graph
    (warm-started from the state), then ``θ⁺ = θ* − H⁻¹ ∇_θ R(θ*, X)`` with θ* and the
    Hessian H detached and ∇_θ R taken with its graph to X. Its value is θ* plus one
    (negligible) Newton step, and its derivative in X is exactly the implicit-function
    hypergradient ``−H⁻¹ ∂²R/∂θ∂X`` (one Cholesky solve). θ⁺ does not depend on the
    previous θ. ``"sgd"``: the steps are unrolled, so θ⁺ is differentiable in X and θ.

    State: ``coef`` (m, d) and ``intercept`` (m,), with m = 1 for two classes and m = k
    otherwise; ``"refit"``/``"window"`` also keep ``X_mem`` (n, d), ``y_mem`` (n,) and
    ``round_sizes`` (rounds,), all float64.
    """

    param_keys = ("coef", "intercept")

    def __init__(
        self,
        C: float = 1.0,
        update_rule: str = "refit",
        window: int | None = None,
        epochs: int = 5,
        lr: float = 0.1,
        fit_intercept: bool = True,
        n_classes: int | None = None,
        tol: float = 1e-10,
        max_iter: int = 100,
    ):
        self.C = C
        self.update_rule = update_rule
        self.window = window
        self.epochs = epochs
        self.lr = lr
        self.fit_intercept = fit_intercept
        self.n_classes = n_classes
        self.tol = tol
        self.max_iter = max_iter

    # -- scikit-learn attributes ---------------------------------------------------
    @property
    def coef_(self):
        """Weights, shape (1, d) for two classes, (k, d) otherwise (as scikit-learn)."""
        self._check_fitted()
        return self.state_["coef"].numpy().copy()

    @property
    def intercept_(self):
        """Intercepts, shape (1,) for two classes, (k,) otherwise (zeros if not fitted)."""
        self._check_fitted()
        return self.state_["intercept"].numpy().copy()

    def _check_params(self) -> None:
        check_positive("C", self.C)
        check_positive("epochs", self.epochs, integer=True, allow_zero=True)
        check_positive("lr", self.lr)
        check_positive("tol", self.tol)
        check_positive("max_iter", self.max_iter, integer=True)
        self._check_window()

    # -- the model -------------------------------------------------------------------
    def proba_fn(self, state: State, X: torch.Tensor) -> torch.Tensor:
        logits = X.to(torch.float64) @ state["coef"].T + state["intercept"]
        if logits.shape[1] == 1:
            p1 = torch.sigmoid(logits)
            return torch.cat([1 - p1, p1], dim=1)
        return torch.softmax(logits, dim=1)

    def _design(self, X: torch.Tensor) -> torch.Tensor:
        """X with a column of ones appended when there is an intercept."""
        if not self.fit_intercept:
            return X
        return torch.cat([X, torch.ones((len(X), 1), dtype=X.dtype)], dim=1)

    def _pack(self, state: State) -> torch.Tensor:
        """Parameters as one matrix θ (m, D), the intercept as the last column."""
        if not self.fit_intercept:
            return state["coef"]
        return torch.cat([state["coef"], state["intercept"][:, None]], dim=1)

    def _unpack(self, theta: torch.Tensor) -> State:
        if not self.fit_intercept:
            return {"coef": theta, "intercept": torch.zeros(len(theta), dtype=theta.dtype)}
        return {"coef": theta[:, :-1], "intercept": theta[:, -1]}

    def _targets(self, y: torch.Tensor, m: int) -> torch.Tensor:
        """Labels as (n, m) targets: y itself for one logit, one-hot for softmax."""
        if m == 1:
            return y.to(torch.float64)[:, None]
        return torch.nn.functional.one_hot(y.long(), m).to(torch.float64)

    def _risk(self, theta: torch.Tensor, Z: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """The regularised risk R(θ) = 0.5 ‖W‖² + C Σ loss (+ intercept-centring term)."""
        logits = Z @ theta.T
        if theta.shape[0] == 1:
            loss = torch.nn.functional.softplus(logits) - Y * logits
        else:
            loss = torch.logsumexp(logits, dim=1, keepdim=True) - (Y * logits).sum(1, keepdim=True)
        return (
            0.5 * (self._penalised(theta) ** 2).sum() + self.C * loss.sum() + self._centring(theta)
        )

    def _penalised(self, theta: torch.Tensor) -> torch.Tensor:
        return theta[:, :-1] if self.fit_intercept else theta

    def _centring(self, theta: torch.Tensor) -> torch.Tensor:
        # Softmax intercepts can shift together without changing R; 0.5 (Σ b)² picks
        # the Σ b = 0 representative (scikit-learn's) and makes the Hessian invertible.
        if self.fit_intercept and theta.shape[0] > 1:
            return 0.5 * theta[:, -1].sum() ** 2
        return theta.new_zeros(())

    def _grad(self, theta: torch.Tensor, Z: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """∇_θ R (m, D) in closed form; differentiable in θ and in the rows Z."""
        logits = Z @ theta.T
        P = torch.sigmoid(logits) if theta.shape[0] == 1 else torch.softmax(logits, dim=1)
        g = self.C * (P - Y).T @ Z
        if not self.fit_intercept:
            return g + theta
        # ∇ of 0.5 ‖W‖² and of the centring term 0.5 (Σ b)² (zero for one logit).
        centring = theta[:, -1:].sum() * torch.ones_like(theta[:, -1:]) * (theta.shape[0] > 1)
        return g + torch.cat([theta[:, :-1], centring], dim=1)

    def _hessian(self, theta: torch.Tensor, Z: torch.Tensor) -> torch.Tensor:
        """∇²_θ R (mD, mD) in closed form, θ flattened row-major (class-major)."""
        m, D = theta.shape
        logits = Z @ theta.T
        if m == 1:
            p = torch.sigmoid(logits)
            H = self.C * Z.T @ (p * (1 - p) * Z)
        else:
            # Σᵢ (diag(pᵢ) − pᵢpᵢᵀ) ⊗ zᵢzᵢᵀ: a block-diagonal part minus AᵀA.
            P = torch.softmax(logits, dim=1)
            A = (P[:, :, None] * Z[:, None, :]).reshape(len(Z), m * D)
            H = -A.T @ A
            blocks = torch.stack([Z.T @ (P[:, a : a + 1] * Z) for a in range(m)])
            H = H + torch.block_diag(*blocks)
            H = self.C * H
        reg = torch.ones((m, D), dtype=theta.dtype)
        if self.fit_intercept:
            reg[:, -1] = 0.0
        H = H + torch.diag(reg.reshape(-1))
        if self.fit_intercept and m > 1:
            idx = torch.arange(m) * D + (D - 1)
            H[idx[:, None], idx[None, :]] += 1.0
        return H

    def _newton(self, theta: torch.Tensor, Z: torch.Tensor, Y: torch.Tensor):
        """Minimise R by damped Newton from `theta`; returns θ* and the Cholesky factor
        of the Hessian at θ*. No graph is recorded."""
        with torch.no_grad():
            theta = theta.detach().clone()
            Z, Y = Z.detach(), Y.detach()
            f = self._risk(theta, Z, Y)
            step_size = float("inf")
            for _ in range(self.max_iter):
                g = self._grad(theta, Z, Y).reshape(-1)
                L = _cholesky(self._hessian(theta, Z))
                step = torch.cholesky_solve(g[:, None], L)[:, 0].reshape(theta.shape)
                step_size = step.abs().max().item()
                if step_size <= self.tol * (1.0 + theta.abs().max().item()):
                    return theta, L
                # Backtracking keeps far-from-optimum starts (cold fits) monotone.
                t, decrease = 1.0, (g * step.reshape(-1)).sum()
                while t > _MIN_STEP:
                    f_new = self._risk(theta - t * step, Z, Y)
                    # The slack accepts steps whose decrease is below float64
                    # resolution of f (near the optimum the full step is right).
                    if f_new <= f - _ARMIJO * t * decrease + _F_SLACK * abs(f):
                        break
                    t *= 0.5
                else:
                    return theta, L  # no further decrease in float64: at the optimum
                theta, f = theta - t * step, f_new
            warnings.warn(
                f"LogisticRegression: Newton did not converge in max_iter={self.max_iter} "
                f"iterations (last step {step_size:.3g}, tol={self.tol:g})",
                ConvergenceWarning,
                stacklevel=3,
            )
            return theta, _cholesky(self._hessian(theta, Z))

    def _solve(self, theta0: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """θ⁺ = θ* − H⁻¹ ∇_θ R(θ*, X): value θ*, X-derivative the implicit hypergradient."""
        Z, Y = self._design(X), self._targets(y, theta0.shape[0])
        theta_star, L = self._newton(theta0, Z, Y)
        g = self._grad(theta_star, Z, Y).reshape(-1, 1)
        return theta_star - torch.cholesky_solve(g, L).reshape(theta_star.shape)

    def _init_state(self, X: torch.Tensor, y: torch.Tensor) -> State:
        k = len(self.classes_)
        m = 1 if k == 2 else k
        theta0 = torch.zeros((m, X.shape[1] + int(self.fit_intercept)), dtype=torch.float64)
        state = self._unpack(self._solve(theta0, X, y))
        if self.update_rule != "sgd":
            state.update(first_memory(X, y))
        return state

    def update_fn(self, state: State, X: torch.Tensor, y: torch.Tensor) -> State:
        theta = self._pack(state)
        X = X.to(torch.float64)
        if "X_mem" not in state:  # sgd: unrolled gradient steps on this round only
            Z, Y = self._design(X), self._targets(y, theta.shape[0])
            scale = self.lr / (self.C * max(len(X), 1))
            for _ in range(self.epochs):
                theta = theta - scale * self._grad(theta, Z, Y)
            return self._unpack(theta)
        X_mem, y_mem, sizes = remember(state, X, y, self.window)
        new = self._unpack(self._solve(theta, X_mem, y_mem))
        new.update(X_mem=X_mem, y_mem=y_mem, round_sizes=sizes)
        return new
