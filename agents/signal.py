"""Planted signals (Hardt, Mazumdar, Mendler-Dünner & Zrnic, "Algorithmic Collective
Action in Machine Learning", ICML 2023, Section 3).

Members of the collective plant a feature pattern g: each reports x + g (the offsets of
``signal``, projected into the member's own action set: bounds, monotonicity, budget)
and, where the world lets them report labels (``set_label``: crowd labelling), the
target label y*. Success is measured on query subjects who carry the same signal: the
share of them the deployed model gives y* (`signal_success`).
"""

from __future__ import annotations

import numpy as np

from recourse_sim.agents.strategies import Strategy, register
from recourse_sim.errors import ConfigError
from recourse_sim.learners import Learner

__all__ = ["CollectiveSignal", "signal_success"]


def signal_offsets(signal: dict[str, float], names, where: str) -> np.ndarray:
    """The signal as a (d,) offset vector over features `names`; ConfigError naming the
    unknown feature."""
    names = tuple(names)
    g = np.zeros(len(names))
    for feature, offset in signal.items():
        if feature not in names:
            raise ConfigError(
                f"{where}.signal.{feature}: unknown feature (features: {', '.join(names)})"
            )
        g[names.index(feature)] = float(offset)
    return g


def signal_success(learner: Learner, X: np.ndarray, offsets: np.ndarray, target: int) -> float:
    """Share of rows X that, carrying the signal (X + offsets), the model gives `target`."""
    if not len(X):
        return 0.0
    return float((learner.predict(X + offsets) == target).mean())


@register
class CollectiveSignal(Strategy):
    """Participants report x + g (in their action set) and, with ``set_label``, label y*."""

    name = "collective_signal"
    stage = "training"

    def __init__(self, population: str, spec, action_set):
        super().__init__(population, spec, action_set)
        names = action_set.feature_names
        if names is None:
            raise ConfigError(f"populations.{population}.signal: the world names no features")
        self.offsets = signal_offsets(spec.signal, names, f"populations.{population}")

    def act(
        self,
        learner: Learner,
        X: np.ndarray,
        y: np.ndarray,
        participants: np.ndarray,
        queries: np.ndarray,
        goal: int,
        action: np.ndarray | None = None,
    ) -> np.ndarray:
        """Perturbations (n, d): the projected signal for participants, zero otherwise;
        `labels_after` the labels with participants' set to the target (``set_label``)."""
        members = np.asarray(participants, bool)
        delta = np.zeros_like(X)
        self.labels_after = None
        if not members.any():
            return delta
        rows = X[members]
        delta[members] = self.action_set.project(rows, np.broadcast_to(self.offsets, rows.shape))
        if self.spec.set_label:
            self.labels_after = np.where(members, self.spec.target, y)
        return delta
