"""The tables a run writes, ``metrics.csv`` and ``people.csv``: their columns, how each
value becomes a cell, and how they are read back.

A table is kept as CSV text, the one form shared by the file and the DataFrame a run
returns, so a resumed run and an uninterrupted one compare equal.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from recourse_sim.errors import CheckpointError

if TYPE_CHECKING:  # imported lazily at run time: pandas is heavy
    import pandas as pd

METRICS_FILE = "metrics.csv"
PEOPLE_FILE = "people.csv"

LEADING_COLUMNS = (
    "round",
    "group",
    "acceptance_rate",
    "recourse_success_rate",
    "mean_cost",
    "model_accuracy",
)
"""The contract columns, always first and in this order."""
SEEKER_COLUMNS = ("recourse_success_rate", "mean_cost")
"""The seekers' rates: empty (NaN) in a round with no seekers."""

FLOAT_FORMAT = ".10g"
"""Format of every float cell: 10 significant digits, enough for rates and costs and
short enough to hide last-bit noise of linear algebra."""

RUN_FILES = {"metrics": METRICS_FILE, "people": PEOPLE_FILE}
"""The files a run appends to round by round, by the key their checkpoint records them
under (``<key>_bytes``, ``<key>_sha256``)."""


def _kind(value: Any) -> str | None:
    """The column kind a metric value asks for; None for a missing value."""
    if value is None or (isinstance(value, (float, np.floating)) and math.isnan(value)):
        return None
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, str):
        return "str"
    raise TypeError(
        f"metric value {value!r} of type {type(value).__name__} is not a number or string"
    )


def _merge_kinds(a: str | None, b: str | None) -> str | None:
    """The kind of a column holding values of kinds `a` and `b`."""
    if a is None or a == b:
        return b if a is None else a
    if b is None:
        return a
    if {a, b} <= {"int", "float", "bool"}:
        return "float"
    return "str"


def _cell(value: Any) -> str:
    """The CSV text of one metric value; deterministic for a given value."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    kind = _kind(value)
    if kind is None:
        return ""
    if kind == "bool":
        return "True" if value else "False"
    if kind == "int":
        return str(int(value))
    if kind == "float":
        return format(float(value) + 0.0, FLOAT_FORMAT)  # + 0.0 turns -0.0 into 0.0
    return str(value)


class MetricsTable:
    """The tidy metrics table kept as CSV text, the one form shared by file and DataFrame.

    The columns (and each column's kind, for dtypes) are fixed by the first round: the
    leading contract columns, then every other key in the order first seen.
    """

    def __init__(
        self,
        columns: Sequence[tuple[str, str | None]] | None = None,
        resumed_from: Path | None = None,
    ) -> None:
        self.columns: list[tuple[str, str | None]] | None = (
            None if columns is None else [(str(n), k) for n, k in columns]
        )
        self.text: list[str] = []  # header (once the columns are known) and row lines
        self.resumed_from = resumed_from  # the checkpoint the columns came from, if any

    @property
    def names(self) -> list[str]:
        """Column names (empty before the first round)."""
        return [name for name, _ in self.columns or ()]

    def add_round(self, rows: Any) -> str:
        """Append one round's metric rows; return the CSV text added (header included once)."""
        if not isinstance(rows, list) or not rows or not all(isinstance(r, Mapping) for r in rows):
            raise RuntimeError(
                f'env info["metrics"] must be a non-empty list of dicts, got {rows!r:.200}'
            )
        added = []
        if self.columns is None:
            self.columns = self._columns_of(rows)
            added.append(self._line(self.names))
        names = self.names
        for row in rows:
            unknown = [k for k in row if k not in names]
            if unknown and self.resumed_from is not None:
                raise columns_differ(self.resumed_from, "metrics", unknown[:5])
            if unknown:
                raise RuntimeError(
                    f"env reported metrics {unknown} in round {row.get('round')!r} that the "
                    f"first round did not report; the column set of a run must be fixed"
                )
            added.append(self._line([_cell(row.get(name)) for name in names]))
        self.text.extend(added)
        return "".join(added)

    @staticmethod
    def _columns_of(rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, str | None]]:
        kinds: dict[str, str | None] = {name: None for name in LEADING_COLUMNS}
        for row in rows:
            for key, value in row.items():
                kinds[str(key)] = _merge_kinds(kinds.get(str(key)), _kind(value))
        return list(kinds.items())

    @staticmethod
    def _line(cells: Sequence[str]) -> str:
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerow(cells)
        return buffer.getvalue()

    def frame(self) -> pd.DataFrame:
        """The table as a DataFrame, parsed from exactly the text written to metrics.csv."""
        return _parse_metrics("".join(self.text), self.columns)


def _parse_metrics(text: str, columns: Sequence[tuple[str, str | None]] | None) -> pd.DataFrame:
    """Parse metrics CSV text; `columns` (name, kind) pins the dtypes of float columns."""
    import pandas as pd

    kinds = dict(columns or ())
    header = next(csv.reader(io.StringIO(text)), [])
    text_columns = {n for n in header if n == "group" or kinds.get(n) == "str"}
    dtype: dict[str, Any] = {n: str for n in text_columns}
    if columns is not None:
        # A float column whose values happen to be whole numbers (or are all missing)
        # must still be float, or the dtypes of a run would depend on its values.
        floats = {n for n in header if kinds.get(n) in ("float", None)} - {"round", "group"}
        dtype.update(dict.fromkeys(floats, "float64"))
    return pd.read_csv(
        io.StringIO(text),
        dtype=dtype,
        keep_default_na=False,  # a group called "NA" is a group, not a missing value
        na_values={n: [""] for n in header if n not in text_columns},
    )


def read_metrics(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a ``metrics.csv`` written by `simulate` (a file or a run directory)."""
    return _read_run_file(path, METRICS_FILE, lambda text: _parse_metrics(text, None))


def _read_run_file(
    path: str | os.PathLike[str], name: str, parse: Callable[[str], pd.DataFrame]
) -> pd.DataFrame:
    """Read run file `name` (a file or the run directory holding it) with `parse`;
    DataError for a missing, unreadable, empty or malformed file."""
    from recourse_sim.budget import memory_limit
    from recourse_sim.checkpoint import read_bounded
    from recourse_sim.errors import DataError

    path = Path(path)
    if path.is_dir():
        path = path / name
    # a regular file that fits (parsed, a table takes about 20 times its text)
    data = read_bounded(path, memory_limit() // 40, name, DataError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(f"cannot read {path}: not UTF-8 text") from None
    if not text.strip():
        raise DataError(f"{path} is empty (no round has completed)")
    try:
        return parse(text)
    except ValueError as e:  # pandas' ParserError is a ValueError
        raise DataError(f"{path} is not a readable {name} table: {e}") from e


class PeopleTable:
    """people.csv as CSV text: one row per applicant per round, columns fixed by the env
    (`recourse_sim.env.metrics.people_columns`) at the first round. Keeps the text only
    when it is to be returned as a DataFrame."""

    def __init__(
        self,
        columns: Sequence[str] | None = None,
        keep: bool = False,
        resumed_from: Path | None = None,
    ) -> None:
        self.resumed_from = resumed_from  # the checkpoint the columns came from, if any
        self.columns: list[str] | None = None if columns is None else [str(c) for c in columns]
        self.keep = keep
        self.text: list[str] = []

    def add_round(self, columns: Mapping[str, np.ndarray]) -> str:
        """Append one round's people; return the CSV text added (header included once)."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        if self.columns is None:
            self.columns = list(columns)
            writer.writerow(self.columns)
        elif list(columns) != self.columns and self.resumed_from is not None:
            raise columns_differ(self.resumed_from, "people", list(columns)[:5])
        elif list(columns) != self.columns:
            raise RuntimeError(
                f"env people columns {list(columns)} differ from the run's {self.columns}"
            )
        writer.writerows(zip(*(_cells(columns[name]) for name in self.columns), strict=True))
        text = buffer.getvalue()
        if self.keep:
            self.text.append(text)
        return text

    def frame(self) -> pd.DataFrame:
        """The table as a DataFrame, parsed from exactly the text written to people.csv."""
        return _parse_people("".join(self.text))


def _cells(values: np.ndarray) -> list[str]:
    """The CSV text of a column of one round's people, as `_cell` writes a value."""
    values = np.asarray(values)
    if values.dtype == bool:
        return np.where(values, "True", "False").tolist()
    if np.issubdtype(values.dtype, np.integer):
        return [str(v) for v in values.tolist()]
    if np.issubdtype(values.dtype, np.floating):
        # + 0.0 turns -0.0 into 0.0; NaN (none expected) would be an empty cell
        return ["" if v != v else format(v, FLOAT_FORMAT) for v in (values + 0.0).tolist()]
    # (flags that may not apply, as causal worlds' validity: None is an empty cell)
    return ["" if v is None else str(v) for v in values.tolist()]


def _parse_people(text: str) -> pd.DataFrame:
    """Parse people.csv text: groups as strings, every other non-flag column numeric."""
    import pandas as pd

    header = next(csv.reader(io.StringIO(text)), [])
    dtype: dict[str, Any] = {"group": str}
    dtype.update({n: "float64" for n in header if n in ("cost", "score")})
    dtype.update({n: "float64" for n in header if n.startswith(("feature_", "reported_"))})
    dtype.update({n: "float64" for n in header if n.startswith("collective_")})
    dtype.update({n: str for n in header if n == "collective"})
    # flags that may be empty (causal worlds' validity): nullable booleans
    dtype.update({n: "boolean" for n in header if n in ("recourse_valid_at_reapply", "improved")})
    return pd.read_csv(io.StringIO(text), dtype=dtype, keep_default_na=False, na_values=[""])


def read_people(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a ``people.csv`` written by `simulate` (a file or a run directory)."""
    return _read_run_file(path, PEOPLE_FILE, _parse_people)


def columns_differ(checkpoint: Path, key: str, names: list[str] | None) -> CheckpointError:
    detail = f" (the run reports {names})" if names else ""
    return CheckpointError(
        f"checkpoint {checkpoint} records {key} columns that are not those of "
        f"{RUN_FILES[key]}{detail}; rerun without --resume"
    )
