"""Best responses to a deployed linear model (the ``best_response`` strategy): each
member moves to maximise score minus cost within strength ε, on the action set's
feature types (integers, levels, one-hot groups, bounds), and the bounds in force."""

from __future__ import annotations

import numpy as np

from recourse_sim.recourse import ActionSet

__all__ = ["best_response_bounds", "best_response_delta"]


def best_response_delta(
    action_set: ActionSet, X: np.ndarray, coef: np.ndarray, epsilon: float
) -> np.ndarray:
    """The best responses δ (n, d) of rows X to log-odds with gradient `coef` (d,):
    argmax g·δ − ‖w ⊙ δ‖²_p / (2ε) over the action set's box and feature types (its
    budget is not used).

    Continuous features, with h = g / w: p = 2: δ = ε h / w (x + ε·g for unit
    weights, Perdomo et al.'s x_S − ε·θ_S with θ the weights of the *unfavourable*
    class's log-odds); p = 1: ε‖h‖_∞ on the feature of largest |h_j| (the first of
    ties); p = ∞: ε‖h‖_1 sign(h_j) / w_j on every feature. Immutable features and
    changes against a monotone direction get h_j = 0 (exact: moving them never helps);
    value bounds and ``max_change`` then clip δ (exact for p = 2, where u is separable;
    a clip of the unbounded optimum for p = 1, ∞).

    Feature types (`ActionSet`): for p = 2, u is a sum of one concave quadratic per
    feature (one per one-hot group), so the typed optimum is exact feature by feature:
    an integer, binary, ordinal or single-column categorical feature takes the allowed
    value nearest its continuous optimum within the box (`ActionSet.rounded`,
    ``"nearest"``), a one-hot group its best level or stays (every level compared). For
    p = 1 and ∞, u is not separable: δ is the best, by u, of the continuous optimum
    rounded onto the types (nearest and towards x), each feature's (or group's) best
    move alone, and no move: on the types and in the box, not proven optimal."""
    a = action_set
    X = np.asarray(X, dtype=np.float64)
    lo, hi = a.box(X)
    # h_j = 0 where moving never helps: immutable, or the gain lies against the
    # monotone direction
    g = np.where(a.actionable & ~(a.increase_mask & (coef < 0)), coef, 0.0)
    g = np.where(a.decrease_mask & (g > 0), 0.0, g)
    w = np.where(a.actionable, a.weights_, 1.0)
    h = g / w
    eps = float(epsilon)
    if a.p == 2:
        u = eps * h
    elif a.p == 1:
        u = np.zeros_like(h)
        j = int(np.argmax(np.abs(h)))
        u[j] = eps * h[j]
    else:
        u = eps * np.abs(h).sum() * np.sign(h)
    delta = np.clip(u / w, lo, hi)
    if not a.typed:
        return delta
    # each feature (or one-hot group) at its own optimum, the others still
    alone = np.clip(eps * g / w**2, lo, hi)
    alone = a.rounded(X, alone, "nearest", box=(lo, hi))
    for cols in a.onehot_groups_:
        alone[:, cols] = _best_level(
            X[:, cols], g[cols], a.weights_[cols], a.p, eps, lo[:, cols], hi[:, cols]
        )
    if a.p == 2:
        return alone  # u is separable: the units' optima together are the optimum
    candidates = [
        np.zeros_like(delta),
        a.rounded(X, delta, "nearest", box=(lo, hi)),
        a.rounded(X, delta, "toward", box=(lo, hi)),
    ]
    for unit in _units(a):
        one = np.zeros_like(delta)
        one[:, unit] = alone[:, unit]
        candidates.append(one)
    stack = np.stack(candidates, 1)  # (n, candidates, d)
    utility = stack @ coef - np.asarray(a.cost(stack)) ** 2 / (2 * eps)
    # ties go to the earlier candidate: no move first
    return stack[np.arange(len(X)), utility.argmax(1)]


def best_response_bounds(action_set: ActionSet) -> str | None:
    """What bounds a best response (for `recourse-sim validate`): value bounds the
    scenario sets (beyond a discrete feature's own range of levels), ``max_change`` and
    monotone directions of its actionable features, and which of them take only their
    type's values; None when the response is an unbounded continuous move."""
    a = action_set
    own_lower, own_upper = np.full(a.n_features, -np.inf), np.full(a.n_features, np.inf)
    for j, values in a.levels_.items():
        own_lower[j], own_upper[j] = values[0], values[-1]
    for cols in a.onehot_groups_:
        own_lower[cols], own_upper[cols] = 0.0, 1.0
    live = a.actionable
    bounded = live & (
        (a.lower_ > own_lower)
        | (a.upper_ < own_upper)
        | np.isfinite(a.max_change_)
        | a.increase_mask
        | a.decrease_mask
    )
    typed = live & a.discrete_mask
    parts = []
    if bounded.any():
        names = ", ".join(a.feature_names[j] for j in np.flatnonzero(bounded))
        parts.append(
            f"bounds in force on {names} (features.lower/upper/max_change or a monotone "
            "direction): the response is clipped there"
        )
    if typed.any():
        names = ", ".join(f"{a.feature_names[j]} ({a.types_[j]})" for j in np.flatnonzero(typed))
        parts.append(f"typed features {names} move only onto their allowed values")
    if not parts:
        return None
    return "; ".join(parts) + ", which changes the dynamics"


def _units(a: ActionSet) -> list[np.ndarray]:
    """The columns that move together: each actionable feature outside a one-hot group
    alone, and each one-hot group."""
    in_group = np.zeros(a.n_features, bool)
    for cols in a.onehot_groups_:
        in_group[cols] = True
    single = np.flatnonzero(a.actionable & ~in_group)
    return [np.array([j]) for j in single] + list(a.onehot_groups_)


def _best_level(x, g, w, p: float, eps: float, lo, hi) -> np.ndarray:
    """A one-hot group's best move alone: the allowed level (within the box) whose
    switch gains most, g·δ − ‖w ⊙ δ‖²_p / (2ε) over the group's columns, or staying
    (a gain of 0 wins ties)."""
    n, k = x.shape
    moves = np.eye(k)[None] - x[:, None, :]  # (n, level, column): δ to each level
    allowed = ((moves >= lo[:, None] - 1e-12) & (moves <= hi[:, None] + 1e-12)).all(-1)
    cost = np.linalg.norm(moves * w, ord=p, axis=-1)
    gain = np.where(allowed, moves @ g - cost**2 / (2 * eps), -np.inf)
    best = gain.argmax(1)
    stay = ~(gain[np.arange(n), best] > 0)
    return np.where(stay[:, None], 0.0, moves[np.arange(n), best])
