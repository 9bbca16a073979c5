"""Who acts in the world: population strategies, social graphs and coordination policies.

``REGISTRY`` maps each strategy name a scenario may use to its class: ``truthful``,
``individual``, ``collective_oar``, ``controlled`` and ``genre``. `agents.policies` holds
the analytic coordination policies of a controlled collective (``BASELINES``: ``none``,
``individual``, ``oar``, ``optimum``) and `agents.training` trains one with
stable-baselines3's PPO (the ``rl`` extra).
"""

from agents.policies import BASELINES, AnalyticPolicy, evaluate, make_baseline
from agents.social import (
    SocialGraph,
    independent_cascade,
    reach,
    recruit,
    stochastic_block_model,
)
from agents.strategies import (
    REGISTRY,
    CollectiveOAR,
    Controlled,
    GenreRecourse,
    Individual,
    IndividualResult,
    Strategy,
    Truthful,
    make_strategy,
)

__all__ = [
    "BASELINES",
    "REGISTRY",
    "AnalyticPolicy",
    "CollectiveOAR",
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
