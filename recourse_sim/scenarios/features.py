"""The ``features`` section: which features people can change, and how."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import (
    field_validator,
    model_validator,
)

from recourse_sim.scenarios.base import NonNegative, _disjoint, _Model


class FeatureRules(_Model):
    """How people can change their features, on top of the world's own declaration.

    Names are the world's feature names. `actionable` replaces the world's list of
    changeable features; `immutable` removes features from it (a name in both is an
    error). A *proxy* feature's change is gaming: the true outcome ignores it.
    """

    actionable: list[str] | None = None  # features people can change (None: world default)
    immutable: list[str] = []  # features that never change
    increase_only: list[str] = []  # features that can only go up
    decrease_only: list[str] = []  # features that can only go down
    proxy: list[str] | None = None  # features whose changes are gaming (None: world default)
    lower: dict[str, float] = {}  # lower bound on a feature's value after a change (its unit)
    upper: dict[str, float] = {}  # upper bound on a feature's value after a change (its unit)
    max_change: dict[str, NonNegative] = {}  # largest |change| of a feature per round (its unit)
    # cost weight per unit of change (default 1); "std", for all or per feature: one unit
    # is one standard deviation of the feature in the world's data
    cost: dict[str, NonNegative | Literal["std"]] | Literal["std"] = {}
    p: float = 2.0  # norm of the cost, 1, 2 or inf
    _INFINITE_OK = frozenset({"p"})

    @field_validator("p")
    @classmethod
    def _norm(cls, v: float) -> float:
        if v not in (1.0, 2.0, math.inf):
            raise ValueError("p must be 1, 2 or inf")
        return v

    @model_validator(mode="after")
    def _no_contradictions(self) -> FeatureRules:
        _disjoint(self.actionable or [], self.immutable, "actionable", "immutable")
        _disjoint(self.increase_only, self.decrease_only, "increase_only", "decrease_only")
        return self
