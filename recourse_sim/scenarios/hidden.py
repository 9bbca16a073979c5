"""The ``hidden`` section: scenario settings drawn afresh for each episode and never
shown to the agent (a task's hidden dynamics).

``hidden`` maps a dotted scenario field (``learner.window``,
``populations.borrowers.participation``, ``world.default_loss``) to two ranges,
``train`` and ``test`` (``[lo, hi]``, both ends included), and ``integer``. At each
reset the environment draws every hidden field uniformly from the range of its
``hidden_split`` (`recourse_sim.env.hidden`; ``recourse-sim run`` and `simulate` draw
from the train ranges, one seed one draw); the value written in the file is what the
field holds when the scenario is read without an environment. Held-out test ranges are
what a policy trained on the train ranges is evaluated on.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import field_validator, model_validator

from recourse_sim.scenarios.base import _Model

__all__ = ["HIDDEN_SPLITS", "HiddenRange", "hidden_field_problem", "set_dotted_field"]

HIDDEN_SPLITS = ("train", "test")
"""The ranges a hidden field has; the environment's ``hidden_split`` picks one."""


class HiddenRange(_Model):
    """Where a hidden field is drawn from: uniformly in ``train`` or ``test`` (one
    range per split, ends included), as a whole number when ``integer``."""

    train: list[float]  # [lo, hi] of the episodes a policy trains on
    test: list[float]  # [lo, hi] of held-out episodes (outside or at the train edges)
    integer: bool = False  # draw whole numbers (a window of rounds, a count)

    @field_validator("train", "test")
    @classmethod
    def _ordered(cls, v: list[float]) -> list[float]:
        if len(v) != 2:
            raise ValueError(f"a range is [lo, hi], got {len(v)} numbers")
        if v[0] > v[1]:
            raise ValueError(f"a range [lo, hi] needs lo <= hi, got [{v[0]:g}, {v[1]:g}]")
        return v

    @model_validator(mode="after")
    def _whole_ends(self) -> HiddenRange:
        if self.integer:
            ends = [x for r in (self.train, self.test) for x in r]
            if any(x != math.floor(x) for x in ends):
                raise ValueError(f"integer: true needs whole-number ends, got {ends}")
        return self

    def bounds(self, split: str) -> tuple[float, float]:
        """The range of `split` (``train`` or ``test``)."""
        lo, hi = self.train if split == "train" else self.test
        return lo, hi


def set_dotted_field(data: dict, key: str, value: Any) -> None:
    """Set the dotted field `key` of a scenario mapping (as `model_dump` gives it) to
    `value`; KeyError if the path does not exist."""
    *parents, last = key.split(".")
    node = data
    for part in parents:
        node = node[part]
    if not isinstance(node, dict) or last not in node:
        raise KeyError(key)
    node[last] = value


def hidden_field_problem(data: dict, key: str) -> str | None:
    """Why `key` cannot be a hidden field of the scenario mapping `data` (None: it
    can): it must name a number the scenario sets (not a flag, a name or a block)."""
    if key == "hidden" or key.startswith("hidden."):
        return "the hidden block cannot hide itself"
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return "no such scenario field"
        node = node[part]
    if isinstance(node, bool) or not isinstance(node, int | float):
        return f"not a number (it is {type(node).__name__})"
    return None
