"""Training a coordination policy with stable-baselines3's PPO (the ``rl`` extra).

`train_ppo` trains PPO on a scenario's controlled collective and returns the model and
its learning curve (one row per finished training episode). PPO acts through
`FeasibleActions`: its Gaussian's [-1, 1] is spread over the part of each action entry the
collective can use (a feature it may only under-report gets [-1, 0]), so no half of the
exploration is a no-op cut away by the projection. Everything random is seeded
from the one `seed`: the environments' ``reset(seed=…)`` (through SB3's vector env,
environment i gets ``seed + i``) and SB3's own generators (``PPO(seed=…)``); with one
torch thread, training twice with one seed gives the same curve.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    from recourse_sim.env import RecourseEnv

__all__ = [
    "FeasibleActions",
    "PPOConfig",
    "SeedCycle",
    "TrainedPolicy",
    "feasible_range",
    "make_env",
    "train_ppo",
]


@dataclass(frozen=True)
class PPOConfig:
    """PPO's settings for coordination problems (short episodes, a near-myopic reward);
    the rest are stable-baselines3's defaults."""

    timesteps: int = 4000
    """environment steps (rounds) of training, summed over envs"""
    n_envs: int = 1
    """environments stepped together (SB3's DummyVecEnv, or one batched env)"""
    n_steps: int = 100
    """rounds per environment between updates"""
    batch_size: int = 50
    """minibatch size of each gradient step"""
    n_epochs: int = 10
    """passes over each rollout"""
    learning_rate: float = 3e-3
    """Adam's step size"""
    gamma: float = 0.5
    """discount per round: the reward is mostly the next model's effect"""
    gae_lambda: float = 0.9
    """GAE's bias-variance trade-off"""
    ent_coef: float = 0.0
    """entropy bonus"""
    log_std_init: float = -0.5
    """initial log SD of the Gaussian policy (SD ≈ 0.6 action units)"""
    net_arch: tuple[int, ...] = (32, 32)
    """hidden layers of the policy and value networks"""

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (for a run's summary)."""
        return asdict(self)


def feasible_range(env: gym.Env) -> tuple[np.ndarray, np.ndarray]:
    """Per action entry (class × feature), the part of [-1, 1] the controlled collective's
    action set can use: [-1, 0] for a feature it may only decrease, [0, 1] for one it may
    only increase, [-1, 1] otherwise (and for a scenario without a controlled collective,
    or one whose action is OAR's settings, every one of which can act)."""
    inner = env.unwrapped
    shape = inner.action_space.shape
    low, high = -np.ones(shape), np.ones(shape)
    controlled = getattr(inner, "controlled", None)
    if controlled is not None and controlled.spec.action == "shift":
        aset = controlled.action_set
        idx = np.flatnonzero(aset.actionable)
        low[:, : len(idx)][:, aset.increase_mask[idx]] = 0.0
        high[:, : len(idx)][:, aset.decrease_mask[idx]] = 0.0
    return low, high


def _to_range(action: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """[-1, 1] → [low, high], entry by entry (batched actions too)."""
    a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
    return (low + (a + 1.0) / 2.0 * (high - low)).astype(np.float32)


class SeedCycle(gym.Wrapper):
    """Each episode resets with the next of `seeds`, in turn (a fixed set of training
    worlds, e.g. seeds 0–99, whatever seed the vector env passes)."""

    def __init__(self, env: gym.Env, seeds: list[int] | range) -> None:
        super().__init__(env)
        self.seeds = [int(s) for s in seeds]
        if not self.seeds:
            raise ValueError("SeedCycle needs at least one seed")
        self.episodes = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        seed = self.seeds[self.episodes % len(self.seeds)]
        self.episodes += 1
        return self.env.reset(seed=seed, options=options)


class FeasibleActions(gym.ActionWrapper):
    """The env with its action entries rescaled from [-1, 1] onto `feasible_range`."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.low, self.high = feasible_range(env)

    def action(self, action: np.ndarray) -> np.ndarray:
        return _to_range(action, self.low, self.high)


@dataclass
class TrainedPolicy:
    """A trained SB3 model acting in the unwrapped env: `predict` maps its actions through
    `feasible_range`, as during training (what `evaluate` and the baselines' loop need)."""

    model: PPO
    low: np.ndarray
    high: np.ndarray

    def predict(self, observation, state=None, episode_start=None, deterministic=True):
        action, state = self.model.predict(observation, state, episode_start, deterministic)
        return _to_range(action, self.low, self.high), state


def make_env(scenario: str, **overrides: Any) -> Callable[[], RecourseEnv]:
    """A function building the scenario's `RecourseEnv` (for SB3's vector envs)."""

    def build() -> RecourseEnv:
        from recourse_sim.env import RecourseEnv

        return RecourseEnv(scenario, **overrides)

    return build


@dataclass
class _Curve:
    rows: list[dict[str, float]] = field(default_factory=list)


def _callback(curve: _Curve, n_envs: int, rounds: int) -> BaseCallback:
    from stable_baselines3.common.callbacks import BaseCallback

    class LearningCurve(BaseCallback):
        """Records each finished episode: its mean reward and query success per round."""

        def _on_training_start(self) -> None:
            self._reward = np.zeros(n_envs)
            self._success = np.zeros(n_envs)
            self._episode = 0

        def _on_step(self) -> bool:
            rewards, dones = self.locals["rewards"], self.locals["dones"]
            for i, info in enumerate(self.locals["infos"]):
                self._reward[i] += rewards[i]
                self._success[i] += info["rewards"]["query_success"]
                if dones[i]:
                    self._episode += 1
                    curve.rows.append(
                        {
                            "timestep": int(self.num_timesteps),
                            "episode": self._episode,
                            "reward": float(self._reward[i] / rounds),
                            "query_success": float(self._success[i] / rounds),
                        }
                    )
                    self._reward[i] = self._success[i] = 0.0
            return True

    return LearningCurve()


def train_ppo(
    scenario: str,
    seed: int,
    config: PPOConfig | None = None,
    tensorboard: str | None = None,
    batched: bool = False,
    threads: int | None = 1,
    callback: BaseCallback | None = None,
    train_seeds: list[int] | range | None = None,
    **overrides: Any,
) -> tuple[TrainedPolicy, pd.DataFrame]:
    """Train PPO on `scenario` (with `overrides`) from `seed`.

    Returns the policy (the SB3 model is its ``model``) and its learning curve: one row
    per finished training episode with ``timestep``, ``episode``, ``reward`` and
    ``query_success`` (means per round).
    With `tensorboard` (a folder; needs the ``tensorboard`` package, in the ``rl`` extra)
    SB3 logs the run there as ``{scenario}_seed{seed}``.
    `batched`: step the ``n_envs`` environments as one native batched env
    (`recourse_sim.agents.sb3.BatchedVecEnv`; a scenario it does not batch is refused)
    instead of SB3's ``DummyVecEnv``; each world plays the rollout its seed gives the
    plain env, so training is the same, only faster.
    `threads`: torch's intra-op threads while training (restored afterwards). Default 1:
    PPO's small networks and round-sized tensors gain nothing from more threads, and on
    a busy machine torch's thread pool spins (as the ``recourse-sim run --threads``
    default). None leaves torch's own setting.
    `callback`: an SB3 callback run beside the learning-curve one (e.g. to evaluate
    the policy during training, or to stop it early by returning False).
    `train_seeds`: the episodes' seeds, in turn (`SeedCycle`; environment i of
    ``n_envs`` starts at the i-th); None: SB3's own seeding from `seed`.
    """
    import torch

    if threads is None:
        return _train_ppo(
            scenario, seed, config, tensorboard, batched, callback, train_seeds, overrides
        )
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _train_ppo(
            scenario, seed, config, tensorboard, batched, callback, train_seeds, overrides
        )
    finally:
        torch.set_num_threads(before)


def _train_ppo(
    scenario: str,
    seed: int,
    config: PPOConfig | None,
    tensorboard: str | None,
    batched: bool,
    callback: BaseCallback | None,
    train_seeds: list[int] | range | None,
    overrides: dict[str, Any],
) -> tuple[TrainedPolicy, pd.DataFrame]:
    import pandas as pd
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    config = config or PPOConfig()
    if batched and train_seeds is not None:
        raise ValueError("train_seeds needs the plain vector env (batched=False)")
    if batched:
        venv = _batched_venv(scenario, config.n_envs, seed, overrides)
    else:
        wrapper: Callable[[gym.Env], gym.Env] = FeasibleActions
        if train_seeds is not None:
            seeds = list(train_seeds)
            shares = iter(range(config.n_envs))

            def wrapper(env: gym.Env) -> gym.Env:  # env i starts at the i-th seed
                i = next(shares)
                return FeasibleActions(SeedCycle(env, seeds[i:] + seeds[:i]))

        venv = make_vec_env(
            make_env(scenario, **overrides),
            n_envs=config.n_envs,
            seed=seed,
            wrapper_class=wrapper,
        )
    rounds = venv.get_attr("scenario")[0].rounds
    model = PPO(
        "MlpPolicy",
        venv,
        learning_rate=config.learning_rate,
        n_steps=config.n_steps,
        batch_size=config.batch_size,
        n_epochs=config.n_epochs,
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
        ent_coef=config.ent_coef,
        policy_kwargs={
            "net_arch": list(config.net_arch),
            "log_std_init": config.log_std_init,
            "activation_fn": torch.nn.Tanh,
        },
        seed=seed,
        device="cpu",
        verbose=0,
        tensorboard_log=tensorboard,
    )
    curve = _Curve()
    callbacks = [_callback(curve, config.n_envs, rounds)]
    if callback is not None:
        callbacks.append(callback)
    model.learn(
        total_timesteps=config.timesteps,
        callback=callbacks,
        tb_log_name=f"{scenario}_seed{seed}",
    )
    low, high = venv.get_attr("low")[0], venv.get_attr("high")[0]
    venv.close()
    columns = ["timestep", "episode", "reward", "query_success"]
    return TrainedPolicy(model, low, high), pd.DataFrame(curve.rows, columns=columns)


def _batched_venv(scenario: str, n_envs: int, seed: int, overrides: dict[str, Any]):
    """`BatchedVecEnv` of `n_envs` worlds acting through `feasible_range`, seeded as SB3's
    ``make_vec_env`` seeds its envs (world i: ``seed + i``)."""
    from recourse_sim.agents.sb3 import BatchedVecEnv
    from recourse_sim.env.batched import BatchedRecourseEnv

    worlds = BatchedRecourseEnv(n_envs, scenario, **overrides)
    low, high = feasible_range(worlds.envs[0])
    venv = BatchedVecEnv(
        worlds,
        action_map=lambda actions: _to_range(actions, low, high),
        attributes={"low": low, "high": high},
    )
    venv.seed(seed)
    return venv
