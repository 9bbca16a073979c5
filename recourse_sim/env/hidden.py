"""Hidden per-episode settings (a scenario's ``hidden`` block,
`recourse_sim.scenarios.hidden`): drawn at reset, applied to the episode's scenario.

The draw comes from its own named stream, ``hidden`` (`recourse_sim.env.streams`),
derived only when the scenario has a ``hidden`` block: every other stream, and so every
number of a scenario without one, is what it was. Each hidden field, in the block's
order, is drawn uniformly from the range of the environment's ``hidden_split``
(``rng.integers(lo, hi + 1)`` for an integer field, else ``rng.uniform(lo, hi)``); the
episode then runs the scenario with those values set, rebuilt and validated like any
override. The values are not in the observation; ``env.unwrapped.hidden_values`` gives
them (a privileged view, for oracles and analyses) and checkpoints carry them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.errors import ConfigError
from recourse_sim.scenarios import Scenario, load_scenario
from recourse_sim.scenarios.hidden import HIDDEN_SPLITS, set_dotted_field

if TYPE_CHECKING:
    from recourse_sim.env.engine import RoundEngine

__all__ = ["HIDDEN_STREAM", "apply_hidden", "check_split", "draw_hidden", "hidden_scenario"]

HIDDEN_STREAM = "hidden"
"""The stream the hidden values are drawn from (derived only for a ``hidden`` block)."""


def check_split(split: str) -> str:
    """`split` if it names a range of the hidden block (``train`` or ``test``)."""
    if split not in HIDDEN_SPLITS:
        raise ConfigError(f"hidden_split={split!r} is not one of {list(HIDDEN_SPLITS)}")
    return split


def draw_hidden(scenario: Scenario, split: str, rng: np.random.Generator) -> dict[str, float]:
    """One episode's values of the scenario's hidden fields, from `split`'s ranges."""
    values: dict[str, float] = {}
    for key, spec in scenario.hidden.items():
        lo, hi = spec.bounds(split)
        if spec.integer:
            values[key] = int(rng.integers(int(lo), int(hi) + 1))
        else:
            values[key] = float(rng.uniform(lo, hi))
    return values


def hidden_scenario(base: Scenario, values: dict[str, float]) -> Scenario:
    """`base` with the hidden fields set to `values` (its ``hidden`` block kept)."""
    data = base.model_dump(mode="python")
    del data["hidden"]  # (its ranges were checked with the file; checking them is slow)
    for key, value in values.items():
        set_dotted_field(data, key, value)
    scenario = load_scenario(data)
    scenario.hidden = base.hidden
    scenario._source = base.source
    return scenario


def apply_hidden(engine: RoundEngine, base: Scenario, values: dict[str, float]) -> None:
    """Rebuild `engine`'s rules for the scenario `base` with the hidden `values` (the
    episode state starts afresh: call before anything of the episode is drawn or set)."""
    from recourse_sim.env.engine import RoundEngine

    RoundEngine.__init__(engine, hidden_scenario(base, values) if values else base)
    engine.hidden_values = dict(values)
