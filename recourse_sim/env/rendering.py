"""Frames of an episode for ``render_mode="rgb_array"`` and ``"human"``: the dynamics so
far (acceptance per group, recourse success and the model's accuracy), drawn with
matplotlib's Agg canvas, so no display and no pyplot state are needed."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

FRAME_SIZE = (640, 360)  # width, height in pixels (even, as video encoders want)
_DPI = 80


def has_display() -> bool:
    """Whether a window can be opened (an X or Wayland display on Linux; assumed elsewhere)."""
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def render_modes() -> list[str]:
    """The render modes an environment offers here: "human" only where a window can open."""
    return ["ansi", "rgb_array", *(["human"] if has_display() else [])]


def draw_frame(title: str, history: list[list[dict[str, Any]]], rounds: int) -> np.ndarray:
    """An RGB frame (height, width, 3) uint8 of the rounds played so far: the share of
    each group given the favourable decision (left), and for everyone the seekers'
    recourse success and the model's accuracy (right); x runs to the episode's end."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width, height = FRAME_SIZE
    fig = Figure(figsize=(width / _DPI, height / _DPI), dpi=_DPI)
    canvas = FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    x = np.arange(1, len(history) + 1)
    groups = [m["group"] for m in history[0]] if history else []
    for g in groups:
        left.plot(x, [_value(rows, g, "acceptance_rate") for rows in history], label=g)
    for key, label in (
        ("recourse_success_rate", "recourse success"),
        ("model_accuracy", "accuracy"),
    ):
        right.plot(x, [_value(rows, "all", key) for rows in history], label=label)
    for ax, what in ((left, "acceptance"), (right, "everyone")):
        ax.set_xlim(0.5, max(rounds, 1) + 0.5)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("round")
        ax.set_title(what, fontsize=9)
        if ax.lines:
            ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(f"{title}: round {len(history)}/{rounds}", fontsize=10)
    fig.tight_layout()
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def _value(rows: list[dict[str, Any]], group: str, key: str) -> float:
    """A metric of one group's row (NaN where the group or the metric is missing or
    empty)."""
    for m in rows:
        if m["group"] == group:
            value = m.get(key)
            return np.nan if value is None else float(value)  # None: no seekers
    return np.nan


class Window:
    """A pyplot window showing frames (``render_mode="human"``)."""

    def __init__(self, title: str):
        import matplotlib.pyplot as plt

        self._plt = plt
        self._fig = plt.figure(title, figsize=(FRAME_SIZE[0] / _DPI, FRAME_SIZE[1] / _DPI))
        self._image = None

    def show(self, frame: np.ndarray) -> None:
        if self._image is None:
            ax = self._fig.add_axes((0, 0, 1, 1))
            ax.axis("off")
            self._image = ax.imshow(frame)
        else:
            self._image.set_data(frame)
        self._plt.pause(0.001)

    def close(self) -> None:
        self._plt.close(self._fig)
