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
    delta, reachable = cheapest_box_recourse(c, gap, rlo, rhi, w, p)
    n = len(X)
    rel_gap = np.zeros(n)
    todo = np.flatnonzero(reachable & (gap > 0) & ~_respects(types, X, delta))
    if len(todo):
        relaxed_cost = _norm(w * delta, p)
        # integer and continuous features move only in their gaining direction
        reach = np.where(c > 0, hi, np.where(c < 0, -lo, 0.0))
        for i in todo:
            row = _RowProgram(i, c[i], gap[i], reach[i], types, units, w, p)
            found, rel_gap[i] = row.solve(relaxed_cost[i], rtol, max_rounds)
            reachable[i] = found is not None
            delta[i] = found if found is not None else 0.0
    delta[~reachable] = 0.0
    cost = np.where(reachable, _norm(w * delta, p), np.inf)
    return MixedResult(delta, reachable, cost, rel_gap, len(todo))


def _norm(a: np.ndarray, p: float) -> np.ndarray:
    return np.linalg.norm(a, ord=p, axis=-1)


@dataclass(frozen=True)
class _Unit:
    """One finite choice per row: a single-column feature's level or a one-hot switch."""

    cols: np.ndarray  # (k,) the features it sets
    moves: np.ndarray  # (n, m, k) δ on those columns of each option
    useful: np.ndarray  # (n, m) the option is in the box and raises the score
    gain: np.ndarray  # (n, m) c·δ of each option


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
    each unit (at most one per unit)."""

    def __init__(self, i, c, gap, reach, types: _Types, units: list[_Unit], w, p):
        self.c, self.gap, self.reach, self.w, self.p = c, gap, reach, w, p
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
        n_opt = sum(len(g) for _, _, g in self.options)
        self.n_lin, self.nv = n_lin, n_lin + n_opt
        gain_row = np.concatenate(
            [np.abs(c[self.lin]) * self.scale, *(g for _, _, g in self.options)]
        )
        rows, self.lbs, self.ubs = [gain_row], [gap], [np.inf]
        start = n_lin
        for _, moves, _ in self.options:  # at most one option of each unit
            a = np.zeros(self.nv)
            a[start : start + len(moves)] = 1.0
            rows.append(a)
            self.lbs.append(-np.inf)
            self.ubs.append(1.0)
            start += len(moves)
        self.A = np.array(rows)
        self.integrality = np.concatenate([self.integer.astype(float), np.ones(n_opt)])
        self.var_upper = np.concatenate([self.upper, np.ones(n_opt)])
        self.price = w[self.lin] * self.scale  # weighted move per unit of v_j
        weighted = [np.abs(moves * w[cols]) for cols, moves, _ in self.options]
        if p == 1:
            opt = [m.sum(1) for m in weighted]
        elif p == np.inf:
            opt = [m.max(1) for m in weighted]
        else:
            opt = [(m**2).sum(1) for m in weighted]
        self.opt_cost = np.concatenate(opt) if opt else np.zeros(0)

    def solve(self, relaxed_cost: float, rtol: float, max_rounds: int):
        """(δ, certified relative gap), δ None where no typed move reaches the gap."""
        if self.p == 2:
            return self._outer_approximation(relaxed_cost, rtol, max_rounds)
        nv, A, lbs, ubs = self.nv, self.A, self.lbs, self.ubs
        if self.p == 1:
            obj = np.concatenate([self.price, self.opt_cost])
            x = _milp(obj, A, lbs, ubs, self.integrality, self.var_upper)[0]
            return (None, 0.0) if x is None else (self.finish(x), 0.0)
        # p = ∞: minimise t (the last variable) ≥ each feature's and option's weighted move
        extra = []
        for j in range(self.n_lin):
            a = np.zeros(nv + 1)
            a[j], a[-1] = self.price[j], -1.0
            extra.append(a)
        start = self.n_lin
        for _, moves, _ in self.options:
            a = np.zeros(nv + 1)
            a[start : start + len(moves)] = self.opt_cost[
                start - self.n_lin : start - self.n_lin + len(moves)
            ]
            a[-1] = -1.0
            extra.append(a)
            start += len(moves)
        A = np.vstack([np.hstack([A, np.zeros((len(A), 1))]), *extra])
        obj = np.zeros(nv + 1)
        obj[-1] = 1.0
        x = _milp(
            obj, A, lbs + [-np.inf] * len(extra), ubs + [0.0] * len(extra),
            np.r_[self.integrality, 0.0], np.r_[self.var_upper, np.inf],
        )[0]  # fmt: skip
        return (None, 0.0) if x is None else (self.finish(x[:-1]), 0.0)

    def _outer_approximation(self, relaxed_cost, rtol, max_rounds):
        """p = 2: tangents of w_j²·δ_j² below the squared cost (see the module)."""
        n_lin, nv = self.n_lin, self.nv
        # epigraph variables e_j ≥ (w_j·scale_j·v_j)² by tangents at the points a (in v)
        cuts: list[np.ndarray] = []
        lbs, ubs = list(self.lbs), list(self.ubs)

        def add_cuts(v: np.ndarray) -> None:
            for j in range(n_lin):
                if v[j] > 0 and self.price[j] > 0:
                    # e ≥ (price·a)² + 2 price² a (v − a)  ⇔  2 price² a v − e ≤ (price·a)²
                    a = np.zeros(nv + n_lin)
                    a[j] = 2 * self.price[j] ** 2 * v[j]
                    a[nv + j] = -1.0
                    cuts.append(a)
                    lbs.append(-np.inf)
                    ubs.append((self.price[j] * v[j]) ** 2)

        obj = np.concatenate([np.zeros(n_lin), self.opt_cost, np.ones(n_lin)])
        integrality = np.r_[self.integrality, np.zeros(n_lin)]
        var_upper = np.r_[self.var_upper, np.full(n_lin, np.inf)]
        base = np.hstack([self.A, np.zeros((len(self.A), n_lin))])
        add_cuts(np.where(self.upper < np.inf, self.upper / 2, 1.0))
        best, best_sq, lower_sq = None, np.inf, relaxed_cost**2
        for _ in range(max_rounds):
            x, bound = _milp(obj, np.vstack([base, *cuts]), lbs, ubs, integrality, var_upper)
            if x is None:
                return None, 0.0
            lower_sq = max(lower_sq, bound)
            delta = self.finish(x[:nv])
            sq = float(((self.w * delta) ** 2).sum())
            if sq < best_sq:
                best, best_sq = delta, sq
            if np.sqrt(best_sq) - np.sqrt(lower_sq) <= rtol * np.sqrt(best_sq):
                break
            add_cuts(x[:n_lin])
            add_cuts(np.abs(delta[self.lin]) / self.scale)
        upper, lower = np.sqrt(best_sq), np.sqrt(min(lower_sq, best_sq))
        return best, (upper - lower) / upper if upper > 0 else 0.0

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
        residual = self.gap - self.c @ delta
        cont = self.continuous
        lo = np.where(self.c[cont] < 0, -self.reach[cont], 0.0)
        hi = np.where(self.c[cont] > 0, self.reach[cont], 0.0)
        move, ok = cheapest_box_recourse(
            self.c[None, cont], np.array([residual]), lo[None], hi[None], self.w[cont], self.p
        )
        if not ok[0]:  # the solver's feasibility tolerance: keep its continuous values
            delta[self.lin[~self.integer]] = (sign * x[: self.n_lin])[~self.integer]
        elif residual > 0:
            delta[cont] = move[0]
        return delta


def _milp(obj, A, lbs, ubs, integrality, var_upper) -> tuple[np.ndarray | None, float]:
    """(HiGHS's optimal x, its proven lower bound on the objective); (None, inf) where the
    program is infeasible."""
    from scipy.optimize import Bounds, LinearConstraint, milp  # (0.3 s to import)

    res = milp(
        obj,
        constraints=LinearConstraint(A, lbs, ubs),
        integrality=integrality,
        bounds=Bounds(0.0, var_upper),
        # (HiGHS's presolve fails with a "solve error" on some of these tiny programs
        # that it solves without it; on a dozen variables it saves nothing)
        options={"mip_rel_gap": 0.0, "presolve": False},
    )
    if res.status == 2:  # infeasible: no typed move reaches the gap
        return None, np.inf
    if res.x is None:
        raise RuntimeError(f"mixed-integer recourse: HiGHS found no answer ({res.message})")
    bound = getattr(res, "mip_dual_bound", None)
    return res.x, float(res.fun if bound is None or not np.isfinite(bound) else bound)
