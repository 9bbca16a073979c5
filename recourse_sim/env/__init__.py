"""The Gymnasium environments of recourse-sim (registered by ``import recourse_sim``;
the IDs are in `recourse_sim.registration`).

Gymnasium's ``module:id`` form works too: ``gym.make("recourse_sim:recourse_sim/Lending-v1")``.
"""

from __future__ import annotations

from recourse_sim.env.recourse_env import RecourseEnv
from recourse_sim.registration import ENV_IDS, register_envs

__all__ = ["ENV_IDS", "RecourseEnv", "register_envs"]
