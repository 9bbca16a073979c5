"""The gap of the deployed model to the performative optimum, measured each round.

Where the distribution map is known exactly, the performative risk of any model on the
round's people can be computed, and so can its minimum. The ``all`` row of metrics.csv
then has

- ``optimum_gap``: PR(θₜ) − min_θ PR(θ) on the round's applicants, with

      PR(θ) = mean over applicants of −log p_θ(yᵢ | xᵢ(θ)) + ‖W‖² / (2 C n),

  θₜ the model that decided the round, yᵢ the true outcomes (as ``performative_risk``),
  xᵢ(θ) = x₀ᵢ + δᵢ(θ) the report person i would make in response to θ (x₀ᵢ their
  features at the start of the round; δ the ``best_response`` strategy's response,
  `recourse_sim.agents.best_response.best_response_delta`, for members; 0 for the
  others), n the number of applicants and ‖W‖²/(2 C n) the learner's L2 term (W per SD
  under ``standardize``, the intercept unpenalised): the per-row objective of logistic
  regression's ``sgd``, ``perfgd`` and ``dfo`` rules, and the refit's divided by C n.
  The minimum is L-BFGS-B's (scipy) from two starts, the last round's minimiser and θₜ,
  the lower of the two kept; PR need not be convex, so it is the lowest local minimum
  found, and the gap is never negative.

A ``best_response`` population asks for it (``optimum_gap: true``; the column is then
present, and absent from every other scenario). It is computable, and anything else is
refused with an ``error:`` naming the field, when that population is the only one that
is not truthful and has ``memory: false`` (the response is then a function of θ alone),
``participation: 1`` and no ``groups`` (its ``labels`` may select: the members are the
applicants whose true outcome at the start of the round is one of them), its actionable
features are continuous, and the deployed model is a binary logistic regression (any
update rule). It costs a small optimisation a round: on ``performative_credit_bounded``
(1,000 people, 13 features, one torch thread) about 130 ms of CPU a round against 7–10
ms for the rest of the round, hence opt-in.

The last round's minimiser is part of the episode state (checkpoints), so a resumed run
starts the search where the uninterrupted run did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from recourse_sim.errors import ConfigError
from recourse_sim.lazy import LazyModule
from recourse_sim.learners.logistic import LogisticRegression
from recourse_sim.learners.performative import binary_risk, move_to_model

if TYPE_CHECKING:
    import torch

    from recourse_sim.agents.strategies import Strategy
    from recourse_sim.learners import Learner
    from recourse_sim.scenarios import Scenario
else:
    torch = LazyModule("torch", globals())

__all__ = ["PerformativeOptimum", "performative_risk_fn"]


def scenario_classes(learner: Learner) -> int:
    """The classes the environment built `learner` for (``n_classes``; 2 if unset)."""
    return int(getattr(learner, "n_classes", None) or 2)


def performative_risk_fn(
    learner: LogisticRegression,
    X0: np.ndarray,
    y: np.ndarray,
    members: np.ndarray,
    action_set,
    strength: float,
    favourable: int,
):
    """PR as a torch function of θ (1, D) (`learner.pack`'s layout): the mean
    cross-entropy at labels y (class indices) of the reports x₀ + δ(θ) of the rows X0
    (members only; δ: the best response to θ's log-odds of class `favourable`, clipped
    to `action_set`'s box) plus ‖W‖² / (2 C n)."""
    state = learner.state_
    scaling = {k: state[k] for k in ("x_shift", "x_scale") if k in state}
    X0_t = torch.as_tensor(np.asarray(X0, dtype=np.float64))
    lo, hi = (torch.as_tensor(b) for b in action_set.box(np.asarray(X0, dtype=np.float64)))
    rows = torch.as_tensor(np.asarray(members, bool))[:, None]
    y_t = torch.as_tensor(np.asarray(y) == 1, dtype=torch.float64)
    sign = 1.0 if favourable == 1 else -1.0  # the favourable log-odds are ± the logit

    def pr(theta: torch.Tensor) -> torch.Tensor:
        move = move_to_model(theta, scaling, action_set, strength, sign)
        X = X0_t + torch.where(rows, torch.minimum(torch.maximum(move, lo), hi), 0.0)
        return binary_risk(learner, theta, X, y_t, scaling)

    return pr


class PerformativeOptimum:
    """``optimum_gap`` of one episode (module docstring): the response it uses and the
    last round's minimiser."""

    def __init__(self, strategy: Strategy, favourable: int, n_params: int) -> None:
        self.strategy = strategy
        self.favourable = favourable
        self.last = np.full(n_params, np.nan)  # the last round's minimiser (NaN: none yet)

    @classmethod
    def of(
        cls, scenario: Scenario, strategies: list[Strategy], learner: Learner, favourable: int
    ) -> PerformativeOptimum | None:
        """The tracker of `scenario`'s episode (None: no population asks for the gap).
        The scenario's validation made sure the asking population is the only one that
        is not truthful, with memory false, participation 1 and no groups."""
        asking = [s for s in strategies if getattr(s.spec, "optimum_gap", False)]
        if not asking:
            return None
        (s,) = asking
        where = f"{scenario.source}: populations.{s.population}.optimum_gap"
        typed = s.action_set.typed_actionable_names()
        if typed:
            raise ConfigError(
                f"{where}: the response of typed features ({', '.join(typed)}) is a step "
                "function of the model; the optimum is computed for continuous features"
            )
        if not isinstance(learner, LogisticRegression) or scenario_classes(learner) != 2:
            raise ConfigError(
                f"{where}: the performative risk is computed for binary logistic regression "
                f"(learner.type logistic_regression, two classes), not {learner!r}"
            )
        return cls(s, favourable, s.action_set.n_features + int(learner.fit_intercept))

    def members(self, y0: np.ndarray) -> np.ndarray:
        """Which applicants respond: those whose true outcome at the start of the round
        (`y0`) is one of the population's ``labels``."""
        classes = self.strategy.spec.classes
        return np.ones(len(y0), bool) if classes is None else np.isin(y0, classes)

    def gap(self, learner: LogisticRegression, X0: np.ndarray, y0: np.ndarray, y) -> float:
        """PR(θ) − min PR of the deployed `learner` on applicants with features X0 and
        true outcomes y0 (at the start of the round) and y (this round's)."""
        from scipy.optimize import minimize  # (imported where a gap is computed)

        theta = learner.pack(learner.state_).detach().to(torch.float64)
        if theta.shape[0] != 1:  # softmax: not one log-odds
            return float("nan")
        pr = performative_risk_fn(
            learner,
            X0,
            y,
            self.members(y0),
            self.strategy.action_set,
            float(self.strategy.spec.epsilon),
            self.favourable,
        )
        shape = theta.shape

        def value_and_grad(flat: np.ndarray) -> tuple[float, np.ndarray]:
            th = torch.from_numpy(flat.reshape(shape)).requires_grad_(True)
            with torch.enable_grad():
                value = pr(th)
                (grad,) = torch.autograd.grad(value, th)
            return float(value.detach()), grad.numpy().reshape(-1)

        now = value_and_grad(theta.numpy().reshape(-1))[0]
        starts = [theta.numpy().reshape(-1)]
        if np.isfinite(self.last).all():
            starts.insert(0, self.last)
        best_value, best = now, theta.numpy().reshape(-1)
        for start in starts:
            res = minimize(
                value_and_grad,
                start,
                jac=True,
                method="L-BFGS-B",
                options={"maxiter": 500, "ftol": 1e-15, "gtol": 1e-10},
            )
            if res.fun < best_value:
                best_value, best = float(res.fun), res.x
        self.last = np.array(best, dtype=np.float64)
        return max(now - best_value, 0.0)

    def get_state(self) -> dict[str, Any]:
        return {"last": self.last.copy()}

    def set_state(self, state: dict[str, Any]) -> None:
        self.last = np.array(state["last"], dtype=np.float64)
