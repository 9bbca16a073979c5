"""The wheel's explicit package list must name every subpackage of the source tree."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("recourse_sim",)
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"


@pytest.mark.slow
def test_no_top_level_agents_module_is_installed(tmp_path):
    """`agents/` installs as `recourse_sim.agents` only (other packages own `agents`)."""
    code = (
        "import importlib.util as u\n"
        "assert u.find_spec('agents') is None, u.find_spec('agents')\n"
        "from recourse_sim.agents import make_strategy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)
