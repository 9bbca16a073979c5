"""The Gymnasium environments of recourse-sim; importing this module registers them.

| ID | scenario |
|---|---|
| ``recourse_sim/SchoolAssignment-v0`` | ``school_assignment`` |
| ``recourse_sim/Lending-v0`` | ``lending_fico`` |
| ``recourse_sim/Recourse-v0`` | any, via ``scenario=`` (default ``school_assignment``) |

Without importing it first, ``gym.make("recourse_sim.env:recourse_sim/Lending-v0")``
imports it for you (Gymnasium's ``module:id`` form).
"""

from __future__ import annotations

import gymnasium as gym

from recourse_sim.env.recourse_env import RecourseEnv

ENTRY_POINT = "recourse_sim.env.recourse_env:RecourseEnv"

ENV_IDS: dict[str, dict] = {
    "recourse_sim/SchoolAssignment-v0": {"scenario": "school_assignment"},
    "recourse_sim/Lending-v0": {"scenario": "lending_fico"},
    "recourse_sim/Recourse-v0": {},
}
"""Registered environment IDs and their default keyword arguments."""


def register_envs() -> None:
    """Register every ID of `ENV_IDS` (idempotent)."""
    for env_id, kwargs in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=ENTRY_POINT, kwargs=dict(kwargs))


register_envs()

__all__ = ["ENV_IDS", "RecourseEnv", "register_envs"]
