"""L2-regularised logistic regression with Newton refits and implicit hypergradients."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np
from scipy.linalg import block_diag
from scipy.linalg.lapack import dpotrf, dpotrs
from scipy.special import logsumexp, softmax

from recourse_sim.lazy import LazyModule
from recourse_sim.learners.base import (
    MEMORY_RULES,
    Learner,
    LowRankGradient,
    State,
    check_positive,
    first_memory,
    remember,
)

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds learners without torch
    torch = LazyModule("torch", globals())

# Armijo constant and smallest step fraction of the backtracking line search.
_ARMIJO = 1e-4
_MIN_STEP = 1e-10
# Relative slack of the Armijo test, a few float64 roundings of the risk.
_F_SLACK = 1e-13
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


def _standardisation(X: torch.Tensor) -> State:
    """``x_shift`` (means) and ``x_scale`` (population SDs, 1 for a constant feature) of X."""
    X = X.detach().to(torch.float64)
    scale = X.std(0, correction=0)
    return {"x_shift": X.mean(0), "x_scale": torch.where(scale > 0, scale, torch.ones_like(scale))}


def _scaled(scaling: State, X: torch.Tensor) -> torch.Tensor:
    """X standardised with ``x_shift``/``x_scale`` of `scaling` (X itself without them)."""
    if "x_scale" not in scaling:
        return X
    return (X - scaling["x_shift"]) / scaling["x_scale"]


def _numpy(value) -> np.ndarray:
    """A state entry as a numpy array (torch tensors by a zero-copy view)."""
    return value.detach().numpy() if isinstance(value, torch.Tensor) else value


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """The logistic function, exp taken of −|z| only (no overflow); faster than expit."""
    return _sigmoid_of(z, np.exp(-np.abs(z)))


def _sigmoid_of(z: np.ndarray, e: np.ndarray) -> np.ndarray:
    """The logistic function of z from e = exp(−|z|): 1 / (1 + e) where z ≥ 0, else
    e / (1 + e). The numerator is picked by 0/1 masks rather than np.where (branchy on
    mixed signs, and twice as slow); the numbers are the same, NaN included."""
    nonnegative = z >= 0
    s = e * ~nonnegative
    s += nonnegative
    s /= 1.0 + e
    return s


def _one_class(y: torch.Tensor) -> bool:
    """Whether the labels y hold one class at most (numpy: cheaper than torch on a
    round's worth)."""
    y = y.detach().numpy()
    return len(y) == 0 or bool((y == y[0]).all())


def _binary_goal_loss(p1: np.ndarray, goal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the goal cross-entropy −log p(goal) of a binary model with P(class 1) =
    p1 (the probability clamped at 1e-300) and its derivative in the logit (0 below the
    clamp, which has no gradient)."""
    p_goal = np.where(goal == 1, p1, 1.0 - p1)
    residual = np.where(p_goal < 1e-300, 0.0, p1 - (goal == 1))
    return -np.log(np.maximum(p_goal, 1e-300)), residual


def _softplus(z: np.ndarray) -> np.ndarray:
    """log(1 + exp(z)) without overflow."""
    return np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z)))


def _softplus_sigmoid(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_softplus` and `_sigmoid` of z (the same numbers) from one exp."""
    e = np.exp(-np.abs(z))
    return np.maximum(z, 0.0) + np.log1p(e), _sigmoid_of(z, e)


def _cholesky(H: np.ndarray) -> np.ndarray:
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
        # imported here: recourse_sim.recourse imports the learners
        from recourse_sim.recourse.ross import check_recourse_training

        check_recourse_training(self)

    # -- the model -------------------------------------------------------------------
    def proba_fn(self, state: State, X: torch.Tensor) -> torch.Tensor:
        logits = _scaled(state, X.to(torch.float64)) @ state["coef"].T + state["intercept"]
        if logits.shape[1] == 1:
            p1 = torch.sigmoid(logits)
            return torch.cat([1 - p1, p1], dim=1)
        return torch.softmax(logits, dim=1)

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities, shape (n, k); `proba_fn` on numpy (no graph is needed, and
        on small batches torch is mostly overhead)."""
        X = X.detach().numpy() if isinstance(X, torch.Tensor) else X
        X = self._check_X(X, fitted=True)  # (NotFittedError first)
        return self.proba_np(self.state_, X)

    def proba_np(self, state: State, X: np.ndarray) -> np.ndarray:
        logits = self._logits_np(state, X)
        if logits.shape[1] == 1:
            p1 = _sigmoid(logits)
            return np.concatenate([1.0 - p1, p1], axis=1)
        return softmax(logits, axis=1)

    def _logits_np(self, state, X: np.ndarray) -> np.ndarray:
        """Logits of X under `state` (torch tensors or their numpy views)."""
        if "x_scale" in state:
            X = (X - _numpy(state["x_shift"])) / _numpy(state["x_scale"])
        return X @ _numpy(state["coef"]).T + _numpy(state["intercept"])

    def goal_loss_grad(
        self, state: State, X: np.ndarray, goal: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        # numpy: on the small batches of individual recourse torch is mostly overhead
        coef = _numpy(state["coef"])
        logits = self._logits_np(state, X)
        if coef.shape[0] == 1:
            loss, residual = _binary_goal_loss(_sigmoid(logits[:, 0]), goal)
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
            grad /= _numpy(state["x_scale"])
        return loss, grad

    def goal_margin_coef(self, state: State, goal: np.ndarray) -> np.ndarray | None:
        coef = _numpy(state["coef"])
        if coef.shape[0] != 1:  # softmax: the goal's loss depends on every logit
            return None
        # the margin is the logit (goal 1) or minus it (goal 0), in the units of x
        c = coef[0] / _numpy(state["x_scale"]) if "x_scale" in state else coef[0]
        return np.where(goal[:, None] == 1, c, -c)

    def goal_margin(self, state: State, X: np.ndarray, goal: np.ndarray) -> np.ndarray | None:
        if _numpy(state["coef"]).shape[0] != 1:
            return None
        logit = self._logits_np(state, np.asarray(X, dtype=np.float64))[:, 0]
        return np.where(goal == 1, logit, -logit)

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
                softplus, P = _softplus_sigmoid(logits)
            else:
                softplus = _softplus(logits)
            loss = softplus - Y * logits
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
        return _sigmoid(logits) if theta.shape[0] == 1 else softmax(logits, axis=1)

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
        """Minimise R by damped Newton from `theta`; returns θ* and the Cholesky factor
        of the Hessian at θ* (torch), the probabilities P at θ* (numpy, as
        `_proba_rows`) and the Newton step at θ* (numpy; below tolerance: θ* minus it
        is θ* polished). No graph is recorded. `factor`: a Hessian factor from nearby
        (e.g. the previous solve's) to take the first step with.

        Where forming the Hessian costs many gradients (large m·D), the Hessians that
        only steer the iterates are cheaper: one from a step that was already small
        is kept for the next step (the curvature has barely moved, so the step still
        contracts fast), and the binary case forms them in float32 (while the steps
        keep shrinking). The factor returned is always formed at θ* in float64, as the
        implicit hypergradient needs."""
        theta = _numpy(theta).copy()
        Z, Y = _numpy(Z), _numpy(Y)
        weight = None if weight is None else _numpy(weight)
        if Z.shape[1] <= _SMALL_DESIGN:
            # few columns: BLAS runs the products below twice as fast on a
            # column-major Z (one copy here)
            Z = np.asfortranarray(Z)
        logits = Z @ theta.T
        f, P = self._risk_np(theta, Z, Y, weight, logits, with_proba=True)
        lag = theta.size >= _LAG_MIN_PARAMS
        use32 = lag and theta.shape[0] == 1
        # fresh: L is the float64 Hessian's at θ
        L, fresh, reuse = (None, False, False) if factor is None else (factor.numpy(), False, True)
        step_size = previous = float("inf")  # previous: the last full step's size
        for _ in range(self.max_iter):
            g = self._grad_np(theta, Z, Y, weight, P).reshape(-1)
            if not reuse:
                L = _cholesky(self._hessian(theta, Z, weight, P, single=use32))
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
                # enormous, so t must get far below _MIN_STEP before a trial is sane
                while t > _MIN_STEP or t * step_size > self.tol * scale:
                    trial = theta - t * step
                    trial_logits = Z @ trial.T
                    f_new, P_new = self._risk_np(trial, Z, Y, weight, trial_logits, with_proba=True)
                    # The slack accepts steps whose decrease is below float64
                    # resolution of f (near the optimum the full step is right).
                    if f_new <= f - _ARMIJO * t * decrease + _F_SLACK * abs(f):
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
            stacklevel=3,
        )
        return self._converged(theta, Z, Y, weight, None, L, False)

    def _converged(self, theta, Z, Y, weight, P, L, fresh, g=None, step=None):
        """(θ*, Cholesky factor of the float64 Hessian at θ*) as torch tensors, P =
        `_proba_rows` at θ* and the Newton step H⁻¹∇R at θ* (numpy). Pass what is known:
        P, the gradient g at θ* and the `step` taken with L (used if L is fresh)."""
        P = self._proba_rows(theta, Z) if P is None else P
        if not fresh:
            L = _cholesky(self._hessian(theta, Z, weight, P))
            step = None
        if step is None:
            g = self._grad_np(theta, Z, Y, weight, P).reshape(-1) if g is None else g
            step = dpotrs(L, g, lower=1)[0].reshape(theta.shape)
        return torch.from_numpy(theta), torch.from_numpy(L), P, step

    # -- Ross et al.'s recourse loss ---------------------------------------------------
    def _recourse_delta(
        self, theta: torch.Tensor, X: torch.Tensor, scaling: State
    ) -> torch.Tensor | None:
        """δ* of every row of X under θ (detached; in the units of X), or None when λ = 0."""
        if self.recourse_loss_weight == 0:
            return None
        from recourse_sim.recourse.ross import recourse_delta  # (import cycle, see above)

        state = {**self._unpack(theta), **scaling}
        return recourse_delta(self, state, X, self.action_set, self.recourse_goal)

    def _rows(self, X: torch.Tensor, Y: torch.Tensor, delta: torch.Tensor | None, scaling: State):
        """The rows of the risk: (Z, Y, weight) for X, plus, with δ*, the rows X + δ* at
        the recourse goal with weight λ (weight None: plain, unit weights); Z is the
        design matrix of the (standardised, with `scaling`) features."""
        if delta is None:
            return self._design(_scaled(scaling, X)), Y, None
        goals = torch.full((len(X),), self.recourse_goal, dtype=torch.long)
        Y_goal = self._targets(goals, Y.shape[1])
        weight = torch.cat(
            [
                torch.ones(len(X), dtype=torch.float64),
                torch.full((len(X),), float(self.recourse_loss_weight), dtype=torch.float64),
            ]
        )
        Z = self._design(_scaled(scaling, torch.cat([X, X + delta])))
        return Z, torch.cat([Y, Y_goal]), weight

    def _solve(
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
        scaling = _standardisation(X) if self.standardize else {}
        theta0 = torch.zeros((m, X.shape[1] + int(self.fit_intercept)), dtype=torch.float64)
        state = self._unpack(self._solve(theta0, X, y, scaling))
        state.update(scaling)
        if self.update_rule in MEMORY_RULES:
            state.update(first_memory(X, y))
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
        theta = self._pack(state)
        X = X.to(torch.float64)
        scaling = {key: state[key] for key in _SCALING if key in state}
        if "X_mem" not in state:  # sgd: unrolled gradient steps on this round only
            Y = self._targets(y, theta.shape[0])
            scale = self.lr / (self.C * max(len(X), 1))
            for _ in range(self.epochs):
                delta = self._recourse_delta(theta, X, scaling)
                theta = theta - scale * self._grad(theta, *self._rows(X, Y, delta, scaling))
            new = self._unpack(theta)
        else:
            X_mem, y_mem, sizes = remember(state, X, y, self.window)
            if _one_class(y_mem):
                # One class only: no finite optimum (the intercept runs off to ±∞).
                new = self._unpack(theta)
            else:
                first = None if start is None else self._pack(start)
                new = self._unpack(self._solve(theta, X_mem, y_mem, scaling, first))
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
        X_np = _numpy(X).astype(np.float64, copy=False)
        n, d = X_np.shape
        # the design matrix straight in numpy, column-major: Newton's products Zθ and
        # rᵀZ run about twice as fast on it (one BLAS pass per column) at d = 100 as on
        # a row-major Z, and its blocked Hessian no slower
        order = "F"
        Z = np.empty((n, d + 1), order=order)
        if delta is None:
            Z[:, :-1] = X_np
        else:
            np.add(X_np, _numpy(delta), out=Z[:, :-1])
        Z[:, -1] = 1.0
        new_rows = torch.from_numpy(Z)[:, :-1]
        X_mem, y_mem, sizes = remember(state, new_rows, y, self.window, copy=False)
        memory = {"X_mem": X_mem, "y_mem": y_mem, "round_sizes": sizes, **scaling}
        if _one_class(y_mem):
            return {**self._unpack(self._pack(state)), **memory}, None  # θ kept
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
        first = np.concatenate([_numpy(first["coef"]), _numpy(first["intercept"])[:, None]], 1)
        Y = y_mem.numpy()[:, None]
        theta_star, L, P, step = self._newton(first, Z, Y, factor=factor)
        # θ⁺ = θ* − H⁻¹ ∇R(θ*), the value `warm_update_fn` gives (one last Newton step)
        th_star = theta_star.numpy()
        th = th_star - step
        return {**self._unpack(torch.from_numpy(th)), **memory}, (th_star, L, P, Z)

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
        th = self._pack(new).numpy()
        scaling = {key: state[key] for key in _SCALING if key in state}
        # ∂loss/∂θ of the mean goal cross-entropy of the queries, at θ⁺
        Zq = self._design(_scaled(scaling, queries.to(torch.float64))).numpy()
        losses, residual = _binary_goal_loss(_sigmoid(Zq @ th[0]), goal.numpy())
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
        if y_mem is not None and len(y_mem) and _one_class(y_mem):
            rounds = len(self.state_["round_sizes"])
            warnings.warn(
                f"LogisticRegression: the {len(y_mem)} rows of this refit ({len(y)} new, "
                f"{rounds} round(s) kept) all have label {int(y_mem[0])}; one class has no "
                "finite optimum (the intercept diverges), so the previous parameters are kept",
                SingleClassWarning,
                stacklevel=2,
            )
        return self


# `newton_refit_batch` takes full steps untested once they halve and the last was at
# most this (relative to 1 + max |θ|): each risk test costs about a Newton iteration.
_UNTESTED_BATCH = 0.1


def newton_refit_batch(
    theta: np.ndarray,
    Zt: np.ndarray,
    y: np.ndarray,
    C: float,
    tol: float,
    max_iter: int,
    rows: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Binary L2 logistic refits of B independent worlds at once: the refit that
    `LogisticRegression._numpy_refit` solves for one world (two classes; `Zt` (B, D, n)
    the transposed design matrices, the intercept's row of ones last and unpenalised;
    labels `y` (B, n) in {0, 1}; Newton from `theta` (B, D)), as one batched pass per
    iteration.

    Each world takes its own damped Newton steps, as the single refit does (Armijo
    backtracking, full steps untested once they contract fast, the same tolerance test:
    the step at most ``tol · (1 + max |θ|)``) until it converges; then, as the single
    refit, θ⁺ = θ* − H⁻¹∇R(θ*), one more Newton step from the solution. The minimiser
    is unique and both end one quadratically convergent step past tolerance, so they
    agree to rounding whatever their paths. Worlds whose rows hold one class keep their
    θ (no finite optimum), as the single learner does. Returns (θ⁺ (B, D), kept (B,)
    bool: one class, θ kept).

    `rows` (B, n) bool: each world's rows where worlds have different numbers of them
    (None: all n rows are every world's); the columns of `Zt` past a world's rows must
    be 0 (the intercept's too), so that they add nothing to the gradient or Hessian."""
    theta = np.array(theta, dtype=np.float64)
    B, D, n = Zt.shape
    y = y.astype(np.float64)
    if rows is None:
        one_class = (y == y[:, :1]).all(1) if n else np.ones(B, bool)
    else:  # (a world without rows holds one class at most too)
        has_one = (rows & (y == 1.0)).any(1)
        has_zero = (rows & (y == 0.0)).any(1)
        one_class = ~(has_one & has_zero)
    out = theta.copy()
    penalised = np.ones(D)
    penalised[-1] = 0.0  # the intercept
    outer, fill = _hessian_products(Zt)
    # the Hessian (flattened) in one buffer: every entry is rewritten each iteration
    H = np.empty((B, D * D))
    diagonal = np.arange(D - 1) * (D + 1)  # the penalised diagonal's flat positions
    identity = np.eye(D).ravel()
    todo = ~one_class  # worlds still iterating
    th = theta
    f = np.full(B, np.nan)  # the risk at θ where known
    previous = np.full(B, np.inf)  # each world's last full step (inf: none or damped)
    logits = None  # θ's logits when the last iteration computed them
    for _ in range(max_iter):
        if not todo.any():
            break
        if logits is None:
            logits = np.matmul(th[:, None, :], Zt)[:, 0]
        # torch's sigmoid: a third of numpy's time here (its rounding differs; only the
        # path to θ* sees it)
        P = torch.sigmoid(torch.from_numpy(logits)).numpy()
        g = C * np.matmul(Zt, (P - y)[:, :, None])[..., 0] + penalised * th
        entries = C * np.matmul(outer, (P * (1.0 - P))[:, :, None])[..., 0]
        np.take(entries, fill, axis=1, out=H)
        H[:, diagonal] += 1.0
        H[~todo] = identity  # finished worlds: any solvable system
        step = np.linalg.solve(H.reshape(B, D, D), g[:, :, None])[..., 0]
        step_size = np.abs(step).max(1)
        scale = 1.0 + np.abs(th).max(1)
        done = todo & (step_size <= tol * scale)
        np.subtract(th, step, out=out, where=done[:, None])
        todo &= ~done
        # full steps contracting fast near θ*: taken untested (from further out than the
        # single refit dares, which only changes the path: θ* is unique)
        untested = todo & (step_size <= 0.5 * previous) & (previous <= _UNTESTED_BATCH * scale)
        tested = todo & ~untested
        t = todo.astype(np.float64)
        if tested.any():
            unknown = np.flatnonzero(tested & np.isnan(f))
            if len(unknown):
                f[unknown] = _risk_of(unknown, th, logits, y, C, penalised, rows)
            decrease = (g * step).sum(1)
            # the full step of every world at once, then halving where it fails
            pending = np.flatnonzero(tested)
            trial = th - step
            trial_logits = np.matmul(trial[:, None, :], Zt)[:, 0]
            f_trial = _risk_of(pending, trial, trial_logits, y, C, penalised, rows)
            while len(pending):
                # the slack accepts decreases below float64 resolution of f
                ok = f_trial <= (
                    f[pending] - _ARMIJO * t[pending] * decrease[pending]
                ) + _F_SLACK * np.abs(f[pending])
                f[pending[ok]] = f_trial[ok]
                rejected = pending[~ok]
                t[rejected] *= 0.5
                stuck = rejected[t[rejected] <= _MIN_STEP]
                if len(stuck):  # no further decrease in float64: at the optimum
                    out[stuck] = th[stuck] - step[stuck]
                    todo[stuck] = False
                    t[stuck] = 0.0
                pending = rejected[t[rejected] > _MIN_STEP]
                if len(pending):
                    trial_p = th[pending] - t[pending, None] * step[pending]
                    lg = np.matmul(trial_p[:, None, :], Zt[pending])[:, 0]
                    f_trial = _risk_batch(
                        trial_p,
                        lg,
                        y[pending],
                        C,
                        penalised,
                        None if rows is None else rows[pending],
                    )
        f[untested] = np.nan  # R is evaluated when needed
        th = th - t[:, None] * step
        # every world still iterating took its full step: θ - step, the trial's logits
        logits = trial_logits if tested.any() and (t[todo] == 1.0).all() else None
        previous = np.where(t == 1.0, step_size, np.inf)
    else:
        if todo.any():
            warnings.warn(
                f"LogisticRegression: Newton did not converge in max_iter={max_iter} "
                f"iterations in {int(todo.sum())} of {B} worlds",
                ConvergenceWarning,
                stacklevel=2,
            )
            out[todo] = th[todo]
    return out, one_class


def _hessian_products(Zt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows' products zₐ zᵦ (a <= b) of each world's design, (B, D (D + 1) / 2, n),
    so that the Hessian's distinct entries Σᵢ cᵢ zᵢₐ zᵢᵦ are one product with c; and for
    each entry of the flattened (D, D) Hessian, its distinct entry's index."""
    B, D, n = Zt.shape
    upper_a, upper_b = np.triu_indices(D)
    outer = np.empty((B, len(upper_a), n))
    # row by row of the upper triangle: zₐ times all zᵦ from a on (as many multiplies
    # as features; a fancy-indexed product is 40 times slower)
    start = 0
    for a in range(D):
        np.multiply(Zt[:, a : a + 1], Zt[:, a:], out=outer[:, start : start + D - a])
        start += D - a
    fill = np.empty((D, D), np.intp)
    fill[upper_a, upper_b] = fill[upper_b, upper_a] = np.arange(len(upper_a))
    return outer, fill.ravel()


# torch's elementwise kernels round a vector block and a scalar tail differently: a risk
# of some worlds is computed, with zeros padded to a whole number of these blocks, only
# when the whole stack is such a number too (then every element is in a block both ways)
_TORCH_BLOCK = 64


def _risk_of(which, theta, logits, y, C: float, penalised: np.ndarray, rows=None) -> np.ndarray:
    """``_risk_batch(theta, logits, y, ...)[which]`` (bit for bit) for indices `which`:
    only those worlds' risks when that is the same arithmetic."""
    B, n = logits.shape
    if 2 * len(which) > B or (B * n) % _TORCH_BLOCK:  # (most worlds: the copies cost more)
        return _risk_batch(theta, logits, y, C, penalised, rows)[which]
    size = len(which) * n
    padded = np.zeros(-(-size // _TORCH_BLOCK) * _TORCH_BLOCK)
    lg = padded[:size].reshape(len(which), n)
    np.take(logits, which, axis=0, out=lg)
    softplus = torch.nn.functional.softplus(torch.from_numpy(padded)).numpy()[:size]
    return _risk_from(
        theta[which],
        lg,
        softplus.reshape(len(which), n),
        y[which],
        C,
        penalised,
        None if rows is None else rows[which],
    )


def _risk_batch(theta, logits, y, C: float, penalised: np.ndarray, rows=None) -> np.ndarray:
    """`LogisticRegression._risk_np` of each world (binary, intercept last): (B,);
    `rows` (B, n) bool: each world's rows (None: all)."""
    softplus = torch.nn.functional.softplus(torch.from_numpy(logits)).numpy()
    return _risk_from(theta, logits, softplus, y, C, penalised, rows)


def _risk_from(theta, logits, softplus, y, C: float, penalised: np.ndarray, rows) -> np.ndarray:
    """`_risk_batch` given the logits' softplus."""
    loss = softplus - y * logits
    if rows is not None:
        loss = loss * rows
    loss = loss.sum(1)
    return 0.5 * ((theta * penalised) ** 2).sum(1) + C * loss


def fit_batch(
    learners: list[LogisticRegression], data: list[tuple[np.ndarray, np.ndarray]]
) -> None:
    """`fit` each learner on its own (X, y), the binary ones in one batched Newton pass:
    `newton_refit_batch` from θ = 0 (the single fit's start) on each one's design matrix,
    standardised as its `fit` would (`_standardisation`), rows of zeros padding the
    shorter ones. Each learner ends as its `fit` leaves it (the state's every entry,
    ``classes_``, ``n_features_in_``), its θ the single fit's to rounding: the minimiser
    is unique and both end one Newton step past tolerance.

    Fitted by their own `fit` instead: learners other than binary, intercept-fitting
    ones without a recourse loss; rows of one class (the single fit has no finite
    optimum there, and its own iterations decide where it stops); and solver settings
    (C, tol, max_iter) other than the first batched learner's."""
    batch: list[tuple[LogisticRegression, torch.Tensor, torch.Tensor, State]] = []
    for learner, (X, y) in zip(learners, data, strict=True):
        X_t, y_t = learner._validate(X, y, first=True)
        learner._check_params()
        settings = (learner.C, learner.tol, learner.max_iter)
        if (
            len(learner.classes_) != 2
            or not learner.fit_intercept
            or learner.recourse_loss_weight != 0
            or _one_class(y_t)
            or (batch and settings != (batch[0][0].C, batch[0][0].tol, batch[0][0].max_iter))
        ):
            learner.fit(X, y)
            continue
        scaling = _standardisation(X_t) if learner.standardize else {}
        batch.append((learner, X_t, y_t, scaling))
    if not batch:
        return
    longest = max(len(y_t) for _, _, y_t, _ in batch)
    d = batch[0][1].shape[1]
    Zt = np.zeros((len(batch), d + 1, longest))  # the design matrices, transposed
    Y = np.zeros((len(batch), longest))
    rows = np.zeros((len(batch), longest), bool)
    for k, (_learner, X_t, y_t, scaling) in enumerate(batch):
        m = len(y_t)
        Zt[k, :d, :m] = _scaled(scaling, X_t).numpy().T  # as `_rows`
        Zt[k, d, :m] = 1.0
        Y[k, :m], rows[k, :m] = y_t.numpy(), True
    first = batch[0][0]
    theta, _ = newton_refit_batch(
        np.zeros((len(batch), d + 1)),
        Zt,
        Y,
        first.C,
        first.tol,
        first.max_iter,
        rows=None if rows.all() else rows,
    )
    for k, (learner, X_t, y_t, scaling) in enumerate(batch):
        state = learner._unpack(torch.from_numpy(theta[k : k + 1].copy()))  # as `_init_state`
        state.update(scaling)
        if learner.update_rule in MEMORY_RULES:
            state.update(first_memory(X_t, y_t))
        learner.state_ = {key: value.detach() for key, value in state.items()}
