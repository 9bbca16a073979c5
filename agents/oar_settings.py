"""A controlled collective's OAR settings for one round, as its action chooses them.

``action: oar`` (the ``-v2`` action, `recourse_sim.agents.OAR_ACTION`) sets whether the
collective acts, its participation, its budget and its goal; ``action: oar_plan`` (the
``-v3`` action, `recourse_sim.agents.OAR_PLAN_ACTION`) adds OAR's look-ahead and a draw
on the budget the collective banked in earlier rounds. `Controlled.oar_settings` decodes
an action into `OarSettings`; the environment then holds them to the population's
``limit`` and keeps its bank (`recourse_sim.env.limits`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

__all__ = ["OarSettings", "bank_draw", "plan_horizon"]


@dataclass(frozen=True)
class OarSettings:
    """OAR's settings for one round of a controlled collective."""

    acts: bool  # the act entry is at least -1/2, and α > 0 and ε > 0
    participation: float  # α: share of the eligible (and reached) who take part
    epsilon: float  # ε: each member's budget this round (cost units), the draw included
    goal: float  # the goal entry (`recourse_sim.agents.strategies.oar_goal` maps it)
    horizon: int  # OAR's look-ahead: rounds of updates the plan is optimised over
    draw: float = 0.0  # the part of ε taken from the bank (cost units; oar_plan)

    def idle(self) -> OarSettings:
        """The same round without acting (α kept: members are recruited with the same
        draws whatever the action)."""
        return replace(self, acts=False, epsilon=0.0, draw=0.0)


def plan_horizon(entry: float, horizon: int, max_horizon: int) -> int:
    """The look-ahead an ``oar_plan`` action's ``horizon`` entry chooses: the file's
    `horizon` for an entry at or below 0, else horizon + ⌊entry · (max_horizon − horizon
    + 1)⌋, at most `max_horizon` (so (0, 1] is split evenly between the longer ones)."""
    if entry <= 0.0:
        return int(horizon)
    longer = math.floor(float(entry) * (max_horizon - horizon + 1))
    return int(min(max_horizon, horizon + longer))


def bank_draw(entry: float, bank: float, most: float) -> float:
    """What an ``oar_plan`` action's ``bank`` entry takes from the bank (cost units): a
    share `entry` of `most` (bank_cap · ε), at most what the bank holds; nothing for an
    entry at or below 0."""
    if entry <= 0.0:
        return 0.0
    return float(min(bank, float(entry) * most))
