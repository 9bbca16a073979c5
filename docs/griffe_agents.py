"""Griffe extension: ``recourse_sim.agents`` is the top-level ``agents/`` folder (mapped by
``[tool.setuptools.package-dir]``), which griffe's static finder does not follow; this
loads that folder as the subpackage, so the API reference documents it by its real name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import griffe

AGENTS = Path(__file__).resolve().parents[1] / "agents"


class MappedAgents(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "recourse_sim" or "agents" in pkg.members:
            return
        agents = loader.load(AGENTS, try_relative_path=True)
        pkg.set_member("agents", agents)
