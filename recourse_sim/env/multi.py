"""Competing collectives: a PettingZoo ``ParallelEnv`` with one agent per collective.

Every ``controlled`` population of the scenario is an agent. All act in the same round
on the same training data, each on behalf of its own query group (the population's
``query``, or the scenario's), so their goals may conflict: in
``competing_collectives`` the H1 students of N2 under-report extracurriculars for the
high achievers of N2 while the H1 students of N1 over-report them for N1, and H1 has a
fixed number of places.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded
from pettingzoo import AECEnv, ParallelEnv

from recourse_sim.agents.strategies import Controlled
from recourse_sim.env.recourse_env import FEATURE_BOUND, RecourseEnv, checked_action
from recourse_sim.errors import ConfigError
from recourse_sim.scenarios import QuerySpec, Scenario

__all__ = ["CollectivesEnv", "RecourseParallelEnv", "env", "parallel_env"]


class CollectivesEnv(RecourseEnv):
    """A `RecourseEnv` whose round takes one action per controlled population: the
    engine of `RecourseParallelEnv`, and what `recourse-sim run` and ``validate`` build
    for a scenario of several collectives. Its `step` takes no action: every collective
    plays its zero action, as a run plays a single collective's."""

    single_controlled: ClassVar[bool] = False

    def step(self, action: None = None) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if action is not None:
            raise ConfigError(
                "several collectives act through RecourseParallelEnv, one action per agent; "
                "step() takes none (each collective's zero action)"
            )
        self._check_step()
        zeros = {
            s.population: np.zeros(s.action_shape(self.n_classes), np.float32)
            for s in self.strategies
            if isinstance(s, Controlled)
        }
        return self.play_round(zeros, None)


class RecourseParallelEnv(ParallelEnv):
    """Several collectives, each its own agent, acting on one online-retrained model.

    ## Description

    The world, the learner, the decisions, individual recourse and any ``collective_oar``
    population are those of `RecourseEnv` (one ``step`` is one round). Every
    ``controlled`` population is an agent named after it; a training row joins at most
    one collective (the first, in scenario order, whose eligibility, social graph and
    participation admit it).

    ## Action Spaces

    Agent ``p``: ``Box(-1, 1, (k, m_p), float32)``, one shift per label class of the
    m_p features population p can change, in budget units (as `RecourseEnv`).

    ## Observation Spaces

    Agent ``p``: the `RecourseEnv` observation (computed for the scenario's query
    group) followed by p's own query group in the next cohort: its acceptance under the
    current model, its mean P(goal), its share of the cohort (each in [0, 1]) and its
    mean features in history SDs (±10).

    ## Rewards

    Agent ``p``: ``query_success_p − λ · cost_p − w · trimmed_p``, the share of p's query
    group that the updated model gives p's goal minus λ times the mean cost of p's
    participants (0 if nobody took part) minus ``reward.trimmed_weight`` w times the share
    of p's participants who changed their reports whose rows a trimmed refit dropped.
    ``infos[p]["rewards"]`` holds the components.

    ## Episode End

    Never terminated; every agent is truncated after ``scenario.rounds`` rounds.

    ## Arguments

    ``RecourseParallelEnv(scenario="competing_collectives", render_mode=None, **overrides)``
    as `RecourseEnv`. ``state()`` returns the shared observation.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "name": "recourse_sim_collectives_v0",
        "render_modes": RecourseEnv.metadata["render_modes"],
        "is_parallelizable": True,
    }

    def __init__(
        self,
        scenario: Scenario | str | Path | None = None,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        self.env = CollectivesEnv(
            "competing_collectives" if scenario is None else scenario,
            render_mode=render_mode,
            **overrides,
        )
        self.render_mode = render_mode
        self.metadata = {**type(self).metadata, "render_modes": self.env.metadata["render_modes"]}
        self._strategies = {
            s.population: s for s in self.env.strategies if isinstance(s, Controlled)
        }
        if not self._strategies:
            raise ConfigError(
                f"{self.env.scenario.source}: populations: a RecourseParallelEnv needs at least "
                "one controlled population (each is an agent)"
            )
        self.possible_agents = list(self._strategies)
        self.agents: list[str] = []
        k, d = self.env.n_classes, self.env.n_features
        shared = self.env.observation_space
        low = np.concatenate([shared.low, np.zeros(3), np.full(d, -FEATURE_BOUND)])
        high = np.concatenate([shared.high, np.ones(3), np.full(d, FEATURE_BOUND)])
        self.observation_spaces = {
            a: spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)
            for a in self.possible_agents
        }
        self.action_spaces = {
            a: spaces.Box(-1.0, 1.0, shape=s.action_shape(k), dtype=np.float32)
            for a, s in self._strategies.items()
        }
        self.state_space = shared

    @property
    def scenario(self) -> Scenario:
        return self.env.scenario

    def observation_space(self, agent: str) -> spaces.Box:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Box:
        return self.action_spaces[agent]

    def _query(self, agent: str) -> QuerySpec:
        return self._strategies[agent].spec.query or self.env.scenario.query

    def _observations(self) -> dict[str, np.ndarray]:
        env = self.env
        c = env.state.cohort
        assert c is not None
        shared = env.observation()
        proba, favourable = env.honest_decisions(c)
        out = {}
        for agent in self.agents:
            spec = self._query(agent)
            mask = env.query_mask(spec, c)
            if mask.any():
                got = favourable if spec.goal == env.favourable else proba.argmax(1) == spec.goal
                stats = [got[mask].mean(), proba[mask, spec.goal].mean(), mask.mean()]
                z = (c.report[mask].mean(0) - env.state.feature_mean) / env.state.feature_scale
            else:
                stats, z = [0.0, 0.0, 0.0], np.zeros(env.n_features)
            obs = np.concatenate([shared, stats, np.clip(z, -FEATURE_BOUND, FEATURE_BOUND)])
            space = self.observation_spaces[agent]
            out[agent] = np.clip(obs.astype(np.float32), space.low, space.high)
        return out

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
        _, info = self.env.reset(seed=seed)  # (PettingZoo's options: none read here)
        self.agents = list(self.possible_agents)
        return self._observations(), {a: dict(info) for a in self.agents}

    def step(
        self, actions: dict[str, np.ndarray]
    ) -> tuple[
        dict[str, np.ndarray],
        dict[str, float],
        dict[str, bool],
        dict[str, bool],
        dict[str, dict[str, Any]],
    ]:
        if not self.agents:
            raise ResetNeeded("call reset() before step() (and after the episode ends)")
        checked = {}
        for agent in self.agents:
            if agent not in actions:
                raise ConfigError(f"no action for agent {agent!r} (agents: {self.agents})")
            try:
                checked[agent] = checked_action(actions[agent], self.action_spaces[agent].shape)
            except ConfigError as e:
                raise ConfigError(f"agent {agent!r}: {e}") from None
        unknown = set(actions) - set(self.agents)
        if unknown:
            raise ConfigError(
                f"actions for unknown agents {sorted(unknown)} (agents: {self.agents})"
            )
        _, _, _, truncated, info = self.env.play_round(checked, None)
        spec = self.env.scenario.reward
        lam, trim_weight = spec.cost_weight, spec.trimmed_weight
        rewards, infos = {}, {}
        for agent in self.agents:
            own = info["collectives"][agent]
            trimmed = own.get("trimmed", 0.0)  # (present only under a trimmed refit)
            rewards[agent] = float(own["query_success"] - lam * own["cost"] - trim_weight * trimmed)
            components = {
                "query_success": own["query_success"],
                "cost": own["cost"],
                "cost_weight": lam,
            }
            if "trimmed" in own or trim_weight:
                components |= {"trimmed": trimmed, "trimmed_weight": trim_weight}
            infos[agent] = {
                "round": info["round"],
                "rewards": components,
                "participants": own["participants"],
            }
        observations = self._observations()
        terminations = dict.fromkeys(self.agents, False)
        truncations = dict.fromkeys(self.agents, bool(truncated))
        if truncated:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def state(self) -> np.ndarray:
        """The shared observation (the `RecourseEnv` one)."""
        if self.env.state.cohort is None:
            raise ResetNeeded("call reset() before state()")
        return self.env.observation()

    def render(self) -> str | None:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def parallel_env(
    scenario: Scenario | str | Path | None = None, **kwargs: Any
) -> RecourseParallelEnv:
    """PettingZoo's conventional constructor name."""
    return RecourseParallelEnv(scenario, **kwargs)


def env(scenario: Scenario | str | Path | None = None, **kwargs: Any) -> AECEnv:
    """PettingZoo's AEC (agent by agent) form of `parallel_env`: the agents act in turn
    (`agent_selection`), and the round is played once the last of them has acted
    (PettingZoo's ``parallel_to_aec``)."""
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(parallel_env(scenario, **kwargs))
