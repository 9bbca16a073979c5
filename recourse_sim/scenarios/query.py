"""The ``query`` and ``reward`` sections: whom collectives act for, and what the
environment's reward counts."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
)

from recourse_sim.scenarios.base import (
    LabelValue,
    Name,
    NonNegative,
    NotBoolean,
    _label_classes,
    _Model,
    _nonempty_restriction,
)


class QuerySpec(_Model):
    """The query group: the people a collective acts for (and the env's reward counts)."""

    world: bool = False  # restrict to the world's own query group (school: S)
    groups: list[Name] | None = None  # restrict to these groups (None: every group)
    # restrict to these true outcomes: label values as in the data, or class numbers
    # (None: any)
    labels: list[LabelValue] | None = None
    goal: Annotated[int, NotBoolean] = Field(1, ge=0)  # the class the query group wants
    _classes: list[int] | None = PrivateAttr(None)  # `labels` as class numbers (on load)

    @field_validator("groups", "labels")
    @classmethod
    def _not_empty(cls, v: list | None, info: ValidationInfo) -> list | None:
        return _nonempty_restriction(v, info)

    @property
    def classes(self) -> list[int] | None:
        """`labels` as class numbers (resolved against the world's label values by
        `check_classes`; None: any)."""
        return _label_classes(self)


class RewardSpec(_Model):
    """Reward = query group's favourable rate - cost_weight * mean collective cost
    - trimmed_weight * share of the participants who changed their reports whose rows the
    defence trimmed."""

    cost_weight: NonNegative = 0.1  # lambda: reward per unit of mean perturbation cost
    # reward lost per unit of the share of the round's collective participants who changed
    # their reports whose rows the learner's trimmed refit (learner.defense.trim) dropped
    trimmed_weight: NonNegative = 0.0
