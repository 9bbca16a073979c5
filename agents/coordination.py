"""Baselines and oracles of the coordination tasks, and the scores RL papers report.

Every policy here acts through the ``-v2`` action (`OAR_ACTION`: act, α, ε, goal; the
zero action is the collective's own OAR) and is bound to the environment it plays, so a
schedule can read the round it is in. They answer `Policy.predict` like a trained model.

* `Idle`: the collective never acts (its members still seek recourse on their own).
* `Constant`: one setting every round; ``Constant()`` is OAR every round, and
  `constant_grid` the settings of α and ε a grid search picks the best of.
* `Schedule`: OAR in a fixed set of rounds, idle in the others (`first_k`,
  `evenly_spread`, `last_k`).
* `Myopic`: each round, the candidate action whose *own round's* reward is highest,
  found by trying each from a saved state (privileged: it sees this round's outcome).
* `privileged_oracle`: the upper reference. From the seed's start it plays the best
  baseline of that seed, improved by rollouts: each round it tries every candidate
  action from the saved state, follows the base policy to the episode's end, and keeps
  the action of the highest return (common random numbers: restoring a state restores
  every stream, so each branch meets the same people and noise). A rollout never does
  worse than its base policy (Bertsekas' rollout), so the oracle is at least every
  baseline on every seed.

Scores: `normalised_score` (J(π) − J(idle)) / (J(best simple baseline) − J(idle)),
`gap_closed` (the share of the oracle's lead over the best simple baseline that π
closes), and `iqm_interval`, the interquartile mean over runs × tasks with a stratified
bootstrap interval (runs resampled within each task), the method of Agarwal et al.
(2021, the ``rliable`` library).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from recourse_sim.agents.strategies import OAR_ACTION
from recourse_sim.errors import ConfigError

__all__ = [
    "Constant",
    "Idle",
    "Myopic",
    "OracleResult",
    "Schedule",
    "TaskPolicy",
    "branch",
    "constant_grid",
    "episode_return",
    "evenly_spread",
    "first_k",
    "gap_closed",
    "iqm",
    "iqm_interval",
    "last_k",
    "normalised_score",
    "oar_setting",
    "privileged_oracle",
    "simple_baselines",
]


def oar_setting(act: bool = True, alpha: float = 1.0, budget: float = 1.0) -> np.ndarray:
    """The ``-v2`` action of OAR at a share `alpha` of the file's participation and
    `budget` of its ε (1, 1: the file's OAR), aimed at the query's own goal; or idle."""
    for name, share in (("alpha", alpha), ("budget", budget)):
        if not 0.0 <= share <= 1.0:
            raise ConfigError(f"{name} share must be in [0, 1], got {share}")
    action = np.zeros(len(OAR_ACTION), np.float32)
    action[OAR_ACTION.index("act")] = 0.0 if act else -1.0
    action[OAR_ACTION.index("alpha")] = alpha - 1.0
    action[OAR_ACTION.index("budget")] = budget - 1.0
    return action


IDLE = oar_setting(act=False)
OAR = oar_setting()


class TaskPolicy:
    """A policy of the ``-v2`` action bound to the environment it plays (`bind`)."""

    name = "policy"

    def __init__(self) -> None:
        self.env: Any = None

    def bind(self, env: gym.Env) -> TaskPolicy:
        self.env = env.unwrapped
        if tuple(self.env.action_space.shape) != (len(OAR_ACTION),):
            raise ConfigError(
                f"{self.name}: the task's action must be OAR's settings (shape "
                f"({len(OAR_ACTION)},)), got {self.env.action_space.shape}"
            )
        return self

    @property
    def round(self) -> int:
        """The round about to be played (0-based)."""
        return int(self.env.state.round)

    @property
    def rounds(self) -> int:
        return int(self.env.scenario.rounds)

    def action(self) -> np.ndarray:
        raise NotImplementedError

    def predict(self, observation=None, state=None, episode_start=None, deterministic=True):
        if self.env is None:
            raise ConfigError(f"{self.name}: bind(env) before predict")
        return self.action().copy(), state

    def __repr__(self) -> str:
        return self.name


class Idle(TaskPolicy):
    name = "idle"

    def action(self) -> np.ndarray:
        return IDLE


class Constant(TaskPolicy):
    """One setting every round (default: the file's OAR)."""

    def __init__(self, alpha: float = 1.0, budget: float = 1.0) -> None:
        super().__init__()
        self.alpha, self.budget = alpha, budget
        self.setting = oar_setting(True, alpha, budget)
        self.name = "oar" if (alpha, budget) == (1.0, 1.0) else f"oar(α×{alpha:g}, ε×{budget:g})"

    def action(self) -> np.ndarray:
        return self.setting


class Schedule(TaskPolicy):
    """OAR in the rounds `pick(T, K)` names (0-based), idle otherwise; K is the task's
    ``limit.acting_rounds`` or, without one, `default_k`(T)."""

    def __init__(self, name: str, pick: Callable[[int, int], Sequence[int]]) -> None:
        super().__init__()
        self.name = name
        self.pick = pick
        self.acting: frozenset[int] = frozenset()

    def bind(self, env: gym.Env) -> Schedule:
        super().bind(env)
        self.acting = frozenset(int(t) for t in self.pick(self.rounds, acting_rounds(self.env)))
        return self

    def action(self) -> np.ndarray:
        return OAR if self.round in self.acting else IDLE


def default_k(rounds: int) -> int:
    """Acting rounds of a schedule where the task sets none: a quarter of the episode."""
    return max(1, rounds // 4)


def acting_rounds(env: Any) -> int:
    """K: the controlled collective's ``limit.acting_rounds``, else `default_k`."""
    controlled = getattr(env, "controlled", None)
    limit = getattr(getattr(controlled, "spec", None), "limit", None)
    k = getattr(limit, "acting_rounds", None)
    return int(k) if k is not None else default_k(int(env.scenario.rounds))


def first_k() -> Schedule:
    return Schedule("first-K", lambda T, K: range(min(K, T)))


def last_k() -> Schedule:
    return Schedule("last-K", lambda T, K: range(max(T - K, 0), T))


def evenly_spread() -> Schedule:
    """K rounds spread evenly, the first at round 0: ⌊i·T/K⌋."""
    return Schedule("evenly spread", lambda T, K: sorted({(i * T) // K for i in range(min(K, T))}))


def constant_grid(levels: Sequence[float] = (0.25, 0.5, 0.75, 1.0)) -> list[Constant]:
    """Every constant setting of α and ε shares from `levels` (OAR at 1, 1)."""
    return [Constant(a, b) for a in levels for b in levels]


def simple_baselines() -> list[TaskPolicy]:
    """The baselines a coordination policy must beat: idle, OAR every round and the
    fixed schedules (the best constant setting comes from `constant_grid`)."""
    return [Idle(), Constant(), first_k(), evenly_spread(), last_k()]


class Myopic(TaskPolicy):
    """Each round, of `candidates` (default: idle, OAR and OAR at half ε), the action of
    the highest reward in this round, tried from the saved state (privileged)."""

    name = "myopic oracle"

    def __init__(self, candidates: Sequence[np.ndarray] | None = None) -> None:
        super().__init__()
        self.candidates = [np.asarray(a, np.float32) for a in (candidates or default_candidates())]

    def action(self) -> np.ndarray:
        env = self.env
        start = env.get_state()
        rewards = [branch(env, start, a)[0] for a in self.candidates]
        env.set_state(start)
        return self.candidates[int(np.argmax(rewards))]


def branch(
    env: Any, start: dict, first: np.ndarray, then: TaskPolicy | None = None
) -> tuple[float, int]:
    """From the saved state `start` of `env` (unwrapped): play `first`, then, if given,
    policy `then` to the episode's end. Returns the summed reward and the steps taken;
    `env` is left where the branch ended."""
    env.set_state(start)
    obs, total, terminated, truncated, _ = env.step(first)
    steps = 1
    while then is not None and not (terminated or truncated):
        obs, reward, terminated, truncated, _ = env.step(then.predict(obs)[0])
        total, steps = total + reward, steps + 1
    return float(total), steps


def default_candidates() -> list[np.ndarray]:
    """The actions the oracles choose among: idle, OAR, OAR at half its budget."""
    return [IDLE, OAR, oar_setting(budget=0.5)]


def episode_return(env: gym.Env, policy: TaskPolicy, seed: int) -> tuple[float, list[float]]:
    """Play one episode of `seed` with `policy` (bound to `env`); returns the mean
    reward per round and the rewards."""
    inner = env.unwrapped
    policy.bind(inner)
    obs, _ = inner.reset(seed=int(seed))
    rewards: list[float] = []
    done = False
    while not done:
        action, _ = policy.predict(obs)
        obs, reward, terminated, truncated, _ = inner.step(action)
        rewards.append(float(reward))
        done = terminated or truncated
    return float(np.mean(rewards)), rewards


@dataclass
class OracleResult:
    """The privileged oracle on one seed."""

    value: float  # mean reward per round
    base: str  # the baseline its rollouts follow (the seed's best)
    base_value: float  # that baseline's mean reward per round
    actions: list[np.ndarray] = field(default_factory=list)
    steps: int = 0  # environment steps the search took


def privileged_oracle(
    env: gym.Env,
    seed: int,
    bases: Sequence[TaskPolicy],
    candidates: Sequence[np.ndarray] | None = None,
    base_values: dict[str, float] | None = None,
) -> OracleResult:
    """The rollout of the best of `bases` on `seed` (see the module's docstring).

    `base_values`: each base's mean reward on this seed if already measured (same env,
    same seed), else they are played here. The bases must choose from the environment's
    state alone (the round, the model), as every baseline here does.
    """
    inner = env.unwrapped
    candidates = [np.asarray(a, np.float32) for a in (candidates or default_candidates())]
    values = dict(base_values or {})
    for policy in bases:
        if policy.name not in values:
            values[policy.name] = episode_return(inner, policy, seed)[0]
    base = max(bases, key=lambda p: values[p.name])
    base.bind(inner)
    obs, _ = inner.reset(seed=int(seed))
    steps = 0
    rewards: list[float] = []
    actions: list[np.ndarray] = []
    done = False
    while not done:
        start = inner.get_state()
        own, _ = base.predict(obs)
        options = [own, *(a for a in candidates if not np.array_equal(a, own))]
        returns = []
        for a in options:  # the first (the base's own action) wins ties
            total, taken = branch(inner, start, a, then=base)
            returns.append(total)
            steps += taken
        best = options[int(np.argmax(returns))]
        inner.set_state(start)
        obs, reward, terminated, truncated, _ = inner.step(best)
        steps += 1
        rewards.append(float(reward))
        actions.append(best)
        done = terminated or truncated
    value = float(np.mean(rewards))
    return OracleResult(value, base.name, values[base.name], actions, steps)


# -- scores ------------------------------------------------------------------------------------


def normalised_score(j: np.ndarray | float, j_idle: float, j_best: float) -> np.ndarray:
    """(J − J(idle)) / (J(best simple baseline) − J(idle)): 0 is idle, 1 the best
    simple baseline."""
    span = j_best - j_idle
    if not span > 0:
        raise ConfigError(
            f"the best simple baseline ({j_best:.6g}) is not above idle ({j_idle:.6g}): "
            "the task has nothing to normalise by"
        )
    return (np.asarray(j, np.float64) - j_idle) / span


def gap_closed(j: np.ndarray | float, j_best: float, j_oracle: float) -> np.ndarray:
    """The share of the oracle's lead over the best simple baseline that J closes
    (NaN where the oracle has no lead)."""
    lead = j_oracle - j_best
    out = (np.asarray(j, np.float64) - j_best) / lead if lead > 0 else np.nan
    return np.asarray(out, np.float64)


def iqm(scores: np.ndarray) -> float:
    """The interquartile mean of all `scores`: the mean after ⌊n/4⌋ values are cut from
    each end (scipy's ``trim_mean(·, 0.25)``, as rliable computes it)."""
    from scipy.stats import trim_mean

    return float(trim_mean(np.asarray(scores, np.float64).ravel(), 0.25))


def iqm_interval(
    scores: np.ndarray, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """IQM of `scores` (runs × tasks) and its stratified-bootstrap percentile interval:
    each replicate resamples the runs of every task, with replacement, within the task
    (Agarwal et al. 2021). Returns (IQM, low, high)."""
    from scipy.stats import trim_mean

    x = np.asarray(scores, np.float64)
    if x.ndim != 2 or min(x.shape) < 1:
        raise ConfigError(f"scores must be runs × tasks, got shape {x.shape}")
    rng = np.random.default_rng(seed)
    runs, tasks = x.shape
    picks = rng.integers(0, runs, size=(reps, runs, tasks))
    resampled = np.take_along_axis(x[None].repeat(reps, 0), picks, axis=1)
    stats = trim_mean(resampled.reshape(reps, -1), 0.25, axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(stats, [tail, 1.0 - tail])
    return iqm(x), float(low), float(high)
