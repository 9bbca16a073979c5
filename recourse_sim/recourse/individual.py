"""Individual recourse: each person perturbs their own features to reach a goal label.

All methods are batched over the rows of X and go through the `ActionSet`, so every
returned perturbation is feasible:

* ``"pgd"`` — OAR Eq. (2): minimise the goal-label loss ℓ(f(x+δ), goal) over the action
  set by projected (normalised) gradient descent, keeping each row's best iterate.
* ``"wachter"`` — Wachter et al.: minimise ℓ(f(x+δ), goal) + λ·cost(δ) by projected
  gradient descent (cheaper recourse, not necessarily the lowest loss).
* ``"linear"`` — Ross et al. §3.2: the minimiser over the action set of the linearised
  loss ∇ₓℓ(f(x), goal)ᵀδ. Closed form for the box intersected with the ℓ∞ or ℓ1 ball,
  a one-dimensional multiplier search for the ℓ2 ball; ``solver="highs"`` solves the
  same linear program with `scipy.optimize.linprog` (p ∈ {1, ∞}, one LP per row).

Two objectives. ``"budget"`` (OAR Eq. 2) is the above: the best goal loss within ε,
whatever part of ε that takes. ``"min_cost"`` is recourse as the recourse literature
defines it (Ustun et al., Wachter et al., Ross et al., DiCE): the least-cost action that
gets the goal *decision*: p(goal | x + δ) ≥ a target probability (the deployed rule's
threshold or cut-off score), or the argmax. For a binary linear model it is solved
exactly (`cheapest_linear_recourse`: a knapsack for p = 1, the breakpoints of a
piecewise-linear multiplier path for p ∈ {2, ∞}; on a typed action set
`recourse_sim.recourse.mixed.mixed_cheapest_recourse`, exact over the types too); for
other models each method's own
path is followed from x and stopped at the first point that gets the decision (a
bisection on the step that crosses it): PGD's and Wachter's iterates, or the segment
from x to the linear method's δ*.

Feature types (integer, binary, ordinal, categorical; see `ActionSet`): every method
solves the relaxation (the types' ranges as bounds) and `repair_types` moves its answer
onto the typed set: each discrete feature rounded in the direction that raises the goal
score, to the nearest allowed value, or towards x; the continuous features then scaled
back into the budget (and, for ``min_cost``, as far back as the decision allows); per
row the candidate of lowest goal loss (``budget``) or the cheapest that still gets the
decision (``min_cost``; none: δ = 0). So no answer ever leaves the typed set. The
``min_cost`` objective of a binary linear model needs no repair: it is solved exactly
over the types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.errors import ConfigError
from recourse_sim.lazy import LazyModule
from recourse_sim.learners.base import Learner, State
from recourse_sim.recourse.action_set import ActionSet
from recourse_sim.recourse.cheapest import cheapest_linear_recourse
from recourse_sim.recourse.linear_program import goal_loss, linear_recourse
from recourse_sim.recourse.mixed import mixed_cheapest_recourse

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds this without torch
    torch = LazyModule("torch", globals())

METHODS = ("pgd", "wachter", "linear")
OBJECTIVES = ("budget", "min_cost")
# bisection steps along a segment to the decision boundary (the share to 2^-40)
BOUNDARY_STEPS = 40


@dataclass(frozen=True)
class RecourseResult:
    """Per-row outcome of individual recourse."""

    delta: np.ndarray  # (n, d) feasible perturbations
    loss: np.ndarray  # (n,) goal-label cross-entropy at x + δ
    success: np.ndarray  # (n,) the learner predicts the goal at x + δ
    cost: np.ndarray  # (n,) action-set cost of δ


def individual_recourse(
    learner: Learner,
    X,
    goal,
    action_set: ActionSet,
    method: str = "pgd",
    *,
    objective: str = "budget",
    target=None,
    margin: float | np.ndarray = 0.0,
    state: State | None = None,
    steps: int = 100,
    step_size: float | None = None,
    lam: float = 0.1,
    solver: str = "closed_form",
) -> RecourseResult:
    """Recourse for every row of X towards `goal` (an int or one int per row).

    `objective`: ``"budget"`` (the lowest goal loss within ε, OAR Eq. 2) or
    ``"min_cost"`` (the least-cost action that gets the goal decision; where none costs
    ε or less, δ = 0 and success is False). The goal decision is p(goal | x + δ) ≥
    `target` + `margin` (`target`: a probability, or one per row, e.g. the deployed
    rule's threshold or the round's cut-off score; `margin`: a number, or one per row),
    or with `target` None the argmax, ahead of every other class by `margin`; `success`
    reports it for both objectives.
    `state` defaults to the learner's current parameters. `steps` and `step_size` (cost
    per step, default 2.5·ε/steps as in Madry et al.'s PGD) drive "pgd" and "wachter"; `lam` is
    Wachter's cost weight λ; `solver` ("closed_form" or "highs") is for "linear".
    """
    X_np, goal_np, state = _checked(learner, X, goal, action_set, method, steps, state)
    need = _needed(objective, target, margin, len(X_np))
    delta = individual_delta(
        learner,
        X_np,
        goal_np,
        action_set,
        method,
        objective=objective,
        target=target,
        margin=margin,
        state=state,
        steps=steps,
        step_size=step_size,
        lam=lam,
        solver=solver,
    )
    proba = learner.proba_np(state, X_np + delta)  # for both the loss and the decision
    p_goal = proba[np.arange(len(X_np)), goal_np]
    return RecourseResult(
        delta=delta,
        loss=-np.log(np.maximum(p_goal, 1e-300)),
        success=_holds(proba, goal_np, need, margin),
        cost=np.asarray(action_set.cost(delta)),
    )


def individual_delta(
    learner: Learner,
    X,
    goal,
    action_set: ActionSet,
    method: str = "pgd",
    *,
    objective: str = "budget",
    target=None,
    margin: float | np.ndarray = 0.0,
    state: State | None = None,
    steps: int = 100,
    step_size: float | None = None,
    lam: float = 0.1,
    solver: str = "closed_form",
) -> np.ndarray:
    """The perturbations δ (n, d) of `individual_recourse` (same arguments) alone, for
    callers that need neither their loss nor their success: nothing is evaluated at
    x + δ, and the "pgd" descent on a learner with a closed-form gradient never enters
    torch."""
    X_np, goal_np, state = _checked(learner, X, goal, action_set, method, steps, state)
    need = _needed(objective, target, margin, len(X_np))
    return _recourse_delta(
        learner,
        state,
        X_np,
        goal_np,
        action_set,
        method,
        steps,
        step_size,
        lam,
        solver,
        objective,
        need,
        margin,
    )


def _needed(objective: str, target, margin, n: int) -> np.ndarray | None:
    """The goal probability each row's decision needs, target + margin, (n,) float64
    (+inf: unreachable, e.g. a cut-off nobody made); None for the argmax."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective={objective!r} is not one of {', '.join(OBJECTIVES)}")
    m = np.asarray(margin, dtype=np.float64)
    if m.ndim > 1 or (m.ndim == 1 and len(m) != n):
        raise ConfigError(f"margin has shape {m.shape}, expected a number or {n} numbers")
    if not ((m >= 0.0) & (m < 1.0)).all():
        raise ConfigError(f"margin must be in [0, 1), got {margin!r}")
    if target is None:
        return None
    t = np.asarray(target, dtype=np.float64)
    if t.ndim > 1 or (t.ndim == 1 and len(t) != n):
        raise ConfigError(f"target has shape {t.shape}, expected a number or {n} numbers")
    if np.isnan(t).any() or (t < 0).any():
        raise ConfigError("target must be probabilities >= 0 (+inf: unreachable)")
    return np.broadcast_to(t + m, (n,)).astype(np.float64)


def _decided(learner, state, X: np.ndarray, goal: np.ndarray, need, margin) -> np.ndarray:
    """Whether the goal decision holds at each row of X (see `individual_recourse`)."""
    return _holds(learner.proba_np(state, X), goal, need, margin)


def _holds(proba: np.ndarray, goal: np.ndarray, need, margin) -> np.ndarray:
    """Whether the goal decision holds for class probabilities `proba` (n, k)."""
    rows = np.arange(len(proba))
    p_goal = proba[rows, goal]
    if need is not None:
        return p_goal >= need
    others = proba.copy()
    others[rows, goal] = -np.inf
    return (proba.argmax(1) == goal) & (p_goal - others.max(1) >= margin)


def _checked(learner, X, goal, action_set, method, steps, state):
    """(X, goal, state) validated: float64 (n, d) and int64 (n,) numpy arrays, and the
    learner's current parameters when `state` is None (read, never modified)."""
    if method not in METHODS:
        raise ConfigError(f"method={method!r} is not one of {', '.join(METHODS)}")
    if steps < 1:
        raise ConfigError(f"steps must be >= 1, got {steps}")
    if state is None:
        learner._check_fitted()  # NotFittedError, as learner.state() would raise
        state = learner.state_
    X_np = X.detach().numpy() if isinstance(X, torch.Tensor) else X
    X_np = np.asarray(X_np, dtype=np.float64)
    if X_np.ndim != 2 or X_np.shape[1] != action_set.n_features:
        raise ConfigError(
            f"X has shape {X_np.shape}, the action set has {action_set.n_features} features"
        )
    goal_np = np.broadcast_to(np.asarray(goal), (len(X_np),)).astype(np.int64)
    return X_np, goal_np, state


def _recourse_delta(
    learner,
    state,
    X,
    goal,
    action_set,
    method,
    steps,
    step_size,
    lam,
    solver,
    objective="budget",
    need=None,
    margin=0.0,
) -> np.ndarray:
    """δ of `individual_recourse` for `_checked` arguments."""
    if objective == "min_cost":
        # (typed inside: a linear model's exactly in `linear_min_cost`, which the
        # batched environment calls directly; other models' by `repair_types`)
        return _min_cost_delta(
            learner,
            state,
            X,
            goal,
            action_set,
            method,
            steps,
            step_size,
            lam,
            solver,
            need,
            margin,
        )
    if method == "linear":
        delta = _linear_delta(learner, state, X, goal, action_set, solver)
    else:
        delta = _descent(learner, state, X, goal, action_set, method, steps, step_size, lam)
    if not action_set.typed:
        return delta
    Xt, goal_t = torch.from_numpy(X), torch.from_numpy(goal)

    def loss(d: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return goal_loss(learner, state, Xt + torch.from_numpy(d), goal_t).numpy()

    direction = _goal_direction(learner, state, X, goal, delta)
    return repair_types(action_set, X, delta, direction, loss=loss)


def _linear_delta(learner, state, X, goal, action_set, solver) -> np.ndarray:
    """Ross et al.'s δ* on numpy arrays."""
    delta = linear_recourse(
        learner, state, torch.from_numpy(X), torch.from_numpy(goal), action_set, solver=solver
    )
    return delta.numpy()


def _min_cost_delta(
    learner, state, X, goal, action_set, method, steps, step_size, lam, solver, need, margin
) -> np.ndarray:
    """The cheapest δ that gets the goal decision (0 where none within ε): exact for a
    binary linear model, else the cheapest of `_min_cost_candidates`."""
    value = learner.goal_margin(state, X, goal)
    if value is not None:
        coef = learner.goal_margin_coef(state, goal)
        return linear_min_cost(value, coef, X, action_set, need, margin)

    def decided(Xd: np.ndarray, rows=slice(None)) -> np.ndarray:
        """Whether x + δ gets the decision, for the rows `rows` of X."""
        row_margin = margin if np.ndim(margin) == 0 else np.asarray(margin)[rows]
        return _decided(
            learner, state, Xd, goal[rows], None if need is None else need[rows], row_margin
        )

    args = (learner, state, X, goal, method, steps, step_size, lam, solver)
    delta = _min_cost_candidates(args, action_set, decided)
    if not action_set.typed:
        return delta
    direction = _goal_direction(learner, state, X, goal, delta)
    delta = repair_types(action_set, X, delta, direction, decided=lambda d: decided(X + d))
    # the method's own (typed) budget answer where the repair lost the decision or
    # paid more
    budget = _recourse_delta(
        learner, state, X, goal, action_set, method, steps, step_size, lam, solver
    )
    use = decided(X + budget) & (
        ~decided(X + delta) | (action_set.cost(budget) < action_set.cost(delta))
    )
    delta = np.where(use[:, None], budget, delta)
    return delta


# budgets, as shares of ε, whose answers `_min_cost_candidates` follows back to the
# decision boundary: a geometric grid (ratio 2), then bisection between grid points
MIN_COST_BUDGETS = 2.0 ** -np.arange(7)
MIN_COST_BISECTIONS = 2
MIN_COST_DIRECTIONS = 32  # random directions per row (seeded: the same every call)
MIN_COST_LOCAL = (0.5, 0.25, 0.1)  # local searches' turns of the best δ (relative)


def _random_directions(
    X, action_set: ActionSet, decided, rows, best, best_cost, around: float = 0.0
) -> None:
    """`_min_cost_candidates`' random starts: per row `MIN_COST_DIRECTIONS` directions
    of the actionable features (Gaussian, seed 0, in cost units; the same for every
    row), each projected onto
    the action set from far out (towards the set's edge) and pulled back to the least
    share that gets the decision; kept where cheaper than `best` (updated in place).
    With `around` > 0 the directions are the row's best δ turned by Gaussian noise of
    that relative size (a local search; rows without a best are left alone)."""
    if around > 0:
        rows = rows[np.isfinite(best_cost[rows])]
    if not len(rows):
        return
    k, d = MIN_COST_DIRECTIONS, X.shape[1]
    Xr = np.repeat(X[rows], k, axis=0)
    rng = np.random.default_rng(0)
    unit = np.where(action_set.weights_ > 0, action_set.weights_, 1.0)
    # the same k directions for every row, so that a row's answer does not depend on
    # which other rows share the call
    direction = np.tile(rng.standard_normal((k, d)), (len(rows), 1))
    direction *= action_set.actionable / unit
    if around > 0:
        centre = np.repeat(best[rows], k, axis=0)
        size = np.asarray(action_set.cost(centre))[:, None] / np.sqrt(d)
        direction = centre + around * size * direction
    far = max(action_set.epsilon, 1e-12) * 1e3
    length = np.maximum(np.asarray(action_set.cost(direction)), 1e-300)[:, None]
    delta = action_set.project(Xr, direction * (far / length))
    rep = np.repeat(rows, k)
    ok = decided(Xr + delta, rep)
    found = least_share(lambda Xd: decided(Xd, rep), Xr, delta)[:, None] * delta
    cost = np.where(ok, np.asarray(action_set.cost(found)), np.inf).reshape(len(rows), k)
    pick = cost.argmin(1)
    cheapest = cost[np.arange(len(rows)), pick]
    better = cheapest < best_cost[rows]
    chosen = found.reshape(len(rows), k, d)[np.arange(len(rows)), pick]
    best[rows[better]], best_cost[rows[better]] = chosen[better], cheapest[better]


def _min_cost_candidates(args, action_set: ActionSet, decided) -> np.ndarray:
    """Nonlinear ``min_cost``: per row the cheapest of these points that get the
    decision (δ = 0 where none does):

    * the method's own path from x, stopped where it first gets the decision (PGD's and
      Wachter's iterates, or the segment to the linear method's δ*);
    * random starts: `MIN_COST_DIRECTIONS` random directions to the edge of the action
      set, each pulled back (`_random_directions`);
    * the method's ``budget`` answer under each budget of `MIN_COST_BUDGETS` · ε (the
      last is ε itself, so ``min_cost`` never misses where ``budget`` succeeds), each
      pulled back along its segment from x to the least share that keeps the decision
      (`least_share`);
    * then `MIN_COST_BISECTIONS` rounds of bisection on the budget between the largest
      grid budget that failed and the smallest that succeeded (rows of one interval
      share a descent), each success again pulled back;
    * last, local searches: the best direction so far turned at random by each share of
      `MIN_COST_LOCAL`, to the set's edge, pulled back.

    Every point is the action set's (a share of a feasible δ, and 0 ∈ the set). Typed
    action sets: the relaxation here, then `repair_types`. `decided(X + δ, rows)`: whether
    the rows `rows` of X (default all) get the decision."""
    learner, state, X, goal, method, steps, step_size, lam, solver = args
    n = len(X)
    there = decided(X)

    def pulled_back(start: np.ndarray, step: np.ndarray, ok: np.ndarray) -> np.ndarray:
        share = least_share(decided, X + start, step)
        return np.where(ok[:, None], start + share[:, None] * step, np.nan)

    if method == "linear":
        step = _linear_delta(learner, state, X, goal, action_set, solver)
        start, crossed = np.zeros_like(X), decided(X + step)
    else:
        start, step, crossed = _crossing(
            learner, state, X, goal, action_set, method, steps, step_size, lam, decided
        )
    best = pulled_back(start, step, crossed | there)
    best_cost = np.where(crossed | there, np.asarray(action_set.cost(np.nan_to_num(best))), np.inf)

    def budget_answer(share: float, rows: np.ndarray) -> np.ndarray:
        """Follow the budget answer at share·ε of the rows back, keep it where cheaper;
        whether it got the decision, per row."""
        aset = action_set.replace(epsilon=action_set.epsilon * share)
        Xr = X[rows]
        if method == "linear":
            delta = _linear_delta(learner, state, Xr, goal[rows], aset, solver)
        else:
            delta = _descent(learner, state, Xr, goal[rows], aset, method, steps, step_size, lam)
        ok = decided(Xr + delta, rows)
        share_back = least_share(lambda Xd: decided(Xd, rows), Xr, delta)
        found = share_back[:, None] * delta
        cost = np.where(ok, np.asarray(action_set.cost(found)), np.inf)
        better = cost < best_cost[rows]
        best[rows[better]], best_cost[rows[better]] = found[better], cost[better]
        return ok

    todo = np.flatnonzero(~there)
    _random_directions(X, action_set, decided, todo, best, best_cost)
    low = np.zeros(n)  # the largest budget share known to fail (per row)
    high = np.full(n, np.nan)  # the smallest known to succeed
    for share in MIN_COST_BUDGETS[::-1]:  # (smallest first)
        rows = todo[np.isnan(high[todo])]
        if not len(rows):
            break
        ok = budget_answer(float(share), rows)
        high[rows[ok]] = share
        low[rows[~ok]] = share
    for _ in range(MIN_COST_BISECTIONS):
        bracketed = todo[~np.isnan(high[todo]) & (low[todo] > 0)]
        mids = 0.5 * (low[bracketed] + high[bracketed])
        for mid in np.unique(mids):
            rows = bracketed[mids == mid]
            ok = budget_answer(float(mid), rows)
            high[rows[ok]] = mid
            low[rows[~ok]] = mid
    for around in MIN_COST_LOCAL:
        _random_directions(X, action_set, decided, todo, best, best_cost, around)
    return np.where(np.isfinite(best_cost)[:, None], np.nan_to_num(best), 0.0)


def _goal_direction(learner, state, X: np.ndarray, goal: np.ndarray, delta: np.ndarray):
    """The gradient of log p(goal | x) at x + δ, (n, d): the direction that raises the
    goal score, in which `repair_types` rounds discrete features first."""
    coef = learner.goal_margin_coef(state, goal)
    if coef is not None:  # (a binary linear model: the same everywhere)
        return coef
    Xd = torch.from_numpy(X + delta).requires_grad_(True)
    loss = goal_loss(learner, state, Xd, torch.from_numpy(goal))
    (grad,) = torch.autograd.grad(loss.sum(), Xd)
    return -grad.numpy()


def repair_types(
    action_set: ActionSet,
    X: np.ndarray,
    relaxed: np.ndarray,
    direction: np.ndarray,
    *,
    decided=None,
    loss=None,
    resolve=None,
) -> np.ndarray:
    """A relaxed answer δ (n, d; feasible but for the feature types) moved onto the typed
    action set, for the ``min_cost`` objective (`decided`: δ ↦ (n,) whether x + δ gets
    the goal decision) or the ``budget`` objective (`loss`: δ ↦ (n,) goal loss at x + δ).

    A dive: the discrete features (a one-hot group as one) are settled one at a time,
    the coarsest first (largest cost of one step or level). Each one's candidates are
    its roundings from `ActionSet.rounded` (in `direction`, the goal score's gradient; to
    the nearest allowed value; towards x); for each, the features not settled yet
    follow the current answer's direction, scaled: ``budget`` up to its length, as far
    as the budget allows; ``min_cost`` just as far as the decision needs, beyond that
    length if a rounding went against the goal (within box and budget). `resolve`
    (``min_cost``): (answer (n, d), settled mask (d,)) ↦ (δ, whether found), the
    cheapest completion of the unsettled features where the caller can solve for it
    exactly (a linear model), used instead. Per row the candidate of lowest loss
    (``budget``; rounding towards x always qualifies) or the cheapest that gets the
    decision within the budget (``min_cost``; none: δ = 0) is kept.
    """
    if not action_set.typed:
        return relaxed
    if (decided is None) == (loss is None):
        raise ConfigError("repair_types needs one of decided (min_cost) or loss (budget)")
    box = action_set.box(X)
    settled = ~action_set.discrete_mask
    delta = np.array(relaxed, dtype=np.float64)
    found = np.ones(len(X), bool)
    for unit in _discrete_units(action_set):
        settled = settled.copy()
        settled[unit] = True
        best, best_key = delta.copy(), np.full(len(X), np.inf)
        for mode in ("direction", "nearest", "toward"):
            trial = delta.copy()
            trial[:, unit] = action_set.rounded(X, delta, mode, direction, box)[:, unit]
            if resolve is not None:
                trial, ok = resolve(trial, settled)
            else:
                trial, ok = _complete(action_set, trial, settled, box, decided)
            cost = np.asarray(action_set.cost(trial))
            if decided is not None:
                ok &= decided(trial) & (cost <= action_set.epsilon)
                key = cost
            else:
                key = loss(trial)
            better = ok & (key < best_key)
            best[better], best_key[better] = trial[better], key[better]
        delta, found = best, found & np.isfinite(best_key)
    return np.where(found[:, None], delta, 0.0)


def _discrete_units(action_set: ActionSet) -> list[np.ndarray]:
    """The actionable discrete features as units a repair settles together (a one-hot
    group is one), the coarsest first: largest cost of one step (integer), of the
    smallest gap between levels (binary, ordinal, categorical) or of one column's change
    (one-hot)."""
    w = action_set.weights_
    moving = action_set.actionable
    units, coarseness = [], []
    for j in np.flatnonzero(action_set.step_ > 0):
        units.append(np.array([j]))
        coarseness.append(w[j] * action_set.step_[j])
    for j, values in action_set.levels_.items():
        units.append(np.array([j]))
        coarseness.append(w[j] * (np.diff(values).min() if len(values) > 1 else 0.0))
    for g in action_set.onehot_groups_:
        units.append(g)
        coarseness.append(w[g].max())
    order = np.argsort(-np.asarray(coarseness), kind="stable")
    return [units[i] for i in order if moving[units[i]].any()]


def _complete(action_set: ActionSet, trial: np.ndarray, settled: np.ndarray, box, decided):
    """`repair_types`'s completion without a solver: the unsettled features of `trial`
    scaled (see there); (δ, whether the settled part keeps the budget)."""
    fixed = np.where(settled, trial, 0.0)
    free = trial - fixed
    longest = _longest_share(action_set, fixed, free, box)
    ok = longest >= 0
    if decided is None:
        return fixed + np.clip(longest, 0.0, 1.0)[:, None] * free, ok
    # within the answer's own length where that decides (a model need not be monotone
    # beyond it), else stretched as far as box and budget allow
    longest = np.maximum(longest, 0.0)
    own = np.minimum(longest, 1.0)
    length = np.where(decided(fixed + own[:, None] * free), own, longest)
    free *= length[:, None]
    return fixed + least_share(decided, fixed, free)[:, None] * free, ok


def _longest_share(action_set: ActionSet, fixed: np.ndarray, free: np.ndarray, box):
    """Per row the largest s ≥ 0 with fixed + s·free in the box and the budget (fixed on
    the discrete features, free on the continuous ones: the cost grows with s in closed
    form); −1 where the discrete part alone breaks the budget."""
    eps, p = action_set.epsilon, action_set.p
    w = action_set.weights_
    lo, hi = (np.asarray(b, dtype=np.float64) for b in box)
    # (overflow: a denormal budget or step gives an infinite share, which the box bounds)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # the box: each moving continuous feature up to its bound
        ratio = np.where(free > 0, hi / free, np.where(free < 0, lo / free, np.inf))
        s_box = np.nan_to_num(ratio, nan=np.inf).min(1)
        c_fixed, c_free = np.abs(w * fixed), np.abs(w * free)
        if p == 1:
            s_budget = (eps - c_fixed.sum(1)) / c_free.sum(1)
            spent = c_fixed.sum(1)
        elif p == 2:
            spent = np.sqrt((c_fixed**2).sum(1))
            s_budget = np.sqrt(np.maximum(eps**2 - spent**2, 0.0)) / np.sqrt((c_free**2).sum(1))
        else:
            spent = c_fixed.max(1)
            s_budget = eps / c_free.max(1)
    s_budget = np.where(np.isnan(s_budget), np.inf, s_budget) * (1 - 1e-12)
    s = np.minimum(s_box, s_budget)
    s = np.where(np.isfinite(s), s, 1.0)  # nothing moves (free = 0): any share
    return np.where(spent > eps, -1.0, np.maximum(s, 0.0))


def linear_min_cost(
    value: np.ndarray,
    coef: np.ndarray,
    X: np.ndarray,
    action_set: ActionSet,
    need: np.ndarray | None,
    margin: float | np.ndarray = 0.0,
) -> np.ndarray:
    """The cheapest δ (n, d) with which each row's goal decision holds under a binary
    linear model, 0 where none costs ε or less: `value` (n,) is each row's goal margin
    (the goal's log-odds) at x, `coef` (n, d) its gradient in x, `need` (n,) the P(goal)
    each decision needs (None: the argmax, ahead by `margin`). Row by row, so rows of
    different models (a batched environment's worlds) go through it together. On a
    typed action set the optimum respects the feature types (exact, by
    `mixed_cheapest_recourse`)."""
    # p(goal) ≥ q exactly where the goal's log-odds ≥ logit(q); the argmax of two
    # classes ahead by `margin` is q = (1 + margin) / 2
    q = np.broadcast_to((1.0 + np.asarray(margin)) / 2, (len(X),)) if need is None else need
    with np.errstate(divide="ignore", over="ignore"):
        required = np.log(q) - np.log1p(-np.minimum(q, 1.0))
    gap = required - value
    # aim a hair past the boundary, so that rounding in p(goal) cannot undo it
    gap = gap + 1e-12 * (1.0 + np.abs(required) + np.abs(value))
    with np.errstate(invalid="ignore"):
        if action_set.typed:  # the exact mixed-type optimum (a search over the types)
            # (answers dearer than ε are dropped below: no need to search for them)
            budget = action_set.epsilon * (1 + 1e-12)
            found = mixed_cheapest_recourse(coef, gap, X, action_set, budget)
            delta, reachable = found.delta, found.reachable
        else:
            delta, reachable = cheapest_linear_recourse(coef, gap, X, action_set)
    ok = reachable & (action_set.cost(delta) <= action_set.epsilon * (1 + 1e-12))
    return np.where(ok[:, None], delta, 0.0)


def least_share(decided, X: np.ndarray, delta: np.ndarray, steps: int = BOUNDARY_STEPS):
    """Per row, the least share s ∈ [0, 1] of δ with which `decided(X + s·δ)` holds,
    by bisection to 2^-steps from the side where it holds (`decided`: rows → bool mask,
    monotone along each segment); 0 where X itself is decided, 1 where X + δ is not."""
    low, high = np.zeros(len(X)), np.ones(len(X))
    there, reach = decided(X), decided(X + delta)
    for _ in range(steps):
        mid = 0.5 * (low + high)
        got = decided(X + mid[:, None] * delta)
        high = np.where(got, mid, high)
        low = np.where(got, low, mid)
    return np.where(there, 0.0, np.where(reach, high, 1.0))


def _crossing(learner, state, X, goal, action_set, method, steps, step_size, lam, decided):
    """The step of the method's descent path on which each row first gets the decision:
    (its start δ, the step, whether the path gets there at all; zeros where not)."""
    start, step = np.zeros_like(X), np.zeros_like(X)
    crossed = decided(X)  # (nothing to cross)
    previous = None
    for delta, _ in _iterates(learner, state, X, goal, action_set, method, steps, step_size, lam):
        if previous is not None:
            now = ~crossed & decided(X + delta)
            start[now], step[now] = previous[now], (delta - previous)[now]
            crossed |= now
            if crossed.all():
                break
        previous = delta
    return start, step, crossed


def _step(action_set: ActionSet, steps: int, step_size: float | None) -> float:
    """The descent's cost per step: `step_size`, by default 2.5·ε/steps (Madry et al.)."""
    return step_size if step_size is not None else 2.5 * max(action_set.epsilon, 1e-12) / steps


def _descent(learner, state, X, goal, action_set, method, steps, step_size, lam) -> np.ndarray:
    """Each row's best iterate of `_iterates` (lowest objective). Where the goal loss
    falls as a linear margin rises (`Learner.goal_margin_coef`), "pgd" needs no gradient
    at all: its direction is the margin's, and its best iterate is the one of largest
    margin."""
    if method == "pgd":
        coef = learner.goal_margin_coef(state, goal)
        if coef is not None:
            project = action_set.projection(X)
            return _margin_descent(
                project, coef, action_set, steps, _step(action_set, steps, step_size)
            )
    best = np.zeros_like(X)
    best_obj = np.full(len(X), np.inf)
    for delta, obj in _iterates(learner, state, X, goal, action_set, method, steps, step_size, lam):
        improved = obj < best_obj
        best_obj = np.where(improved, obj, best_obj)
        best = np.where(improved[:, None], delta, best)
    return best


def _iterates(learner, state, X, goal, action_set, method, steps, step_size, lam):
    """Projected steepest descent of each row's objective: yields (δ, objective) for
    δ₀ = 0, δ₁, …, δ_steps. "pgd" descends the goal loss, "wachter" the goal loss +
    λ·cost. The loop runs on numpy (X, goal: float64 and int64 arrays); the gradient
    comes from the learner's closed form where it has one (pgd), else from autograd
    through `proba_fn`."""
    step = _step(action_set, steps, step_size)
    project = action_set.projection(X)  # the same rows throughout the descent
    objective = _closed_form_objective(learner, state, X, goal) if method == "pgd" else None
    if objective is None:
        objective = _autograd_objective(
            learner, state, torch.from_numpy(X), torch.from_numpy(goal), action_set, method, lam
        )
    delta = np.zeros_like(X)
    for i in range(steps + 1):
        obj, grad = objective(delta)
        yield delta, obj
        if i < steps:
            delta = project(delta + step * _steepest(-grad, action_set, project.box, delta))


def _margin_descent(project, coef: np.ndarray, action_set, steps: int, step: float) -> np.ndarray:
    """`_descent`'s "pgd" for a goal loss that falls as each row's margin x·c rises
    (`coef`: the rows' c): every step moves along the margin's steepest ascent, and the
    best iterate (the first of equal margins, as the loss's strict decrease keeps) is
    picked once all are known."""
    iterates = [np.zeros_like(coef)]
    for _ in range(steps):
        here = iterates[-1]
        iterates.append(project(here + step * _steepest(coef, action_set, project.box, here)))
    stacked = np.stack(iterates)  # (steps + 1, n, d)
    best = np.einsum("knd,nd->kn", stacked, coef).argmax(0)
    return stacked[best, np.arange(len(coef))]


def _steepest(ascent: np.ndarray, action_set: ActionSet, box, delta: np.ndarray) -> np.ndarray:
    """Per row, the steepest direction of increase of a function with gradient `ascent`,
    among the moves the action set allows from the iterate `delta`, of unit weighted norm
    (ℓ∞ for p = ∞, else ℓ2; 0 where no allowed move increases it).

    Coordinates that cannot move that way are dropped *before* normalising: immutable
    features (their box is [0, 0]) and features already at a box end (a monotone bound,
    a value bound or max_change) in the direction the gradient points. Normalising over
    all features and letting the projection zero the blocked part afterwards would
    shorten every step by the blocked share of the gradient, so the result would depend
    on the cost weights of features that cannot move. Free features (w = 0) move in
    their own units."""
    if box is not None:
        lo, hi = box
        blocked = ((ascent > 0) & (delta >= hi)) | ((ascent < 0) & (delta <= lo))
        ascent = np.where(blocked, 0.0, ascent)
    w = action_set.weights_
    w_step = np.where(w > 0, w, 1.0)
    if action_set.p == np.inf:
        return np.sign(ascent) / w_step
    scaled = ascent / w_step
    norm = np.sqrt((scaled * scaled).sum(1, keepdims=True))  # np.linalg.norm's sum
    return ascent / (w_step * w_step) / np.maximum(norm, 1e-300)


def _closed_form_objective(learner, state, X: np.ndarray, goal: np.ndarray):
    """δ ↦ (goal loss, its gradient) per row from the learner's closed form, on numpy
    (no torch per-call overhead on small batches); None if the learner has none."""
    state = {k: v.detach().numpy() for k, v in state.items()}  # converted once, not per step
    first = learner.goal_loss_grad(state, X, goal)
    if first is None:
        return None

    def objective(delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not delta.any():  # the start, already evaluated
            return first
        return learner.goal_loss_grad(state, X + delta, goal)

    return objective


def _autograd_objective(learner, state, X, goal, action_set, method, lam):
    """δ ↦ (objective, its gradient) per row by autograd through the learner's
    `proba_fn`; "wachter" adds λ·cost (smoothed at 0)."""
    w = torch.tensor(action_set.weights_, dtype=X.dtype)

    def objective(delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d = torch.from_numpy(delta).to(X.dtype).requires_grad_(True)
        obj = goal_loss(learner, state, X + d, goal)
        if method == "wachter":
            obj = obj + lam * _smooth_cost(d, w, action_set.p)
        (grad,) = torch.autograd.grad(obj.sum(), d)
        return obj.detach().numpy(), grad.numpy()

    return objective


def _smooth_cost(delta: torch.Tensor, w: torch.Tensor, p: float) -> torch.Tensor:
    """‖w ⊙ δ‖_p with a tiny offset so its gradient exists at δ = 0."""
    a = (w * delta).abs() + 1e-12
    return a.amax(1) if p == np.inf else a.pow(p).sum(1).pow(1.0 / p)
