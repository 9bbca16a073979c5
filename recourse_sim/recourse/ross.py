"""Ross, Lakkaraju & Bastani (2021), *Learning models for actionable recourse*.

Two pieces, one per step of their algorithm:

**Step 1 — recourse-aware training (§3.1, Eq. 1).** The deployed model is trained on

    ℓ_R(θ) = E_{p(x,y)} [ ℓ(g_θ(x), y) + λ · min_{δ∈Δ} ℓ(g_θ(x + δ), 1) ]

over *every* training row (the expectation is over p(x, y), positives included: for them
δ* only pushes the score further up). The inner minimum is replaced by the linearised
problem of Eq. 2, δ* = argmin_{δ∈Δ} ∇ₓℓ(g_θ(x), 1)ᵀδ — a linear program over the
actionable polytope, which is exactly the ``"linear"`` individual-recourse method
(`recourse_sim.recourse.linear_program.linear_recourse`) — and by Danskin's theorem the
gradient of the term is ∇_θ ℓ(g_θ(x + δ*), 1) with δ* held fixed. The learners carry
this as their ``recourse_loss_weight`` (λ), ``action_set`` (Δ) and ``recourse_goal``
(the favourable class) options; `recourse_delta` computes δ* for a whole batch and
`check_recourse_training` validates the options.

**Step 2 — the PARE threshold (§3.3, §4.2).** A classifier f(x) = 1[g(x) ≥ θ₀]
*Probably Approximately has REcourse* when, with probability ≥ 1 − α over a calibration
set Z of n i.i.d. rows, P_x[x has recourse] ≥ 1 − ε. Following Park et al. (2020), the
calibration rows become Z' = {(x + 𝒜(x), 1)}, scored s(x) = g(x + 𝒜(x)), and

    k* = max { k ≥ 0 : P[Binomial(n, ε) ≤ k] ≤ α },   τ̂ = s₍k*+1₎

(the (k*+1)-th smallest score), the largest threshold at which at most k* calibration
scores fall below it. If the true rate P[s(x) < τ̂] exceeded ε, the number of calibration
scores below τ̂ would be at least Binomial(n, ε) and so ≤ k* with probability ≤ α: hence
P_Z[P_x[s(x) ≥ τ̂] ≥ 1 − ε] ≥ 1 − α (Theorem 3.1). Every θ₀ ≤ τ̂ keeps the guarantee,
so §4.2 picks the F1-best of 10 equally spaced thresholds in [0, τ̂] (`pare_threshold`).

Here 𝒜(x) is the better of δ = 0 and the recourse method's δ (0 ∈ Δ, so this is a valid
recourse algorithm): s(x) = max(g(x), g(x + δ)), so ``s(x) ≥ θ₀`` is exactly "x has
recourse at θ₀" as the "recourse all" metric counts it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from numbers import Integral
from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.errors import ConfigError
from recourse_sim.lazy import LazyModule
from recourse_sim.learners.base import (
    Learner,
    State,
    as_tensor,
    check_positive,
    check_recourse_training,
)
from recourse_sim.recourse.action_set import ActionSet
from recourse_sim.recourse.individual import METHODS, individual_recourse
from recourse_sim.recourse.linear_program import linear_recourse

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds this without torch
    torch = LazyModule("torch", globals())

# -- Step 1: recourse-aware training ---------------------------------------------------------


def recourse_delta(
    learner: Learner, state: State, X: torch.Tensor, action_set: ActionSet, goal: int = 1
) -> torch.Tensor:
    """Ross et al.'s δ* = argmin_{δ∈Δ(x)} ∇ₓℓ(g_θ(x), goal)ᵀδ for every row of X at once.

    The ``"linear"`` individual-recourse method (one batched gradient and the exact
    closed-form LP); detached from θ and X, as Danskin's theorem prescribes for the
    gradient of the recourse loss. Works under ``torch.no_grad`` too (the input gradient
    is taken in its own graph).
    """
    detached = {k: v.detach() for k, v in state.items()}
    goals = torch.full((len(X),), int(goal), dtype=torch.long)
    with torch.enable_grad():
        return linear_recourse(learner, detached, X.detach(), goals, action_set)


# -- Step 2: PAC confidence sets and the PARE threshold --------------------------------------


def _check_level(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and 0 < value < 1):
        raise ConfigError(f"{name}={value!r} must be a number in (0, 1)")


def binomial_error_budget(n: int, epsilon: float, alpha: float) -> int:
    """k* = max {k ≥ 0 : P[Binomial(n, ε) ≤ k] ≤ α}, or −1 when even k = 0 fails.

    The number of calibration errors Park et al.'s PAC estimator tolerates. Computed in
    log space by summing the binomial pmf from h = 0 (exact up to float64 rounding; no
    call to a statistics library, so tests can check it against one).
    """
    if not (isinstance(n, Integral) and not isinstance(n, bool) and n >= 0):
        raise ConfigError(f"n={n!r} must be a non-negative integer")
    _check_level("epsilon", epsilon)
    _check_level("alpha", alpha)
    h = np.arange(n + 1, dtype=np.float64)
    lgamma = np.vectorize(math.lgamma, otypes=[np.float64])
    log_pmf = (
        math.lgamma(n + 1)
        - lgamma(h + 1)
        - lgamma(n - h + 1)
        + h * math.log(epsilon)
        + (n - h) * math.log1p(-epsilon)
    )
    log_cdf = np.logaddexp.accumulate(log_pmf)
    # the CDF is increasing: the budget is the last k whose CDF is still ≤ α
    return int(np.searchsorted(log_cdf, math.log(alpha), side="right")) - 1


def pac_threshold(scores, epsilon: float, alpha: float) -> float:
    """Park et al.'s τ̂: the largest τ with at most k* calibration scores below it.

    `scores` are s(x) = g(x + 𝒜(x)) on the n calibration rows. With probability ≥ 1 − α
    over the calibration draw, P_x[s(x) ≥ τ̂] ≥ 1 − ε. When n is too small for (ε, α)
    — (1 − ε)ⁿ > α — no data-driven threshold is certified and τ̂ = 0 (every decision
    favourable) is returned with a warning.
    """
    s = np.sort(np.asarray(scores, dtype=np.float64).ravel())
    if not np.isfinite(s).all():
        raise ConfigError("scores contain NaN or infinite values")
    k = binomial_error_budget(len(s), epsilon, alpha)
    if k < 0:
        warnings.warn(
            f"PARE: {len(s)} calibration rows are too few for epsilon={epsilon:g}, "
            f"alpha={alpha:g} ((1 - epsilon)^n = {(1 - epsilon) ** len(s):.3g} > alpha; "
            f"need n >= {math.ceil(math.log(alpha) / math.log1p(-epsilon))}); "
            "returning threshold 0 (every decision favourable)",
            stacklevel=2,
        )
        return 0.0
    return float(s[k])


def recourse_scores(
    learner: Learner,
    X,
    action_set: ActionSet,
    *,
    method: str = "linear",
    goal: int = 1,
    state: State | None = None,
    **solver_kwargs,
) -> np.ndarray:
    """s(x) = max(g(x), g(x + δ)): the goal-class score after the best of {0, δ}.

    δ is `individual_recourse`'s answer for `method` ("linear": Ross's "adversarial
    training" δ*; "pgd": gradient descent on the goal loss; "wachter"); it does not
    depend on any decision threshold, so x has recourse at θ₀ exactly when s(x) ≥ θ₀.
    `solver_kwargs` go to `individual_recourse` (e.g. ``steps``).
    """
    if method not in METHODS:
        raise ConfigError(f"method={method!r} is not one of {', '.join(METHODS)}")
    state = learner.state() if state is None else state
    Xt = as_tensor(X)
    result = individual_recourse(
        learner, Xt, goal, action_set, method=method, state=state, **solver_kwargs
    )
    with torch.no_grad():
        before = learner.proba_fn(state, Xt)[:, goal]
        after = learner.proba_fn(state, Xt + torch.as_tensor(result.delta))[:, goal]
    return torch.maximum(before, after).numpy()


def recourse_rates(scores, best_scores, threshold: float) -> tuple[float, float]:
    """("recourse neg", "recourse all") at decision threshold θ₀ (§4.1's metrics).

    `scores` = g(x), `best_scores` = max(g(x), g(x + δ)) (see `recourse_scores`).
    "recourse neg": among rows with g(x) < θ₀, the share with g(x + δ) ≥ θ₀ (NaN if
    there are none); "recourse all": the share with g(x) ≥ θ₀ or g(x + δ) ≥ θ₀.
    """
    scores = np.asarray(scores, dtype=np.float64)
    ok = np.asarray(best_scores, dtype=np.float64) >= threshold
    negative = scores < threshold
    neg = float(ok[negative].mean()) if negative.any() else float("nan")
    return neg, float(ok.mean())


def max_f1_threshold(scores, y, *, upper: float = 1.0, n_grid: int | None = None) -> float:
    """The decision threshold θ₀ ≤ `upper` maximising F1 of 1[g(x) ≥ θ₀] against y.

    ``n_grid=None``: the exact maximiser over every distinct score ≤ `upper` and `upper`
    itself. ``n_grid=m``: the best of ``linspace(0, upper, m)`` — §4.2's PARE selection
    uses m = 10. Ties go to the smallest threshold (more favourable decisions).
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(y).ravel()
    if s.shape != y.shape or len(s) == 0:
        raise ConfigError(
            f"scores and y must be non-empty and of one length, got {len(s)}, {len(y)}"
        )
    if n_grid is None:
        candidates = np.unique(np.r_[s[s <= upper], upper])
    else:
        check_positive("n_grid", n_grid, integer=True)
        candidates = np.linspace(0.0, upper, n_grid)
    order = np.sort(s)
    positives = np.sort(s[y == 1])
    n_pred = len(s) - np.searchsorted(order, candidates, side="left")
    tp = len(positives) - np.searchsorted(positives, candidates, side="left")
    denom = n_pred + len(positives)
    f1 = np.divide(2.0 * tp, denom, out=np.zeros(len(candidates)), where=denom > 0)
    return float(candidates[int(np.argmax(f1))])


@dataclass(frozen=True)
class PareThreshold:
    """The PARE decision threshold and the certificate behind it."""

    threshold: float  # θ₀, the decision threshold to deploy (≤ upper)
    upper: float  # τ̂(Z'), the largest threshold the calibration set certifies
    n_calibration: int  # n, calibration rows
    max_errors: int  # k*, calibration scores allowed below τ̂ (−1: n too small)
    epsilon: float  # at most this share of people lacks recourse ...
    alpha: float  # ... except with this probability over the calibration draw


def pare_threshold(
    learner: Learner,
    X_cal,
    action_set: ActionSet,
    *,
    epsilon: float = 0.05,
    alpha: float = 0.05,
    y_cal=None,
    n_grid: int = 10,
    method: str = "linear",
    goal: int = 1,
    state: State | None = None,
    **solver_kwargs,
) -> PareThreshold:
    """Choose θ₀ so that 1[g(x) ≥ θ₀] is PARE (§3.3), and F1-best below the bound (§4.2).

    τ̂ = `pac_threshold` of the calibration recourse scores `recourse_scores(X_cal)`.
    With labels `y_cal`, θ₀ is the F1-best of ``linspace(0, τ̂, n_grid)`` on the
    calibration rows (the paper's selection); without, θ₀ = τ̂. Method "linear" is the
    paper's choice for Table 2 (fast, and threshold-free).
    """
    scores = recourse_scores(
        learner, X_cal, action_set, method=method, goal=goal, state=state, **solver_kwargs
    )
    upper = pac_threshold(scores, epsilon, alpha)
    threshold = upper
    if y_cal is not None:
        state = learner.state() if state is None else state
        with torch.no_grad():
            g = learner.proba_fn(state, as_tensor(X_cal))[:, goal].numpy()
        labels = (np.asarray(y_cal) == goal).astype(np.int64)
        threshold = max_f1_threshold(g, labels, upper=upper, n_grid=n_grid)
    return PareThreshold(
        threshold=threshold,
        upper=upper,
        n_calibration=len(scores),
        max_errors=binomial_error_budget(len(scores), epsilon, alpha),
        epsilon=epsilon,
        alpha=alpha,
    )


__all__ = [
    "PareThreshold",
    "binomial_error_budget",
    "check_recourse_training",
    "max_f1_threshold",
    "pac_threshold",
    "pare_threshold",
    "recourse_delta",
    "recourse_rates",
    "recourse_scores",
]


ActionSet.delta_solver = recourse_delta  # (see `ActionSet.recourse_delta`)
