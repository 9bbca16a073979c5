"""Exact cheapest recourse for a linear score over mixed feature types.

Per row: min ‖w ⊙ δ‖_p subject to c·δ ≥ gap (the score reaches the decision), δ in the
action set's box at x (bounds, immutables, monotone rules, max_change) and the feature
types of `ActionSet`:

* integer: δ_j ∈ step_j·ℤ (an integer variable k_j, δ_j = step_j·k_j);
* binary, ordinal, single-column categorical: x_j + δ_j is one of the allowed levels
  (one 0/1 variable per level other than x_j, at most one of them on);
* a one-hot group: the person stays at their level or switches to one other level
  (one 0/1 variable per level, at most one on); the switch's δ is e_k − x_G.

A level, or a switch, that moves the score down is never part of a cheapest answer
(staying costs nothing and gains nothing) and is left out; so is a move of an integer
or continuous feature against its coefficient's sign. Each discrete choice's gain and
cost are constants, so for p = 1 and p = ∞ the problem is a mixed-integer linear
program, solved exactly by HiGHS through `scipy.optimize.milp` (relative MIP gap 0).
The answer's discrete part is then kept and its continuous part re-solved in closed
form (`cheapest_box_recourse`), so that the returned δ meets c·δ ≥ gap exactly rather
than within the solver's feasibility tolerance, at a cost no higher than the solver's.

p = 2 is solved by outer approximation: the squared cost is separable, Σ w_j² δ_j² over
the integer and continuous features (the discrete choices' squared costs are constants),
so each w_j² δ_j² is bounded from below by its tangents; the mixed-integer program over
those tangents gives a lower bound, its discrete choice with the continuous part in
closed form an upper bound, and each round adds the tangents at both answers. The loop
stops when the two agree to `rtol` (relative, on the cost ‖w ⊙ δ‖₂) or after
`max_rounds`; the certified relative gap (upper − lower) / upper is returned per row.

Rows first go through the continuous relaxation (every discrete feature relaxed to the
interval of its allowed moves, a one-hot column to [−x, 1 − x]): where it is
unreachable, so is the typed problem; where its closed-form answer already respects
the types, it is the typed optimum. Only the other rows reach the solver, one small
program per row (d variables plus one per allowed level).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recourse_sim.recourse.action_set import ActionSet
from recourse_sim.recourse.individual import cheapest_box_recourse

LEVEL_TYPES = ("binary", "ordinal", "categorical")
_TOL = 1e-9  # how far from a grid point or level a value may be and still count as on it


@dataclass(frozen=True)
class MixedResult:
    """Per-row answer of `mixed_cheapest_recourse`."""

    delta: np.ndarray  # (n, d) the cheapest typed δ (0 where unreachable)
    reachable: np.ndarray  # (n,) some typed δ in the box reaches the gap
    cost: np.ndarray  # (n,) ‖w ⊙ δ‖_p (inf where unreachable)
    gap: np.ndarray  # (n,) certified relative optimality gap: 0 for p ∈ {1, ∞}
    solved_rows: int  # rows that needed the mixed-integer solver


@dataclass(frozen=True)
class _Types:
    """The typed part of an action set, as plain arrays."""

    step: np.ndarray  # (d,) grid step of integer features, 0 elsewhere
    levels: dict[int, np.ndarray]  # single-column features with a finite set of values
    groups: tuple[np.ndarray, ...]  # one-hot groups' column indices

    @property
    def in_unit(self) -> np.ndarray:
        """Mask of the features whose value is one of a finite set of choices."""
        mask = np.zeros(len(self.step), bool)
        mask[list(self.levels)] = True
        for g in self.groups:
            mask[g] = True
        return mask

    @property
    def discrete(self) -> np.ndarray:
        return self.in_unit | (self.step > 0)


def feature_types(action_set: ActionSet) -> _Types:
    """The action set's integer steps, levels and one-hot groups (none on an untyped set)."""
    d = action_set.n_features
    types = getattr(action_set, "types_", None)
    if types is None:
        return _Types(np.zeros(d), {}, ())
    types = np.asarray(types)
    groups = tuple(np.asarray(g, dtype=np.int64) for g in action_set.onehot_groups_)
    in_group = np.zeros(d, bool)
    for g in groups:
        in_group[g] = True
    step = np.where(types == "integer", np.asarray(action_set.step_, dtype=np.float64), 0.0)
    levels: dict[int, np.ndarray] = {}
    for j in np.flatnonzero(np.isin(types, LEVEL_TYPES) & ~in_group):
        given = action_set.levels_.get(int(j))
        if given is None and types[j] == "binary":
            given = np.array([0.0, 1.0])
        levels[int(j)] = np.unique(np.asarray(given, dtype=np.float64))
    return _Types(step, levels, groups)


def mixed_cheapest_recourse(
    coef: np.ndarray,
    gap: np.ndarray,
    X: np.ndarray,
    action_set: ActionSet,
    *,
    rtol: float = 1e-6,
    max_rounds: int = 40,
) -> MixedResult:
    """min ‖w ⊙ δ‖_p subject to c·δ ≥ gap, δ in the action set's box at x and of its
    feature types, per row (`coef` c: (n, d), `gap`: (n,), ≤ 0 needs nothing). Exact for
    p ∈ {1, ∞}; for p = 2 to the relative gap `rtol` where `max_rounds` of outer
    approximation suffice (the gap reached is returned). The ε-ball is not imposed: the
    caller compares the cost, as for `cheapest_linear_recourse`."""
    c = np.asarray(coef, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    gap = np.broadcast_to(np.asarray(gap, dtype=np.float64), (len(X),))
    c = np.broadcast_to(c, X.shape)
    lo, hi = action_set.box(X)
    w, p = action_set.weights_, action_set.p
    types = feature_types(action_set)
    units = _units(types, X, c, lo, hi)
    rlo, rhi = _relaxed_box(types, units, lo, hi)
    delta, _ = cheapest_box_recourse(c, gap, rlo, rhi, w, p)
    # integer and continuous features move only in their gaining direction
    reach = np.where(c > 0, hi, np.where(c < 0, -lo, 0.0))
    reachable = (gap <= 0) | (gap <= _largest_gain(types, units, c, reach))
    n = len(X)
    rel_gap = np.zeros(n)
    todo = np.flatnonzero(reachable & (gap > 0) & ~_respects(types, X, delta))
    if len(todo) and p == 1:
        delta[todo] = _branch_and_bound(
            c[todo],
            gap[todo],
            X[todo],
            rlo[todo],
            rhi[todo],
            w,
            types,
            [u.rows(todo) for u in units],
        )
    elif len(todo) and p == np.inf:
        delta[todo] = _cost_bisection(
            c[todo], gap[todo], reach[todo], _norm(w * delta[todo], p), w, types,
            [u.rows(todo) for u in units],
        )  # fmt: skip
    elif len(todo):
        # each row's objective is scaled so that its lower bound, the relaxation's cost,
        # is 1: HiGHS's absolute gap tolerance (1e-6) is then a relative one per row
        relaxed_cost = _norm(w * delta[todo], p)
        scale = 1.0 / np.maximum(relaxed_cost, 1e-300)
        rows = [
            _RowProgram(i, c[i], gap[i], reach[i], types, units, w, p, s, lower)
            for i, s, lower in zip(todo, scale, relaxed_cost, strict=True)
        ]
        _solve(rows, rtol, max_rounds)
        delta[todo] = [row.best for row in rows]
        rel_gap[todo] = [row.gap for row in rows]
    delta[~reachable] = 0.0
    cost = np.where(reachable, _norm(w * delta, p), np.inf)
    return MixedResult(delta, reachable, cost, rel_gap, len(todo))


def _largest_gain(types: _Types, units: list[_Unit], c: np.ndarray, reach: np.ndarray):
    """Each row's largest c·δ over the typed moves in the box."""
    span = reach.copy()
    grid = types.step > 0
    span[:, grid] = np.floor(reach[:, grid] / types.step[grid] + _TOL) * types.step[grid]
    with np.errstate(invalid="ignore"):  # inf · 0
        gain = np.where(types.in_unit | (c == 0), 0.0, np.abs(c) * span).sum(1)
    for u in units:
        gain += np.where(u.useful, u.gain, 0.0).max(1, initial=0.0)
    return gain


def _branch_and_bound(c, gap, X, lo, hi, w, types: _Types, units: list[_Unit]) -> np.ndarray:
    """p = 1: best-bound-free branch and bound, all rows' open nodes at once. A node is
    a box [lo, hi] on δ whose discrete features' ends are allowed moves; its bound is the
    box's continuous optimum (a knapsack in closed form). A node whose optimum respects
    the types is a candidate; else it splits on the first discrete feature off its grid
    (below / above its value) or, that failing, the first one-hot group not at a level
    (one child per useful switch and one that stays)."""
    n, d = c.shape
    best = np.zeros((n, d))
    incumbent = np.full(n, np.inf)
    row = np.arange(n)
    moves = _allowed_moves(types, units, d)
    while len(row):
        # the cost of a box is that of its point nearest 0 plus the knapsack from there
        # (every move the knapsack makes is away from 0, so the costs add)
        base = np.clip(0.0, lo, hi)
        need = gap[row] - np.einsum("nd,nd->n", c[row], base)
        step, ok = cheapest_box_recourse(c[row], need, lo - base, hi - base, w, 1)
        delta = base + step
        bound = np.abs(delta) @ w
        alive = ok & (bound < incumbent[row] * (1 - 1e-12))
        done = alive & _respects(types, X[row], delta)
        for k in np.flatnonzero(done):  # (few: one per row and round at most, mostly)
            i = row[k]
            if bound[k] < incumbent[i]:
                incumbent[i], best[i] = bound[k], delta[k]
        split = alive & ~done
        row, lo, hi, delta = row[split], lo[split], hi[split], delta[split]
        if not len(row):
            break
        row, lo, hi = _split(row, lo, hi, delta, X, types, units, moves)
    return best


def _allowed_moves(types: _Types, units: list[_Unit], d: int):
    """Per single-column discrete feature j: (n, m) sorted allowed moves (NaN padding;
    None for integers, whose moves are the grid)."""
    out = {}
    for u in units:
        if len(u.cols) == 1 and int(u.cols[0]) in types.levels:
            m = np.where(u.useful, u.moves[:, :, 0], np.nan)
            out[int(u.cols[0])] = np.sort(np.concatenate([m, np.zeros((len(m), 1))], 1), 1)
    return out


def _split(row, lo, hi, delta, X, types: _Types, units: list[_Unit], moves):
    """The children of nodes whose optimum δ breaks the types (see `_branch_and_bound`)."""
    n, d = delta.shape
    off = np.zeros((n, d), bool)
    grid = types.step > 0
    if grid.any():
        k = delta[:, grid] / types.step[grid]
        off[:, grid] = np.abs(k - np.round(k)) > _TOL
    for j, m in moves.items():
        off[:, j] = ~(np.abs(m[row] - delta[:, j, None]) <= _TOL).any(1)
    single = off.any(1)
    children = []
    if single.any():
        k = np.flatnonzero(single)
        j = off[k].argmax(1)
        v = delta[k, j]
        below, above = np.empty(len(k)), np.empty(len(k))
        on_grid = grid[j]
        s, vg = types.step[j[on_grid]], v[on_grid]
        below[on_grid], above[on_grid] = np.floor(vg / s) * s, np.ceil(vg / s) * s
        for f in np.unique(j[~on_grid]):
            sel = np.flatnonzero((j == f) & ~on_grid)
            m = moves[int(f)][row[k[sel]]]
            with np.errstate(invalid="ignore"):
                below[sel] = np.nanmax(np.where(m < v[sel, None], m, np.nan), 1)
                above[sel] = np.nanmin(np.where(m > v[sel, None], m, np.nan), 1)
        for end, side in ((below, hi), (above, lo)):
            keep = ~np.isnan(end)
            lo_c, hi_c = lo[k[keep]].copy(), hi[k[keep]].copy()
            (hi_c if side is hi else lo_c)[np.arange(keep.sum()), j[keep]] = end[keep]
            fits = (lo_c <= hi_c + _TOL).all(1)
            children.append((row[k[keep]][fits], lo_c[fits], hi_c[fits]))
    rest = np.flatnonzero(~single)
    if len(rest):
        # a one-hot group off its levels: fix it to each useful switch, or to staying
        broken = ~_respects_groups(types, X[row[rest]], delta[rest])
        g = broken.argmax(1)
        for gi, u in enumerate(
            u for u in units if len(u.cols) > 1 or int(u.cols[0]) not in types.levels
        ):
            sel = rest[g == gi]
            if not len(sel):
                continue
            options = [(np.zeros((len(sel), len(u.cols))), np.ones(len(sel), bool))]
            options += [
                (u.moves[row[sel], o], u.useful[row[sel], o]) for o in range(u.moves.shape[1])
            ]
            for move, useful in options:
                lo_c, hi_c = lo[sel].copy(), hi[sel].copy()
                lo_c[:, u.cols] = hi_c[:, u.cols] = move
                children.append((row[sel][useful], lo_c[useful], hi_c[useful]))
    return tuple(np.concatenate(parts) for parts in zip(*children, strict=True))


def _respects_groups(types: _Types, X: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """(n, groups): whether each one-hot group of δ stays or lands on a level."""
    out = np.ones((len(X), len(types.groups)), bool)
    for k, g in enumerate(types.groups):
        only = _Types(np.zeros(len(types.step)), {}, (g,))
        out[:, k] = _respects(only, X, delta)
    return out


def _cost_bisection(c, gap, reach, lower, w, types: _Types, units: list[_Unit]) -> np.ndarray:
    """p = ∞: the least cost t at which the largest gain G(t) of moves costing ≤ t each
    reaches the gap. G is separable (each feature or unit takes its best move within t)
    and non-decreasing, so t is bisected (to float precision; from the relaxation's cost
    up); the discrete moves of the final t are kept and the continuous part re-solved
    in closed form (no dearer than t)."""
    n = len(c)
    linear = ~types.in_unit & (c != 0)
    step = np.where(types.step > 0, types.step, 0.0)
    absc = np.abs(c)
    unit_cost = [np.abs(u.moves * w[u.cols]).max(2) for u in units]

    def moves_within(t: np.ndarray):
        """(the linear features' moves |δ_j| within cost t, each unit's best option or −1)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            size = np.where(w > 0, t[:, None] / np.where(w > 0, w, 1.0), np.inf)
            size = np.minimum(size, reach)
            size = np.where(
                step > 0, np.floor(size / np.where(step > 0, step, 1.0) + _TOL) * step, size
            )
        size = np.where(linear, size, 0.0)
        picks = []
        for u, cost in zip(units, unit_cost, strict=True):
            gain = np.where(u.useful & (cost <= t[:, None]), u.gain, 0.0)
            picks.append(np.where(gain.max(1, initial=0.0) > 0, gain.argmax(1), -1))
        return size, picks

    def largest_gain(t: np.ndarray) -> np.ndarray:
        size, picks = moves_within(t)
        with np.errstate(invalid="ignore"):
            gain = np.where(size > 0, absc * size, 0.0).sum(1)
        for u, pick in zip(units, picks, strict=True):
            gain += np.where(pick >= 0, u.gain[np.arange(n), pick], 0.0)
        return gain

    low = np.maximum(lower, 0.0) * (1 - 1e-12)
    high = np.maximum(lower, 1e-300)
    for _ in range(2100):  # doubling: the dearest useful move bounds t (or float's end)
        short = largest_gain(high) < gap
        if not short.any():
            break
        low = np.where(short, high, low)
        high = np.where(short, high * 2, high)
    for _ in range(200):
        if (high - low <= 1e-15 * high).all():
            break
        mid = 0.5 * (low + high)
        enough = largest_gain(mid) >= gap
        high, low = np.where(enough, mid, high), np.where(enough, low, mid)
    size, picks = moves_within(high)
    delta = np.where(types.step > 0, np.sign(c) * size, 0.0)
    for u, pick in zip(units, picks, strict=True):
        chosen = pick >= 0
        delta[np.ix_(chosen, u.cols)] = u.moves[np.flatnonzero(chosen), pick[chosen]]
    cont = linear & (types.step == 0)
    residual = gap - np.einsum("nd,nd->n", c, delta)
    if cont.any():
        lo = np.where(cont & (c < 0), -reach, 0.0)
        hi = np.where(cont & (c > 0), reach, 0.0)
        move, _ = cheapest_box_recourse(np.where(cont, c, 0.0), residual, lo, hi, w, np.inf)
        delta = np.where(cont & (residual > 0)[:, None], move, delta)
    return delta


def _solve(rows: list[_RowProgram], rtol: float, max_rounds: int) -> None:
    """Solve the rows' programs, `_BATCH` rows to one call of HiGHS (their variables
    and constraints side by side: the sum of independent objectives is least where each
    is), for p = 2 round after round of outer approximation until each row converged."""
    active = rows
    for _ in range(max_rounds if rows[0].p == 2 else 1):
        for start in range(0, len(active), _BATCH):
            batch = active[start : start + _BATCH]
            xs = _milp_batch([row.program() for row in batch])
            for row, x in zip(batch, xs, strict=True):
                row.update(x, rtol)
        active = [row for row in active if not row.converged]
        if not active:
            break


def _norm(a: np.ndarray, p: float) -> np.ndarray:
    return np.linalg.norm(a, ord=p, axis=-1)


@dataclass(frozen=True)
class _Unit:
    """One finite choice per row: a single-column feature's level or a one-hot switch."""

    cols: np.ndarray  # (k,) the features it sets
    moves: np.ndarray  # (n, m, k) δ on those columns of each option
    useful: np.ndarray  # (n, m) the option is in the box and raises the score
    gain: np.ndarray  # (n, m) c·δ of each option

    def rows(self, which: np.ndarray) -> _Unit:
        return _Unit(self.cols, self.moves[which], self.useful[which], self.gain[which])


def _units(types: _Types, X, c, lo, hi) -> list[_Unit]:
    units = []
    for j, levels in types.levels.items():
        moves = (levels[None, :] - X[:, j, None])[:, :, None]
        units.append(_unit(np.array([j]), moves, c, lo, hi))
    for g in types.groups:
        moves = np.eye(len(g))[None, :, :] - X[:, None, g]  # switching to level k: e_k − x_G
        units.append(_unit(g, moves, c, lo, hi))
    return units


def _unit(cols, moves, c, lo, hi) -> _Unit:
    lo_u, hi_u = lo[:, None, cols], hi[:, None, cols]
    inside = ((moves >= lo_u - _TOL) & (moves <= hi_u + _TOL)).all(-1)
    gain = np.einsum("nmk,nk->nm", moves, c[:, cols])
    moves = np.clip(moves, lo_u, hi_u)  # (by a tolerance's worth at most)
    return _Unit(cols, moves, inside & (gain > 0), gain)


def _relaxed_box(types: _Types, units: list[_Unit], lo, hi):
    """The box with each discrete feature relaxed to the interval of its allowed moves
    (a superset of the typed choices, so its optimum is a lower bound)."""
    rlo, rhi = lo.copy(), hi.copy()
    grid = types.step > 0
    if grid.any():
        s = types.step[grid]
        rlo[:, grid] = np.ceil(lo[:, grid] / s - _TOL) * s
        rhi[:, grid] = np.floor(hi[:, grid] / s + _TOL) * s
    for u in units:
        for k, j in enumerate(u.cols):
            m = np.where(u.useful, u.moves[:, :, k], 0.0)
            rlo[:, j] = np.minimum(m.min(1), 0.0)
            rhi[:, j] = np.maximum(m.max(1), 0.0)
    return rlo, rhi


def _respects(types: _Types, X: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Which rows of δ respect the feature types (within `_TOL`); not moving always does."""
    ok = np.ones(len(X), bool)
    grid = types.step > 0
    if grid.any():
        k = delta[:, grid] / types.step[grid]
        ok &= (np.abs(k - np.round(k)) <= _TOL).all(1)
    for j, levels in types.levels.items():
        value = X[:, j] + delta[:, j]
        on_level = (np.abs(value[:, None] - levels[None, :]) <= _TOL).any(1)
        ok &= on_level | (np.abs(delta[:, j]) <= _TOL)
    for g in types.groups:
        value = X[:, g] + delta[:, g]
        rounded = np.round(value)
        one_hot = (np.abs(value - rounded) <= _TOL).all(1) & np.isin(rounded, (0.0, 1.0)).all(1)
        one_hot &= rounded.sum(1) == 1.0
        ok &= one_hot | (np.abs(delta[:, g]) <= _TOL).all(1)
    return ok


class _RowProgram:
    """One row's mixed-integer program. Variables: v_j ≥ 0 for each integer or
    continuous feature that can move the score (δ_j = sign(c_j)·scale_j·v_j, scale_j the
    integer step, v_j integer; or 1, v_j real), then a 0/1 variable per useful option of
    each unit (at most one per unit); p = ∞ adds the cost t, p = 2 an epigraph variable
    per linear feature. The objective is multiplied by `weight` (> 0)."""

    def __init__(self, i, c, gap, reach, types: _Types, units: list[_Unit], w, p, weight, lower):
        self.c, self.target, self.reach, self.w, self.p = c, gap, reach, w, p
        self.weight = weight
        self.lower_sq = lower**2  # p = 2: the squared cost's best lower bound so far
        self.best, self.best_sq, self.gap, self.converged = None, np.inf, np.inf, False
        self.d = len(c)
        linear = ~types.in_unit
        self.lin = np.flatnonzero(linear & (c != 0) & (reach > 0))
        step = types.step[self.lin]
        self.integer = step > 0
        self.scale = np.where(self.integer, step, 1.0)
        self.upper = np.where(
            self.integer, np.floor(reach[self.lin] / self.scale + _TOL), reach[self.lin]
        )
        self.continuous = np.flatnonzero(linear & (types.step == 0))  # re-solved in closed form
        self.options = [(u.cols, u.moves[i, k], u.gain[i, k]) for u in units
                        for k in [np.flatnonzero(u.useful[i])] if len(k)]  # fmt: skip
        n_lin = len(self.lin)
        sizes = [len(g) for _, _, g in self.options]
        n_opt = sum(sizes)
        self.n_lin, self.nv = n_lin, n_lin + n_opt
        gain = np.concatenate([np.abs(c[self.lin]) * self.scale, *(g for _, _, g in self.options)])
        # the gain reaches the gap; at most one option of each unit
        choose = np.zeros((len(sizes), self.nv))
        ends = np.cumsum(sizes)
        for k, (first, last) in enumerate(zip(ends - sizes, ends, strict=True)):
            choose[k, n_lin + first : n_lin + last] = 1.0
        self.A = np.vstack([gain, choose])
        self.lbs = np.r_[gap, np.full(len(sizes), -np.inf)]
        self.ubs = np.r_[np.inf, np.ones(len(sizes))]
        self.integrality = np.r_[self.integer.astype(float), np.ones(n_opt)]
        self.var_upper = np.r_[self.upper, np.ones(n_opt)]
        self.price = w[self.lin] * self.scale  # weighted move per unit of v_j
        weighted = [np.abs(moves * w[cols]) for cols, moves, _ in self.options]
        if p == 1:
            opt = [m.sum(1) for m in weighted]
        elif p == np.inf:
            opt = [m.max(1) for m in weighted]
        else:
            opt = [(m**2).sum(1) for m in weighted]
        self.opt_cost = np.concatenate(opt) if opt else np.zeros(0)
        self.cuts: list[tuple[int, float]] = []  # p = 2: tangent points (feature, v)
        if p == 2:
            self._add_cuts(np.where(np.isfinite(self.upper), self.upper / 2, 1.0))

    def program(self):
        """(objective, A, lower, upper, integrality, variable upper bounds)."""
        nv, n_lin = self.nv, self.n_lin
        if self.p == 1:
            obj = np.r_[self.price, self.opt_cost]
            return obj * self.weight, self.A, self.lbs, self.ubs, self.integrality, self.var_upper
        if self.p == np.inf:
            # minimise t ≥ each feature's and each unit's weighted move
            sizes = (self.A[1:] > 0).sum(1)
            rows = np.zeros((n_lin + len(sizes), nv + 1))
            rows[np.arange(n_lin), np.arange(n_lin)] = self.price
            rows[n_lin:, n_lin:nv] = self.A[1:, n_lin:] * self.opt_cost
            rows[:, -1] = -1.0
            A = np.vstack([np.hstack([self.A, np.zeros((len(self.A), 1))]), rows])
            obj = np.zeros(nv + 1)
            obj[-1] = self.weight
            return (
                obj, A, np.r_[self.lbs, np.full(len(rows), -np.inf)],
                np.r_[self.ubs, np.zeros(len(rows))], np.r_[self.integrality, 0.0],
                np.r_[self.var_upper, np.inf],
            )  # fmt: skip
        # p = 2: e_j ≥ (price_j·v_j)² by its tangents at the cut points a:
        # e ≥ (price·a)² + 2 price² a (v − a)  ⇔  2 price² a v − e ≤ (price·a)²
        rows = np.zeros((len(self.cuts), nv + n_lin))
        bounds = np.zeros(len(self.cuts))
        for k, (j, a) in enumerate(self.cuts):
            rows[k, j] = 2 * self.price[j] ** 2 * a
            rows[k, nv + j] = -1.0
            bounds[k] = (self.price[j] * a) ** 2
        A = np.vstack([np.hstack([self.A, np.zeros((len(self.A), n_lin))]), rows])
        obj = np.r_[np.zeros(n_lin), self.opt_cost, np.ones(n_lin)] * self.weight**2
        return (
            obj, A, np.r_[self.lbs, np.full(len(rows), -np.inf)], np.r_[self.ubs, bounds],
            np.r_[self.integrality, np.zeros(n_lin)], np.r_[self.var_upper, np.full(n_lin, np.inf)],
        )  # fmt: skip

    def _add_cuts(self, v: np.ndarray) -> None:
        for j in np.flatnonzero((v[: self.n_lin] > 0) & (self.price > 0)):
            self.cuts.append((int(j), float(v[j])))

    def update(self, x: np.ndarray, rtol: float) -> None:
        """Take the program's answer x (p = 2: its tangent model's)."""
        delta = self.finish(x[: self.nv])
        if self.p != 2:
            self.best, self.gap, self.converged = delta, 0.0, True
            return
        # the tangent model's optimum (the row's share of the batch's) bounds the cost below
        model = float(self.program()[0] @ x) / self.weight**2
        self.lower_sq = max(self.lower_sq, model)
        sq = float(((self.w * delta) ** 2).sum())
        if sq < self.best_sq:
            self.best, self.best_sq = delta, sq
        upper, lower = np.sqrt(self.best_sq), np.sqrt(min(self.lower_sq, self.best_sq))
        self.gap = (upper - lower) / upper if upper > 0 else 0.0
        self.converged = self.gap <= rtol
        if not self.converged:
            self._add_cuts(x[: self.n_lin])
            self._add_cuts(np.abs(delta[self.lin]) / self.scale)

    def finish(self, x: np.ndarray) -> np.ndarray:
        """δ of the program's answer x: its integer moves and options as chosen, the
        continuous features re-solved in closed form for the rest of the gap (an
        answer that reaches the gap exactly, at the least continuous cost)."""
        delta = np.zeros(self.d)
        sign = np.sign(self.c[self.lin])
        ints = self.lin[self.integer]
        delta[ints] = (sign * self.scale * np.round(x[: self.n_lin]))[self.integer]
        start = self.n_lin
        for cols, moves, _ in self.options:
            chosen = x[start : start + len(moves)]
            if chosen.max() > 0.5:
                delta[cols] = moves[int(np.argmax(chosen))]
            start += len(moves)
        residual = self.target - self.c @ delta
        cont = self.continuous
        if residual <= 0 or not len(cont):
            return delta
        lo = np.where(self.c[cont] < 0, -self.reach[cont], 0.0)
        hi = np.where(self.c[cont] > 0, self.reach[cont], 0.0)
        move, ok = cheapest_box_recourse(
            self.c[None, cont], np.array([residual]), lo[None], hi[None], self.w[cont], self.p
        )
        if ok[0]:
            delta[cont] = move[0]
        else:  # short by the solver's feasibility tolerance: its own continuous values
            delta[self.lin[~self.integer]] = (sign * x[: self.n_lin])[~self.integer]
        return delta


_BATCH = 1  # rows per call of HiGHS (its branch and bound over rows side by side was slower)


def _milp_batch(programs) -> list[np.ndarray]:
    """The optimal x of each program, all solved in one call of HiGHS."""
    from scipy.optimize import Bounds, LinearConstraint, milp  # (0.3 s to import)
    from scipy.sparse import block_diag

    obj, A, lbs, ubs, integrality, upper = zip(*programs, strict=True)
    res = milp(
        np.concatenate(obj),
        constraints=LinearConstraint(
            block_diag(A, format="csr"), np.concatenate(lbs), np.concatenate(ubs)
        ),
        integrality=np.concatenate(integrality),
        bounds=Bounds(0.0, np.concatenate(upper)),
        # (HiGHS's presolve fails with a "solve error" on some of these small programs
        # that it solves without it)
        options={"mip_rel_gap": 0.0, "presolve": False},
    )
    if res.x is None:  # every row's program is feasible (see `_largest_gain`)
        raise RuntimeError(f"mixed-integer recourse: HiGHS found no answer ({res.message})")
    return np.split(res.x, np.cumsum([len(o) for o in obj])[:-1])
