"""Binary logistic regressions of B independent worlds at once: their Newton refits
(`newton_refit_batch`) and first fits (`fit_batch`), as one batched pass per iteration
(the batched vector environment, `recourse_sim.env.batched`)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.lazy import LazyModule
from recourse_sim.learners.base import MEMORY_RULES, State, first_memory
from recourse_sim.learners.logistic import ConvergenceWarning, LogisticRegression
from recourse_sim.learners.logistic_math import (
    ARMIJO,
    F_SLACK,
    MIN_STEP,
    scaled,
    standardisation,
)
from recourse_sim.learners.logistic_math import (
    one_class as holds_one_class,
)

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds learners without torch
    torch = LazyModule("torch", globals())

__all__ = ["fit_batch", "last_round_refit_batch", "newton_refit_batch", "window_refit_batch"]


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
                    f[pending] - ARMIJO * t[pending] * decrease[pending]
                ) + F_SLACK * np.abs(f[pending])
                f[pending[ok]] = f_trial[ok]
                rejected = pending[~ok]
                t[rejected] *= 0.5
                stuck = rejected[t[rejected] <= MIN_STEP]
                if len(stuck):  # no further decrease in float64: at the optimum
                    out[stuck] = th[stuck] - step[stuck]
                    todo[stuck] = False
                    t[stuck] = 0.0
                pending = rejected[t[rejected] > MIN_STEP]
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
    standardised as its `fit` would (`standardisation`), rows of zeros padding the
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
            or holds_one_class(y_t)
            or (batch and settings != (batch[0][0].C, batch[0][0].tol, batch[0][0].max_iter))
        ):
            learner.fit(X, y)
            continue
        scaling = standardisation(X_t) if learner.standardize else {}
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
        Zt[k, :d, :m] = scaled(scaling, X_t).numpy().T  # as `_rows`
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
        state = learner.unpack(torch.from_numpy(theta[k : k + 1].copy()))  # as `_init_state`
        state.update(scaling)
        if learner.update_rule in MEMORY_RULES:
            state.update(first_memory(X_t, y_t))
        learner.state_ = {key: value.detach() for key, value in state.items()}


def window_refit_batch(
    theta: np.ndarray,
    memory: list[list[tuple[np.ndarray, np.ndarray]]],
    window: int,
    X_train: np.ndarray,
    y_train: np.ndarray,
    train: np.ndarray,
    scaling: tuple[np.ndarray, np.ndarray],
    C: float,
    tol: float,
    max_iter: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The window rule's refit of B worlds (`remember`, then `_numpy_refit`): each
    world's training rows `train` (B, n) join its `memory` (its remembered rounds'
    rows and labels, oldest first; updated) as a round (a world without any
    is not updated, as the single env skips an update without rows), the last
    ``window`` rounds are kept, and all worlds' memories are solved at once, each
    padded to the longest with rows of zeros. Returns (θ⁺, one class kept θ)."""
    B, _n, d = X_train.shape
    theta = theta.copy()
    one_class = np.zeros(B, bool)
    updating = np.flatnonzero(train.any(1)).tolist()
    if not updating:
        return theta, one_class
    memories = []
    for i in updating:
        rounds = memory[i]
        rounds.append((X_train[i][train[i]], y_train[i][train[i]].astype(np.float64)))
        del rounds[:-window]
        memories.append(
            (np.concatenate([x for x, _ in rounds]), np.concatenate([y for _, y in rounds]))
        )
    longest = max(len(y) for _, y in memories)
    Zt = np.zeros((len(updating), d + 1, longest))  # the design matrices, transposed
    Y = np.zeros((len(updating), longest))
    rows = np.zeros((len(updating), longest), bool)
    shift, scale = scaling
    for k, (i, (X_all, y_all)) in enumerate(zip(updating, memories, strict=True)):
        m = len(y_all)
        Zt[k, :d, :m] = np.divide(X_all - shift[i], scale[i]).T  # as `_numpy_refit`
        Zt[k, d, :m] = 1.0
        Y[k, :m], rows[k, :m] = y_all, True
    new, kept = newton_refit_batch(theta[updating], Zt, Y, C, tol, max_iter, rows=rows)
    theta[updating], one_class[updating] = new, kept
    return theta, one_class


def last_round_refit_batch(
    theta: np.ndarray,
    X_train: np.ndarray,
    y_train: np.ndarray,
    scaling: tuple[np.ndarray, np.ndarray],
    C: float,
    tol: float,
    max_iter: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The refit of B worlds on their last round's rows alone, the same n in every
    world (`X_train` (B, n, d), standardised with `scaling`'s (B, d) shifts and
    scales): one `newton_refit_batch` of the stack. Returns (θ⁺, one class kept θ)."""
    B, n, d = X_train.shape
    Zt = np.empty((B, d + 1, n))  # the design matrices, transposed (feature-major)
    for j in range(d):  # (feature-major: the standardised columns straight in)
        np.subtract(X_train[..., j], scaling[0][:, j, None], out=Zt[:, j])
        np.divide(Zt[:, j], scaling[1][:, j, None], out=Zt[:, j])
    Zt[:, d] = 1.0
    return newton_refit_batch(theta, Zt, y_train, C, tol, max_iter)
