"""Whether a run's model ends in a cycle instead of settling.

Repeated risk minimisation (plain refit on the responses to the deployed model) either
reaches a fixed point (``theta_step`` falls to 0) or, where responses are discrete (an
integer or binary feature moves by whole steps, so a small change of θ can flip many
people's responses at once), may alternate between a few models for ever: the same
``theta_step`` values come back every P rounds. `theta_cycle` finds P from the ``all``
rows of ``metrics.csv``; `warn_if_cycling` says it once at the end of a run.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CYCLE_TOLERANCE", "MAX_PERIOD", "theta_cycle", "warn_if_cycling"]

CYCLE_TOLERANCE = 1e-6  # values this close (relative to 1 + |value|) count as equal
MAX_PERIOD = 8  # the longest period looked for (rounds)
REPEATS = 2  # a period counts once the last values repeat it this many times over


def theta_cycle(
    theta_step: np.ndarray,
    model_shift: np.ndarray | None = None,
    max_period: int = MAX_PERIOD,
    tol: float = CYCLE_TOLERANCE,
) -> int | None:
    """The smallest period P (2 ≤ P ≤ `max_period`) with which a run ends: over its last
    (`REPEATS` + 1)·P rounds every ``theta_step`` (and ``model_shift`` ‖θₜ − θ₀‖, if
    given) equals the one P rounds earlier, within `tol` · (1 + |value|), and the steps
    are not all 0 (that is a fixed point). None if there is no such P.

    A 2-cycle between two models has a constant step; ``model_shift`` tells it from a
    steady drift (whose distance from θ₀ keeps growing)."""
    step = np.asarray(theta_step, dtype=np.float64)
    series = [step] if model_shift is None else [step, np.asarray(model_shift, np.float64)]
    if not len(step) or not np.isfinite(step).all():
        return None
    for period in range(2, max_period + 1):
        span = (REPEATS + 1) * period
        if len(step) < span:
            break
        if np.all(np.abs(step[-span:]) <= tol):
            return None  # at a fixed point
        if all(_repeats(s[-span:], period, tol) for s in series):
            return period
    return None


def _repeats(tail: np.ndarray, period: int, tol: float) -> bool:
    a, b = tail[period:], tail[:-period]
    return bool(np.all(np.abs(a - b) <= tol * (1.0 + np.abs(a))))


def warn_if_cycling(frame: pd.DataFrame, name: str) -> int | None:
    """One warning, naming the period and the repeating steps, when the run in `frame`
    (``metrics.csv``'s rows) ends in a cycle (`theta_cycle` on its ``all`` rows);
    returns the period (None: no cycle, or no ``theta_step`` column)."""
    if "theta_step" not in frame or "group" not in frame:
        return None
    everyone = frame[frame["group"] == "all"].sort_values("round")
    step = everyone["theta_step"].to_numpy(dtype=np.float64)
    shift = everyone["model_shift"].to_numpy(np.float64) if "model_shift" in everyone else None
    period = theta_cycle(step, shift)
    if period is None:
        return None
    last = ", ".join(f"{v:.4g}" for v in step[-period:])
    warnings.warn(
        f"{name}: the model ends in a cycle of period {period}: theta_step repeats every "
        f"{period} rounds ({last}) instead of falling to 0. Discrete responses (integer, "
        "binary or ordinal features move by whole steps) can make a refit alternate "
        "between models; see docs: Performative prediction, 'Cycles'",
        stacklevel=3,
    )
    return period
