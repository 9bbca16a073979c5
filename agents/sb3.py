"""Stable-Baselines3 on the batched environment (the ``rl`` extra).

`BatchedVecEnv` is an SB3 ``VecEnv`` over a `recourse_sim.env.batched.BatchedRecourseEnv`:
SB3 steps B worlds as one batched pass instead of a ``DummyVecEnv`` of B
`RecourseEnv`. SB3 resets a finished episode within the step that ended it (its
``terminal_observation`` in the info); the adapter runs the batched env with
Gymnasium's same-step autoreset for that. ``train_ppo(..., batched=True)`` trains on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env import VecEnv

from recourse_sim.env.batched import BatchedRecourseEnv

__all__ = ["BatchedVecEnv"]


class BatchedVecEnv(VecEnv):
    """SB3's ``VecEnv`` interface to a `BatchedRecourseEnv`.

    `action_map` maps SB3's batch of actions before they reach the worlds (e.g. onto
    `recourse_sim.agents.training.feasible_range`, as ``FeasibleActions`` does for one
    env); `attributes` answers ``get_attr`` for every world (the first world's
    `RecourseEnv` answers the rest). Each step's infos carry, per world, the reward's
    components under ``rewards`` (as `RecourseEnv`'s info does), and for a finished
    episode ``terminal_observation`` and ``TimeLimit.truncated``.
    """

    def __init__(
        self,
        venv: BatchedRecourseEnv,
        action_map: Callable[[np.ndarray], np.ndarray] | None = None,
        attributes: dict[str, Any] | None = None,
    ):
        venv.autoreset_mode = AutoresetMode.SAME_STEP
        self.venv = venv
        self.action_map = action_map
        self.attributes = dict(attributes or {})
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
        self._actions: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        seeds = None if all(s is None for s in self._seeds) else list(self._seeds)
        obs, _ = self.venv.reset(seed=seeds)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        actions = np.asarray(actions, dtype=np.float32)
        self._actions = self.action_map(actions) if self.action_map is not None else actions

    def step_wait(self):
        obs, reward, terminated, truncated, info = self.venv.step(self._actions)
        done = terminated | truncated
        infos: list[dict[str, Any]] = [
            {
                "rewards": {
                    "query_success": float(info["query_success"][i]),
                    "cost": float(info["cost"][i]),
                }
            }
            for i in range(self.num_envs)
        ]
        for i in np.flatnonzero(done):
            infos[i]["terminal_observation"] = info["final_obs"][i]
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        return obs, reward.astype(np.float32), done, infos

    def close(self) -> None:
        self.venv.close()

    def _indices(self, indices) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, int):
            return [indices]
        return list(indices)

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        rows = self._indices(indices)
        if attr_name in self.attributes:
            return [self.attributes[attr_name] for _ in rows]
        return [getattr(self.venv.envs[i], attr_name) for i in rows]

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        raise AttributeError(f"BatchedVecEnv does not set {attr_name!r} on its worlds")

    def env_method(self, method_name: str, *args, indices=None, **kwargs) -> list[Any]:
        raise AttributeError(f"BatchedVecEnv calls no method {method_name!r} on its worlds")

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        return [False for _ in self._indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None for _ in range(self.num_envs)]
