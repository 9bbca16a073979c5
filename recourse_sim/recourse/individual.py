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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linprog

from recourse_sim.errors import ConfigError
from recourse_sim.learners.base import Learner, State, as_tensor
from recourse_sim.recourse.action_set import ActionSet, budget_excess, feasible_root

METHODS = ("pgd", "wachter", "linear")


@dataclass(frozen=True)
class RecourseResult:
    """Per-row outcome of individual recourse."""

    delta: np.ndarray  # (n, d) feasible perturbations
    loss: np.ndarray  # (n,) goal-label cross-entropy at x + δ
    success: np.ndarray  # (n,) the learner predicts the goal at x + δ
    cost: np.ndarray  # (n,) action-set cost of δ


def goal_loss(learner: Learner, state: State, X: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
    """Per-row cross-entropy −log p(goal | x) under parameters `state`."""
    proba = learner.proba_fn(state, X)
    return -torch.log(proba.gather(1, goal[:, None]).squeeze(1).clamp_min(1e-300))


def individual_recourse(
    learner: Learner,
    X,
    goal,
    action_set: ActionSet,
    method: str = "pgd",
    *,
    state: State | None = None,
    steps: int = 100,
    step_size: float | None = None,
    lam: float = 0.1,
    solver: str = "closed_form",
) -> RecourseResult:
    """Recourse for every row of X towards `goal` (an int or one int per row).

    `state` defaults to the learner's current parameters. `steps` and `step_size` (cost
    per step, default 2.5·ε/steps as in Madry et al.'s PGD) drive "pgd" and "wachter"; `lam` is
    Wachter's cost weight λ; `solver` ("closed_form" or "highs") is for "linear".
    """
    X_np, goal_np, state = _checked(learner, X, goal, action_set, method, steps, state)
    delta = _recourse_delta(
        learner, state, X_np, goal_np, action_set, method, steps, step_size, lam, solver
    )
    Xt, goal_t, delta_t = torch.from_numpy(X_np), torch.from_numpy(goal_np), torch.from_numpy(delta)
    with torch.no_grad():
        Xd = Xt + delta_t
        loss = goal_loss(learner, state, Xd, goal_t)
        success = learner.proba_fn(state, Xd).argmax(1) == goal_t
    return RecourseResult(
        delta=delta,
        loss=loss.numpy(),
        success=success.numpy(),
        cost=np.asarray(action_set.cost(delta)),
    )


def individual_delta(
    learner: Learner,
    X,
    goal,
    action_set: ActionSet,
    method: str = "pgd",
    *,
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
    return _recourse_delta(
        learner, state, X_np, goal_np, action_set, method, steps, step_size, lam, solver
    )


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
    X_np = as_tensor(X).detach().numpy()
    if X_np.ndim != 2 or X_np.shape[1] != action_set.n_features:
        raise ConfigError(
            f"X has shape {X_np.shape}, the action set has {action_set.n_features} features"
        )
    goal_np = np.broadcast_to(np.asarray(goal), (len(X_np),)).astype(np.int64)
    return X_np, goal_np, state


def _recourse_delta(
    learner, state, X, goal, action_set, method, steps, step_size, lam, solver
) -> np.ndarray:
    """δ of `individual_recourse` for `_checked` arguments."""
    if method == "linear":
        delta = linear_recourse(
            learner,
            state,
            torch.from_numpy(X),
            torch.from_numpy(goal),
            action_set,
            solver=solver,
        )
        return delta.numpy()
    return _descent(learner, state, X, goal, action_set, method, steps, step_size, lam)


def _descent(learner, state, X, goal, action_set, method, steps, step_size, lam) -> np.ndarray:
    """Projected steepest descent of each row's objective, keeping its best iterate.

    "pgd" descends the goal loss, "wachter" the goal loss + λ·cost. The loop runs on
    numpy (X, goal: float64 and int64 arrays); the gradient comes from the learner's
    closed form where it has one (pgd), else from autograd through `proba_fn`. Where
    the goal loss falls as a linear margin rises (`Learner.goal_margin_coef`), "pgd"
    needs no gradient at all: its normalised direction is the margin's, the same at
    every iterate, and its best iterate is the one of largest margin."""
    eps = float(action_set.epsilon)
    step = step_size if step_size is not None else 2.5 * max(eps, 1e-12) / steps
    project = action_set.projection(X)  # the same rows throughout the descent
    objective = None
    if method == "pgd":
        coef = learner.goal_margin_coef(state, goal)
        if coef is not None:
            return _margin_descent(project, coef, action_set, steps, step)
        objective = _closed_form_objective(learner, state, X, goal)
    if objective is None:
        objective = _autograd_objective(
            learner, state, torch.from_numpy(X), torch.from_numpy(goal), action_set, method, lam
        )
    delta = np.zeros_like(X)
    best = delta
    best_obj = np.full(len(X), np.inf)
    for i in range(steps + 1):
        obj, grad = objective(delta)
        improved = obj < best_obj
        best_obj = np.where(improved, obj, best_obj)
        best = np.where(improved[:, None], delta, best)
        if i == steps:
            break
        delta = project(delta - step * _steepest(grad, action_set))
    return best


def _margin_descent(project, coef: np.ndarray, action_set, steps: int, step: float) -> np.ndarray:
    """`_descent`'s "pgd" for a goal loss that falls as each row's margin x·c rises
    (`coef`: the rows' c): every step moves along the margin's steepest ascent, and the
    best iterate (the first of equal margins, as the loss's strict decrease keeps) is
    picked once all are known."""
    direction = step * _steepest(coef, action_set)
    iterates = [np.zeros_like(coef)]
    for _ in range(steps):
        iterates.append(project(iterates[-1] + direction))
    stacked = np.stack(iterates)  # (steps + 1, n, d)
    best = np.einsum("knd,nd->kn", stacked, coef).argmax(0)
    return stacked[best, np.arange(len(coef))]


def _steepest(grad: np.ndarray, action_set: ActionSet) -> np.ndarray:
    """Per row, the steepest ascent direction of a gradient in the cost metric, of unit
    weighted norm (ℓ∞ for p = ∞, else ℓ2; 0 where the gradient is 0): each step then
    costs about the same whatever the gradient's scale and the features' units. Free
    features (w = 0) move in their own units."""
    w = action_set.weights_
    w_step = np.where(w > 0, w, 1.0)
    if action_set.p == np.inf:
        return np.sign(grad) / w_step
    scaled = grad / w_step
    norm = np.sqrt((scaled * scaled).sum(1, keepdims=True))  # np.linalg.norm's sum
    return grad / (w_step * w_step) / np.maximum(norm, 1e-300)


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


def linear_recourse(
    learner: Learner,
    state: State,
    X: torch.Tensor,
    goal: torch.Tensor,
    action_set: ActionSet,
    *,
    solver: str = "closed_form",
) -> torch.Tensor:
    """Ross et al.'s δ* = argmin_{δ ∈ A(x)} ∇ₓℓ(f(x), goal)ᵀ δ, batched over rows.

    Minimising the linearised goal loss moves each row in the direction that raises the
    goal class's score fastest per unit of cost, as far as the action set allows.
    """
    Xg = X.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(goal_loss(learner, state, Xg, goal).sum(), Xg)
    if solver == "closed_form":
        delta = linear_program_closed_form(grad, X.detach(), action_set)
    elif solver == "highs":
        delta = linear_program_highs(grad, X.detach(), action_set)
    else:
        raise ConfigError(f"solver={solver!r} is not one of closed_form, highs")
    if not bool(torch.isfinite(delta).all()):
        j = int(torch.nonzero(~torch.isfinite(delta))[0, 1])
        raise ConfigError(
            f"linear recourse is unbounded: feature {j} has cost weight 0 and no bound"
        )
    return delta


def linear_program_closed_form(
    g: torch.Tensor, X: torch.Tensor, action_set: ActionSet
) -> torch.Tensor:
    """argmin gᵀδ over {lo ≤ δ ≤ hi, ‖w ⊙ δ‖_p ≤ ε} for every row, exactly."""
    lo, hi = action_set.box(X)
    w = torch.tensor(action_set.weights_, dtype=g.dtype)
    eps = float(action_set.epsilon)
    # the far end of the box in the descent direction; zero where the gradient is flat
    corner = torch.where(g < 0, hi, torch.where(g > 0, lo, torch.zeros_like(g)))
    priced = w > 0
    if action_set.p == np.inf:
        r = torch.where(priced, eps / torch.where(priced, w, 1.0), torch.inf)
        return corner.clamp(-r, r)
    if action_set.p == 1:
        # fractional knapsack: spend the budget on the best gain-per-cost features first
        ratio = torch.where(priced, g.abs() / torch.where(priced, w, 1.0), torch.inf)
        order = torch.argsort(ratio, dim=1, descending=True)
        full = corner.gather(1, order)
        price = (w[order] * full.abs()).nan_to_num(nan=0.0)
        spent_before = torch.cumsum(price, dim=1) - price
        left = (eps - spent_before).clamp_min(0.0)
        w_sorted = w[order]
        allowed = torch.where(
            w_sorted > 0, left / torch.where(w_sorted > 0, w_sorted, 1.0), torch.inf
        )
        taken = torch.sign(full) * torch.minimum(full.abs(), allowed)
        return torch.zeros_like(g).scatter(1, order, taken)

    # p = 2: δ_j = clip(−g_j / (μ w_j²), lo, hi), the smallest μ ≥ 0 that keeps ‖w⊙δ‖ ≤ ε
    if eps == 0.0:
        return torch.where(priced, 0.0, corner)

    g_np, lo_np, hi_np, corner_np = (t.detach().numpy() for t in (g, lo, hi, corner))
    w_np = action_set.weights_
    priced_np = w_np > 0

    def candidate(mu: np.ndarray) -> np.ndarray:
        # at μ = 0 the free step is infinite and the box clips it to the corner
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            free = -g_np / (mu[:, None] * np.where(priced_np, w_np, 1.0) ** 2)
        free = np.where(priced_np, np.where(g_np == 0, 0.0, free), corner_np)
        return np.minimum(np.maximum(free, lo_np), hi_np)

    def cost(d: np.ndarray) -> np.ndarray:
        return np.linalg.norm(w_np * d, axis=1)

    at_corner = cost(corner_np) <= eps
    ratio = np.where(priced_np, g_np / np.where(priced_np, w_np, 1.0), 0.0)
    with np.errstate(over="ignore"):
        mu_hi = np.linalg.norm(ratio, axis=1) / eps + 1e-300  # cost(candidate) = ε here
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        mu = feasible_root(
            lambda m: budget_excess(cost(candidate(m)), eps),
            np.zeros_like(mu_hi),
            mu_hi,
            at_corner,
        )
    out = np.where(at_corner[:, None], corner_np, candidate(mu))
    return torch.from_numpy(out).to(g.dtype)


def linear_program_highs(g: torch.Tensor, X: torch.Tensor, action_set: ActionSet) -> torch.Tensor:
    """The same linear program solved by HiGHS, one row at a time (p ∈ {1, ∞}).

    Variables [δ, t] with |w_j δ_j| ≤ t_j and Σ t_j ≤ ε (p = 1) or t_j ≤ ε (p = ∞).
    """
    if action_set.p not in (1, np.inf):
        raise ConfigError("solver='highs' needs a polyhedral action set (p = 1 or inf)")
    lo, hi = (b.numpy() for b in action_set.box(X))
    w = action_set.weights_
    n, d = g.shape
    eye = np.eye(d)
    # w_j δ_j − t_j ≤ 0 and −w_j δ_j − t_j ≤ 0
    A = np.block([[eye * w, -eye], [-eye * w, -eye]])
    b = np.zeros(2 * d)
    if action_set.p == 1:
        A = np.vstack([A, np.r_[np.zeros(d), np.ones(d)]])
        b = np.r_[b, action_set.epsilon]
    t_upper = action_set.epsilon if action_set.p == np.inf else None
    out = np.zeros((n, d))
    for i in range(n):
        bounds = [(lo[i, j], hi[i, j]) for j in range(d)] + [(0, t_upper)] * d
        c = np.r_[g[i].numpy(), np.zeros(d)]
        res = linprog(c, A_ub=A, b_ub=b, bounds=bounds, method="highs")
        if res.status != 0:
            raise RuntimeError(f"HiGHS failed on row {i}: {res.message}")
        out[i] = res.x[:d]
    # HiGHS may land a hair outside; the exact projection keeps the guarantee
    return torch.as_tensor(action_set.project(X.numpy(), out))
