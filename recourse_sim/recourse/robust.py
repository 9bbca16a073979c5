"""Robust individual recourse: recourse meant to stay valid when the model or the action
moves a little.

Both methods solve the ``min_cost`` objective of `individual_recourse`: the cheapest
action in the action set with which a *robust* version of the goal decision holds
(p(goal) ≥ the target + margin, or the argmax), δ = 0 where none costs ε or less.

* ``"roar"`` — Upadhyay, Joshi & Lakkaraju (2021), ROAR: the decision must hold under
  every model whose parameters θ + Δ lie within the ℓ∞ ball ‖Δ‖∞ ≤ `delta` around the
  deployed θ (in the units the learner learns in: per standard deviation of a feature
  under ``standardize``; scaling constants are not parameters). For a binary linear
  model the inner maximisation has a closed form (their Eq. 5 for the linear case):
  the worst model shifts each weight against the goal by `delta` times the sign of the
  standardised feature, and the intercept by `delta`, so the goal margin at x' is
  m(x') − delta·(‖z(x')‖₁ + 1) (z: standardised x'; no + 1 without an intercept).
  Within one sign pattern of z that worst margin is linear, so the cheapest robust
  action is found by alternating (their Algorithm 1): fix the worst model at the
  current answer, solve the exact linear ``min_cost`` for it (`linear_min_cost`),
  repeat until the sign pattern no longer changes. At such a fixed point the answer is
  exactly optimal: every robust answer is feasible for the fixed worst model (the
  worst margin is never above it), and the fixed point is that model's cheapest
  answer and robust itself. For other differentiable models the inner maximisation is
  ROAR's first-order one, Δ = delta·sign(∇_θ ℓ(f_θ(x'), goal)) per row (exact for a
  linear model), and the cheapest robust action is searched as for any nonlinear
  ``min_cost`` (`individual._min_cost_candidates`).
* ``"probe"`` — Pawelczyk, Datta, van den Heuvel, Kasneci & Lakkaraju (2023), PROBE:
  the implemented action is noisy, x' + ε with ε ~ N(0, σ² D²) on the actionable
  features (D_j = 1 / cost weight: σ is in cost units per feature; 1 for a free
  feature), and the decision must hold with probability ≥ 1 − r: the recourse
  invalidation rate IR(x') = P(the decision fails at x' + ε) ≤ `invalidation`. For a
  binary linear model IR(x') = Φ((m* − m(x')) / (σ‖c ⊙ D‖₂)) (m* the margin the
  decision needs, c the margin's gradient), so IR ≤ r is the margin condition
  m(x') ≥ m* + σ‖c ⊙ D‖₂ Φ⁻¹(1 − r), solved exactly by `linear_min_cost`. For other
  differentiable models IR is PROBE's first-order approximation (the margin linearised
  at x') and the cheapest action searched as above.

Every answer goes through the `ActionSet` (typed sets: exactly for the linear model;
`repair_types` for the others), so no robust action leaves it.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.special import ndtri
from torch.func import grad, vmap

from recourse_sim.errors import ConfigError
from recourse_sim.learners.base import Learner, State
from recourse_sim.recourse.action_set import ActionSet
from recourse_sim.recourse.individual import (
    _goal_direction,
    _holds,
    _min_cost_candidates,
    _needed,
    linear_min_cost,
    repair_types,
)

__all__ = [
    "ROBUST_METHODS",
    "noise_scale",
    "probe_invalidation_rate",
    "roar_worst_margin",
    "roar_worst_proba",
    "robust_delta",
]

ROBUST_METHODS = ("roar", "probe")
# alternations of ROAR's linear solver: the sign pattern of z changes at most once per
# feature and alternation in practice (d + a few), never more than this
ROAR_ALTERNATIONS = 50


def robust_delta(
    learner: Learner,
    X: np.ndarray,
    goal,
    action_set: ActionSet,
    method: str,
    *,
    target=None,
    margin: float | np.ndarray = 0.0,
    delta: float = 0.1,
    sigma: float = 0.1,
    invalidation: float = 0.1,
    steps: int = 20,
    state: State | None = None,
) -> np.ndarray:
    """The cheapest robust δ (n, d) of each row of X towards `goal` (see the module):
    ``roar`` with radius `delta`, ``probe`` with noise `sigma` and largest invalidation
    rate `invalidation`; `target`, `margin` as `individual_recourse`'s ``min_cost``;
    `steps`: gradient steps of the nonlinear search. δ = 0 where no robust action costs
    ε or less."""
    if method not in ROBUST_METHODS:
        raise ConfigError(f"method={method!r} is not one of {', '.join(ROBUST_METHODS)}")
    if delta < 0 or sigma < 0:
        raise ConfigError(f"delta and sigma must be >= 0, got {delta!r}, {sigma!r}")
    if not 0.0 < invalidation <= 0.5:
        raise ConfigError(f"invalidation must be in (0, 0.5], got {invalidation!r}")
    if state is None:
        learner._check_fitted()
        state = learner.state_
    X = np.asarray(X, dtype=np.float64)
    n = len(X)
    goal = np.broadcast_to(np.asarray(goal), (n,)).astype(np.int64)
    need = _needed("min_cost", target, margin, n)
    value = learner.goal_margin(state, X, goal)
    if value is not None:
        coef = learner.goal_margin_coef(state, goal)
        if method == "roar":
            return _roar_linear(
                learner, state, X, goal, value, coef, action_set, need, margin, delta
            )
        kappa = _probe_margin(coef, action_set, sigma, invalidation)
        return linear_min_cost(value - kappa, coef, X, action_set, need, margin)

    if method == "roar":

        def decided(Xd: np.ndarray, rows=slice(None)) -> np.ndarray:
            proba = roar_worst_proba(learner, state, Xd, goal[rows], delta)
            return _holds(proba, goal[rows], _rows(need, rows), _rows(margin, rows))

    else:

        def decided(Xd: np.ndarray, rows=slice(None)) -> np.ndarray:
            ir = _probe_rate_autograd(
                learner,
                state,
                Xd,
                goal[rows],
                action_set,
                sigma,
                _rows(need, rows),
                _rows(margin, rows),
            )
            return ir <= invalidation

    args = (learner, state, X, goal, "pgd", steps, None, 0.1, "closed_form")
    found = _min_cost_candidates(args, action_set, decided)
    if action_set.typed:
        direction = _goal_direction(learner, state, X, goal, found)
        found = repair_types(action_set, X, found, direction, decided=lambda d: decided(X + d))
    return np.where(decided(X + found)[:, None], found, 0.0)


def _rows(values, rows):
    """`values` (None, a number or one per row) at `rows`."""
    if values is None or np.ndim(values) == 0:
        return values
    return np.asarray(values)[rows]


# -- ROAR ------------------------------------------------------------------------------
def _standardised(state: State, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(z, x_scale): X in the units the learner learns in, and the scale per feature."""
    if "x_scale" in state:
        scale = np.asarray(state["x_scale"], dtype=np.float64)
        return (X - np.asarray(state["x_shift"], dtype=np.float64)) / scale, scale
    return X, np.ones(X.shape[1])


def _has_intercept(learner: Learner) -> float:
    return 1.0 if getattr(learner, "fit_intercept", True) else 0.0


def roar_worst_margin(
    learner: Learner, state: State, X: np.ndarray, goal: np.ndarray, delta: float
) -> np.ndarray:
    """A binary linear model's worst goal margin over ‖Δθ‖∞ ≤ `delta` at each row of X:
    m(x) − delta·(‖z(x)‖₁ + 1) (ROAR's closed form; no + 1 without an intercept)."""
    value = learner.goal_margin(state, X, goal)
    if value is None:
        raise ConfigError("roar_worst_margin needs a binary linear model")
    z, _ = _standardised(state, X)
    return value - delta * (np.abs(z).sum(1) + _has_intercept(learner))


def _required_margin(need, margin, n: int) -> np.ndarray:
    """The goal log-odds each row's decision needs: logit(need), or for the argmax of two
    classes ahead by `margin`, logit((1 + margin) / 2) (as `linear_min_cost`)."""
    q = np.broadcast_to((1.0 + np.asarray(margin)) / 2, (n,)) if need is None else need
    with np.errstate(divide="ignore", over="ignore"):
        return np.log(q) - np.log1p(-np.minimum(q, 1.0))


def _roar_linear(
    learner, state, X, goal, value, coef, action_set, need, margin, delta
) -> np.ndarray:
    """ROAR's cheapest robust action for a binary linear model, by alternation (module)."""
    z0, scale = _standardised(state, X)
    bias = _has_intercept(learner)
    found = np.zeros_like(X)
    signs = None
    for _ in range(ROAR_ALTERNATIONS):
        z, _ = _standardised(state, X + found)
        new_signs = np.where(z >= 0, 1.0, -1.0)
        if signs is not None and (new_signs == signs).all():
            break
        signs = new_signs
        # the worst model at the current answer: the goal margin of θ + Δ, with Δ =
        # −delta·sign(z) on the (goal-oriented) weights and −delta on the intercept
        shifted_value = value - delta * ((signs * z0).sum(1) + bias)
        shifted_coef = coef - delta * signs / scale
        found = linear_min_cost(shifted_value, shifted_coef, X, action_set, need, margin)
    # keep only robust answers (a row whose alternation had not settled may not be)
    robust = roar_worst_margin(learner, state, X + found, goal, delta)
    required = _required_margin(need, margin, len(X))
    ok = robust >= required - 1e-9 * (1.0 + np.abs(required))
    return np.where(ok[:, None], found, 0.0)


def roar_worst_proba(
    learner: Learner, state: State, X: np.ndarray, goal: np.ndarray, delta: float
) -> np.ndarray:
    """Class probabilities (n, k) of each row of X under its own worst model of ROAR's
    first-order inner maximisation: θ + delta·sign(∇_θ ℓ(f_θ(x), goal)) over the
    learner's parameters (not its scaling constants)."""
    keys = [k for k in learner.param_keys if k not in learner.scaling_keys]
    params = {k: torch.as_tensor(state[k], dtype=torch.float64) for k in keys}
    fixed = {k: v for k, v in state.items() if k not in params}
    Xt = torch.as_tensor(np.asarray(X, dtype=np.float64))
    k = learner.proba_np(state, X[:1]).shape[1]
    onehot = torch.nn.functional.one_hot(torch.as_tensor(np.asarray(goal, np.int64)), k)

    def loss(p: dict[str, torch.Tensor], x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        proba = learner.proba_fn({**fixed, **p}, x[None])[0]
        return -torch.log((proba * g).sum().clamp_min(1e-300))

    def proba_at(p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return learner.proba_fn({**fixed, **p}, x[None])[0]

    with torch.no_grad():
        grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, Xt, onehot.to(torch.float64))
        worst = {k: params[k][None] + delta * torch.sign(grads[k]) for k in keys}
        return vmap(proba_at)(worst, Xt).numpy()


# -- PROBE -----------------------------------------------------------------------------
def noise_scale(action_set: ActionSet) -> np.ndarray:
    """PROBE's noise SD per feature, per unit of σ: 1 / cost weight on the actionable
    features (σ in cost units; 1 for a free feature), 0 on the others."""
    w = action_set.weights_
    return np.where(action_set.actionable, np.where(w > 0, 1.0 / np.where(w > 0, w, 1.0), 1.0), 0)


def _probe_margin(coef: np.ndarray, action_set: ActionSet, sigma: float, r: float) -> np.ndarray:
    """The extra goal margin (n,) with which a binary linear model's invalidation rate
    under PROBE's noise is exactly `r`: σ‖c ⊙ D‖₂ Φ⁻¹(1 − r)."""
    spread = sigma * np.linalg.norm(coef * noise_scale(action_set), axis=1)
    return spread * ndtri(1.0 - r)


def probe_invalidation_rate(
    learner: Learner,
    state: State,
    X: np.ndarray,
    goal: np.ndarray,
    action_set: ActionSet,
    sigma: float,
    need=None,
    margin: float | np.ndarray = 0.0,
) -> np.ndarray:
    """PROBE's recourse invalidation rate (n,) at each row of X: the probability that the
    goal decision fails at x + ε, ε ~ N(0, σ² D²) (`noise_scale`); exact for a binary
    linear model, first-order (the margin linearised at x) for the others."""
    X = np.asarray(X, dtype=np.float64)
    goal = np.broadcast_to(np.asarray(goal), (len(X),)).astype(np.int64)
    value = learner.goal_margin(state, X, goal)
    if value is None:
        return _probe_rate_autograd(learner, state, X, goal, action_set, sigma, need, margin)
    coef = learner.goal_margin_coef(state, goal)
    return _rate(value, coef, action_set, sigma, _required_margin(need, margin, len(X)))


def _rate(value, coef, action_set, sigma, required) -> np.ndarray:
    """Φ((m* − m) / (σ‖c ⊙ D‖₂)), with a point mass where the spread is 0."""
    from scipy.special import ndtr

    spread = sigma * np.linalg.norm(coef * noise_scale(action_set), axis=1)
    gap = required - value
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = ndtr(gap / spread)
    return np.where(spread > 0, rate, (gap > 0).astype(float))


def _probe_rate_autograd(
    learner, state, X, goal, action_set, sigma, need, margin=0.0
) -> np.ndarray:
    """`probe_invalidation_rate` of a model without a linear margin: the goal log-odds
    log p(goal) − log(1 − p(goal)) and its gradient in x by autograd."""
    Xt = torch.as_tensor(np.asarray(X, dtype=np.float64)).requires_grad_(True)
    proba = learner.proba_fn(state, Xt)
    p = proba.gather(1, torch.as_tensor(goal)[:, None]).squeeze(1)
    logodds = torch.log(p.clamp_min(1e-300)) - torch.log((1 - p).clamp_min(1e-300))
    (coef,) = torch.autograd.grad(logodds.sum(), Xt)
    value = logodds.detach().numpy()
    return _rate(value, coef.numpy(), action_set, sigma, _required_margin(need, margin, len(X)))
