"""Collective OAR for the controlled collectives of B worlds at once: the batched env's
``action: oar`` (`recourse_sim.env.batched`).

Each world's collective solves what `recourse_sim.recourse.collective_recourse` solves
for it in the single environment (solver ``pgd``, horizon 1, the population's
``steps``): the members' perturbations of their training rows that lower the query
group's goal loss after the learner's refit. Every world takes its own path, decision
for decision: the first step of ε/4, a trial accepted when it lowers the loss (the step
then grows by 5/4, up to ε) and halved otherwise, the search ending after ``steps``
trials, below a step of 10⁻⁶ ε or at a fixed point of the projected step; with feature
types, the relaxed solution rounded two ways and the better kept. What is batched is
each objective evaluation of every world still searching: its refit (`newton_solve`,
the single learner's damped Newton path, warm-started from the world's previous
evaluation with that evaluation's Hessian, as `collective_recourse` chains them) and
the implicit hypergradient (`LogisticRegression.refit_hypergradient`'s closed form).
A world that stops early keeps its solution while the others go on.

The per-row pieces are the single solver's own, called on every world's members at
once: the descent step (`collective._Box`), the projection and the typed rounding
(`ActionSet.project_rows`, `repair`, `rounded`), row by row the same numbers (the
batched env needs a projection that is row-wise: one actionable feature, or p = ∞,
`native_reason`). Sums over rows (the refit's gradient and Hessian, the query loss)
run in another order than the single learner's, so losses and parameters agree to
rounding, not bit for bit.
"""

from __future__ import annotations

import warnings

import numpy as np

from recourse_sim.learners.logistic import _UNTESTED_STEP, ConvergenceWarning
from recourse_sim.learners.logistic_math import (
    ARMIJO,
    F_SLACK,
    MIN_STEP,
    binary_goal_loss,
    sigmoid,
    softplus_sigmoid,
)
from recourse_sim.recourse.action_set import ActionSet
from recourse_sim.recourse.collective import (
    _GROW,
    _INITIAL_STEP,
    _MAX_STEP,
    _MIN_STEP,
    _STALL_TOL,
    _Box,
)

__all__ = ["Refits", "newton_solve", "oar_batch"]


class Refits:
    """The refits of W worlds of one round, padded to one shape: each world's design
    matrix, transposed (W, D, N) with the intercept's row last — this round's rows in
    the first `n_new` columns, the older rounds it remembers after them, zero columns
    past a world's rows — its labels (W, N) and which columns are rows (W, N).

    `X_new` (W, n_new, d): this round's training rows (`new_rows` (W, n_new): which
    are a world's); `old`: per world, the older rounds' rows and labels it keeps;
    `shift`, `scale` (W, d): each learner's standardisation."""

    def __init__(
        self,
        X_new: np.ndarray,
        y_new: np.ndarray,
        new_rows: np.ndarray,
        old: list[tuple[np.ndarray, np.ndarray]],
        shift: np.ndarray,
        scale: np.ndarray,
    ):
        W, n_new, d = X_new.shape
        longest = max((len(y) for _, y in old), default=0)
        N = n_new + longest
        self.n_new, self.d = n_new, d
        self.X_new, self.new_rows = X_new, new_rows
        self.shift, self.scale = shift, scale
        self.Zt = np.zeros((W, d + 1, N))
        self.y = np.zeros((W, N))
        self.rows = np.zeros((W, N), bool)
        self.y[:, :n_new] = np.where(new_rows, y_new, 0.0)
        self.rows[:, :n_new] = new_rows
        self.Zt[:, d, :n_new] = new_rows
        for w, (X_old, y_old) in enumerate(old):
            m = len(y_old)
            if m:
                self.Zt[w, :d, n_new : n_new + m] = ((X_old - shift[w]) / scale[w]).T
                self.Zt[w, d, n_new : n_new + m] = 1.0
                self.y[w, n_new : n_new + m] = y_old
                self.rows[w, n_new : n_new + m] = True
        self.set_new(np.arange(W), np.zeros_like(X_new))

    def set_new(self, worlds: np.ndarray, delta: np.ndarray) -> None:
        """This round's rows of `worlds` become X + `delta` (delta (len(worlds), n_new,
        d)), standardised as `LogisticRegression._numpy_refit` does: ((x + δ) − shift) /
        scale."""
        Z = np.add(self.X_new[worlds], delta)
        Z -= self.shift[worlds, None, :]
        Z /= self.scale[worlds, None, :]
        Z *= self.new_rows[worlds, :, None]  # (padding: zero columns)
        self.Zt[worlds, : self.d, : self.n_new] = Z.transpose(0, 2, 1)


def _risk(theta, logits, y, rows, C: float, with_proba: bool = False):
    """`LogisticRegression._risk_np` of each world (binary, intercept last, unpenalised)."""
    soft, P = softplus_sigmoid(logits)
    loss = soft - y * logits
    loss *= rows
    risk = 0.5 * (theta[:, :-1] ** 2).sum(1) + C * loss.sum(1)
    return (risk, P) if with_proba else risk


def _hessian(Zt: np.ndarray, P: np.ndarray, C: float) -> np.ndarray:
    """∇²R (S, D, D) of each world at the probabilities P (`LogisticRegression._hessian`,
    binary): C Zᵀ diag(p(1 − p)) Z, plus 1 on the penalised diagonal."""
    curvature = P * (1.0 - P)
    H = np.matmul(Zt * curvature[:, None, :], Zt.transpose(0, 2, 1))
    H *= C
    D = Zt.shape[1]
    idx = np.arange(D - 1)
    H[:, idx, idx] += 1.0
    return H


def _solve(H: np.ndarray, g: np.ndarray) -> np.ndarray:
    return np.linalg.solve(H, g[..., None])[..., 0]


def newton_solve(
    start: np.ndarray,
    Zt: np.ndarray,
    y: np.ndarray,
    rows: np.ndarray,
    C: float,
    tol: float,
    max_iter: int,
    factor: np.ndarray | None = None,
    has_factor: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The binary L2 logistic refits of S worlds (`Refits`' arrays), each on the single
    learner's own damped Newton path (`LogisticRegression._newton`, two classes, few
    parameters): from `start` (S, D), the first step with the Hessian `factor` (S, D, D)
    where `has_factor` (S,), else a fresh one; Armijo backtracking, full steps untested
    once they halve near θ*, the same tolerance test. Returns (θ* (S, D), the Hessian at
    θ*, P at θ* (S, N), the Newton step at θ* (θ⁺ = θ* − step), one class (S,): rows of
    one class, θ kept and nothing else meaningful)."""
    S, D, _ = Zt.shape
    th = np.array(start, dtype=np.float64)
    has_one = (rows & (y == 1.0)).any(1)
    has_zero = (rows & (y == 0.0)).any(1)
    one_class = ~(has_one & has_zero)
    logits = np.matmul(th[:, None, :], Zt)[:, 0]
    f, P = _risk(th, logits, y, rows, C, with_proba=True)
    H = np.empty((S, D, D))
    reuse = np.zeros(S, bool) if has_factor is None else has_factor & ~one_class
    if reuse.any():
        H[reuse] = factor[reuse]
    fresh = np.zeros(S, bool)
    previous = np.full(S, np.inf)
    out_theta, out_H = th.copy(), np.zeros((S, D, D))
    out_P, out_step = P.copy(), np.zeros((S, D))
    todo = ~one_class
    g = np.zeros((S, D))
    step = np.zeros((S, D))

    def finish(idx: np.ndarray) -> None:
        """Worlds `idx` converged at θ (`LogisticRegression._converged`): the Hessian at
        θ* and its step, fresh where this iteration's was not."""
        out_theta[idx], out_P[idx] = th[idx], P[idx]
        stale = idx[~fresh[idx]]
        ok = idx[fresh[idx]]
        out_H[ok], out_step[ok] = H[ok], step[ok]
        if len(stale):
            Hs = _hessian(Zt[stale], P[stale], C)
            out_H[stale], out_step[stale] = Hs, _solve(Hs, g[stale])

    for _ in range(max_iter):
        if not todo.any():
            break
        g = C * np.matmul(Zt, (P - y)[:, :, None])[..., 0]
        g[:, :-1] += th[:, :-1]
        need = todo & ~reuse
        if need.any():
            H[need] = _hessian(Zt[need], P[need], C)
            fresh |= need
        idx = np.flatnonzero(todo)
        step = np.zeros((S, D))
        step[idx] = _solve(H[idx], g[idx])
        step_size = np.abs(step).max(1)
        scale = 1.0 + np.abs(th).max(1)
        done = todo & (step_size <= tol * scale)
        if done.any():
            finish(np.flatnonzero(done))
            todo &= ~done
        untested = todo & (step_size <= 0.5 * previous) & (previous <= _UNTESTED_STEP * scale)
        tested = todo & ~untested
        t = np.ones(S)
        if untested.any():
            u = np.flatnonzero(untested)
            th[u] = th[u] - step[u]
            f[u] = np.nan
            P[u] = sigmoid(np.matmul(th[u, None, :], Zt[u])[:, 0])
        if tested.any():
            unknown = np.flatnonzero(tested & np.isnan(f))
            if len(unknown):
                lg = np.matmul(th[unknown, None, :], Zt[unknown])[:, 0]
                f[unknown] = _risk(th[unknown], lg, y[unknown], rows[unknown], C)
            decrease = (g * step).sum(1)
            pending = np.flatnonzero(tested)
            while len(pending):
                trial = th[pending] - t[pending, None] * step[pending]
                lg = np.matmul(trial[:, None, :], Zt[pending])[:, 0]
                f_new, P_new = _risk(trial, lg, y[pending], rows[pending], C, with_proba=True)
                fp = f[pending]
                ok = f_new <= fp - ARMIJO * t[pending] * decrease[pending] + F_SLACK * np.abs(fp)
                took = pending[ok]
                th[took], f[took], P[took] = trial[ok], f_new[ok], P_new[ok]
                rejected = pending[~ok]
                t[rejected] *= 0.5
                go_on = (t[rejected] > MIN_STEP) | (
                    t[rejected] * step_size[rejected] > tol * scale[rejected]
                )
                stuck = rejected[~go_on]
                if len(stuck):  # no further decrease in float64: at the optimum
                    finish(stuck)
                    todo[stuck] = False
                pending = rejected[go_on]
        fresh[:] = False
        reuse[:] = False
        previous = np.where(t == 1.0, step_size, np.inf)
    else:
        if todo.any():
            warnings.warn(
                f"LogisticRegression: Newton did not converge in max_iter={max_iter} "
                f"iterations in {int(todo.sum())} of {S} worlds",
                ConvergenceWarning,
                stacklevel=2,
            )
            idx = np.flatnonzero(todo)
            P[idx] = sigmoid(np.matmul(th[idx, None, :], Zt[idx])[:, 0])
            g[idx] = C * np.matmul(Zt[idx], (P[idx] - y[idx])[:, :, None])[..., 0]
            g[idx, :-1] += th[idx, :-1]
            fresh[idx] = False
            finish(idx)
    out_theta[one_class] = th[one_class]
    return out_theta, out_H, out_P, out_step, one_class


class _Objective:
    """The OAR objective of W worlds (their `Refits`, queries and goals), evaluated for
    any of them at once, each world's evaluations chained as `collective_recourse`
    chains them (Newton from the last evaluation's θ⁺ with its Hessian)."""

    def __init__(self, refits: Refits, Zq, q_rows, goal, theta0, C, tol, max_iter):
        self.refits, self.Zq, self.q_rows, self.goal = refits, Zq, q_rows, goal
        self.n_queries = q_rows.sum(1)
        self.C, self.tol, self.max_iter = C, tol, max_iter
        W, D = theta0.shape
        self.start = np.array(theta0, dtype=np.float64)
        self.factor = np.zeros((W, D, D))
        self.has_factor = np.zeros(W, bool)

    def __call__(self, worlds: np.ndarray, delta: np.ndarray):
        """(loss, ∂loss/∂X of this round's rows (len(worlds), n_new, d), θ⁺) of `worlds`
        at their perturbations `delta` (len(worlds), n_new, d)."""
        r, C = self.refits, self.C
        r.set_new(worlds, delta)
        Zt = r.Zt[worlds]
        th_star, H, P, step, one = newton_solve(
            self.start[worlds],
            Zt,
            r.y[worlds],
            r.rows[worlds],
            C,
            self.tol,
            self.max_iter,
            self.factor[worlds],
            self.has_factor[worlds],
        )
        th = th_star - step
        th[one] = th_star[one]  # one class: θ kept
        Zq, q_rows, m = self.Zq[worlds], self.q_rows[worlds], self.n_queries[worlds]
        p1 = sigmoid(np.matmul(th[:, None, :], Zq)[:, 0])
        losses, residual = binary_goal_loss(p1, self.goal[worlds, None])
        loss = (losses * q_rows).sum(1) / m
        residual = residual * q_rows / m[:, None]
        dtheta = np.matmul(Zq, residual[:, :, None])[..., 0]
        H[one] = np.eye(th.shape[1])  # (any solvable system: their gradient is 0)
        v = _solve(H, dtheta)
        n, d = r.n_new, r.d
        Zn, Pn, yn = Zt[:, :, :n], P[:, :n], r.y[worlds, :n]
        along_w = -C * (Pn * (1.0 - Pn)) * np.matmul(v[:, None, :], Zn)[:, 0]
        along_v = -C * (Pn - yn)
        grad = along_w[..., None] * th_star[:, None, :d] + along_v[..., None] * v[:, None, :d]
        grad /= r.scale[worlds, None, :]
        grad[one] = 0.0
        self.start[worlds] = th
        self.factor[worlds] = H
        self.has_factor[worlds] = ~one
        return loss, grad, th


def oar_batch(
    refits: Refits,
    members: np.ndarray,
    Zq: np.ndarray,
    q_rows: np.ndarray,
    goal: np.ndarray,
    eps: np.ndarray,
    action_set: ActionSet,
    theta0: np.ndarray,
    steps: int,
    C: float,
    tol: float,
    max_iter: int,
) -> tuple[np.ndarray, np.ndarray]:
    """OAR (pgd, horizon 1) of W worlds' collectives: `members` (W, n_new) of this
    round's rows (`refits`), queries `Zq` (W, D, M) (standardised, transposed, the
    intercept's row 1; `q_rows` (W, M): which are a world's), goal classes (W,), budgets
    `eps` (W,) > 0 of `action_set`'s features, models `theta0` (W, D). Returns (the
    perturbations (W, n_new, d), zero for non-members; θ⁺ of each world's refit on its
    perturbed rows, the state the learner's update starts from)."""
    W, n_new, d = refits.X_new.shape
    objective = _Objective(refits, Zq, q_rows, goal, theta0, C, tol, max_iter)
    mw, mr = np.nonzero(members)  # member rows, world by world
    X_m = refits.X_new[mw, mr]
    bounds = None if action_set.boxless else action_set.box(X_m)
    box = _Box(bounds, action_set)
    eps_row = eps[mw]
    sets = {
        e: action_set if e == action_set.epsilon else action_set.replace(epsilon=e)
        for e in sorted(set(eps.tolist()))
    }

    def full(rows: np.ndarray, worlds: np.ndarray, sel: np.ndarray) -> np.ndarray:
        """Δ (len(worlds), n_new, d) of `worlds` from their member rows `rows` (`sel`:
        the member rows of those worlds)."""
        out = np.zeros((W, n_new, d))
        out[mw[sel], mr[sel]] = rows
        return out[worlds]

    def per_set(fn, sel: np.ndarray, *arrays):
        """fn(action set, *rows) on the member rows `sel`, by budget (row-wise pieces:
        the same numbers as on each world's rows alone)."""
        out = None
        for e, aset in sets.items():
            part = sel & (eps_row == e)
            if not part.any():
                continue
            got = fn(aset, part, *(a[part] for a in arrays))
            if out is None:
                out = np.zeros((len(mw), *got.shape[1:]), got.dtype)
            out[part] = got
        return out[sel]

    everyone = np.arange(W)
    all_rows = np.ones(len(mw), bool)
    loss, grad, state = objective(everyone, np.zeros((W, n_new, d)))
    grad_m = grad[mw, mr]
    current = np.zeros((len(mw), d))
    step = _INITIAL_STEP * eps
    searching = np.ones(W, bool)
    stall = _STALL_TOL * np.maximum(eps, 1.0)
    for _ in range(steps):
        if not searching.any():
            break
        sel = searching[mw]
        idx = np.flatnonzero(sel)
        length = step[mw[idx]]
        moved = box.step(
            current[idx], grad_m[idx], length[:, None] if box.p == np.inf else length, idx
        )
        trial = per_set(
            lambda aset, part, X, m: aset.project_rows(
                X, m, None if bounds is None else (bounds[0][part], bounds[1][part])
            ),
            sel,
            X_m,
            _spread(moved, idx, len(mw)),
        )
        change = np.abs(trial - current[idx]).max(1)
        moves = np.zeros(W)
        np.maximum.at(moves, mw[idx], change)
        searching &= moves > stall  # a fixed point: no trial
        worlds = np.flatnonzero(searching)
        if not len(worlds):
            break
        sel_now = searching[mw]
        rows_now = sel_now[idx]
        trial_rows = current.copy()
        trial_rows[idx[rows_now]] = trial[rows_now]
        t_loss, t_grad, t_state = objective(worlds, full(trial_rows[sel_now], worlds, sel_now))
        better = t_loss < loss[worlds]
        took = worlds[better]
        if len(took):
            rows_took = np.isin(mw, took)
            current[rows_took] = trial_rows[rows_took]
            loss[took], state[took] = t_loss[better], t_state[better]
            grad_m[rows_took] = t_grad[_local(mw[rows_took], worlds), mr[rows_took]]
            step[took] = np.minimum(step[took] * _GROW, _MAX_STEP * eps[took])
        failed = worlds[~better]
        step[failed] *= 0.5
        searching[failed[step[failed] < _MIN_STEP * eps[failed]]] = False
    if action_set.typed:
        _, g_best, _ = objective(everyone, full(current, everyone, all_rows))
        g_rows = g_best[mw, mr]
        nearest = per_set(lambda aset, part, X, r: aset.repair(X, r), all_rows, X_m, current)

        def direction(aset, part, X, r, g):
            box_part = None if bounds is None else (bounds[0][part], bounds[1][part])
            return aset.rounded(X, r, "direction", -g, box_part)

        along = per_set(
            direction,
            all_rows,
            X_m,
            current,
            g_rows,
        )
        over = np.asarray(action_set.cost(along)) > eps_row
        along[over] = nearest[over]
        l_near, _, s_near = objective(everyone, full(nearest, everyone, all_rows))
        l_along, _, s_along = objective(everyone, full(along, everyone, all_rows))
        pick = l_along < l_near
        current = np.where(pick[mw, None], along, nearest)
        state = np.where(pick[:, None], s_along, s_near)
    delta = np.zeros((W, n_new, d))
    delta[mw, mr] = current
    return delta, state


def _spread(rows: np.ndarray, idx: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n, rows.shape[1]))
    out[idx] = rows
    return out


def _local(world_of_rows: np.ndarray, worlds: np.ndarray) -> np.ndarray:
    """Each row's position among `worlds` (sorted) by its world."""
    return np.searchsorted(worlds, world_of_rows)
