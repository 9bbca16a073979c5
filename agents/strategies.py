"""Population strategies: what the people of one population do in a round.

Each strategy is a class registered by name (the ``strategy`` of a scenario's
population) with a vectorised ``act``. Strategies act at one of two moments of a round:

* ``"decision"`` — after the decision, on their own reported features, to change
  their own decision (individual recourse, OAR Eq. 2);
* ``"training"`` — after the outcomes, on the reports that will train the next model,
  on behalf of a query group (collective recourse, OAR Eq. 3, or the env's action).

Who is eligible (groups, labels, decision), who hears a collective's plan (social
graph) and who takes part (α) is decided by the environment with `select` and
`agents.social.recruit`; ``act`` gets masks and returns perturbations that lie in the
population's action set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from recourse_sim.errors import ConfigError
from recourse_sim.learners import Learner
from recourse_sim.recourse import ActionSet
from recourse_sim.scenarios import STRATEGIES

__all__ = [
    "REGISTRY",
    "CollectiveOAR",
    "Controlled",
    "Individual",
    "IndividualResult",
    "Strategy",
    "Truthful",
    "make_strategy",
]


@dataclass(frozen=True)
class IndividualResult:
    delta: np.ndarray  # (n, d) perturbations; zero for people who did not act
    tried: np.ndarray  # (n,) bool: sought recourse this round
    cost: np.ndarray  # (n,) cost of each perturbation (0 for the others)


class Strategy:
    """Base class: a named population, its scenario block and its action set."""

    name: ClassVar[str]
    stage: ClassVar[str] = "none"  # "none", "decision" or "training"

    def __init__(self, population: str, spec, action_set: ActionSet):
        self.population = population
        self.spec = spec
        self.action_set = action_set

    def select(
        self,
        group: np.ndarray,
        labels: np.ndarray,
        group_labels: tuple[str, ...],
    ) -> np.ndarray:
        """People of this population's groups with the eligible labels (a mask)."""
        mask = np.ones(len(group), bool)
        if self.spec.groups is not None:
            mask &= np.isin(group, [group_labels.index(g) for g in self.spec.groups])
        if self.spec.labels is not None:
            mask &= np.isin(labels, self.spec.labels)
        return mask

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.population!r}, epsilon={self.action_set.epsilon})"


class Truthful(Strategy):
    """Reports the truth and never seeks recourse."""

    name = "truthful"


class Individual(Strategy):
    """Rejected people each move their own features towards the favourable decision.

    Methods (`recourse_sim.recourse.individual_recourse`): ``pgd`` (OAR Eq. 2),
    ``wachter`` (loss + λ·cost) and ``linear`` (Ross et al.'s linearised δ*).
    """

    name = "individual"
    stage = "decision"

    def act(
        self,
        learner: Learner,
        X: np.ndarray,
        seekers: np.ndarray,
        goal: int,
        rng: np.random.Generator,
    ) -> IndividualResult:
        """Each eligible seeker tries with probability α; returns their perturbations."""
        from recourse_sim.recourse import individual_recourse

        n = len(X)
        tried = np.asarray(seekers, bool) & (rng.random(n) < self.spec.participation)
        delta, cost = np.zeros_like(X), np.zeros(n)
        if tried.any() and self.action_set.epsilon > 0:
            res = individual_recourse(
                learner,
                X[tried],
                goal,
                self.action_set,
                method=self.spec.method,
                steps=self.spec.steps,
            )
            delta[tried], cost[tried] = res.delta, res.cost
        return IndividualResult(delta=delta, tried=tried, cost=cost)


class CollectiveOAR(Strategy):
    """Participants perturb their training reports by Online Algorithmic Recourse.

    Solved against the learner's own differentiable update rule, looking ahead
    ``horizon`` updates (`recourse_sim.recourse.collective_recourse`).
    """

    name = "collective_oar"
    stage = "training"

    def act(
        self,
        learner: Learner,
        X: np.ndarray,
        y: np.ndarray,
        participants: np.ndarray,
        queries: np.ndarray,
        goal: int,
        action: np.ndarray | None = None,
    ) -> np.ndarray:
        """Perturbations (n, d) of the training rows; zero for non-participants."""
        from recourse_sim.recourse.collective import collective_recourse

        if not participants.any() or len(queries) == 0 or self.action_set.epsilon == 0:
            return np.zeros_like(X)
        res = collective_recourse(
            learner,
            X,
            y,
            queries,
            goal,
            self.action_set,
            self.spec.horizon,
            members=np.asarray(participants, bool),
            steps=self.spec.steps,
            method=self.spec.solver,
        )
        return res.delta


class Controlled(Strategy):
    """Participants apply the environment's action: a direction per label class.

    The action ``a`` has shape (k classes, m actionable features) in [-1, 1], in units
    of the budget: ``a_cj = ±1`` spends the whole budget ε on feature j alone. A
    participant with training label c reports ``x + project(ε · a_c / w)`` (w: the
    cost weights; an unpriced feature, w = 0, moves by ε · a_cj in its own unit), the
    projection onto its own action set (bounds, monotonicity, budget). Scaling by the
    cost weights makes one action unit mean the same effort whatever a feature's unit
    (a FICO point costs 0.01, a GPA point 2).
    """

    name = "controlled"
    stage = "training"

    @property
    def actionable_index(self) -> np.ndarray:
        return np.flatnonzero(self.action_set.actionable)

    @property
    def budget_scale(self) -> np.ndarray:
        """Per actionable feature, the change (in the feature's unit) of one action unit:
        ε / w_j, or ε where the feature is unpriced (w_j = 0)."""
        w = self.action_set.weights_[self.actionable_index]
        eps = self.action_set.epsilon
        return np.where(w > 0, eps / np.where(w > 0, w, 1.0), eps)

    def act(
        self,
        learner: Learner,
        X: np.ndarray,
        y: np.ndarray,
        participants: np.ndarray,
        queries: np.ndarray,
        goal: int,
        action: np.ndarray | None = None,
    ) -> np.ndarray:
        delta = np.zeros_like(X)
        if action is None or not participants.any():
            return delta
        idx = self.actionable_index
        a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        rows = np.flatnonzero(participants)
        direction = np.zeros((len(rows), X.shape[1]))
        direction[:, idx] = self.budget_scale * a[y[rows]][:, : len(idx)]
        delta[rows] = self.action_set.project(X[rows], direction)
        return delta


REGISTRY: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (Truthful, Individual, CollectiveOAR, Controlled)
}
"""Strategy classes by name. ``genre`` joins once GenRe recourse exists."""

assert tuple(REGISTRY) == STRATEGIES, "the scenario schema and the registry must agree"


def make_strategy(population: str, spec, action_set: ActionSet) -> Strategy:
    """The strategy object of one scenario population."""
    cls = REGISTRY.get(spec.strategy)
    if cls is None:
        raise ConfigError(
            f"populations.{population}.strategy: unknown strategy {spec.strategy!r} "
            f"(valid: {', '.join(REGISTRY)})"
        )
    return cls(population, spec, action_set)
