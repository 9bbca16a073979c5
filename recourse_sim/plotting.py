"""Long-term dynamics plots from a run's ``metrics.csv``.

Uses matplotlib's object API with the Agg canvas (no pyplot), so plotting neither needs a
display nor changes the global backend of the caller's session.
"""

from __future__ import annotations

import io
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from recourse_sim.checkpoint import atomic_write_bytes
from recourse_sim.errors import ConfigError, DataError
from recourse_sim.simulate import SEEKER_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "PANELS",
    "Panel",
    "panels_named",
    "plot_dynamics",
    "plot_runs",
    "plot_sweep",
    "run_labels",
]

RUNS_AVERAGED = "runs_averaged"  # a sweep cell's runs with seekers, per round


@dataclass(frozen=True)
class Panel:
    """One panel of a dynamics plot: a column of ``metrics.csv`` over rounds."""

    column: str  # the column drawn, also the panel's name for ``--panels``
    label: str  # the y-axis label
    rate: bool = False  # a share: drawn on [0, 1], confidence bands clipped to it
    zero_is_empty: bool = False  # all zeros means nothing happened: no panel by default
    default: bool = True  # drawn without ``--panels`` (when it has values)
    when: str | None = None  # by default only if this column is non-zero somewhere
    unless: str | None = None  # by default only if this column is zero or empty throughout


PANELS = (
    # what the deployed model decides and what recourse does
    Panel("acceptance_rate", "acceptance rate", rate=True),
    Panel("recourse_success_rate", "recourse success rate", rate=True),
    Panel("mean_cost", "mean recourse cost"),
    Panel("n_seekers", "seekers", zero_is_empty=True),
    # the collective's outcome
    Panel(
        "query_success_next",
        "query group's success, next model",
        rate=True,
        when="collective_participants",
    ),
    Panel("collective_participants", "collective participants", zero_is_empty=True),
    Panel("collective_mean_cost", "collective's mean cost", zero_is_empty=True, default=False),
    # convergence (performative prediction)
    Panel("theta_step", "θ step ‖θ₊ − θ‖", zero_is_empty=True),
    Panel("performative_risk", "performative risk (log loss)"),
    Panel("model_shift", "model shift ‖θ − θ₀‖", zero_is_empty=True, unless="theta_step"),
    # causal validity (causal worlds)
    Panel("recourse_valid_at_reapply", "recourse valid at re-application", rate=True),
    Panel("improved_rate", "seekers whose true outcome improved", rate=True),
    # outcomes
    Panel("true_outcome_rate", "true favourable outcome", rate=True),
    Panel("model_accuracy", "model accuracy", rate=True),
    Panel("approved_favourable_rate", "approved with a favourable outcome", rate=True),
    Panel(RUNS_AVERAGED, "runs averaged (recourse success)"),
    # on request (--panels)
    Panel("acceptance_rate_before", "acceptance before recourse", rate=True, default=False),
    Panel("seekers_at_cutoff", "seekers at the cut-off", rate=True, default=False),
    Panel("recourse_reliability", "recourse reliability", rate=True, default=False),
    Panel("recourse_valid_after_T", "recourse valid after T rounds", rate=True, default=False),
    Panel("auc", "AUC", rate=True, default=False),
    Panel("class_accuracy", "class accuracy", rate=True, default=False),
    Panel("disparity", "acceptance disparity", rate=True, default=False),
    Panel("dissimilarity_index", "dissimilarity index", rate=True, default=False),
    Panel("loss_before_refit", "training loss before refit", default=False),
    Panel("loss_after_refit", "training loss after refit", default=False),
    Panel("reward", "reward", default=False),
    Panel("has_recourse_rate", "applications with recourse", rate=True, default=False),
    Panel("decision_threshold", "decision threshold", default=False),
    Panel("mean_time_to_favourable", "rounds to the favourable decision", default=False),
    Panel("mean_failed_attempts", "failed recourse attempts", default=False),
    Panel("pool_size", "pool size", default=False),
    Panel("newcomers", "newcomers", default=False),
    Panel("leavers", "leavers", default=False),
    Panel("n", "applicants", default=False),
)
"""The panels a plot can draw, in the order drawn. By default a panel is drawn when its
column has a value (and, `zero_is_empty`, a non-zero one) in some line, and its `when`
and `unless` conditions hold: the task a run measured chooses its panels (a collective's
outcome, a model's convergence, causal validity). ``--panels`` names others."""
PANEL_NAMES = {panel.column: panel for panel in PANELS}
REQUIRED = ("round", "group", "acceptance_rate")
LABEL_WIDTH = 40
"""Longest legend label (characters); longer labels become numbered entries and a key
table below the figure."""
DRAWABLE = 1e300
"""Largest magnitude drawn (beyond it matplotlib's axis arithmetic overflows)."""
MAX_ROUND = 10**9
"""Largest round number a plot accepts (a table with more is not a run's)."""
VALUE_WIDTH = 48
"""Longest value in the key table (characters; longer ones end in "…")."""
CAUSAL_FROM_PEOPLE = {
    "recourse_valid_at_reapply": "recourse_valid_at_reapply",
    "improved_rate": "improved",
}
"""metrics.csv column -> the people.csv flag it averages (read from people.csv for runs
whose metrics.csv lacks the column)."""


def panels_named(names: list[str]) -> list[Panel]:
    """The panels called `names` (their columns, in that order); ConfigError naming an
    unknown one and listing the valid names."""
    unknown = [name for name in names if name not in PANEL_NAMES]
    if unknown or not names:
        what = f"unknown panel {unknown[0]!r}" if unknown else "no panel named"
        raise ConfigError(f"{what} (--panels); the panels are " + ", ".join(PANEL_NAMES))
    return [PANEL_NAMES[name] for name in dict.fromkeys(names)]


def plot_dynamics(
    metrics: pd.DataFrame | str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    title: str | None = None,
    panels: list[str] | None = None,
) -> Path:
    """Draw one run's dynamics over rounds, one line per group (the query group and
    ``all`` included), in the panels the run measured (`PANELS`): acceptance, recourse
    success and cost (blank in rounds without seekers) and seekers; the collective's
    outcome for its query group; the model's convergence; causal validity; true
    outcomes, accuracy and, where there are approvals, the share of approved people with
    a favourable outcome (a lender: one minus its default rate).

    Args:
        metrics: a tidy metrics table, a ``metrics.csv`` or a run directory holding one.
        out: the image file to write (its suffix picks the format, e.g. ``.png``): a new
            path or a regular file.
        title: figure title; default, when `metrics` is a path, the scenario and seed from
            the run's ``summary.json`` (or the run directory's name).
        panels: the panels to draw (their columns, `PANELS`), in that order; default,
            those the run measured.

    Returns:
        The path written.

    Raises:
        DataError: the table cannot be read, is empty, or lacks a needed column.
        ConfigError: `out` cannot be written or is not a regular file; an unknown panel.
    """
    if isinstance(metrics, (str, os.PathLike)):
        title = title if title is not None else _run_title(_run_dir(Path(metrics)))
    metrics, source = _metrics(metrics)
    lines = {}
    for group in dict.fromkeys(metrics["group"]):  # first-seen order, as in the file
        rows = metrics[metrics["group"] == group]
        lines[str(group)] = {c: (rows["round"], rows[c]) for c in rows.columns}
    return _draw(lines, None, out, title, "group", panels=panels, source=source)


def plot_runs(
    runs: list[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    group: str = "all",
    labels: list[str] | None = None,
    panels: list[str] | None = None,
) -> Path:
    """Overlay several runs: the panels of `plot_dynamics` for one `group` (default
    ``all``), one line per run, labelled by `labels` (one per run) or else by the
    settings that differ between the runs (`run_labels`, abbreviated; when those are
    long, numbered runs and a table of the settings below the figure)."""
    if labels is not None and len(labels) != len(runs):
        raise ConfigError(f"{len(labels)} --label for {len(runs)} runs; give one per run")
    dirs = [_run_dir(Path(run)) for run in runs]
    names, common, key = _run_key(dirs)
    if labels is not None:  # the user's names; the title still says what the runs share
        names, key = list(labels), None
    lines = {}
    for run, label in zip(runs, names, strict=True):
        metrics, source = _metrics(run)
        rows = metrics[metrics["group"] == group]
        if rows.empty:
            raise DataError(f"{source} has no rows of group {group!r}")
        while label in lines:  # two runs with one label: keep both
            label += "'"
        lines[label] = {c: (rows["round"], rows[c]) for c in rows.columns}
    title = f"{len(runs)} runs, group {group}" + (f" ({common})" if common else "")
    return _draw(lines, None, out, title, "run", panels=panels, key=key, source="the runs")


def run_labels(run_dirs: list[Path]) -> tuple[list[str], str]:
    """Legend labels naming what differs between runs: the settings of their
    ``scenario.yaml`` that differ (``key=value``, each key by the end of its dotted path
    that tells it apart; a block such as a population that one run has and another lacks
    is one setting), and their seeds if those differ; with the description of what they
    share (scenario, seed). A run without a readable ``scenario.yaml`` or
    ``summary.json`` contributes what it has (its directory name, at worst)."""
    labels, shared, _ = _run_key(run_dirs)
    return labels, shared


_MISSING = object()  # a setting one run has and another lacks
KIND_KEYS = ("kind", "strategy", "type", "rule", "method")
"""Keys whose value names what a settings block is (a short label shows only that)."""
GENERIC_KEYS = frozenset(
    {"kind", "median", "sigma", "mean", "std", "scale", "value", "type", "rule", "params"}
    | {"p", "C", "low", "high", "rate", "seed", "steps", "epsilon", "lr"}
)
"""Setting names that say little alone: a label keeps their parent (``margin.median``)."""


def _run_key(run_dirs: list[Path]) -> tuple[list[str], str, tuple[list[str], list[list]]]:
    """(short labels, what the runs share, (header, one row per run) of the key table)."""
    trees = [_settings(d) for d in run_dirs]
    seeds = [_run_summary(d).get("seed") for d in run_dirs]
    try:
        differ = _differences(trees)
    except RecursionError:  # settings nested beyond reason: the runs by their names
        differ = []
    short_keys = _abbreviate([path for path, _ in differ])
    seeds_differ = len(set(map(repr, seeds))) > 1
    labels, rows = [], []
    for i, d in enumerate(run_dirs):
        parts, cells = [], []
        for path, values in differ:
            block = any(isinstance(v, dict) for v in values)
            parts.append(f"{short_keys[path]}={_describe(values[i], block, short=True)}")
            cells.append(_describe(values[i], block, short=False))
        if seeds_differ:
            parts.append(f"seed {seeds[i]}")
            cells.append(str(seeds[i]))
        labels.append(", ".join(parts) if parts else _run_title(d))
        rows.append(cells)
    header = [path for path, _ in differ] + (["seed"] if seeds_differ else [])
    if not header:  # nothing differs that the settings tell: the runs' names
        header, rows = ["run"], [[label] for label in labels]
    shared = []
    names = {
        str(t.get("name", _run_summary(d).get("scenario")))
        for d, t in zip(run_dirs, trees, strict=True)
    }
    if len(names) == 1 and names != {"None"}:
        shared.append(names.pop())
    if not seeds_differ and seeds[0] is not None:
        shared.append(f"seed {seeds[0]}")
    return labels, ", ".join(shared), (header, rows)


def _settings(run_dir: Path) -> dict:
    """A run's resolved scenario (``scenario.yaml``) as nested plain data (empty if there
    is none). Read as plain data: loading never runs code."""
    import yaml

    try:
        data = yaml.safe_load((run_dir / "scenario.yaml").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _differences(trees: list[dict]) -> list[tuple[str, list]]:
    """(dotted path, value in each tree) of the settings that differ, at the shallowest
    path where they do: a block one tree has and another lacks is one setting, not one
    per field. A scenario's description and horizon are not settings."""
    found: list[tuple[str, list]] = []

    def walk(values: list, path: str) -> None:
        if all(isinstance(v, dict) for v in values):
            for k in dict.fromkeys(k for v in values for k in v):  # first-seen order
                walk([v.get(k, _MISSING) for v in values], f"{path}.{k}" if path else str(k))
        elif len({_canonical(v) for v in values}) > 1:
            found.append((path, values))

    walk(trees, "")
    return [(path, v) for path, v in found if path not in ("description", "rounds")]


def _canonical(value) -> str:
    if value is _MISSING:
        return "\0missing"
    return json.dumps(value, sort_keys=True, default=repr)


def _abbreviate(paths: list[str]) -> dict[str, str]:
    """Each dotted path by its shortest ending that no other path shares (two parts when
    the last one says little alone, `GENERIC_KEYS`)."""
    parts = {path: path.split(".") for path in paths}
    short = {}
    for path, p in parts.items():
        k = 2 if len(p) > 1 and p[-1] in GENERIC_KEYS else 1
        while k < len(p) and any(q != path and parts[q][-k:] == p[-k:] for q in paths):
            k += 1
        short[path] = ".".join(p[-k:])
    return short


def _describe(value, block: bool, *, short: bool) -> str:
    """A setting's value as text: a block (a population, a distribution) by what it is
    (its kind or strategy) and, unless `short`, its fields; absent: ``none`` for a block,
    else ``unset``; at most `VALUE_WIDTH` characters."""
    if value is _MISSING:
        return "none" if block else "unset"
    if value is None:
        text = "none"
    elif isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, float):
        text = f"{value:g}"
    elif isinstance(value, dict):
        named_by = next((k for k in KIND_KEYS if isinstance(value.get(k), str)), None)
        kind = value[named_by] if named_by else None
        fields = ", ".join(
            f"{k}={_describe(v, False, short=True)}" for k, v in value.items() if k != named_by
        )
        if short:
            text = kind or "{…}"
        else:
            text = f"{kind} ({fields})" if kind and fields else kind or "{" + fields + "}"
    elif isinstance(value, list):
        text = "[" + ", ".join(_describe(v, False, short=True) for v in value) + "]"
    else:
        text = str(value)
    return text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 1] + "…"


def plot_sweep(
    sweep: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    group: str = "all",
    title: str | None = None,
    panels: list[str] | None = None,
) -> Path:
    """A sweep (``sweep.csv`` or its directory): each grid cell as the mean over its seeds
    per round with a 95 % confidence band (Student t; rates' bands clipped to [0, 1]), for
    one `group` (default ``all``). Recourse success and cost average only the runs with
    seekers in that round; when that is fewer than all, a panel shows how many runs each
    point averages. `title` replaces the default (the sweep's folder and its number of
    seeds); `panels` as in `plot_dynamics`."""
    import pandas as pd

    from recourse_sim.stats import t_half_width

    path = Path(sweep)
    path = path / "sweep.csv" if path.is_dir() else path
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read sweep table {path}: {e}") from None
    if "seed" not in table.columns or not set(REQUIRED) <= set(table.columns):
        raise DataError(f"{path} is not a sweep table (no seed, round or group column)")
    _check_rounds(table, str(path))
    grid = list(table.columns[: list(table.columns).index("seed")])
    table = table[table["group"] == group]
    if table.empty:
        raise DataError(f"{path} has no rows of group {group!r}")
    table = _blank_without_seekers(table)
    short_keys = _abbreviate(grid)
    lines, bands, rows = {}, {}, []
    cells = table.groupby(grid, sort=False) if grid else [((), table)]
    sparse = False
    for values, cell in cells:
        values = values if isinstance(values, tuple) else (values,)
        label = ", ".join(
            f"{short_keys[k]}={_describe(v, False, short=True)}"
            for k, v in zip(grid, values, strict=True)
        )
        rows.append([_describe(v, False, short=False) for v in values] or ["all cells"])
        label = label or "all cells"
        while label in lines:  # two cells that print alike (0.1 and 0.1000001): keep both
            label += "'"
        by_round = cell.groupby("round")
        # each column's mean over the runs that have a value there (an empty round, no
        # seekers, is left out, not averaged in as 0), its band from that many runs
        means = by_round.mean(numeric_only=True)
        n = by_round.count()[means.columns]
        std = by_round.std(numeric_only=True)
        half = {c: t_half_width(std[c], n[c]) for c in std.columns}
        lines[label] = {c: (means.index, means[c]) for c in means.columns}
        bands[label] = {c: (means[c] - half[c], means[c] + half[c]) for c in half}
        if SEEKER_COLUMNS[0] in n:
            runs = n[SEEKER_COLUMNS[0]].astype(float)
            lines[label][RUNS_AVERAGED] = (means.index, runs)
            sparse |= bool((runs < by_round.size()).any())
    if not sparse:  # every point averages every run: the title says how many
        for series in lines.values():
            series.pop(RUNS_AVERAGED, None)
    if title is None:
        seeds = table["seed"].nunique()
        title = f"{path.parent.name}: mean and 95 % CI over {seeds} seeds" + (
            " (recourse success and cost: over the runs with seekers, see 'runs averaged')"
            if sparse
            else ""
        )
    key = (grid or ["cell"], rows)
    return _draw(lines, bands, out, title, "cell", panels=panels, key=key, source=str(path))


def _blank_without_seekers(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with the seekers' rates empty where a row has no seekers (tables written
    before those cells were left empty hold 0 there)."""
    if "n_seekers" not in table.columns:
        return table
    table = table.copy()
    for column in SEEKER_COLUMNS:
        if column in table.columns:
            table[column] = table[column].where(table["n_seekers"] != 0)
    return table


def _run_dir(path: Path) -> Path:
    return path if path.is_dir() else path.parent


def _metrics(metrics) -> tuple[pd.DataFrame, str]:
    """(the table, where it came from), checked for the columns every plot needs; a run's
    causal validity read from its people.csv where its metrics.csv lacks it."""
    from recourse_sim.simulate import read_metrics

    source = "metrics table"
    if isinstance(metrics, (str, os.PathLike)):
        path = Path(metrics)
        source = str(path / "metrics.csv" if path.is_dir() else path)
        metrics = _with_causal_rates(read_metrics(path), _run_dir(path))
    missing = [c for c in REQUIRED if c not in metrics.columns]
    if missing:
        raise DataError(f"{source} lacks column(s) {', '.join(missing)}")
    if metrics.empty:
        raise DataError(f"{source} has no rows")
    _check_rounds(metrics, source)
    return metrics, source


def _check_rounds(table: pd.DataFrame, source: str) -> None:
    """DataError unless the round column holds round numbers (whole, 0 to `MAX_ROUND`)."""
    import numpy as np
    import pandas as pd

    rounds = pd.to_numeric(table["round"], errors="coerce").to_numpy(dtype=float)
    if not ((rounds == np.round(rounds)) & (rounds >= 0) & (rounds <= MAX_ROUND)).all():
        raise DataError(f"{source}: column round must hold whole numbers from 0 to {MAX_ROUND}")


def _with_causal_rates(metrics: pd.DataFrame, run_dir: Path) -> pd.DataFrame:
    """`metrics` with the causal-validity rates (`CAUSAL_FROM_PEOPLE`) it lacks averaged
    from the run's people.csv (per round and group, and for ``all``), where that has
    them."""
    import pandas as pd

    from recourse_sim.simulate import PEOPLE_FILE, read_people

    wanted = {m: f for m, f in CAUSAL_FROM_PEOPLE.items() if m not in metrics.columns}
    people_path = run_dir / PEOPLE_FILE
    if not wanted or not people_path.is_file() or "group" not in metrics.columns:
        return metrics
    try:
        with open(people_path, "rb") as f:
            header = f.readline(1 << 16).decode("utf-8", "replace").strip().split(",")
    except OSError:
        return metrics
    wanted = {m: f for m, f in wanted.items() if f in header}
    if not wanted:
        return metrics
    people = read_people(people_path)
    flags = people[["round", "group", *wanted.values()]].astype(
        {f: "Float64" for f in wanted.values()}
    )
    per_group = flags.groupby(["round", "group"], sort=False).mean()
    everyone = flags.drop(columns="group").groupby("round").mean()
    everyone = everyone.assign(group="all").set_index("group", append=True)
    rates = pd.concat([per_group, everyone]).astype(float)
    rates.columns = list(wanted)
    keys = pd.MultiIndex.from_arrays([metrics["round"], metrics["group"].astype(str)])
    return metrics.assign(**{m: rates[m].reindex(keys).to_numpy() for m in wanted})


def _check_out(out: Path) -> None:
    """Refuse an `out` that exists and is not a regular file (a device, a FIFO, a
    directory: replacing it would destroy it); a link is refused where it is written."""
    import stat

    try:
        mode = os.lstat(out).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise ConfigError(f"cannot write {out}: {e.strerror or e}") from e
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return
    kind = {
        stat.S_IFCHR: "a character device",
        stat.S_IFBLK: "a block device",
        stat.S_IFIFO: "a FIFO",
        stat.S_IFSOCK: "a socket",
        stat.S_IFDIR: "a directory",
    }.get(stat.S_IFMT(mode), "not a regular file")
    raise ConfigError(f"cannot write {out}: it is {kind}, and a plot replaces only a regular file")


def _series(lines: dict, source: str) -> tuple[dict, dict[str, int]]:
    """`lines` as label -> column -> (rounds, float values): the seekers' rates blank in
    rounds without seekers and undrawable values (infinite, or beyond `DRAWABLE`) blank,
    with the count of those per column. DataError for text in a panel's column."""
    import numpy as np

    clean: dict = {}
    infinite: dict[str, int] = {}
    for label, series in lines.items():
        clean[label] = {}
        for column, (rounds, v) in series.items():
            try:
                v = np.asarray(v, dtype=float).copy()
            except (TypeError, ValueError):  # text: a panel's column must be numbers
                if column in PANEL_NAMES or column == "n_seekers":
                    raise DataError(f"{source}: column {column} holds text") from None
                continue
            with np.errstate(invalid="ignore"):
                bad = np.isinf(v) | (np.abs(v) > DRAWABLE)
            if bad.any():
                infinite[column] = infinite.get(column, 0) + int(bad.sum())
                v[bad] = np.nan
            clean[label][column] = (np.asarray(rounds, dtype=float), v)
        if "n_seekers" in clean[label]:
            no_seekers = clean[label]["n_seekers"][1] == 0
            for column in SEEKER_COLUMNS:
                if column in clean[label]:
                    clean[label][column][1][no_seekers] = np.nan
    return clean, infinite


def _choose_panels(lines: dict, names: list[str] | None) -> list[Panel]:
    """The panels to draw: `names` (those with values), else the defaults the lines
    have values for (`PANELS`)."""
    import numpy as np

    def measured(column: str, nonzero: bool = False) -> bool:
        for series in lines.values():
            if column in series:
                v = series[column][1]
                if (np.isfinite(v) & ((v != 0) if nonzero else True)).any():
                    return True
        return False

    if names is not None:
        chosen = panels_named(names)
        empty = [panel.column for panel in chosen if not measured(panel.column)]
        if empty:
            warnings.warn(
                f"no values to draw in panel(s) {', '.join(empty)} (not measured here)",
                stacklevel=3,
            )
        return [panel for panel in chosen if panel.column not in empty]
    return [
        panel
        for panel in PANELS
        if panel.default
        and measured(panel.column, panel.zero_is_empty)
        and (panel.when is None or measured(panel.when, nonzero=True))
        and (panel.unless is None or not measured(panel.unless, nonzero=True))
    ]


def _draw(
    lines: dict,
    bands: dict | None,
    out,
    title: str | None,
    legend_title: str,
    *,
    panels: list[str] | None = None,
    key: tuple[list[str], list[list]] | None = None,
    source: str = "metrics table",
) -> Path:
    """Draw the chosen panels (`_choose_panels`); `lines`: label → column → (rounds,
    values); `bands`: label → column → (low, high) or None; `key`: (header, one row per
    line) of the key table, shown when the labels are too long for the legend."""
    import math

    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    out = Path(out)
    _check_out(out)
    lines, infinite = _series(lines, source)
    chosen = _choose_panels(lines, panels)
    if not chosen:
        raise DataError(f"{source}: nothing to draw (no panel has values)")
    labels = list(lines)
    entries = labels
    if max(len(label) for label in labels) > LABEL_WIDTH:  # numbered, and a key table
        entries = [f"{legend_title} {i}" for i in range(1, len(labels) + 1)]
        header, rows = key if key is not None else (["label"], [[label] for label in labels])
        key = ([legend_title, *header], [[e, *r] for e, r in zip(entries, rows, strict=True)])
    else:
        key = None
    styles = {
        label: {"color": f"C{i % 10}", "linestyle": ("-", "--", ":")[i // 10 % 3]}
        for i, label in enumerate(labels)
    }  # one colour per line in every panel: a line drawn only for "all" keeps its own

    ncols = 2 if len(chosen) <= 4 else 3 if len(chosen) <= 9 else 4
    nrows = math.ceil(len(chosen) / ncols)
    key_height = 0.3 * (len(key[1]) + 1) + 0.3 if key else 0.0
    fig = Figure(figsize=(4.6 * ncols + 1.5, 3.0 * nrows + key_height + 0.4), layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(
        nrows + bool(key), ncols, height_ratios=[3.0] * nrows + ([key_height] if key else [])
    )
    axes = []
    for i, panel in enumerate(chosen):
        ax = fig.add_subplot(grid[i // ncols, i % ncols], sharex=axes[0] if axes else None)
        axes.append(ax)
        lowest, highest = np.inf, -np.inf
        for label, series in lines.items():
            if panel.column not in series:
                continue
            rounds, v = series[panel.column]
            if not np.isfinite(v).any():  # e.g. model accuracy exists only for "all"
                continue
            lowest, highest = min(lowest, np.nanmin(v)), max(highest, np.nanmax(v))
            # a point between empty rounds draws no line: a marker shows it
            marker = "o" if np.isnan(v).any() else None
            ax.plot(rounds, v, label=label, linewidth=1.5, marker=marker, ms=3, **styles[label])
            if bands is not None and panel.column in bands.get(label, {}):
                low, high = (
                    np.where(np.isfinite(b), b, np.nan)  # (no band around an infinite mean)
                    for b in (np.asarray(b, dtype=float) for b in bands[label][panel.column])
                )
                if panel.rate:  # a share's interval ends at 0 and 1
                    low, high = np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0)
                elif np.isfinite(high).any():
                    highest = max(highest, np.nanmax(high))
                ax.fill_between(rounds, low, high, color=styles[label]["color"], alpha=0.2, lw=0)
        ax.set_ylabel(panel.label)
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
        ax.tick_params(labelbottom=True)  # every panel shows its rounds
        ax.set_xlabel("round")
        if panel.rate:  # the whole [0, 1] range, so runs and panels compare at a glance
            ax.set_ylim(-0.02, 1.02)
        elif lowest >= 0:  # from 0, with room above the highest point
            ax.set_ylim(0, min(highest * 1.06, np.finfo(float).max) if highest > 0 else 1)
    handles = [Line2D([], [], linewidth=1.5, **styles[label]) for label in labels]
    # handles and labels passed as they are: a label starting with "_" stays
    legend = fig.legend(handles, entries, loc="outside right upper", title=legend_title)
    for text in legend.get_texts():
        text.set_parse_math(False)  # "$" in a label is a dollar
    if key:
        _key_table(fig, fig.add_subplot(grid[nrows, :]), *key)
    if title:
        fig.suptitle(title, parse_math=False)
    if infinite:
        counts = ", ".join(f"{c}: {k}" for c, k in infinite.items())
        warnings.warn(
            f"{source}: infinite values (or beyond ±{DRAWABLE:g}) left out of the plot ({counts})",
            stacklevel=3,
        )
    image = io.BytesIO()
    try:  # drawn in memory, then replaces `out` atomically (never through a link)
        fig.savefig(image, dpi=110, format=out.suffix[1:].lower() or None)
    except ValueError as e:  # an image format matplotlib does not know
        raise ConfigError(f"cannot write {out}: {e}") from e
    try:  # (the folder as the user named it, links resolved; a link at `out` is refused)
        atomic_write_bytes(out.parent.resolve() / out.name, image.getvalue())
    except OSError as e:
        raise ConfigError(f"cannot write {out}: {e.strerror or e}") from e
    return out


def _key_table(fig, ax, header: list[str], rows: list[list]) -> None:
    """The key below the panels: one row per line of the legend, its settings in full;
    the text shrinks until the table fits the figure's width."""
    ax.axis("off")
    table = ax.table(
        cellText=[[str(c) for c in row] for row in rows],
        colLabels=header,
        loc="upper center",
        cellLoc="left",
        colLoc="left",
    )
    table.auto_set_font_size(False)
    table.auto_set_column_width(list(range(len(header))))
    for cell in table.get_celld().values():
        cell.get_text().set_parse_math(False)
    size = 9.0
    table.set_fontsize(size)
    renderer = fig.canvas.get_renderer()
    for _ in range(8):  # shrink until the table fits (the figure's width is fixed)
        if table.get_window_extent(renderer).width <= 0.96 * fig.bbox.width or size < 5:
            break
        size *= 0.85
        table.set_fontsize(size)


def _run_summary(run_dir: Path) -> dict:
    """A run's summary.json (empty for an unfinished or foreign run)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def _run_title(run_dir: Path) -> str:
    """ "<scenario>, seed <S>" from a run's summary.json; the directory name without one."""
    summary = _run_summary(run_dir)
    if "scenario" in summary and "seed" in summary:
        return f"{summary['scenario']}, seed {summary['seed']}"
    return run_dir.resolve().name
