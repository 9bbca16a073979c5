"""L2-regularised logistic regression with Newton refits and implicit hypergradients."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.linalg import block_diag
from scipy.linalg.lapack import dpotrs
from scipy.special import logsumexp, softmax

from recourse_sim.lazy import LazyModule, is_tensor
from recourse_sim.learners.base import (
    MEMORY_RULES,
    Learner,
    LowRankGradient,
    State,
    as_array,
    check_positive,
    check_recourse_training,
    first_memory,
    remember,
)
from recourse_sim.learners.logistic_math import (
    ARMIJO,
    F_SLACK,
    MIN_STEP,
    binary_goal_loss,
    cholesky,
    one_class,
    scaled,
    sigmoid,
    softplus,
    softplus_sigmoid,
    standardisation,
    standardisation_arrays,
)

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds learners without torch
    torch = LazyModule("torch", globals())

# Newton keeps its Hessian factor for the next step when the step was at most this
# (relative to 1 + max |θ|) and θ has at least this many entries (m·D).
_LAG_STEP = 0.02
_LAG_MIN_PARAMS = 32
# Rows of the binary Hessian's factor A = √curvature ⊙ Z formed at a time (in bytes).
_HESSIAN_BLOCK_BYTES = 1 << 20
# Design matrices with at most this many columns are solved on column-major copies.
_SMALL_DESIGN = 16
# Newton takes a full step untested when the last full step was at most this (relative
# to 1 + max |θ|) and this one is under half of it: quadratic convergence near θ*.
_UNTESTED_STEP = 1e-4
# Cap on the alternations (δ* given θ, then θ given δ*) of a recourse-aware refit.
_MAX_ALTERNATIONS = 50


# State entries of the fixed standardisation (``standardize=True``).
_SCALING = ("x_shift", "x_scale")


class ConvergenceWarning(UserWarning):
    """Newton stopped at ``max_iter`` before its step fell below ``tol``."""


class SingleClassWarning(UserWarning):
    """A refit's rows hold one class only; the learner kept its previous parameters."""


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
    update_rule : {"refit", "window", "sgd", "frozen"}
        ``"refit"``: Newton refit on every row seen so far. ``"window"``: Newton refit
        on the last ``window`` rounds (the fit is the first round). ``"sgd"``:
        ``epochs`` warm-started full-batch gradient steps on the new round only.
        ``"frozen"``: never updated.
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
    recourse_loss_weight : float
        λ ≥ 0 of Ross et al.'s recourse-aware objective (Eq. 1): every risk (fit, refit,
        ``"sgd"`` steps) becomes ``0.5 ‖W‖² + C Σᵢ [loss(xᵢ, yᵢ) + λ · loss(xᵢ + δᵢ*,
        recourse_goal)]`` over all its rows, δ* the ``"linear"`` recourse of each row
        (`recourse_sim.recourse.ross`). For two classes δ* is the *exact* minimiser of
        the recourse loss (the logit is linear in x), so a (re)fit minimises the joint
        objective over (θ, δ) exactly by alternating: δ* given θ, then a Newton solve of
        the convex problem given δ*, until δ* no longer changes (each round lowers the
        objective; δ* ranges over the finitely many corners of the action set). The
        ``"sgd"`` rule recomputes δ* before each step. 0 (default) is plain training.
    action_set : ActionSet or None
        The actionable polytope Δ of δ*, in the units of X; required when λ > 0.
    recourse_goal : int
        The favourable class whose score δ* raises.
    standardize : bool
        Learn on standardised features. `fit` computes each feature's mean and
        (population) standard deviation once, on the data it is given (a constant
        feature gets scale 1), and keeps them in the state as ``x_shift`` and ``x_scale``;
        every later refit, ``"sgd"`` step and prediction uses ``(X − x_shift) / x_scale``.
        The map is a constant affine one, so hypergradients in X stay exact, and inputs,
        outputs, memory and δ* stay in the units of X. What changes is the L2 penalty:
        it acts on the weight per standard deviation of a feature rather than per unit of
        it (``0.5 ‖W‖²`` is meaningless for a feature in, say, FICO points, where a
        weight of 0.1 per point already means 55 logits across the range). ``coef_`` is
        then per standard deviation, as in ``make_pipeline(StandardScaler(),
        LogisticRegression())`` with the scaler fitted on the first data only.

    Hypergradients. ``"refit"``/``"window"``: θ* is solved to ``tol`` without a graph
    (warm-started from the state), then ``θ⁺ = θ* − H⁻¹ ∇_θ R(θ*, X)`` with θ* and the
    Hessian H detached and ∇_θ R taken with its graph to X. Its value is θ* plus one
    (negligible) Newton step, and its derivative in X is exactly the implicit-function
    hypergradient ``−H⁻¹ ∂²R/∂θ∂X`` (one Cholesky solve). θ⁺ does not depend on the
    previous θ — except when the rows of a refit hold a single class: the maximum
    likelihood intercept is then infinite, so θ⁺ = θ (the previous parameters are kept,
    and `update` warns with the numbers) and the hypergradient is 0. ``"sgd"``: the
    steps are unrolled, so θ⁺ is differentiable in X and θ. With λ > 0, δ* is held
    fixed in both (it is piecewise constant in θ and X).

    State: ``coef`` (m, d) and ``intercept`` (m,), with m = 1 for two classes and m = k
    otherwise; ``"refit"``/``"window"`` also keep ``X_mem`` (n, d), ``y_mem`` (n,) and
    ``round_sizes`` (rounds,) (rows in the units of X); ``standardize`` adds the
    constants ``x_shift`` (d,) and ``x_scale`` (d,); all float64.
    """

    param_keys = ("coef", "intercept")

    @property
    def scaling_keys(self) -> tuple[str, ...]:
        """``x_shift`` and ``x_scale`` with ``standardize`` (fitted on the first rows)."""
        self._check_fitted()
        return tuple(k for k in _SCALING if k in self.state_)

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
        recourse_loss_weight: float = 0.0,
        action_set=None,
        recourse_goal: int = 1,
        standardize: bool = False,
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
        self.recourse_loss_weight = recourse_loss_weight
        self.action_set = action_set
        self.recourse_goal = recourse_goal
        self.standardize = standardize

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
        check_recourse_training(self)

    # -- the model -------------------------------------------------------------------
    def proba_fn(self, state: State, X: torch.Tensor) -> torch.Tensor:
        logits = scaled(state, X.to(torch.float64)) @ state["coef"].T + state["intercept"]
        if logits.shape[1] == 1:
            p1 = torch.sigmoid(logits)
            return torch.cat([1 - p1, p1], dim=1)
        return torch.softmax(logits, dim=1)

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities, shape (n, k); `proba_fn` on numpy (no graph is needed, and
        on small batches torch is mostly overhead)."""
        X = X.detach().numpy() if is_tensor(X) else X
        X = self._check_X(X, fitted=True)  # (NotFittedError first)
        return self.proba_np(self.current_state(), X)

    def proba_np(self, state: State, X: np.ndarray) -> np.ndarray:
        logits = self._logits_np(state, X)
        if logits.shape[1] == 1:
            p1 = sigmoid(logits)
            return np.concatenate([1.0 - p1, p1], axis=1)
        return softmax(logits, axis=1)

    def _logits_np(self, state, X: np.ndarray) -> np.ndarray:
        """Logits of X under `state` (torch tensors or numpy arrays)."""
        if "x_scale" in state:
            X = (X - as_array(state["x_shift"])) / as_array(state["x_scale"])
        return X @ as_array(state["coef"]).T + as_array(state["intercept"])

    def goal_loss_grad(
        self, state: State, X: np.ndarray, goal: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        # numpy: on the small batches of individual recourse torch is mostly overhead
        coef = as_array(state["coef"])
        logits = self._logits_np(state, X)
        if coef.shape[0] == 1:
            loss, residual = binary_goal_loss(sigmoid(logits[:, 0]), goal)
            residual = residual[:, None]
        else:
            rows = np.arange(len(X))
            residual = softmax(logits, axis=1)  # ∂loss/∂logits once the goal's 1 is off
            p_goal = residual[rows, goal].copy()
            residual[rows, goal] -= 1.0
            residual[p_goal < 1e-300] = 0.0  # the clamp has no gradient below it
            loss = -np.log(np.maximum(p_goal, 1e-300))
        grad = residual @ coef
        if "x_scale" in state:
            grad /= as_array(state["x_scale"])
        return loss, grad

    def goal_margin_coef(self, state: State, goal: np.ndarray) -> np.ndarray | None:
        coef = as_array(state["coef"])
        if coef.shape[0] != 1:  # softmax: the goal's loss depends on every logit
            return None
        # the margin is the logit (goal 1) or minus it (goal 0), in the units of x
        c = coef[0] / as_array(state["x_scale"]) if "x_scale" in state else coef[0]
        return np.where(goal[:, None] == 1, c, -c)

    def goal_margin(self, state: State, X: np.ndarray, goal: np.ndarray) -> np.ndarray | None:
        if as_array(state["coef"]).shape[0] != 1:
            return None
        logit = self._logits_np(state, np.asarray(X, dtype=np.float64))[:, 0]
        return np.where(goal == 1, logit, -logit)

    # The parameters as one matrix and the refit that solves for them: public, for the
    # learners built on this one (robust, strategic, performative) and the batched refits.
    def design(self, X: torch.Tensor) -> torch.Tensor:
        """X with a column of ones appended when there is an intercept (the design
        matrix Z of `pack`'s θ: the logits are Z θᵀ)."""
        if not self.fit_intercept:
            return X
        return torch.cat([X, torch.ones((len(X), 1), dtype=X.dtype)], dim=1)

    def pack(self, state: State) -> torch.Tensor:
        """Parameters as one matrix θ (m, D), the intercept as the last column."""
        if not self.fit_intercept:
            return state["coef"]
        return torch.cat([state["coef"], state["intercept"][:, None]], dim=1)

    def unpack(self, theta: torch.Tensor) -> State:
        """The state entries ``coef`` and ``intercept`` of θ (the inverse of `pack`)."""
        if not self.fit_intercept:
            return {"coef": theta, "intercept": torch.zeros(len(theta), dtype=theta.dtype)}
        return {"coef": theta[:, :-1], "intercept": theta[:, -1]}

    # the former private names, for code written against them
    _design = design
    _pack = pack
    _unpack = unpack

    def _solve(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.solve(*args, **kwargs)

    def _targets(self, y: torch.Tensor, m: int) -> torch.Tensor:
        """Labels as (n, m) targets: y itself for one logit, one-hot for softmax."""
        if m == 1:
            return y.to(torch.float64)[:, None]
        return torch.nn.functional.one_hot(y.long(), m).to(torch.float64)

    def _grad(
        self,
        theta: torch.Tensor,
        Z: torch.Tensor,
        Y: torch.Tensor,
        weight: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """∇_θ R (m, D) in closed form; differentiable in θ and in the rows Z."""
        logits = Z @ theta.T
        P = torch.sigmoid(logits) if theta.shape[0] == 1 else torch.softmax(logits, dim=1)
        residual = P - Y if weight is None else weight[:, None] * (P - Y)
        g = self.C * residual.T @ Z
        if not self.fit_intercept:
            return g + theta
        # ∇ of 0.5 ‖W‖² and of the centring term 0.5 (Σ b)² (zero for one logit).
        centring = theta[:, -1:].sum() * torch.ones_like(theta[:, -1:]) * (theta.shape[0] > 1)
        return g + torch.cat([theta[:, :-1], centring], dim=1)

    # The Newton solve records no graph, so it runs on numpy: on small batches torch's
    # per-call overhead dominates, on large ones both spend the time in the same BLAS.
    def _risk_np(self, theta, Z, Y, weight=None, logits=None, with_proba=False):
        """The regularised risk R(θ) = 0.5 ‖W‖² + C Σ wᵢ lossᵢ (+ intercept-centring term)
        on float64 numpy arrays; row weights w (n,) default to 1, `logits` = Z θᵀ if
        already known. `with_proba`: (R, `_proba_rows` at θ), the binary case sharing
        the work."""
        logits = Z @ theta.T if logits is None else logits
        P = None
        if theta.shape[0] == 1:
            if with_proba:
                soft, P = softplus_sigmoid(logits)
            else:
                soft = softplus(logits)
            loss = soft - Y * logits
        else:
            loss = logsumexp(logits, axis=1, keepdims=True) - (Y * logits).sum(1, keepdims=True)
            P = softmax(logits, axis=1) if with_proba else None
        if weight is not None:
            loss = weight[:, None] * loss
        penalised = theta[:, :-1] if self.fit_intercept else theta
        risk = 0.5 * float((penalised**2).sum()) + self.C * float(loss.sum())
        if self.fit_intercept and theta.shape[0] > 1:
            # Softmax intercepts can shift together without changing R; 0.5 (Σ b)² picks
            # the Σ b = 0 representative (scikit-learn's) and makes the Hessian invertible.
            risk += 0.5 * float(theta[:, -1].sum()) ** 2
        return (risk, P) if with_proba else risk

    def _proba_rows(self, theta, Z, logits=None) -> np.ndarray:
        """P (n, m): the sigmoid (one logit) or softmax of the logits Z θᵀ."""
        logits = Z @ theta.T if logits is None else logits
        return sigmoid(logits) if theta.shape[0] == 1 else softmax(logits, axis=1)

    def _grad_np(self, theta, Z, Y, weight=None, P=None) -> np.ndarray:
        """`_grad` on float64 numpy arrays (`P` = `_proba_rows` at θ if already known)."""
        P = self._proba_rows(theta, Z) if P is None else P
        residual = P - Y if weight is None else weight[:, None] * (P - Y)
        g = self.C * (residual.T @ Z)
        if not self.fit_intercept:
            return g + theta
        g[:, :-1] += theta[:, :-1]
        if theta.shape[0] > 1:
            g[:, -1] += theta[:, -1].sum()
        return g

    def _hessian(self, theta, Z, weight=None, P=None, single=False) -> np.ndarray:
        """∇²_θ R (mD, mD) in closed form, θ flattened row-major (class-major); numpy.

        `P` = `_proba_rows` at θ if already known; `single`: the products of the binary
        case run in float32 (summed in float64), good enough for a Newton direction
        only."""
        m, D = theta.shape
        P = self._proba_rows(theta, Z) if P is None else P
        if m == 1:
            p = P
            curvature = p * (1.0 - p) if weight is None else weight[:, None] * p * (1.0 - p)
            # A = √curvature ⊙ Z, so H ∝ AᵀA: numpy computes that product as a symmetric
            # rank-k update, half the work of a general matrix product. A is formed in
            # blocks of rows that stay in cache, so Z is read once and A never stored.
            if D <= _SMALL_DESIGN:  # Zᵀ(curvature ⊙ Z) directly: fastest on few columns
                H = (Z.T * curvature.T) @ Z
            else:
                # (float32: each block converted on its own, no float32 copy of Z)
                dtype = np.float32 if single else Z.dtype
                root = np.sqrt(curvature).astype(dtype, copy=False)
                H = np.zeros((D, D))
                rows = max(_HESSIAN_BLOCK_BYTES // (np.dtype(dtype).itemsize * D), 1)
                for start in range(0, len(Z), rows):
                    block = Z[start : start + rows].astype(dtype, copy=False)
                    A = root[start : start + rows] * block
                    H += A.T @ A
            H *= self.C
        else:
            # Σᵢ wᵢ (diag(pᵢ) − pᵢpᵢᵀ) ⊗ zᵢzᵢᵀ: a block-diagonal part minus AᵀA.
            A = (P[:, :, None] * Z[:, None, :]).reshape(len(Z), m * D)
            Aw = A if weight is None else weight[:, None] * A
            Zw = Z if weight is None else weight[:, None] * Z
            H = -(Aw.T @ A)
            H += block_diag(*[Zw.T @ (P[:, a : a + 1] * Z) for a in range(m)])
            H *= self.C
        # + 1 on the diagonal for the penalised weights (not the intercepts)
        diagonal = np.einsum("ii->i", H).reshape(m, D)  # a view
        diagonal[:, : D - 1 if self.fit_intercept else D] += 1.0
        if self.fit_intercept and m > 1:
            idx = np.arange(m) * D + (D - 1)
            H[idx[:, None], idx[None, :]] += 1.0
        return H

    def _newton(
        self,
        theta: torch.Tensor,
        Z: torch.Tensor,
        Y: torch.Tensor,
        weight: torch.Tensor | None = None,
        factor: torch.Tensor | None = None,
    ):
        """`_newton_np`, θ* and the Hessian factor returned as torch tensors."""
        theta, L, P, step = self._newton_np(theta, Z, Y, weight, factor)
        return torch.from_numpy(theta), torch.from_numpy(L), P, step

    def _newton_np(self, theta, Z, Y, weight=None, factor=None):
        """Minimise R by damped Newton from `theta`; returns θ* and the Cholesky factor
        of the Hessian at θ*, the probabilities P at θ* (as `_proba_rows`) and the Newton
        step at θ* (below tolerance: θ* minus it is θ* polished), all numpy (the inputs
        may be torch tensors or numpy arrays). No graph is recorded. `factor`: a Hessian
        factor from nearby (e.g. the previous solve's) to take the first step with.

        Where forming the Hessian costs many gradients (large m·D), the Hessians that
        only steer the iterates are cheaper: one from a step that was already small
        is kept for the next step (the curvature has barely moved, so the step still
        contracts fast), and the binary case forms them in float32 (while the steps
        keep shrinking). The factor returned is always formed at θ* in float64, as the
        implicit hypergradient needs."""
        theta = as_array(theta).copy()
        Z, Y = as_array(Z), as_array(Y)
        weight = None if weight is None else as_array(weight)
        if Z.shape[1] <= _SMALL_DESIGN:
            # few columns: BLAS runs the products below twice as fast on a
            # column-major Z (one copy here)
            Z = np.asfortranarray(Z)
        logits = Z @ theta.T
        f, P = self._risk_np(theta, Z, Y, weight, logits, with_proba=True)
        lag = theta.size >= _LAG_MIN_PARAMS
        use32 = lag and theta.shape[0] == 1
        # fresh: L is the float64 Hessian's at θ
        L, fresh, reuse = (None, False, False)
        if factor is not None:
            L, reuse = as_array(factor), True
        step_size = previous = float("inf")  # previous: the last full step's size
        for _ in range(self.max_iter):
            g = self._grad_np(theta, Z, Y, weight, P).reshape(-1)
            if not reuse:
                L = cholesky(self._hessian(theta, Z, weight, P, single=use32))
                fresh = not use32
            step = dpotrs(L, g, lower=1)[0].reshape(theta.shape)  # solves L Lᵀ step = g
            step_size = float(np.abs(step).max())
            scale = 1.0 + float(np.abs(theta).max())
            if step_size <= self.tol * scale:
                return self._converged(theta, Z, Y, weight, P, L, fresh, g, step)
            if use32 and previous < float("inf") and step_size > 0.5 * previous:
                use32 = False  # float32 curvature no longer contracts: back to float64
            t = 1.0
            if step_size <= 0.5 * previous and previous <= _UNTESTED_STEP * scale:
                # Full steps contracting fast this close to θ*: the full step lowers R,
                # and testing it (a risk evaluation) would be decided by rounding
                theta = theta - step
                f, P = None, self._proba_rows(theta, Z)  # R is evaluated when needed
            else:
                # Backtracking keeps far-from-optimum starts (cold fits) monotone.
                f = self._risk_np(theta, Z, Y, weight) if f is None else f
                decrease = float(g @ step.reshape(-1))
                # halving goes on while the trial move is above tolerance: from a start
                # where every probability saturates (a warm start far from the new
                # rows' optimum), the Hessian is nearly singular and the full step is
                # enormous, so t must get far below MIN_STEP before a trial is sane
                while t > MIN_STEP or t * step_size > self.tol * scale:
                    trial = theta - t * step
                    trial_logits = Z @ trial.T
                    f_new, P_new = self._risk_np(trial, Z, Y, weight, trial_logits, with_proba=True)
                    # The slack accepts steps whose decrease is below float64
                    # resolution of f (near the optimum the full step is right).
                    if f_new <= f - ARMIJO * t * decrease + F_SLACK * abs(f):
                        break
                    t *= 0.5
                else:
                    # no further decrease in float64: at the optimum
                    return self._converged(theta, Z, Y, weight, P, L, fresh, g, step)
                theta, f, P = trial, f_new, P_new
            fresh = False
            reuse = lag and t == 1.0 and step_size <= _LAG_STEP * scale
            previous = step_size if t == 1.0 else float("inf")  # damped: no judgement
        warnings.warn(
            f"LogisticRegression: Newton did not converge in max_iter={self.max_iter} "
            f"iterations (last step {step_size:.3g}, tol={self.tol:g})",
            ConvergenceWarning,
            stacklevel=4,
        )
        return self._converged(theta, Z, Y, weight, None, L, False)

    def _converged(self, theta, Z, Y, weight, P, L, fresh, g=None, step=None):
        """θ*, the Cholesky factor of the float64 Hessian at θ*, P = `_proba_rows` at θ*
        and the Newton step H⁻¹∇R at θ* (numpy). Pass what is known:
        P, the gradient g at θ* and the `step` taken with L (used if L is fresh)."""
        P = self._proba_rows(theta, Z) if P is None else P
        if not fresh:
            L = cholesky(self._hessian(theta, Z, weight, P))
            step = None
        if step is None:
            g = self._grad_np(theta, Z, Y, weight, P).reshape(-1) if g is None else g
            step = dpotrs(L, g, lower=1)[0].reshape(theta.shape)
        return theta, L, P, step

    # -- Ross et al.'s recourse loss ---------------------------------------------------
    def _recourse_delta(
        self, theta: torch.Tensor, X: torch.Tensor, scaling: State
    ) -> torch.Tensor | None:
        """δ* of every row of X under θ (detached; in the units of X), or None when λ = 0."""
        if self.recourse_loss_weight == 0:
            return None
        state = {**self.unpack(theta), **scaling}
        return self.action_set.recourse_delta(self, state, X, self.recourse_goal)

    def _rows(self, X: torch.Tensor, Y: torch.Tensor, delta: torch.Tensor | None, scaling: State):
        """The rows of the risk: (Z, Y, weight) for X, plus, with δ*, the rows X + δ* at
        the recourse goal with weight λ (weight None: plain, unit weights); Z is the
        design matrix of the (standardised, with `scaling`) features."""
        if delta is None:
            return self.design(scaled(scaling, X)), Y, None
        goals = torch.full((len(X),), self.recourse_goal, dtype=torch.long)
        Y_goal = self._targets(goals, Y.shape[1])
        weight = torch.cat(
            [
                torch.ones(len(X), dtype=torch.float64),
                torch.full((len(X),), float(self.recourse_loss_weight), dtype=torch.float64),
            ]
        )
        Z = self.design(scaled(scaling, torch.cat([X, X + delta])))
        return Z, torch.cat([Y, Y_goal]), weight

    def solve(
        self,
        theta0: torch.Tensor,
        X: torch.Tensor,
        y: torch.Tensor,
        scaling: State,
        start: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """θ⁺ = θ* − H⁻¹ ∇_θ R(θ*, X): value θ*, X-derivative the implicit hypergradient.

        With λ > 0, θ* minimises the recourse-aware risk by alternating δ* and Newton
        (see the class docstring); δ* is then held fixed in the implicit derivative.
        `scaling` holds ``x_shift``/``x_scale`` (standardize) or nothing. Newton starts
        from `start` if given (θ* is unique, so only the iterations change), else θ0.
        Subclasses that change the risk (weights, a robust objective) override it.
        """
        Y = self._targets(y, theta0.shape[0])
        X_fixed = X.detach()
        delta = self._recourse_delta(theta0, X_fixed, scaling)
        theta_star = theta0 if start is None else start.detach()
        rows = None
        if delta is None:  # plain training: the rows, with their graph to X, once
            rows = self._rows(X, Y, None, scaling)
        for i in range(_MAX_ALTERNATIONS):
            if delta is not None:
                rows = self._rows(X_fixed, Y, delta, scaling)
            theta_star, L, _, _ = self._newton(theta_star, *rows)
            new_delta = self._recourse_delta(theta_star, X_fixed, scaling)
            if new_delta is None or torch.equal(new_delta, delta):
                break
            if i == _MAX_ALTERNATIONS - 1:
                changed = int((new_delta != delta).any(1).sum())
                warnings.warn(
                    f"LogisticRegression: recourse-aware fit did not settle in "
                    f"{_MAX_ALTERNATIONS} alternations ({changed} rows' δ* still changing)",
                    ConvergenceWarning,
                    stacklevel=3,
                )
                break  # keep the δ* that θ* was solved for
            delta = new_delta
        if delta is not None:  # the rows again, now with their graph to X
            rows = self._rows(X, Y, delta, scaling)
        g = self._grad(theta_star, *rows).reshape(-1, 1)
        return theta_star - torch.cholesky_solve(g, L).reshape(theta_star.shape)

    def _init_state(self, X: torch.Tensor, y: torch.Tensor) -> State:
        k = len(self.classes_)
        m = 1 if k == 2 else k
        scaling = standardisation(X) if self.standardize else {}
        theta0 = torch.zeros((m, X.shape[1] + int(self.fit_intercept)), dtype=torch.float64)
        state = self.unpack(self.solve(theta0, X, y, scaling))
        state.update(scaling)
        if self.update_rule in MEMORY_RULES:
            state.update(first_memory(X, y))
        return state

    def _fits_on_numpy(self) -> bool:
        # LogisticRegression's own risk only: a subclass that changes it (row weights,
        # another loss) or the state it fits is fitted with torch, as is the recourse
        # loss (δ* comes from the action set's torch search)
        cls = type(self)
        return (
            cls.solve is LogisticRegression.solve
            and cls._init_state is LogisticRegression._init_state
            and self.recourse_loss_weight == 0
        )

    def _init_state_np(self, X: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
        # `_init_state` with λ = 0 on numpy: θ⁺ = θ* − H⁻¹ ∇R(θ*) as `solve` gives it
        k = len(self.classes_)
        m = 1 if k == 2 else k
        scaling = standardisation_arrays(X) if self.standardize else {}
        Z = (X - scaling["x_shift"]) / scaling["x_scale"] if scaling else X
        if self.fit_intercept:
            Z = np.concatenate([Z, np.ones((len(Z), 1))], axis=1)
        Y = y[:, None].astype(np.float64) if m == 1 else np.eye(m)[y]
        theta_star, _, _, step = self._newton_np(np.zeros((m, Z.shape[1])), Z, Y)
        theta = theta_star - step
        if self.fit_intercept:
            state = {"coef": theta[:, :-1], "intercept": theta[:, -1]}
        else:
            state = {"coef": theta, "intercept": np.zeros(m)}
        state.update(scaling)
        if self.update_rule in MEMORY_RULES:
            state.update(X_mem=X, y_mem=y.astype(np.float64), round_sizes=np.array([len(X)], float))
        return state

    def update_fn(self, state: State, X: torch.Tensor, y: torch.Tensor) -> State:
        return self.warm_update_fn(state, X, y, None)

    def warm_update_fn(
        self, state: State, X: torch.Tensor, y: torch.Tensor, start: State | None
    ) -> State:
        if self.update_rule == "frozen":
            return dict(state)
        if "X_mem" in state and not (torch.is_grad_enabled() and X.requires_grad):
            # no graph to build: the same refit on numpy, where it applies
            refit = self._numpy_refit(state, X, y, start, None)
            if refit is not None:
                return refit[0]
        theta = self.pack(state)
        X = X.to(torch.float64)
        scaling = {key: state[key] for key in _SCALING if key in state}
        if "X_mem" not in state:  # sgd: unrolled gradient steps on this round only
            Y = self._targets(y, theta.shape[0])
            scale = self.lr / (self.C * max(len(X), 1))
            for _ in range(self.epochs):
                delta = self._recourse_delta(theta, X, scaling)
                theta = theta - scale * self._grad(theta, *self._rows(X, Y, delta, scaling))
            new = self.unpack(theta)
        else:
            X_mem, y_mem, sizes = remember(state, X, y, self.window)
            if one_class(y_mem):
                # One class only: no finite optimum (the intercept runs off to ±∞).
                new = self.unpack(theta)
            else:
                first = None if start is None else self.pack(start)
                new = self.unpack(self.solve(theta, X_mem, y_mem, scaling, first))
            new.update(X_mem=X_mem, y_mem=y_mem, round_sizes=sizes)
        new.update(scaling)
        return new

    def _numpy_refit(self, state: State, X, y, start, factor, delta=None):
        """`warm_update_fn` of the "refit"/"window" rule for two classes and λ = 0 on
        numpy, without a graph: (the new state, the refit's pieces (θ*, its Hessian
        factor, P at θ*, Z), or None when one class kept θ); None where it does not
        apply. `factor`: a Hessian factor from nearby for Newton's first step. With
        `delta` the round's rows are X + delta, summed straight into the design matrix
        (which the memory then views: no other copy)."""
        if (
            state["coef"].shape[0] != 1
            or "X_mem" not in state
            or self.recourse_loss_weight != 0
            or not self.fit_intercept
        ):
            return None
        scaling = {key: state[key] for key in _SCALING if key in state}
        X_np = as_array(X).astype(np.float64, copy=False)
        n, d = X_np.shape
        # the design matrix straight in numpy, column-major: Newton's products Zθ and
        # rᵀZ run about twice as fast on it (one BLAS pass per column) at d = 100 as on
        # a row-major Z, and its blocked Hessian no slower
        order = "F"
        Z = np.empty((n, d + 1), order=order)
        if delta is None:
            Z[:, :-1] = X_np
        else:
            np.add(X_np, as_array(delta), out=Z[:, :-1])
        Z[:, -1] = 1.0
        new_rows = torch.from_numpy(Z)[:, :-1]
        X_mem, y_mem, sizes = remember(state, new_rows, y, self.window, copy=False)
        memory = {"X_mem": X_mem, "y_mem": y_mem, "round_sizes": sizes, **scaling}
        if one_class(y_mem):
            return {**self.unpack(self.pack(state)), **memory}, None  # θ kept
        if scaling or X_mem is not new_rows:  # older rows or standardised: a new design
            X_all = X_mem.numpy()
            Z = np.empty((len(X_all), d + 1), order=order)
            if scaling:
                shift, scale = scaling["x_shift"].numpy(), scaling["x_scale"].numpy()
                np.divide(X_all - shift, scale, out=Z[:, :-1])
            else:
                Z[:, :-1] = X_all
            Z[:, -1] = 1.0
        first = state if start is None else start
        first = np.concatenate([as_array(first["coef"]), as_array(first["intercept"])[:, None]], 1)
        Y = y_mem.numpy()[:, None]
        theta_star, L, P, step = self._newton(first, Z, Y, factor=factor)
        # θ⁺ = θ* − H⁻¹ ∇R(θ*), the value `warm_update_fn` gives (one last Newton step)
        th_star = theta_star.numpy()
        th = th_star - step
        return {**self.unpack(torch.from_numpy(th)), **memory}, (th_star, L, P, Z)

    def refit_hypergradient(
        self,
        state: State,
        X: torch.Tensor,
        delta: torch.Tensor,
        y: torch.Tensor,
        start: State | None,
        queries: torch.Tensor,
        goal: torch.Tensor,
        factor: torch.Tensor | None = None,
    ) -> tuple[float, torch.Tensor | LowRankGradient, State, torch.Tensor | None] | None:
        """One refit on the rows X + delta and the queries' goal loss after it, with the
        loss's gradient in those rows in closed form: (mean loss, ∂loss/∂X (n, d) as a
        `LowRankGradient` of rank 2, the refitted state, the Cholesky factor of its
        Hessian), or None where the closed
        form does not apply (softmax, the "sgd" rule, λ > 0) and autograd through
        `warm_update_fn` is the way. Newton starts from `start` (default: `state`) with
        the Hessian factor `factor`, e.g. those of a refit on nearby rows (θ* is unique:
        only the iterations change).

        At θ* of the refit, ∇R(θ*, X) = 0 gives ∂loss/∂xᵢ = −(∂∇R/∂xᵢ)ᵀ v with
        v = H⁻¹ ∂loss/∂θ, and for ∇R = (W, 0) + C Σᵢ (pᵢ − yᵢ) zᵢ that is
        −C [pᵢ(1 − pᵢ) (v·zᵢ) W + (pᵢ − yᵢ) v_W] / x_scale: the hypergradient of
        `warm_update_fn` without building its graph (tested against it).
        """
        refit = self._numpy_refit(state, X, y, start, factor, delta)
        if refit is None:
            return None
        new, pieces = refit
        if pieces is None:  # one class: θ kept, no gradient
            loss = self.goal_loss_grad(new, queries.numpy(), goal.numpy())[0]
            return float(loss.mean()), torch.zeros(X.shape, dtype=torch.float64), new, None
        th_star, L, P, Z = pieces
        th = self.pack(new).numpy()
        scaling = {key: state[key] for key in _SCALING if key in state}
        # ∂loss/∂θ of the mean goal cross-entropy of the queries, at θ⁺
        Zq = self.design(scaled(scaling, queries.to(torch.float64))).numpy()
        losses, residual = binary_goal_loss(sigmoid(Zq @ th[0]), goal.numpy())
        v = dpotrs(L.numpy(), (residual / len(Zq)) @ Zq, lower=1)[0]
        rows = Z[len(Z) - len(X) :]  # this round's rows, the ones X moves
        p = P[len(Z) - len(X) :, 0]
        # the derivative of θ⁺ in X is that of the implicit function θ*: at θ*
        along_w = -self.C * (p * (1.0 - p)) * (rows @ v)
        along_v = -self.C * (p - y.numpy())
        # rank two: every row's gradient lies in the span of W and v_W
        grad = LowRankGradient(
            np.stack([along_w, along_v], 1),
            np.stack([th_star[0, :-1], v[:-1]]),
            scaling["x_scale"].numpy() if scaling else None,
        )
        return float(losses.mean()), grad, new, L

    def update(self, X, y, start: State | None = None) -> LogisticRegression:
        """Apply the online update rule to one round of reported data (see `update_fn`
        and `Learner.update`); warns when a refit's rows hold a single class and the
        parameters were kept."""
        super().update(X, y, start)
        y_mem = self.state_.get("y_mem")
        if y_mem is not None and len(y_mem) and one_class(y_mem):
            rounds = len(self.state_["round_sizes"])
            warnings.warn(
                f"LogisticRegression: the {len(y_mem)} rows of this refit ({len(y)} new, "
                f"{rounds} round(s) kept) all have label {int(y_mem[0])}; one class has no "
                "finite optimum (the intercept diverges), so the previous parameters are kept",
                SingleClassWarning,
                stacklevel=2,
            )
        return self
