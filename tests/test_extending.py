"""Adding a world kind or a strategy is two files each, as ``docs/extending.md`` says: on
a copy of the package, a toy world (``scenarios/world.py``: its spec; ``env/worlds.py``:
its class) and a toy strategy (``scenarios/populations.py``: its population block;
``agents/strategies.py``: its class) are added, and a scenario naming both runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import recourse_sim

REPO = Path(recourse_sim.__file__).resolve().parent.parent

TOY_WORLD_SPEC = '''

class ToyWorld(WorldSpec):
    """A line of people: one feature x ~ N(0, 1); the outcome is favourable above
    `threshold`."""

    kind: Literal["toy"]
    cohort_size: PositiveInt = 60  # people a round
    history_size: PositiveInt = 200  # rows the first model is fit on
    threshold: float = 0.0  # x above which the outcome is favourable

    @property
    def feature_names(self) -> tuple[str, ...]:
        return ("x",)

'''

TOY_WORLD = '''

class Toy(World):
    """`ToyWorld`: x ~ N(0, 1), favourable above the threshold (moving x moves it)."""

    def __init__(self, spec):
        self.spec = spec
        one, none = np.ones(1, bool), np.zeros(1, bool)
        self.features = FeatureDefaults(
            names=("x",),
            actionable=one,
            increase_only=none,
            decrease_only=none,
            proxy=none,
            lower=np.full(1, -np.inf),
            upper=np.full(1, np.inf),
        )
        self.group_labels = ("all",)
        self.cohort_size = spec.cohort_size

    def _label(self, X):
        return (X[:, 0] > self.spec.threshold).astype(np.int64)

    def history(self, rng):
        X = rng.standard_normal((self.spec.history_size, 1))
        return X, self._label(X)

    def newcomers(self, n, rng):
        X = rng.standard_normal((n, 1))
        u, v = rng.random((2, n))
        return Cohort(
            X=X,
            group=np.zeros(n, np.int64),
            query=np.zeros(n, bool),
            u=u,
            v=v,
            y0=self._label(X),
            rows=np.arange(n),
            record=np.full(n, -1, np.int64),
        )

    def outcome(self, cohort, X_true, changed):
        return self._label(X_true)


WORLD_KINDS["toy"] = lambda spec, source: Toy(spec)
'''

TOY_POPULATION = '''

class ToyPopulation(_Seekers):
    """Rejected members each raise every feature they may change by `step`."""

    strategy: Literal["toy"]
    step: float = 0.5  # the change of each actionable feature (feature units)

'''

TOY_STRATEGY = '''

@register
class Toy(Strategy):
    """`ToyPopulation`: each rejected member (with probability α) adds `step` to every
    feature it may change."""

    name = "toy"
    stage = "decision"

    def act(self, learner, X, seekers, goal, rng, target=None, margin=None):
        tried = self.participants(seekers, rng)
        delta = np.zeros_like(X)
        delta[np.ix_(tried, self.action_set.actionable)] = self.spec.step
        cost = np.where(tried, np.asarray(self.action_set.cost(delta)), 0.0)
        return IndividualResult(delta=delta, tried=tried, cost=cost)
'''

RUN = """
import json
import numpy as np
import recourse_sim
from recourse_sim.env import RecourseEnv
from recourse_sim.scenarios import load_scenario

assert recourse_sim.__file__.startswith({root!r}), recourse_sim.__file__
scenario = load_scenario({{
    "name": "toy",
    "rounds": 3,
    "world": {{"kind": "toy", "cohort_size": 80}},
    "populations": {{"movers": {{"strategy": "toy", "step": 0.75}}}},
}})
env = RecourseEnv(scenario)
env.reset(seed=0)
tried = []
for _ in range(3):
    _, reward, _, _, info = env.step(None)
    tried.append(int(env.people()["tried"].sum()))
print(json.dumps({{"tried": tried, "rows": len(info["metrics"])}}))
"""


def _edit(path: Path, before: str, insert: str) -> None:
    """Insert `insert` before the first `before` of the file (appended if empty)."""
    text = path.read_text(encoding="utf-8")
    if before:
        assert before in text, (path, before)
        text = text.replace(before, insert + before, 1)
    else:
        text += insert
    path.write_text(text, encoding="utf-8")


@pytest.mark.slow
def test_a_toy_world_and_a_toy_strategy_take_two_files_each(tmp_path):
    root = tmp_path / "copy"
    package = root / "recourse_sim"
    shutil.copytree(REPO / "recourse_sim", package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(
        REPO / "agents", package / "agents", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(REPO / "scenarios", package / "_bundled_scenarios")
    before = {p: p.read_bytes() for p in package.rglob("*.py")}

    # a world kind: its spec (and its place in the World union), its class (and entry)
    world_spec = package / "scenarios" / "world.py"
    _edit(world_spec, "\nWorld = Annotated[", TOY_WORLD_SPEC)
    _edit(world_spec, "],  # noqa: UP007", ", ToyWorld")
    _edit(package / "env" / "worlds.py", "", TOY_WORLD)
    # a strategy: its population block (and its name), its class (registered)
    populations = package / "scenarios" / "populations.py"
    _edit(populations, "\nPopulation = Annotated[", TOY_POPULATION)
    _edit(populations, '    ],\n    Field(discriminator="strategy"),', "        ToyPopulation,\n")
    _edit(populations, '    "collective_blackbox",\n', '    "toy",\n')
    _edit(package / "agents" / "strategies.py", "", TOY_STRATEGY)

    changed = sorted(str(p.relative_to(package)) for p in before if p.read_bytes() != before[p])
    assert changed == [
        "agents/strategies.py",
        "env/worlds.py",
        "scenarios/populations.py",
        "scenarios/world.py",
    ]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run(
        [sys.executable, "-c", RUN.format(root=str(root))],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rows"] >= 2  # "all" and the world's group
    assert sum(out["tried"]) > 0  # the toy strategy's members moved
