"""The ``query`` and ``reward`` sections: whom collectives act for, and what the
environment's reward counts."""

from __future__ import annotations

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
)

from recourse_sim.scenarios.base import NonNegative, _Model, _nonempty_restriction


class QuerySpec(_Model):
    """The query group: the people a collective acts for (and the env's reward counts)."""

    world: bool = False  # restrict to the world's own query group (school: S)
    groups: list[str] | None = None  # restrict to these groups (None: every group)
    labels: list[int] | None = None  # restrict to these true outcomes (None: any)
    goal: int = Field(1, ge=0)  # the class the query group wants

    @field_validator("groups", "labels")
    @classmethod
    def _not_empty(cls, v: list | None, info: ValidationInfo) -> list | None:
        return _nonempty_restriction(v, info)


class RewardSpec(_Model):
    """Reward = query group's favourable rate - cost_weight * mean collective cost."""

    cost_weight: NonNegative = 0.1  # lambda: reward per unit of mean perturbation cost
