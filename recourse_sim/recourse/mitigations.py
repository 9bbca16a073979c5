"""Recourse that limits the shifts it causes: Altmeyer et al.'s mitigations (SaTML 2023,
"Endogenous Macrodynamics in Algorithmic Recourse", §6).

Both extend Wachter et al.'s search with an external cost, the cost recourse imposes on
the others through the shifts it causes:

    min over δ in the action set of  ℓ(f(x + δ), goal) + λ·cost(δ) + w·extcost(x + δ)

(ℓ the goal cross-entropy −log p(goal | x'), λ Wachter's cost weight, w `weight`):

* ``"claproar"`` (classifier-preserving ROAR): extcost(x') = ℓ(f(x'), goal), the loss
  the deployed classifier incurs on the counterfactual with the goal as its label,
  counted where x' already has the goal label (the argmax): past the boundary the
  search keeps lowering the classifier's loss, so x' ends deep in the goal class
  instead of on its edge, where a refit would move the boundary.
* ``"gravitational"``: extcost(x') = dist(x', c), the distance (the action set's cost
  norm, so in the units of cost(δ)) to the centroid c of the goal class's training
  rows: the rows the deployed model remembers (``X_mem``, labels ``y_mem``: the refit
  and window rules), or where it remembers none the reports it is given that it
  assigns the goal. x' is pulled towards where the goal class already lies.

The search is Wachter's: projected steepest descent of that objective for ``steps``
steps within the action set (ε its budget), each row's iterate of lowest objective
kept (the ``budget`` objective of `individual_recourse`: the search's own answer, not
the least-cost action); typed action sets through `repair_types` with the same
objective. Each person's recourse is that answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.errors import ConfigError
from recourse_sim.lazy import LazyModule
from recourse_sim.learners.base import Learner, State
from recourse_sim.recourse.action_set import ActionSet
from recourse_sim.recourse.individual import (
    _goal_direction,
    _smooth_cost,
    _steepest,
    _step,
    repair_types,
)
from recourse_sim.recourse.linear_program import goal_loss

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds this without torch
    torch = LazyModule("torch", globals())

__all__ = ["MITIGATIONS", "external_cost", "mitigated_delta", "target_centroid"]

MITIGATIONS = ("claproar", "gravitational")
WACHTER_LAMBDA = 0.1  # λ, the cost weight of the search (as `individual_recourse`'s wachter)


def target_centroid(learner: Learner, state: State, X: np.ndarray, goal: int) -> np.ndarray | None:
    """The gravitational centre of class `goal`: the mean of the training rows of that
    label the model remembers (``X_mem``, ``y_mem``), else of the rows of X it assigns
    `goal` (argmax); None where there are none."""
    if "X_mem" in state and "y_mem" in state:
        X_mem = np.asarray(state["X_mem"].detach().numpy(), dtype=np.float64)
        rows = X_mem[state["y_mem"].detach().numpy() == goal]
    else:
        rows = X[learner.proba_np(state, X).argmax(1) == goal]
    return rows.mean(0) if len(rows) else None


def external_cost(
    learner: Learner,
    state: State,
    X_cf: torch.Tensor,
    goal: torch.Tensor,
    method: str,
    action_set: ActionSet,
    centroid: np.ndarray | None = None,
) -> torch.Tensor:
    """Per row, extcost(x') of `method` at the counterfactuals `X_cf` (n, d) (see the
    module), differentiable in X_cf."""
    if method == "claproar":
        loss = goal_loss(learner, state, X_cf, goal)
        with torch.no_grad():
            labelled = learner.proba_fn(state, X_cf).argmax(1) == goal
        return torch.where(labelled, loss, torch.zeros_like(loss))
    if method == "gravitational":
        if centroid is None:
            return torch.zeros(len(X_cf), dtype=X_cf.dtype)
        w = torch.tensor(action_set.weights_, dtype=X_cf.dtype)
        c = torch.as_tensor(np.asarray(centroid, dtype=np.float64), dtype=X_cf.dtype)
        return _smooth_cost(X_cf - c, w, action_set.p)
    raise ConfigError(f"method={method!r} is not one of {', '.join(MITIGATIONS)}")


def mitigated_delta(
    learner: Learner,
    X: np.ndarray,
    goal: int,
    action_set: ActionSet,
    method: str,
    *,
    weight: float = 5.0,
    lam: float = WACHTER_LAMBDA,
    steps: int = 20,
    step_size: float | None = None,
    centroid: np.ndarray | None = None,
    state: State | None = None,
) -> np.ndarray:
    """Each row's recourse δ (n, d) towards `goal` under `method` (see the module):
    external-cost weight `weight` (0: Wachter's search), cost weight `lam`, `steps`
    descent steps of `step_size` cost each (default 2.5·ε/steps). `centroid`
    (gravitational): the centre to pull towards, default `target_centroid`."""
    if method not in MITIGATIONS:
        raise ConfigError(f"method={method!r} is not one of {', '.join(MITIGATIONS)}")
    if not (np.isfinite(weight) and weight >= 0) or not (np.isfinite(lam) and lam >= 0):
        raise ConfigError(f"weight and lam must be finite and >= 0, got {weight!r}, {lam!r}")
    if steps < 1:
        raise ConfigError(f"steps must be >= 1, got {steps}")
    if state is None:
        learner._check_fitted()
        state = learner.state_
    X = np.asarray(X, dtype=np.float64)
    goal_np = np.full(len(X), int(goal), np.int64)
    if method == "gravitational" and centroid is None:
        centroid = target_centroid(learner, state, X, int(goal))
    Xt, goal_t = torch.from_numpy(X), torch.from_numpy(goal_np)
    w = torch.tensor(action_set.weights_, dtype=torch.float64)

    def objective(delta: np.ndarray, grad: bool = True):
        d = torch.from_numpy(delta).requires_grad_(grad)
        X_cf = Xt + d
        obj = goal_loss(learner, state, X_cf, goal_t) + lam * _smooth_cost(d, w, action_set.p)
        if weight > 0:
            obj = obj + weight * external_cost(
                learner, state, X_cf, goal_t, method, action_set, centroid
            )
        if not grad:
            return obj.detach().numpy()
        (g,) = torch.autograd.grad(obj.sum(), d)
        return obj.detach().numpy(), g.numpy()

    step = _step(action_set, steps, step_size)
    project = action_set.projection(X)
    delta = np.zeros_like(X)
    best, best_obj = delta, np.full(len(X), np.inf)
    for i in range(steps + 1):
        obj, g = objective(delta)
        improved = obj < best_obj
        best_obj = np.where(improved, obj, best_obj)
        best = np.where(improved[:, None], delta, best)
        if i < steps:
            delta = project(delta + step * _steepest(-g, action_set, project.box, delta))
    if not action_set.typed:
        return best
    direction = _goal_direction(learner, state, X, goal_np, best)
    with torch.no_grad():
        return repair_types(action_set, X, best, direction, loss=lambda d: objective(d, grad=False))
