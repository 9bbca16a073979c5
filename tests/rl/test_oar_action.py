"""The v2 action (``action: oar``): OAR's own settings chosen each round, centred on OAR.
The zero action (and every constant one with entries in [0, 1]) is a ``collective_oar``
population, draw for draw, so a policy over it contains OAR and starts there."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import recourse_sim.env  # noqa: F401 - registers the environments
from recourse_sim.agents import OAR_ACTION
from recourse_sim.agents.strategies import oar_goal
from recourse_sim.env import RecourseEnv
from recourse_sim.errors import ConfigError
from recourse_sim.registration import _NOT_OUT_OF_DATE

# (scenario, its controlled population, small-world overrides)
SCENARIOS = {
    "school_assignment_controlled": (
        "h1_students",
        {"world__cohort_size": 300, "world__history_size": 600},
    ),
    "lending_fico_controlled": (
        "borrowers",
        {"world__n_applicants": 300, "world__history_size": 400},
    ),
}
ROUNDS = 4


def _env(name: str, **settings) -> RecourseEnv:
    population, small = SCENARIOS[name]
    overrides = {f"populations__{population}__{k}": v for k, v in settings.items()}
    return RecourseEnv(name, rounds=ROUNDS, **small, **overrides)


def _rollout(env: RecourseEnv, action=None) -> list:
    """Observations, rewards, metrics and reward parts of a seed-3 episode under one
    constant action (None: zeros, for an env whose action is ignored)."""
    if action is None:
        action = np.zeros(env.action_space.shape, np.float32)
    obs, _ = env.reset(seed=3)
    steps = [obs]
    for _ in range(ROUNDS):
        obs, reward, _, _, info = env.step(action)
        steps.append((obs, reward, info["metrics"], info["rewards"]))
    return steps


def _assert_same(a: list, b: list) -> None:
    np.testing.assert_array_equal(a[0], b[0])
    for (obs_a, r_a, m_a, rw_a), (obs_b, r_b, m_b, rw_b) in zip(a[1:], b[1:], strict=True):
        np.testing.assert_array_equal(obs_a, obs_b)
        assert r_a == r_b and m_a == m_b and rw_a == rw_b


def _action(**entries: float) -> np.ndarray:
    a = np.zeros(len(OAR_ACTION), dtype=np.float32)
    for name, value in entries.items():
        a[OAR_ACTION.index(name)] = value
    return a


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_constant_action_is_the_collective_oar_population(name):
    oar = _rollout(_env(name, strategy="collective_oar"))
    for constant in (0.0, 1.0, 0.3):  # zero: OAR itself, as a policy starts; one: the same
        action = np.full(len(OAR_ACTION), constant, np.float32)
        controlled = _rollout(_env(name, action="oar"), action)
        _assert_same(controlled, oar)
    # and the collective did act (a rollout without it differs)
    idle = _rollout(_env(name, strategy="collective_oar", epsilon=0.0))
    assert any(a[1] != b[1] for a, b in zip(controlled[1:], idle[1:], strict=True))


@pytest.mark.parametrize(
    ("entries", "equivalent"),
    [
        ({"act": -1.0}, {"epsilon": 0.0}),  # not acting: as an OAR collective without budget
        ({"act": -0.6}, {"epsilon": 0.0}),  # below the threshold, -1/2
        ({"act": -0.4}, {}),  # above it: OAR
        ({"budget": -0.5}, {"epsilon": 0.5}),  # half the budget
        ({"budget": -1.0}, {"epsilon": 0.0}),  # none of it
        ({"alpha": -0.5}, {"participation": 0.25}),  # half the participation (0.5 in the file)
    ],
)
def test_each_entry_is_the_oar_setting_it_names(entries, equivalent):
    name = "school_assignment_controlled"
    controlled = _rollout(_env(name, action="oar"), _action(**entries))
    oar = _rollout(_env(name, strategy="collective_oar", **equivalent))
    _assert_same(controlled, oar)


def test_the_goal_entry_chooses_the_class_oar_aims_at():
    name = "school_assignment_controlled"
    low = _rollout(_env(name, action="oar"), _action(goal=-1.0))
    high = _rollout(_env(name, action="oar"), _action(goal=0.0))
    # aiming the query group at the other class lowers its success
    assert sum(s[3]["query_success"] for s in low[1:]) < sum(
        s[3]["query_success"] for s in high[1:]
    )


def test_the_goal_entry_maps_to_the_query_goal_or_another_class():
    # at or above -1/2: the query's own goal, whatever it is
    for k in (2, 3, 5):
        for goal in range(k):
            assert oar_goal(0.0, goal, k) == goal
            assert oar_goal(-0.5, goal, k) == goal
            assert oar_goal(1.0, goal, k) == goal
    # below: the other classes in order, [-1, -1/2) split evenly between them
    assert oar_goal(-1.0, 1, 2) == 0 and oar_goal(-0.6, 0, 2) == 1
    assert [oar_goal(e, 1, 3) for e in (-1.0, -0.8, -0.74, -0.51)] == [0, 0, 2, 2]
    assert {oar_goal(e, 0, 5) for e in np.linspace(-1.0, -0.501, 50)} == {1, 2, 3, 4}


@pytest.mark.parametrize("env_id", ["recourse_sim/SchoolAssignment-v2", "recourse_sim/Lending-v2"])
def test_v2_ids_have_the_oar_action_and_pass_the_checker(env_id):
    name = gym.spec(env_id).kwargs["scenario"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # (as `import recourse_sim` does: -v3 is another action, not a newer -v2)
        warnings.filterwarnings("ignore", _NOT_OUT_OF_DATE, DeprecationWarning)
        env = gym.make(env_id, rounds=3, **SCENARIOS[name][1])
        assert env.action_space.shape == (len(OAR_ACTION),)
        check_env(env.unwrapped)


def test_oar_settings_need_the_oar_action():
    with pytest.raises(ConfigError, match="horizon is a setting of OAR: it needs action: oar"):
        _env("school_assignment_controlled", horizon=2)
    env = _env("school_assignment_controlled", action="oar", horizon=2, steps=3)
    assert env.action_space.shape == (4,)


def test_the_batched_env_falls_back_for_the_oar_action():
    with pytest.warns(UserWarning, match="OAR's settings as the action"):
        envs = gym.make_vec(
            "recourse_sim/SchoolAssignment-v2",
            num_envs=2,
            vectorization_mode="vector_entry_point",
            rounds=2,
            **SCENARIOS["school_assignment_controlled"][1],
        )
    envs.reset(seed=0)
    envs.step(np.ones((2, len(OAR_ACTION)), dtype=np.float32))
    envs.close()


def test_ppo_acts_on_every_oar_setting():
    from recourse_sim.agents.training import feasible_range

    low, high = feasible_range(_env("lending_fico_controlled", action="oar"))
    np.testing.assert_array_equal(low, -np.ones(4))
    np.testing.assert_array_equal(high, np.ones(4))
