"""The linear method of individual recourse (Ross et al.): the goal loss, its
linearisation's best action δ* = argmin_{δ ∈ A(x)} ∇ₓℓᵀδ, solved in closed form (a
budget root) or by HiGHS."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.errors import ConfigError
from recourse_sim.lazy import LazyModule
from recourse_sim.learners.base import Learner, State
from recourse_sim.recourse.action_set import ActionSet
from recourse_sim.recourse.roots import budget_excess, feasible_root

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds this without torch
    torch = LazyModule("torch", globals())

__all__ = ["goal_loss", "linear_program_closed_form", "linear_program_highs", "linear_recourse"]


def goal_loss(learner: Learner, state: State, X: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
    """Per-row cross-entropy −log p(goal | x) under parameters `state`."""
    proba = learner.proba_fn(state, X)
    return -torch.log(proba.gather(1, goal[:, None]).squeeze(1).clamp_min(1e-300))


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
    from scipy.optimize import linprog  # here: importing scipy.optimize takes 0.3 s

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
