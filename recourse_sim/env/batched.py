"""A native batched vector environment: B independent worlds of one scenario, one round
of all of them per ``step``, as one pass of stacked numpy arrays.

``gym.make_vec(id, num_envs=B, vectorization_mode="vector_entry_point")`` returns a
`BatchedRecourseEnv` where the scenario is one it simulates natively (`native_reason`
says why not), else a `gymnasium.vector.SyncVectorEnv` over `RecourseEnv` with a
one-line warning saying why. `make_vector_env` is that entry point.

Equality with the single environment. Sub-environment i, reset with seed s_i, plays
exactly the rollout of ``RecourseEnv`` reset with s_i: each world resets through its own
`RecourseEnv` (the same code: named streams, history, first model, first cohort; where
the refits are one batch, the first models of the worlds reset together are one batched
fit, `fit_batch`) and every later draw comes from that world's own streams, in the same
order and sizes as the single environment's, so the same people, decisions, recourse,
collectives and refits follow. What is batched is everything between the draws: decisions (the
capacity rule on the last axis), individual min-cost recourse (row by row, every
world's seekers at once), outcomes, the controlled collective's perturbations, the
social graphs (one disjoint union: one edge sort, one cascade), the Newton refits (one
batched solve per iteration; a window of several rounds, or selective labels, gives
each world its own number of rows: every world's memory padded with rows of zeros to
the longest) and the observations. With OAR's settings as the action (``action: oar``,
the ``-v2`` IDs) the controlled collective's OAR is solved for every world at once, each
world on the single env's own path (`recourse_sim.env.batched_oar`). Where numpy's
generator calls are slow for their size, their numbers are reproduced from the same
bits: the SBM's endpoint draws (``integers``, about 14 µs a call whatever its size) come from
``random_raw`` with numpy's bounded-integer method (Lemire's, with its uint32
buffering), and a collective's doubles of a round (organisers, cascade waves,
participation) from one ``random`` call of an upper bound, the unused rest handed back
with ``advance``. Per number the batched arithmetic is the single environment's; a few
sums run in another order and the fits take another path to the same unique optimum,
so results agree to rounding: measured, observations bit for bit and rewards within
about 1e-16 (``tests/env/test_batched.py`` holds school's observations to float32
rounding, lending's bit for bit, and rewards within 1e-12;
``tests/env/test_batched_oar.py`` holds the ``-v2`` IDs' observations bit for bit).

Native scope: `recourse_sim.env.batched_scope` (else the synchronous fallback).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from recourse_sim.agents.strategies import (
    IndividualResult,
    adapt,
    oar_goal,
    seeker_margins,
)
from recourse_sim.data.school import school_from_numbers, school_numbers
from recourse_sim.env import guards
from recourse_sim.env.batched_oar import Refits, newton_solve, oar_batch
from recourse_sim.env.batched_sbm import recruit_sbm
from recourse_sim.env.batched_scope import drops_rejected, native_reason
from recourse_sim.env.engine import capacity_decisions
from recourse_sim.env.metrics import tie_key
from recourse_sim.env.recourse_env import FEATURE_BOUND, PARAM_BOUND, RecourseEnv, checked_action
from recourse_sim.env.round import decision_cutoff
from recourse_sim.env.streams import TIES, WORLD, keyed_uniforms, margin_stream, population_stream
from recourse_sim.errors import ConfigError
from recourse_sim.learners.logistic import SingleClassWarning
from recourse_sim.learners.logistic_batch import (
    fit_batch,
    last_round_refit_batch,
    window_refit_batch,
)
from recourse_sim.learners.logistic_math import sigmoid
from recourse_sim.recourse.individual import linear_min_cost

__all__ = ["BatchedRecourseEnv", "make_vector_env", "native_reason"]


def make_vector_env(num_envs: int = 1, **kwargs: Any) -> VectorEnv:
    """The ``vector_entry_point`` of the registered IDs: a `BatchedRecourseEnv` of
    `num_envs` worlds, or, for a scenario it does not simulate natively, a
    synchronous vector env of `RecourseEnv` (with a one-line warning of the reason)."""
    kwargs.pop("max_episode_steps", None)  # episodes end by the scenario's rounds
    if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
        raise ConfigError(f"num_envs must be a positive integer, got {num_envs!r}")
    probe = RecourseEnv(**kwargs)
    _check_budget(num_envs, probe)
    reason = native_reason(probe)
    if reason is None:
        return BatchedRecourseEnv(num_envs, _first=probe, **kwargs)
    warnings.warn(
        f"{probe.scenario.name}: no native batched env ({reason}); "
        f"falling back to a synchronous loop over {num_envs} RecourseEnv",
        stacklevel=2,
    )
    kwargs["scenario"] = probe.scenario
    kwargs = {k: v for k, v in kwargs.items() if "__" not in k}  # already in the scenario
    envs = [lambda: probe] + [lambda: RecourseEnv(**kwargs) for _ in range(num_envs - 1)]
    return gym.vector.SyncVectorEnv(envs, autoreset_mode=AutoresetMode.NEXT_STEP)


def _check_budget(num_envs: int, probe: RecourseEnv) -> None:
    """ConfigError if `num_envs` worlds like `probe` (each its cohort and history) will
    not fit in this process's memory."""
    from recourse_sim.budget import rows_over_budget
    from recourse_sim.scenarios import cohort_size

    world = probe.scenario.world
    people = cohort_size(world)[0] + getattr(world, "history_size", 0)
    problem = rows_over_budget(
        num_envs * people, probe.n_features, f"people in {num_envs:,} worlds"
    )
    if problem:
        raise ConfigError(f"num_envs: {problem}")


class BatchedRecourseEnv(VectorEnv):
    """B independent worlds of one scenario, stepped together (see the module docstring).

    ## Spaces

    ``single_action_space`` and ``single_observation_space`` are `RecourseEnv`'s;
    ``action_space`` and ``observation_space`` stack B of them.

    ## Autoreset

    Gymnasium 1.x's default, ``metadata["autoreset_mode"] = NEXT_STEP``: the step after
    a world's episode ends resets that world (its action is ignored; reward 0, neither
    terminated nor truncated, the reset observation); its reset continues the world's
    own ``np_random`` (seedless), as ``RecourseEnv.reset()`` does. ``SAME_STEP`` resets
    it within the step that ended it (the last observation in ``info["final_obs"]``, what
    SB3 expects); ``DISABLED`` leaves it to ``reset(options={"reset_mask": mask})``.

    ## Info

    Per world (arrays of B, each with its ``_name`` mask): ``round`` (rounds done) and
    the reward's components ``query_success``, ``cost``. The single environment's
    per-round metrics and ``people()`` are not computed (they need neither the
    observation nor the reward); run `RecourseEnv` for them.

    ## Arguments

    ``num_envs`` (B), ``autoreset_mode`` and `RecourseEnv`'s ``scenario`` and
    ``**overrides``.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "autoreset_mode": AutoresetMode.NEXT_STEP,
        "render_modes": [],
    }

    def __init__(
        self,
        num_envs: int,
        scenario: Any = None,
        warn_passive: bool = False,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        _first: RecourseEnv | None = None,
        **overrides: Any,
    ):
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        first = _first or RecourseEnv(scenario, warn_passive=warn_passive, **overrides)
        reason = native_reason(first)
        if reason is not None:
            raise ConfigError(
                f"{first.scenario.name}: BatchedRecourseEnv cannot run it ({reason}); "
                "use recourse_sim.env.batched.make_vector_env"
            )
        # each world resets through its own RecourseEnv: the single env's reset, exactly
        self.envs = [first] + [RecourseEnv(first.scenario) for _ in range(num_envs - 1)]
        self.num_envs = num_envs
        self.single_action_space = first.action_space
        self.single_observation_space = first.observation_space
        self.action_space = batch_space(first.action_space, num_envs)
        self.observation_space = batch_space(first.observation_space, num_envs)
        self.render_mode = None
        self.spec = None
        self._first = first
        sc = first.scenario
        self._n = first.world.cohort_size
        self._d = first.n_features
        self._G = len(first.group_labels)
        self._fav = first.favourable
        self._places = first.places(self._n) if sc.decision.rule == "capacity" else None
        self._causal = first.causal
        self._deciding = [s for s in first.strategies if s.stage == "decision"]
        self._training = [s for s in first.strategies if s.stage == "training"]
        self._fico = sc.world.kind == "fico"  # its applicants stay (else a fresh cohort)
        self._school = None if self._fico else first.world.spec.generator_kwargs()
        self._record_hist = getattr(first.world.spec, "training_label", None) == "recorded"
        self._labels = sc.labels
        self._window = sc.learner.window
        # the last round's rows alone, the same n in every world: one refit of the stack;
        # else each world's remembered rounds (`remember`), of their own sizes
        self._remembers = self._window != 1 or drops_rejected(sc.labels)
        learner = first.learner
        self._C, self._tol, self._max_iter = learner.C, learner.tol, learner.max_iter
        self._rounds = sc.rounds
        # a controlled collective with OAR's settings as its action (solved batched)
        self._oar_action = first.observes_settings
        self._ended = np.zeros(num_envs, bool)  # episode over, world not reset yet
        # each SBM population's block pairs by block sizes (worlds and rounds share a few)
        self._block_plans: dict[str, dict[tuple[int, ...], list]] = {}
        self._state: dict[str, np.ndarray] = {}
        # called after each phase of a round with the phase's name (those of
        # `recourse_sim.env.round.PHASES`) and its arrays, stacked over worlds: how the
        # equality tests name the phase where a world and its single env part
        self.on_phase: Callable[[str, dict[str, np.ndarray]], None] | None = None

    @property
    def autoreset_mode(self) -> AutoresetMode:
        return self._autoreset_mode

    @autoreset_mode.setter
    def autoreset_mode(self, mode: AutoresetMode | str) -> None:
        self._autoreset_mode = AutoresetMode(mode)
        self.metadata = {**type(self).metadata, "autoreset_mode": self._autoreset_mode}

    # -- reset -----------------------------------------------------------------------------
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        guards.check_reset(self, seed, options, ("reset_mask",), self.num_envs)
        B = self.num_envs
        if seed is None or isinstance(seed, int | np.integer):
            seeds = [None if seed is None else int(seed) + i for i in range(B)]
        else:
            seeds = list(seed)
            if len(seeds) != B:
                raise ConfigError(f"reset got {len(seeds)} seeds for {B} environments")
        options = dict(options or {})
        mask = np.asarray(options.pop("reset_mask", np.ones(B, bool)), bool)
        if mask.shape != (B,):
            raise ConfigError(f"reset_mask has shape {mask.shape}, expected ({B},)")
        if not self._state:
            if not mask.all():
                raise gym.error.ResetNeeded("the first reset() resets every world")
            self._allocate()
            self._obs = np.zeros(self.observation_space.shape, np.float32)
        worlds = np.flatnonzero(mask).tolist()
        self._obs[worlds] = self._reset_worlds(worlds, [seeds[i] for i in worlds], options or None)
        self._ended[mask] = False
        rounds = self._state["round"].copy()
        return self._obs.copy(), {"round": rounds, "_round": mask.copy()}

    def _allocate(self) -> None:
        B, n, d, G = self.num_envs, self._n, self._d, self._G
        self._state = {
            "X": np.zeros((B, n, d)),
            "report": np.zeros((B, n, d)),
            "group": np.zeros((B, n), np.int64),
            "query": np.zeros((B, n), bool),
            "u": np.zeros((B, n)),
            "v": np.zeros((B, n)),
            "y0": np.zeros((B, n), np.int64),
            "record": np.zeros((B, n), np.int64),
            "theta": np.zeros((B, d + 1)),
            # the learner's fixed standardisation (0 and 1 without one: x − 0 and x / 1
            # are x exactly)
            "x_shift": np.zeros((B, d)),
            "x_scale": np.ones((B, d)),
            # the cohort's reports standardised, and the current model's P(favourable)
            # and decisions of them (what the observation showed and the round decides)
            "Xs": np.zeros((B, n, d)),
            "p": np.zeros((B, n)),
            "favourable": np.zeros((B, n), bool),
            "feature_mean": np.zeros((B, d)),
            "feature_scale": np.ones((B, d)),
            "acceptance": np.zeros((B, G)),
            "true_outcome": np.zeros((B, G)),
            "query_acceptance": np.zeros(B),
            "round": np.zeros(B, np.int64),
            "person": np.zeros((B, n), np.int64),  # the cohort's ids (keyed numbers)
        }
        if self._oar_action:  # what the observation remembers of the collective's round
            size = self.single_action_space.shape[0] + 4  # (`controlled_summary`)
            self._state["controlled"] = np.zeros((B, size))
        # each world's keys of its keyed streams (per-person margins, tie lotteries)
        self._keys = {name: np.zeros(B, np.uint64) for name in self._first.keyed_names}
        self._world_rngs: list[np.random.Generator] = [None] * B  # type: ignore[list-item]
        # each world's learner memory: its remembered rounds' (rows, labels), oldest first
        self._memory: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(B)]
        self._pop_rngs: dict[str, list[np.random.Generator]] = {
            s.population: [None] * B  # type: ignore[list-item]
            for s in (*self._deciding, *self._training)
        }
        # per world and SBM stream: the upper uint32 of a uint64 that numpy's bounded
        # integers have drawn but not used yet (None: none), as PCG64 buffers it
        self._pending: dict[str, list[int | None]] = {p: [None] * B for p in self._pop_rngs}

    def _reset_worlds(
        self, worlds: list[int], seeds: list[int | None], options: dict | None
    ) -> np.ndarray:
        """Reset `worlds` (with `seeds`), each through its own `RecourseEnv`; returns their
        observations. Where the refits are one batch (the last round's rows alone), the
        first models of all of them are fitted at once too (`fit_batch`, θ to rounding):
        the halves of `RecourseEnv.reset` around its fit. Else each world's reset is the
        single env's exactly."""
        if not worlds:
            return np.zeros((0, *self.single_observation_space.shape), np.float32)
        envs = [self.envs[i] for i in worlds]
        if self._remembers:
            pairs = zip(envs, seeds, strict=True)
            obs = [env.reset(seed=seed, options=options)[0] for env, seed in pairs]
            st = self._state
            for i in worlds:
                self._load_world(i)
                # what the single env's observation of the first cohort computed
                env, shift, scale = self.envs[i], st["x_shift"][i : i + 1], st["x_scale"][i : i + 1]
                st["Xs"][i] = _standardised(env.state.cohort.report[None], shift, scale)
                proba, favourable = env.honest_decisions(env.state.cohort)
                st["p"][i], st["favourable"][i] = proba[:, self._fav], favourable
            return np.stack(obs)
        data = [env.reset_until_fit(seed) for env, seed in zip(envs, seeds, strict=True)]
        try:
            fit_batch([env.learner for env in envs], data)
        except ConfigError as exc:
            source = self._first.scenario.source
            raise ConfigError(f"{source}: fitting the first model: {exc}") from None
        for env in envs:
            env.reset_after_fit()
        for i in worlds:
            self._load_world(i)
        # every world's observation at once (the others' state, and so theirs, unchanged)
        return self._observation()[worlds]

    def _load_world(self, i: int) -> None:
        """World `i`'s state as its `RecourseEnv` has just reset it (all but what its
        observation computes: the standardised reports, P(favourable), the decisions)."""
        env = self.envs[i]
        st, c = self._state, env.state.cohort
        st["X"][i], st["report"][i], st["group"][i], st["query"][i] = (
            c.X,
            c.report,
            c.group,
            c.query,
        )
        st["u"][i], st["v"][i], st["y0"][i], st["record"][i] = c.u, c.v, c.y0, c.record
        st["theta"][i] = env.learner.param_vector()
        if "x_scale" in env.learner.state_:
            st["x_shift"][i] = env.learner.state_["x_shift"].numpy()
            st["x_scale"][i] = env.learner.state_["x_scale"].numpy()
        st["feature_mean"][i], st["feature_scale"][i] = (
            env.state.feature_mean,
            env.state.feature_scale,
        )
        st["acceptance"][i] = 0.0
        st["true_outcome"][i] = 0.0
        st["query_acceptance"][i] = 0.0
        if self._oar_action:
            st["controlled"][i] = env.state.last["controlled"]
        st["round"][i] = 0
        st["person"][i] = c.person
        for name, keys in self._keys.items():
            keys[i] = env.state.keys[name]
        if self._remembers:
            state = env.learner.state_
            bounds = np.cumsum(state["round_sizes"].numpy().astype(np.int64))[:-1]
            self._memory[i] = list(
                zip(
                    np.split(state["X_mem"].numpy().copy(), bounds),
                    np.split(state["y_mem"].numpy().copy(), bounds),
                    strict=True,
                )
            )
        self._world_rngs[i] = env.state.streams[WORLD]
        for p, rngs in self._pop_rngs.items():
            rngs[i] = env.state.streams[population_stream(p)]
            bits = rngs[i].bit_generator.state
            self._pending[p][i] = bits["uinteger"] if bits["has_uint32"] else None

    # -- step ------------------------------------------------------------------------------
    def step(self, actions) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        guards.check_step(self)
        if not self._state:
            raise gym.error.ResetNeeded("call reset() before step()")
        mode = self._autoreset_mode
        if mode == AutoresetMode.DISABLED and self._ended.any():
            raise gym.error.ResetNeeded(
                f"worlds {np.flatnonzero(self._ended).tolist()} ended: reset them "
                "(options={'reset_mask': mask}) before step()"
            )
        a = checked_action(actions, self.action_space.shape)
        # worlds that start again this step play a round too (simpler than leaving them
        # out); their reset below replaces it, streams included
        obs, reward, query_success, cost = self._play_round(a)
        B = self.num_envs
        # a fresh cohort every round, or FICO's applicants who all stay: never empty
        terminated = np.zeros(B, bool)
        truncated = self._state["round"] >= self._rounds
        info: dict[str, Any] = {
            "round": self._state["round"].copy(),
            "query_success": query_success,
            "cost": cost,
        }
        if mode == AutoresetMode.NEXT_STEP and self._ended.any():
            # worlds that ended last step start again now
            again = np.flatnonzero(self._ended).tolist()
            obs[again] = self._reset_worlds(again, [None] * len(again), None)
            reward[again], query_success[again], cost[again] = 0.0, 0.0, 0.0
            truncated[again] = False
            info["round"][again] = 0
        ended = terminated | truncated
        for key in list(info):
            info["_" + key] = np.ones(B, bool)
        if mode == AutoresetMode.SAME_STEP and ended.any():
            final_obs = np.full(B, None, dtype=object)
            again = np.flatnonzero(ended).tolist()
            for i in again:
                final_obs[i] = obs[i].copy()
            obs[again] = self._reset_worlds(again, [None] * len(again), None)
            info["final_obs"], info["_final_obs"] = final_obs, ended.copy()
            ended[:] = False
        self._ended = ended
        self._obs = obs
        return obs.copy(), reward, terminated, truncated, info

    def _play_round(self, actions: np.ndarray):
        """Steps 2-6 of a round in every world (`RecourseEnv.play_round`, batched)."""
        st = self._state
        B, n, d = st["X"].shape
        theta, report, group = st["theta"], st["report"], st["group"]

        # respond: no responding populations natively (`native_reason`)
        self._phase("respond", report=report)

        # 2. decision on the (honest) reports of the fresh cohort
        scaling = st["x_shift"], st["x_scale"]
        p_before, favourable_before = st["p"], st["favourable"]  # (the observation's)
        cut = None
        if self._places is not None:
            cut = np.min(np.where(favourable_before, p_before, np.inf), axis=1)
        self._phase("decide", p=p_before, favourable=favourable_before)

        # 3. individual recourse (same round), every world's seekers at once
        X_rep, X_true = report.copy(), st["X"].copy()
        tried, cost = np.zeros((B, n), bool), np.zeros((B, n))
        seekers = [
            self._individual(s, theta, X_rep, p_before, favourable_before, tried, cost, cut)
            for s in self._deciding
        ]
        # only the seekers' reports can have changed (each population's, flat indices into
        # (B, n), apart): the changes of the others are 0
        seekers = np.sort(np.concatenate([np.zeros(0, np.intp), *seekers]))
        X_rows, report_rows = X_rep.reshape(B * n, d), report.reshape(B * n, d)
        change = X_rows.take(seekers, 0) - report_rows.take(seekers, 0)
        causal = np.flatnonzero(self._causal)
        X_true.reshape(B * n, d)[seekers[:, None], causal] += change[:, causal]
        changed = np.zeros((B, n), bool)
        changed.reshape(-1)[seekers] = (change[:, causal] != 0).any(-1)
        moved = tried.any(1)
        p_final, favourable = p_before, favourable_before
        if moved.any():  # decided again on the final reports, where anyone moved
            world, row = np.divmod(seekers[(change != 0).any(-1)], n)
            p_final = p_before.copy()
            Xs_moved = _standardised(X_rep[world, row], scaling[0][world], scaling[1][world])
            logits = np.einsum("rd,rd->r", Xs_moved, theta[world, :d]) + theta[world, d]
            p_final[world, row] = sigmoid(logits) if self._fav == 1 else 1.0 - sigmoid(logits)
            favourable = favourable_before.copy()
            favourable[moved] = self._decide(p_final[moved], group[moved], moved)
        self._phase(
            "individual_recourse",
            report=X_rep,
            X=X_true,
            tried=tried,
            cost=cost,
            p=p_final,
            favourable=favourable,
        )

        # 4. outcomes
        flat = SimpleNamespace(
            y0=st["y0"].reshape(-1), u=st["u"].reshape(-1), group=group.reshape(-1)
        )
        y = self._first.world.outcome(flat, X_true.reshape(-1, d), changed.reshape(-1))
        y = y.reshape(B, n)
        true_favourable = y == self._fav
        query = self._query_mask(self._first.scenario.query, st["query"], group, st["y0"])
        self._phase("outcomes", y=y, query=query)

        # 5. the controlled collectives perturb the training rows (`train`: every row, or
        # with selective labels dropped the approved ones; `RecourseEnv.training_rows`)
        X_train = X_rep.copy()
        y_train = np.where(st["record"] >= 0, st["record"], y)
        train = np.ones((B, n), bool)
        if drops_rejected(self._labels):
            train = favourable.copy()
        elif self._labels.selective:  # the rejected give the unfavourable label
            y_train = np.where(favourable, y_train, 0 if self._fav != 0 else 1)
        participants = np.zeros((B, n), bool)
        cost_sum, cost_count = np.zeros(B), np.zeros(B)
        update_start = None  # the refits OAR solved, to start the update from
        solved = None  # OAR's refits, where the update's are the same but for its moves
        settings = None  # the controlled collective's OAR settings, world by world
        for s in self._training:
            eligible = self._select(s, group, y_train) & ~participants & train
            if s.spec.decisions == "favourable":
                eligible &= favourable
            elif s.spec.decisions == "unfavourable":
                eligible &= ~favourable
            oar = s.name == "controlled" and s.spec.action != "shift"
            alpha = None
            if oar:  # each world's OAR settings (for α now, the observation's summary later)
                settings = [s.oar_settings(a) for a in actions]
                alpha = np.array([x.participation for x in settings])
            joined = self._recruit(s, eligible, group, train, alpha)
            # the participants' flat indices into (B, n) (faster than (world, row) pairs)
            flat = np.flatnonzero(joined)
            world = flat // n
            X_rows = X_train.reshape(B * n, d)
            if oar:
                self._eligible = eligible.sum(1)
                delta, update_start, solved = self._oar(
                    s, settings, X_train, y_train, train, joined
                )
                if s is not self._training[-1]:  # (a later collective moves other rows)
                    solved = None
                delta = _flat_rows(delta, flat)
                X_rows[flat] += delta
            elif len(world):
                clipped = np.clip(actions, -1.0, 1.0)
                delta = s.perturb(X_rows.take(flat, 0), clipped[world, y_train.reshape(-1)[flat]])
                X_rows[flat] += delta
            if len(world):
                own_sum = np.bincount(world, s.action_set.cost(delta), minlength=B)
                own_count = np.bincount(world, minlength=B)
                cost_sum += own_sum
                cost_count += own_count
                if oar:
                    self._own_cost = _share(own_sum, own_count)
            elif oar:
                self._own_cost = np.zeros(B)
            participants |= joined
        collective_cost = np.divide(cost_sum, cost_count, out=np.zeros(B), where=cost_count > 0)
        self._phase(
            "collective",
            X_train=X_train,
            y_train=y_train,
            train=train,
            participants=participants,
            collective_cost=collective_cost,
        )

        # 6. update: a refit on the window's rows, all worlds in one batched Newton solve
        solver = (self._C, self._tol, self._max_iter)
        if self._oar_action:
            new_theta, one_class = self._update(
                theta, update_start, X_train, y_train, train, solved
            )
        elif self._remembers:
            new_theta, one_class = window_refit_batch(
                theta, self._memory, self._window, X_train, y_train, train, scaling, *solver
            )
        else:
            new_theta, one_class = last_round_refit_batch(theta, X_train, y_train, scaling, *solver)
        if one_class.any():
            warnings.warn(
                f"LogisticRegression: the refit rows of {int(one_class.sum())} world(s) hold "
                "one class; their previous parameters are kept",
                SingleClassWarning,
                stacklevel=3,
            )
        st["theta"] = theta = new_theta
        self._phase("update", theta=theta)

        # the query group's success under the updated model (honest reports), the reward
        p_after = _p_favourable(theta, st["Xs"], self._fav)
        got = self._decide(p_after, group)
        goal = self._first.scenario.query.goal
        if goal != self._fav:
            got = (p_after > 0.5) == (goal == 1)  # the argmax of two classes
        n_query = query.sum(1)
        query_success = _share((got & query).sum(1), n_query)
        reward = query_success - self._first.scenario.reward.cost_weight * collective_cost

        # what the observation remembers of the round
        size = _group_counts(group, np.ones((B, n), bool), self._G)
        st["acceptance"] = _share(_group_counts(group, favourable, self._G), size)
        st["true_outcome"] = _share(_group_counts(group, true_favourable, self._G), size)
        st["query_acceptance"] = _share((favourable & query).sum(1), n_query)
        st["round"] = st["round"] + 1
        if self._oar_action:
            st["controlled"] = self._controlled_summary(settings, cut, participants)

        if self._fico:
            self._next_applicants(X_true, X_rep, favourable, y)
        else:
            self._next_cohort()
        self._phase(
            "advance",
            query_success=query_success,
            reward=reward,
            next_report=st["report"],
            next_person=st["person"],
        )
        return self._observation(), reward, query_success, collective_cost

    def _phase(self, name: str, **arrays: np.ndarray) -> None:
        if self.on_phase is not None:
            self.on_phase(name, arrays)

    # -- pieces of a round -------------------------------------------------------------------
    def _decide(self, p: np.ndarray, group: np.ndarray, worlds=slice(None)) -> np.ndarray:
        """Favourable decisions (B, n) from P(favourable) under the decision rule, of the
        cohorts of `worlds` (a mask or slice of the B worlds; capacity ties are broken by
        the cohort's ids and this round's lottery, as in the single env)."""
        if self._places is not None:
            priority = None
            if self._first.lottery:
                person, round_ = self._state["person"][worlds], self._state["round"][worlds]
                rounds = np.broadcast_to(round_[:, None] + 1, person.shape)
                priority = keyed_uniforms(self._keys[TIES][worlds][:, None], person, rounds)
            return capacity_decisions(p, self._places, priority)
        return p >= self._thresholds(group)

    def _thresholds(self, group: np.ndarray) -> np.ndarray:
        """`RecourseEnv.thresholds` of every world's rows (B, n)."""
        return self._first.thresholds(group.reshape(-1)).reshape(group.shape)

    def _query_mask(self, spec, world_query, group, y0) -> np.ndarray:
        flat = SimpleNamespace(
            query=world_query.reshape(-1), group=group.reshape(-1), y0=y0.reshape(-1)
        )
        return self._first.query_mask(spec, flat).reshape(group.shape)

    def _select(self, s, group: np.ndarray, labels: np.ndarray) -> np.ndarray:
        mask = s.select(group.reshape(-1), labels.reshape(-1), self._first.group_labels)
        return mask.reshape(group.shape)

    def _individual(self, s, theta, X_rep, p, favourable_before, tried, cost, cut) -> np.ndarray:
        """One individual population's same-round recourse in every world (in place):
        `Individual.act` (participation α from its stream, the exact min-cost δ), the
        capacity rule's idle ties and `adapt`, as `RecourseEnv.seek_recourse`. Returns
        the seekers (flat indices into (B, n), increasing): the rows it may have moved."""
        B, n, d = X_rep.shape
        st = self._state
        acted = tried  # (one population acts per person: the earlier ones' movers are out)
        seekers = ~favourable_before & ~acted & self._select(s, st["group"], st["y0"])
        rngs = self._pop_rngs[s.population]
        uniforms = np.empty((B, n))
        for i in range(B):  # (each world's draws straight into its row)
            rngs[i].random(out=uniforms[i])
        trying = seekers & (uniforms < s.spec.participation)
        # the seekers' flat indices into (B, n): reads gather with `take`, as numpy's
        # indexing by (world, row) pairs is several times slower
        flat = np.flatnonzero(trying)
        if not len(flat):
            return flat
        world = flat // n

        def rows_of(a: np.ndarray) -> np.ndarray:  # a[world, row] of a (B, n, ...) array
            return _flat_rows(a, flat)

        X_rows = rows_of(X_rep)
        if s.action_set.epsilon > 0:
            # the goal's log-odds and their gradient in x, per row (`goal_margin`)
            sign = 1.0 if self._fav == 1 else -1.0
            # (the seekers have not moved yet: their standardised reports are the cohort's)
            Xs_rows = rows_of(st["Xs"])
            theta_rows = theta[:, :d].take(world, 0)
            value = sign * (np.einsum("rd,rd->r", Xs_rows, theta_rows) + theta[:, d].take(world))
            coef = sign * theta_rows / st["x_scale"].take(world, 0)
            if cut is not None:
                target = cut.take(world)
            else:
                target = rows_of(self._thresholds(st["group"]))
            margin = s.spec.margin
            if not isinstance(margin, int | float):  # drawn per person, as the single env
                q = keyed_uniforms(
                    self._keys[margin_stream(s.population)].take(world), rows_of(st["person"])
                )
                margin = seeker_margins(margin, q)
            need = target + margin
            delta = linear_min_cost(value, coef, X_rows, s.action_set, need, margin)
            found_cost = np.asarray(s.action_set.cost(delta))
        else:  # no budget: they try, and move nothing
            delta, found_cost = np.zeros_like(X_rows), np.zeros(len(world))
        found_tried = np.ones(len(world), bool)
        if cut is not None:
            # rejected at the cut-off by a tie: nothing to move, so nobody tries
            idle = tie_key(rows_of(p)) >= tie_key(cut.take(world))
            if idle.any():
                delta[idle], found_cost[idle], found_tried[idle] = 0.0, 0.0, False
        found = IndividualResult(delta, found_tried, found_cost)
        res = adapt(s.spec, found, rows_of(st["v"]), action_set=s.action_set, X=X_rows)
        X_rep.reshape(B * n, d)[flat] += res.delta  # (flat: faster than by (world, row))
        tried.reshape(-1)[flat] |= res.tried
        cost.reshape(-1)[flat] = np.where(res.tried, res.cost, cost.reshape(-1)[flat])
        return flat

    def _recruit(
        self, s, eligible: np.ndarray, group: np.ndarray, train: np.ndarray, alpha=None
    ) -> np.ndarray:
        """Who of each world's eligible takes part (`recruit`: its graph, then α), every
        world's graph as one disjoint union; `train` (B, n): each world's training rows
        (a complete graph's; an SBM's are every row); `alpha` (B,): each world's α (None:
        the population's)."""
        B, n = eligible.shape
        spec = s.spec.graph
        rngs = self._pop_rngs[s.population]
        if alpha is None:
            alpha = s.spec.participation
        else:
            alpha = alpha[:, None]
        if spec.kind == "complete":  # one uniform per training row, in row order
            counts = np.count_nonzero(train, axis=1).tolist()
            uniforms = np.ones((B, n))
            uniforms[train] = np.concatenate([rngs[i].random(counts[i]) for i in range(B)])
            return eligible & (uniforms < alpha)
        return recruit_sbm(
            s,
            eligible,
            group,
            self._first.group_labels,
            rngs,
            self._pending[s.population],
            self._block_plans.setdefault(s.population, {}),
            None if np.ndim(alpha) == 0 else alpha[:, 0],
        )

    def _oar(self, s, settings, X_train, y_train, train, joined):
        """The controlled collective's OAR in every world whose action acts
        (`Controlled.act` with ``action: oar``, batched: `oar_batch`; `settings`: each
        world's `Controlled.oar_settings`). Returns the perturbations (B, n, d), the
        refits solved (B, D), to start the update from (NaN where no OAR ran), and
        (the worlds solved, their `Refits`, the members' moves; None: none solved)."""
        st, first = self._state, self._first
        B, n, d = X_train.shape
        delta = np.zeros((B, n, d))
        start = np.full((B, d + 1), np.nan)
        qspec = s.spec.query or first.scenario.query
        qmask = self._query_mask(qspec, st["query"], st["group"], st["y0"])
        # (idle settings: ε = 0)
        eps = np.array([x.epsilon for x in settings])
        goal = np.array([oar_goal(x.goal, int(qspec.goal), first.n_classes) for x in settings])
        solving = joined.any(1) & qmask.any(1) & (eps > 0)
        worlds = np.flatnonzero(solving)
        if not len(worlds):
            return delta, start, None
        order, new_rows, X_new, y_new = _training_first(worlds, train, X_train, y_train)
        members = _rows_of(joined, worlds, order) & new_rows
        shift, scale = st["x_shift"][worlds], st["x_scale"][worlds]
        refits = Refits(
            X_new,
            y_new,
            new_rows,
            self._older_rounds(worlds),
            shift,
            scale,
            members,
            np.flatnonzero(s.action_set.actionable),
        )
        # the queries, standardised, transposed, the intercept's row 1
        q_counts = qmask[worlds].sum(1)
        q_order = np.argsort(~qmask[worlds], axis=1, kind="stable")[:, : int(q_counts.max())]
        q_rows = np.arange(q_order.shape[1]) < q_counts[:, None]
        Q = _rows_of(st["report"], worlds, q_order)
        Zq = np.zeros((len(worlds), d + 1, q_order.shape[1]))
        Zq[:, :d] = ((Q - shift[:, None, :]) / scale[:, None, :]).transpose(0, 2, 1)
        Zq[:, d] = 1.0
        Zq *= q_rows[:, None, :]
        moved, start[worlds] = oar_batch(
            refits,
            Zq,
            q_rows,
            goal[worlds],
            eps[worlds],
            s.action_set,
            st["theta"][worlds],
            s.spec.steps,
            self._C,
            self._tol,
            self._max_iter,
        )
        delta[worlds[refits.mw], order[refits.mw, refits.mr]] = moved
        return delta, start, (worlds, refits, moved)

    def _older_rounds(self, worlds) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each of `worlds`' remembered rounds that its next refit keeps (the window's
        all but the newest), as one (rows, labels)."""
        keep = self._window - 1
        out = []
        for i in np.asarray(worlds).tolist():
            rounds = self._memory[i][-keep:] if keep and self._remembers else []
            if rounds:
                out.append(
                    (np.concatenate([x for x, _ in rounds]), np.concatenate([y for _, y in rounds]))
                )
            else:
                out.append((np.zeros((0, self._d)), np.zeros(0)))
        return out

    def _update(self, theta, start, X_train, y_train, train, solved=None):
        """The learner's update with the OAR action: each world's refit on its window
        (`newton_solve`, the single learner's path) from the refit its collective solved
        (`start`; NaN: none, from θ), as `RecourseEnv`'s update passes it; `solved`:
        `_oar`'s worlds, refits and moves, whose rows are the update's once the members
        have moved (None: built here). Returns (θ⁺, one class kept θ)."""
        st = self._state
        B = len(X_train)
        theta = theta.copy()
        one_class = np.zeros(B, bool)
        worlds = np.flatnonzero(train.any(1))  # (a world without rows is not updated)
        if not len(worlds):
            return theta, one_class
        if solved is not None and np.array_equal(solved[0], worlds):
            _, refits, moved = solved
            refits.set_members(None, moved)  # (x + δ, as `X_train` holds them)
        else:
            _, new_rows, X_new, y_new = _training_first(worlds, train, X_train, y_train)
            refits = Refits(
                X_new,
                y_new,
                new_rows,
                self._older_rounds(worlds),
                st["x_shift"][worlds],
                st["x_scale"][worlds],
            )
        first = np.where(np.isnan(start[worlds]), theta[worlds], start[worlds])
        th_star, _, _, step, one = newton_solve(
            first,
            refits.Zt,
            refits.outer,
            refits.fill,
            refits.y,
            refits.rows_float,
            self._C,
            self._tol,
            self._max_iter,
            one_class=refits.one_class,
            not_y=refits.not_y,
        )
        theta[worlds] = np.where(one[:, None], theta[worlds], th_star - step)
        one_class[worlds] = one
        if self._remembers:  # each world's training rows, one gather for all of them
            bounds = np.cumsum(train.sum(1)[worlds])[:-1]
            rows = np.split(X_train[train], bounds)
            labels = np.split(y_train[train].astype(np.float64), bounds)
            for i, X_i, y_i in zip(worlds.tolist(), rows, labels, strict=True):
                rounds = self._memory[i]
                rounds.append((X_i, y_i))
                del rounds[: -self._window]
        return theta, one_class

    def _controlled_summary(self, settings, cut, participants) -> np.ndarray:
        """`recourse_sim.env.round.controlled_summary` of every world's round (`settings`:
        each world's OAR settings)."""
        s, first = self._first.controlled, self._first
        B = len(settings)
        applied = np.array([s.applied_action(x) for x in settings])
        eps = s.action_set.epsilon
        cost = np.minimum(self._own_cost / eps, 1.0) if eps > 0 else np.zeros(B)
        if cut is None:
            cutoff = np.full(B, decision_cutoff(first, None))
        else:
            cutoff = np.where(np.isfinite(cut), cut, 0.5)
        eligible = self._eligible
        joined = participants.sum(1)
        return np.column_stack(
            [
                applied,
                cost,
                cutoff,
                _share(joined, eligible),
                eligible / participants.shape[1],
            ]
        )

    def _next_applicants(
        self, X_true: np.ndarray, X_rep: np.ndarray, favourable: np.ndarray, y: np.ndarray
    ) -> None:
        """FICO's applicants of the next round: everyone stays (`Pool.advance`) with the
        scores the round left them (`Lending.after_round`: loans move them, and so the
        reports, as `RecourseEnv.carry_on`), and fresh outcome noise from each world's
        own stream (``random(n)``; nobody arrives, which draws nothing)."""
        st, world = self._state, self._first.world
        B, n, d = X_true.shape
        flat = SimpleNamespace(group=st["group"].reshape(-1))
        X_after = world.after_round(
            flat, X_true.reshape(-1, d), favourable.reshape(-1), y.reshape(-1)
        ).reshape(B, n, d)
        st["report"] = X_rep + (X_after - X_true)
        st["X"] = X_after
        u = np.empty((B, n))
        for rng, row in zip(self._world_rngs, u, strict=True):
            rng.random(out=row)
        st["u"] = u
        flat = SimpleNamespace(
            y0=np.zeros(B * n, np.int64), u=u.reshape(-1), group=st["group"].reshape(-1)
        )
        everyone = np.ones(B * n, bool)
        st["y0"] = world.outcome(flat, X_after.reshape(-1, d), everyone).reshape(B, n)

    def _next_cohort(self) -> None:
        """The next fresh cohort of every world: each world's draws from its own world
        stream (`school_numbers`, then ``random((2, n))``), one transform of the stack."""
        st, n, B = self._state, self._n, self.num_envs
        kw = self._school
        numbers = school_numbers(
            n,
            self._world_rngs,
            frac_n2=kw["frac_n2"],
            extracurricular_rate_n1=kw["extracurricular_rate_n1"],
            extracurricular_rate_n2=kw["extracurricular_rate_n2"],
        )
        uv = np.empty((B, 2, n))  # School.newcomers' u and v, after the cohort's draws
        for rng, row in zip(self._world_rngs, uv, strict=True):
            rng.random(out=row)
        c = school_from_numbers(
            numbers,
            ability_gap=kw["ability_gap"],
            h1_capacity=kw["h1_capacity"],
            proxy_weight=kw["proxy_weight"],
            admission_noise=kw["admission_noise"],
            query_quantile=kw["query_quantile"],
            outcome_threshold=kw["outcome_threshold"],
            outcome_sharpness=kw["outcome_sharpness"],
        )
        st["X"] = c.X
        st["report"] = c.X  # newcomers apply honestly (nothing changes the array in place)
        st["group"], st["query"] = c.neighbourhood, c.query
        st["u"], st["v"] = uv[:, 0], uv[:, 1]
        st["y0"] = (st["u"] < c.success_probability).astype(np.int64)
        st["record"] = c.y_hist if self._record_hist else np.full(c.y_hist.shape, -1, np.int64)
        st["person"] = st["person"] + n  # a fresh cohort's ids follow the last one's

    def _observation(self) -> np.ndarray:
        """`RecourseEnv.observation` of every world (the next cohort, the updated model)."""
        st = self._state
        B, n, _d = st["X"].shape
        theta, report, group = st["theta"], st["report"], st["group"]
        st["Xs"] = _standardised(report, st["x_shift"], st["x_scale"])
        st["p"] = p = _p_favourable(theta, st["Xs"], self._fav)
        st["favourable"] = favourable = self._decide(p, group)
        query = self._query_mask(self._first.scenario.query, st["query"], group, st["y0"])
        params = np.clip(np.sign(theta) * np.log1p(np.abs(theta)), -PARAM_BOUND, PARAM_BOUND)
        size = _group_counts(group, np.ones((B, n), bool), self._G)
        pending = _group_counts(group, favourable, self._G) / np.maximum(size, 1)
        goal = self._first.scenario.query.goal
        p_goal = p if goal == self._fav else 1.0 - p
        n_query = query.sum(1)
        some = n_query > 0
        per_query = np.maximum(n_query, 1)
        q_stats = np.stack(
            [
                (favourable & query).sum(1) / per_query,
                np.where(query, p_goal, 0.0).sum(1) / per_query,
                n_query / n,
            ],
            1,
        )
        mean_report = np.einsum("bn,bnd->bd", query.astype(np.float64), report) / per_query[:, None]
        z = (mean_report - st["feature_mean"]) / st["feature_scale"]
        q_stats[~some] = 0.0
        z[~some] = 0.0
        obs = np.concatenate(
            [
                params,
                pending,
                st["acceptance"],
                st["true_outcome"],
                q_stats,
                st["query_acceptance"][:, None],
                np.clip(z, -FEATURE_BOUND, FEATURE_BOUND),
                (st["round"] / self._rounds)[:, None],
                *(
                    (np.tile(self._first.allowance_left(), (B, 1)), st["controlled"])
                    if self._oar_action
                    else ()
                ),
            ],
            axis=1,
        ).astype(np.float32)
        space = self.single_observation_space
        return np.clip(obs, space.low, space.high)

    def close_extras(self, **kwargs: Any) -> None:
        guards.mark_closed(self)
        for env in self.envs:
            env.close()


# -- helpers -----------------------------------------------------------------------------------


def _training_first(worlds, train, X_train, y_train):
    """Of `worlds`, each one's training rows first, in row order, padded to the most
    (selective labels: a number per world): (each one's row order, which are rows,
    the rows, their labels as floats)."""
    if train[worlds].all():  # every row trains (no copy of the order)
        n = train.shape[1]
        order = np.broadcast_to(np.arange(n), (len(worlds), n))
        return order, np.ones((len(worlds), n), bool), X_train[worlds], y_train[worlds] * 1.0
    order = np.argsort(~train[worlds], axis=1, kind="stable")
    counts = train[worlds].sum(1)
    order = order[:, : int(counts.max())]
    new_rows = np.arange(order.shape[1]) < counts[:, None]
    X_new = _rows_of(X_train, worlds, order)
    y_new = _rows_of(y_train, worlds, order).astype(np.float64)
    return order, new_rows, X_new, y_new


def _flat_rows(a: np.ndarray, flat: np.ndarray) -> np.ndarray:
    """The rows of a (B, n, ...) array at flat indices into (B, n) (faster than indexing by
    (world, row) pairs)."""
    B, n = a.shape[:2]
    return a.reshape(B * n, *a.shape[2:]).take(flat, 0)


def _rows_of(a: np.ndarray, worlds: np.ndarray, order: np.ndarray) -> np.ndarray:
    """a[worlds[k], order[k, i]] (k, i, ...) of a (B, n, ...) array, by flat indices (numpy's
    take_along_axis is several times slower)."""
    flat = (worlds[:, None] * a.shape[1] + order).ravel()
    return _flat_rows(a, flat).reshape(*order.shape, *a.shape[2:])


def _p_favourable(theta: np.ndarray, Xs: np.ndarray, favourable: int) -> np.ndarray:
    """P(favourable) (B, n) of binary logistic models θ = (coef, intercept) per world, on
    their standardised features `Xs` (B, n, d)."""
    d = Xs.shape[-1]
    if d == 1:  # one product a row (numpy's stacked matmul is slow on a last axis of 1)
        logits = Xs[..., 0] * theta[:, 0, None] + theta[:, d, None]
    else:
        logits = np.matmul(Xs, theta[:, :d, None])[..., 0] + theta[:, d, None]
    p1 = sigmoid(logits)
    return p1 if favourable == 1 else 1.0 - p1


def _standardised(X: np.ndarray, shift: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """(X − shift) / scale, the learner's standardisation: X (B, n, d) with per-world
    (B, d) constants, or rows X (r, d) with their own rows of constants. Feature by
    feature (numpy is slow on a short last axis broadcast against a stack); the same
    operations per number as the single learner's."""
    out = np.empty(X.shape)
    for j in range(X.shape[-1]):
        s, c = (shift[:, j, None], scale[:, j, None]) if X.ndim == 3 else (shift[:, j], scale[:, j])
        np.subtract(X[..., j], s, out=out[..., j])
        np.divide(out[..., j], c, out=out[..., j])
    return out


def _group_counts(group: np.ndarray, flag: np.ndarray, G: int) -> np.ndarray:
    """Per world and group, how many rows have `flag` set: (B, G)."""
    return np.stack([(flag & (group == g)).sum(1) for g in range(G)], 1)


def _share(count: np.ndarray, size: np.ndarray) -> np.ndarray:
    """count / size, 0 where size is 0 (`recourse_sim.env.metrics._share`, per world)."""
    return np.divide(count, size, out=np.zeros(np.shape(count)), where=size > 0)
