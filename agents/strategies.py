"""Population strategies: what the people of one population do in a round.

Each strategy is a class registered by name (the ``strategy`` of a scenario's
population) with a vectorised ``act``. Strategies act at one of three moments of a round:

* ``"respond"`` — before the decision, on the reports people apply with: every member
  responds to the deployed model (``best_response``, performative prediction);
* ``"decision"`` — after the decision, on their own reported features, to change
  their own decision (individual recourse, OAR Eq. 2);
* ``"training"`` — after the outcomes, on the reports that will train the next model,
  on behalf of a query group (collective recourse, OAR Eq. 3, or the env's action).

Who is eligible (groups, labels, decision), who hears a collective's plan (social
graph) and who takes part (α) is decided by the environment with `select` and
`recourse_sim.agents.social.recruit`; ``act`` gets masks and returns perturbations that lie in the
population's action set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from recourse_sim.agents.best_response import best_response_bounds, best_response_delta
from recourse_sim.agents.oar_settings import OarSettings, bank_draw, plan_horizon
from recourse_sim.errors import ConfigError
from recourse_sim.learners import Learner
from recourse_sim.learners.base import State
from recourse_sim.recourse import ActionSet
from recourse_sim.scenarios import STRATEGIES

__all__ = [
    "OAR_ACTION",
    "OAR_PLAN_ACTION",
    "OAR_THRESHOLD",
    "REGISTRY",
    "BestResponse",
    "CollectiveOAR",
    "Controlled",
    "GenreRecourse",
    "Individual",
    "IndividualResult",
    "Strategy",
    "Truthful",
    "adapt",
    "aim_unreachable",
    "best_response_bounds",
    "best_response_delta",
    "effort_tolerance",
    "make_strategy",
    "oar_budget_share",
    "register",
    "seeker_margins",
    "spread_quantile",
]


@dataclass(frozen=True)
class IndividualResult:
    delta: np.ndarray  # (n, d) perturbations; zero for people who did not act
    tried: np.ndarray  # (n,) bool: sought recourse this round
    cost: np.ndarray  # (n,) cost of each perturbation (0 for the others)


def effort_tolerance(spec, v: np.ndarray) -> np.ndarray:
    """Per-person effort tolerances (cost units) of a population's ``tolerance`` block at
    the people's effort quantiles `v` (uniforms drawn with each person by the world):
    the inverse CDF of the distribution, so one person keeps one tolerance."""
    return spread_quantile(spec, v)


# the largest margin below 1 (a margin is a probability in [0, 1)): a spread's upper tail
# (lognormal) is clipped to it, and such a person's aim, cut-off plus margin, is above 1
_LARGEST_MARGIN = float(np.nextafter(1.0, 0.0))


def seeker_margins(spec, q: np.ndarray) -> float | np.ndarray:
    """Per-person margins (probability units) of a population's ``margin`` at the
    people's margin quantiles `q`: the number itself, or the inverse CDF of its spread,
    clipped below 1 (a lognormal's tail passes 1: that person's aim cannot be reached,
    `aim_unreachable`, and they change nothing)."""
    if isinstance(spec, int | float):
        return float(spec)
    return np.minimum(spread_quantile(spec, q), _LARGEST_MARGIN)


def aim_unreachable(spec, target: np.ndarray | None, margin) -> np.ndarray | bool:
    """Under a population's ``objective: min_cost``, whose aim, the P(goal) their
    decision needs (`target`; None: the argmax) plus their margin, is at or above 1: no
    change of theirs reaches it (False elsewhere)."""
    if target is None or getattr(spec, "objective", None) != "min_cost":
        return False
    return np.asarray(target, dtype=np.float64) + margin >= 1.0


def _margin_of(spec, margin, tried: np.ndarray):
    """The margins of the `tried` rows: `margin` (a number, or one per row) as given to
    `act`, or the population's number when None."""
    if margin is None:
        if not isinstance(spec.margin, int | float):
            raise ConfigError("a margin drawn per person needs act(..., margin=)")
        return spec.margin
    return margin[tried] if np.ndim(margin) else margin


def spread_quantile(spec, v: np.ndarray) -> np.ndarray:
    """The value at quantile `v` of a ``kind: uniform`` (low, high) or ``kind:
    lognormal`` (median, sigma) block."""
    if spec.kind == "uniform":
        return spec.low + v * (spec.high - spec.low)
    from scipy.special import ndtri

    # v is in [0, 1): a person at v = 0 has tolerance 0, the lower end of the support
    return spec.median * np.exp(spec.sigma * ndtri(v))


def adapt(
    spec,
    result: IndividualResult,
    v: np.ndarray,
    enough: np.ndarray | None = None,
    action_set: ActionSet | None = None,
    X: np.ndarray | None = None,
) -> IndividualResult:
    """The changes seekers make this round: each recourse δ scaled by min(``move``,
    τ / cost(δ), `enough`), τ the person's effort tolerance (`effort_tolerance`; none: no
    cap) and `enough` the share of δ that just gets the decision (``just_enough``; the
    environment finds it). Costs are norms, so a scaled change costs that share of
    cost(δ); it lies between x and x + δ, so it stays in the box and budget.

    With a typed `action_set` (and the rows' reports `X`) the scaled change is put back
    on the types between x and x + δ: where `enough` binds, on the side of x + δ (so the
    decision it just gets holds), elsewhere on the side of x (so no cap is exceeded);
    its cost is then the action set's."""
    scale = np.full(len(result.cost), float(spec.move))
    if enough is not None:
        scale = np.minimum(scale, enough)
    if spec.tolerance is not None:
        tolerance = effort_tolerance(spec.tolerance, v)
        cost = result.cost
        spent = np.divide(tolerance, cost, out=np.ones_like(cost), where=cost > 0)
        scale = np.minimum(scale, spent)
    if (scale >= 1.0).all():
        return result
    scale = np.where(result.tried, scale, 0.0)
    delta = result.delta * scale[:, None]
    if action_set is None or not action_set.typed:
        return IndividualResult(delta=delta, tried=result.tried, cost=result.cost * scale)
    toward = action_set.rounded(X, delta, "toward")
    if enough is not None:
        outward = action_set.rounded(X, delta, "direction", result.delta)
        toward = np.where((scale == enough)[:, None], outward, toward)
    return IndividualResult(
        delta=toward, tried=result.tried, cost=np.asarray(action_set.cost(toward))
    )


class Strategy:
    """Base class: a named population, its scenario block and its action set."""

    name: ClassVar[str]
    stage: ClassVar[str] = "none"  # "none", "decision" or "training"
    learns: ClassVar[bool] = False  # has state beyond its scenario block (`get_state`)

    def __init__(self, population: str, spec, action_set: ActionSet):
        self.population = population
        self.spec = spec
        self.action_set = action_set
        # the learner's state after its update on the training rows as this strategy's
        # last `act` left them, where the strategy computed it (else None): a start for
        # the real update's solver
        self.state_after: State | None = None
        # the training labels as this strategy's last `act` left them, where it reports
        # labels (else None)
        self.labels_after: np.ndarray | None = None

    def select(
        self,
        group: np.ndarray,
        labels: np.ndarray,
        group_labels: tuple[str, ...],
    ) -> np.ndarray:
        """People of this population's groups with the eligible labels (a mask)."""
        mask = np.ones(len(group), bool)
        # (kind="sort": numpy's default for integers builds a table, ~20x slower on the
        # batched env's 100k rows)
        if self.spec.groups is not None:
            mask &= np.isin(group, [group_labels.index(g) for g in self.spec.groups], kind="sort")
        if self.spec.classes is not None:
            mask &= np.isin(labels, self.spec.classes, kind="sort")
        return mask

    def participation_of(self, action: np.ndarray | None) -> float:
        """α this round (the population's; a controlled one may take it from the action)."""
        return self.spec.participation

    def participants(self, seekers: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Which eligible seekers try this round: each with probability α."""
        return np.asarray(seekers, bool) & (rng.random(len(seekers)) < self.spec.participation)

    def observe(self, learner: Learner, X: np.ndarray, y: np.ndarray) -> None:
        """Called after each model update with the rows it was trained on (as reported).

        A no-op; strategies that learn from what the deployed model sees override it.
        """

    def get_state(self) -> dict:
        """What the strategy has learnt, as numpy arrays, numbers, strings and containers
        of these (for checkpoints); empty for strategies that learn nothing."""
        return {}

    def set_state(self, state: dict) -> None:
        """Restore `get_state`'s output exactly."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.population!r}, epsilon={self.action_set.epsilon})"


class Truthful(Strategy):
    """Reports the truth and never seeks recourse."""

    name = "truthful"


class Individual(Strategy):
    """Rejected people each move their own features towards the favourable decision.

    Methods (`recourse_sim.recourse.individual_recourse`): ``pgd`` (OAR Eq. 2),
    ``wachter`` (loss + λ·cost) and ``linear`` (Ross et al.'s linearised δ*); robust
    (`recourse_sim.recourse.robust`): ``roar`` (valid under every model within
    ``roar_delta``) and ``probe`` (invalidation rate under noise on the action at most
    ``probe_invalidation``); limiting the shifts recourse causes
    (`recourse_sim.recourse.mitigations`): ``claproar`` and ``gravitational`` (Wachter's
    search plus ``mitigation_weight`` times an external cost).
    """

    name = "individual"
    stage = "decision"

    def __init__(self, population: str, spec, action_set: ActionSet):
        super().__init__(population, spec, action_set)
        self._grid: np.ndarray | None = None  # causal recourse's action grid (per world)

    def causal_act(
        self,
        world,
        X_true: np.ndarray,
        noise: np.ndarray,
        seekers: np.ndarray,
        favoured,
    ) -> IndividualResult:
        """In a causal world, the seekers' recourse of type ``recourse`` (ce, cr, icr;
        `recourse_sim.recourse.causal`): the change of their true features, which their
        reports follow. `favoured(F, rows)`: whether this round's decision favours
        reports F of the cohort's `rows`."""
        from recourse_sim.recourse.causal import action_grid, causal_recourse, grid_steps

        if self._grid is None:  # steps of a quarter SD: whole steps for integer nodes
            steps = grid_steps(world)
            self._grid = action_grid(steps, self.action_set.actionable, self.spec.search_steps)
        res = causal_recourse(
            self.spec.recourse, world, X_true, noise, seekers, self.action_set, favoured, self._grid
        )
        return IndividualResult(res.delta, seekers, res.cost)

    def act(
        self,
        learner: Learner,
        X: np.ndarray,
        seekers: np.ndarray,
        goal: int,
        rng: np.random.Generator,
        target: np.ndarray | None = None,
        margin: float | np.ndarray | None = None,
    ) -> IndividualResult:
        """Each eligible seeker tries with probability α; returns their perturbations.
        `target`: per person, the P(goal) this round's decision needs (None: the
        argmax), which the ``min_cost`` objective aims at, `margin` above it (a number
        or one per person; None: the population's ``margin``, a number)."""
        from recourse_sim.recourse.individual import individual_delta
        from recourse_sim.recourse.mitigations import MITIGATIONS, mitigated_delta
        from recourse_sim.recourse.robust import ROBUST_METHODS, robust_delta

        n = len(X)
        tried = self.participants(seekers, rng)
        delta, cost = np.zeros_like(X), np.zeros(n)
        if tried.any() and self.action_set.epsilon > 0 and self.spec.method in ROBUST_METHODS:
            moved = robust_delta(
                learner,
                X[tried],
                goal,
                self.action_set,
                self.spec.method,
                target=None if target is None else np.asarray(target)[tried],
                margin=_margin_of(self.spec, margin, tried),
                delta=self.spec.roar_delta,
                sigma=self.spec.probe_sigma,
                invalidation=self.spec.probe_invalidation,
                steps=self.spec.steps,
            )
            delta[tried], cost[tried] = moved, np.asarray(self.action_set.cost(moved))
        elif tried.any() and self.action_set.epsilon > 0 and self.spec.method in MITIGATIONS:
            moved = mitigated_delta(
                learner,
                X[tried],
                goal,
                self.action_set,
                self.spec.method,
                weight=self.spec.mitigation_weight,
                steps=self.spec.steps,
            )
            delta[tried], cost[tried] = moved, np.asarray(self.action_set.cost(moved))
        elif tried.any() and self.action_set.epsilon > 0:
            # `individual_recourse`'s δ without evaluating it: only δ and its cost count
            moved = individual_delta(
                learner,
                X[tried],
                goal,
                self.action_set,
                method=self.spec.method,
                objective=self.spec.objective,
                target=None if target is None else np.asarray(target)[tried],
                margin=_margin_of(self.spec, margin, tried),
                steps=self.spec.steps,
            )
            delta[tried], cost[tried] = moved, np.asarray(self.action_set.cost(moved))
        return IndividualResult(delta=delta, tried=tried, cost=cost)


class GenreRecourse(Strategy):
    """Rejected people follow recourse sampled from GenRe, refit on what the model sees.

    GenRe (`recourse_sim.recourse.GenRe`) learns where people like x ended up with a
    confidently favourable, truly favourable outcome. Each eligible rejected person
    takes part with probability α, draws ``samples`` candidates x⁺, projects each change
    x⁺ − x into the action set and budget, and reports the one the deployed model
    scores highest.

    Training data: a buffer of the latest ``memory`` rows the deployed model was trained
    on (`observe`; with selective labels only approved people's rows). The model is
    refit every ``retrain_every`` rounds, the first time before the first round on the
    learner's remembered rows (its history, for ``refit`` and ``window`` rules): the
    environment hands strategies nothing at reset. A learner without memory (``sgd``)
    gives nothing to fit on, so nobody acts in round 1; until a fit succeeds, every
    round tries again. When a refit finds no source or target (e.g. no observed row is
    both unfavourable and scored ≤ 0.5) the previous model stays.

    Features are standardised by the training rows' spread, so ``lam`` is per standard
    deviation; GenRe's pairing matches no feature exactly (changes to immutable features
    are removed by the projection). All randomness (fit and sampling seeds,
    participation) comes from the environment's generator.
    """

    name = "genre"
    stage = "decision"
    learns = True

    def __init__(self, population: str, spec, action_set: ActionSet):
        super().__init__(population, spec, action_set)
        d = action_set.n_features
        self._X = np.zeros((0, d))  # observed training rows, the latest `memory`
        self._y = np.zeros(0, dtype=np.int64)
        self.rounds_observed = 0  # updates observed so far
        self.fitted_at: int | None = None  # rounds_observed at the last (attempted) fit
        self.fits = 0  # successful fits
        self.model = None  # the GenRe model, once fitted
        self._centre = np.zeros(d)  # standardisation of the last fit's rows
        self._scale = np.ones(d)

    @property
    def buffer(self) -> tuple[np.ndarray, np.ndarray]:
        """The observed rows kept for refits: (X, y), oldest first."""
        return self._X, self._y

    def observe(self, learner: Learner, X: np.ndarray, y: np.ndarray) -> None:
        """Keep the latest ``memory`` training rows; count the update."""
        self._remember(np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.int64))
        self.rounds_observed += 1

    def _remember(self, X: np.ndarray, y: np.ndarray) -> None:
        keep = self.spec.memory
        self._X = np.concatenate([self._X, X])[-keep:]
        self._y = np.concatenate([self._y, y])[-keep:]

    def _due(self) -> bool:
        # without a model, every round tries again (a failed fit costs next to nothing)
        return self.model is None or (
            self.rounds_observed - self.fitted_at >= self.spec.retrain_every
        )

    def _fit(self, learner: Learner, goal: int, rng: np.random.Generator) -> None:
        """Refit GenRe on the buffer (the learner's memory before anything was observed)."""
        from recourse_sim.recourse import GenRe

        seed = int(rng.integers(2**63 - 1))
        if self.rounds_observed == 0 and not len(self._X):
            memory = getattr(learner, "state_", {})
            if "X_mem" in memory:
                self._remember(
                    memory["X_mem"].numpy().astype(np.float64),
                    memory["y_mem"].numpy().astype(np.int64),
                )
        self.fitted_at = self.rounds_observed
        X, y = self._X, self._y
        if not len(X):
            return
        centre, spread = X.mean(0), X.std(0)
        scale = np.where(spread > 0, spread, 1.0)
        model = GenRe(
            n_layers=self.spec.layers,
            epochs=self.spec.epochs,
            batch_size=64,  # the observed sources are a few hundred: several steps per pass
            lam=self.spec.lam,
            gamma=self.spec.gamma,
            top_k=100,
            dropout=0.0,
            random_state=seed,
            # samples of discrete features land on observed values; the projection
            # then puts them on the action set's levels and steps exactly
            categorical=np.flatnonzero(self.action_set.discrete_mask),
        )
        try:
            model.fit(
                (X - centre) / scale,
                (y == goal).astype(np.int64),
                _scorer(learner, goal, centre, scale),
            )
        except ConfigError:
            return  # no source or no target in these rows: keep the previous model
        self.model, self._centre, self._scale = model, centre, scale
        self.fits += 1

    def act(
        self,
        learner: Learner,
        X: np.ndarray,
        seekers: np.ndarray,
        goal: int,
        rng: np.random.Generator,
        target: np.ndarray | None = None,
        margin: float | np.ndarray | None = None,
    ) -> IndividualResult:
        """Each eligible seeker tries with probability α; returns their perturbations
        (`target` and `margin` as for `Individual.act`)."""
        n = len(X)
        tried = self.participants(seekers, rng)
        if self._due():
            self._fit(learner, goal, rng)
        delta, cost = np.zeros_like(X), np.zeros(n)
        if self.model is None:
            return IndividualResult(delta=delta, tried=np.zeros(n, bool), cost=cost)
        seed = int(rng.integers(2**63 - 1))
        if tried.any() and self.action_set.epsilon > 0:
            need = None
            if self.spec.objective == "min_cost":
                need = np.full(n, 0.5) if target is None else np.asarray(target, float)
                need = need[tried] + _margin_of(self.spec, margin, tried)
            res = self._recourse(learner, X[tried], goal, seed, need)
            delta[tried], cost[tried] = res.delta, res.cost
        return IndividualResult(delta=delta, tried=tried, cost=cost)

    def _recourse(self, learner: Learner, X: np.ndarray, goal: int, seed: int, need=None):
        """Best-of-k GenRe recourse for rows X (original units), projected into the
        action set: the sample the model scores highest, or with `need` (the P(goal)
        each row's decision needs, ``min_cost``) the cheapest sample that gets the
        decision, followed only as far as it takes (none where no sample gets it)."""
        from recourse_sim.recourse.genre import best_sample
        from recourse_sim.recourse.individual import least_share, repair_types

        Z = (X - self._centre) / self._scale
        samples = self.model.sample(
            Z, self.spec.samples, temperature=self.spec.temperature, random_state=seed
        )
        samples = samples * self._scale + self._centre

        def score(rows: np.ndarray) -> np.ndarray:
            return learner.predict_proba(rows)[:, goal]

        res = best_sample(X, samples, score, self.action_set, need)
        if need is None:
            return res
        share = least_share(lambda rows: score(rows) >= need, X, res.delta)
        delta = np.where(res.success[:, None], share[:, None] * res.delta, 0.0)
        if self.action_set.typed:  # a share of a typed move need not be typed
            delta = repair_types(
                self.action_set, X, delta, res.delta, decided=lambda d: score(X + d) >= need
            )
        return IndividualResult(delta=delta, tried=res.success, cost=self.action_set.cost(delta))

    def get_state(self) -> dict:
        state = {
            "X": self._X.copy(),
            "y": self._y.copy(),
            "rounds_observed": self.rounds_observed,
            "fitted_at": -1 if self.fitted_at is None else self.fitted_at,
            "fits": self.fits,
        }
        if self.model is not None:
            state["model"] = self.model.get_state()
            state["centre"], state["scale"] = self._centre.copy(), self._scale.copy()
        return state

    def set_state(self, state: dict) -> None:
        from recourse_sim.recourse import GenRe

        self._X = np.array(state["X"], dtype=np.float64).reshape(-1, self.action_set.n_features)
        self._y = np.array(state["y"], dtype=np.int64)
        self.rounds_observed = int(state["rounds_observed"])
        fitted_at = int(state["fitted_at"])
        self.fitted_at = None if fitted_at < 0 else fitted_at
        self.fits = int(state["fits"])
        self.model = GenRe.from_state(state["model"]) if "model" in state else None
        if self.model is not None:
            self._centre = np.array(state["centre"], dtype=np.float64)
            self._scale = np.array(state["scale"], dtype=np.float64)


def _scorer(learner: Learner, goal: int, centre: np.ndarray, scale: np.ndarray):
    """h(z) = P(goal | x) of the deployed model on standardised rows z = (x − centre) / scale."""
    return lambda Z: learner.predict_proba(Z * scale + centre)[:, goal]


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
        return _oar_act(self, learner, X, y, participants, queries, goal, self.action_set)


def _oar_act(
    strategy: Strategy,
    learner: Learner,
    X: np.ndarray,
    y: np.ndarray,
    participants: np.ndarray,
    queries: np.ndarray,
    goal: int,
    action_set: ActionSet,
    horizon: int | None = None,
) -> np.ndarray:
    """OAR's perturbations of the training rows by `strategy`'s participants (its spec's
    steps and solver, and its horizon unless `horizon` is given), within `action_set`;
    sets `strategy.state_after`."""
    from recourse_sim.recourse.collective import collective_recourse

    strategy.state_after = None
    if not participants.any() or len(queries) == 0 or action_set.epsilon == 0:
        return np.zeros_like(X)
    if learner.update_rule == "frozen":  # the update ignores the reports: nothing to gain
        return np.zeros_like(X)
    spec = strategy.spec
    horizon = spec.horizon if horizon is None else horizon
    res = collective_recourse(
        learner,
        X,
        y,
        queries,
        goal,
        action_set,
        horizon,
        members=np.asarray(participants, bool),
        steps=spec.steps,
        method=spec.solver,
    )
    if horizon == 1:  # θ_1: the real update of these rows, solved
        strategy.state_after = res.state_after
    return res.delta


class Controlled(Strategy):
    """Participants apply the environment's action.

    ``action: shift`` (the v1 action): a direction per label class. The action ``a`` has
    shape (k classes, m actionable features) in [-1, 1], in units of the budget:
    ``a_cj = ±1`` spends the whole budget ε on feature j alone. A participant with
    training label c reports ``x + project(ε · a_c / w)`` (w: the cost weights; an
    unpriced feature, w = 0, moves by ε · a_cj in its own unit), the projection onto its
    own action set (bounds, monotonicity, budget). Scaling by the cost weights makes one
    action unit mean the same effort whatever a feature's unit (a FICO point costs 0.01,
    a GPA point 2).

    ``action: oar`` (the v2 action): OAR's own settings for the round, four numbers in
    [-1, 1] (`OAR_ACTION`), centred so that the zero action is OAR as the population's
    file sets it (a residual parametrisation: a policy that starts near zero starts at
    OAR and moves away only where that pays):

    * ``act``: the collective acts when ``act`` ≥ -1/2 (below: nobody moves);
    * ``alpha``: participation α = ``participation`` · min(1, 1 + ``alpha``) (0 and
      above: the file's α; -1: nobody);
    * ``budget``: ε = ``epsilon`` · the snapped share of `oar_budget_share`: min(1, 1 +
      ``budget``) rounded to the nearest of ``budget_levels`` L whole shares (L = 4:
      ε, ¾ε, ½ε, ¼ε, 0; every entry ≥ -1/8 keeps the file's ε, so OAR is an interior
      point and a small step below 0 does not cost a member an activity); L = 0: the
      continuous min(1, 1 + ``budget``);
    * ``goal``: the class OAR aims the query group at: the query's own goal class when
      ``goal`` ≥ -1/2; below, one of the other classes in order, [-1, -1/2) split
      evenly between the k - 1 of them (with two classes: the other one).

    The thresholds of the two discrete entries sit at -1/2, not at 0, so that a
    Gaussian policy centred at zero stays with OAR's choice for most of its draws. OAR
    (`collective_recourse`, with the population's horizon, steps and solver) computes
    each member's perturbation. Every constant action with all four entries in
    [0, 1] — (0, 0, 0, 0) and (1, 1, 1, 1) among them — is a ``collective_oar``
    population with the same settings, draw for draw; members are recruited with the
    same draws whatever the action, so actions differ only in what they choose.

    ``action: oar_plan`` (the v3 action, `OAR_PLAN_ACTION`) adds OAR's look-ahead and a
    draw on banked budget (`recourse_sim.agents.oar_settings`); its zero action is OAR too.
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

    def action_shape(self, n_classes: int) -> tuple[int, ...]:
        """The shape of this population's action (its `Box(-1, 1)`)."""
        if self.spec.action == "oar_plan":
            return (len(OAR_PLAN_ACTION),)
        if self.spec.action == "oar":
            return (len(OAR_ACTION),)
        return (n_classes, max(len(self.actionable_index), 1))

    def participation_of(self, action: np.ndarray | OarSettings | None) -> float:
        """α this round: the population's, or under ``action: oar`` the action's share of it."""
        if self.spec.action == "shift" or action is None:
            return self.spec.participation
        return self.oar_settings(action).participation

    def oar_settings(self, action: np.ndarray | OarSettings, bank: float = 0.0) -> OarSettings:
        """The round's OAR settings an ``oar`` or ``oar_plan`` action chooses (settings
        already decoded are returned as they are); `bank`: the budget banked so far."""
        if isinstance(action, OarSettings):
            return action
        # each entry clipped to [-1, 1] (np.clip's numbers, on Python floats: cheaper)
        a = [min(max(v, -1.0), 1.0) for v in np.asarray(action, dtype=np.float64).tolist()]
        spec, epsilon = self.spec, self.action_set.epsilon
        plan = spec.action == "oar_plan"
        entry = dict(zip(OAR_PLAN_ACTION if plan else OAR_ACTION, a, strict=True))
        alpha = spec.participation * _share(entry["alpha"])
        eps = epsilon * oar_budget_share(entry["budget"], spec.budget_levels)
        acting = entry["act"] >= OAR_THRESHOLD
        draw = bank_draw(entry["bank"], bank, spec.bank_cap * epsilon) if plan and acting else 0.0
        horizon = plan_horizon(entry["horizon"], spec.horizon, spec.max_horizon) if plan else None
        acts = acting and alpha > 0 and eps + draw > 0
        settings = OarSettings(
            acts, alpha, eps + draw, entry["goal"], horizon or spec.horizon, draw
        )
        return settings if acts else settings.idle()

    def act(
        self,
        learner: Learner,
        X: np.ndarray,
        y: np.ndarray,
        participants: np.ndarray,
        queries: np.ndarray,
        goal: int,
        action: np.ndarray | OarSettings | None = None,
    ) -> np.ndarray:
        delta = np.zeros_like(X)
        self.state_after = None
        if action is None or not participants.any():
            return delta
        if self.spec.action != "shift":
            return self._oar(learner, X, y, participants, queries, goal, self.oar_settings(action))
        a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        rows = np.flatnonzero(participants)
        delta[rows] = self.perturb(X[rows], a[y[rows]])
        return delta

    def _oar(self, learner, X, y, participants, queries, goal, settings: OarSettings):
        if not settings.acts:
            return np.zeros_like(X)
        # the file's budget is the population's own action set (the same numbers as OAR's)
        aset = self.action_set
        if settings.epsilon != aset.epsilon:
            aset = aset.replace(epsilon=settings.epsilon)
        target = oar_goal(settings.goal, int(goal), len(learner.classes_))
        return _oar_act(self, learner, X, y, participants, queries, target, aset, settings.horizon)

    def applied_action(self, settings: OarSettings | None) -> np.ndarray:
        """The round's OAR settings (after the limit) as the action entries that choose
        them, each in [-1, 1]: ``act`` 0 (acts) or -1 (idle); ``alpha`` and ``budget``
        their share of the file's α and ε minus 1 (the budget as snapped and capped, the
        bank's draw left out); ``goal`` 0 for the query's own goal, else the (clipped)
        entry that chose another class; under ``oar_plan`` also ``horizon`` (0: the
        file's look-ahead) and ``bank`` (the draw / (bank_cap · ε)). Zeros before round 1."""
        spec, epsilon = self.spec, self.action_set.epsilon
        plan = spec.action == "oar_plan"
        if settings is None:
            return np.zeros(len(OAR_PLAN_ACTION if plan else OAR_ACTION))
        alpha = settings.participation / spec.participation if spec.participation > 0 else 0.0
        own = (settings.epsilon - settings.draw) / epsilon if epsilon > 0 else 0.0
        goal = min(max(float(settings.goal), -1.0), 1.0)
        entries = [
            0.0 if settings.acts else -1.0,
            min(alpha, 1.0) - 1.0,
            min(own, 1.0) - 1.0,
            0.0 if goal >= OAR_THRESHOLD else goal,
        ]
        if plan:
            longer = spec.max_horizon - spec.horizon + 1
            most = spec.bank_cap * epsilon
            entries += [
                (settings.horizon - spec.horizon) / longer,
                min(settings.draw / most, 1.0) if most > 0 else 0.0,
            ]
        return np.array(entries)

    def perturb(self, X: np.ndarray, action_rows: np.ndarray) -> np.ndarray:
        """The perturbations (r, d) of r participants with training rows `X` (r, d) who
        follow `action_rows` (r, m), the row of the (clipped) action of each one's label
        (a batched environment passes rows of several worlds' actions at once)."""
        idx = self.actionable_index
        direction = np.zeros((len(X), X.shape[1]))
        direction[:, idx] = self.budget_scale * action_rows[:, : len(idx)]
        return self.action_set.project(X, direction)


OAR_ACTION: tuple[str, ...] = ("act", "alpha", "budget", "goal")
"""The entries of an ``action: oar`` action, in order (see `Controlled`)."""

OAR_PLAN_ACTION: tuple[str, ...] = (*OAR_ACTION, "horizon", "bank")
"""The entries of an ``action: oar_plan`` action, in order: `OAR_ACTION`'s, then the
look-ahead and the draw on the banked budget (`recourse_sim.env.limits`)."""


OAR_THRESHOLD: float = -0.5
"""Where the discrete entries of an ``action: oar`` action switch: the collective acts,
and aims at the query's own goal, when the entry is at least this (see `Controlled`)."""


def _share(a: float) -> float:
    """[-1, 1] → [0, 1]: min(1, 1 + a), so 0 and above is the whole."""
    return min(max(1.0 + float(a), 0.0), 1.0)  # (np.clip's number, without its overhead)


def oar_budget_share(a: float, levels: int) -> float:
    """The share of the budget ε an ``action: oar`` action's ``budget`` entry `a` gives:
    min(1, 1 + a) snapped to the nearest of `levels` L whole shares, halves up,
    floor(L · min(1, 1 + a) + 1/2) / L (with L = 4 every a ≥ -1/8 is the whole); L = 0:
    min(1, 1 + a) itself. Entries below -1 count as -1."""
    share = _share(a)
    if levels == 0:
        return share
    return math.floor(levels * share + 0.5) / levels


def oar_goal(entry: float, query_goal: int, n_classes: int) -> int:
    """The class an ``action: oar`` action's ``goal`` entry aims the query group at:
    `query_goal` when the entry is at least `OAR_THRESHOLD`, else one of the other
    classes, in order, [-1, OAR_THRESHOLD) split evenly between them."""
    if entry >= OAR_THRESHOLD or n_classes < 2:
        return query_goal
    others = [c for c in range(n_classes) if c != query_goal]
    share = (float(entry) + 1.0) / (OAR_THRESHOLD + 1.0)  # [-1, threshold) → [0, 1)
    return others[min(int(max(share, 0.0) * len(others)), len(others) - 1)]


class BestResponse(Strategy):
    """Every member responds to the deployed model each round (performative prediction,
    strategic classification): the change δ of their report maximises

        u(δ) = m(x + δ) − ‖w ⊙ δ‖²_p / (2ε)

    over the population's action set without its budget (box and feature types), with m
    the model's log-odds of the favourable class, w and p the action set's cost weights
    and norm and ε the population's ``epsilon`` (the response's strength). The model's
    log-odds must be linear in x, m(x) = g·x + b; `best_response_delta` computes δ.

    `act` returns δ from the base the environment passes: the person's own features
    (``memory: false``) or last round's report (``memory: true``).
    """

    name = "best_response"
    stage = "respond"

    def __init__(self, population: str, spec, action_set: ActionSet):
        super().__init__(population, spec, action_set)
        a = action_set
        unpriced = a.actionable & (a.weights_ == 0)
        if unpriced.any():
            j = int(np.argmax(unpriced))
            raise ConfigError(
                f"populations.{population}: best_response needs a positive cost weight for "
                f"every feature it may change; {a.feature_names[j]!r} has weight 0 "
                "(its response would be unbounded)"
            )

    def act(self, learner: Learner, X: np.ndarray, members: np.ndarray, goal: int) -> np.ndarray:
        """The responses δ (n, d) of the rows X (the bases); zero for non-members."""
        delta = np.zeros_like(X)
        if not members.any() or self.spec.epsilon == 0:
            return delta
        rows = np.flatnonzero(members)
        g = learner.goal_margin_coef(learner.state_, np.full(1, goal))
        if g is None:
            raise ConfigError(
                f"populations.{self.population}: best_response needs a model whose log-odds "
                f"are linear in the features (binary logistic regression), not {learner!r}"
            )
        delta[rows] = best_response_delta(self.action_set, X[rows], g[0], float(self.spec.epsilon))
        return delta


REGISTRY: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (Truthful, Individual, CollectiveOAR, Controlled, GenreRecourse, BestResponse)
}
"""Strategy classes by name (the collectives of `recourse_sim.agents.blackbox` and
`recourse_sim.agents.signal` add themselves with `register`)."""


def register(cls: type[Strategy]) -> type[Strategy]:
    """Add a strategy class to `REGISTRY` under its name (a class decorator)."""
    if cls.name not in STRATEGIES:
        raise ConfigError(f"strategy {cls.name!r} is not in the scenario schema's STRATEGIES")
    REGISTRY[cls.name] = cls
    return cls


def make_strategy(population: str, spec, action_set: ActionSet) -> Strategy:
    """The strategy object of one scenario population."""
    cls = REGISTRY.get(spec.strategy)
    if cls is None:
        raise ConfigError(
            f"populations.{population}.strategy: unknown strategy {spec.strategy!r} "
            f"(valid: {', '.join(REGISTRY)})"
        )
    return cls(population, spec, action_set)
