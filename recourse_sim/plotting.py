"""Long-term dynamics plots from a run's ``metrics.csv``.

Uses matplotlib's object API with the Agg canvas (no pyplot), so plotting neither needs a
display nor changes the global backend of the caller's session.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from recourse_sim.checkpoint import atomic_write_bytes
from recourse_sim.errors import ConfigError, DataError
from recourse_sim.simulate import SEEKER_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DYNAMICS_PANELS", "plot_dynamics", "plot_runs", "plot_sweep"]

RUNS_AVERAGED = "runs_averaged"  # a sweep cell's runs with seekers, per round
DYNAMICS_PANELS = (
    ("acceptance_rate", "acceptance rate"),
    ("recourse_success_rate", "recourse success rate"),
    ("mean_cost", "mean recourse cost"),
    ("n_seekers", "seekers"),
    ("true_outcome_rate", "true favourable outcome"),
    ("model_accuracy", "model accuracy"),
    ("model_shift", "model shift ‖θ − θ₀‖"),
    ("collective_participants", "collective participants"),
    ("approved_favourable_rate", "approved with a favourable outcome"),
    (RUNS_AVERAGED, "runs averaged (recourse success)"),
)
"""(column, axis label) of the panels; a panel is drawn when its column has values."""
RATES = frozenset(
    {
        "acceptance_rate",
        "recourse_success_rate",
        "true_outcome_rate",
        "model_accuracy",
        "approved_favourable_rate",
    }
)
REQUIRED = ("round", "group", "acceptance_rate")


def plot_dynamics(
    metrics: pd.DataFrame | str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    title: str | None = None,
) -> Path:
    """Draw one run's dynamics over rounds, one line per group (the query group and
    ``all`` included): acceptance, recourse success and cost (blank in rounds without
    seekers) and the seekers, true outcomes, accuracy, model shift, the collectives'
    participants and, where there are approvals, the share of approved people with a
    favourable outcome (a lender: one minus its default rate).

    Args:
        metrics: a tidy metrics table, a ``metrics.csv`` or a run directory holding one.
        out: the image file to write (its suffix picks the format, e.g. ``.png``).
        title: figure title; default, when `metrics` is a path, the scenario and seed from
            the run's ``summary.json`` (or the run directory's name).

    Returns:
        The path written.

    Raises:
        DataError: the table cannot be read, is empty, or lacks a needed column.
        ConfigError: `out` cannot be written.
    """
    if isinstance(metrics, (str, os.PathLike)):
        title = title if title is not None else _run_title(_run_dir(Path(metrics)))
    metrics, _ = _metrics(metrics)
    lines = {}
    for group in dict.fromkeys(metrics["group"]):  # first-seen order, as in the file
        rows = metrics[metrics["group"] == group]
        lines[str(group)] = {c: (rows["round"], rows[c]) for c in rows.columns}
    return _draw(lines, None, out, title, "group")


def plot_runs(
    runs: list[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    group: str = "all",
    labels: list[str] | None = None,
) -> Path:
    """Overlay several runs: each panel of `plot_dynamics` for one `group` (default
    ``all``), one line per run, labelled by `labels` (one per run) or else by the
    settings that differ between the runs (`run_labels`)."""
    if labels is not None and len(labels) != len(runs):
        raise ConfigError(f"{len(labels)} --label for {len(runs)} runs; give one per run")
    dirs = [_run_dir(Path(run)) for run in runs]
    names, common = (labels, None) if labels is not None else run_labels(dirs)
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
    return _draw(lines, None, out, title, "run")


def run_labels(run_dirs: list[Path]) -> tuple[list[str], str]:
    """Legend labels naming what differs between runs: the settings of their
    ``scenario.yaml`` that differ (dotted paths, ``key=value``), and their seeds if those
    differ; with the description of what they share (scenario, seed). A run without a
    readable ``scenario.yaml`` or ``summary.json`` contributes what it has (its directory
    name, at worst)."""
    settings = [_flat_settings(d) for d in run_dirs]
    seeds = [_run_summary(d).get("seed") for d in run_dirs]
    keys = dict.fromkeys(k for s in settings for k in s)  # first-seen order
    differ = [
        k
        for k in keys
        if k not in ("description", "rounds")
        and len({repr(s.get(k, "(unset)")) for s in settings}) > 1
    ]
    labels = []
    for d, s, seed in zip(run_dirs, settings, seeds, strict=True):
        parts = [f"{k}={s.get(k, '(unset)')}" for k in differ]
        if len(set(map(repr, seeds))) > 1:
            parts.append(f"seed {seed}")
        labels.append(", ".join(parts) if parts else _run_title(d))
    shared = []
    names = {
        str(s.get("name", _run_summary(d).get("scenario")))
        for d, s in zip(run_dirs, settings, strict=True)
    }
    if len(names) == 1 and names != {"None"}:
        shared.append(names.pop())
    if len(set(map(repr, seeds))) == 1 and seeds[0] is not None:
        shared.append(f"seed {seeds[0]}")
    return labels, ", ".join(shared)


def _flat_settings(run_dir: Path) -> dict:
    """A run's resolved scenario (``scenario.yaml``) as dotted path -> value (empty if
    there is none). Read as plain data: loading never runs code."""
    import yaml

    try:
        data = yaml.safe_load((run_dir / "scenario.yaml").read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    flat: dict = {}

    def walk(value, path: str) -> None:
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(v, f"{path}.{k}" if path else str(k))
        else:
            flat[path] = value

    walk(data if isinstance(data, dict) else {}, "")
    return flat


def plot_sweep(
    sweep: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    group: str = "all",
    title: str | None = None,
) -> Path:
    """A sweep (``sweep.csv`` or its directory): each grid cell as the mean over its seeds
    per round with a 95 % confidence band (Student t), for one `group` (default
    ``all``). Recourse success and cost average only the runs with seekers in that
    round; when that is fewer than all, a panel shows how many runs each point averages.
    `title` replaces the default (the sweep's folder and its number of seeds)."""
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
    grid = list(table.columns[: list(table.columns).index("seed")])
    table = table[table["group"] == group]
    if table.empty:
        raise DataError(f"{path} has no rows of group {group!r}")
    table = _blank_without_seekers(table)
    lines, bands = {}, {}
    cells = table.groupby(grid, sort=False) if grid else [((), table)]
    sparse = False
    for values, cell in cells:
        values = values if isinstance(values, tuple) else (values,)
        label = ", ".join(f"{k}={v}" for k, v in zip(grid, values, strict=True)) or "all cells"
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
    return _draw(lines, bands, out, title, "cell")


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
    """(the table, where it came from), checked for the columns every plot needs."""
    from recourse_sim.simulate import read_metrics

    source = "metrics table"
    if isinstance(metrics, (str, os.PathLike)):
        path = Path(metrics)
        source = str(path / "metrics.csv" if path.is_dir() else path)
        metrics = read_metrics(path)
    missing = [c for c in REQUIRED if c not in metrics.columns]
    if missing:
        raise DataError(f"{source} lacks column(s) {', '.join(missing)}")
    if metrics.empty:
        raise DataError(f"{source} has no rows")
    return metrics, source


def _draw(lines: dict, bands: dict | None, out, title: str | None, legend_title: str) -> Path:
    """One panel per `DYNAMICS_PANELS` column with values; `lines`: label → column →
    (rounds, values); `bands`: label → column → (low, high) or None."""
    import math

    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    def values(series: dict, column: str):
        rounds, v = series[column]
        v = np.asarray(v, dtype=float).copy()
        if column in SEEKER_COLUMNS and "n_seekers" in series:
            v[np.asarray(series["n_seekers"][1], dtype=float) == 0] = np.nan
        return np.asarray(rounds), v

    panels = [
        (c, label)
        for c, label in DYNAMICS_PANELS
        if any(c in s and np.isfinite(values(s, c)[1]).any() for s in lines.values())
    ]
    ncols = 3 if len(panels) > 4 else 2
    nrows = max(1, math.ceil(len(panels) / ncols))
    fig = Figure(figsize=(5 * ncols + 2, 3.2 * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, sharex=True, squeeze=False)).ravel()
    for ax, (column, axis_label) in zip(axes, panels, strict=False):
        for label, series in lines.items():
            if column not in series:
                continue
            rounds, v = values(series, column)
            if not np.isfinite(v).any():  # e.g. model accuracy exists only for "all"
                continue
            # a point between empty rounds draws no line: a marker shows it
            marker = "o" if np.isnan(v).any() else None
            (line,) = ax.plot(rounds, v, label=label, linewidth=1.5, marker=marker, ms=3)
            if bands is not None and column in bands.get(label, {}):
                low, high = (np.asarray(b, dtype=float) for b in bands[label][column])
                ax.fill_between(rounds, low, high, color=line.get_color(), alpha=0.2, lw=0)
        ax.set_ylabel(axis_label)
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
        if column in RATES:  # the whole [0, 1] range, so runs and panels compare at a glance
            ax.set_ylim(-0.02, 1.02)
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel("round")
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", title=legend_title)
    if title:
        fig.suptitle(title)
    out = Path(out)
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
