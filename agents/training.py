"""Training a coordination policy with stable-baselines3's PPO (the ``rl`` extra).

`train_ppo` trains PPO on a scenario's controlled collective and returns the model and
its learning curve (one row per finished training episode). Everything random is seeded
from the one `seed`: the environments' ``reset(seed=…)`` (through SB3's vector env,
environment i gets ``seed + i``) and SB3's own generators (``PPO(seed=…)``); with one
torch thread, training twice with one seed gives the same curve.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    from recourse_sim.env import RecourseEnv

__all__ = ["PPOConfig", "make_env", "train_ppo"]


@dataclass(frozen=True)
class PPOConfig:
    """PPO's settings for coordination problems (short episodes, a near-myopic reward)."""

    timesteps: int = 4000  # environment steps (rounds) of training, summed over envs
    n_envs: int = 1  # environments stepped together (a DummyVecEnv)
    n_steps: int = 100  # rounds per environment between updates
    batch_size: int = 50  # minibatch size of each gradient step
    n_epochs: int = 10  # passes over each rollout
    learning_rate: float = 3e-3  # Adam step size
    gamma: float = 0.5  # discount per round: the reward is mostly the next model's effect
    gae_lambda: float = 0.9  # GAE's bias-variance trade-off
    ent_coef: float = 0.0  # entropy bonus
    log_std_init: float = -0.5  # initial log SD of the Gaussian policy (SD ≈ 0.6 action units)
    net_arch: tuple[int, ...] = (32, 32)  # hidden layers of the policy and value networks

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    **overrides: Any,
) -> tuple[PPO, pd.DataFrame]:
    """Train PPO on `scenario` (with `overrides`) from `seed`.

    Returns the model and its learning curve: one row per finished training episode
    with ``timestep``, ``episode``, ``reward`` and ``query_success`` (means per round).
    """
    import pandas as pd
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    config = config or PPOConfig()
    venv = make_vec_env(make_env(scenario, **overrides), n_envs=config.n_envs, seed=seed)
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
    )
    curve = _Curve()
    model.learn(total_timesteps=config.timesteps, callback=_callback(curve, config.n_envs, rounds))
    venv.close()
    columns = ["timestep", "episode", "reward", "query_success"]
    return model, pd.DataFrame(curve.rows, columns=columns)
