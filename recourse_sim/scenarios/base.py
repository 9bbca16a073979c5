"""Shared pieces of the scenario schema: the base model that rejects unknown keys and
non-finite or huge numbers, and the constrained number types every section uses."""

from __future__ import annotations

import math
import typing
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from recourse_sim.budget import MAX_MAGNITUDE

DATASETS = ("adult", "compas", "german", "iris", "digits")

Probability = Annotated[float, Field(ge=0.0, le=1.0)]
NonNegative = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
GenreGamma = Annotated[float, Field(ge=0.5, lt=1.0)]  # GenRe's gamma: in [0.5, 1)


def _not_a_yaml_boolean(value: Any, info: ValidationInfo) -> Any:
    """Refuse a YAML boolean where a label value or a name is meant: YAML reads the
    unquoted words yes/no/on/off/true/false as booleans (``favourable: yes`` would be
    label 1)."""
    if isinstance(value, bool):
        word = "yes" if value else "no"
        raise ValueError(
            f"got the YAML boolean {str(value).lower()} (unquoted yes/no/on/off/true/false "
            f'are booleans); quote a label value or name: {info.field_name}: "{word}"'
        )
    return value


NotBoolean = BeforeValidator(_not_a_yaml_boolean)
Name = Annotated[str, NotBoolean]  # a group, column or label name
# a label value as it appears in the data, or a class number (0..k-1)
LabelValue = Annotated[int | str, NotBoolean]


# Every real-valued setting lies within ±MAX_MAGNITUDE (`recourse_sim.budget`); only the
# fields a model lists in `_INFINITE_OK` may be infinite (a norm's p).


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)
    _INFINITE_OK: typing.ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="after")
    @classmethod
    def _finite_reals(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name in cls._INFINITE_OK:
            return value
        for x in _reals(value):
            if not math.isfinite(x):
                raise ValueError(f"must be a finite number, got {x}")
            if abs(x) > MAX_MAGNITUDE:
                raise ValueError(
                    f"{x:g} is outside ±{MAX_MAGNITUDE:g}, the range a real setting may take"
                )
        return value


def _reals(value: Any):
    """The floats directly inside a field's value (nested models check their own)."""
    if isinstance(value, float):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _reals(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _reals(item)


def _label_classes(spec: Any) -> list[int] | None:
    """A spec's ``labels`` as class numbers: resolved on load (`check_classes`), or the
    numbers themselves."""
    if spec.labels is None or spec._classes is not None:
        return spec._classes if spec.labels is not None else None
    if all(isinstance(v, int) for v in spec.labels):
        return [int(v) for v in spec.labels]
    raise RuntimeError("labels naming label values are resolved by check_classes first")


def _nonempty_restriction(v: list | None, info: ValidationInfo) -> list | None:
    """An empty restriction list selects nobody; None (omitted) selects everyone."""
    if v is not None and not v:
        raise ValueError(
            f"an empty {info.field_name} list selects nobody; "
            f"omit {info.field_name} to include every {info.field_name[:-1]}"
        )
    return v


def _disjoint(a: list[str], b: list[str], name_a: str, name_b: str) -> None:
    both = [f for f in a if f in b]
    if both:
        raise ValueError(f"feature {both[0]!r} is listed both in {name_a} and in {name_b}")
