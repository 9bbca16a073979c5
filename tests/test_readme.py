"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(training: bool) -> list[str]:
    """The README's Python blocks: those that train a policy, or the others."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "the README has no Python example"
    return [b for b in blocks if ("PPO(" in b) == training]


def test_quick_tour_runs(capsys):
    for block in _blocks(training=False):
        exec(compile(block, str(README), "exec"), {})
    assert capsys.readouterr().out.strip()


@pytest.mark.slow
def test_reinforcement_learning_example_runs():
    (block,) = _blocks(training=True)
    namespace: dict = {}
    exec(compile(block, str(README), "exec"), namespace)
    assert namespace["action"].shape[0] == 4  # one action per vector env
