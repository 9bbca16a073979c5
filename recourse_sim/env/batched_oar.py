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
run in another order than the single learner's, and P and the rows' losses come from
exp(−z) rather than exp(−|z|) (`_at_block`), so losses and parameters agree to
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
    past a world's rows — its labels (W, N), which columns are rows (W, N), and the
    products zₐ zᵦ of each row's features (a ≤ b < d; (W, d (d + 1) / 2, N)), so that
    a Hessian is two products with the curvatures (`_hessian`).

    `X_new` (W, n_new, d): this round's training rows (`new_rows` (W, n_new): which
    are a world's); `old`: per world, the older rounds' rows and labels it keeps;
    `shift`, `scale` (W, d): each learner's standardisation. `members` (W, n_new): the
    rows a collective may move, in `columns` only (`set_members`)."""

    def __init__(
        self,
        X_new: np.ndarray,
        y_new: np.ndarray,
        new_rows: np.ndarray,
        old: list[tuple[np.ndarray, np.ndarray]],
        shift: np.ndarray,
        scale: np.ndarray,
        members: np.ndarray | None = None,
        columns: np.ndarray | None = None,
    ):
        W, n_new, d = X_new.shape
        longest = max((len(y) for _, y in old), default=0)
        N = n_new + longest
        self.n_new, self.d = n_new, d
        self.shift, self.scale = shift, scale
        Zt = np.zeros((W, d + 1, N))
        self.y = np.zeros((W, N))
        self.rows = np.zeros((W, N), bool)
        self.y[:, :n_new] = np.where(new_rows, y_new, 0.0)
        self.rows[:, :n_new] = new_rows
        # ((x + δ) − shift) / scale, as `LogisticRegression._numpy_refit` (δ = 0 here),
        # feature by feature along the rows (a pass over rows, not over d-long ones)
        Z = Zt[:, :d, :n_new]
        Z[...] = X_new.transpose(0, 2, 1)
        Z -= shift[:, :, None]
        Z /= scale[:, :, None]
        Z *= new_rows[:, None, :]  # (padding: zero columns)
        Zt[:, d, :n_new] = new_rows
        for w, (X_old, y_old) in enumerate(old):
            m = len(y_old)
            if m:
                Zt[w, :d, n_new : n_new + m] = ((X_old - shift[w]) / scale[w]).T
                Zt[w, d, n_new : n_new + m] = 1.0
                self.y[w, n_new : n_new + m] = y_old
                self.rows[w, n_new : n_new + m] = True
        self.Zt = Zt
        self.padded = not self.rows.all()
        self.rows_float = self.rows.astype(np.float64) if self.padded else None
        labels = self.rows & (self.y == 1.0), self.rows & (self.y == 0.0)
        self.one_class = ~(labels[0].any(1) & labels[1].any(1))  # (fixed while Δ moves)
        self.not_y = 1.0 - self.y  # (each row's loss is log1p(exp(−z)) + (1 − y) z)
        D = d + 1
        # the products of the features' pairs (a <= b < d): the intercept's entries of a
        # Hessian are Σ c zₐ (its row is 1 on every row, 0 on padding), products with Zt
        upper_a, upper_b = np.triu_indices(d)
        self.pairs = list(zip(upper_a.tolist(), upper_b.tolist(), strict=True))
        self.outer = np.empty((W, len(self.pairs), N))
        for t, (a, b) in enumerate(self.pairs):
            np.multiply(Zt[:, a], Zt[:, b], out=self.outer[:, t])
        self.fill = hessian_fill(D)
        if members is not None:
            self.mw, self.mr = np.nonzero(members)  # member rows, world by world
            self.X_m = X_new[self.mw, self.mr]
            self.columns = np.asarray(columns).tolist()
            self.moving_pairs = [
                (t, a, b)
                for t, (a, b) in enumerate(self.pairs)
                if a in self.columns or b in self.columns
            ]
            # each member row's flat position in Zt (feature 0) and in outer (pair 0), in
            # P (W, N); its design row, column by column (the moving columns rewritten by
            # `set_members`), label and scale
            self._z_at = (self.mw * D) * N + self.mr
            self._outer_at = (self.mw * len(self.pairs)) * N + self.mr
            self.p_at = self.mw * N + self.mr
            self._x_cols = {j: np.ascontiguousarray(self.X_m[:, j]) for j in self.columns}
            self._shift_cols = {j: shift[self.mw, j] for j in self.columns}
            self._scale_cols = {j: scale[self.mw, j] for j in self.columns}
            self._design_m = Zt[self.mw, :, self.mr]
            self.y_m = self.y[self.mw, self.mr]
            self.scale_m = scale[self.mw]
            # each world's first member row and count (rows are world by world)
            self.member_counts = np.bincount(self.mw, minlength=W)
            self.member_starts = np.concatenate([[0], np.cumsum(self.member_counts)[:-1]])

    def set_members(self, sel: np.ndarray | None, delta: np.ndarray) -> None:
        """The member rows `sel` (a mask of them; None: all) become x + `delta` (their
        rows, (k, d); zero outside `columns`)."""
        N = self.Zt.shape[2]
        Z, outer = self.Zt.reshape(-1), self.outer.reshape(-1)
        design = self._design_m
        if sel is None:
            z_at, outer_at = self._z_at, self._outer_at
            for j in self.columns:
                column = ((self._x_cols[j] + delta[:, j]) - self._shift_cols[j]) / (
                    self._scale_cols[j]
                )
                design[:, j] = column
                Z.put(z_at + j * N, column)
            for t, a, b in self.moving_pairs:
                outer.put(outer_at + t * N, design[:, a] * design[:, b])
            return
        z_at, outer_at = self._z_at[sel], self._outer_at[sel]
        rows = design[sel]
        for j in self.columns:
            column = ((self._x_cols[j][sel] + delta[:, j]) - self._shift_cols[j][sel]) / (
                self._scale_cols[j][sel]
            )
            rows[:, j] = column
            Z.put(z_at + j * N, column)
        design[sel] = rows
        for t, a, b in self.moving_pairs:
            outer.put(outer_at + t * N, rows[:, a] * rows[:, b])

    def member_design(self, sel: np.ndarray | None) -> np.ndarray:
        """The design rows (k, D) of the member rows `sel` (None: all)."""
        return self._design_m if sel is None else self._design_m[sel]


# Elementwise passes run over blocks of worlds of about this many numbers (each array
# of a block stays in cache; every number and row sum is the same whatever the block)
_BLOCK_NUMBERS = 65_536


def _blocks(S: int, N: int):
    size = max(1, _BLOCK_NUMBERS // max(N, 1))
    return [slice(a, a + size) for a in range(0, S, size)]


def _at(
    theta: np.ndarray,
    Zt: np.ndarray,
    y: np.ndarray,
    rows,
    C: float,
    risk: bool = True,
    not_y: np.ndarray | None = None,
):
    """(P, risk R(θ) or None) of each world at θ (S, D) (`LogisticRegression._risk_np`
    with its probabilities, binary, intercept last and unpenalised; `rows` (S, N) 0/1
    floats, None: every column is a row; `not_y`: 1 − y, if the caller keeps it), block
    by block of worlds."""
    S, N = y.shape
    if risk and not_y is None:
        not_y = 1.0 - y
    if S * N <= _BLOCK_NUMBERS:
        return _at_block(theta, Zt, y, not_y, rows, C, risk)
    P, f = np.empty((S, N)), np.empty(S) if risk else None
    for b in _blocks(S, N):
        _, f_b = _at_block(
            theta[b],
            Zt[b],
            y[b],
            None if not_y is None else not_y[b],
            None if rows is None else rows[b],
            C,
            risk,
            out=P[b],
        )
        if risk:
            f[b] = f_b
    return P, f


def _at_block(theta, Zt, y, not_y, rows, C: float, risk: bool, out=None):
    """`_at` of one block of worlds (P written into `out` if given): from one exp(−z),
    P = 1 / (1 + exp(−z)) and each row's loss softplus(z) − y z = log1p(exp(−z)) +
    (1 − y) z (the single learner's `softplus_sigmoid` from exp(−|z|) to rounding: as
    accurate, in fewer passes); its own functions where some z is too negative for
    exp(−z) (float64 overflows past 709.78)."""
    neg_z = np.matmul(-theta[:, None, :], Zt)[:, 0]  # −z exactly (negation is exact)
    try:
        with np.errstate(over="raise"):
            E = np.exp(neg_z)
    except FloatingPointError:
        P, f = _at_block_wide(theta, np.negative(neg_z, out=neg_z), y, rows, C, risk)
        if out is not None:
            out[...] = P
        return P, f
    P = np.add(E, 1.0, out=out)
    np.reciprocal(P, out=P)
    if not risk:
        return P, None
    # each row's loss first, as the single learner sums them (softplus and y z summed
    # apart would cancel to far less precision than the Armijo test's slack); labels
    # are 0 or 1, so (1 − y) z is z or 0 exactly
    soft = np.log1p(E, out=E)
    neg_z *= not_y
    soft -= neg_z
    total = np.einsum("sn,sn->s", soft, rows) if rows is not None else soft.sum(1)
    return P, 0.5 * np.einsum("sd,sd->s", theta[:, :-1], theta[:, :-1]) + C * total


def _at_block_wide(theta, z, y, rows, C: float, risk: bool):
    """`_at_block` at logits `z` of any size (`softplus_sigmoid`)."""
    soft, P = softplus_sigmoid(z)
    if not risk:
        return P, None
    soft -= y * z
    total = np.einsum("sn,sn->s", soft, rows) if rows is not None else soft.sum(1)
    return P, 0.5 * np.einsum("sd,sd->s", theta[:, :-1], theta[:, :-1]) + C * total


def hessian_fill(D: int) -> np.ndarray:
    """For each entry of a flattened (D, D) Hessian, its index among `_hessian`'s
    entries: the features' pairs (a <= b < D − 1, `Refits.outer`'s order), then the
    intercept's column (a = 0..D − 1)."""
    d = D - 1
    upper_a, upper_b = np.triu_indices(d)
    fill = np.empty((D, D), np.intp)
    fill[upper_a, upper_b] = fill[upper_b, upper_a] = np.arange(len(upper_a))
    fill[:, d] = fill[d, :] = len(upper_a) + np.arange(D)
    return fill.ravel()


def _hessian(
    Zt: np.ndarray, outer: np.ndarray, P: np.ndarray, y: np.ndarray | None, C: float, fill
) -> tuple[np.ndarray | None, np.ndarray]:
    """(∇R without the penalty's part (S, D), None without `y`; ∇²R (S, D, D)) of each
    world at the probabilities P (`LogisticRegression._grad_np`, `_hessian`, binary):
    C Zᵀ(P − y) and C Zᵀ diag(p(1 − p)) Z plus 1 on the penalised diagonal, the
    intercept's column of the Hessian in one product with the gradient; block by block
    of worlds (the residuals and curvatures stay in cache)."""
    S, N = P.shape
    D = Zt.shape[1]
    pairs = outer.shape[1]
    entries = np.empty((S, pairs + D))
    g = None if y is None else np.empty((S, D))
    for b in _blocks(S, N):
        if y is None:
            curvature = np.subtract(1.0, P[b])
            curvature *= P[b]
            along = np.matmul(Zt[b], curvature[:, :, None])
        else:
            both = np.empty((len(P[b]), 2, N))  # the residuals and the curvatures
            np.subtract(P[b], y[b], out=both[:, 0])
            curvature = both[:, 1]
            np.subtract(1.0, P[b], out=curvature)
            curvature *= P[b]
            along = np.matmul(Zt[b], both.transpose(0, 2, 1))
            g[b] = along[..., 0]
        entries[b, :pairs] = np.matmul(outer[b], curvature[:, :, None])[..., 0]
        entries[b, pairs:] = along[..., -1]
    entries *= C
    H = entries[:, fill].reshape(S, D, D)
    idx = np.arange(D - 1)
    H[:, idx, idx] += 1.0
    if g is not None:
        g *= C
    return g, H


def _solve(H: np.ndarray, g: np.ndarray) -> np.ndarray:
    return np.linalg.solve(H, g[..., None])[..., 0]


def newton_solve(
    start: np.ndarray,
    Zt: np.ndarray,
    outer: np.ndarray,
    fill: np.ndarray,
    y: np.ndarray,
    rows: np.ndarray | None,
    C: float,
    tol: float,
    max_iter: int,
    factor: np.ndarray | None = None,
    has_factor: np.ndarray | None = None,
    active: np.ndarray | None = None,
    one_class: np.ndarray | None = None,
    not_y: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The binary L2 logistic refits of S worlds (`Refits`' arrays; `rows` None: no
    padding, else 0/1 floats; `one_class` and `not_y` = 1 − y where known), each on the
    single learner's own damped Newton path (`LogisticRegression._newton`, two classes,
    few parameters): from `start` (S, D), the first step with the Hessian `factor`
    (S, D, D) where `has_factor` (S,), else a fresh one; Armijo backtracking, full steps
    untested once they halve near θ*, the same tolerance test. Only `active` worlds
    (None: all) are solved. Returns (θ* (S, D), the Hessian at θ*, P at θ* (S, N), the
    Newton step at θ* (θ⁺ = θ* − step), one class (S,): rows of one class, θ kept and
    nothing else meaningful).

    The worlds still iterating are copied out of the batch once they are at most half
    of it (the last iterations of a few worlds cost only theirs)."""
    S, D, _ = Zt.shape
    if one_class is None:
        in_rows = np.ones(y.shape, bool) if rows is None else rows != 0
        one_class = ~((in_rows & (y == 1.0)).any(1) & (in_rows & (y == 0.0)).any(1))
    todo = ~one_class if active is None else active & ~one_class
    out_theta, out_H = np.array(start, dtype=np.float64), np.zeros((S, D, D))
    out_P, out_step = np.zeros(y.shape), np.zeros((S, D))
    ids = np.flatnonzero(todo)  # the working set's worlds
    if not len(ids):
        return out_theta, out_H, out_P, out_step, one_class
    rowsf = rows
    if not_y is None:
        not_y = 1.0 - y
    everyone = len(ids) == S
    if not everyone:
        Zt, outer, y, not_y = Zt[ids], outer[ids], y[ids], not_y[ids]
        rowsf = None if rowsf is None else rowsf[ids]
    th = out_theta[ids]
    P, f = _at(th, Zt, y, rowsf, C, not_y=not_y)
    n = len(ids)
    H = np.empty((n, D, D))
    reuse = np.zeros(n, bool) if has_factor is None else has_factor[ids].copy()
    if reuse.any():
        H[reuse] = factor[ids][reuse]
    fresh = np.zeros(n, bool)
    previous = np.full(n, np.inf)
    going = np.ones(n, bool)  # still iterating, of the working set
    g = np.zeros((n, D))
    step = np.zeros((n, D))

    def finish(idx: np.ndarray) -> None:
        """Working worlds `idx` converged at θ (`LogisticRegression._converged`): the
        Hessian at θ* and its step, fresh where this iteration's was not."""
        at = ids[idx]
        out_theta[at], out_P[at] = th[idx], P[idx]
        stale = idx[~fresh[idx]]
        ok = idx[fresh[idx]]
        out_H[ids[ok]], out_step[ids[ok]] = H[ok], step[ok]
        if len(stale):
            _, Hs = _hessian(Zt[stale], outer[stale], P[stale], None, C, fill)
            out_H[ids[stale]], out_step[ids[stale]] = Hs, _solve(Hs, g[stale])
        going[idx] = False

    for _ in range(max_iter):
        if not going.any():
            break
        if going.sum() <= len(going) // 2:  # copy the few still iterating out
            keep = np.flatnonzero(going)
            ids, th, P, f, H = ids[keep], th[keep], P[keep], f[keep], H[keep]
            reuse, fresh, previous = reuse[keep], fresh[keep], previous[keep]
            Zt, outer, y, not_y = Zt[keep], outer[keep], y[keep], not_y[keep]
            rowsf = None if rowsf is None else rowsf[keep]
            going = np.ones(len(keep), bool)
        need = going & ~reuse
        if need.any():
            g, fresh_H = _hessian(Zt, outer, P, y, C, fill)
            H[need] = fresh_H[need]
            fresh |= need
        else:
            g = C * np.matmul(Zt, (P - y)[:, :, None])[..., 0]
        g[:, :-1] += th[:, :-1]
        step = _solve(H, g)
        step[~going] = 0.0
        step_size = np.abs(step).max(1)
        scale = 1.0 + np.abs(th).max(1)
        done = going & (step_size <= tol * scale)
        if done.any():
            finish(np.flatnonzero(done))
        if not going.any():
            break
        untested = going & (step_size <= 0.5 * previous) & (previous <= _UNTESTED_STEP * scale)
        tested = going & ~untested
        t = np.ones(len(going))
        # the full step of every world at once (untested ones take it as it is; their
        # risk is computed when a test needs it)
        trial = th - step
        any_tested = tested.any()
        if any_tested and np.isnan(f[tested]).any():
            unknown = np.flatnonzero(tested & np.isnan(f))
            rows_u = None if rowsf is None else rowsf[unknown]
            _, f[unknown] = _at(
                th[unknown], Zt[unknown], y[unknown], rows_u, C, True, not_y[unknown]
            )
        trial_P, f_trial = _at(trial, Zt, y, rowsf, C, any_tested, not_y)
        took = untested.copy()
        if any_tested:
            decrease = (g * step).sum(1)
            ok = tested & (f_trial <= (f - ARMIJO * decrease) + F_SLACK * np.abs(f))
            took |= ok
            f[ok] = f_trial[ok]
        else:
            ok = np.zeros(len(going), bool)
        th[took] = trial[took]
        if took.all():
            P = trial_P
        else:
            np.copyto(P, trial_P, where=took[:, None])
        f[untested] = np.nan
        pending = np.flatnonzero(tested & ~ok)
        t[pending] = 0.5
        while len(pending):  # backtracking, each world its own halvings
            go_on = (t[pending] > MIN_STEP) | (
                t[pending] * step_size[pending] > tol * scale[pending]
            )
            stuck = pending[~go_on]
            if len(stuck):  # no further decrease in float64: at the optimum
                finish(stuck)
            pending = pending[go_on]
            if not len(pending):
                break
            trial_p = th[pending] - t[pending, None] * step[pending]
            rows_p = None if rowsf is None else rowsf[pending]
            P_p, f_p = _at(trial_p, Zt[pending], y[pending], rows_p, C, True, not_y[pending])
            fp = f[pending]
            ok_p = f_p <= fp - ARMIJO * t[pending] * decrease[pending] + F_SLACK * np.abs(fp)
            took_p = pending[ok_p]
            th[took_p], f[took_p], P[took_p] = trial_p[ok_p], f_p[ok_p], P_p[ok_p]
            pending = pending[~ok_p]
            t[pending] *= 0.5
        fresh[:] = False
        reuse[:] = False
        previous = np.where(t == 1.0, step_size, np.inf)
    else:
        if going.any():
            warnings.warn(
                f"LogisticRegression: Newton did not converge in max_iter={max_iter} "
                f"iterations in {int(going.sum())} of {S} worlds",
                ConvergenceWarning,
                stacklevel=2,
            )
            idx = np.flatnonzero(going)
            P[idx] = _at(th[idx], Zt[idx], y[idx], None, C, risk=False)[0]
            g[idx] = C * np.matmul(Zt[idx], (P[idx] - y[idx])[:, :, None])[..., 0]
            g[idx, :-1] += th[idx, :-1]
            fresh[idx] = False
            finish(idx)
    return out_theta, out_H, out_P, out_step, one_class


# below this share of the worlds still searching, an evaluation copies theirs out
_COMPACT = 0.75


class _Objective:
    """The OAR objective of W worlds (their `Refits`, with members; queries and goals),
    evaluated for any of them at once, each world's evaluations chained as
    `collective_recourse` chains them (Newton from the last evaluation's θ⁺ with its
    Hessian)."""

    def __init__(self, refits: Refits, Zq, q_rows, goal, theta0, C, tol, max_iter):
        self.refits, self.Zq, self.q_rows, self.goal = refits, Zq, q_rows, goal
        self.n_queries = q_rows.sum(1)
        self.C, self.tol, self.max_iter = C, tol, max_iter
        W, D = theta0.shape
        self.start = np.array(theta0, dtype=np.float64)
        self.factor = np.zeros((W, D, D))
        self.has_factor = np.zeros(W, bool)

    def __call__(self, worlds: np.ndarray, sel: np.ndarray, delta: np.ndarray):
        """(loss, ∂loss/∂x of the member rows `sel` (a mask of the member rows: those of
        `worlds`, sorted) (k, d), θ⁺) of `worlds` at their members' perturbations
        `delta` (k, d)."""
        r, C = self.refits, self.C
        W = len(self.start)
        everyone = len(worlds) == W
        r.set_members(None if everyone else sel, delta)
        if everyone:
            part = slice(None)
            active = None
        elif len(worlds) >= _COMPACT * W:
            part = slice(None)
            active = np.zeros(W, bool)
            active[worlds] = True
        else:
            part = worlds
            active = None
        th_star, H, P, step, one = newton_solve(
            self.start[part],
            r.Zt[part],
            r.outer[part],
            r.fill,
            r.y[part],
            None if r.rows_float is None else r.rows_float[part],
            C,
            self.tol,
            self.max_iter,
            self.factor[part],
            self.has_factor[part],
            active,
            r.one_class[part],
            r.not_y[part],
        )
        if active is not None:  # (computed for every world: theirs only; P kept whole)
            th_star, H, step, one = (a[worlds] for a in (th_star, H, step, one))
        th = th_star - step
        th[one] = th_star[one]  # one class: θ kept
        if everyone:
            Zq, q_rows, m, goal = self.Zq, self.q_rows, self.n_queries, self.goal
        else:
            Zq, q_rows = self.Zq[worlds], self.q_rows[worlds]
            m, goal = self.n_queries[worlds], self.goal[worlds]
        p1 = sigmoid(np.matmul(th[:, None, :], Zq)[:, 0])
        losses, residual = binary_goal_loss(p1, goal[:, None])
        loss = (losses * q_rows).sum(1) / m
        residual = residual * q_rows / m[:, None]
        dtheta = np.matmul(Zq, residual[:, :, None])[..., 0]
        H[one] = np.eye(th.shape[1])  # (any solvable system: their gradient is 0)
        v = _solve(H, dtheta)
        # the members' rows of `refit_hypergradient`'s rank-two gradient: each row's
        # world among `worlds` (k) and its entry of P (whose rows are every world's,
        # or `worlds`' where they were copied out)
        d = r.d
        if everyone:
            k, p_at, ym, scale = r.mw, r.p_at, r.y_m, r.scale_m
        else:
            mw = r.mw[sel]
            k = np.searchsorted(worlds, mw)
            p_at = r.p_at[sel] if active is not None else k * P.shape[1] + r.mr[sel]
            ym, scale = r.y_m[sel], r.scale_m[sel]
        Zm = r.member_design(None if everyone else sel)
        Pm = P.reshape(-1).take(p_at)
        v_k = v.take(k, axis=0)
        along_w = -C * (Pm * (1.0 - Pm)) * np.einsum("rd,rd->r", Zm, v_k)
        along_v = -C * (Pm - ym)
        grad = along_w[:, None] * th_star.take(k, axis=0)[:, :d]
        grad += along_v[:, None] * v_k[:, :d]
        grad /= scale
        if one.any():
            grad[one[k]] = 0.0
        self.start[worlds] = th
        self.factor[worlds] = H
        self.has_factor[worlds] = ~one
        return loss, grad, th


def oar_batch(
    refits: Refits,
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
    """OAR (pgd, horizon 1) of W worlds' collectives, the members of `refits` moving
    their rows: queries `Zq` (W, D, M) (standardised, transposed, the intercept's row
    1; `q_rows` (W, M): which are a world's), goal classes (W,), budgets `eps` (W,) > 0
    of `action_set`'s features, models `theta0` (W, D). Returns (the members'
    perturbations (rows, d), as `refits.mw`, `refits.mr` list them; θ⁺ of each world's
    refit on its perturbed rows, the state the learner's update starts from)."""
    W = len(theta0)
    d = refits.d
    objective = _Objective(refits, Zq, q_rows, goal, theta0, C, tol, max_iter)
    mw, X_m = refits.mw, refits.X_m
    bounds = None if action_set.boxless else action_set.box(X_m)
    box = _Box(bounds, action_set)
    eps_row = eps[mw]
    sets = {
        e: action_set if e == action_set.epsilon else action_set.replace(epsilon=e)
        for e in sorted(set(eps.tolist()))
    }

    def per_set(fn, sel: np.ndarray, *arrays):
        """fn(action set, rows, *their arrays) on the member rows `sel` (a mask), by
        budget (row-wise pieces: the same numbers as on each world's rows alone)."""
        budgets = eps_row[sel]
        if len(sets) == 1 or (budgets == budgets[0]).all():
            aset = sets[budgets[0]] if len(budgets) else action_set
            if sel.all():  # (no copies)
                return fn(aset, slice(None), *arrays)
            return fn(aset, sel, *(a[sel] for a in arrays))
        out = np.zeros((len(mw), d))
        for e, aset in sets.items():
            part = sel & (eps_row == e)
            if part.any():
                out[part] = fn(aset, part, *(a[part] for a in arrays))
        return out[sel]

    def box_of(part: np.ndarray):
        return None if bounds is None else (bounds[0][part], bounds[1][part])

    everyone = np.arange(W)
    all_rows = np.ones(len(mw), bool)
    current = np.zeros((len(mw), d))
    loss, grad_m, state = objective(everyone, all_rows, current)
    step = _INITIAL_STEP * eps
    searching = np.ones(W, bool)
    stall = _STALL_TOL * np.maximum(eps, 1.0)
    counts, starts = refits.member_counts, refits.member_starts
    for _ in range(steps):
        if not searching.any():
            break
        if searching.all():  # every world searching: no copies
            sel, idx = all_rows, slice(None)
            length = step[mw]
            worlds_now = np.flatnonzero(counts)
            first = starts[worlds_now]
        else:
            sel = searching[mw]
            idx = np.flatnonzero(sel)
            length = step[mw[idx]]
            # each searching world's first row among `idx` (its rows are consecutive)
            worlds_now = np.flatnonzero(searching & (counts > 0))
            first = np.cumsum(counts[worlds_now]) - counts[worlds_now]
        moved = np.zeros((len(mw), d)) if isinstance(idx, np.ndarray) else None
        stepped = box.step(
            current[idx], grad_m[idx], length[:, None] if box.p == np.inf else length, idx
        )
        if moved is None:
            moved = stepped
        else:
            moved[idx] = stepped
        trial = per_set(
            lambda aset, part, X, m: aset.project_rows(X, m, box_of(part)), sel, X_m, moved
        )
        # each row's largest change (column by column: a reduction along d is slow)
        diff = np.abs(trial - current[idx])
        change = diff[:, 0].copy()
        for j in range(1, d):
            np.maximum(change, diff[:, j], out=change)
        # each searching world's largest move
        moves = np.zeros(W)
        moves[worlds_now] = np.maximum.reduceat(change, first)
        searching &= moves > stall  # a fixed point: no trial
        worlds = np.flatnonzero(searching)
        if not len(worlds):
            break
        if len(worlds) == W:  # (then every row was stepped: `trial` is every row's)
            now, trial_rows = all_rows, trial
            t_loss, t_grad, t_state = objective(worlds, all_rows, trial)
        else:
            now = searching[mw]
            trial_rows = current.copy()
            trial_rows[idx] = trial
            t_loss, t_grad, t_state = objective(worlds, now, trial_rows[now])
        better = t_loss < loss[worlds]
        took = worlds[better]
        if len(took) == W:
            current, grad_m = trial_rows, t_grad
            loss, state = t_loss, t_state
            step = np.minimum(step * _GROW, _MAX_STEP * eps)
        elif len(took):
            took_rows = np.zeros(W, bool)
            took_rows[took] = True
            took_rows = took_rows[mw]
            np.copyto(current, trial_rows, where=took_rows[:, None])
            grad_m[took_rows] = t_grad[took_rows[now]]
            loss[took], state[took] = t_loss[better], t_state[better]
            step[took] = np.minimum(step[took] * _GROW, _MAX_STEP * eps[took])
        failed = worlds[~better]
        step[failed] *= 0.5
        searching[failed[step[failed] < _MIN_STEP * eps[failed]]] = False
    if action_set.typed:
        _, g_best, _ = objective(everyone, all_rows, current)
        nearest = per_set(lambda aset, part, X, r: aset.repair(X, r), all_rows, X_m, current)

        def direction(aset, part, X, r, g):
            return aset.rounded(X, r, "direction", -g, box_of(part))

        along = per_set(direction, all_rows, X_m, current, g_best)
        over = np.asarray(action_set.cost(along)) > eps_row
        along[over] = nearest[over]
        l_near, _, s_near = objective(everyone, all_rows, nearest)
        l_along, _, s_along = objective(everyone, all_rows, along)
        pick = l_along < l_near
        current = np.where(pick[mw, None], along, nearest)
        state = np.where(pick[:, None], s_along, s_near)
    return current, state
