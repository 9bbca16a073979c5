"""The coordination tasks (`recourse_sim.registration.COORDINATION_TASKS`): their
scenarios load and say what the task table says, the IDs are registered with their
episode lengths, and the reward's trimmed penalty is exactly its weight times the share
trimmed."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from recourse_sim.env import RecourseEnv
from recourse_sim.registration import COORDINATION_TASKS, ENV_IDS, MAX_EPISODE_STEPS
from recourse_sim.scenarios import load_scenario

TASK_FILES = {
    "coordination_lending_budget": "borrowers",
    "coordination_lending_hidden": "borrowers",
    "coordination_school_sgd": "h1_students",
    "coordination_school_defended": "h1_students",
    "coordination_rivals": "n2_h1_students",
}


def test_every_task_is_a_registered_id():
    assert set(COORDINATION_TASKS) == {
        "lending_budget_20",
        "lending_budget_40",
        "lending_hidden",
        "school_sgd_budget",
        "school_defended",
        "rivals",
        "control",
    }
    assert COORDINATION_TASKS["control"] == "recourse_sim/SchoolAssignment-v2"
    for env_id in COORDINATION_TASKS.values():
        assert env_id in ENV_IDS and gym.spec(env_id).max_episode_steps == MAX_EPISODE_STEPS[env_id]


@pytest.mark.parametrize("name", sorted(TASK_FILES))
def test_task_scenarios_use_oar_settings_and_reward_success_only(name):
    scenario = load_scenario(name)
    assert scenario.name == name and scenario.rounds == 20
    assert scenario.controlled == TASK_FILES[name]
    assert scenario.populations[scenario.controlled].action == "oar"
    assert scenario.reward.cost_weight == 0.0


def test_task_constraints_and_hidden_settings_are_as_documented():
    budget = load_scenario("coordination_lending_budget")
    assert budget.populations["borrowers"].limit.acting_rounds == 5
    forty = {
        k.replace("__", "."): v
        for k, v in ENV_IDS["recourse_sim/LendingBudget40-v0"].items()
        if k != "scenario"
    }
    long = load_scenario("coordination_lending_budget", forty)
    assert long.rounds == 40 and long.populations["borrowers"].limit.acting_rounds == 10

    hidden = load_scenario("coordination_lending_hidden")
    assert set(hidden.hidden) == {
        "learner.window",
        "populations.borrowers.participation",
        "world.default_loss",
    }
    for spec in hidden.hidden.values():  # held out: at or beyond the train range's edges
        assert spec.test[0] >= spec.train[1] or spec.test[1] <= spec.train[0]
    assert hidden.populations["borrowers"].limit.acting_rounds == 5

    sgd = load_scenario("coordination_school_sgd")
    assert sgd.learner.update_rule == "sgd" and sgd.populations["h1_students"].limit.total_cost

    defended = load_scenario("coordination_school_defended")
    assert set(defended.hidden) == {"learner.defense.trim"} and defended.reward.trimmed_weight > 0

    rivals = load_scenario("coordination_rivals")
    other = rivals.populations["n1_h1_students"]
    assert other.strategy == "collective_oar" and other.query.groups == ["N1"]


SCHOOL_SMALL = {"world__cohort_size": 200, "world__history_size": 400, "rounds": 3}


def test_trimmed_weight_costs_exactly_its_weight_times_the_trimmed_share():
    """Same seed and actions, weights 0 and 0.7: the rounds are the same, the rewards
    differ by 0.7 x info["rewards"]["trimmed"], which counts only changed reports."""
    runs = {}
    for weight in (0.0, 0.7):
        env = RecourseEnv(
            "coordination_school_defended", reward__trimmed_weight=weight, **SCHOOL_SMALL
        )
        env.reset(seed=2)
        steps = []
        for act in (0.0, -1.0, 0.0):  # OAR, idle, OAR
            action = np.array([act, 0, 0, 0], np.float32)
            _, reward, _, _, info = env.step(action)
            steps.append((reward, info["rewards"]))
        runs[weight] = steps
    for (r0, parts0), (r1, parts1) in zip(runs[0.0], runs[0.7], strict=True):
        assert parts0["query_success"] == parts1["query_success"]
        assert parts0["trimmed"] == parts1["trimmed"]
        assert parts1["trimmed_weight"] == 0.7
        assert r0 == parts0["query_success"]
        assert r1 == pytest.approx(r0 - 0.7 * parts1["trimmed"], abs=1e-12)
    assert runs[0.7][1][1]["trimmed"] == 0.0  # an idle round changes nothing: none trimmed
    assert any(parts["trimmed"] > 0 for _, parts in runs[0.7])


def test_rival_collectives_each_report_their_own_success():
    env = RecourseEnv("coordination_rivals", **SCHOOL_SMALL)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(np.zeros(4, np.float32))
    own, other = info["collectives"]["n2_h1_students"], info["collectives"]["n1_h1_students"]
    assert own["query_success"] == reward == info["rewards"]["query_success"]
    assert 0.0 <= other["query_success"] <= 1.0 and other["participants"] > 0
