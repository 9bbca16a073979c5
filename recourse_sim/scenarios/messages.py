"""One-line error messages from pydantic's validation errors: the file, the dotted field,
the bad value, and the closest valid key or tag."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Annotated, Any, Union

from pydantic import (
    BaseModel,
    ValidationError,
)

from recourse_sim.scenarios.scenario import Scenario


def _format_error(exc: ValidationError, data: dict, source: str) -> str:
    errors = exc.errors()
    err = errors[0]
    path, value, found = _locate(data, err["loc"])
    dotted = ".".join(_show_part(p) for p in path) or "<top level>"
    more = (
        f" (and {len(errors) - 1} more problem{'s' * (len(errors) > 2)})" if len(errors) > 1 else ""
    )
    kind = err["type"]
    if kind == "extra_forbidden" and tuple(err["loc"][:1]) + tuple(err["loc"][-1:]) == (
        "world",
        "population",
    ):
        world_kind = data.get("world", {}).get("kind") if isinstance(data, dict) else None
        return (
            f"{source}: {dotted}: only a CSV world (kind: csv) takes population "
            f"(this world is kind {world_kind!r}){more}"
        )
    if kind == "extra_forbidden":
        valid = _valid_keys(err["loc"][:-1])
        close = difflib.get_close_matches(str(err["loc"][-1]), valid, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listing = f" (valid keys: {', '.join(valid)})" if valid else ""
        return f"{source}: {dotted}: unknown key{hint}{listing}{more}"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        ctx = err.get("ctx", {})
        tag_name = str(ctx.get("discriminator", "")).strip("'")
        tags = ctx.get("expected_tags") or ", ".join(
            repr(t) for t in _union_tags(err["loc"], tag_name or "kind")
        )
        dotted_tag = f"{dotted}.{tag_name}" if tag_name else dotted
        what = "strategy" if tag_name == "strategy" else tag_name or "kind"
        if kind == "union_tag_not_found":
            return f"{source}: {dotted_tag}: missing; choose a {what}: {tags}{more}"
        bad = ctx.get("tag")
        valid = [t.strip().strip("'") for t in str(tags).split(",")]
        close = difflib.get_close_matches(str(bad), valid, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listing = f" (valid: {', '.join(valid)})"
        return f"{source}: {dotted_tag}: unknown {what} {bad!r}{hint}{listing}{more}"
    if kind == "missing":
        return f"{source}: {dotted}: required field is missing{more}"
    message = err["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    # the bad value, unless it is a whole block (model-level checks name the culprit)
    got = f" (got {value!r})" if found and len(repr(value)) <= 120 else ""
    return f"{source}: {dotted}: {message}{got}{more}"


def _show_part(part: Any) -> str:
    """A path component as text; quoted when it is not a plain word (empty, spaces, dots)."""
    text = str(part)
    plain = text and all(c.isalnum() or c in "_-" for c in text)
    return text if plain else repr(part)


def _locate(data: Any, loc: tuple) -> tuple[list, Any, bool]:
    """Walk the raw input along a pydantic error location; skip union tags."""
    path: list = []
    node, found = data, True
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
            path.append(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
            path.append(part)
        elif isinstance(node, dict) and isinstance(part, str) and _is_tag(node, part):
            continue  # pydantic puts the discriminator's value in the location
        else:
            path.append(part)
            found = False
    return path, node, found


def _is_tag(node: dict, part: str) -> bool:
    return node.get("kind") == part or node.get("strategy") == part


def _valid_keys(loc: tuple) -> list[str]:
    """The field names of the model at a location (pydantic locations, tags included)."""
    model: Any = Scenario
    for part in loc:
        model = _child_type(model, part)
        if model is None:
            return []
    model = _strip(model)  # an optional block (world.people) lists its own keys
    return list(model.model_fields) if _is_model(model) else []


def _union_tags(loc: tuple, tag_field: str) -> list[str]:
    """The values of `tag_field` that the tagged union at `loc` accepts."""
    t: Any = Scenario
    for part in loc:
        t = _child_type(t, part)
        if t is None:
            return []
    tags: list[str] = []
    for member in typing.get_args(_strip(t)):
        field = getattr(_strip(member), "model_fields", {}).get(tag_field)
        if field is not None:
            tags.extend(str(a) for a in typing.get_args(field.annotation))
    return tags


def _is_model(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _child_type(t: Any, part: Any) -> Any:
    t = _strip(t)
    if _is_model(t):
        field = t.model_fields.get(part) if isinstance(part, str) else None
        return None if field is None else field.annotation
    origin = typing.get_origin(t)
    if origin in (Union, types.UnionType):
        for member in typing.get_args(t):
            member = _strip(member)
            if _is_model(member):
                for tag_field in ("kind", "strategy"):
                    f = member.model_fields.get(tag_field)
                    if f is not None and part in typing.get_args(f.annotation):
                        return member
        return None
    if origin is dict:
        return typing.get_args(t)[1]
    if origin is list:
        return typing.get_args(t)[0]
    return None


def _strip(t: Any) -> Any:
    """Remove Annotated and Optional wrappers."""
    while True:
        if typing.get_origin(t) is Annotated:
            t = typing.get_args(t)[0]
            continue
        if typing.get_origin(t) in (Union, types.UnionType):
            args = [a for a in typing.get_args(t) if a is not type(None)]
            if len(args) == 1:
                t = args[0]
                continue
        return t
