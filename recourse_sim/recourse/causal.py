"""Recourse in a causal world: counterfactual explanations, causal recourse and
improvement-focused causal recourse (König et al., "Performative Validity of Recourse
Explanations", NeurIPS 2025).

For each rejected person the three types choose the cheapest action (cost
``ActionSet.cost`` of the change of the acted-on features) that meets their goal:

* ``ce``: change features directly: the search holds every other feature at its own
  value; goal: the deployed model's favourable decision on the resulting features.
  How the change then acts on the world (descendants kept, or following as under an
  intervention) is the world's ``direct_changes``
  (`recourse_sim.env.worlds.Scm.directly_changed`);
* ``cr``: intervene on actionable features, do(X_I = x_I + δ_I); every descendant
  follows through the structural equations with the person's own noise (the label
  too); goal: the favourable decision on the resulting features;
* ``icr``: intervene as ``cr``; goal: the person's *true* outcome becomes favourable
  (improvement), whatever the model says.

The search is exact over a grid: each actionable feature changes by k steps, |k| ≤ K
(`grid_steps`: whole numbers, at least 1, for integer nodes, a quarter of the feature's
standard deviation else), and a combination is admissible only if the action set
contains it (``ActionSet.contains``: bounds, monotone directions, immutable features,
the budget ε). Ties go to the first combination in grid order. People for whom nothing
on the grid meets the goal change nothing. `ordered_search` (the default) tries the
combinations cheapest first and stops at each person's first hit; `enumerate_search`
tries every combination for every person; both give the same answers.

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

__all__ = [
    "RECOURSE_TYPES",
    "SEARCH_METHODS",
    "CausalResult",
    "action_grid",
    "causal_recourse",
    "enumerate_search",
    "grid_steps",
    "ordered_search",
    "search_summary",
]

RECOURSE_TYPES = ("ce", "cr", "icr")
SEARCH_METHODS = ("ordered", "enumerate")
MAX_GRID = 100_000  # candidate actions per person (the grid grows as (2K + 1)^d)
# above this many candidate actions per person `recourse-sim validate` warns: a seeker
# without an answer within the budget tries every one of them, every round
LARGE_GRID = 10_000
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


def grid_steps(world) -> np.ndarray:
    """Each feature's step on the search grid: a quarter of its standard deviation,
    whole numbers (at least 1) for integer nodes."""
    quarter_sd = world.feature_sd() / 4
    return np.where(world.integer, np.maximum(1.0, np.round(quarter_sd)), quarter_sd)


def search_summary(env) -> list[str]:
    """Lines for `recourse-sim validate` about each causal-recourse population of `env`
    (a reset `recourse_sim.env.RecourseEnv` on a causal world): its candidate actions per
    person and the most CPU a round's search can take (every seeker trying every action
    within the budget, at the rate measured on 4,096 of them here), and a ``warning:``
    line above `LARGE_GRID` actions per person. Raises ConfigError above `MAX_GRID`."""
    import time

    def favoured(F: np.ndarray, rows: np.ndarray) -> np.ndarray:
        # the deployed model's cost, not the decision rule's answer: only timed
        return env.learner.predict_proba(F)[:, env.world.favourable] >= 0.5

    lines: list[str] = []
    for s in env.strategies:
        kind = getattr(s.spec, "recourse", None)
        if kind is None:
            continue
        world, K = env.world, s.spec.search_steps
        grid = action_grid(grid_steps(world), s.action_set.actionable, K)
        m, movable = len(grid), int(s.action_set.actionable.sum())
        people = world.newcomers(1, np.random.default_rng(0))

        sample = grid[np.random.default_rng(0).permutation(m)[:4096]]
        started = time.process_time()
        _admissible(
            kind,
            world,
            people.X,
            people.noise,
            np.zeros(1, np.int64),
            sample,
            s.action_set,
            favoured,
        )
        rate = len(sample) / max(time.process_time() - started, 1e-6)
        worst = world.cohort_size * m / rate
        lines.append(
            f"causal search: populations.{s.population} ({kind}): {m:,} candidate actions "
            f"per person ({movable} actionable features, ±{K} steps each); at most "
            f"{world.cohort_size:,} seekers × {m:,} actions a round, about {worst:.3g} s "
            "CPU (the search tries the cheapest first and stops at each seeker's answer: "
            "usually far less)"
        )
        if m > LARGE_GRID:
            lines.append(
                f"warning: populations.{s.population}.search_steps: {m:,} candidate actions "
                f"per person (above {LARGE_GRID:,}); a seeker with no recourse within the "
                "budget tries them all every round: lower search_steps, the budget "
                "epsilon or the actionable features"
            )
    return lines


def causal_recourse(
    kind: str,
    world,
    X: np.ndarray,
    noise: np.ndarray,
    seekers: np.ndarray,
    action_set: ActionSet,
    favoured: Callable[[np.ndarray, np.ndarray], np.ndarray],
    grid: np.ndarray,
    method: str = "ordered",
) -> CausalResult:
    """The cheapest action of type `kind` for each seeker (see the module docstring).

    `world` is a `recourse_sim.env.worlds.Scm`; `X` (n, d) the true features, `noise`
    (n, k) each person's exogenous noise; `favoured(F, rows)` the deployed decision rule
    on features F of the people `rows`; `grid` (m, d) the candidate changes
    (`action_grid`). `method`: ``"ordered"`` (`ordered_search`) or ``"enumerate"``
    (`enumerate_search`): the same answers, the first one checks far fewer actions."""
    if kind not in RECOURSE_TYPES:
        raise ValueError(f"unknown recourse type {kind!r}")
    if method not in SEARCH_METHODS:
        raise ValueError(f"unknown search method {method!r}")
    search = ordered_search if method == "ordered" else enumerate_search
    return search(kind, world, X, noise, seekers, action_set, favoured, grid)


def enumerate_search(kind, world, X, noise, seekers, action_set, favoured, grid) -> CausalResult:
    """`causal_recourse` by trying every action of the grid for every seeker."""
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
        ok, F = _admissible(kind, world, X, noise, chunk, grid, action_set, favoured)
        costs = np.where(ok, grid_cost[None, :], np.inf)
        best = costs.argmin(1)  # first of the cheapest (grid order)
        hit = np.isfinite(costs[np.arange(r), best])
        pick = np.arange(r) * m + best
        delta[chunk] = np.where(hit[:, None], F[pick] - X[chunk], 0.0)
        acted[chunk] = hit[:, None] & (grid[best] != 0)
        found[chunk] = hit
        cost[chunk] = np.where(hit, grid_cost[best], 0.0)
    return CausalResult(delta, acted, found, cost)


def ordered_search(kind, world, X, noise, seekers, action_set, favoured, grid) -> CausalResult:
    """`causal_recourse` by trying the grid's actions cheapest first, each seeker only
    until their first admissible action that meets the goal.

    Every person's candidates cost the same (the cost is a norm of the change), so the
    grid is sorted once by (cost, grid order), and actions dearer than the budget ε are
    dropped (`ActionSet.contains` would refuse them). The first admissible action in
    that order is the cheapest, the first of ties in grid order: the answer of
    `enumerate_search`, exactly. A seeker stops at their answer, so the work is the
    number of actions cheaper than it, not the grid's size; a seeker with no answer
    still tries every action within the budget. Blocks of the sorted grid double in
    size (1, 2, 4, ...), as long as people × actions stay within a memory bound."""
    n, d = X.shape
    delta = np.zeros((n, d))
    acted = np.zeros((n, d), bool)
    found = np.zeros(n, bool)
    cost = np.zeros(n)
    grid_cost = np.asarray(action_set.cost(grid), dtype=np.float64)
    order = np.lexsort((np.arange(len(grid)), grid_cost))
    # (a little above the tolerance of `ActionSet.contains`, which still decides)
    order = order[grid_cost[order] <= (action_set.epsilon + 1e-9) * (1 + 1e-9)]
    active = np.flatnonzero(seekers)
    start, size = 0, 1
    while len(active) and start < len(order):
        size = max(1, min(size, _ROWS_PER_CHUNK // len(active)))
        block = order[start : start + size]
        ok, _ = _admissible(kind, world, X, noise, active, grid[block], action_set, favoured)
        hit = ok.any(1)
        if hit.any():
            rows = active[hit]
            best = block[ok[hit].argmax(1)]  # the first admissible in (cost, grid) order
            new = _after_action(kind, world, X[rows], noise[rows], grid[best])
            delta[rows] = new[:, world.feature_nodes] - X[rows]
            acted[rows] = grid[best] != 0
            found[rows] = True
            cost[rows] = grid_cost[best]
            active = active[~hit]
        start += len(block)
        size *= 2
    return CausalResult(delta, acted, found, cost)


def _admissible(kind, world, X, noise, rows, grid, action_set, favoured):
    """Which actions of `grid` (m, d) are admissible and meet the goal for each person of
    `rows` (r,): (ok (r, m), every node's features after each action (r·m, d))."""
    r, m = len(rows), len(grid)
    X0 = np.repeat(X[rows], m, axis=0)  # (r·m, d): person-major
    D = np.tile(grid, (r, 1))
    new = _after_action(kind, world, X0, np.repeat(noise[rows], m, axis=0), D)
    F = new[:, world.feature_nodes]
    if kind == "icr":
        goal = world.favourable_label(new[:, world.label]) == world.favourable
    else:
        goal = favoured(F, np.repeat(rows, m))
    ok = goal & action_set.contains(X0, D)
    return ok.reshape(r, m), F


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
