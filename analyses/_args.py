"""Command-line arguments of the analysis scripts from their ``Args`` dataclass: one flag
per field, its help the string literal written right after the field."""

from __future__ import annotations

import argparse
import ast
import inspect
import itertools
from dataclasses import fields, replace
from pathlib import Path
from typing import Any


def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of a dataclass (the string literal right after each field)."""
    body = ast.parse(inspect.getsource(cls)).body[0].body
    return {
        node.target.id: str(after.value.value)
        for node, after in itertools.pairwise(body)
        if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr)
    }


def parse_args(cls: type, description: str, argv: list[str] | None = None) -> Any:
    """An instance of the dataclass `cls` from the command line: ``--flag-name`` per field
    (booleans are switches, tuples take several values, fields annotated ``Path | None``
    take a path and ``float | None`` a number), defaults as in `cls`, help from `field_docs`."""
    docs = field_docs(cls)
    parser = argparse.ArgumentParser(description=description)
    for f in fields(cls):
        flag, default, help_ = f"--{f.name.replace('_', '-')}", f.default, docs.get(f.name)
        if f.type == "bool":
            parser.add_argument(flag, action="store_true", help=help_)
        elif isinstance(default, tuple):
            kind = type(default[0]) if default else str
            parser.add_argument(flag, nargs="+", type=kind, default=default, help=help_)
        elif "Path" in str(f.type):
            parser.add_argument(flag, type=Path, default=default, help=help_)
        elif default is None and "float" in str(f.type):  # an optional number
            parser.add_argument(flag, type=float, default=None, help=help_)
        else:
            parser.add_argument(flag, type=type(default), default=default, help=help_)
    ns = parser.parse_args(argv)
    args = cls(**{f.name: getattr(ns, f.name) for f in fields(cls)})
    return replace(args, **{k: tuple(v) for k, v in vars(ns).items() if isinstance(v, list)})
