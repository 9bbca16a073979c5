"""Parts installed packages add through entry points, named by scenarios."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from recourse_sim.errors import ConfigError
from recourse_sim.learners import LEARNERS
from recourse_sim.plugins import LEARNERS_GROUP
from recourse_sim.scenarios import load_scenario
from recourse_sim.simulate import preflight

POINTS = [
    EntryPoint("plugin_lr", "recourse_sim.learners.logistic:LogisticRegression", LEARNERS_GROUP),
    EntryPoint("not_a_learner", "recourse_sim.plugins:entry_point", LEARNERS_GROUP),
]


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.setattr(
        "importlib.metadata.entry_points",
        lambda group=None: [p for p in POINTS if p.group == group],
    )
    yield
    LEARNERS.pop("plugin_lr", None)


def test_a_scenario_names_a_learner_an_installed_package_declares(installed):
    scenario = load_scenario("school_assignment", overrides=["learner.type=plugin_lr"])
    preflight(scenario)  # builds, fits and resets with the plugin's learner
    assert "plugin_lr" in LEARNERS


def test_an_entry_point_that_is_not_a_learner_is_one_error(installed):
    with pytest.raises(ConfigError, match="not a Learner subclass"):
        load_scenario("school_assignment", overrides=["learner.type=not_a_learner"])


def test_an_unknown_learner_is_still_refused(installed):
    with pytest.raises(ConfigError, match="unknown learner 'nope'"):
        load_scenario("school_assignment", overrides=["learner.type=nope"])
