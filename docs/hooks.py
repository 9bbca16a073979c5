"""MkDocs hook: the scenario reference, generated at build time from the pydantic models
of the `recourse_sim.scenarios` package (their fields, types and defaults) and the comment beside or
above each field in the source, so the page cannot drift from the code."""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import tokenize
import typing

from pydantic import BaseModel

PLACEHOLDER = "<!-- scenario-reference -->"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if PLACEHOLDER not in markdown:
        return markdown
    return markdown.replace(PLACEHOLDER, scenario_reference())


def scenario_reference() -> str:
    """Markdown: one section per model reachable from `Scenario`, a table of its fields."""
    import pkgutil

    from recourse_sim import scenarios

    comments: dict[tuple[str, str], str] = {}
    for module in pkgutil.iter_modules(scenarios.__path__, prefix="recourse_sim.scenarios."):
        comments |= _field_comments(inspect.getsource(importlib.import_module(module.name)))
    order: list[type[BaseModel]] = []
    _collect(scenarios.Scenario, order)
    out = []
    for model in order:
        doc = inspect.getdoc(model) or ""
        title = "Scenario (the file)" if model is scenarios.Scenario else model.__name__
        out += [f"## {title}", "", doc.split("\n\n")[0].replace("\n", " "), ""]
        out += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            comment = comments.get((model.__name__, name)) or _inherited(model, name, comments)
            default = "required" if field.is_required() else f"`{_short(field.get_default())}`"
            out.append(
                f"| `{name}` | {_type_name(field.annotation)}{_range(field)} | {default} "
                f"| {comment or ''} |"
            )
        out.append("")
    return "\n".join(out)


def _collect(model: type[BaseModel], order: list) -> None:
    """Models reachable from `model` through its fields, depth first, each once."""
    if model in order:
        return
    order.append(model)
    for field in model.model_fields.values():
        for inner in _models_in(field.annotation):
            _collect(inner, order)


def _models_in(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found = []
    for arg in typing.get_args(annotation):
        found += _models_in(arg)
    return found


def _type_name(annotation) -> str:
    """A short, readable type: Literal values, unions and containers spelled out."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a!r}`".replace("'", '"') for a in args)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " \\| ".join(_type_name(a) for a in args)
    if origin in (list, tuple, dict):
        inner = ", ".join(_type_name(a) for a in args if a is not Ellipsis)
        return f"{origin.__name__}[{inner}]"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation)).replace("|", "\\|")


def _range(field) -> str:
    """The field's numeric bounds, e.g. ' ≥ 1' or ' in [0, 1)'; nothing when unbounded."""
    found: dict[str, float] = {}
    for item in [*field.metadata, *_annotated_metadata(field.annotation)]:
        for key in ("ge", "gt", "le", "lt"):
            if getattr(item, key, None) is not None:
                found[key] = getattr(item, key)
    low = ("[", found["ge"]) if "ge" in found else ("(", found["gt"]) if "gt" in found else None
    high = ("]", found["le"]) if "le" in found else (")", found["lt"]) if "lt" in found else None
    if low and high:
        return f", in {low[0]}{low[1]:g}, {high[1]:g}{high[0]}"
    if low:
        return f", {'≥' if low[0] == '[' else '>'} {low[1]:g}"
    if high:
        return f", {'≤' if high[0] == ']' else '<'} {high[1]:g}"
    return ""


def _annotated_metadata(annotation) -> list:
    if typing.get_origin(annotation) is typing.Annotated:
        return [m for meta in annotation.__metadata__ for m in getattr(meta, "metadata", [meta])]
    return [m for arg in typing.get_args(annotation) for m in _annotated_metadata(arg)]


def _short(value) -> str:
    if isinstance(value, BaseModel):
        return "{…}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


def _inherited(model, name: str, comments: dict) -> str | None:
    for base in model.__mro__[1:]:
        if (base.__name__, name) in comments:
            return comments[(base.__name__, name)]
    return None


def _field_comments(source: str) -> dict[tuple[str, str], str]:
    """(class, field) → the comment at the end of the field's line, or the comment lines
    right above it."""
    by_line: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            by_line[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    out = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            text = by_line.get(stmt.end_lineno)
            if text is None:
                above, line = [], stmt.lineno - 1
                while line >= 1 and lines[line - 1].strip().startswith("#"):
                    above.insert(0, by_line.get(line, ""))
                    line -= 1
                text = " ".join(above) or None
            if text:
                out[(node.name, stmt.target.id)] = text.replace("|", "\\|")
    return out
