"""Recourse baselines that need no gradient: growing spheres and nearest-neighbour recourse.

Both look for the favourable label (h(x) > 0.5 under the deployed classifier h), go
through an `ActionSet` (every returned δ is feasible) and return the same
`RecourseResult` as `individual_recourse` (whose "wachter" and "pgd" methods are the
gradient baselines). Both are batched over the rows of X.

* `growing_spheres` — Laugel et al. (2017), "Inverse classification for
  comparison-based interpretability": sample uniformly in an ℓ2 ball around x, halve its
  radius η until it holds no point of the favourable class ("enemy"), then sample
  growing spherical layers [η, 2η], [2η, 3η], … until one does; take the ℓ2-closest
  enemy, then (feature selection) move its features back to x's, smallest change
  first, while it stays an enemy.
* `nearest_neighbour_recourse` — the cheapest reachable point of a pool of real
  instances that h scores above a threshold (GenRe §5.5: NNR; with the pool = label-1
  training rows and threshold γ it is the λ → ∞ limit of GenRe's Q).
"""

from __future__ import annotations

import numpy as np

from recourse_sim.errors import ConfigError
from recourse_sim.recourse.action_set import ActionSet
from recourse_sim.recourse.genre import score_function, snap_to_levels
from recourse_sim.recourse.individual import RecourseResult

# Candidate points evaluated at once (rows × samples or rows × pool): bounds memory.
_CANDIDATES_PER_CHUNK = 200_000
# Halvings of the initial radius before giving up on an enemy-free ball: 2⁻³⁰ is far
# below any meaningful feature resolution.
_MAX_HALVINGS = 30


def _check_inputs(X, action_set: ActionSet) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != action_set.n_features:
        raise ConfigError(
            f"X has shape {X.shape}, the action set has {action_set.n_features} features"
        )
    if not np.isfinite(X).all():
        raise ConfigError("X contains NaN or infinite values")
    return X


def _result(X: np.ndarray, delta: np.ndarray, score_fn, action_set: ActionSet) -> RecourseResult:
    score = score_fn(X + delta)
    return RecourseResult(
        delta=delta,
        loss=-np.log(np.clip(score, 1e-300, None)),
        success=score > 0.5,
        cost=np.asarray(action_set.cost(delta)),
    )


def growing_spheres(
    X,
    classifier,
    action_set: ActionSet,
    *,
    n_samples: int = 1000,
    first_radius: float = 1.0,
    max_layers: int = 1000,
    sparse: bool = True,
    levels: dict[int, np.ndarray] | None = None,
    random_state=None,
) -> RecourseResult:
    """Growing-spheres recourse towards h(x) > 0.5 for every row of X.

    Parameters
    ----------
    X : (n, d) instances.
    classifier : the deployed model h (``predict_proba`` or a callable returning
        P(favourable | x); see `recourse_sim.recourse.genre.score_function`).
    action_set : feasible changes; samples move only its actionable features and are
        projected onto it before they are scored.
    n_samples : points drawn per ball or layer and row.
    first_radius : η₀, the initial ball radius (ℓ2, in the features' units).
    max_layers : layers tried per row before giving up (δ = 0, success False).
    sparse : run Laugel et al.'s feature-selection step on the found enemy.
    levels : {feature: sorted levels}; those features are snapped to their nearest
        level after projection (e.g. binary features rounded).
    random_state : seeds the samples (int, numpy Generator or None).

    Rows already favourable keep δ = 0.
    """
    X = _check_inputs(X, action_set)
    for name, value in (("n_samples", n_samples), ("max_layers", max_layers)):
        if not isinstance(value, int | np.integer) or value < 1:
            raise ConfigError(f"{name}={value!r} must be a positive integer")
    if not np.isfinite(first_radius) or first_radius <= 0:
        raise ConfigError(f"first_radius={first_radius!r} must be a positive number")
    rng = np.random.default_rng(random_state)
    score_fn = score_function(classifier)
    levels = levels or {}
    n, d = X.shape
    delta = np.zeros((n, d))
    todo = np.flatnonzero(score_fn(X) <= 0.5)
    if len(todo) and action_set.actionable.any():
        rows_per_chunk = max(1, _CANDIDATES_PER_CHUNK // n_samples)
        for start in range(0, len(todo), rows_per_chunk):
            rows = todo[start : start + rows_per_chunk]
            found = _grow(
                X[rows], score_fn, action_set, levels, n_samples, first_radius, max_layers, rng
            )
            if sparse:
                found = _sparsify(X[rows], found, score_fn)
            delta[rows] = found
    return _result(X, delta, score_fn, action_set)


def _candidates(X, radius_lo, radius_hi, action_set, levels, n_samples, rng):
    """(m, n_samples, d) feasible changes with their actionable part drawn uniformly
    from the ℓ2 spherical layer radius_lo ≤ ‖δ‖ ≤ radius_hi (per row)."""
    m, d = X.shape
    free = action_set.actionable
    k = int(free.sum())
    direction = rng.standard_normal((m, n_samples, k))
    direction /= np.linalg.norm(direction, axis=-1, keepdims=True)
    # uniform in volume: P(r ≤ t) ∝ tᵏ between the two radii
    lo_k, hi_k = radius_lo[:, None] ** k, radius_hi[:, None] ** k
    radius = (lo_k + rng.uniform(size=(m, n_samples)) * (hi_k - lo_k)) ** (1.0 / k)
    delta = np.zeros((m, n_samples, d))
    delta[..., free] = radius[..., None] * direction
    flat_x = np.repeat(X, n_samples, axis=0)
    delta = np.asarray(action_set.project(flat_x, delta.reshape(-1, d)))
    if levels:
        delta = snap_to_levels(flat_x + delta, levels) - flat_x
    return delta.reshape(m, n_samples, d)


def _closest_enemy(X, delta, score_fn):
    """Per row: (any enemy among the candidates, the ℓ2-closest enemy's δ)."""
    m, s, d = delta.shape
    enemy = (score_fn((X[:, None, :] + delta).reshape(-1, d)) > 0.5).reshape(m, s)
    dist = np.where(enemy, np.linalg.norm(delta, axis=-1), np.inf)
    best = dist.argmin(1)
    return enemy.any(1), delta[np.arange(m), best]


def _grow(X, score_fn, action_set, levels, n_samples, eta0, max_layers, rng):
    m, d = X.shape
    out = np.zeros((m, d))
    zero = np.zeros(m)
    # phase 1: halve η until the ball B(x, η) holds no enemy
    eta = np.full(m, float(eta0))
    shrinking = np.ones(m, dtype=bool)
    for _ in range(_MAX_HALVINGS):
        idx = np.flatnonzero(shrinking)
        if not len(idx):
            break
        cand = _candidates(X[idx], zero[idx], eta[idx], action_set, levels, n_samples, rng)
        has, _ = _closest_enemy(X[idx], cand, score_fn)
        eta[idx[has]] /= 2
        shrinking[idx[~has]] = False
    # phase 2: layers [η, 2η], [2η, 3η], … until one holds an enemy. Once a layer's
    # outer radius passes the farthest corner of the row's box, nothing is left to find.
    reach = np.linalg.norm(np.maximum(*(np.abs(b) for b in action_set.box(X))), axis=1)
    searching = np.ones(m, dtype=bool)
    for layer in range(1, max_layers + 1):
        idx = np.flatnonzero(searching)
        if not len(idx):
            break
        lo, hi = layer * eta[idx], (layer + 1) * eta[idx]
        cand = _candidates(X[idx], lo, hi, action_set, levels, n_samples, rng)
        has, best = _closest_enemy(X[idx], cand, score_fn)
        out[idx[has]] = best[has]
        searching[idx[has]] = False
        searching[idx[~has & (hi >= reach[idx])]] = False
    return out


def _sparsify(X, delta, score_fn):
    """Laugel et al.'s feature selection: undo the smallest remaining change while the
    point stays an enemy; keep the last enemy.

    Undoing a change (δ_j ← 0) never leaves the action set (0 is inside every box and
    the norm only shrinks) and puts a snapped feature back on x's own level.
    """
    current = delta.copy()
    active = (delta != 0).any(1)
    for _ in range(X.shape[1]):
        idx = np.flatnonzero(active)
        if not len(idx):
            break
        trial = current[idx].copy()
        size = np.where(trial != 0, np.abs(trial), np.inf)
        j = size.argmin(1)
        has_change = np.isfinite(size[np.arange(len(idx)), j])
        trial[np.arange(len(idx)), j] = 0.0
        still = (score_fn(X[idx] + trial) > 0.5) & has_change
        current[idx[still]] = trial[still]
        active[idx[~still]] = False
    return current


def nearest_neighbour_recourse(
    X,
    pool,
    classifier,
    action_set: ActionSet,
    *,
    threshold: float = 0.5,
) -> RecourseResult:
    """The cheapest reachable favourable instance of `pool` for every row of X.

    Parameters
    ----------
    X : (n, d) instances.
    pool : (m, d) real instances to choose from (e.g. the training rows, or only the
        label-1 ones for GenRe's NNR(D⁺)).
    classifier : the deployed model h (``predict_proba`` or a callable).
    action_set : a pool point c is reachable from x when δ = c − x is in the action set
        (immutables equal, directions, bounds, budget); the cheapest by the action
        set's cost is returned.
    threshold : pool points need h(c) > threshold (0.5: predicted favourable; GenRe's
        γ = 0.7 for confident ones).

    A row with no reachable candidate keeps δ = 0 (success is then h(x) > 0.5).
    """
    X = _check_inputs(X, action_set)
    pool = np.asarray(pool, dtype=np.float64)
    if pool.ndim != 2 or pool.shape[1] != X.shape[1]:
        raise ConfigError(f"pool has shape {pool.shape}, expected (m, {X.shape[1]})")
    if not 0 <= threshold < 1:
        raise ConfigError(f"threshold={threshold!r} must be in [0, 1)")
    score_fn = score_function(classifier)
    cand = pool[score_fn(pool) > threshold] if len(pool) else pool
    n, d = X.shape
    delta = np.zeros((n, d))
    if len(cand) == 0:
        return _result(X, delta, score_fn, action_set)
    lo, hi = (np.asarray(b) for b in action_set.box(X))
    w = action_set.weights_
    rows_per_chunk = max(1, _CANDIDATES_PER_CHUNK // len(cand))
    for start in range(0, n, rows_per_chunk):
        rows = slice(start, start + rows_per_chunk)
        diff = cand[None, :, :] - X[rows, None, :]
        ok = ((diff >= lo[rows, None, :]) & (diff <= hi[rows, None, :])).all(-1)
        cost = np.linalg.norm(diff * w, ord=action_set.p, axis=-1)
        cost = np.where(ok & (cost <= action_set.epsilon), cost, np.inf)
        best = cost.argmin(1)
        reachable = np.isfinite(cost[np.arange(len(best)), best])
        chosen = diff[np.arange(len(best)), best]
        delta[rows] = np.where(reachable[:, None], chosen, 0.0)
    return _result(X, delta, score_fn, action_set)


__all__ = ["growing_spheres", "nearest_neighbour_recourse"]
