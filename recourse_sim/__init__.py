"""recourse-sim: a simulation environment for online collective algorithmic recourse."""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

# Loaded on first use so that `import recourse_sim` stays cheap (no torch/gymnasium import).
_LAZY = {
    "load_scenario": "recourse_sim.scenarios",
    "Scenario": "recourse_sim.scenarios",
    "simulate": "recourse_sim.simulate",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'recourse_sim' has no attribute {name!r}")
