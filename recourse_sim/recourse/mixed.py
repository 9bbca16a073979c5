"""Exact cheapest recourse for a linear score over mixed feature types.

Per row: min ‖w ⊙ δ‖_p subject to c·δ ≥ gap (the score reaches the decision), δ in the
action set's box at x (bounds, immutables, monotone rules, max_change) and the feature
types of `ActionSet`: an integer feature moves by whole steps, a binary, ordinal or
single-column categorical one lands on one of its levels, a one-hot group stays or
switches to one other level (δ_G = e_k − x_G). A move that lowers the score is never
part of a cheapest answer, so only the gaining ones are considered.

First the continuous relaxation (each discrete feature relaxed to the interval of its
allowed moves, a one-hot column to [−x, 1 − x]) is solved in closed form
(`cheapest_box_recourse`): where its answer respects the types it is the typed optimum.
Whether the typed problem is reachable at all is closed form too (each feature at its
largest allowed gain). The other rows are solved exactly, all rows at once:

* p = 1 and p = 2: branch and bound over boxes (`_branch_and_bound`); a box's bound is
  its continuous optimum, in closed form for boxes that need not hold 0 (`_box_optimum`:
  a knapsack from the box's point nearest 0 for p = 1, the KKT path's sorted
  breakpoints for p = 2); a box splits on a one-hot group off its levels (one child
  per switch, one that stays) or else on a discrete feature off its grid or levels
  (below / above). Boxes whose bound is within 1e-12 (relative) of the row's best
  answer are dropped, so the answer is optimal to that tolerance. With p = 1 and a few
  rows, each row is searched alone on Python floats, best first (`_best_first`).
* p = ∞: bisection on the cost t (`_cost_bisection`): the largest gain of moves each
  costing ≤ t is separable over features, non-decreasing in t, and the least t at which
  it reaches the gap is the optimum; the discrete moves there are kept and the
  continuous part re-solved in closed form.

Every test of a move against the gap, in all of these (reachability, a node's bound,
the bisection), is one (`_reached`): the move reaches the gap when it falls short by
no more than rounding, 1e-13 of the numbers summed (|gap| + Σ|c_j δ_j|), so that a
residue of floating-point subtraction (2e-16) drops no feasible node.

`tests/recourse/test_mixed.py` checks every answer against an independent
mixed-integer program solved by HiGHS (`scipy.optimize.milp`) and against brute force,
and holds a row asked alone to the answer of the rows asked together (2,000 random
problems and every German credit row, p = 1, 2, ∞).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from operator import mul

import numpy as np

from recourse_sim.recourse.action_set import ActionSet
from recourse_sim.recourse.cheapest import _first_true, _row_sums, cheapest_box_recourse

_TOL = 1e-9  # how far from a grid point or level a value may be and still count as on it
# how far below the gap, relative to the numbers summed into the gain (|gap| + Σ|c_j δ_j|),
# a move's gain may fall and still reach it: the residue of floating-point sums (1e-16
# relative), well inside the 1e-12 relative margin callers add to the gap
_ROUNDING = 1e-13
# p = 1 with at most this many rows to search: one row at a time on Python floats
# (`_best_first`), as numpy's per-call overhead dominates the batched search of a few rows
_ONE_BY_ONE = 4


@dataclass(frozen=True)
class MixedResult:
    """Per-row answer of `mixed_cheapest_recourse`."""

    delta: np.ndarray  # (n, d) the cheapest typed δ (0 where unreachable)
    reachable: np.ndarray  # (n,) some typed δ in the box reaches the gap
    cost: np.ndarray  # (n,) ‖w ⊙ δ‖_p (inf where unreachable)
    searched_rows: int  # rows whose relaxed optimum broke the types (searched)


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
    """The action set's integer steps, single-column levels and one-hot groups."""
    in_group = np.zeros(action_set.n_features, bool)
    for g in action_set.onehot_groups_:
        in_group[g] = True
    levels = {j: v for j, v in action_set.levels_.items() if not in_group[j]}
    return _Types(np.asarray(action_set.step_, np.float64), levels, action_set.onehot_groups_)


def mixed_cheapest_recourse(
    coef: np.ndarray,
    gap: np.ndarray,
    X: np.ndarray,
    action_set: ActionSet,
    budget: float = np.inf,
) -> MixedResult:
    """min ‖w ⊙ δ‖_p subject to c·δ ≥ gap, δ in the action set's box at x and of its
    feature types, per row (`coef` c: (n, d), `gap`: (n,), ≤ 0 needs nothing), exactly
    for p ∈ {1, 2, ∞} (see the module). The ε-ball is not imposed: the caller compares
    the cost, as for `cheapest_linear_recourse`. On an untyped action set it is
    `cheapest_linear_recourse`. Rows whose relaxed optimum already costs more than
    `budget` (by far more than rounding) are not searched: their δ is 0 and their cost
    inf (a caller that discards answers dearer than its budget loses nothing)."""
    c = np.asarray(coef, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    gap = np.broadcast_to(np.asarray(gap, dtype=np.float64), (len(X),))
    c = np.broadcast_to(c, X.shape)
    lo, hi = action_set.box(X)
    w, p = action_set.weights_, action_set.p
    types = feature_types(action_set)
    units = _units(types, X, c, lo, hi)
    rlo, rhi = _relaxed_box(types, units, lo, hi)
    if p == 1 and len(X) <= _ONE_BY_ONE:
        return _one_by_one(c, gap, X, rlo, rhi, w, types, units)
    delta, _ = cheapest_box_recourse(c, gap, rlo, rhi, w, p)
    # integer and continuous features move only in their gaining direction
    reach = np.where(c > 0, hi, np.where(c < 0, -lo, 0.0))
    largest = _largest_gain(types, units, c, reach)
    reachable = (gap <= 0) | _reached(gap - largest, np.abs(gap) + largest)
    search = reachable & (gap > 0) & ~_respects(types, X, delta)
    # the relaxed optimum's cost bounds the typed one's from below (the margin: rounding)
    beyond = search & (_norm(w * delta, p) > budget * (1 + 1e-6))
    todo = np.flatnonzero(search & ~beyond)
    if len(todo) and p in (1, 2):
        delta[todo] = _branch_and_bound(
            c.take(todo, 0), gap[todo], X.take(todo, 0), rlo.take(todo, 0), rhi.take(todo, 0),
            w, p, types, [u.rows(todo) for u in units],
        )  # fmt: skip
    elif len(todo) and p == np.inf:
        delta[todo] = _cost_bisection(
            c[todo], gap[todo], reach[todo], _norm(w * delta[todo], p), w, types,
            [u.rows(todo) for u in units],
        )  # fmt: skip
    delta[~reachable | beyond] = 0.0
    cost = np.where(reachable & ~beyond, _norm(w * delta, p), np.inf)
    return MixedResult(delta, reachable, cost, len(todo))


def _one_by_one(c, gap, X, rlo, rhi, w, types: _Types, units: list[_Unit]) -> MixedResult:
    """p = 1 on a few rows: `_best_first` row by row (its root is the relaxation, and an
    empty search means no typed move reaches the gap)."""
    delta, reachable, searched = np.zeros_like(X), gap <= 0, 0
    for i in np.flatnonzero(gap > 0):
        found, split = _best_first(
            c[i], gap[i], X[i], rlo[i], rhi[i], w, types, [u.rows([i]) for u in units]
        )
        searched += split
        if found is not None:
            delta[i], reachable[i] = found, True
    cost = np.where(reachable, _norm(w * delta, 1), np.inf)
    return MixedResult(delta, reachable, cost, searched)


def _largest_gain(types: _Types, units: list[_Unit], c: np.ndarray, reach: np.ndarray):
    """Each row's largest c·δ over the typed moves in the box."""
    span = reach.copy()
    grid = types.step > 0
    span[:, grid] = np.floor(reach.compress(grid, 1) / types.step[grid] + _TOL) * types.step[grid]
    with np.errstate(invalid="ignore"):  # inf · 0
        gain = _row_sums(np.where(types.in_unit | (c == 0), 0.0, np.abs(c) * span))
    for u in units:
        gain += np.where(u.useful, u.gain, 0.0).max(1, initial=0.0)
    return gain


def _branch_and_bound(c, gap, X, lo, hi, w, p, types: _Types, units: list[_Unit]):
    """p ∈ {1, 2}: branch and bound, all rows' open nodes at once. A node is a box
    [lo, hi] on δ whose discrete features' ends are allowed moves; its bound is the
    box's continuous optimum, in closed form (`_box_optimum`). A node whose optimum
    respects the types is a candidate; else it splits on the first one-hot group not at
    a level (one child per useful switch and one that stays) or, that failing, the first
    discrete feature off its grid (below / above its value). Nodes whose bound is not
    below the row's best candidate by more than 1e-12 (relative) are dropped."""
    n, d = c.shape
    best = np.zeros((n, d))
    incumbent = np.full(n, np.inf)
    row = np.arange(n)
    moves = _allowed_moves(types, units, d)
    # (rows are gathered with `take`: numpy's fancy indexing of 2-d arrays is far slower)
    while len(row):
        delta, ok = _box_optimum(c.take(row, 0), gap.take(row), lo, hi, w, p)
        bound = _norm(w * delta, p)
        alive = ok & (bound < incumbent[row] * (1 - 1e-12))
        done = alive & _respects(types, X.take(row, 0), delta)
        if done.any():
            # each row's first candidate of least bound (as taking the nodes in order,
            # replacing on a strictly lower bound) replaces its incumbent if lower
            k = np.flatnonzero(done)
            least = np.full(n, np.inf)
            np.minimum.at(least, row[k], bound[k])
            k = k[bound[k] == least[row[k]]]
            first = np.full(n, len(k))
            np.minimum.at(first, row[k], np.arange(len(k)))
            first = k[first[first < len(k)]]
            better = first[bound[first] < incumbent[row[first]]]
            incumbent[row[better]] = bound[better]
            best[row[better]] = delta.take(better, 0)
        split = np.flatnonzero(alive & ~done)
        row, lo, hi, delta = row[split], lo.take(split, 0), hi.take(split, 0), delta.take(split, 0)
        if not len(row):
            break
        row, lo, hi = _split(row, lo, hi, delta, X, types, units, moves)
    return best


def _best_first(c, gap, x, lo, hi, w, types: _Types, units: list[_Unit]):
    """p = 1, one row: the branch and bound of `_branch_and_bound` on Python floats, best
    first: nodes leave a heap in order of their bound, so the first whose optimum respects
    the types is optimal and no node dearer than the optimum is split. A node's bound is
    `_box_optimum`'s knapsack from the box's point nearest 0, the features in order of
    gain per unit cost. Returns (δ or None where no typed move reaches the gap, whether
    the relaxation had to be split)."""
    c, x, w = c.tolist(), x.tolist(), w.tolist()
    d = len(c)
    gains = [j for j in range(d) if c[j] != 0]
    order = sorted(gains, key=lambda j: -abs(c[j]) / w[j] if w[j] > 0 else -np.inf)
    up, size = [v > 0 for v in c], [abs(v) for v in c]
    grid = [(j, v) for j, v in enumerate(types.step.tolist()) if v > 0]
    levels = [(j, v.tolist()) for j, v in types.levels.items()]
    moves, groups = {}, []  # a level feature's allowed moves; a group's (columns, switches)
    for u in units:
        useful = [m for m, ok in zip(u.moves[0].tolist(), u.useful[0].tolist(), strict=True) if ok]
        if len(u.cols) == 1 and int(u.cols[0]) in types.levels:
            moves[int(u.cols[0])] = sorted([m[0] for m in useful] + [0.0])
        else:
            groups.append((u.cols.tolist(), useful))

    def optimum(lo, hi):
        """The box's continuous optimum (δ, its cost), or None where the gap is out of reach."""
        delta = [a if a > 0 else b if b < 0 else 0.0 for a, b in zip(lo, hi, strict=True)]
        need = gap - sum(map(mul, c, delta))
        for j in order:
            if need <= 0:
                break
            room = hi[j] - delta[j] if up[j] else delta[j] - lo[j]
            if room > 0:
                take = min(room, need / size[j])
                delta[j] += take if up[j] else -take
                need -= size[j] * take
        if need > 0 and not _reached(need, abs(gap) + sum(map(abs, map(mul, c, delta)))):
            return None
        return sum(map(mul, w, map(abs, delta))), delta

    def off_type(delta):
        """The first one-hot group off its levels, else the first single-column feature off
        its grid or levels ((kind, index) or None). Groups first: a group's relaxation is
        the weakest (each column moves alone), and fixing it early spares every subtree
        its own split of the group."""
        for k, (cols, _) in enumerate(groups):
            if all(abs(delta[j]) <= _TOL for j in cols):
                continue
            value = [x[j] + delta[j] for j in cols]
            whole = [round(v) for v in value]
            if (
                any(abs(v - r) > _TOL for v, r in zip(value, whole, strict=True))
                or any(r not in (0, 1) for r in whole)
                or sum(whole) != 1
            ):
                return "group", k
        off = [j for j, s in grid if abs(delta[j] / s - round(delta[j] / s)) > _TOL]
        off += [
            j
            for j, values in levels
            if abs(delta[j]) > _TOL and all(abs(x[j] + delta[j] - v) > _TOL for v in values)
        ]
        return ("single", min(off)) if off else None

    lo, hi = lo.tolist(), hi.tolist()
    root = optimum(lo, hi)
    heap = [(*root, lo, hi)] if root else []  # (bound, δ, lo, hi); ties: the smaller δ
    split = False
    while heap:
        _, delta, lo_n, hi_n = heapq.heappop(heap)
        broken = off_type(delta)
        if broken is None:
            return np.array(delta), split
        split = True
        kind, j = broken
        children = []
        if kind == "single":
            v = delta[j]
            if j in moves:
                below = max((m for m in moves[j] if m < v), default=None)
                above = min((m for m in moves[j] if m > v), default=None)
            else:
                s = types.step[j]
                below, above = float(np.floor(v / s) * s), float(np.ceil(v / s) * s)
            if below is not None:
                children.append((lo_n, [*hi_n[:j], below, *hi_n[j + 1 :]]))
            if above is not None:
                children.append(([*lo_n[:j], above, *lo_n[j + 1 :]], hi_n))
        else:
            cols, switches = groups[j]
            for move in [[0.0] * len(cols), *switches]:
                lo_c, hi_c = list(lo_n), list(hi_n)
                for col, m in zip(cols, move, strict=True):
                    lo_c[col] = hi_c[col] = m
                children.append((lo_c, hi_c))
        for lo_c, hi_c in children:
            if all(a <= b + _TOL for a, b in zip(lo_c, hi_c, strict=True)):
                found = optimum(lo_c, hi_c)
                if found is not None:
                    heapq.heappush(heap, (*found, lo_c, hi_c))
    return None, split


def _box_optimum(c, gap, lo, hi, w, p):
    """min ‖w ⊙ δ‖_p s.t. c·δ ≥ gap, lo ≤ δ ≤ hi per row, for boxes that need not hold
    0 (a branch's forced moves), p ∈ {1, 2}: (δ, reachable). Each feature starts at its
    point nearest 0, `base`, and moves away from 0 in the direction that gains.
    p = 1: the costs of those moves add to the base's, so it is the knapsack of
    `cheapest_box_recourse` from the base. p = 2: the KKT point δ(t) = clip(t·c / w²,
    lo, hi) for the least t ≥ 0 whose gain reaches the gap; the gain is piecewise linear
    in t, with a breakpoint where a feature leaves or reaches a box end, so t is exact
    between two sorted breakpoints. (Free features, w = 0, go to their gaining end.)"""
    if p == 1:
        base = np.clip(0.0, lo, hi)
        need = gap - np.einsum("nd,nd->n", c, base)
        step, ok = cheapest_box_recourse(c, need, lo - base, hi - base, w, 1)
        delta = base + step
        return delta, ok | _reaches(c, delta, gap)
    priced = w > 0
    any_free = not priced.all()
    if any_free:
        free = ~priced & (c != 0)
        base = np.where(free, np.where(c > 0, hi, lo), np.clip(0.0, lo, hi))
        unbounded_free = free & np.isinf(base)
        base = np.where(unbounded_free, 0.0, base)
        a = np.where(priced, c / np.where(priced, w, 1.0) ** 2, 0.0)
    else:  # (every feature priced: no base, and a without the masking, same numbers)
        a = c / w**2
    with np.errstate(divide="ignore", invalid="ignore"):
        ends = np.concatenate([lo / a, hi / a], 1)  # t at which each feature meets an end
    met = np.isfinite(ends) & (ends > 0)
    # a breakpoint at 0 in every row repeats the 0 in front: t and δ(t) depend only on
    # the breakpoints' distinct values, so such columns are left out (fewer to sort)
    ends = np.where(met, ends, 0.0).compress(met.any(0), 1)
    ts = np.concatenate([np.zeros((len(c), 1)), _sorted_rows(ends)], 1)  # (ends ≥ 0)

    def at(t):  # (rows, k) → δ(t) (rows, k, d); feature by feature (numpy is slow on
        # a short last axis broadcast against a stack), the same operations per number
        out = np.empty((*t.shape, len(priced)))
        for j in range(len(priced)):
            if priced[j]:
                np.clip(t * a[:, j, None], lo[:, j, None], hi[:, j, None], out=out[..., j])
            else:
                out[..., j] = base[:, j, None]
        return out

    gains = np.einsum("nkd,nd->nk", at(ts), c)
    reached = gains >= gap[:, None]
    k = _first_true(reached)
    hit = _rows_any(reached)
    # beyond the last breakpoint only unbounded features still move (rows not hit)
    last = ts[:, -1]
    slope_out = np.zeros(len(c))
    out = np.flatnonzero(~hit)
    if len(out):
        c_out, a_out = c.take(out, 0), a.take(out, 0)
        moving = priced & (
            ((a_out > 0) & np.isinf(hi.take(out, 0))) | ((a_out < 0) & np.isinf(lo.take(out, 0)))
        )
        slope_out[out] = _row_sums(np.where(moving, c_out * a_out, 0.0))
    # (gathers at each row's breakpoint k − 1 and k through flat indices: faster)
    at_prev = np.arange(len(c)) * ts.shape[1] + np.maximum(k - 1, 0)
    at_k = at_prev + (k > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_prev, g_prev = ts.ravel().take(at_prev), gains.ravel().take(at_prev)
        t_k, g_k = ts.ravel().take(at_k), gains.ravel().take(at_k)
        inside = t_prev + (gap - g_prev) * (t_k - t_prev) / (g_k - g_prev)
        t = np.where(k == 0, 0.0, np.where(g_k > g_prev, inside, t_k))
        beyond = last + (gap - gains[:, -1]) / slope_out
    t = np.where(hit, np.minimum(np.maximum(t, t_prev), t_k), beyond)
    ok = hit | (slope_out > 0)
    if any_free and unbounded_free.any():  # a free unbounded feature closes any gap for free
        t = np.where(unbounded_free.any(1), 0.0, t)
        ok |= unbounded_free.any(1)
    t = np.where(ok, t, last)
    delta = at(t[:, None])[:, 0]
    if any_free and unbounded_free.any():
        short = gap - np.einsum("nd,nd->n", c, delta)
        j = np.argmax(unbounded_free, 1)
        fill = unbounded_free.any(1) & (short > 0)
        delta[fill, j[fill]] = short[fill] / c[fill, j[fill]]
    return delta, ok | _reaches(c, delta, gap)


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
        k = delta.compress(grid, 1) / types.step[grid]
        off[:, grid] = np.abs(k - np.round(k)) > _TOL
    for j, m in moves.items():
        off[:, j] = ~(np.abs(m[row] - delta[:, j, None]) <= _TOL).any(1)
    # groups first: a group's relaxation is the weakest (each column moves alone), and
    # fixing it early spares every subtree its own split of the group
    broken = np.zeros((n, 0), bool)  # (no groups: nothing to gather)
    if types.groups:
        broken = ~_respects_groups(types, X.take(row, 0), delta)
    single = _rows_any(off) & ~_rows_any(broken)
    children = []
    if single.any():
        k = np.flatnonzero(single)
        j = _first_true(off.take(k, 0))
        v = delta.ravel().take(k * d + j)
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
            lo_c, hi_c = lo.take(k[keep], 0), hi.take(k[keep], 0)
            (hi_c if side is hi else lo_c)[np.arange(keep.sum()), j[keep]] = end[keep]
            fits = np.flatnonzero(_rows_all(lo_c <= hi_c + _TOL))
            children.append((row[k[keep]][fits], lo_c.take(fits, 0), hi_c.take(fits, 0)))
    rest = np.flatnonzero(_rows_any(broken))
    if len(rest):
        # a one-hot group off its levels: fix it to each useful switch, or to staying
        g = broken[rest].argmax(1)
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
        gain = largest_gain(high)
        short = ~_reached(gap - gain, np.abs(gap) + gain)
        if not short.any():
            break
        low = np.where(short, high, low)
        high = np.where(short, high * 2, high)
    for _ in range(200):
        if (high - low <= 1e-15 * high).all():
            break
        mid = 0.5 * (low + high)
        gain = largest_gain(mid)
        enough = _reached(gap - gain, np.abs(gap) + gain)
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


def _reached(need, scale):
    """Whether a move reaches the gap up to rounding: `need` is the gap less the move's
    gain, `scale` the size of the numbers summed into them (|gap| + Σ|c_j δ_j|). The one
    test of both searches, on Python floats (`_best_first`) and on arrays alike: a
    residue of floating-point subtraction (2e-16) is no shortfall."""
    return need <= _ROUNDING * scale


def _reaches(c: np.ndarray, delta: np.ndarray, gap: np.ndarray) -> np.ndarray:
    """Rows whose move δ reaches the gap up to rounding (`_reached`)."""
    terms = c * delta
    return _reached(gap - _row_sums(terms), np.abs(gap) + _row_sums(np.abs(terms)))


def _sorted_rows(m: np.ndarray) -> np.ndarray:
    """np.sort(m, 1) for m without NaN or −0: for up to 5 columns an odd-even
    transposition network of np.minimum / np.maximum over the columns (each returns one of
    its two numbers, so the sorted values are the same); numpy sorts short rows slowly."""
    k = m.shape[1]
    if k > 5:
        return np.sort(m, 1)
    cols = [m[:, j] for j in range(k)]
    for r in range(k):
        for j in range(r % 2, k - 1, 2):
            cols[j], cols[j + 1] = (
                np.minimum(cols[j], cols[j + 1]),
                np.maximum(cols[j], cols[j + 1]),
            )
    return np.stack(cols, 1) if k else m.copy()


def _rows_any(mask: np.ndarray) -> np.ndarray:
    """mask.any(1), column by column: numpy reduces a short last axis row by row, slowly."""
    if mask.shape[1] > 16:
        return mask.any(1)
    out = np.zeros(len(mask), bool)
    for j in range(mask.shape[1]):
        out |= mask[:, j]
    return out


def _rows_all(mask: np.ndarray) -> np.ndarray:
    """mask.all(1), column by column (as `_rows_any`)."""
    if mask.shape[1] > 16:
        return mask.all(1)
    out = np.ones(len(mask), bool)
    for j in range(mask.shape[1]):
        out &= mask[:, j]
    return out


def _norm(a: np.ndarray, p: float) -> np.ndarray:
    if a.ndim == 2 and p in (1, 2):  # (np.linalg.norm's operations, the sums by row)
        return np.sqrt(_row_sums(a * a)) if p == 2 else _row_sums(np.abs(a))
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
        rlo[:, grid] = np.ceil(lo.compress(grid, 1) / s - _TOL) * s
        rhi[:, grid] = np.floor(hi.compress(grid, 1) / s + _TOL) * s
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
        k = delta.compress(grid, 1) / types.step[grid]
        ok &= _rows_all(np.abs(k - np.round(k)) <= _TOL)
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
