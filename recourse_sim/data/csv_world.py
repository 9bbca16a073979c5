"""Tabular worlds' rows, and reading them from a CSV file.

`TabularData` holds what a tabular world (a bundled dataset or a user's CSV file) draws
its people from; `read_csv_world` reads a CSV world's file. The scenario models
(`recourse_sim.scenarios`) use it to check a scenario and the worlds
(`recourse_sim.env.worlds`) to build one; it needs neither.
"""

from __future__ import annotations

import functools
import json
import os
import types
from dataclasses import dataclass, field

import numpy as np

from recourse_sim.errors import ConfigError


@dataclass(frozen=True, eq=False)
class TabularData:
    """Rows of a tabular world: features, labels (0..k-1) and groups."""

    X: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]
    group: np.ndarray  # (n,) int64 codes; zeros when there are no groups
    group_labels: tuple[str, ...]  # empty when there are no groups
    n_classes: int
    favourable: int
    actionable: np.ndarray = field(repr=False)
    increase_only: np.ndarray = field(repr=False)
    decrease_only: np.ndarray = field(repr=False)


def read_csv_world(spec, source: str = "<scenario>") -> TabularData:
    """Read and validate a CSV world's file (`spec`: the scenario's ``world`` block, a
    `recourse_sim.scenarios.CsvWorld`; cached on path, modification time and spec).

    Raises ConfigError naming the file and column for a missing file or column, a
    missing or non-numeric cell, a bad binary/integer value or a label with one class.
    """
    path = spec.path
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        raise ConfigError(f"{source}: world.path: CSV file {path!r} does not exist") from None
    return _read_csv_cached(path, mtime, spec.model_dump_json(), source)


@functools.lru_cache(maxsize=8)
def _read_csv_cached(path: str, mtime: int, spec_json: str, source: str) -> TabularData:
    import pandas as pd

    spec = types.SimpleNamespace(**json.loads(spec_json))
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{path}: cannot read CSV ({first})") from None

    def fail(column: str, message: str) -> None:
        raise ConfigError(f"{path}: column {column!r}: {message}")

    needed = [spec.label, *spec.columns, *([spec.group] if spec.group else [])]
    for col in needed:
        if col not in df.columns:
            fail(col, f"missing (columns in the file: {', '.join(map(str, df.columns))})")
    if len(df) == 0:
        raise ConfigError(f"{path}: the CSV file has no rows")
    for col in needed:
        blank = df[col].str.strip().isin(["", "NA", "NaN", "nan", "null", "None"])
        if blank.any():
            row = int(np.argmax(blank.to_numpy()))
            fail(col, f"missing value (NaN) in data row {row + 1}")
    X = np.empty((len(df), len(spec.columns)))
    for j, (col, kind) in enumerate(spec.columns.items()):
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values)
        if bad.any():
            row = int(np.argmax(bad))
            fail(col, f"non-numeric value {df[col].iloc[row]!r} in data row {row + 1}")
        if kind == "binary" and not np.isin(values, (0.0, 1.0)).all():
            row = int(np.argmax(~np.isin(values, (0.0, 1.0))))
            fail(col, f"binary column has value {df[col].iloc[row]!r} in data row {row + 1}")
        if kind == "integer" and not (values == np.round(values)).all():
            row = int(np.argmax(values != np.round(values)))
            fail(col, f"integer column has value {df[col].iloc[row]!r} in data row {row + 1}")
        X[:, j] = values
    labels = df[spec.label].str.strip()
    classes = sorted(labels.unique(), key=_natural_key)
    if len(classes) < 2:
        fail(spec.label, f"the label has a single class {classes[0]!r}; need at least two")
    favourable = str(spec.favourable)
    matches = [c for c in classes if c == favourable or _same_number(c, favourable)]
    if not matches:
        raise ConfigError(
            f"{path}: world.favourable: label value {spec.favourable!r} does not occur in "
            f"column {spec.label!r} (values: {', '.join(classes[:10])})"
        )
    if len(classes) == 2:
        # Binary labels: 1 is the favourable value whatever its spelling.
        y = (labels.to_numpy() == matches[0]).astype(np.int64)
        n_classes, fav = 2, 1
    else:
        index = {c: i for i, c in enumerate(classes)}
        y = labels.map(index).to_numpy(dtype=np.int64)
        n_classes, fav = len(classes), index[matches[0]]
    if spec.group:
        g = df[spec.group].str.strip()
        group_labels = tuple(sorted(g.unique(), key=_natural_key))
        group = g.map({v: i for i, v in enumerate(group_labels)}).to_numpy(dtype=np.int64)
    else:
        group_labels, group = (), np.zeros(len(df), np.int64)
    d = len(spec.columns)
    return TabularData(
        X=X,
        y=y,
        feature_names=tuple(spec.columns),
        group=group,
        group_labels=group_labels,
        n_classes=n_classes,
        favourable=fav,
        actionable=np.zeros(d, bool),
        increase_only=np.zeros(d, bool),
        decrease_only=np.zeros(d, bool),
    )


def _same_number(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def _natural_key(v: str) -> tuple:
    try:
        return (0, float(v), v)
    except ValueError:
        return (1, 0.0, v)
