"""Tabular worlds' rows, and reading them from a CSV file.

`TabularData` holds what a tabular world (a bundled dataset or a user's CSV file) draws
its people from; `read_csv_world` reads a CSV world's file. The scenario models
(`recourse_sim.scenarios`) use it to check a scenario and the worlds
(`recourse_sim.env.worlds`) to build one; it needs neither.
"""

from __future__ import annotations

import functools
import io
import json
import os
import types
import warnings
from dataclasses import dataclass, field
from stat import S_ISREG

import numpy as np

from recourse_sim.budget import (
    BYTES_PER_FILE_PERSON,
    MAX_MAGNITUDE,
    check_classes,
    check_file,
    rows_over_budget,
)
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
    # the label value each class number stands for (CSV worlds; empty: the numbers)
    class_values: tuple[str, ...] = ()
    # per feature its type for recourse (see `recourse_sim.recourse.ActionSet`; empty:
    # all continuous), and the allowed values of ordinal / categorical ones by name
    feature_types: tuple[str, ...] = ()
    levels: dict = field(default_factory=dict, repr=False)


def read_csv_world(spec, source: str = "<scenario>") -> TabularData:
    """Read and validate a CSV world's file (`spec`: the scenario's ``world`` block, a
    `recourse_sim.scenarios.CsvWorld`; cached on path, modification time and spec).

    Raises ConfigError naming the file and column for a missing file or column, a
    missing or non-numeric cell, a bad binary/integer value or a label with one class.
    """
    path = spec.path
    try:
        stat = os.stat(path)
    except OSError:
        raise ConfigError(f"{source}: world.path: CSV file {path!r} does not exist") from None
    if not S_ISREG(stat.st_mode):
        raise ConfigError(f"{source}: world.path: {path!r} is not a regular file")
    check_file(stat.st_size, "world.path", source)
    mtime = stat.st_mtime_ns
    return _read_csv_cached(path, mtime, spec.model_dump_json(), source)


@functools.lru_cache(maxsize=8)
def _read_csv_cached(path: str, mtime: int, spec_json: str, source: str) -> TabularData:
    import pandas as pd

    spec = types.SimpleNamespace(**json.loads(spec_json))
    text = _csv_text(path, source)
    if spec.population == "file":  # the rows are the people: counted before parsing
        _check_population(text, path)
    try:
        df = pd.read_csv(io.BytesIO(text), dtype=str, keep_default_na=False, skipinitialspace=True)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{path}: cannot read CSV ({first[:200]})") from None

    def fail(column: str, message: str) -> None:
        raise ConfigError(f"{path}: column {column!r}: {message}")

    bins = spec.group if isinstance(spec.group, dict) else None
    group_column = bins["column"] if bins else spec.group
    columns = spec.columns
    if columns is None:
        columns = infer_columns(df, [spec.label, group_column], path)
    needed = [spec.label, *columns, *([group_column] if group_column else [])]
    for col in dict.fromkeys(needed):
        if col not in df.columns and len(df.columns) == 1:
            # one column: not a comma-separated file (nothing of it is shown: it may be
            # any file, even a private one)
            fail(col, "missing (the file's first line has no commas: is it a CSV file?)")
        if col not in df.columns:
            fail(col, f"missing (columns in the file: {_listed(map(str, df.columns))})")
    if len(df) == 0:
        raise ConfigError(f"{path}: the CSV file has no rows")
    # every cell that cannot be read, per column and reason, before deciding what to do
    problems: dict[str, list[tuple[str, np.ndarray]]] = {}
    numbers: dict[str, np.ndarray] = {}
    for col in dict.fromkeys(needed):
        blank = df[col].str.strip().isin(BLANKS).to_numpy()
        found = [("missing (NaN)", blank)]
        if col in columns or (bins and col == group_column):
            values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64)
            found.append(("non-numeric", ~blank & ~np.isfinite(values)))
            # bounded as a scenario's numbers are (larger ones overflow a round's sums)
            outside = np.isfinite(values) & (np.abs(values) > MAX_MAGNITUDE)
            found.append((f"outside ±{MAX_MAGNITUDE:g}", outside))
            kind = columns.get(col)
            if kind == "binary":
                found.append(("not binary (0/1)", np.isfinite(values) & ~np.isin(values, (0, 1))))
            elif kind == "integer":
                found.append(("not integer", np.isfinite(values) & (values != np.round(values))))
            if bins and col == group_column:
                inside = (values >= bins["bins"][0]) & (values < bins["bins"][-1])
                found.append(("outside the group bins", np.isfinite(values) & ~inside))
            numbers[col] = values
        problems[col] = [(why, m) for why, m in found if m.any()]
    rows_bad = np.zeros(len(df), bool)
    for found in problems.values():
        for _, m in found:
            rows_bad |= m
    if rows_bad.any():
        if spec.missing == "error":
            counts = [
                f"column {col!r}: {int(m.sum())} {why} (first in data row {int(np.argmax(m)) + 1}: "
                f"{_cell(df[col].iloc[int(np.argmax(m))])})"
                for col, found in problems.items()
                for why, m in found
            ]
            raise ConfigError(
                f"{path}: {int(rows_bad.sum())} of {len(df)} rows have bad cells: "
                f"{'; '.join(counts[:8])}{' …' if len(counts) > 8 else ''} "
                "(world.missing: drop leaves those rows out)"
            )
        keep = ~rows_bad
        if not keep.any():
            raise ConfigError(f"{path}: every row has a bad cell; nothing is left to draw from")
        df = df[keep].reset_index(drop=True)
        numbers = {col: v[keep] for col, v in numbers.items()}
    X = np.column_stack([numbers[col] for col in columns])
    if spec.clip_quantiles is not None:
        numeric = [j for j, kind in enumerate(columns.values()) if kind == "numeric"]
        if numeric:
            lo, hi = np.quantile(X[:, numeric], spec.clip_quantiles, axis=0)
            X[:, numeric] = np.clip(X[:, numeric], lo, hi)
    labels = df[spec.label].str.strip()
    classes = sorted(labels.unique(), key=_natural_key)
    if len(classes) < 2:
        fail(spec.label, f"the label has a single class {classes[0]!r}; need at least two")
    check_classes(len(classes), f"{path}: column {spec.label!r}")
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
        class_values = (next(c for c in classes if c != matches[0]), matches[0])
    else:
        index = {c: i for i, c in enumerate(classes)}
        y = labels.map(index).to_numpy(dtype=np.int64)
        n_classes, fav = len(classes), index[matches[0]]
        class_values = tuple(classes)
    if bins:
        group_labels = tuple(bins["labels"])
        group = np.searchsorted(bins["bins"], numbers[group_column], side="right") - 1
        group = group.astype(np.int64)
    elif spec.group:
        g = df[spec.group].str.strip()
        group_labels = tuple(sorted(g.unique(), key=_natural_key))
        group = g.map({v: i for i, v in enumerate(group_labels)}).to_numpy(dtype=np.int64)
    else:
        group_labels, group = (), np.zeros(len(df), np.int64)
    for reserved, row in (("all", "row of everyone"), ("query", "query group's row")):
        if reserved in group_labels:  # metrics.csv's rows are unique per (round, group)
            where = "world.group.labels" if bins else "the file"
            fail(
                group_column,
                f"group {reserved!r} is a name metrics.csv keeps for its {row}; "
                f"rename that group in {where}",
            )
    d = len(columns)
    kinds = tuple(COLUMN_FEATURE_TYPES[kind] for kind in columns.values())
    # an ordinal or categorical column's levels: the values it takes in the file
    levels = {
        col: tuple(np.unique(X[:, j]).tolist())
        for j, col in enumerate(columns)
        if kinds[j] in ("ordinal", "categorical")
    }
    return TabularData(
        X=X,
        y=y,
        feature_names=tuple(columns),
        group=group,
        group_labels=group_labels,
        n_classes=n_classes,
        favourable=fav,
        actionable=np.zeros(d, bool),
        increase_only=np.zeros(d, bool),
        decrease_only=np.zeros(d, bool),
        class_values=class_values,
        feature_types=kinds,
        levels=levels,
    )


BLANKS = ("", "NA", "NaN", "nan", "null", "None")  # cells that mean "no value"
# a CSV column type (`CsvWorld.columns`) and the feature type recourse gives it
COLUMN_FEATURE_TYPES = {
    "numeric": "continuous",
    "integer": "integer",
    "binary": "binary",
    "ordinal": "ordinal",
    "categorical": "categorical",
}

MAX_COLUMNS = 10_000  # columns a CSV world's header may have (a wider one is refused)

# the first bytes of compressed files: such a file is read decompressed, within the
# memory budget however far it would expand
_COMPRESSED = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bz2",
    b"\xfd7zXZ\x00": "xz",
    b"PK\x03\x04": "zip",
    b"\x28\xb5\x2f\xfd": "zstd",
}


def _csv_text(path: str, source: str) -> bytes:
    """The bytes of CSV file `path`, decompressed if it is compressed (gzip, bz2, xz or
    a zip of one file); ConfigError naming the file if they would not fit the memory
    budget once parsed, or the header is wider than `MAX_COLUMNS`."""
    import bz2
    import gzip
    import lzma
    import zipfile

    from recourse_sim.budget import _size, memory_limit

    factor = 20  # a parsed table takes about this many times its text (as check_file)
    limit = memory_limit() // 2 // factor
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read CSV ({e.strerror or e})") from None
    kind = next((k for magic, k in _COMPRESSED.items() if data.startswith(magic)), None)
    if kind == "zstd":
        raise ConfigError(f"{path}: the file is compressed with zstd; decompress it first")
    if kind is not None:
        try:
            if kind == "zip":
                with zipfile.ZipFile(io.BytesIO(data)) as archive:
                    members = archive.namelist()
                    if len(members) != 1:
                        raise ConfigError(f"{path}: a zip file must hold one CSV file")
                    with archive.open(members[0]) as member:
                        data = member.read(limit + 1)
            else:
                opener = {"gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open}[kind]
                with opener(io.BytesIO(data), "rb") as stream:
                    data = stream.read(limit + 1)  # never more: a small file may expand a lot
        except (OSError, EOFError, lzma.LZMAError, zipfile.BadZipFile):
            raise ConfigError(f"{path}: cannot read CSV (a damaged {kind} file)") from None
    if len(data) > limit:
        raise ConfigError(
            f"{source}: world.path: {path} holds more than {_size(limit)} of text"
            f"{' decompressed' if kind else ''}; reading it needs about {factor} times "
            f"that while a run may use {_size(limit * factor)} here"
        )
    header = data.split(b"\n", 1)[0]
    width = header.count(b",") + 1  # (at least the columns: a quoted comma counts too)
    if width > MAX_COLUMNS:
        raise ConfigError(
            f"{path}: the header has {width:,} columns; a CSV world reads at most {MAX_COLUMNS:,}"
        )
    return data


def _check_population(text: bytes, path: str) -> None:
    """ConfigError naming the number of rows if the people of a `population: file`
    world (every data row, every round) would not fit in memory."""
    lines = text.count(b"\n") + (not text.endswith(b"\n"))
    width = text[: text.find(b"\n")].count(b",") + 1 if lines else 1
    problem = rows_over_budget(
        max(lines - 1, 0), width, "people (the file's rows)", BYTES_PER_FILE_PERSON
    )
    if problem:
        raise ConfigError(f"{path}: world.population: file: {problem} (or use population: sample)")


def infer_columns(df, exclude: list, path: str) -> dict[str, str]:
    """Feature columns and their types from the cells (`CsvWorld.columns` omitted):
    every column but `exclude`; a column whose filled cells are all 0/1 is binary, all
    whole numbers integer, all numbers numeric. Text columns are left out (with a
    warning naming them); a column mixing numbers and text is an error, since which
    cells are mistakes only its author knows."""
    import pandas as pd

    columns: dict[str, str] = {}
    text = []
    for col in df.columns:
        if col in exclude:
            continue
        cells = df[col].str.strip()
        filled = cells[~cells.isin(BLANKS)]
        values = pd.to_numeric(filled, errors="coerce").to_numpy(dtype=np.float64)
        numeric = np.isfinite(values)
        if not numeric.any():
            text.append(str(col))
        elif not numeric.all():
            first = filled[~numeric].iloc[0]
            raise ConfigError(
                f"{path}: column {col!r}: {int((~numeric).sum())} of {len(filled)} filled "
                f"cells are not numbers (first: {_cell(first)}); list the feature columns "
                "and their types in world.columns"
            )
        elif np.isin(values, (0, 1)).all():
            columns[str(col)] = "binary"
        elif (values == np.round(values)).all():
            columns[str(col)] = "integer"
        else:
            columns[str(col)] = "numeric"
    if text:
        warnings.warn(
            f"{path}: text columns left out of the features: {_listed(text)} (world.columns "
            "lists the features explicitly)",
            stacklevel=2,
        )
    if not columns:
        raise ConfigError(f"{path}: no numeric column besides the label and the group")
    return columns


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


def _listed(names, limit: int = 20) -> str:
    """Names joined by commas, at most `limit` of them."""
    names = list(names)
    more = f", … ({len(names)} in all)" if len(names) > limit else ""
    return ", ".join(n[:40] for n in names[:limit]) + more


def _cell(value: str) -> str:
    """A cell's text for an error line: quoted, at most 20 characters."""
    text = str(value)
    return repr(text if len(text) <= 20 else text[:17] + "...")
