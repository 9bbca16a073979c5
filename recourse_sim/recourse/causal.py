"""Recourse in a causal world: counterfactual explanations, causal recourse and
improvement-focused causal recourse (König et al., "Performative Validity of Recourse
Explanations", NeurIPS 2025).

For each rejected person the three types choose the cheapest action (cost
``ActionSet.cost`` of the change of the acted-on features) that meets their goal:

* ``ce``: change features directly, nothing propagates: the changed features take
  their new values and every other feature keeps its own; goal: the deployed
  model's favourable decision on the resulting features;
* ``cr``: intervene on actionable features, do(X_I = x_I + δ_I); every descendant
  follows through the structural equations with the person's own noise (the label
  too); goal: the favourable decision on the resulting features;
* ``icr``: intervene as ``cr``; goal: the person's *true* outcome becomes favourable
  (improvement), whatever the model says.

The search is exact over a grid: each actionable feature changes by k steps, |k| ≤ K
(a step of 1 for integer nodes, a quarter of the feature's standard deviation else),
every combination is tried for every person at once, and a combination is admissible
only if the action set contains it (``ActionSet.contains``: bounds, monotone
directions, immutable features, the budget ε). Ties go to the first combination in
grid order. People for whom nothing on the grid meets the goal change nothing.

The person's own noise is known to the search (the world keeps it): an individual who
knows how their features and outcome would respond to an action. König et al.'s
individualised recourse instead integrates over the posterior of the unobserved label
noise and asks for a probability ≥ 0.9.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import product

import numpy as np

from recourse_sim.errors import ConfigError
from recourse_sim.recourse.action_set import ActionSet

__all__ = ["RECOURSE_TYPES", "CausalResult", "action_grid", "causal_recourse"]

RECOURSE_TYPES = ("ce", "cr", "icr")
MAX_GRID = 100_000  # candidate actions per person (the grid grows as (2K + 1)^d)
_ROWS_PER_CHUNK = 400_000  # person × action rows evaluated at once (memory bound)


@dataclass(frozen=True)
class CausalResult:
    """One search's answer for every person (zero rows for people who found nothing)."""

    delta: np.ndarray  # (n, d) change of the person's true features (descendants included)
    acted: np.ndarray  # (n, d) bool: the features acted on (intervened or set)
    found: np.ndarray  # (n,) bool: an admissible action meets the goal
    cost: np.ndarray  # (n,) its cost (0 where none was found)


def action_grid(steps: np.ndarray, actionable: np.ndarray, K: int) -> np.ndarray:
    """Every combination of k_j · step_j, |k_j| ≤ K on actionable features (0 on the
    others): (m, d), the zero action first."""
    d = len(steps)
    axes = [
        np.arange(-K, K + 1) * steps[j] if actionable[j] else np.zeros(1, dtype=np.float64)
        for j in range(d)
    ]
    m = int(np.prod([len(a) for a in axes]))
    if m > MAX_GRID:
        raise ConfigError(
            f"search_steps: {K} steps on {int(actionable.sum())} actionable features make "
            f"{m:,} candidate actions per person (at most {MAX_GRID:,}); lower search_steps "
            "or restrict the population's actionable features"
        )
    grid = np.array(list(product(*axes)), dtype=np.float64).reshape(m, d)
    zero = np.flatnonzero((grid == 0).all(1))[0]
    return np.concatenate([grid[zero : zero + 1], np.delete(grid, zero, axis=0)])


def causal_recourse(
    kind: str,
    world,
    X: np.ndarray,
    noise: np.ndarray,
    seekers: np.ndarray,
    action_set: ActionSet,
    favoured: Callable[[np.ndarray, np.ndarray], np.ndarray],
    grid: np.ndarray,
) -> CausalResult:
    """The cheapest action of type `kind` for each seeker (see the module docstring).

    `world` is a `recourse_sim.env.worlds.Scm`; `X` (n, d) the true features, `noise`
    (n, k) each person's exogenous noise; `favoured(F, rows)` the deployed decision rule
    on features F of the people `rows`; `grid` (m, d) the candidate changes
    (`action_grid`)."""
    if kind not in RECOURSE_TYPES:
        raise ValueError(f"unknown recourse type {kind!r}")
    n, d = X.shape
    delta = np.zeros((n, d))
    acted = np.zeros((n, d), bool)
    found = np.zeros(n, bool)
    cost = np.zeros(n)
    rows = np.flatnonzero(seekers)
    m = len(grid)
    grid_cost = np.asarray(action_set.cost(grid), dtype=np.float64)
    per_chunk = max(1, _ROWS_PER_CHUNK // m)
    for start in range(0, len(rows), per_chunk):
        chunk = rows[start : start + per_chunk]
        r = len(chunk)
        X0 = np.repeat(X[chunk], m, axis=0)  # (r·m, d): person-major
        D = np.tile(grid, (r, 1))
        new = _after_action(kind, world, X0, np.repeat(noise[chunk], m, axis=0), D)
        F = new[:, world.feature_nodes]
        if kind == "icr":
            goal = world.favourable_label(new[:, world.label]) == world.favourable
        else:
            goal = favoured(F, np.repeat(chunk, m))
        ok = goal & action_set.contains(X0, D)
        ok = ok.reshape(r, m)
        costs = np.where(ok, grid_cost[None, :], np.inf)
        best = costs.argmin(1)  # first of the cheapest (grid order)
        hit = np.isfinite(costs[np.arange(r), best])
        pick = np.arange(r) * m + best
        delta[chunk] = np.where(hit[:, None], F[pick] - X[chunk], 0.0)
        acted[chunk] = hit[:, None] & (grid[best] != 0)
        found[chunk] = hit
        cost[chunk] = np.where(hit, grid_cost[best], 0.0)
    return CausalResult(delta, acted, found, cost)


def _after_action(kind: str, world, X: np.ndarray, noise: np.ndarray, D: np.ndarray) -> np.ndarray:
    """Every node's value after each row's action D on features X (see the module
    docstring): ce sets the features, cr/icr intervene and the descendants follow."""
    if kind == "ce":
        return world.values_of(X + D, noise)
    values = world.values_of(X, noise)
    fixed = np.zeros(values.shape, bool)
    fixed[:, world.feature_nodes] = D != 0
    target = values.copy()
    target[:, world.feature_nodes] += D
    return world.scm.intervene(noise, fixed, target)
