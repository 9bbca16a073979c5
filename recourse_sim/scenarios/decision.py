"""The ``decision`` and ``labels`` sections: how probabilities become decisions (threshold,
capacity, argmax, Ross et al.'s PARE) and which outcomes the learner observes."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import (
    field_validator,
    model_validator,
)

from recourse_sim.scenarios.base import Positive, PositiveInt, Probability, _Model


def pare_min_calibration(epsilon: float, alpha: float) -> int:
    """The fewest calibration rows n for which the PARE bound certifies any threshold:
    (1 - epsilon)^n <= alpha, i.e. n >= log(alpha) / log(1 - epsilon)."""
    return math.ceil(math.log(alpha) / math.log1p(-epsilon) - 1e-12)


class PareSpec(_Model):
    """Ross et al.'s PARE threshold (section 3.3), recomputed by the bank every round.

    Each round the bank scores a calibration sample of honest reports (features only, no
    outcomes) by s(x) = max(g(x), g(x + delta*)), delta* the linear recourse within its
    action set and `budget`, and takes Park et al.'s PAC bound tau: with probability
    >= 1 - alpha over the sample, at most a share epsilon of applicants lacks recourse at
    any threshold <= tau. It deploys min(decision.threshold, tau): its usual threshold,
    lowered only as far as the guarantee needs.

    ``calibration``: ``fresh`` - an independent draw of applicants from the world, the
    same size as a cohort (i.i.d. with the cohort and independent of the model's training
    rows: Park et al.'s setting; a world of persistent applicants, lending_fico, draws
    the same people again); ``cohort`` - the applicants about to be decided (the bank
    sees their reports before deciding; at most a share epsilon of *them* lacks recourse,
    deterministically).
    """

    epsilon: float = 0.05  # largest share of applicants allowed to lack recourse, in (0, 1)
    alpha: float = 0.05  # probability that the calibration draw breaks the guarantee, in (0, 1)
    calibration: Literal["fresh", "cohort"] = "fresh"  # whose honest reports calibrate
    # budget of the recourse the bank certifies (cost units; None: as learner.recourse_budget)
    budget: Positive | None = None

    @field_validator("epsilon", "alpha")
    @classmethod
    def _open_unit(cls, v: float) -> float:
        if not (math.isfinite(v) and 0.0 < v < 1.0):
            raise ValueError("must be a number strictly between 0 and 1")
        return v


class DecisionRule(_Model):
    """How the learner's P(favourable) becomes each person's decision."""

    # decision rule (pare: threshold lowered each round to guarantee recourse, see PareSpec)
    rule: Literal["threshold", "capacity", "argmax", "pare"] = "threshold"
    threshold: Probability = 0.5  # threshold rule: favourable when P(favourable) >= this
    group_thresholds: dict[str, Probability] = {}  # per-group thresholds (override threshold)
    capacity: Probability = 0.5  # capacity rule: share of each cohort given the favourable decision
    # capacity rule: favourable decisions per round (people; None: the share `capacity`)
    places: PositiveInt | None = None
    # capacity rule: who of the applicants tied at the cut-off score gets the last places:
    # the earlier arrivals (in person order), or by a lottery number per person and round
    # (as school choice breaks ties) from the named stream `ties`
    ties: Literal["arrival", "random"] = "arrival"
    pare: PareSpec = PareSpec()  # pare rule: the guarantee and its calibration

    @model_validator(mode="after")
    def _pare_alone(self) -> DecisionRule:
        if self.rule == "pare" and self.group_thresholds:
            raise ValueError(
                "rule 'pare' certifies one threshold for everyone; remove group_thresholds"
            )
        return self


class LabelRule(_Model):
    """Which outcomes the learner is retrained on."""

    selective: bool = False  # the outcome is observed only after a favourable decision
    unobserved: Literal["drop", "unfavourable"] = "drop"  # the others: no row / unfavourable label
