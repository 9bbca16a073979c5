"""Who acts in the world: population strategies, social graphs and coordination policies.

``REGISTRY`` maps each strategy name a scenario may use to its class: ``truthful``,
``individual``, ``collective_oar``, ``controlled``, ``genre``, ``collective_blackbox``
(OAR on a surrogate fitted to the deployed model's answers) and ``collective_signal``
(planted signals).
`recourse_sim.agents.policies` holds the analytic coordination policies of a controlled
collective (``BASELINES``: ``none``, ``individual``, ``oar``, ``optimum``) and
`recourse_sim.agents.training` trains one with stable-baselines3's PPO (the ``rl`` extra).

The folder is ``agents/`` at the top of the repository and installs as
``recourse_sim.agents``. Strategies and social graphs sit below the environment (it
uses them); the coordination policies sit above it (they step it), so they are loaded
on first use and importing this package never imports the environment.
"""

from __future__ import annotations

import importlib
from typing import Any

from recourse_sim.agents.blackbox import CollectiveBlackbox
from recourse_sim.agents.signal import CollectiveSignal
from recourse_sim.agents.social import (
    SocialGraph,
    independent_cascade,
    reach,
    recruit,
    stochastic_block_model,
)
from recourse_sim.agents.strategies import (
    OAR_ACTION,
    OAR_PLAN_ACTION,
    OAR_THRESHOLD,
    REGISTRY,
    BestResponse,
    CollectiveOAR,
    Controlled,
    GenreRecourse,
    Individual,
    IndividualResult,
    Strategy,
    Truthful,
    make_strategy,
)
from recourse_sim.scenarios import STRATEGIES

assert tuple(REGISTRY) == STRATEGIES, "the scenario schema and the registry must agree"

__all__ = [
    "BASELINES",
    "OAR_ACTION",
    "OAR_PLAN_ACTION",
    "OAR_THRESHOLD",
    "REGISTRY",
    "AnalyticPolicy",
    "BestResponse",
    "CollectiveBlackbox",
    "CollectiveOAR",
    "CollectiveSignal",
    "Controlled",
    "GenreRecourse",
    "Individual",
    "IndividualResult",
    "SocialGraph",
    "Strategy",
    "Truthful",
    "evaluate",
    "independent_cascade",
    "make_baseline",
    "make_strategy",
    "reach",
    "recruit",
    "stochastic_block_model",
]

_POLICIES = ("BASELINES", "AnalyticPolicy", "evaluate", "make_baseline")


def __getattr__(name: str) -> Any:
    if name in _POLICIES:
        return getattr(importlib.import_module("recourse_sim.agents.policies"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
