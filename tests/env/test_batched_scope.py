"""The batched env's scope by field (`recourse_sim.env.batched_scope`): every scenario
field is declared simulated natively or refused with a named reason, and the refusals
are what `native_reason` says."""

from __future__ import annotations

import typing

import pydantic
import pytest

from recourse_sim.env import RecourseEnv
from recourse_sim.env.batched_scope import FIELD_SCOPE, field_scope, native_reason
from recourse_sim.scenarios import Scenario


def _models(annotation) -> list[type[pydantic.BaseModel]]:
    """The pydantic models an annotation holds (through unions, lists, dicts, ...)."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _tag(model: type[pydantic.BaseModel], discriminator: str) -> str:
    (value,) = typing.get_args(model.model_fields[discriminator].annotation)
    return str(value)


def _fields(model: type[pydantic.BaseModel], prefix: str = "") -> list[str]:
    """Every leaf field of `model`: ``world[kind].f``, ``populations[strategy].f``, the
    fields of nested models dotted."""
    out = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        models = _models(info.annotation)
        tagged = {"world": "kind", "populations": "strategy"}.get(path)
        if tagged:
            for m in models:
                out += _fields(m, f"{path}[{_tag(m, tagged)}].")
        elif models:
            for m in models:
                out += _fields(m, f"{path}.")
            # a field that is a number or a model (a margin: 0.1 or a distribution)
            if any(not _models(a) for a in typing.get_args(info.annotation) if a is not type(None)):
                out.append(path)
        else:
            out.append(path)
    return out


def test_every_scenario_field_is_native_or_refused_with_a_reason():
    fields = _fields(Scenario)
    assert len(fields) > 150  # (the walk reaches every world kind and strategy)
    undeclared = [f for f in fields if field_scope(f) is None]
    assert not undeclared, f"declare these in batched_scope.FIELD_SCOPE: {undeclared}"
    for path in fields:
        how = field_scope(path)
        assert how.startswith(("native", "refused")), (path, how)


def test_every_declared_field_exists():
    fields = _fields(Scenario)
    stale = [
        key
        for key in FIELD_SCOPE
        if not any(f == key or (key.endswith(".*") and f.startswith(key[:-1])) for f in fields)
    ]
    assert not stale, stale


SMALL = {"world__cohort_size": 100, "world__history_size": 300}


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"learner__update_rule": "refit"}, "update rule 'refit'"),
        ({"learner__recourse_loss_weight": 0.5}, "recourse loss"),
        ({"learner__params": {"max_iter": 3}}, "max_iter 3"),
        ({"learner__params": {"tol": 1e-3}}, "tol 0.001"),
        ({"decision__rule": "argmax"}, "decision rule 'argmax'"),
    ],
)
def test_a_refused_field_is_named_by_native_reason(overrides, reason):
    env = RecourseEnv("school_assignment_controlled", **SMALL, **overrides)
    got = native_reason(env)
    assert got is not None and reason in got, got


def test_the_bundled_native_scenarios_stay_native():
    for name in ("school_assignment_controlled", "lending_fico_controlled"):
        assert native_reason(RecourseEnv(name)) is None
