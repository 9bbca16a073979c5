"""The budget's root: the largest step along a path of changes whose cost stays within
the budget ε, found row by row (safeguarded Newton where the excess has a slope, regula
falsi with the Illinois modification where it has not)."""

from __future__ import annotations

import numpy as np

__all__ = ["budget_excess", "feasible_root"]

_ROOT_STEPS = 100  # cap on root-search steps; most rows converge in under 5
# Relative excess that the multiplier's Newton steps aim at: inside the budget by less
# than the search's tolerance (1e-13), by more than the excess's rounding error.
_NEWTON_AIM = 5e-14


def budget_excess(cost: np.ndarray, eps: float) -> np.ndarray:
    """1 − ε / cost: positive over budget, ≤ 0 within, and for an ℓ2 cost that shrinks
    like 1 / (1 + λ w²) nearly linear in the multiplier λ (exactly so for one weight and
    no box), so that regula falsi needs few steps. Finite even where cost = 0."""
    return np.maximum(1.0 - eps / cost, -1e300)  # callers silence the division by 0


def feasible_root(
    excess, lo: np.ndarray, hi: np.ndarray, done: np.ndarray, start: np.ndarray | None = None
) -> np.ndarray:
    """Per row, the root of a non-increasing `excess(λ)` in [lo, hi], from the feasible side.

    Needs excess(lo) > 0 ≥ excess(hi) on the rows not already `done`; `excess` is
    relative (e.g. cost / ε − 1), so one tolerance fits every scale. It returns the
    excess, or (excess, its derivative in λ). The search starts at `start` (default lo;
    e.g. a nearby problem's root). With the derivative each step is Newton's from the
    last point, or bisection where Newton would leave the bracket; without it, regula
    falsi with the Illinois modification (bisection while an end's excess is unknown).
    The bracket is kept, so the returned λ always has excess(λ) ≤ 0 (feasible); Newton
    aims a little inside the budget so that it converges on that side. Float64 numpy
    arrays in and out.
    """
    done = done | np.isinf(hi)  # a budget so small that λ overflows: the limit λ = inf
    x = lo if start is None else np.minimum(np.maximum(start, lo), hi)
    f_x, slope = _with_slope(excess(x))
    # x splits the bracket; the excess at the end it does not replace is not known yet
    inside = (f_x <= 0) & ~done
    unknown = np.full_like(lo, np.nan)
    lo, f_lo = np.where(inside, lo, x), np.where(inside, unknown, f_x)
    hi, f_hi = np.where(inside, x, hi), np.where(inside, f_x, unknown)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if slope is not None:
            return _newton_root(excess, lo, hi, f_hi, x, f_x, slope, done)
        return _illinois_root(excess, lo, hi, f_lo, f_hi, done)


def _converged(lo, hi, f_hi, done) -> np.ndarray:
    """Rows whose feasible end hi is the root to the search's tolerance."""
    return done | (hi - lo <= 1e-13 * hi) | (f_hi >= -1e-13)


def _newton_root(excess, lo, hi, f_hi, x, f_x, slope, done) -> np.ndarray:
    """`feasible_root` by safeguarded Newton (bisection where Newton leaves the bracket)."""
    searching = ~done
    for _ in range(_ROOT_STEPS):
        if _converged(lo, hi, f_hi, done).all():
            break
        c = x - (f_x + _NEWTON_AIM) / slope
        outside = ~((c > lo) & (c < hi))  # (NaN too)
        if outside.any():
            c = np.where(outside, 0.5 * (lo + hi), c)
        f_c, slope = excess(c)
        feasible = (f_c <= 0) & searching  # hi only ever moves to feasible points
        hi, f_hi = np.where(feasible, c, hi), np.where(feasible, f_c, f_hi)
        lo = np.where(feasible, lo, c)
        x, f_x = c, f_c
    return hi


def _illinois_root(excess, lo, hi, f_lo, f_hi, done) -> np.ndarray:
    """`feasible_root` by regula falsi with the Illinois modification."""
    f_lo = np.where(done, 1.0, f_lo)
    last = np.zeros_like(lo)  # +1: the previous step moved hi, −1: it moved lo
    for _ in range(_ROOT_STEPS):
        converged = _converged(lo, hi, f_hi, done)
        if converged.all():
            break
        c = np.minimum(np.maximum(hi - f_hi * (hi - lo) / (f_hi - f_lo), lo), hi)
        c = np.where(np.isnan(c), 0.5 * (lo + hi), c)
        f_c = excess(c)
        feasible = (f_c <= 0) & ~converged
        infeasible = (f_c > 0) & ~converged
        # Illinois: halve the stale end's value when the same end moves twice running
        f_lo = np.where(feasible & (last == 1), 0.5 * f_lo, f_lo)
        f_hi = np.where(infeasible & (last == -1), 0.5 * f_hi, f_hi)
        hi, f_hi = np.where(feasible, c, hi), np.where(feasible, f_c, f_hi)
        lo, f_lo = np.where(infeasible, c, lo), np.where(infeasible, f_c, f_lo)
        last = np.where(feasible, 1.0, np.where(infeasible, -1.0, last))
    return hi


def _with_slope(value) -> tuple[np.ndarray, np.ndarray | None]:
    """(excess, derivative or None) from what an `excess` function returns."""
    return value if isinstance(value, tuple) else (value, None)
