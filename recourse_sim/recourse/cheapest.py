"""The cheapest move of a linear score within a box, in closed form.

min ‖w ⊙ δ‖_p subject to c·δ ≥ gap and lo ≤ δ ≤ hi, per row, for p ∈ {1, 2, ∞}: the
exact `min_cost` of a binary linear model over continuous features
(`recourse_sim.recourse.individual`), and the bound of every node of the typed search
(`recourse_sim.recourse.mixed`).
"""

from __future__ import annotations

import numpy as np

from recourse_sim.recourse.action_set import ActionSet


def cheapest_linear_recourse(
    coef: np.ndarray, gap: np.ndarray, X: np.ndarray, action_set: ActionSet
) -> tuple[np.ndarray, np.ndarray]:
    """min ‖w ⊙ δ‖_p subject to c·δ ≥ gap and δ in the action set's box at x, per row,
    exactly (`coef` c: (n, d); `gap`: (n,), ≤ 0 needs nothing). Returns (δ, reachable):
    where no δ in the box reaches the gap at any cost, δ is the box corner of largest
    c·δ and reachable is False. The ε-ball is not imposed: the caller compares the cost.

    Free features (w = 0) are spent first, just as far as needed. For the rest, p = 1 is
    a fractional knapsack (best gain per unit cost first); for p ∈ {2, ∞} the optimum is
    δ(t) = clip(t·a, lo, hi) with a = c / w² (p = 2, the KKT point) or sign(c) / w
    (p = ∞, every unsaturated feature at the same cost t), for the t at which c·δ(t)
    reaches the gap; c·δ(t) is piecewise linear in t with a breakpoint where each feature
    reaches its box end, so t is found exactly between two sorted breakpoints."""
    lo, hi = action_set.box(np.asarray(X, dtype=np.float64))
    return cheapest_box_recourse(coef, gap, lo, hi, action_set.weights_, action_set.p)


def cheapest_box_recourse(
    coef: np.ndarray, gap: np.ndarray, lo: np.ndarray, hi: np.ndarray, w: np.ndarray, p: float
) -> tuple[np.ndarray, np.ndarray]:
    """`cheapest_linear_recourse` for explicit per-row bounds lo ≤ δ ≤ hi ((n, d), with
    lo ≤ 0 ≤ hi), cost weights `w` (d,) and norm `p`."""
    c = np.asarray(coef, dtype=np.float64)
    gap = np.asarray(gap, dtype=np.float64)
    corner = np.where(c > 0, hi, np.where(c < 0, lo, 0.0))  # the box end that gains
    n = len(c)
    free = w == 0
    delta = np.zeros_like(c)
    todo = gap > 0
    # free features: their whole gain costs nothing
    gain_free = (c * corner)[:, free].sum(1)
    enough_free = todo & (gain_free >= gap)
    if free.any() and todo.any():
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(np.isfinite(gain_free), gap / gain_free, 0.0)
        part = np.where(free, corner * share[:, None], 0.0)
        # an unbounded free feature: move it alone, exactly as far as needed
        unbounded = free & np.isinf(corner)
        lone = enough_free & unbounded.any(1)
        j = np.argmax(unbounded, 1)
        part[lone] = 0.0
        part[lone, j[lone]] = gap[lone] / c[lone, j[lone]]
        delta = np.where(enough_free[:, None], part, np.where(free & todo[:, None], corner, 0.0))
    rest = todo & ~enough_free
    residual = gap - np.where(free.any(), gain_free, 0.0)
    priced = ~free & (c != 0)
    if p == 1:
        gain, move = _knapsack(c, corner, w, priced, residual)
    else:
        gain, move = _breakpoints(c, corner, w, priced, residual, p)
    reachable = ~todo | enough_free | (gain >= residual)
    delta = np.where((rest & reachable)[:, None] & priced, move, delta)
    # unreachable: the corner of largest gain
    delta = np.where((todo & ~reachable)[:, None], corner, delta)
    delta = np.where(np.isfinite(delta), delta, 0.0) if not reachable.all() else delta
    return delta, reachable.reshape(n)


def _knapsack(c, corner, w, priced, residual):
    """p = 1: (the priced features' greatest total gain, the cheapest move reaching
    `residual`): the features by gain per unit cost |c|/w, each to its box end, the
    last one partly."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(priced, np.abs(c) / np.where(priced, w, 1.0), -1.0)
        order = np.argsort(-ratio, axis=1, kind="stable")
        c_s = np.take_along_axis(c, order, 1)
        end = np.abs(np.take_along_axis(corner, order, 1))
        use = np.take_along_axis(priced, order, 1)
        full = np.where(use, np.abs(c_s) * end, 0.0)
        # the gain of the better features (inf − inf must not arise: not cumsum − full)
        before = np.concatenate([np.zeros((len(c), 1)), np.cumsum(full, 1)[:, :-1]], 1)
        take = np.minimum(end, np.maximum(0.0, (residual[:, None] - before) / np.abs(c_s)))
        take = np.where(use, take, 0.0)
    move = np.zeros_like(c)
    np.put_along_axis(move, order, np.sign(c_s) * take, 1)
    return full.sum(1), move


def _breakpoints(c, corner, w, priced, residual, p):
    """p ∈ {2, ∞}: (the priced features' greatest total gain, the move δ(t*) reaching
    `residual`), δ(t) = clip(t·a, lo, hi) (see `cheapest_linear_recourse`)."""
    w_ = np.where(priced, w, 1.0)
    a = np.where(priced, c / w_**2 if p == 2 else np.sign(c) / w_, 0.0)
    slope = c * a  # ≥ 0: the gain per unit t while a feature moves
    with np.errstate(divide="ignore", invalid="ignore"):
        t_end = np.where(priced, np.abs(corner) / np.abs(np.where(priced, a, 1.0)), 0.0)
    t_s, s_s = _sorted_by_end(t_end, slope)
    with np.errstate(invalid="ignore"):
        full = np.where(s_s > 0, s_s * t_s, 0.0)  # a saturated feature's gain
        saturated = _cumsum_rows(full)
        slope_sum = _row_sums(s_s)
        moving = slope_sum[:, None] - _cumsum_rows(s_s)  # slope after each breakpoint
        at = saturated + np.where(moving > 0, t_s * moving, 0.0)  # gain at each breakpoint
    total = at[:, -1]
    reached = at >= residual[:, None]
    k = _first_true(reached)  # the first breakpoint reaching it
    # on [t_{k-1}, t_k] the gain is saturated_{k-1} + t · moving_{k-1} (flat gathers: faster)
    before = np.arange(len(c)) * c.shape[1] + np.maximum(k - 1, 0)
    base = np.where(k > 0, saturated.ravel().take(before), 0.0)
    rate = np.where(k > 0, moving.ravel().take(before), slope_sum)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(rate > 0, (residual - base) / rate, 0.0)
        move = np.clip(t[:, None] * a, np.minimum(corner, 0.0), np.maximum(corner, 0.0))
    return total, np.where(priced, move, 0.0)


def _sorted_by_end(t_end: np.ndarray, slope: np.ndarray):
    """(t_end, slope) with each row's columns in the order of a stable argsort of t_end.
    Up to 8 columns and no NaN: an odd-even transposition network that swaps neighbours
    only when strictly out of order (so stable, the same permutation), as numpy sorts
    short rows slowly."""
    d = t_end.shape[1]
    if d > 8 or np.isnan(t_end).any():
        order = np.argsort(t_end, axis=1, kind="stable")
        return np.take_along_axis(t_end, order, 1), np.take_along_axis(slope, order, 1)
    t = [t_end[:, j] for j in range(d)]
    s = [slope[:, j] for j in range(d)]
    for r in range(d):
        for j in range(r % 2, d - 1, 2):
            swap = t[j] > t[j + 1]
            if swap.any():
                t[j], t[j + 1] = np.where(swap, t[j + 1], t[j]), np.where(swap, t[j], t[j + 1])
                s[j], s[j + 1] = np.where(swap, s[j + 1], s[j]), np.where(swap, s[j], s[j + 1])
    if not d:
        return t_end.copy(), slope.copy()
    return np.stack(t, 1), np.stack(s, 1)


def _row_sums(m: np.ndarray) -> np.ndarray:
    """m.sum(1), the same numbers: numpy adds fewer than 8 numbers in order, from 0
    (pairwise summation's base case), so column by column does too, faster on short
    rows (`tests/recourse/test_mixed.py` checks it against numpy)."""
    if m.shape[1] >= 8:
        return m.sum(1)
    out = np.zeros(len(m))
    for j in range(m.shape[1]):
        out += m[:, j]
    return out


def _cumsum_rows(m: np.ndarray) -> np.ndarray:
    """np.cumsum(m, 1): the same running sums (an accumulation adds in order), column by
    column, as numpy accumulates short rows slowly."""
    if m.shape[1] > 8:
        return np.cumsum(m, 1)
    out = np.empty_like(m)
    if m.shape[1]:
        out[:, 0] = m[:, 0]
    for j in range(1, m.shape[1]):
        np.add(out[:, j - 1], m[:, j], out=out[:, j])
    return out


def _first_true(mask: np.ndarray) -> np.ndarray:
    """np.argmax(mask, 1) of a boolean mask (each row's first True column, 0 where none),
    column by column, as numpy reduces short rows slowly."""
    if mask.shape[1] > 16:
        return np.argmax(mask, 1)
    first = np.zeros(len(mask), np.intp)
    for j in range(mask.shape[1] - 1, -1, -1):
        np.copyto(first, j, where=mask[:, j])
    return first
