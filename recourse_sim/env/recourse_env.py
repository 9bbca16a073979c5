"""The recourse environment: one step is one round of online retraining."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from recourse_sim.agents.social import recruit
from recourse_sim.agents.strategies import (
    IndividualResult,
    Strategy,
    adapt,
    aim_unreachable,
    make_strategy,
    seeker_margins,
)
from recourse_sim.env import guards
from recourse_sim.env.anticipation import performative_learner, strategic_learner
from recourse_sim.env.metrics import (
    CollectiveChanges,
    RoundRecord,
    least_cost_to_favour,
    people_columns,
    round_metrics,
    tie_key,
)
from recourse_sim.env.pool import Pool, pool_rules
from recourse_sim.env.rendering import Window, draw_frame, has_display, render_modes
from recourse_sim.env.shift import SHIFT_STREAM, ShiftTracker, honour
from recourse_sim.env.streams import (
    DECISION,
    LEARNER,
    TIES,
    WORLD,
    derive_streams,
    keyed_uniforms,
    margin_stream,
    population_stream,
    stream_key,
)
from recourse_sim.env.validity import valid_after_T
from recourse_sim.env.worlds import Cohort, World, build_world, follow_direct_changes
from recourse_sim.errors import CheckpointError, ConfigError
from recourse_sim.learners import LEARNERS, Learner, make_learner
from recourse_sim.learners.defense import Defense
from recourse_sim.learners.performative import PERFORMATIVE_RULES
from recourse_sim.recourse import ActionSet
from recourse_sim.recourse.causal import action_grid, causal_recourse, grid_steps
from recourse_sim.recourse.individual import least_share
from recourse_sim.scenarios import QuerySpec, Scenario, check_classes, load_scenario

# Observation scaling: parameters enter as sign(θ)·log(1 + |θ|) (finite, monotone, and
# readable whether a weight is 0.01 or 500); feature means in SDs of the history.
PARAM_BOUND = 30.0
FEATURE_BOUND = 10.0
STATE_VERSION = 2

_WARNED_PASSIVE: set[str] = set()
"""Scenarios whose ignored action has been warned about (`warn_passive`)."""


class RecourseEnv(gym.Env[np.ndarray, np.ndarray]):
    """Online collective algorithmic recourse: a deployed model retrained round after round
    on what people report, while people seek recourse alone and act collectively.

    ## Description

    A scenario (`recourse_sim.load_scenario`) declares a world of people (the OAR paper's
    school district, FICO lending with persistent applicants, a bundled dataset or any
    CSV file), a deployed learner with an online update rule, a decision rule and
    populations with strategies. The people of a *query group* (school: high-achieving
    N2 students S) want the favourable decision; *collectives* of the people whose
    reports will train the next model perturb those reports on their behalf (Online
    Algorithmic Recourse, Creager & Zemel, Eq. 3). The *controlled* collective's
    perturbation is the agent's action.

    ## Round structure

    One `step` is one round:

    1. **Cohort** — the round's applicants, assembled at the end of the previous round
       (or at reset) from the world's pool of people (`recourse_sim.env.pool`): those
       who stay (rejected people apply again with the reports and true features their
       recourse left them; with ``return_after``, favoured people come back) and the
       newcomers (true features, group, query membership, outcome noise, effort
       quantile). A world without ``people`` draws a fresh cohort; FICO's applicants
       all stay. Each person has a stable id.
    2. **Decision** — the learner decides on the reports people apply with (a
       newcomer's are honest; members of ``best_response`` populations first respond
       to the deployed model, from their own features or, with ``memory: true``, from
       the report they come with: performative prediction). ``capacity`` gives the
       ``places`` (or the share ``capacity``) highest scores a place, ties (scores
       within 1e-9) to the earlier arrival or, with ``ties: random``, by a lottery
       number per person and round. Under ``decision.rule: pare`` the threshold is
       min(decision.threshold, τ̂), τ̂ Ross et al.'s PARE bound recomputed for the
       current model each round on a calibration sample of honest reports (never
       outcomes); a learner with ``recourse_loss_weight`` λ > 0 is fit and updated
       with their recourse loss over the scenario's actionable set.
    3. **Individual recourse** — rejected members of ``individual`` and ``genre``
       populations move their own reports within their action set (PGD, Wachter or
       linear; or the best of a few GenRe samples; ``min_cost`` aims ``margin`` above
       the score the decision needs, a number or each person's own draw), as far as
       their population's behaviour takes them (``move``: a share of the way;
       ``tolerance``: each person's own effort limit; α: whether they act at all);
       changes to *causal* features also change their true features, changes to
       *proxy* features are gaming. With
       ``reapply: same_round`` everyone is decided again on the final reports; with
       ``next_round`` the changes take effect when the person applies next round.
    4. **Outcomes** — true outcomes follow the true features; metrics are recorded.
    5. **Collective recourse** — the training rows (only approved people's if labels
       are selective) are the reports of this round; members of each collective who
       are eligible, reached by its social graph and participating (α) perturb them:
       by OAR against the learner's own update rule (``collective_oar``, optional
       look-ahead horizon) or by the action (``controlled``).
    6. **Update** — the learner applies its online rule to the (perturbed) training
       rows (``frozen``: none); the world's consequences follow (lending: +repay_gain /
       −default_loss to the score of each approved applicant); people given the
       favourable decision leave (or go away for ``return_after`` rounds), those at the
       end of their stay (``max_rounds``) too, and the newcomers arrive: the next
       cohort.

    ## Action Space

    ``Box(-1, 1, shape=(k, m), float32)``: k label classes × m features the controlled
    collective can change, in units of its budget: a participant whose training label is
    c reports ``x + project(ε · action[c] / w)`` with w the features' cost weights, so
    ±1 on one feature spends the whole budget ε on it (see `agents.Controlled`).
    Ignored when the scenario has no ``controlled`` population (the space is then k ×
    the scenario's actionable features), where ``step(None)`` is accepted too.

    With the population's ``action: oar`` (the ``-v2`` IDs): ``Box(-1, 1, shape=(4,),
    float32)``, OAR's own settings for the round, centred on OAR — ``act`` (≥ -1/2:
    the collective acts), ``alpha`` (participation: the population's · min(1, 1 + a)),
    ``budget`` (ε: the population's · min(1, 1 + a)) and ``goal`` (≥ -1/2: the query's
    own goal class, below: another class); OAR computes each member's perturbation. The
    zero action, as the constant (1, 1, 1, 1), reproduces the ``collective_oar``
    population exactly (see `agents.Controlled`).

    ## Observation Space

    A flat ``Box`` of float32, all finite, with G groups, d features, P parameters:

    | part | size | range |
    |---|---|---|
    | learner parameters θ as sign(θ)·log(1 + \\|θ\\|) (no memory) | P | ±30 |
    | per group: next cohort's acceptance under the current model | G | [0, 1] |
    | per group: last round's acceptance | G | [0, 1] |
    | per group: last round's true-outcome rate | G | [0, 1] |
    | query group, next cohort: acceptance, mean P(goal), share | 3 | [0, 1] |
    | query group: last round's acceptance | 1 | [0, 1] |
    | query group, next cohort: mean features in history SDs | d | ±10 |
    | rounds done / rounds | 1 | [0, 1] |

    ## Rewards

    ``reward = query_success − λ · cost``, where ``query_success`` is the share of this
    round's query group that the *updated* model gives its goal (the decision rule
    applied to their honest reports: next round's success without individual recourse),
    ``cost`` the mean cost of the collectives' perturbations per participant (0 when
    nobody took part) and λ the scenario's ``reward.cost_weight``. Both components are
    in ``info["rewards"]``.

    ## Starting State

    ``reset(seed=…)`` seeds ``self.np_random``; everything random is drawn from named
    streams derived from it (`recourse_sim.env.streams`): ``world`` (the history, every
    person's true features, group and outcome noise, and lending's per-round repayment
    noise), ``learner`` (the learner's seed), ``decision`` (PARE's fresh calibration
    applicants) and one ``population/<name>`` per population (participation, adaptation,
    social graphs, GenRe's seeds); keyed streams give numbers that belong to a person:
    ``margin/<name>`` (a margin drawn per person) and ``ties`` (a capacity rule's
    lottery). Two runs with one seed that differ only in strategies
    or learner settings therefore draw the same world (common random numbers). At reset:
    ``np_random.integers(0, 2**32, size=4)`` derives the streams; the world resets
    (lending: its applicants) and draws its history; the learner stream gives the
    learner's seed; the learner is fit on the history (school: the biased historical
    admissions; lending: past applicants with observed repayment); the world draws the
    first applicants (``people.initial``, or a cohort); a PARE rule calibrates its first
    threshold. When a population's seekers apply again next round (``reapply:
    next_round``), a round 0 comes first, as recourse-game's initial state: the first
    model decides on the first applicants, the favoured leave, rejected members of those
    populations make their moves and round 1's newcomers arrive; it is not recorded, the
    model is not updated, and round 1 judges the first moves.

    ## Episode End

    Truncated after ``scenario.rounds`` rounds; terminated early only when the pool is
    empty and nobody will arrive (``people.newcomers: 0``).

    ## Info

    ``info["metrics"]``: tidy rows of the round, one per group, ``query`` and ``all``
    (see `recourse_sim.env.metrics`); ``info["rewards"]``: the reward's components;
    ``info["collectives"]``: per collective population, its ``participants``, their mean
    ``cost`` and the ``query_success`` of the query group it acts for; ``info["round"]``:
    rounds done. ``people()`` gives the round's applicants as the rows of ``people.csv``
    (person ids, decisions, recourse, true outcomes, scores; optionally features).

    ## Arguments

    ```python
    import gymnasium as gym
    import recourse_sim  # registers the environments

    env = gym.make("recourse_sim/SchoolAssignment-v1")  # the action drives the collective
    env = gym.make("recourse_sim/Recourse-v0", scenario="oar_iris", rounds=10)
    env = RecourseEnv("lending_fico", world__n_applicants=500)
    ```

    * ``scenario``: a `Scenario`, a bundled scenario name or a path to a YAML file
      (default ``school_assignment``).
    * ``**overrides``: scenario fields to change, as keyword arguments with ``__`` for
      the dots of a dotted key (``learner__update_rule="refit"``).
    * ``render_mode``: ``None``, ``"ansi"`` (a text summary of the last round),
      ``"rgb_array"`` (an RGB frame of the dynamics so far, drawn off-screen: what
      video recorders and SB3's ``make_vec_env`` ask for) or ``"human"`` (the same frame
      in a window, updated every step; needs a display).
    * ``warn_passive``: warn (when the first environment of the scenario is made in a
      process) if the scenario has no controlled population, so that the action is
      ignored; the registered ``-v0`` IDs set it.

    Checkpoints: ``get_state()`` returns the full state as numpy arrays, numbers and
    strings (no pickled objects); ``set_state(state)`` restores it so that continuing
    gives exactly the same rounds as an uninterrupted run.

    ## Version History

    * spec revision (every ID): each spec has ``max_episode_steps`` (its
      scenario's rounds; ``Recourse-v0``: ``school_assignment``'s), so ``gym.make`` adds
      a ``TimeLimit``; ``render_mode="human"`` without a display is a `ConfigError`
      naming ``rgb_array``.
    * v2: ``SchoolAssignment-v2`` and ``Lending-v2``: the v1 scenarios with OAR's own
      settings as the action (``action: oar``), so that a policy's action space contains
      collective OAR. The v1 IDs are kept with their shift action. Later revision
      (same IDs): the action is centred on OAR — the zero action is OAR's own settings
      (α, ε: the file's · min(1, 1 + a); act and goal switch at -1/2, the goal entry
      now choosing between the query's own goal and the other classes) — so a policy
      initialised near zero starts at OAR; (1, 1, 1, 1) is still OAR.
    * v2, v1 and v0, later revision (same IDs): ``auc`` counts the decision rule's ties
      as ties; ``school_assignment`` (``SchoolAssignment-v0``) has seekers who aim a
      margin drawn per person above the cut-off and lottery ties (before: everyone at
      the cut-off, ties to the earlier arrival); ``SchoolAssignment-v1`` and ``-v2``
      are unchanged.
    * v1, later revision (same IDs): draws come from named streams (common random
      numbers; a seed's rollouts differ from the first v1's), people persist in a pool,
      ``model_accuracy`` is measured under the decision rule, checkpoint state version 2.
    * v1: ``SchoolAssignment-v1`` and ``Lending-v1`` are the controlled scenarios
      (``school_assignment_controlled``, ``lending_fico_controlled``): the action drives
      their collective. ``import recourse_sim`` registers every ID.
    * v0: initial version. ``SchoolAssignment-v0`` and ``Lending-v0`` are the passive
      scenarios, whose action is ignored; they now warn so when made, as does
      ``Recourse-v0`` with a scenario that has no controlled population.
    """

    # The class lists "human" so that `gym.make(..., render_mode="human")` passes it to
    # __init__, which refuses it without a display naming rgb_array (unlisted, Gymnasium
    # would wrap the env in its pygame HumanRendering instead). An instance lists it only
    # where a window can open: checkers try every mode an instance lists.
    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["ansi", "rgb_array", "human"],
        "render_fps": 4,
    }
    # the action drives one controlled population (the multi-agent env lifts this)
    _single_controlled: ClassVar[bool] = True

    def __init__(
        self,
        scenario: Scenario | str | Path | None = None,
        render_mode: str | None = None,
        warn_passive: bool = False,
        **overrides: Any,
    ):
        if render_mode == "human" and not has_display():
            raise ConfigError(
                "render_mode='human' needs a display (none found: DISPLAY is not set); "
                "use render_mode='rgb_array' for frames without one"
            )
        self.metadata = {**type(self).metadata, "render_modes": render_modes()}
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(
                f"render_mode={render_mode!r} is not one of {self.metadata['render_modes']}"
            )
        self.render_mode = render_mode
        self._window: Window | None = None
        dotted = {k.replace("__", "."): v for k, v in overrides.items()}
        if scenario is None:
            scenario = "school_assignment"
        if isinstance(scenario, Scenario):
            if dotted:
                source = scenario.source
                scenario = load_scenario(scenario.model_dump(mode="python"), dotted)
                scenario._source = source
        else:
            scenario = load_scenario(scenario, dotted or None)
        self.scenario: Scenario = scenario
        self.world: World = build_world(scenario.world, scenario.source)
        names = self.world.features.names
        self.n_features = len(names)
        self.n_classes = self.world.n_classes
        self.favourable = self.world.favourable
        self.group_labels = self.world.group_labels
        self._row_labels, self._query_group_row = _metric_row_labels(
            self.group_labels, scenario.query
        )

        # a CSV's labels may be named by their values in the file
        values = self.world.data.class_values if scenario.world.kind == "csv" else ()
        check_classes(scenario, self.n_classes, values)
        self.action_set, self.causal = _base_action_set(scenario, self.world)
        self.strategies: list[Strategy] = []
        for pname, pop in scenario.populations.items():
            # a best response is bounded only where the scenario says so, not by the
            # world's own ranges (a tabular world's data min and max)
            base = self.action_set
            if pop.strategy == "best_response":
                base = _scenario_bounds(base, scenario.features)
            aset = _population_action_set(base, pop, names, f"populations.{pname}")
            self.strategies.append(make_strategy(pname, pop, aset))
            _warn_if_powerless(scenario, pname, pop, aset)
        controlled = [s for s in self.strategies if s.name == "controlled"]
        if len(controlled) > 1 and self._single_controlled:
            raise ConfigError(
                f"{scenario.source}: populations: at most one controlled population per "
                f"RecourseEnv, got {[s.population for s in controlled]} (several collectives, "
                "each its own agent: recourse_sim.env.multi.RecourseParallelEnv)"
            )
        self._controlled = controlled[0] if controlled else None
        self._pool_rules = pool_rules(self.world)
        # T of recourse_valid_after_T (None: no validity columns; causal worlds: always)
        self._horizon = getattr(scenario.world, "validity_horizon", None)
        # the shifts recourse causes (world.shift_metrics) and honoured recourse labels
        shift = scenario.world.shift_metrics
        self._shift = ShiftTracker(shift, self.favourable) if shift is not None else None
        self._honour = scenario.world.honour_recourse
        self._honoured = np.zeros(0, np.int64)  # ids of people whose recourse is honoured
        self._grids: dict[str, np.ndarray] = {}  # causal recourse's action grid per population
        # people who re-apply next round start in motion: a round 0 (see Starting State)
        self._round_zero = any(
            s.stage == "decision" and s.spec.reapply == "next_round" for s in self.strategies
        )
        # keyed streams (`recourse_sim.env.streams`): per-person margins, tie lotteries
        self._lottery = scenario.decision.rule == "capacity" and scenario.decision.ties == "random"
        self._keyed_names = (
            *(
                margin_stream(s.population)
                for s in self.strategies
                if not isinstance(getattr(s.spec, "margin", 0.0), int | float)
            ),
            *((TIES,) if self._lottery else ()),
            *((SHIFT_STREAM,) if self._shift is not None else ()),
        )
        self._stream_names = (
            WORLD,
            LEARNER,
            DECISION,
            *(population_stream(s.population) for s in self.strategies),
            *self._keyed_names,
        )
        self._streams: dict[str, np.random.Generator] = {}
        self._keys: dict[str, int] = {}
        if warn_passive and not controlled and scenario.name not in _WARNED_PASSIVE:
            # once per scenario and process: Gymnasium's checkers make the env again
            _WARNED_PASSIVE.add(scenario.name)
            warnings.warn(
                f"scenario {scenario.name!r} has no controlled population: the action is "
                "ignored (for an action that drives a collective use "
                "recourse_sim/SchoolAssignment-v1, recourse_sim/Lending-v1 or a scenario "
                "with a population of strategy 'controlled')",
                stacklevel=2,
            )
        self._pare_action_set = self.action_set.replace(
            epsilon=self._recourse_budget(scenario.decision.pare.budget)
        )
        self._pare: dict[str, float] = {}
        if self._controlled is not None:
            shape = self._controlled.action_shape(self.n_classes)
        else:
            shape = (self.n_classes, max(int(self.action_set.actionable.sum()), 1))
        self.action_space = spaces.Box(-1.0, 1.0, shape=shape, dtype=np.float32)

        self.learner: Learner = self._new_learner(random_state=0)
        self._defense = Defense(scenario.learner.defense, self.n_features)
        n_params = self._param_count()
        G, d = len(self.group_labels), self.n_features
        low = np.concatenate(
            [
                np.full(n_params, -PARAM_BOUND),
                np.zeros(3 * G + 4),
                np.full(d, -FEATURE_BOUND),
                [0.0],
            ]
        )
        high = np.concatenate(
            [np.full(n_params, PARAM_BOUND), np.ones(3 * G + 4), np.full(d, FEATURE_BOUND), [1.0]]
        )
        self.observation_space = spaces.Box(
            low.astype(np.float32), high.astype(np.float32), dtype=np.float32
        )
        self._round = 0
        self._cohort: Cohort | None = None
        self._last_metrics: list[dict] = []
        self._history: list[list[dict]] = []  # every round's metrics (rgb_array frames)
        self._kept_decisions: tuple[tuple, np.ndarray, np.ndarray] | None = None

    # -- construction helpers ------------------------------------------------------------
    def _stream_of(self, strategy: Strategy) -> np.random.Generator:
        """The random stream of a population's strategy (`recourse_sim.env.streams`)."""
        return self._streams[population_stream(strategy.population)]

    def _new_learner(self, random_state: int) -> Learner:
        spec = self.scenario.learner
        accepted = LEARNERS[spec.type]._get_param_names()
        try:
            params = spec.learner_params(accepted)
        except ValueError as exc:
            raise ConfigError(f"{self.scenario.source}: learner.standardize: {exc}") from None
        if "n_classes" in accepted:
            params.setdefault("n_classes", self.n_classes)
        if "random_state" in accepted:
            params.setdefault("random_state", random_state)
        if spec.recourse_loss_weight > 0:
            # Ross et al.'s recourse loss: δ* over the scenario's actionable set, in the
            # units of X (the learner standardises internally), towards the query's goal
            params.update(
                recourse_loss_weight=spec.recourse_loss_weight,
                action_set=self.action_set.replace(epsilon=self._recourse_budget()),
                recourse_goal=self.scenario.query.goal,
            )
        if spec.strategic != "none":  # trained against the responding population
            return strategic_learner(self.scenario, self.strategies, self.favourable, params)
        if spec.update_rule in PERFORMATIVE_RULES:  # descends the performative risk
            return performative_learner(self.scenario, params, random_state)
        update_rule, window = spec.update_rule, spec.window
        if update_rule == "refit" and self.world.fixed_population:
            # the file's rows are people, each reporting every round: every row seen is
            # each person's latest report, so a refit trains on the last round (RRM)
            update_rule, window = "window", 1
        try:
            return make_learner(spec.type, update_rule=update_rule, window=window, **params)
        except ConfigError as exc:
            raise ConfigError(f"{self.scenario.source}: learner: {exc}") from None

    def _recourse_budget(self, given: float | None = None) -> float:
        """Budget of the bank's recourse δ* (cost units): `given`, else
        ``learner.recourse_budget``, else the largest budget of the populations that seek
        recourse for themselves (those acting at the decision), else 1."""
        if given is not None:
            return float(given)
        if self.scenario.learner.recourse_budget is not None:
            return float(self.scenario.learner.recourse_budget)
        budgets = [s.spec.epsilon for s in self.strategies if s.stage == "decision"]
        return float(max(budgets)) if budgets else 1.0

    def _pare_threshold(self, cohort: Cohort) -> dict[str, float]:
        """This round's PARE threshold (``decision.rule: pare``) for the current model.

        Calibrates on honest reports only (features, never outcomes): a fresh draw of
        applicants from the world (from the ``decision`` stream, so the world's own draws
        are the same whatever the rule), or the cohort about to be decided. Returns the
        deployed ``decision_threshold`` = min(decision.threshold, τ̂) and ``pare_upper``
        = τ̂, the largest threshold the calibration certifies.
        """
        from recourse_sim.recourse.ross import pare_threshold

        rule = self.scenario.decision
        spec = rule.pare
        if spec.calibration == "fresh":
            X_cal = self.world.newcomers(self.world.cohort_size, self._streams[DECISION]).X
        else:
            X_cal = cohort.report
        with warnings.catch_warnings():
            # too few rows is a load-time error (scenarios.pare_min_calibration); nothing
            # else warns
            warnings.simplefilter("ignore")
            pare = pare_threshold(
                self.learner,
                X_cal,
                self._pare_action_set,
                epsilon=spec.epsilon,
                alpha=spec.alpha,
                goal=self.favourable,
            )
        return {
            "decision_threshold": float(min(rule.threshold, pare.upper)),
            "pare_upper": float(pare.upper),
        }

    def _has_recourse_rate(self, X: np.ndarray) -> float:
        """Share of honest reports X that have recourse at the deployed threshold: the
        model favours x or x + δ* (linear, the bank's action set and budget) (PARE only)."""
        from recourse_sim.recourse.ross import recourse_scores

        s = recourse_scores(self.learner, X, self._pare_action_set, goal=self.favourable)
        return float((s >= self._pare["decision_threshold"]).mean()) if len(s) else 0.0

    def _param_count(self) -> int:
        """Length of the learner's parameter vector, from a fit on a tiny fixed dataset
        (the count depends only on the learner, d and k)."""
        k, d = self.n_classes, self.n_features
        y = np.tile(np.arange(k), 2)
        X = np.outer(y, np.ones(d)) + np.repeat([0.0, 0.5], k)[:, None]
        probe = self._new_learner(random_state=0)
        with warnings.catch_warnings():
            # only the shapes of the probe's parameters matter, not how well it fit
            warnings.simplefilter("ignore")
            try:
                probe.fit(X, y)
            except ConfigError as exc:
                raise ConfigError(f"{self.scenario.source}: learner: {exc}") from None
        return len(probe.param_vector())

    # -- gymnasium API ---------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        guards.check_reset(self, seed, options)
        X_hist, y_hist = self._reset_until_fit(seed)
        try:
            self.learner.fit(X_hist, y_hist)
        except ConfigError as exc:
            raise ConfigError(f"{self.scenario.source}: fitting the first model: {exc}") from None
        self._reset_after_fit()
        return self._observation(), {"round": 0, "scenario": self.scenario.name}

    # `reset` in two halves around the first model's fit, so that a batched env can fit
    # the first models of many worlds at once (`recourse_sim.env.batched`)
    def _reset_until_fit(self, seed: int | None) -> tuple[np.ndarray, np.ndarray]:
        """`reset` up to the first fit: the streams, the world, its history and a new
        (unfitted) learner. Returns the history (X, y) the learner is to be fitted on."""
        super().reset(seed=seed)
        self._streams = derive_streams(self.np_random, self._stream_names)
        self._keys = {name: stream_key(self._streams[name]) for name in self._keyed_names}
        world_rng = self._streams[WORLD]
        self.world.reset(world_rng)
        X_hist, y_hist = self.world.history(world_rng)
        if self._shift is not None:
            self._shift.remember_history(X_hist, y_hist)
        self._feature_mean = X_hist.mean(0)
        scale = X_hist.std(0)
        self._feature_scale = np.where(scale > 0, scale, 1.0)
        self._learner_seed = int(self._streams[LEARNER].integers(2**63 - 1))
        self.learner = self._new_learner(random_state=self._learner_seed)
        return X_hist, y_hist

    def _reset_after_fit(self) -> None:
        """`reset` from the fitted first model on: the first cohort (the observation of
        it is `reset`'s, or the batched env's for many worlds at once)."""
        world_rng = self._streams[WORLD]
        self._theta0 = self.learner.param_vector()
        self._honoured = np.zeros(0, np.int64)
        if self._shift is not None:
            self._shift.start(self.learner, self._keys[SHIFT_STREAM])
        self._defense = Defense(self.scenario.learner.defense, self.n_features)
        self._round = 0
        self._pool = Pool(self._pool_rules)
        self._cohort = self._pool.start(self.world, world_rng, 0 if self._round_zero else 1)
        self._holders = _no_holders(self.n_features)
        self._past_holders: list[dict[str, np.ndarray]] = []  # last T rounds' holders
        self._last_record = None
        if self._round_zero:
            self._play_round_zero()
        if self.scenario.decision.rule == "pare":
            self._pare = self._pare_threshold(self._cohort)
        G = len(self.group_labels)
        self._last = {
            "acceptance": np.zeros(G),
            "true_outcome": np.zeros(G),
            "query_acceptance": np.zeros(1),
        }
        self._last_metrics = []
        self._history = []

    def step(
        self, action: np.ndarray | None
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """One round. `action` drives the controlled population; a scenario without one
        ignores it and also takes ``None``."""
        guards.check_step(self)
        if self._cohort is None or self._round >= self.scenario.rounds or self._pool.empty:
            raise ResetNeeded("call reset() before step() (and after the episode ends)")
        if action is None and self._controlled is None:
            return self._play_round({}, None)
        return self._play_round({}, checked_action(action, self.action_space.shape))

    def _play_round(
        self, actions: dict[str, np.ndarray], default: np.ndarray | None
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Steps 2-6 of a round; collective `p` acts on ``actions.get(p, default)``."""
        learner, c = self.learner, self._cohort
        assert c is not None
        fav_class = self.favourable

        # best responses to the deployed model: the reports people apply with
        c = self._respond(c)

        # 2. decision on the reports people apply with (the last observation's)
        honest_proba, favourable_before = self._honest_decisions(c)
        cut = self._capacity_cut(honest_proba, favourable_before)
        least_cost = least_cost_to_favour(  # (social_burden: the truly favourable)
            learner,
            c.report,
            self._needed(c.group, cut),
            self.action_set,
            fav_class,
            c.y0 == fav_class,
        )
        last_holders = self._holders
        holder_favoured = self._holders_favoured(c, favourable_before, cut)

        # 3. individual recourse by rejected members of individual populations: moves
        # decided again now (same_round) or carried to next round's application
        moves = self._individual_recourse(c, honest_proba, favourable_before, cut)
        X_rep, X_true, tried, cost = moves.X_rep, moves.X_true, moves.tried, moves.cost
        proba, favourable, holders = moves.proba, moves.favourable, moves.holders

        # the score the final decision needs of each person (`seekers_at_cutoff`)
        final_cut = self._capacity_cut(proba, favourable)
        cutoff = None if final_cut == np.inf else self._needed(c.group, final_cut)

        # 4. outcomes
        y = self.world.outcome(c, X_true, moves.changed)
        true_favourable = y == fav_class
        validity = self._validity(c, last_holders, holder_favoured, tried, y, cut)
        query = self._query_mask(self.scenario.query, c)

        # 5. collective perturbation of the reports that train the next model
        recorded = np.where(c.record >= 0, c.record, y)
        if self._honour:
            recorded, self._honoured = honour(
                self._honoured, c.person, recorded, tried & favourable, fav_class
            )
        X_train, y_train, train_rows = self._training_rows(X_rep, recorded, favourable)
        participants_all = np.zeros(len(X_train), bool)
        X_applied, members = X_train, []  # (for people.csv's collective columns)
        costs = []
        collectives: dict[str, dict[str, Any]] = {}
        rows_group, rows_favourable = c.group[train_rows], favourable[train_rows]
        update_start = None
        for s in self.strategies:
            if s.stage != "training":
                continue
            eligible = s.select(rows_group, y_train, self.group_labels) & ~participants_all
            if s.spec.decisions == "favourable":
                eligible &= rows_favourable
            elif s.spec.decisions == "unfavourable":
                eligible &= ~rows_favourable
            action = actions.get(s.population, default)
            joined = recruit(
                s.spec.graph,
                s.participation_of(action),
                eligible,
                rows_group,
                self.group_labels,
                self._stream_of(s),
            )
            qspec = s.spec.query or self.scenario.query
            qmask = query if qspec is self.scenario.query else self._query_mask(qspec, c)
            delta = s.act(
                learner, X_train, y_train, joined, c.report[qmask], qspec.goal, action=action
            )
            X_train = X_train + delta
            if s.labels_after is not None:  # a collective that reports labels (crowd labelling)
                y_train = s.labels_after
            # the update this collective solved is of exactly these rows, unless a later
            # one changes them
            update_start = s.state_after
            participants_all |= joined
            own_cost = np.asarray(s.action_set.cost(delta[joined])) if joined.any() else None
            if own_cost is not None:
                costs.append(own_cost)
            members.append((s.population, joined, own_cost))
            collectives[s.population] = {
                "participants": int(joined.sum()),
                "cost": float(own_cost.mean()) if own_cost is not None else 0.0,
                "query": (qmask, qspec.goal),
            }
        all_costs = np.concatenate(costs) if costs else np.zeros(0)
        collective_cost = float(all_costs.mean()) if all_costs.size else 0.0

        # 6. update, what people carry on with, the next round's applicants
        model_shift = float(np.linalg.norm(learner.param_vector() - self._theta0))
        pare_now = dict(self._pare)
        if pare_now:
            pare_now["has_recourse_rate"] = self._has_recourse_rate(c.report)
        theta_before = learner.param_vector()
        loss_before = _log_loss(learner, X_train, y_train)
        if len(X_train) and self._defense.active:
            self._defense.update(learner, X_train, y_train, start=update_start)
        elif len(X_train):
            learner.update(X_train, y_train, start=update_start)
        model_stats = {
            "theta_step": float(np.linalg.norm(learner.param_vector() - theta_before)),
            # the deployed model's loss on the distribution it induced: this round's
            # people, as they reported, with their true outcomes
            "performative_risk": _log_loss_of(proba, y),
            "loss_before_refit": loss_before,
            "loss_after_refit": _log_loss(learner, X_train, y_train),
        }
        if self._shift is not None:
            model_stats.update(self._shift.round_stats(learner, X_train, y_train, self._round + 1))
        for s in self.strategies:
            s.observe(learner, X_train, y_train)
        after, failed = self._carry_on(c, moves, y, favourable)
        self._holders = {
            "person": c.person[holders],
            "report": after.report[holders],
            "group": c.group[holders],
            "query": query[holders],
        }
        if self._horizon is not None:
            self._past_holders = [*self._past_holders, self._holders][-self._horizon :]
        # The next applicants come before the query's success is measured so that a PARE
        # threshold can be recalibrated for the updated model first (the success is the
        # next round's, at the next round's threshold); nothing in between draws randomness.
        next_cohort, departures = self._pool.advance(
            self.world, self._streams[WORLD], self._round + 1, after, favourable
        )
        if pare_now:
            self._pare = self._pare_threshold(next_cohort)
        query_success = self._query_success(c, query)
        for stats in collectives.values():
            stats["query_success"] = self._query_success(c, *stats.pop("query"))
        lam = self.scenario.reward.cost_weight
        reward = query_success - lam * collective_cost

        record = RoundRecord(
            round=self._round + 1,
            group=c.group,
            query=query,
            favourable_before=favourable_before,
            favourable=favourable,
            tried=tried,
            cost=cost,
            true_favourable=true_favourable,
            score=proba[:, fav_class],
            class_correct=proba.argmax(1) == y if self.n_classes > 2 else None,
            model_shift=model_shift,
            collective_participants=int(participants_all.sum()),
            collective_mean_cost=collective_cost,
            query_success_next=query_success,
            reward=reward,
            group_stats=self.world.group_stats(self._pool.people),
            decision_stats=pare_now,
            model_stats=model_stats,
            person=c.person,
            arrived=c.arrived,
            waited=self._round + 1 - c.since,
            failed=failed,
            leaving=departures.leaving,
            pool_group=departures.pool.group,
            pool_query=self._query_mask(self.scenario.query, departures.pool),
            holder_group=last_holders["group"],
            holder_query=last_holders["query"],
            holder_favoured=holder_favoured,
            X=c.X,
            report=X_rep,
            cutoff=cutoff,
            aim_unreachable=moves.aim_unreachable,
            favourable_at_start=c.y0 == fav_class,
            least_cost=least_cost,
            **validity,
            collective=CollectiveChanges(train_rows, X_applied, X_train, tuple(members))
            if members
            else None,
        )
        metrics = round_metrics(record, self._row_labels)
        G = len(self.group_labels)
        self._last = {
            "acceptance": np.array([m["acceptance_rate"] for m in metrics[:G]]),
            "true_outcome": np.array([m["true_outcome_rate"] for m in metrics[:G]]),
            "query_acceptance": np.array([metrics[G]["acceptance_rate"]]),
        }
        if self._query_group_row is not None:  # the same people as the query row: once
            del metrics[self._query_group_row]
        self._last_metrics = metrics
        if self.render_mode in ("rgb_array", "human"):
            self._history.append(metrics)
        self._last_record = record
        self._round += 1
        self._cohort = next_cohort
        terminated = self._pool.empty
        truncated = self._round >= self.scenario.rounds
        info = {
            "round": self._round,
            "metrics": metrics,
            "rewards": {
                "query_success": query_success,
                "cost": collective_cost,
                "cost_weight": lam,
            },
            "collectives": collectives,
        }
        if self.render_mode == "human":
            self.render()
        return self._observation(), float(reward), terminated, truncated, info

    def render(self) -> str | np.ndarray | None:
        if self.render_mode in ("rgb_array", "human"):
            frame = draw_frame(self.scenario.name, self._history, self.scenario.rounds)
            if self.render_mode == "rgb_array":
                return frame
            if self._window is None:
                self._window = Window(self.scenario.name)
            self._window.show(frame)
            return None
        if self.render_mode != "ansi":
            return None
        if not self._last_metrics:
            return f"{self.scenario.name}: round {self._round} (no round played yet)\n"
        lines = [f"{self.scenario.name}: round {self._round}/{self.scenario.rounds}"]
        for m in self._last_metrics:
            lines.append(
                f"  {m['group']:>10}: accepted {m['acceptance_rate']:.3f}  "
                f"true outcome {m['true_outcome_rate']:.3f}  seekers {m['n_seekers']}"
            )
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        guards.mark_closed(self)
        if self._window is not None:
            self._window.close()
            self._window = None

    # -- one round's pieces ----------------------------------------------------------------
    def _decide(
        self, proba: np.ndarray, group: np.ndarray, person: np.ndarray | None = None
    ) -> np.ndarray:
        """Favourable decisions (bool) from class probabilities under the decision rule
        (`person`: the rows' ids, for a capacity rule's tie lottery)."""
        rule = self.scenario.decision
        p = proba[:, self.favourable]
        if rule.rule == "argmax":
            return proba.argmax(1) == self.favourable
        if rule.rule == "capacity":
            # the `places` most probable, ties in row order (applicants are in order of
            # arrival: the earlier first): the first `places` of a stable sort of −p,
            # found by a partition (linear time) instead of the sort. Scores within
            # TIE_RESOLUTION are ties: people who moved to the same cut-off land there up
            # to rounding, and rounding should not decide who gets a place. With
            # ``ties: random`` the tied are taken in the order of this round's lottery
            priority = None
            if self._lottery:
                assert person is not None
                priority = self._keyed(TIES, person, np.full(len(person), self._round + 1))
            return capacity_decisions(p, self.places(len(p)), priority)
        return p >= self._thresholds(group)

    def _keyed(self, name: str, *counters: np.ndarray) -> np.ndarray:
        """Uniforms of the keyed stream `name` for these counters (person ids, rounds)."""
        return keyed_uniforms(self._keys[name], *counters)

    def _margins(self, strategy: Strategy, person: np.ndarray) -> float | np.ndarray:
        """A seeking population's margins: its number, or per person (ids `person`) the
        spread's value at the person's quantile of the stream ``margin/<population>``."""
        spec = getattr(strategy.spec, "margin", 0.0)
        if isinstance(spec, int | float):
            return float(spec)
        return seeker_margins(spec, self._keyed(margin_stream(strategy.population), person))

    def places(self, n: int) -> int:
        """Places the capacity rule gives among `n` applicants (``places``, or the share
        ``capacity`` of them, rounded), at most n."""
        rule = self.scenario.decision
        places = round(rule.capacity * n) if rule.places is None else rule.places
        return min(places, n)

    def _thresholds(self, group: np.ndarray) -> np.ndarray:
        """Per person, the P(favourable) a threshold rule needs (``threshold`` with its
        per-group values, or PARE's)."""
        rule = self.scenario.decision
        if rule.rule == "pare":
            return np.full(len(group), self._pare["decision_threshold"])
        threshold = np.full(len(group), rule.threshold)
        for g, label in enumerate(self.group_labels):
            if label in rule.group_thresholds:
                threshold[group == g] = rule.group_thresholds[label]
        return threshold

    def _needed(self, group: np.ndarray, cut: float | None) -> np.ndarray | None:
        """Per person, the P(favourable) this round's decision needs, which min-cost
        recourse aims at: the threshold, or under ``capacity`` the round's cut-off score;
        None under ``argmax``."""
        if cut is not None:
            return np.full(len(group), cut)
        if self.scenario.decision.rule == "argmax":
            return None
        return self._thresholds(group)

    def _query_mask(self, spec: QuerySpec, c: Cohort) -> np.ndarray:
        mask = c.query.copy() if spec.world else np.ones(len(c.group), bool)
        if spec.groups is not None:
            mask &= np.isin(c.group, [self.group_labels.index(g) for g in spec.groups])
        if spec.classes is not None:
            mask &= np.isin(c.y0, spec.classes)
        return mask

    def _capacity_cut(self, proba: np.ndarray, favourable: np.ndarray) -> float | None:
        """Capacity rule: the lowest P(favourable) among those given a place (the
        round's cut-off score; +inf when nobody got one); None under the other rules."""
        if self.scenario.decision.rule != "capacity":
            return None
        p = proba[favourable, self.favourable]
        return float(p.min()) if len(p) else np.inf

    def _favoured(self, people: dict[str, np.ndarray], cut: float | None) -> np.ndarray:
        """Whether the decision rule of this round favours each of `people` (their
        ``report`` and ``group``), one by one: thresholds as they are, capacity at the
        round's cut-off score `cut`."""
        if not len(people["group"]):
            return np.zeros(0, bool)
        proba = self.learner.predict_proba(people["report"])
        if cut is not None:
            return tie_key(proba[:, self.favourable]) >= tie_key(np.array(cut))
        return self._decide(proba, people["group"])

    def _respond(self, c: Cohort) -> Cohort:
        """The cohort applying with the best responses of the ``respond``-stage
        populations' members (eligible by group and true outcome, each with probability
        α) to the deployed model, from their own features (``memory: false``) or the
        reports they come with (``memory: true``); `c` itself when there are none."""
        responders = [s for s in self.strategies if s.stage == "respond"]
        if not responders:
            return c
        report = c.report.copy()
        done = np.zeros(len(c.group), bool)
        for s in responders:
            eligible = s.select(c.group, c.y0, self.group_labels) & ~done
            members = s.participants(eligible, self._stream_of(s))
            base = c.report if s.spec.memory else c.X
            delta = s.act(self.learner, base, members, self.favourable)
            report[members] = base[members] + delta[members]
            done |= members
        return dataclasses.replace(c, report=report)

    def _play_round_zero(self) -> None:
        """Round 0, before round 1 of a world whose seekers apply again next round (as
        recourse-game's initial state): the first model decides on the initial
        applicants; those favoured leave (or go away); rejected members of the
        ``next_round`` populations make their moves; round 1's newcomers arrive. Nothing
        is recorded, nothing trains the model and the world has no consequences, so
        round 1 is the first in which recourse is judged."""
        c = self._cohort
        assert c is not None
        proba, favourable = self._honest_decisions(c)
        cut = self._capacity_cut(proba, favourable)
        moves = self._individual_recourse(c, proba, favourable, cut, next_round_only=True)
        after, _ = self._carry_on(c, moves, c.y0, favourable, consequences=False)
        self._holders = {
            "person": c.person[moves.holders],
            "report": after.report[moves.holders],
            "group": c.group[moves.holders],
            "query": self._query_mask(self.scenario.query, c)[moves.holders],
        }
        self._cohort, _ = self._pool.advance(self.world, self._streams[WORLD], 0, after, favourable)

    def _individual_recourse(
        self,
        c: Cohort,
        honest_proba: np.ndarray,
        favourable_before: np.ndarray,
        cut: float | None,
        next_round_only: bool = False,
    ) -> _Moves:
        """Step 3: rejected members of the decision-stage populations seek recourse from
        the reports they applied with and move as their population's behaviour takes
        them (`recourse_sim.agents.strategies.adapt`); ``same_round`` moves are decided
        again now, ``next_round`` ones wait for the next application. `next_round_only`:
        only next-round populations act (round 0)."""
        learner, n = self.learner, len(c.group)
        X_rep, X_true = c.report.copy(), c.X.copy()
        tried, cost = c.moved.copy(), c.move_cost.copy()
        acted, unreachable = np.zeros(n, bool), np.zeros(n, bool)
        later = np.zeros_like(X_rep)
        moved, move_cost = np.zeros(n, bool), np.zeros(n)
        for s in self.strategies:
            if s.stage != "decision" or (next_round_only and s.spec.reapply != "next_round"):
                continue
            seekers = ~favourable_before & ~acted & s.select(c.group, c.y0, self.group_labels)
            if getattr(s.spec, "recourse", None) is not None:
                found = self._causal_recourse(s, c, X_true, seekers, cut)
            else:
                target, margin = self._needed(c.group, cut), self._margins(s, c.person)
                found = s.act(
                    learner,
                    X_rep,
                    seekers,
                    self.favourable,
                    self._stream_of(s),
                    target=target,
                    margin=margin,
                )
                unreachable |= found.tried & aim_unreachable(s.spec, target, margin)
            if cut is not None and found.tried.any():
                # rejected at the cut-off by a tie: nothing to move, so nobody tries
                rows = np.flatnonzero(found.tried)
                there = self._favoured({"report": X_rep[rows], "group": c.group[rows]}, cut)
                idle = np.zeros(n, bool)
                idle[rows[there]] = True
                if idle.any():
                    found = IndividualResult(
                        np.where(idle[:, None], 0.0, found.delta),
                        found.tried & ~idle,
                        np.where(idle, 0.0, found.cost),
                    )
            enough = None
            if s.spec.just_enough and found.tried.any():
                enough = self._just_enough(X_rep, found.delta, found.tried, c.group, cut)
            res = adapt(s.spec, found, c.v, enough, s.action_set, X_rep)
            acted |= res.tried
            if s.spec.reapply == "next_round":
                later += res.delta
                moved |= res.tried
                move_cost = np.where(res.tried, res.cost, move_cost)
            else:
                X_rep += res.delta
                tried |= res.tried
                cost = np.where(res.tried, res.cost, cost)
        if (tried & ~c.moved).any():
            change = X_rep - c.report
            X_true[:, self.causal] += change[:, self.causal]
            X_true, X_rep = follow_direct_changes(self.world, c, c.X, X_true, X_rep)
            changed = (change[:, self.causal] != 0).any(1)
            proba = learner.predict_proba(X_rep)
            favourable = self._decide(proba, c.group, c.person)
        else:  # nobody changed their reports this round
            changed = np.zeros(n, bool)
            proba, favourable = honest_proba, favourable_before
        # whose recourse got (same round) or reached (next round) this round's decision
        holders = (tried & ~c.moved & favourable) | moved
        if moved.any():
            reached = self._favoured(
                {"report": (X_rep + later)[moved], "group": c.group[moved]}, cut
            )
            holders[np.flatnonzero(moved)[~reached]] = False
        return _Moves(
            X_rep, X_true, tried, cost, changed, later, moved, move_cost, proba, favourable,
            holders, unreachable & tried,
        )  # fmt: skip

    def _causal_recourse(
        self, s: Strategy, c: Cohort, X_true: np.ndarray, seekers: np.ndarray, cut: float | None
    ) -> IndividualResult:
        """A causal world's recourse of type ``recourse`` (ce, cr, icr) for the seekers
        (`recourse_sim.recourse.causal`): the change of their true features, which
        their reports follow."""
        world = self.world
        grid = self._grids.get(s.population)
        if grid is None:
            grid = action_grid(grid_steps(world), s.action_set.actionable, s.spec.search_steps)
            self._grids[s.population] = grid

        def favoured(F: np.ndarray, rows: np.ndarray) -> np.ndarray:
            return self._favoured({"report": F, "group": c.group[rows]}, cut)

        res = causal_recourse(
            s.spec.recourse, world, X_true, c.noise, seekers, s.action_set, favoured, grid
        )
        return IndividualResult(res.delta, seekers, res.cost)

    def _validity(
        self,
        c: Cohort,
        holders: dict[str, np.ndarray],
        holder_favoured: np.ndarray,
        tried: np.ndarray,
        y: np.ndarray,
        cut: float | None,
    ) -> dict[str, np.ndarray | None]:
        """The validity of recourse (`RoundRecord`): who of the holders of T rounds ago
        this round's rule favours (any world with ``validity_horizon``); a causal
        world's per person too: whether the recourse that succeeded last round is
        honoured at re-application and whether this round's seekers improved."""
        if self._horizon is None:
            return {}
        if self.scenario.world.kind != "scm":
            return valid_after_T(self, cut)
        n = len(c.person)
        valid = np.full(n, np.nan)
        if len(holders["person"]) and n:
            at = np.minimum(np.searchsorted(c.person, holders["person"]), n - 1)
            present = c.person[at] == holders["person"]
            valid[at[present]] = holder_favoured[present]
        fav = self.favourable
        improved = np.where(tried, (y == fav) & (c.y0 != fav), np.nan)
        return {"valid_at_reapply": valid, "improved": improved, **valid_after_T(self, cut)}

    def _just_enough(
        self,
        X: np.ndarray,
        delta: np.ndarray,
        rows: np.ndarray,
        group: np.ndarray,
        cut: float | None,
    ) -> np.ndarray:
        """Per person, the least share s ∈ [0, 1] of their recourse δ with which this
        round's decision rule favours x + s·δ (`least_share`; 0 for people it favours as
        they are, who lost a tie at a capacity cut-off; 1 where all of δ does not get
        it, and for the people not in `rows`)."""
        enough = np.ones(len(X))
        index = np.flatnonzero(rows)
        g = group[index]

        def favoured(reports: np.ndarray) -> np.ndarray:
            return self._favoured({"report": reports, "group": g}, cut)

        enough[index] = least_share(favoured, X[index], delta[index])
        return enough

    def _holders_favoured(self, c: Cohort, favourable: np.ndarray, cut: float | None) -> np.ndarray:
        """Whether this round's decision favours each person whose recourse succeeded
        last round (`recourse_reliability`): those applying now as they were decided,
        those who left as the rule would decide them (capacity: at the cut-off)."""
        holders = self._holders
        out = self._favoured(holders, cut)
        if len(out) and len(c.person):
            at = np.minimum(np.searchsorted(c.person, holders["person"]), len(c.person) - 1)
            present = c.person[at] == holders["person"]
            out[present] = favourable[at[present]]
        return out

    def _carry_on(
        self,
        c: Cohort,
        moves: _Moves,
        y: np.ndarray,
        favourable: np.ndarray,
        consequences: bool = True,
    ) -> tuple[Cohort, np.ndarray]:
        """The round's applicants as they go on (those who stay apply so next round):
        the true features and reports their recourse left them, moves for the next round
        included, then the world's `consequences` (lending: loans move scores, and so the
        reports of them); their true outcome at those features; their failed recourse
        attempts (applications with recourse turned down)."""
        X_next, report, y_next = moves.X_true, moves.X_rep, y
        later, moved = moves.later, moves.moved
        if moved.any():
            X_next = moves.X_true.copy()
            X_next[:, self.causal] += later[:, self.causal]
            report = moves.X_rep + later
            X_next, report = follow_direct_changes(self.world, c, moves.X_true, X_next, report)
            changed = (later[:, self.causal] != 0).any(1)
            if changed.any():
                y_next = np.where(changed, self.world.outcome(c, X_next, changed), y)
        X_after = self.world.after_round(c, X_next, favourable, y) if consequences else X_next
        if X_after is not X_next:  # what the world changes is real, and reported so
            report = report + (X_after - X_next)
        failed = c.failed + (moves.tried & ~favourable)
        after = Cohort(
            X=X_after,
            group=c.group,
            query=c.query,
            u=c.u,
            v=c.v,
            y0=y_next,
            rows=c.rows,
            record=c.record,
            report=report,
            person=c.person,
            arrived=c.arrived,
            since=c.since,
            failed=failed,
            moved=moved,
            move_cost=moves.move_cost,
            noise=self.world.noise_after(c, X_after),
        )
        return after, failed

    def _training_rows(
        self, X_rep: np.ndarray, y: np.ndarray, favourable: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rows the next update trains on: (X, y, indices into the cohort)."""
        rule = self.scenario.labels
        rows = np.arange(len(y))
        if not rule.selective:
            return X_rep.copy(), y.copy(), rows
        if rule.unobserved == "drop":
            return X_rep[favourable].copy(), y[favourable].copy(), rows[favourable]
        unfavourable = 0 if self.favourable != 0 else 1
        return X_rep.copy(), np.where(favourable, y, unfavourable), rows

    def _query_success(self, c: Cohort, query: np.ndarray, goal: int | None = None) -> float:
        """Share of a query group the current model gives its goal (honest reports);
        the goal defaults to the scenario query's."""
        n_query = np.count_nonzero(query)
        if not n_query:
            return 0.0
        proba, favourable = self._honest_decisions(c)
        goal = self.scenario.query.goal if goal is None else goal
        got = favourable if goal == self.favourable else proba.argmax(1) == goal
        return np.count_nonzero(got & query) / n_query

    def _honest_decisions(self, c: Cohort) -> tuple[np.ndarray, np.ndarray]:
        """Class probabilities (n, k) and favourable decisions (n,) of cohort c's honest
        reports under the deployed model; callers only read them.

        Kept for one model, cohort and decision threshold: the observation evaluates the
        cohort that the next round decides, and the query successes of a round all
        evaluate one cohort. Updates replace the learner's state dict rather than
        modify it, so its identity tells two models apart.
        """
        key = (self.learner, self.learner.state_, c, self._pare.get("decision_threshold"))
        if self._kept_decisions is not None:
            (learner, state, cohort, threshold), proba, favourable = self._kept_decisions
            if learner is key[0] and state is key[1] and cohort is key[2] and threshold == key[3]:
                return proba, favourable
        proba = self.learner.predict_proba(c.report)
        favourable = self._decide(proba, c.group, c.person)
        favourable.flags.writeable = False
        self._kept_decisions = (key, proba, favourable)
        return proba, favourable

    def _observation(self) -> np.ndarray:
        c = self._cohort
        assert c is not None
        proba, favourable = self._honest_decisions(c)
        query = self._query_mask(self.scenario.query, c)
        theta = self.learner.param_vector()
        params = np.clip(np.sign(theta) * np.log1p(np.abs(theta)), -PARAM_BOUND, PARAM_BOUND)
        G = len(self.group_labels)
        # each group's favourable count / its size (0 for an empty group): a flag's mean
        size = np.bincount(c.group, minlength=G)[:G]
        pending = np.bincount(c.group[favourable], minlength=G)[:G] / np.maximum(size, 1)
        goal = self.scenario.query.goal
        n_query = np.count_nonzero(query)
        if n_query:
            q_stats = [
                np.count_nonzero(favourable & query) / n_query,
                proba[query, goal].mean(),
                n_query / len(query),
            ]
            z = (c.report[query].mean(0) - self._feature_mean) / self._feature_scale
        else:
            q_stats = [0.0, 0.0, 0.0]
            z = np.zeros(self.n_features)
        obs = np.concatenate(
            [
                params,
                pending,
                self._last["acceptance"],
                self._last["true_outcome"],
                q_stats,
                self._last["query_acceptance"],
                np.clip(z, -FEATURE_BOUND, FEATURE_BOUND),
                [self._round / self.scenario.rounds],
            ]
        ).astype(np.float32)
        return np.clip(obs, self.observation_space.low, self.observation_space.high)

    def group_stats(self) -> dict[str, tuple[np.ndarray, float]]:
        """The world's statistics of the people in the pool now (lending: ``mean_score``):
        name -> (per-group values, value for everyone); after a round, the values that
        round's metrics reported."""
        if self._cohort is None:
            raise ResetNeeded("call reset() before group_stats()")
        return self.world.group_stats(self._pool.people)

    # -- per-person output -------------------------------------------------------------------
    def people(self, features: bool = False, collective: bool = False) -> dict[str, np.ndarray]:
        """The last round's applicants as the rows of ``people.csv``, column by column
        (`recourse_sim.env.metrics.people_columns`: every column is documented there);
        `features` adds each feature's true value and final report, `collective` what
        the round's collectives changed in each person's training report."""
        if self._last_record is None:
            raise ResetNeeded("people() describes the last round: call step() first")
        names = self.world.features.names
        return people_columns(
            self._last_record,
            self.group_labels,
            names if features else None,
            names if collective else None,
        )

    # -- checkpoints -------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """The complete episode state: numpy arrays, numbers, strings, nested dicts/lists.

        ``np_random`` holds the bit generator's state (Python ints, up to 128 bits).
        """
        if self._cohort is None:
            raise ResetNeeded("call reset() before get_state()")
        return {
            "version": STATE_VERSION,
            "scenario": self.scenario.name,
            "round": int(self._round),
            "np_random": _copy_tree(self.np_random.bit_generator.state),
            "streams": {k: _copy_tree(g.bit_generator.state) for k, g in self._streams.items()},
            "learner": {k: v.detach().numpy().copy() for k, v in self.learner.state_.items()},
            "learner_seed": int(self._learner_seed),
            "theta0": self._theta0.copy(),
            "pool": self._pool.get_state(),
            "holders": {k: v.copy() for k, v in self._holders.items()},
            # validity_horizon T: the holders of the last T rounds, oldest first
            "past_holders": {
                str(i): {k: v.copy() for k, v in h.items()}
                for i, h in enumerate(self._past_holders)
            },
            "world": _copy_tree(self.world.get_state()),
            "last": {k: v.copy() for k, v in self._last.items()},
            "feature_mean": self._feature_mean.copy(),
            "feature_scale": self._feature_scale.copy(),
            "pare": dict(self._pare),
            # what population strategies have learnt (a genre population's GenRe weights
            # and buffer), by population; strategies that learn nothing are left out
            "strategies": {s.population: s.get_state() for s in self.strategies if s.learns},
            "defense": self._defense.get_state(),
            "honoured": self._honoured.copy(),
            **({"shift": self._shift.get_state()} if self._shift is not None else {}),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a state from `get_state` (of an environment of the same scenario)."""
        import torch

        guards.check_state(state)
        if self._cohort is not None:  # a state of this scenario to hold it against
            _check_restored(state, self.get_state(), self.scenario.rounds)
        try:
            if state["version"] != STATE_VERSION:
                raise CheckpointError(
                    f"checkpoint state version {state['version']!r} is not {STATE_VERSION}"
                )
            if state["scenario"] != self.scenario.name:
                raise CheckpointError(
                    f"checkpoint is of scenario {state['scenario']!r}, "
                    f"this environment runs {self.scenario.name!r}"
                )
            self.np_random = _generator(state["np_random"])
            streams = state["streams"]
            if set(streams) != set(self._stream_names):
                raise CheckpointError(
                    f"checkpoint has random streams {sorted(streams)}, this environment "
                    f"draws from {sorted(self._stream_names)}"
                )
            self._streams = {name: _generator(streams[name]) for name in self._stream_names}
            self._keys = {name: stream_key(self._streams[name]) for name in self._keyed_names}
            self._learner_seed = int(state["learner_seed"])
            learner = self._new_learner(random_state=self._learner_seed)
            learner.state_ = {
                k: torch.as_tensor(np.array(v, dtype=np.float64))
                for k, v in state["learner"].items()
            }
            learner.classes_ = np.arange(self.n_classes)
            learner.n_features_in_ = self.n_features
            self.learner = learner
            self._theta0 = np.array(state["theta0"], dtype=np.float64)
            self._round = int(state["round"])
            self._pool = Pool(self._pool_rules)
            self._pool.set_state(_copy_tree(state["pool"]))
            self._cohort = self._pool.applicants()
            self._holders = {
                "person": np.array(state["holders"]["person"], dtype=np.int64),
                "report": np.array(state["holders"]["report"], dtype=np.float64),
                "group": np.array(state["holders"]["group"], dtype=np.int64),
                "query": np.array(state["holders"]["query"], dtype=bool),
            }
            past = state.get("past_holders", {})
            self._past_holders = [
                {
                    "person": np.array(past[i]["person"], dtype=np.int64),
                    "report": np.array(past[i]["report"], dtype=np.float64),
                    "group": np.array(past[i]["group"], dtype=np.int64),
                    "query": np.array(past[i]["query"], dtype=bool),
                }
                for i in sorted(past, key=int)
            ]
            self._last_record = None
            self.world.set_state(_copy_tree(state["world"]))
            self._last = {k: np.array(v, dtype=np.float64) for k, v in state["last"].items()}
            self._feature_mean = np.array(state["feature_mean"], dtype=np.float64)
            self._feature_scale = np.array(state["feature_scale"], dtype=np.float64)
            # (absent from checkpoints of before the pare rule, which had no threshold)
            self._pare = {k: float(v) for k, v in state.get("pare", {}).items()}
            if self.scenario.decision.rule == "pare" and not self._pare:
                raise CheckpointError("checkpoint has no PARE threshold for a pare scenario")
            if "defense" in state:
                self._defense.set_state(state["defense"])
            self._honoured = np.array(state.get("honoured", []), dtype=np.int64)
            if self._shift is not None:
                self._shift.set_state(state["shift"])
            learnt = state.get("strategies", {})
            for s in self.strategies:
                if not s.learns:
                    continue
                # resuming without it would silently forget the model: different rounds
                if s.population not in learnt:
                    raise CheckpointError(
                        f"checkpoint has no state for population {s.population!r} "
                        f"({s.name}); it cannot be resumed exactly"
                    )
                try:
                    s.set_state(learnt[s.population])
                except (KeyError, TypeError, ValueError, ConfigError) as exc:
                    raise CheckpointError(
                        f"checkpoint state of population {s.population!r} is corrupt: {exc}"
                    ) from None
            self._last_metrics = []
            self._history = []
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"checkpoint state is incomplete or corrupt: {exc!r}") from None


# parts of a state whose arrays have one row per person (or remembered row): their
# first axis may differ from a fresh environment's, their other axes may not
_ROW_PARTS = ("pool", "holders", "learner.X_mem", "learner.y_mem", "learner.round_sizes")
_CHECKED_PARTS = ("learner", "theta0", "feature_mean", "feature_scale", "last", "pool", "holders")


def _check_restored(state: Any, template: dict, rounds: int) -> None:
    """CheckpointError unless a restored `state` fits this environment: its round in
    0..`rounds`, its learner, pool and statistics shaped and typed as `template` (a
    state of the same scenario), and every float in it finite."""
    if not isinstance(state, dict):
        raise CheckpointError("checkpoint state is not a mapping")
    r = state.get("round")
    if isinstance(r, bool) or not isinstance(r, int | np.integer) or not 0 <= r <= rounds:
        raise CheckpointError(f"checkpoint state: round {str(r)[:20]!r} is outside 0..{rounds}")
    for where, want in _leaves(template, ""):
        if not where.startswith(_CHECKED_PARTS) or not isinstance(want, np.ndarray):
            continue
        got = _lookup(state, where)
        if not isinstance(got, np.ndarray):
            raise CheckpointError(f"checkpoint state: {where} is missing or not an array")
        rows = where.startswith(_ROW_PARTS)
        same = got.shape[1:] == want.shape[1:] if rows else got.shape == want.shape
        if got.ndim != want.ndim or not same:
            raise CheckpointError(
                f"checkpoint state: {where} has shape {got.shape}, expected "
                f"{('(n, ' + ', '.join(map(str, want.shape[1:])) + ')') if rows else want.shape}"
            )
        if got.dtype.kind != want.dtype.kind:
            raise CheckpointError(
                f"checkpoint state: {where} has dtype {got.dtype}, expected {want.dtype}"
            )
    for where, value in _leaves(state, ""):
        if (
            isinstance(value, np.ndarray)
            and value.dtype.kind == "f"
            and not np.isfinite(value).all()
        ):
            raise CheckpointError(f"checkpoint state: {where} has NaN or infinite values")


def _leaves(tree: Any, where: str):
    """(dotted path, value) of every leaf of nested mappings."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _leaves(v, f"{where}.{k}" if where else str(k))
    else:
        yield where, tree


def _lookup(tree: Any, where: str) -> Any:
    for part in where.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def checked_action(action, shape: tuple[int, ...]) -> np.ndarray:
    """`action` as float64 of exactly `shape`: a real number array (floats or integers)
    with finite values; anything else is refused, not reshaped or cast (a wrong shape is
    a wrong policy, and guessing its layout would hide that)."""
    a = np.asarray(action)
    if a.dtype.kind not in "fiu":
        raise ConfigError(f"action has dtype {a.dtype}, expected real numbers (float32)")
    if a.shape != tuple(shape):
        raise ConfigError(f"action has shape {a.shape}, expected {tuple(shape)}")
    a = a.astype(np.float64)
    if not np.isfinite(a).all():
        raise ConfigError(f"action has {int((~np.isfinite(a)).sum())} NaN or infinite values")
    return a


def capacity_decisions(
    p: np.ndarray, places: int, priority: np.ndarray | None = None
) -> np.ndarray:
    """The capacity rule along the last axis of P(favourable) scores `p` (one row of
    applicants, or a stack of worlds' rows): the `places` highest scores get a place,
    ties (`TIE_RESOLUTION`) in row order, or with `priority` (the shape of `p`) in
    increasing priority. The cut-off key is found by a partition (linear time) instead
    of a sort; the tied rows that fill the remaining places are the first ones of a
    running count."""
    if places <= 0:
        return np.zeros(p.shape, bool)
    if priority is not None:  # the rule on the rows in priority order, put back
        order = np.argsort(priority, axis=-1, kind="stable")
        ranked = capacity_decisions(np.take_along_axis(p, order, axis=-1), places)
        out = np.empty_like(ranked)
        np.put_along_axis(out, order, ranked, axis=-1)
        return out
    key = tie_key(p)
    n = key.shape[-1]
    cut = np.partition(key, n - places, axis=-1)[..., n - places, None]
    out = key > cut
    ties = key == cut
    free = places - np.count_nonzero(out, axis=-1)[..., None]
    out |= ties & (np.cumsum(ties, axis=-1) <= free)
    return out


@dataclass
class _Moves:
    """Step 3's outcome for a round's n applicants (see `RecourseEnv._individual_recourse`)."""

    X_rep: np.ndarray  # (n, d) final reports of this round
    X_true: np.ndarray  # (n, d) true features after this round's (same-round) changes
    tried: np.ndarray  # (n,) bool: the application used recourse
    cost: np.ndarray  # (n,) its cost
    changed: np.ndarray  # (n,) bool: true features changed this round
    later: np.ndarray  # (n, d) next-round moves
    moved: np.ndarray  # (n,) bool: made one
    move_cost: np.ndarray  # (n,) its cost
    proba: np.ndarray  # (n, k) class probabilities of the final reports
    favourable: np.ndarray  # (n,) bool: final decision
    holders: np.ndarray  # (n,) bool: their recourse got or reached this round's decision
    aim_unreachable: np.ndarray  # (n,) bool: sought recourse aiming at P ≥ 1 (margin)


def _no_holders(d: int) -> dict[str, np.ndarray]:
    """Nobody whose recourse succeeded last round (round 1)."""
    return {
        "person": np.zeros(0, np.int64),
        "report": np.zeros((0, d)),
        "group": np.zeros(0, np.int64),
        "query": np.zeros(0, bool),
    }


def _generator(bit_generator_state: dict) -> np.random.Generator:
    """A generator continuing from a saved ``bit_generator.state``."""
    state = _copy_tree(bit_generator_state)
    bit_generator = getattr(np.random, state["bit_generator"])()
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def _copy_tree(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _copy_tree(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_copy_tree(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.copy()
    return obj


# -- action sets from the scenario ---------------------------------------------------------------


def _mask(names: tuple[str, ...], which: list[str] | None) -> np.ndarray:
    m = np.zeros(len(names), bool)
    for f in which or []:
        m[names.index(f)] = True
    return m


_WARNED_POWERLESS: set[tuple[str, str]] = set()


def _warn_if_powerless(scenario: Scenario, name: str, pop, aset: ActionSet) -> None:
    """Warn (once per scenario and population in a process) when a population that acts
    can change nothing: every recourse and collective number of it would be 0."""
    if pop.strategy == "truthful" or (scenario.name, name) in _WARNED_POWERLESS:
        return
    if aset.actionable.any():  # (a budget of 0 is a setting, e.g. the start of a sweep)
        return
    _WARNED_POWERLESS.add((scenario.name, name))
    why = "no feature it may change is actionable"
    hint = (
        " (a CSV world has no actionable feature unless features.actionable lists some)"
        if scenario.world.kind == "csv" and scenario.features.actionable is None
        else ""
    )
    warnings.warn(
        f"{scenario.source}: populations.{name} can change nothing: {why}{hint}",
        stacklevel=4,
    )


def _values(cost) -> list:
    """The values of ``features.cost`` (the string ``std`` stands for itself)."""
    return [cost] if isinstance(cost, str) else list(cost.values())


def _metric_row_labels(
    group_labels: tuple[str, ...], query: QuerySpec
) -> tuple[tuple[str, ...], int | None]:
    """The names of a round's per-group rows in metrics.csv, and the index of a group row
    to leave out. Only a Gaussian world has a group named ``query`` (its query people):
    when the scenario's query group is exactly that group, its row would repeat the
    ``query`` row, so it is written once (the row to leave out); otherwise the group's
    row is named ``query_group`` so that (round, group) stays unique. Data groups are
    never named ``query`` or ``all`` (a CSV world refuses those values)."""
    if "query" not in group_labels:
        return group_labels, None
    j = group_labels.index("query")
    exact = (
        query.labels is None
        and query.groups in (None, ["query"])
        and (query.world or query.groups == ["query"])
    )
    if exact:
        return group_labels, j
    return tuple("query_group" if g == "query" else g for g in group_labels), None


def _base_action_set(scenario: Scenario, world: World) -> tuple[ActionSet, np.ndarray]:
    """The scenario-wide action set (budget ε = 1) and the causal-feature mask."""
    f, rules = world.features, scenario.features
    names = f.names
    actionable = f.actionable.copy() if rules.actionable is None else _mask(names, rules.actionable)
    actionable &= ~_mask(names, rules.immutable)
    inc = (f.increase_only & ~_mask(names, rules.decrease_only)) | _mask(names, rules.increase_only)
    dec = (f.decrease_only & ~_mask(names, rules.increase_only)) | _mask(names, rules.decrease_only)
    proxy = f.proxy.copy() if rules.proxy is None else _mask(names, rules.proxy)
    lower, upper = f.lower.copy(), f.upper.copy()
    max_change, cost = np.full(len(names), np.inf), np.ones(len(names))
    per_sd = 1.0 / world.feature_sd() if "std" in _values(rules.cost) else None
    given_cost = dict.fromkeys(names, "std") if rules.cost == "std" else rules.cost
    for target, given in (
        (lower, rules.lower),
        (upper, rules.upper),
        (max_change, rules.max_change),
        (cost, given_cost),
    ):
        for name, value in given.items():
            j = names.index(name)
            target[j] = per_sd[j] if value == "std" else value
    # types: the world's, then the scenario's by name; levels likewise
    types = dict(zip(names, f.types, strict=False)) | rules.types
    in_groups = {name for group in rules.onehot_groups for name in group}
    levels = {name: list(v) for name, v in f.levels.items() if name not in in_groups}
    levels |= rules.levels
    data = getattr(world, "data", None)  # (tabular worlds: the values a feature takes)
    for j, name in enumerate(names):
        leveled = types.get(name) in ("ordinal", "categorical") and name not in in_groups
        if leveled and name not in levels and data is not None:
            levels[name] = np.unique(data.X[:, j]).tolist()
    try:
        aset = ActionSet(
            n_features=len(names),
            immutable=np.flatnonzero(~actionable).tolist(),
            increase_only=np.flatnonzero(inc & actionable).tolist(),
            decrease_only=np.flatnonzero(dec & actionable).tolist(),
            lower=lower,
            upper=upper,
            max_change=max_change,
            cost_weights=cost,
            p=rules.p,
            epsilon=1.0,
            feature_names=names,
            feature_types=types,
            steps=rules.steps,
            levels=levels,
            onehot_groups=rules.onehot_groups,
        )
    except ConfigError as exc:
        raise ConfigError(f"{scenario.source}: features: {exc}") from None
    return aset, ~proxy


def _scenario_bounds(base: ActionSet, rules) -> ActionSet:
    """`base` with value bounds only where the scenario's ``features.lower``/``upper``
    set them (no world defaults)."""
    names = base.feature_names
    lower, upper = np.full(base.n_features, -np.inf), np.full(base.n_features, np.inf)
    for target, given in ((lower, rules.lower), (upper, rules.upper)):
        for name, value in given.items():
            target[names.index(name)] = value
    return base.replace(lower=lower, upper=upper)


def _log_loss_of(proba: np.ndarray, y: np.ndarray) -> float | None:
    """Mean cross-entropy −log p(y | x) of class probabilities `proba` (n, k) at labels
    y (probabilities clamped at 1e-300); None for no rows."""
    if not len(y):
        return None
    p = proba[np.arange(len(y)), y]
    return float(-np.log(np.maximum(p, 1e-300)).mean())


def _log_loss(learner: Learner, X: np.ndarray, y: np.ndarray) -> float | None:
    """`_log_loss_of` the learner's probabilities on rows X."""
    return _log_loss_of(learner.predict_proba(X), y) if len(y) else None


def _population_action_set(base: ActionSet, pop, names: tuple[str, ...], where: str) -> ActionSet:
    actionable = base.actionable.copy()
    if pop.actionable is not None:
        actionable &= _mask(names, pop.actionable)
    inc, dec = base.increase_mask.copy(), base.decrease_mask.copy()
    inc = (inc & ~_mask(names, pop.decrease_only)) | _mask(names, pop.increase_only)
    dec = (dec & ~_mask(names, pop.increase_only)) | _mask(names, pop.decrease_only)
    try:
        return base.replace(
            immutable=np.flatnonzero(~actionable).tolist(),
            increase_only=np.flatnonzero(inc & actionable).tolist(),
            decrease_only=np.flatnonzero(dec & actionable).tolist(),
            epsilon=pop.epsilon,
        )
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
