"""Long-term dynamics plots from a run's ``metrics.csv``.

Uses matplotlib's object API with the Agg canvas (no pyplot), so plotting neither needs a
display nor changes the global backend of the caller's session.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from recourse_sim.errors import ConfigError, DataError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DYNAMICS_PANELS", "plot_dynamics"]

DYNAMICS_PANELS = (
    ("acceptance_rate", "acceptance rate"),
    ("recourse_success_rate", "recourse success rate"),
    ("mean_cost", "mean recourse cost"),
    ("model_accuracy", "model accuracy"),
)
"""(column, axis label) of each panel of `plot_dynamics`."""


def plot_dynamics(
    metrics: pd.DataFrame | str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    title: str | None = None,
) -> Path:
    """Draw acceptance, recourse success, cost and accuracy over rounds, one line per group.

    Args:
        metrics: a tidy metrics table, a ``metrics.csv`` or a run directory holding one.
        out: the image file to write (its suffix picks the format, e.g. ``.png``).
        title: figure title; default, when `metrics` is a path, the scenario and seed from
            the run's ``summary.json`` (or the run directory's name).

    Returns:
        The path written.

    Raises:
        DataError: the table cannot be read, is empty, or lacks a plotted column.
        ConfigError: `out` cannot be written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    from recourse_sim.simulate import read_metrics

    source = "metrics table"
    if isinstance(metrics, (str, os.PathLike)):
        path = Path(metrics)
        source = str(path / "metrics.csv" if path.is_dir() else path)
        if title is None:
            title = _run_title(path if path.is_dir() else path.parent)
        metrics = read_metrics(path)
    needed = ["round", "group", *(column for column, _ in DYNAMICS_PANELS)]
    missing = [c for c in needed if c not in metrics.columns]
    if missing:
        raise DataError(f"{source} lacks column(s) {', '.join(missing)}")
    if metrics.empty:
        raise DataError(f"{source} has no rows")

    fig = Figure(figsize=(11, 7), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2, sharex=True)
    groups = list(dict.fromkeys(metrics["group"]))  # first-seen order, as in the file
    for ax, (column, label) in zip(axes.flat, DYNAMICS_PANELS, strict=True):
        for group in groups:
            rows = metrics[metrics["group"] == group]
            values = rows[column].astype(float)
            if values.notna().any():  # model accuracy exists only for "all"
                ax.plot(rows["round"], values, label=str(group), linewidth=1.5)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
        if column == "mean_cost":  # headroom: costs often sit exactly at the budget
            ax.set_ylim(0, 1.08 * max(ax.get_ylim()[1], 1e-9))
        else:  # rates: the whole [0, 1] range, so runs and panels compare at a glance
            ax.set_ylim(-0.02, 1.02)
    for ax in axes[1]:
        ax.set_xlabel("round")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", title="group")
    if title:
        fig.suptitle(title)
    out = Path(out)
    try:
        fig.savefig(out, dpi=120)
    except OSError as e:
        raise ConfigError(f"cannot write {out}: {e.strerror or e}") from e
    except ValueError as e:  # an image format matplotlib does not know
        raise ConfigError(f"cannot write {out}: {e}") from e
    return out


def _run_title(run_dir: Path) -> str:
    """ "<scenario>, seed <S>" from a run's summary.json; the directory name without one."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        return f"{summary['scenario']}, seed {summary['seed']}"
    except (OSError, ValueError, KeyError, TypeError):  # unfinished or foreign run
        return run_dir.resolve().name
