"""Coordination policies for the controlled collective: the analytic baselines.

A policy chooses the environment's action each round: the shared perturbation per
label class that the ``controlled`` collective applies to its training reports (see
`recourse_sim.env.RecourseEnv`, Action Space). Every policy here has the interface of a
trained stable-baselines3 policy,

    action, state = policy.predict(obs, state=None, episode_start=None, deterministic=True)

so one evaluation loop (`evaluate`) serves trained and analytic policies alike.

The analytic baselines are *privileged*: they are bound to the environment they act in
(`bind`) and read what an observation does not carry — the learner, the round's training
rows and who joined the collective. They get them from `preview_round`, which plays the
round's first half in a sandbox copy of the environment (`get_state`/`set_state`):
everything a round draws before the collective acts (individual recourse, outcomes,
social graph, participation) does not depend on the action, so the sandbox sees exactly
the rows and members the real step will use.

* ``none`` (`NoCollective`): the collective stays idle (zero action).
* ``individual`` (`IndividualDirection`): no coordination — the collective's members
  move their reports the way individual recourse (OAR Eq. 2, projected gradient) moves
  a query subject under the current model: "look more like someone who gets the goal".
* ``oar`` (`CollectiveOARPolicy`): Online Algorithmic Recourse (OAR Eq. 3, horizon H)
  solved against the learner's own update rule on the round's real training rows and
  members (`recourse_sim.recourse.collective.collective_recourse`).
* ``optimum`` (`ToyOptimum`): the closed-form optimum of the ``coordination_toy``
  scenario (two-class nearest centroid): the goal class moves straight towards the query
  centre, the other class straight away from it, each with its whole budget.

The per-member solutions of ``individual`` and ``oar`` are expressed in the action space
by `members_to_action` (the mean move of each class's moving members, in budget units):
a shared direction per class, the same freedom a learned policy has. For nearest
centroid this loses nothing (every member of a class has the same hypergradient); for
other learners it is the honest restriction of OAR to the controlled collective's
action space.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from recourse_sim.agents.strategies import Controlled
from recourse_sim.errors import ConfigError
from recourse_sim.recourse import ActionSet

if TYPE_CHECKING:
    import gymnasium as gym

    from recourse_sim.env import RecourseEnv
    from recourse_sim.learners import Learner

__all__ = [
    "BASELINES",
    "AnalyticPolicy",
    "CollectiveOARPolicy",
    "IndividualDirection",
    "NoCollective",
    "Policy",
    "RoundPreview",
    "ToyOptimum",
    "evaluate",
    "make_baseline",
    "members_to_action",
    "preview_round",
]


class Policy(Protocol):
    """What `evaluate` needs: stable-baselines3's ``predict``."""

    def predict(
        self,
        observation: np.ndarray,
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]: ...


# -- looking inside a round ------------------------------------------------------------------


@dataclass(frozen=True)
class RoundPreview:
    """What the controlled collective faces this round (before it acts)."""

    learner: Learner  # the model the training rows will update (a sandbox copy)
    X: np.ndarray  # (N, d) the training rows as reported so far
    y: np.ndarray  # (N,) their training labels
    members: np.ndarray  # (N,) bool: who joined the controlled collective
    queries: np.ndarray  # (m, d) the query group's honest features
    goal: int  # the class the query group wants
    action_set: ActionSet  # the collective's action set (budget ε included)


class _Captured(Exception):
    """Raised by the recorder to stop a sandbox round once it has what it needs."""

    def __init__(self, preview: RoundPreview) -> None:
        self.preview = preview


class _Recorder(Controlled):
    """A controlled strategy that reports what it would act on and stops the round."""

    def act(self, learner, X, y, participants, queries, goal, action=None) -> np.ndarray:
        raise _Captured(
            RoundPreview(
                learner=learner,
                X=np.array(X, copy=True),
                y=np.array(y, copy=True),
                members=np.array(participants, dtype=bool, copy=True),
                queries=np.array(queries, copy=True),
                goal=int(goal),
                action_set=self.action_set,
            )
        )


def _controlled(env: RecourseEnv) -> Controlled:
    found = [s for s in env.strategies if isinstance(s, Controlled)]
    if not found:
        raise ConfigError(
            f"scenario {env.scenario.name!r} has no controlled population: "
            "a coordination policy has nothing to drive"
        )
    return found[0]


def _sandbox(env: RecourseEnv) -> RecourseEnv:
    """A second environment of the same scenario whose controlled strategy records."""
    from recourse_sim.env import RecourseEnv

    box = RecourseEnv(env.scenario)
    target = _controlled(box)
    box.strategies = [
        _Recorder(s.population, s.spec, s.action_set) if s is target else s for s in box.strategies
    ]
    return box


def preview_round(env: RecourseEnv, sandbox: RecourseEnv | None = None) -> RoundPreview:
    """The training rows, members and queries the controlled collective will act on in
    `env`'s next step (without changing `env`).

    `sandbox` (from a previous call, `AnalyticPolicy` keeps one) saves rebuilding the
    world; it is overwritten with `env`'s state.
    """
    box = sandbox if sandbox is not None else _sandbox(env)
    box.set_state(env.get_state())
    try:
        box.step(np.zeros(box.action_space.shape, np.float32))
    except _Captured as captured:
        return captured.preview
    raise AssertionError("the controlled collective did not act in the sandbox round")


def members_to_action(
    delta: np.ndarray, y: np.ndarray, strategy: Controlled, n_classes: int
) -> np.ndarray:
    """The shared per-class action closest to per-member moves `delta` (N, d).

    For each class c, the mean move of the members of class c who moved at all,
    in budget units (``delta / budget_scale``), clipped to [-1, 1]; 0 for a class
    nobody of which moved. Applied by the environment, each member of class c then
    reports ``x + project(mean move)``.
    """
    idx = strategy.actionable_index
    units = np.asarray(delta, dtype=np.float64)[:, idx] / strategy.budget_scale
    moved = np.abs(units).sum(1) > 0
    action = np.zeros((n_classes, len(idx)), np.float32)
    for c in range(n_classes):
        rows = moved & (np.asarray(y) == c)
        if rows.any():
            action[c] = np.clip(units[rows].mean(0), -1.0, 1.0)
    return action


# -- the policies ----------------------------------------------------------------------------


class AnalyticPolicy:
    """Base class: a policy bound to one `RecourseEnv` whose state it may read.

    Subclasses implement `action()`; `predict` returns it for a single observation (or
    a batch of one, as from a one-environment vector env).
    """

    name: str = "analytic"

    def __init__(self, env: gym.Env | None = None) -> None:
        self.env: RecourseEnv | None = None
        self._sandbox: RecourseEnv | None = None
        if env is not None:
            self.bind(env)

    def bind(self, env: gym.Env) -> AnalyticPolicy:
        """Act in `env` (a `RecourseEnv` or a wrapper of one) from now on."""
        from recourse_sim.env import RecourseEnv

        inner = env.unwrapped
        if not isinstance(inner, RecourseEnv):
            raise ConfigError(f"{self.name} policy needs a RecourseEnv, got {type(inner).__name__}")
        if self.env is not inner:
            self.env, self._sandbox = inner, None
        return self

    @property
    def strategy(self) -> Controlled:
        """The controlled strategy of the bound environment."""
        return _controlled(self._bound())

    def _bound(self) -> RecourseEnv:
        if self.env is None:
            raise ConfigError(f"{self.name} policy is not bound to an environment: call bind(env)")
        return self.env

    def preview(self) -> RoundPreview:
        """`preview_round` of the bound environment (the sandbox is kept)."""
        env = self._bound()
        if self._sandbox is None:
            self._sandbox = _sandbox(env)
        return preview_round(env, self._sandbox)

    def action(self) -> np.ndarray:
        """This round's action, shape ``env.action_space.shape``."""
        raise NotImplementedError

    def predict(
        self,
        observation: np.ndarray,
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """stable-baselines3's interface; the observation only sets the batch shape."""
        env = self._bound()
        action = np.asarray(self.action(), dtype=np.float32).reshape(env.action_space.shape)
        obs = np.asarray(observation)
        if obs.ndim == len(env.observation_space.shape) + 1:
            if obs.shape[0] != 1:
                raise ConfigError(
                    f"{self.name} policy is bound to one environment, got a batch of "
                    f"{obs.shape[0]} observations"
                )
            return action[None], state
        return action, state

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class NoCollective(AnalyticPolicy):
    """``none``: the collective does not act."""

    name = "none"

    def action(self) -> np.ndarray:
        return np.zeros(self._bound().action_space.shape, np.float32)


class IndividualDirection(AnalyticPolicy):
    """``individual``: members move as individual recourse would move a query subject.

    Individual recourse (OAR Eq. 2, `steps` projected-gradient steps within the
    collective's own action set) for each query subject under the current model; every
    class gets the mean move in budget units. Uncoordinated: it ignores that the reports
    train the *next* model.
    """

    name = "individual"

    def __init__(self, env: gym.Env | None = None, steps: int = 20) -> None:
        super().__init__(env)
        self.steps = steps

    def action(self) -> np.ndarray:
        from recourse_sim.recourse import individual_recourse

        env, strategy = self._bound(), self.strategy
        p = self.preview()
        shape = env.action_space.shape
        if len(p.queries) == 0 or strategy.action_set.epsilon == 0:
            return np.zeros(shape, np.float32)
        res = individual_recourse(
            p.learner, p.queries, p.goal, strategy.action_set, method="pgd", steps=self.steps
        )
        row = members_to_action(res.delta, np.zeros(len(res.delta), np.int64), strategy, 1)
        return np.repeat(row, shape[0], axis=0)


class CollectiveOARPolicy(AnalyticPolicy):
    """``oar``: collective OAR (Eq. 3) on the round's real rows and members, horizon H."""

    name = "oar"

    def __init__(
        self, env: gym.Env | None = None, horizon: int = 1, steps: int = 10, solver: str = "pgd"
    ) -> None:
        super().__init__(env)
        self.horizon, self.steps, self.solver = horizon, steps, solver

    def action(self) -> np.ndarray:
        from recourse_sim.recourse.collective import collective_recourse

        env, strategy = self._bound(), self.strategy
        p = self.preview()
        shape = env.action_space.shape
        if not p.members.any() or len(p.queries) == 0 or strategy.action_set.epsilon == 0:
            return np.zeros(shape, np.float32)
        res = collective_recourse(
            p.learner,
            p.X,
            p.y,
            p.queries,
            p.goal,
            strategy.action_set,
            self.horizon,
            members=p.members,
            steps=self.steps,
            method=self.solver,
        )
        return members_to_action(res.delta, p.y, strategy, shape[0])

    def __repr__(self) -> str:
        return f"CollectiveOARPolicy(horizon={self.horizon}, steps={self.steps})"


class ToyOptimum(AnalyticPolicy):
    """``optimum``: the closed-form optimal action of a two-class nearest-centroid world.

    A query point q is given class 1 when it is nearer the class-1 centroid m₁ than the
    class-0 centroid m₀. A shift of at most ε per member moves a centroid by at most
    (share of members in the class) · ε, and ‖q − m₀‖ − ‖q − m₁‖ is largest when m₁
    moves straight towards q and m₀ straight away from it; with q on the line through
    the class means (as in ``coordination_toy``) this also maximises the margin of the
    query group around q, so it maximises its expected success. The whole budget is
    worth spending when λ is below the success gained per unit of cost (the scenario's
    numbers: see ``tests/rl/test_coordination_toy.py``).

    Needs a ``gaussian`` world with two classes, a nearest-centroid learner and unit
    cost weights on every feature (a unit action is then a unit move).
    """

    name = "optimum"

    def action(self) -> np.ndarray:
        from recourse_sim.env.worlds import Gaussian

        env = self._bound()
        world, strategy = env.world, self.strategy
        if not isinstance(world, Gaussian) or world.n_classes != 2:
            raise ConfigError("ToyOptimum needs a two-class gaussian world (coordination_toy)")
        if not np.allclose(strategy.action_set.weights_, 1.0):
            raise ConfigError("ToyOptimum needs unit cost weights")
        goal = env.scenario.query.goal
        q = np.asarray(world.spec.query_mean, dtype=np.float64)
        action = np.zeros(env.action_space.shape, np.float32)
        for c in range(2):
            towards = q - world.means[c]
            unit = towards / np.linalg.norm(towards)
            action[c] = unit if c == goal else -unit
        return action


BASELINES: dict[str, type[AnalyticPolicy]] = {
    cls.name: cls for cls in (NoCollective, IndividualDirection, CollectiveOARPolicy, ToyOptimum)
}
"""The analytic policies by name."""


def make_baseline(name: str, env: gym.Env | None = None, **kwargs: Any) -> AnalyticPolicy:
    """An analytic policy by name (``none``, ``individual``, ``oar``, ``optimum``)."""
    cls = BASELINES.get(name)
    if cls is None:
        raise ConfigError(f"unknown baseline policy {name!r} (valid: {', '.join(BASELINES)})")
    return cls(env, **kwargs)


# -- evaluation ------------------------------------------------------------------------------


def evaluate(policy: Policy, env: gym.Env, seeds: list[int] | range) -> list[dict[str, float]]:
    """One episode per seed; per episode the mean per-round query success and reward.

    An `AnalyticPolicy` is bound to `env` first. Returns rows with keys ``seed``,
    ``query_success``, ``reward`` and ``cost`` (means over the episode's rounds).
    """
    if isinstance(policy, AnalyticPolicy):
        policy.bind(env)
    rows = []
    for seed in seeds:
        obs, _ = env.reset(seed=int(seed))
        success, rewards, costs = [], [], []
        done = False
        while not done:
            action, _ = policy.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, info = env.step(action)
            success.append(info["rewards"]["query_success"])
            costs.append(info["rewards"]["cost"])
            rewards.append(reward)
            done = terminated or truncated
        rows.append(
            {
                "seed": int(seed),
                "query_success": float(np.mean(success)),
                "reward": float(np.mean(rewards)),
                "cost": float(np.mean(costs)),
            }
        )
    return rows
