"""Checks of the Gymnasium calls themselves, one line at each call site of the envs.

Gymnasium's own rules, enforced as its checker expects: a seed is ``None`` or a
non-negative Python ``int`` (``True`` is a ``bool`` here, not a seed; a vector env takes
one such seed or a list of them, one per world); ``reset`` options are the ones an env
reads (an unknown key is a typo, never silently ignored); a restored state has finite
feature means and positive, finite feature scales; and a closed env steps no more
(``close`` ends the episode: ``reset`` starts a new one).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
from gymnasium.error import ClosedEnvironmentError

from recourse_sim.errors import CheckpointError, ConfigError

__all__ = ["check_reset", "check_state", "check_step", "mark_closed"]

_CLOSED = "_recourse_sim_closed"  # set on an env by `mark_closed`, cleared by `check_reset`


def _seed_problem(seed: Any) -> str | None:
    if seed is None:
        return None
    if isinstance(seed, bool | np.bool_) or not isinstance(seed, int | np.integer):
        return f"{seed!r} ({type(seed).__name__})"
    if seed < 0:
        return f"{seed!r} (negative)"
    return None


def check_reset(
    env: Any,
    seed: Any,
    options: Mapping[str, Any] | None,
    known: Collection[str] = (),
    num_envs: int | None = None,
) -> None:
    """ConfigError for a seed that is not None or a non-negative int (a list of
    `num_envs` of them for a vector env) or an option outside `known`; then `env` may
    step again (after `close`)."""
    if num_envs is not None and isinstance(seed, list | tuple):
        if len(seed) != num_envs:
            raise ConfigError(f"reset got {len(seed)} seeds for {num_envs} environments")
        seeds = list(seed)
    else:
        seeds = [seed]
    for i, one in enumerate(seeds):
        problem = _seed_problem(one)
        if problem:
            where = f"seed[{i}]" if len(seeds) > 1 or seed is not one else "seed"
            raise ConfigError(f"reset: {where} must be None or a non-negative int, got {problem}")
    if options is not None:
        if not isinstance(options, Mapping):
            raise ConfigError(f"reset: options must be a dict, got {type(options).__name__}")
        unknown = sorted(str(k) for k in options if k not in known)
        if unknown:
            allowed = ", ".join(sorted(known)) or "none"
            raise ConfigError(
                f"reset: unknown option(s) {', '.join(map(repr, unknown))} (known: {allowed})"
            )
    setattr(env, _CLOSED, False)


def mark_closed(env: Any) -> None:
    """Record that `env` was closed: `check_step` refuses until the next reset."""
    setattr(env, _CLOSED, True)


def check_step(env: Any) -> None:
    """ClosedEnvironmentError if `env` was closed and not reset since."""
    if getattr(env, _CLOSED, False):
        raise ClosedEnvironmentError("step() after close(): call reset() to start again")


def check_state(state: Mapping[str, Any]) -> None:
    """CheckpointError unless the state's feature means are finite and its feature scales
    finite and > 0 (every observation and every standardised feature divides by them)."""
    try:
        mean = np.asarray(state["feature_mean"], dtype=np.float64)
        scale = np.asarray(state["feature_scale"], dtype=np.float64)
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"state: feature_mean/feature_scale unreadable ({exc})") from None
    if mean.shape != scale.shape:
        raise CheckpointError(
            f"state: feature_mean has shape {mean.shape}, feature_scale {scale.shape}"
        )
    if not np.isfinite(mean).all():
        raise CheckpointError("state: feature_mean must be finite")
    bad = np.flatnonzero(~(np.isfinite(scale) & (scale > 0)))
    if bad.size:
        raise CheckpointError(
            f"state: feature_scale must be finite and > 0; feature {int(bad[0])} has "
            f"{float(scale.reshape(-1)[bad[0]])!r}"
        )
