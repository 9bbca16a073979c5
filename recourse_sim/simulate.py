"""Run a scenario for R rounds: a tidy metrics table, durable outputs, checkpoints, resume.

`simulate` steps a `recourse_sim.env.RecourseEnv` round by round and collects
``info["metrics"]`` (one row per group, ``"all"`` included) into a tidy table. With an
output directory it writes, as the run goes:

``scenario.yaml``
    The resolved scenario (overrides applied, ``rounds`` set to the rounds of this run),
    written at the start: ``recourse-sim run DIR/scenario.yaml`` repeats the run.
``metrics.csv``
    One row per round × group, appended, flushed and fsynced as each round completes.
    Columns ``round, group, acceptance_rate, recourse_success_rate, mean_cost,
    model_accuracy`` first (a cell is empty where the environment gives no value, e.g. a
    metric that exists only for ``group == "all"``), then the scenario's other metrics in
    the order the environment first reports them.
    Floats are written with ``%.10g``, missing values as empty cells, so a seed fixes
    the file byte for byte.
``people.csv``
    One row per applicant per round (columns documented in `recourse_sim.env.metrics`:
    ``round, person, group, arrived, favourable_before, favourable, tried, cost,
    true_favourable, score, leaves``, and with ``people_features`` each feature's true
    value and report: ``feature_<f>``, ``reported_<f>``), written exactly like ``metrics.csv``.
``checkpoint/``
    The environment state after the last completed round (see `recourse_sim.checkpoint`),
    with the length and SHA-256 of ``metrics.csv`` and ``people.csv`` at that moment.
``summary.json``
    Written (atomically) when the run ends: scenario, seed, rounds, the final round's
    metrics per group, wall time. Its presence means the run finished.

``resume=True`` continues from the checkpoint: ``metrics.csv`` and ``people.csv`` are cut
back to exactly the rows of the completed rounds (a kill can leave half a line, or a
round whose checkpoint was never written), the environment state is restored, and the run
goes on. Because the returned DataFrames are always parsed from the same CSV text, an
interrupted-and-resumed run returns the same DataFrames and leaves the same files as an
uninterrupted one.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from recourse_sim.checkpoint import (
    CHECKPOINT_FILE,
    Checkpoint,
    atomic_write_text,
    load_checkpoint,
    make_dir,
    open_file,
    refuse_link,
    remove_checkpoint_files,
    save_checkpoint,
)
from recourse_sim.errors import CheckpointError, ConfigError

try:
    import fcntl
except ImportError:  # (not on Windows: runs there are not locked)
    fcntl = None

if TYPE_CHECKING:  # imported lazily at run time: pandas and the env are heavy
    import pandas as pd

    from recourse_sim.scenarios import Scenario

__all__ = [
    "CHECKPOINT_DIR",
    "LEADING_COLUMNS",
    "METRICS_FILE",
    "PEOPLE_FILE",
    "SCENARIO_FILE",
    "SUMMARY_FILE",
    "preflight",
    "read_metrics",
    "read_people",
    "simulate",
]

METRICS_FILE = "metrics.csv"
PEOPLE_FILE = "people.csv"
SUMMARY_FILE = "summary.json"
SCENARIO_FILE = "scenario.yaml"
CHECKPOINT_DIR = "checkpoint"
LOCK_FILE = ".lock"
PROGRESS_LINE_SECONDS = 5.0  # between progress lines when stderr is not a terminal

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


# --------------------------------------------------------------------------- the table


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


class _Table:
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
                raise _columns_differ(self.resumed_from, "metrics", unknown[:5])
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


class _PeopleTable:
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
            raise _columns_differ(self.resumed_from, "people", list(columns)[:5])
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


# --------------------------------------------------------------------------- helpers


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ConfigError(f"{name} must be {what}, got {value!r}")
    return int(value)


def _resolve_scenario(scenario: Scenario | str | os.PathLike[str]) -> Scenario:
    if isinstance(scenario, (str, os.PathLike)):
        from recourse_sim.scenarios import load_scenario

        return load_scenario(scenario)
    return scenario


def _with_rounds(scenario: Scenario, rounds: int) -> Scenario:
    """`scenario` with its horizon set to `rounds` (the scenario itself if it already is)."""
    if scenario.rounds == rounds:
        return scenario
    # model_copy keeps private attributes (the source file that relative paths resolve
    # against); the value needs no revalidation, `rounds` was checked to be positive.
    return scenario.model_copy(update={"rounds": rounds})


def preflight(scenario: Scenario) -> list[str]:
    """Every check a run makes before its first round, without running one: the
    environment is built and reset (classes, goals, learner parameters through the
    learner's own validation, the world's data), then dropped. `recourse-sim validate`
    and a sweep's up-front check use it, so a scenario they accept does not fail at
    round 0. Returns `world_summary`'s lines."""
    env = _make_env(scenario)
    try:
        env.reset(seed=0)
        return world_summary(env)
    finally:
        env.close()


SUMMARY_FEATURES = 20  # features listed by `world_summary` (then "… N more")
LEAK_AUC = 0.95  # a single feature predicting the label this well alone is suspect
APPROVES_MOST = 0.95  # a first model approving this share of its history is suspect
CONTINUOUS_UNIT = 0.01  # a continuous feature's smallest change: this share of its range


def world_summary(env: Any) -> list[str]:
    """A screen about the world a scenario builds: its rows, how labels are coded and
    balanced, its groups and their sizes, each feature with its type, what people may
    do with it and at what cost, then a ``warning:`` line for each setting that is legal
    but likely a mistake (`world_warnings`). Groups and class shares are of one cohort
    drawn with seed 0 (of every row for tabular worlds)."""
    world, actions = env.world, env.action_set
    data = getattr(world, "data", None)
    if data is not None:
        y, group, rows = data.y, data.group, f"{len(data.y):,} rows"
    else:
        cohort = world.newcomers(world.cohort_size, np.random.default_rng(0))
        y, group, rows = cohort.y0, cohort.group, f"a cohort of {len(cohort.y0):,} people"
    values = getattr(data, "class_values", ()) or tuple(str(k) for k in range(world.n_classes))
    shares = np.bincount(np.asarray(y, np.int64), minlength=world.n_classes) / max(len(y), 1)
    classes = ", ".join(
        f"class {k} = label {values[k]!r} ({share:.0%})" for k, share in enumerate(shares[:4])
    ) + (f", … ({len(shares)} classes)" if len(shares) > 4 else "")
    lines = [
        f"world: {env.scenario.world.kind}, {rows}, {len(actions.feature_names)} features",
        f"labels: {classes}; favourable: class {world.favourable}",
    ]
    if world.group_labels:
        sizes = np.bincount(np.asarray(group, np.int64), minlength=len(world.group_labels))
        lines.append(
            "groups: "
            + ", ".join(f"{g} {n:,}" for g, n in zip(world.group_labels, sizes, strict=True))
        )
    movable = np.flatnonzero(~actions.immutable_mask)
    lines.append(
        f"features ({len(movable)} of {actions.n_features} actionable; cost norm p = "
        f"{actions.p:g}; weight: cost per unit, unit: cost of the smallest change):"
    )
    types = feature_types(env)
    units = unit_costs(actions, types)
    table = [("name", "type", "action", "range", "weight", "unit")]
    for j in range(min(actions.n_features, SUMMARY_FEATURES)):
        if actions.immutable_mask[j]:
            action, weight, unit = "immutable", "", ""
        else:
            way = ", up only" if actions.increase_mask[j] else ""
            way = ", down only" if actions.decrease_mask[j] else way
            action, weight = f"actionable{way}", f"{actions.weights_[j]:.4g}"
            unit = f"{units[j]:.4g}" if np.isfinite(units[j]) else ""
        span = f"[{actions.lower_[j]:g}, {actions.upper_[j]:g}]"
        table.append((actions.feature_names[j], types[j], action, span, weight, unit))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        cells = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
        lines.append(f"  {cells}".rstrip())
    if actions.n_features > SUMMARY_FEATURES:
        lines.append(f"  … and {actions.n_features - SUMMARY_FEATURES} more")
    from recourse_sim.agents.strategies import best_response_bounds
    from recourse_sim.recourse.causal import search_summary

    lines += [f"warning: {w}" for w in world_warnings(env)]
    lines += search_summary(env) if env.scenario.world.kind == "scm" else []

    for s in getattr(env, "strategies", ()):
        if s.name == "best_response":
            note = best_response_bounds(s.action_set)
            if note:
                lines.append(f"note: populations.{s.population} (best_response): {note}")
    return lines


def feature_types(env: Any) -> list[str]:
    """Each feature's type, as the action set holds it (``types_``)."""
    return [str(t) for t in env.action_set.types_]


def unit_costs(actions: Any, types: Sequence[str]) -> np.ndarray:
    """The cost of the smallest change of each feature alone, its weight times: one step
    of an integer feature (the action set's ``step_``, else 1), 1 for a binary, ordinal
    or categorical one (a level), and for a continuous one `CONTINUOUS_UNIT` of its range
    (inf where the range is unbounded). A change of one feature costs weight × size
    under every norm p."""
    step = actions.step_
    size = np.empty(actions.n_features)
    for j, kind in enumerate(types):
        if kind == "integer":
            size[j] = step[j] if step[j] > 0 else 1.0
        elif kind in ("binary", "ordinal", "categorical"):
            size[j] = 1.0
        else:
            size[j] = CONTINUOUS_UNIT * (actions.upper_[j] - actions.lower_[j])
    return np.asarray(actions.weights_, float) * size


def world_warnings(env: Any) -> list[str]:
    """Settings that are legal but likely mistakes, each said once: a cohort or history
    larger than the data (rows drawn with replacement), a feature that predicts the
    label almost perfectly alone (AUC ≥ `LEAK_AUC`, in data: a leak of the outcome?), a
    budget ε below the smallest change of every feature a population may change (it can
    change nothing), and a first model that approves ≥ `APPROVES_MOST` of its history."""
    from recourse_sim.env.metrics import _auc

    world, spec, out = env.world, env.scenario.world, []
    data = getattr(world, "data", None)
    if data is not None and getattr(spec, "population", "sample") != "file":
        rows = len(data.y)
        for name in ("cohort_size", "history_size"):
            size = getattr(spec, name, None)
            if size is not None and size > rows:
                out.append(
                    f"world.{name} {size:,} is larger than the data's {rows:,} rows: rows are "
                    "drawn with replacement, so the same rows appear several times"
                )
    leaks = []  # (in data; a generated world's features predict its labels by design)
    for j, name in enumerate(env.action_set.feature_names if data is not None else ()):
        auc = _auc(np.asarray(data.X[:, j], float), data.y == world.favourable)
        if auc is not None and max(auc, 1 - auc) >= LEAK_AUC:
            leaks.append(f"{name} (AUC {max(auc, 1 - auc):.3f})")
    if leaks:
        out.append(
            f"alone, {', '.join(leaks)} predicts the favourable label with AUC ≥ "
            f"{LEAK_AUC:g}: does it leak the outcome?"
        )
    types = feature_types(env)
    for s in env.strategies:
        epsilon = getattr(s.spec, "epsilon", None)
        movable = np.flatnonzero(s.action_set.actionable)
        if epsilon is None or not len(movable):
            continue
        units = unit_costs(s.action_set, types)[movable]
        cheapest = int(np.argmin(units))
        if np.isfinite(units).all() and epsilon < units[cheapest]:
            j = movable[cheapest]
            out.append(
                f"populations.{s.population}.epsilon {epsilon:g} is below the cost of the "
                f"smallest change of every feature it may change (cheapest: "
                f"{s.action_set.feature_names[j]}, {types[j]}, {units[cheapest]:.4g}): its "
                "members can change nothing"
            )
    rule = env.scenario.decision
    X_hist, y_hist = world.history(np.random.default_rng(0))
    if rule.rule == "capacity":
        share = rule.capacity if rule.places is None else rule.places / max(len(X_hist), 1)
    else:  # at the rule's threshold (group thresholds left aside: the history has no groups)
        proba = env.learner.predict_proba(X_hist)
        share = float(env._decide(proba, np.zeros(len(X_hist), np.int64)).mean())
    if share >= APPROVES_MOST:
        out.append(
            f"the first model's decision rule ({rule.rule}) approves {share:.1%} of the "
            f"history (favourable base rate {np.mean(y_hist == world.favourable):.1%}): "
            "nearly nobody gets the unfavourable decision (is world.favourable the right "
            "label value?)"
        )
    return out


def _make_env(scenario: Scenario) -> Any:
    """The environment of one run (a seam for tests that substitute a test double)."""
    from recourse_sim.env import RecourseEnv

    return RecourseEnv(scenario)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise ConfigError(f"cannot read data file {path}: {e.strerror or e}") from None
    return digest.hexdigest()


def _json_value(value: Any) -> Any:
    """A strict-JSON value: numpy scalars unwrapped, NaN as null."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else str(value)
    return value


def _summary(
    frame: pd.DataFrame, scenario: Scenario, seed: int, rounds: int, wall: float, resumed: bool
) -> dict[str, Any]:
    from recourse_sim import __version__

    last = frame[frame["round"] == frame["round"].iloc[-1]]
    final = {}
    for row in last.to_dict("records"):
        # Leave out metrics this group never has (e.g. segregation exists for "all" only);
        # the seekers' rates, undefined in a round with no seekers, stay (as null).
        reported = frame.loc[frame["group"] == row["group"]].notna().any()
        final[str(row["group"])] = {
            k: _json_value(v)
            for k, v in row.items()
            if k not in ("round", "group") and (reported[k] or k in SEEKER_COLUMNS)
        }
    return {
        "scenario": scenario.name,
        "seed": seed,
        "rounds": rounds,
        "final_round": _json_value(last["round"].iloc[0]),
        "final": final,
        "files": {"metrics": METRICS_FILE, "people": PEOPLE_FILE, "scenario": SCENARIO_FILE},
        "resumed": resumed,
        "wall_time_seconds": round(wall, 3),
        "recourse_sim_version": __version__,
    }


RUN_FILES = {"metrics": METRICS_FILE, "people": PEOPLE_FILE}
"""The files a run appends to round by round, by the key their checkpoint records them
under (``<key>_bytes``, ``<key>_sha256``)."""

# every name a run writes, appends to or deletes in its directory
_RUN_DIR_NAMES = (
    LOCK_FILE,
    CHECKPOINT_DIR,
    f"{CHECKPOINT_DIR}/{CHECKPOINT_FILE}",
    SUMMARY_FILE,
    SCENARIO_FILE,
    *RUN_FILES.values(),
)


class _AppendFile:
    """A run file (metrics.csv, people.csv) opened for appending; every append is flushed
    and fsynced."""

    def __init__(self, path: Path, prefix: bytes) -> None:
        self.path = path
        self._hash = hashlib.sha256(prefix)
        self.size = len(prefix)
        fd = open_file(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0))
        self._file: BinaryIO = os.fdopen(fd, "r+b")
        # Cut back to the committed rows: drop a half-written line or an unsaved round.
        self._file.truncate(self.size)
        self._file.seek(self.size)
        self._sync()

    def append(self, text: str) -> None:
        data = text.encode("utf-8")
        self._file.write(data)  # one write per round keeps a torn round at the tail
        self._sync()
        self._hash.update(data)
        self.size += len(data)

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def _sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def _committed(out: Path, key: str, meta: Mapping[str, Any], checkpoint: Path) -> bytes:
    """The bytes of run file `key` the checkpoint vouches for; CheckpointError if they are
    gone."""
    path = out / RUN_FILES[key]
    if f"{key}_bytes" not in meta:
        raise CheckpointError(
            f"checkpoint {checkpoint} records no {RUN_FILES[key]} (written by an older "
            "recourse-sim); rerun without --resume"
        )
    size = int(meta[f"{key}_bytes"])
    try:
        with os.fdopen(open_file(path, os.O_RDONLY | getattr(os, "O_BINARY", 0)), "rb") as f:
            prefix = f.read(size)
    except FileNotFoundError:
        prefix = b""
    if len(prefix) < size or _sha256(prefix) != meta[f"{key}_sha256"]:
        raise CheckpointError(
            f"{path} does not hold the rows that checkpoint {checkpoint} recorded "
            "(file shortened or edited); rerun without --resume"
        )
    return prefix


_KINDS = (None, "bool", "int", "float", "str")


def _recorded_columns(
    checkpoint: Checkpoint, prefixes: Mapping[str, bytes]
) -> tuple[list[tuple[str, str | None]] | None, list[str] | None]:
    """The metrics and people columns `checkpoint` records: each a list of names (with a
    kind, for metrics) that must be the header of the run file the checkpoint vouches
    for (None before the first round); CheckpointError if not."""
    meta = checkpoint.meta
    columns, people_columns = meta.get("columns"), meta.get("people_columns")
    if columns is not None and not (
        isinstance(columns, list)
        and all(
            isinstance(c, list) and len(c) == 2 and isinstance(c[0], str) and c[1] in _KINDS
            for c in columns
        )
    ):
        raise CheckpointError(f"checkpoint {checkpoint.path} records malformed metrics columns")
    if people_columns is not None and not (
        isinstance(people_columns, list) and all(isinstance(c, str) for c in people_columns)
    ):
        raise CheckpointError(f"checkpoint {checkpoint.path} records malformed people columns")
    names = None if columns is None else [name for name, _ in columns]
    for key, recorded in (("metrics", names), ("people", people_columns)):
        first = prefixes[key].split(b"\n", 1)[0].decode("utf-8", "replace")
        header = next(csv.reader([first]), []) if prefixes[key] else None
        if header != recorded:
            raise _columns_differ(checkpoint.path, key, None)
    return columns, people_columns


def _columns_differ(checkpoint: Path, key: str, names: list[str] | None) -> CheckpointError:
    detail = f" (the run reports {names})" if names else ""
    return CheckpointError(
        f"checkpoint {checkpoint} records {key} columns that are not those of "
        f"{RUN_FILES[key]}{detail}; rerun without --resume"
    )


def _inspect(
    out: Path, resume: bool, identity: Mapping[str, Any], overwrite: bool
) -> Checkpoint | None:
    """Check `out` without changing anything in it: the verified checkpoint to resume (or
    None to start afresh). Refused: a resume of another run, and replacing a finished
    run (one with a ``summary.json``) without `overwrite`."""
    # a link planted in the run directory would make the run change a file elsewhere
    for path in (out, *(out / name for name in _RUN_DIR_NAMES)):
        refuse_link(path)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output directory {out} is a file")
    checkpoint = load_checkpoint(out / CHECKPOINT_DIR) if resume else None
    if checkpoint is not None:
        run = checkpoint.meta.get("run", {})
        if run != identity:
            raise ConfigError(_mismatch(out, run, identity))
        return checkpoint
    if not resume and not overwrite and (out / SUMMARY_FILE).is_file():
        raise ConfigError(
            f"{out} holds a finished run ({_held_run(out)}); pass --overwrite to replace it, "
            "--resume to extend it, or choose another --out"
        )
    return None


def _held_run(out: Path) -> str:
    """'scenario NAME, seed S' of the finished run in `out` (as its summary says)."""
    try:
        summary = json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8")[:100_000])
        return f"scenario {str(summary.get('scenario'))[:80]!r}, seed {summary.get('seed')!r}"
    except (OSError, ValueError, AttributeError):
        return "its summary.json is unreadable"


def _claim(out: Path) -> int:
    """Create `out` and take its lock for this process's run (a file descriptor to give
    to `_release` when the run ends). ConfigError naming the holder if another process
    runs there; a lock left by a process that died is released by the system, so it is
    taken over."""
    make_dir(out)
    while True:
        try:
            fd = open_file(out / LOCK_FILE, os.O_RDWR | os.O_CREAT)
        except OSError as e:
            raise ConfigError(f"cannot create {out / LOCK_FILE}: {e.strerror}") from e
        if fcntl is None:  # (no advisory locks on this platform)
            return fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(f"{out} is in use by process {holder}") from None
        if _is_lock_file(out, fd):
            break
        # the run that held it removed the file as it ended: lock the one there now
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return fd


def _is_lock_file(out: Path, fd: int) -> bool:
    """Whether `fd` is the file at ``out/.lock`` (not one removed since it was opened)."""
    try:
        held, there = os.fstat(fd), os.lstat(out / LOCK_FILE)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)


def _release(out: Path, fd: int) -> None:
    """Remove the lock file of `out` and release the lock. Removed while still locked, so
    a process that opened the old file meanwhile sees it is no longer the lock file."""
    if _is_lock_file(out, fd):
        with contextlib.suppress(OSError):
            os.unlink(out / LOCK_FILE)  # (unlink removes a link itself, never its target)
    os.close(fd)


def _prefixes(out: Path, checkpoint: Checkpoint | None) -> dict[str, bytes]:
    """The bytes of each run file the checkpoint owns; with none, an earlier run in
    `out` is cleared for a fresh start (empty prefixes)."""
    if checkpoint is None:
        _start_fresh(out)
        return dict.fromkeys(RUN_FILES, b"")
    return {k: _committed(out, k, checkpoint.meta, checkpoint.path) for k in RUN_FILES}


def _start_fresh(out: Path) -> None:
    """Remove what a previous run left in `out` (checkpoint first, so it cannot pair with
    the new run files if we are killed half-way)."""
    checkpoint = out / CHECKPOINT_DIR
    refuse_link(checkpoint)
    if checkpoint.is_dir():
        remove_checkpoint_files(checkpoint, record=True)
    (out / SUMMARY_FILE).unlink(missing_ok=True)
    for name in RUN_FILES.values():
        (out / name).unlink(missing_ok=True)


# --------------------------------------------------------------------------- simulate


def simulate(
    scenario: Scenario | str | os.PathLike[str],
    rounds: int | None = None,
    seed: int = 0,
    out: str | os.PathLike[str] | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool | str = False,
    people: bool = False,
    people_features: bool = False,
    people_collective: bool = False,
) -> pd.DataFrame | tuple[pd.DataFrame, pd.DataFrame]:
    """Run `scenario` for `rounds` rounds and return the tidy metrics table.

    Args:
        scenario: a loaded `Scenario`, a bundled scenario name, or a path to a YAML file.
        rounds: number of rounds (one env step each); default ``scenario.rounds``.
        seed: seeds the environment's single generator; a seed fixes the result.
        out: output directory (created if needed) for ``metrics.csv``, ``people.csv``,
            ``scenario.yaml``, ``summary.json`` and ``checkpoint/``. Without `resume`,
            files of an unfinished earlier run there are replaced; a finished one only
            with `overwrite`. Nothing there changes before the scenario has built, and
            the run holds a lock on `out` (``.lock``, removed when it ends) while it runs;
            a symbolic link in place of `out` or of any file the run writes there is
            refused. None: nothing is
            written.
        resume: continue the run in `out` from its checkpoint (from the start if it has
            none yet). The scenario and seed must be those of the run in `out`; `rounds`
            may be larger than the rounds already done, to extend a finished run.
        overwrite: replace a finished run in `out`.
        progress: show progress on stderr: True or ``"bar"``, a tqdm bar (a terminal);
            ``"lines"``, plain lines (logs, pipes, batch jobs): after the first round, every
            few seconds, and after the last.
        people: also return the people table (the rows of ``people.csv``).
        people_features: people.csv also holds each feature's true value and report
            (``feature_<f>``, ``reported_<f>``); part of the run's identity.
        people_collective: people.csv also holds what the round's collectives changed in
            each person's training report (``collective``, ``collective_cost``,
            ``collective_<f>``); part of the run's identity.

    Returns:
        One row per round × group (``"all"`` included), columns as in `LEADING_COLUMNS`
        then the scenario's other metrics. Values are those written to ``metrics.csv``
        (floats to 10 significant digits), so resumed and uninterrupted runs compare equal.
        With `people`, a pair: that table and the people table (one row per applicant
        per round, as in ``people.csv``).

    Raises:
        ConfigError: bad `rounds`/`seed`, `resume` without `out`, an unusable `out`, or a
            resume of a different scenario or seed than the run in `out`.
        CheckpointError: the checkpoint in `out` (or the rows it vouches for) is corrupt.
    """
    from tqdm import tqdm

    from recourse_sim.env.cycles import warn_if_cycling

    started = time.perf_counter()
    scenario = _resolve_scenario(scenario)
    rounds = _check_int("rounds", scenario.rounds if rounds is None else rounds, minimum=1)
    seed = _check_int("seed", seed, minimum=0)
    if resume and out is None:
        raise ConfigError("resume=True needs out= (the directory of the run to resume)")

    # The horizon is the run's: the env truncates after `scenario.rounds` and shows the
    # round fraction, and scenario.yaml must reproduce this run when run again.
    scenario = _with_rounds(scenario, rounds)
    scenario_yaml = scenario.to_yaml()
    # A run's identity leaves the horizon out, so a finished run can be extended.
    identity = {
        "scenario": scenario.name,
        "seed": seed,
        "scenario_sha256": _sha256(_with_rounds(scenario, 1).to_yaml().encode("utf-8")),
        "people_features": bool(people_features),
    }
    people_extra = {}  # (only when asked: runs without it keep their identity and call)
    if people_collective:
        identity["people_collective"] = people_extra["collective"] = True
    world = getattr(scenario, "world", None)
    if getattr(world, "kind", None) == "csv":  # the data is part of the run
        identity["data_sha256"] = _file_sha256(Path(world.path))
    out_dir = None if out is None else Path(out)
    # Nothing in an existing run directory changes until everything is checked: first
    # the directory (read only, before building the env, which may fit an oracle: a
    # wrong --resume fails at once), then the env; then the lock, and the same check
    # again under it (another process may have finished a run there meanwhile).
    checkpoint = None if out_dir is None else _inspect(out_dir, resume, identity, overwrite)
    if checkpoint is not None and checkpoint.round > rounds:
        raise ConfigError(
            f"{out_dir} already holds {checkpoint.round} rounds; cannot resume it to {rounds}"
        )
    env = _make_env(scenario)
    env.reset(seed=seed)
    table = _Table()
    crowd = _PeopleTable(keep=people)
    done = 0
    files: dict[str, _AppendFile] = {}
    lock = None
    try:
        prefixes = dict.fromkeys(RUN_FILES, b"")
        if out_dir is not None:
            lock = _claim(out_dir)
            checkpoint = _inspect(out_dir, resume, identity, overwrite)
            prefixes = _prefixes(out_dir, checkpoint)
        if checkpoint is not None:
            env.set_state(checkpoint.state)
            done = checkpoint.round
            columns, people_columns = _recorded_columns(checkpoint, prefixes)
            table = _Table(columns, resumed_from=checkpoint.path)
            table.text = prefixes["metrics"].decode("utf-8").splitlines(keepends=True)
            crowd = _PeopleTable(people_columns, keep=people, resumed_from=checkpoint.path)
            if people and prefixes["people"]:
                crowd.text = [prefixes["people"].decode("utf-8")]
        if out_dir is not None:
            if done < rounds:  # a summary.json means "finished"; this run is not, yet
                (out_dir / SUMMARY_FILE).unlink(missing_ok=True)
            atomic_write_text(out_dir / SCENARIO_FILE, scenario_yaml)
            for key, name in RUN_FILES.items():
                files[key] = _AppendFile(out_dir / name, prefixes[key])
            if checkpoint is None:  # so that a run killed in round 1 knows what it was
                _save(out_dir, env, 0, identity, table, crowd, files)

        action = np.zeros(env.action_space.shape, dtype=env.action_space.dtype)
        lines = _ProgressLines(scenario.name, rounds)
        with tqdm(
            total=rounds,
            initial=done,
            desc=scenario.name,
            unit="round",
            disable=progress not in (True, "bar"),
            file=sys.stderr,
            dynamic_ncols=True,
        ) as bar:
            while done < rounds:
                _, _, terminated, _, info = env.step(action)
                texts = {
                    "metrics": table.add_round(info["metrics"]),
                    "people": crowd.add_round(env.people(features=people_features, **people_extra)),
                }
                done += 1
                if out_dir is not None:
                    for key, text in texts.items():
                        files[key].append(text)
                    _save(out_dir, env, done, identity, table, crowd, files)
                bar.update(1)
                if progress == "lines":
                    lines.tick(done)
                if terminated:  # the world ended (e.g. nobody left); later steps are invalid
                    rounds = done
                    break
        frame = table.frame()
        _warn_if_piled(frame, scenario)
        warn_if_cycling(frame, scenario.name)
        if out_dir is not None:
            summary = _summary(
                frame, scenario, seed, rounds, time.perf_counter() - started, resumed=resume
            )
            atomic_write_text(out_dir / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    finally:
        for file in files.values():
            file.close()
        env.close()
        if lock is not None:
            _release(out_dir, lock)
    return (frame, crowd.frame()) if people else frame


PILE_WARNING_SHARE = 0.5
"""A run under a capacity rule warns when, in some round, more than this share of the
seekers end on the round's cut-off score (``seekers_at_cutoff``)."""


def _warn_if_piled(frame: pd.DataFrame, scenario: Scenario) -> None:
    """One line at the end of a capacity-rule run in which most seekers of some round
    piled on the cut-off score, with the numbers. (At a threshold a pile is harmless:
    everyone on it is favoured.)"""
    rule = getattr(getattr(scenario, "decision", None), "rule", None)
    if rule != "capacity" or "seekers_at_cutoff" not in frame:
        return
    everyone = frame[frame["group"] == "all"]
    share = everyone["seekers_at_cutoff"].astype(float)
    piled = share > PILE_WARNING_SHARE
    if not piled.any():
        return
    worst = everyone.loc[share.idxmax()]
    at = round(float(worst["seekers_at_cutoff"]) * int(worst["n_seekers"]))
    warnings.warn(
        f"{scenario.name}: in {int(piled.sum())} of {len(everyone)} rounds most seekers "
        f"ended on the round's cut-off score (seekers_at_cutoff up to "
        f"{float(worst['seekers_at_cutoff']):.3f}: {at} of {int(worst['n_seekers'])} in "
        f"round {int(worst['round'])}): they tie there and few of them get a place (a "
        "margin drawn per person, populations.<name>.margin, spreads them)",
        stacklevel=3,
    )


class _ProgressLines:
    """Progress for a log: a line on stderr after the first round, then one every
    `PROGRESS_LINE_SECONDS`, and one after the last round (so even a short run says how
    far it got and how long it took)."""

    def __init__(self, name: str, rounds: int):
        self.name, self.rounds, self.every = name, rounds, PROGRESS_LINE_SECONDS
        self.started = self.last = time.monotonic()
        self.printed = False

    def tick(self, done: int) -> None:
        now = time.monotonic()
        if not self.printed or now - self.last >= self.every or done == self.rounds:
            self.last, self.printed = now, True
            print(
                f"{self.name}: round {done}/{self.rounds} ({now - self.started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )


def _save(
    out: Path,
    env: Any,
    done: int,
    identity: dict[str, Any],
    table: _Table,
    crowd: _PeopleTable,
    files: Mapping[str, _AppendFile],
) -> None:
    """Checkpoint after `done` rounds, recording how much of each run file they own."""
    meta: dict[str, Any] = {
        "run": identity,
        "columns": table.columns,
        "people_columns": crowd.columns,
    }
    for key, file in files.items():
        meta[f"{key}_bytes"] = file.size
        meta[f"{key}_sha256"] = file.sha256
    save_checkpoint(out / CHECKPOINT_DIR, round=done, state=env.get_state(), meta=meta)


def _mismatch(out: Path, run: Mapping[str, Any], wanted: Mapping[str, Any]) -> str:
    """One line saying how the run in `out` differs from the one asked to resume."""
    held = f"scenario {run.get('scenario')!r} seed {run.get('seed')!r}"
    asked = f"scenario {wanted['scenario']!r} seed {wanted['seed']!r}"
    if held == asked and run.get("data_sha256") != wanted.get("data_sha256"):
        asked += " on a changed data file (its contents differ from the run's)"
    elif held == asked:
        asked += " with different settings (edited scenario file or other --set overrides)"
    return f"{out} holds a run of {held}; cannot resume it as {asked}"
