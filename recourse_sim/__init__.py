"""recourse-sim: a simulation environment for online collective algorithmic recourse."""

from __future__ import annotations

__version__ = "0.1.0"

# Imported eagerly: `recourse_sim.simulate` must be the function even after some code
# has imported the submodule of the same name (which rebinds a lazily exported name).
from recourse_sim.registration import register_envs
from recourse_sim.scenarios import Scenario, load_scenario
from recourse_sim.simulate import simulate

register_envs()

__all__ = ["Scenario", "__version__", "load_scenario", "simulate"]
