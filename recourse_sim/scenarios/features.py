"""The ``features`` section: which features people can change, and how."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import (
    field_validator,
    model_validator,
)

from recourse_sim.scenarios.base import NonNegative, _disjoint, _Model

FeatureType = Literal["continuous", "integer", "binary", "ordinal", "categorical"]


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
    # feature types, over the world's own: continuous, integer (whole steps), binary (0/1),
    # ordinal (one of ordered levels) or categorical (one of level codes, no order)
    types: dict[str, FeatureType] = {}
    # step of an integer feature (its unit; default 1): a change is a whole number of steps
    steps: dict[str, float] = {}
    # allowed values of an ordinal feature (its order) or a one-column categorical feature
    # (default in a dataset or CSV world: the values it takes in the rows)
    levels: dict[str, list[float]] = {}
    # one-hot categorical features: each a list of 0/1 columns, exactly one of them 1; a
    # change switches the level (one column 1 → 0, another 0 → 1)
    onehot_groups: list[list[str]] = []
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
        for name, step in self.steps.items():
            if not step > 0:
                raise ValueError(f"steps.{name}: an integer step must be > 0, got {step}")
        for name, values in self.levels.items():
            if not values:
                raise ValueError(
                    f"levels.{name}: an ordinal or categorical feature has no allowed level"
                )
        for i, group in enumerate(self.onehot_groups):
            if not group:
                raise ValueError(
                    f"onehot_groups.{i}: the categorical group has no allowed level (no column)"
                )
        return self
