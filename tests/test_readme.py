"""The README's Python examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(training: bool) -> list[str]:
    """The README's Python blocks: those that train a policy, or the others."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "the README has no Python example"
    return [b for b in blocks if ("PPO(" in b) == training]


def test_quick_tour_runs():
    """Each block runs, and the multi-agent one gives every agent an observation of its
    own space."""
    blocks = _blocks(training=False)
    assert blocks
    for block in blocks:
        namespace: dict = {}
        exec(compile(block, str(README), "exec"), namespace)
        if "observations" in namespace:
            env, observations = namespace["env"], namespace["observations"]
            assert set(observations) == set(env.possible_agents)
            assert all(env.observation_space(a).contains(o) for a, o in observations.items())


def _run_quietly(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter with every warning an error."""
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        timeout=1800,  # a guard against a hang only
        cwd=README.parent,
    )


@pytest.mark.slow
def test_reinforcement_learning_example_runs_without_warnings_on_one_thread():
    (block,) = _blocks(training=True)
    code = block + (
        "\nassert action.shape[0] == 4, action.shape  # one action per vector env"
        "\nassert torch.get_num_threads() == 1"
        "\nprint('done')\n"
    )
    proc = _run_quietly(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "done\n" and proc.stderr == "", proc.stderr
