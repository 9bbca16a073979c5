"""The recourse environment: one step is one round of online retraining."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from recourse_sim.env import guards
from recourse_sim.env.engine import RoundEngine
from recourse_sim.env.hidden import HIDDEN_STREAM, apply_hidden, check_split, draw_hidden
from recourse_sim.env.limits import Allowance, limit_info
from recourse_sim.env.metrics import people_columns
from recourse_sim.env.pool import Pool
from recourse_sim.env.rendering import Window, draw_frame, has_display, render_modes
from recourse_sim.env.round import RoundWork, controlled_summary, no_holders, play_round
from recourse_sim.env.shift import SHIFT_STREAM
from recourse_sim.env.state import episode_state, restore_episode_state
from recourse_sim.env.streams import LEARNER, WORLD, derive_streams, stream_key
from recourse_sim.errors import ConfigError
from recourse_sim.learners.defense import Defense
from recourse_sim.scenarios import Scenario, load_scenario

# Observation scaling: parameters enter as sign(θ)·log(1 + |θ|) (finite, monotone, and
# readable whether a weight is 0.01 or 500); feature means in SDs of the history.
PARAM_BOUND = 30.0
FEATURE_BOUND = 10.0

_WARNED_PASSIVE: set[str] = set()
"""Scenarios whose ignored action has been warned about (`warn_passive`)."""


class RecourseEnv(RoundEngine, gym.Env[np.ndarray, np.ndarray]):
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
    ``budget`` (ε: the population's · min(1, 1 + a) snapped to ``budget_levels`` whole
    shares, `agents.strategies.oar_budget_share`) and ``goal`` (≥ -1/2: the query's
    own goal class, below: another class); OAR computes each member's perturbation. The
    zero action, as the constant (1, 1, 1, 1), reproduces the ``collective_oar``
    population exactly (see `agents.Controlled`).

    With ``action: oar_plan`` (the ``-v3`` IDs): ``Box(-1, 1, shape=(6,), float32)``,
    those four and ``horizon`` (OAR's look-ahead, from the population's ``horizon`` at
    0 and below up to ``max_horizon`` at 1) and ``bank`` (a draw, on top of the round's
    ε, on the budget that earlier rounds left unused, banked up to ``bank_cap`` · ε);
    the zero action is OAR again (`recourse_sim.env.limits`). The population's
    ``limit`` (action ``oar`` or ``oar_plan``) plays an acting action as idle once
    ``acting_rounds`` rounds have acted, and caps each round's ε at the cost left of
    ``total_cost``.

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

    With ``action: oar`` (the ``-v2`` IDs) or ``oar_plan`` (``-v3``) it goes on:

    | part | size | range |
    |---|---|---|
    | acting rounds left, cost left, as shares of the limits (1: none); the bank¹ | 2 (3) | [0, 1] |
    | last round's action as applied, after the limit (`Controlled.applied_action`) | 4 (6) | ±1 |
    | last round's mean collective cost per participant / ε | 1 | [0, 1] |
    | last round's decision cut-off as a probability (before: the first model's) | 1 | [0, 1] |
    | last round's participants / eligible, eligible / applicants | 2 | [0, 1] |

    ¹ ``oar_plan`` only: the bank / (bank_cap · ε); its action has 6 entries. Before round
    1 the action and cost entries are 0.

    ## Rewards

    ``reward = query_success − λ · cost``, where ``query_success`` is the share of this
    round's query group that the *updated* model gives its goal (the decision rule
    applied to their honest reports: next round's success without individual recourse),
    ``cost`` the mean cost of the collectives' perturbations per participant (0 when
    nobody took part) and λ the scenario's ``reward.cost_weight``. Both components are
    in ``info["rewards"]``. With ``reward.trimmed_weight`` w, the reward also loses w ×
    ``trimmed`` (above).

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
    (see `recourse_sim.env.metrics`); ``info["rewards"]``: the reward's components
    (with a trimmed refit or ``reward.trimmed_weight``, also ``trimmed``: the share of
    the participants who changed their reports whose rows the defence dropped);
    ``info["collectives"]``: per collective population, its ``participants``, their mean
    ``cost`` and the ``query_success`` of the query group it acts for (under a trimmed
    refit also its own ``trimmed`` share); ``info["round"]``:
    rounds done; with a ``limit``, ``info["limit"]``: whether it clipped the round's
    action (``clipped``), ``acting_rounds_left`` and ``cost_left`` (None: no such
    limit). ``people()`` gives the round's applicants as the rows of ``people.csv``
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
    * ``hidden_split``: ``"train"`` (default) or ``"test"``: the ranges a scenario's
      ``hidden`` settings are drawn from at each reset (`recourse_sim.env.hidden`; not
      observed; ``hidden_values`` gives the episode's draw, ``base_scenario`` the file's
      scenario, ``scenario`` the episode's).

    Checkpoints: ``get_state()`` returns the full state as numpy arrays, numbers and
    strings (no pickled objects); ``set_state(state)`` restores it so that continuing
    gives exactly the same rounds as an uninterrupted run.

    ## Version History

    * v0 coordination tasks: ``LendingBudget20-v0``, ``LendingBudget40-v0``,
      ``LendingHidden-v0``, ``SchoolSGDBudget-v0``, ``SchoolDefended-v0``,
      ``RivalCollectives-v0`` (`recourse_sim.registration.COORDINATION_TASKS`).
    * spec revision (every ID): each spec has ``max_episode_steps`` (its
      scenario's rounds; ``Recourse-v0``: ``school_assignment``'s), so ``gym.make`` adds
      a ``TimeLimit``; ``render_mode="human"`` without a display is a `ConfigError`
      naming ``rgb_array``.
    * v3: ``SchoolAssignment-v3`` and ``Lending-v3``: the v1 scenarios with
      ``action: oar_plan``, OAR's settings with its look-ahead and a bank of unspent
      budget; the zero action is OAR. Controlled populations may have a ``limit``
      (checkpoints carry its counts and the bank).
    * v2: ``SchoolAssignment-v2`` and ``Lending-v2``: the v1 scenarios with OAR's own
      settings as the action (``action: oar``), so that a policy's action space contains
      collective OAR. The v1 IDs are kept with their shift action. Later revision
      (same IDs): the action is centred on OAR — the zero action is OAR's own settings
      (α, ε: the file's · min(1, 1 + a); act and goal switch at -1/2, the goal entry
      now choosing between the query's own goal and the other classes) — so a policy
      initialised near zero starts at OAR; (1, 1, 1, 1) is still OAR.
    * v2, later revision (same IDs): the ``budget`` entry snaps ε to quarters
      (``budget_levels: 4``; every entry ≥ -1/8 keeps the file's ε), and the
      observation adds the limits left, the last action as applied, its cost, the
      decision cut-off and the collective's size.
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

    def __init__(
        self,
        scenario: Scenario | str | Path | None = None,
        render_mode: str | None = None,
        warn_passive: bool = False,
        hidden_split: str = "train",
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
        RoundEngine.__init__(self, scenario)
        self.hidden_split = check_split(hidden_split)
        self.base_scenario = scenario  # (with its hidden fields as the file sets them)
        self.hidden_values: dict[str, float] = {}  # this episode's draw (privileged)
        controlled = [s for s in self.strategies if s.name == "controlled"]
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
        if self.controlled is not None:
            shape = self.controlled.action_shape(self.n_classes)
        else:
            shape = (self.n_classes, max(int(self.action_set.actionable.sum()), 1))
        self.action_space = spaces.Box(-1.0, 1.0, shape=shape, dtype=np.float32)

        n_params = self.param_count()
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
        if self.observes_settings:  # what the collective's settings need: see the docs table
            (entries,) = shape
            left = len(self.allowance_left())
            low = np.concatenate([low, np.zeros(left), -np.ones(entries), np.zeros(4)])
            high = np.concatenate([high, np.ones(left + entries + 4)])
        self.observation_space = spaces.Box(
            low.astype(np.float32), high.astype(np.float32), dtype=np.float32
        )
        self._last_metrics: list[dict] = []
        self._history: list[list[dict]] = []  # every round's metrics (rgb_array frames)

    @property
    def observes_settings(self) -> bool:
        """Whether the action sets a controlled collective's OAR settings (``action: oar``),
        whose observation adds what they need (limits left, the last action and its cost,
        the cut-off, the collective's size)."""
        return self.controlled is not None and self.controlled.spec.action != "shift"

    def allowance_left(self) -> tuple[float, ...]:
        """What the observation holds of the collective's allowance, each in [0, 1]: the
        shares of its limits left (`limit_left`: acting rounds, total cost; 1: no limit)
        and, under ``action: oar_plan``, its bank / (bank_cap · ε) (`bank_share`). Its
        length does not change within an environment."""
        left = self.limit_left()
        if self.controlled is not None and self.controlled.spec.action == "oar_plan":
            return (*left, self.bank_share())
        return left

    # -- gymnasium API ---------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        observation = self._start(seed, options, numpy=False)
        return observation, {"round": 0, "scenario": self.scenario.name}

    def reset_for_checks(self, seed: int = 0) -> None:
        """`reset` with the first model fitted on numpy where the learner can
        (`Learner.fit_numpy`), for checks that read the episode's start and never step it
        (`recourse_sim.simulate.preflight`, behind ``recourse-sim validate``): a scenario
        whose start needs no torch is checked without importing it. The model may differ
        from `reset`'s in the last bits, so runs use `reset`."""
        self._start(seed, None, numpy=True)

    def _start(self, seed: int | None, options: dict[str, Any] | None, numpy: bool) -> np.ndarray:
        """The episode's start (`reset`): the first model fitted on the history by
        `Learner.fit_numpy` (`numpy`) or `Learner.fit`, a bad setting named as the first
        model's. Returns the first observation."""
        guards.check_reset(self, seed, options)
        X_hist, y_hist = self.reset_until_fit(seed)
        fit = self.learner.fit_numpy if numpy else self.learner.fit
        try:
            fit(X_hist, y_hist)
        except ConfigError as exc:
            raise ConfigError(f"{self.scenario.source}: fitting the first model: {exc}") from None
        self.reset_after_fit()
        return self.observation()

    # `reset` in two halves around the first model's fit, so that a batched env can fit
    # the first models of many worlds at once (`recourse_sim.env.batched`)
    def reset_until_fit(self, seed: int | None) -> tuple[np.ndarray, np.ndarray]:
        """`reset` up to the first fit: the streams, the world, its history and a new
        (unfitted) learner. Returns the history (X, y) the learner is to be fitted on."""
        super().reset(seed=seed)
        if self.base_scenario.hidden:  # this episode's rules first (an own stream)
            streams = derive_streams(self.np_random, (*self.stream_names, HIDDEN_STREAM))
            values = draw_hidden(self.base_scenario, self.hidden_split, streams.pop(HIDDEN_STREAM))
            apply_hidden(self, self.base_scenario, values)
        else:
            streams = derive_streams(self.np_random, self.stream_names)
        self.state.streams = streams
        self.state.keys = {name: stream_key(self.state.streams[name]) for name in self.keyed_names}
        world_rng = self.state.streams[WORLD]
        self.world.reset(world_rng)
        X_hist, y_hist = self.world.history(world_rng)
        if self.shift is not None:
            self.shift.remember_history(X_hist, y_hist)
        self.state.feature_mean = X_hist.mean(0)
        scale = X_hist.std(0)
        self.state.feature_scale = np.where(scale > 0, scale, 1.0)
        self.state.learner_seed = int(self.state.streams[LEARNER].integers(2**63 - 1))
        self.learner = self.new_learner(random_state=self.state.learner_seed)
        return X_hist, y_hist

    def reset_after_fit(self) -> None:
        """`reset` from the fitted first model on: the first cohort (the observation of
        it is `reset`'s, or the batched env's for many worlds at once)."""
        world_rng = self.state.streams[WORLD]
        self.state.theta0 = self.learner.param_vector()
        self.state.honoured = np.zeros(0, np.int64)
        if self.shift is not None:
            self.shift.start(self.learner, self.state.keys[SHIFT_STREAM])
        self.state.defense = Defense(self.scenario.learner.defense, self.n_features)
        self.state.round = 0
        self.state.pool = Pool(self.pool_rules)
        self.state.cohort = self.state.pool.start(
            self.world, world_rng, 0 if self.has_round_zero else 1
        )
        self.state.holders = no_holders(self.n_features)
        self.state.past_holders = []  # last T rounds' holders
        self.state.allowances = {
            s.population: Allowance() for s in self.strategies if s.name == "controlled"
        }
        self.state.last_record = None
        if self.has_round_zero:
            self.play_round_zero()
        if self.scenario.decision.rule == "pare":
            self.state.pare = self.pare_threshold(self.state.cohort)
        G = len(self.group_labels)
        self.state.last = {
            "acceptance": np.zeros(G),
            "true_outcome": np.zeros(G),
            "query_acceptance": np.zeros(1),
        }
        if self.observes_settings:
            self.state.last["controlled"] = controlled_summary(self, None)
        self._last_metrics = []
        self._history = []

    def step(
        self, action: np.ndarray | None
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """One round. `action` drives the controlled population; a scenario without one
        ignores it and also takes ``None``."""
        self._check_step()
        if action is None and self.controlled is None:
            return self.play_round({}, None)
        return self.play_round({}, checked_action(action, self.action_space.shape))

    def _check_step(self) -> None:
        """Refuses a step that `reset` must come before."""
        guards.check_step(self)
        if (
            self.state.cohort is None
            or self.state.round >= self.scenario.rounds
            or self.state.pool.empty
        ):
            raise ResetNeeded("call reset() before step() (and after the episode ends)")

    def play_round(
        self,
        actions: dict[str, np.ndarray],
        default: np.ndarray | None,
        on_phase: Callable[[str, RoundWork], None] | None = None,
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """One round (`recourse_sim.env.round.play_round`) as a Gymnasium step: collective
        `p` acts on ``actions.get(p, default)``; `on_phase(name, work)` sees each phase."""
        work = play_round(self, actions, default, on_phase)
        metrics = work.metrics
        self._last_metrics = metrics
        if self.render_mode in ("rgb_array", "human"):
            self._history.append(metrics)
        terminated = self.state.pool.empty
        truncated = self.state.round >= self.scenario.rounds
        rewards = {
            "query_success": work.query_success,
            "cost": work.collective_cost,
            "cost_weight": self.scenario.reward.cost_weight,
        }
        trimmed_weight = self.scenario.reward.trimmed_weight
        if trimmed_weight or self.scenario.learner.defense.trim:
            rewards |= {"trimmed": work.trimmed_share, "trimmed_weight": trimmed_weight}
        info = {
            "round": self.state.round,
            "metrics": metrics,
            "rewards": rewards,
            "collectives": work.collectives,
        }
        if self.controlled is not None and self.controlled.spec.limit is not None:
            p = self.controlled.population
            info["limit"] = limit_info(self.controlled, work.clipped.get(p, False), self.state)
        if self.render_mode == "human":
            self.render()
        return self.observation(), float(work.reward), terminated, truncated, info

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
            return f"{self.scenario.name}: round {self.state.round} (no round played yet)\n"
        lines = [f"{self.scenario.name}: round {self.state.round}/{self.scenario.rounds}"]
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

    def observation(self) -> np.ndarray:
        c = self.state.cohort
        assert c is not None
        proba, favourable = self.honest_decisions(c)
        query = self.query_mask(self.scenario.query, c)
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
            z = (c.report[query].mean(0) - self.state.feature_mean) / self.state.feature_scale
        else:
            q_stats = [0.0, 0.0, 0.0]
            z = np.zeros(self.n_features)
        obs = np.concatenate(
            [
                params,
                pending,
                self.state.last["acceptance"],
                self.state.last["true_outcome"],
                q_stats,
                self.state.last["query_acceptance"],
                np.clip(z, -FEATURE_BOUND, FEATURE_BOUND),
                [self.state.round / self.scenario.rounds],
                *(
                    (self.allowance_left(), self.state.last["controlled"])
                    if self.observes_settings
                    else ()
                ),
            ]
        ).astype(np.float32)
        return np.clip(obs, self.observation_space.low, self.observation_space.high)

    def group_stats(self) -> dict[str, tuple[np.ndarray, float]]:
        """The world's statistics of the people in the pool now (lending: ``mean_score``):
        name -> (per-group values, value for everyone); after a round, the values that
        round's metrics reported."""
        if self.state.cohort is None:
            raise ResetNeeded("call reset() before group_stats()")
        return self.world.group_stats(self.state.pool.people)

    # -- per-person output -------------------------------------------------------------------
    def people(self, features: bool = False, collective: bool = False) -> dict[str, np.ndarray]:
        """The last round's applicants as the rows of ``people.csv``, column by column
        (`recourse_sim.env.metrics.people_columns`: every column is documented there);
        `features` adds each feature's true value and final report, `collective` what
        the round's collectives changed in each person's training report."""
        if self.state.last_record is None:
            raise ResetNeeded("people() describes the last round: call step() first")
        names = self.world.features.names
        return people_columns(
            self.state.last_record,
            self.group_labels,
            names if features else None,
            names if collective else None,
        )

    # -- checkpoints -------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """The complete episode state: numpy arrays, numbers, strings, nested dicts/lists
        (`recourse_sim.env.state.episode_state`).

        ``np_random`` holds the bit generator's state (Python ints, up to 128 bits).
        """
        return episode_state(self)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a state from `get_state` (of an environment of the same scenario)."""
        restore_episode_state(self, state)


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
