"""Recourse: action sets, individual recourse, collective (online) recourse, and
recourse-aware decisions (Ross et al.'s recourse loss and PARE thresholds)."""

from recourse_sim.recourse.action_set import ActionSet
from recourse_sim.recourse.baselines import growing_spheres, nearest_neighbour_recourse
from recourse_sim.recourse.cheapest import cheapest_linear_recourse
from recourse_sim.recourse.collective import CollectiveResult, collective_recourse
from recourse_sim.recourse.genre import GenRe, PairingDistribution, pairing_distribution
from recourse_sim.recourse.individual import (
    RecourseResult,
    individual_recourse,
    repair_types,
)
from recourse_sim.recourse.ross import (
    PareThreshold,
    binomial_error_budget,
    max_f1_threshold,
    pac_threshold,
    pare_threshold,
    recourse_delta,
    recourse_rates,
    recourse_scores,
)

__all__ = [
    "ActionSet",
    "CollectiveResult",
    "GenRe",
    "PairingDistribution",
    "PareThreshold",
    "RecourseResult",
    "binomial_error_budget",
    "cheapest_linear_recourse",
    "collective_recourse",
    "growing_spheres",
    "individual_recourse",
    "max_f1_threshold",
    "nearest_neighbour_recourse",
    "pac_threshold",
    "pairing_distribution",
    "pare_threshold",
    "recourse_delta",
    "recourse_rates",
    "recourse_scores",
    "repair_types",
]
