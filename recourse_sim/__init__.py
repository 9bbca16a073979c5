"""recourse-sim: a simulation environment for online collective algorithmic recourse."""

from __future__ import annotations

# first, before the heavy imports below: a stop signal while the command starts is one line
from recourse_sim._startup import install_if_command_line

install_if_command_line()

# a forked worker (an async vector env's) runs torch on one thread: GNU OpenMP's pool,
# if the parent used it, would hang the worker's first parallel region
from recourse_sim._fork import install as _install_fork_hook  # noqa: E402

_install_fork_hook()

__version__ = "0.1.0"

# Imported eagerly: `recourse_sim.simulate` must be the function even after some code
# has imported the submodule of the same name (which rebinds a lazily exported name).
from recourse_sim.registration import register_envs  # noqa: E402 (after the handlers)
from recourse_sim.scenarios import Scenario, load_scenario  # noqa: E402
from recourse_sim.simulate import simulate  # noqa: E402

register_envs()

__all__ = ["Scenario", "__version__", "load_scenario", "simulate"]
