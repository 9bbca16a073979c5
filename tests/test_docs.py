"""The documentation holds to the code: the API reference lists the public agents API,
and the reinforcement-learning page's comparison of PPO with OAR runs and compares with
the ``collective_oar`` population itself."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import re
from pathlib import Path

import numpy as np
import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
AGENTS_MODULES = [
    "recourse_sim.agents",
    "recourse_sim.agents.training",
    "recourse_sim.agents.policies",
    "recourse_sim.agents.sb3",
]
# small worlds and short episodes for the snippet (its text keeps the scenario's sizes)
SMALL = {"world__cohort_size": 200, "world__history_size": 400, "rounds": 5}


def _public_names(module: str) -> list[str]:
    """`module`'s ``__all__``, read from its source (importing it would load SB3)."""
    source = Path(importlib.util.find_spec(module).origin).read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == "__all__" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{module} has no __all__")


@pytest.mark.parametrize("module", AGENTS_MODULES)
def test_the_api_reference_lists_every_public_name(module):
    reference = (DOCS / "api.md").read_text(encoding="utf-8")
    names = _public_names(module)
    missing = [n for n in names if not re.search(rf"[\[ ,.]{re.escape(n)}[\],\n]", reference)]
    assert not missing, f"docs/api.md does not list {missing} of {module}"


def _section(page: str, heading: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def _replaced(code: str, old: str, new: str, count: int) -> str:
    assert code.count(old) == count, (old, code)
    return code.replace(old, new)


class _Constant:
    def __init__(self, action: np.ndarray) -> None:
        self.action = action

    def predict(self, observation, state=None, episode_start=None, deterministic=True):
        return self.action, state


@pytest.mark.slow
def test_the_ppo_against_oar_snippet_runs_and_compares_with_the_population():
    pytest.importorskip("stable_baselines3")
    from recourse_sim.agents import OAR_ACTION
    from recourse_sim.agents.policies import evaluate
    from recourse_sim.env import RecourseEnv

    (code,) = re.findall(r"```python\n(.*?)```", _section("rl.md", "PPO against OAR"), re.S)
    code = _replaced(code, "timesteps=30_000", "timesteps=500", 1)
    code = _replaced(code, "range(1000, 1010)", "range(1000, 1003)", 1)
    code = _replaced(code, "RecourseEnv(scenario, ", "RecourseEnv(scenario, **SMALL, ", 1)
    code = _replaced(code, "RecourseEnv(scenario)", "RecourseEnv(scenario, **SMALL)", 1)
    code = _replaced(code, "batched=True)", "batched=True, **SMALL)", 1)
    namespace: dict = {"SMALL": SMALL}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/rl.md", "exec"), namespace)
    assert re.fullmatch(
        r"query success, PPO - OAR: [+-]\d\.\d{3} ± \d\.\d{3} \(95 %, paired\)\n", out.getvalue()
    ), out.getvalue()
    assert namespace["diff"].n == 3
    # what it calls OAR is the collective_oar population: the -v2 action's zero, which
    # plays that population draw for draw
    scenario, seeds = namespace["scenario"], namespace["seeds"]
    v2 = RecourseEnv(scenario, **SMALL, populations__h1_students__action="oar")
    zero = _Constant(np.zeros(len(OAR_ACTION), np.float32))
    assert evaluate(zero, v2, seeds) == namespace["oar"]
    # and the PPO side is a trained policy on the shift action, evaluated on those worlds
    assert [r["seed"] for r in namespace["ppo"]] == list(seeds)
