"""What a world carries from one round to the next: `RoundState` (the phases of a round,
`recourse_sim.env.round`, act on it; a checkpoint saves it, `recourse_sim.env.state`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from recourse_sim.env.metrics import RoundRecord
    from recourse_sim.env.pool import Pool
    from recourse_sim.env.worlds import Cohort
    from recourse_sim.learners import Learner
    from recourse_sim.learners.defense import Defense

__all__ = ["Allowance", "RoundState", "no_holders"]


@dataclass
class Allowance:
    """What a controlled collective has used of its limit, and banked, this episode."""

    acting_rounds: int = 0  # rounds in which it acted
    cost: float = 0.0  # summed mean cost per participant (cost units)
    bank: float = 0.0  # budget banked for later rounds (cost units; oar_plan)

    def get_state(self) -> dict[str, Any]:
        return {"acting_rounds": self.acting_rounds, "cost": self.cost, "bank": self.bank}


@dataclass
class RoundState:
    """What a world carries from one round to the next (and a checkpoint saves)."""

    learner: Learner  # the deployed model
    defense: Defense  # the learner's defense against perturbed training rows
    round: int = 0  # rounds played since reset
    cohort: Cohort | None = None  # the applicants of the next round (None before reset)
    pool: Pool | None = None  # everyone in the world who may apply again
    holders: dict[str, np.ndarray] = field(default_factory=dict)  # last round's holders
    past_holders: list[dict[str, np.ndarray]] = field(default_factory=list)  # last T rounds'
    streams: dict[str, np.random.Generator] = field(default_factory=dict)  # named streams
    keys: dict[str, int] = field(default_factory=dict)  # keyed streams' keys
    last: dict[str, np.ndarray] = field(default_factory=dict)  # last round's rates (obs.)
    theta0: np.ndarray | None = None  # the first model's parameters
    feature_mean: np.ndarray | None = None  # the history's feature means (observation)
    feature_scale: np.ndarray | None = None  # ... and SDs (1 where constant)
    learner_seed: int = 0  # the learner's random_state of this episode
    pare: dict[str, float] = field(default_factory=dict)  # PARE's threshold, if the rule
    last_record: RoundRecord | None = None  # the last round's record (people.csv)
    # ids of people whose implemented recourse is honoured (world.honour_recourse)
    honoured: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # the honest decisions of one (learner, state, cohort, threshold), kept
    kept_decisions: tuple[tuple, np.ndarray, np.ndarray] | None = None
    # per controlled population: its limit's use and its bank (`recourse_sim.env.limits`)
    allowances: dict[str, Allowance] = field(default_factory=dict)


def no_holders(d: int) -> dict[str, np.ndarray]:
    """Nobody whose recourse succeeded last round (round 1)."""
    return {
        "person": np.zeros(0, np.int64),
        "report": np.zeros((0, d)),
        "group": np.zeros(0, np.int64),
        "query": np.zeros(0, bool),
    }
