"""The controlled scenarios as RL environments: the checkers, the action, vector envs."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import recourse_sim.env  # noqa: F401 - registers the environments
from recourse_sim.agents import Controlled
from recourse_sim.env import RecourseEnv

# Small worlds keep these tests fast; the scenarios' own sizes are for training.
CONTROLLED = {
    "school_assignment_controlled": {"world__cohort_size": 300, "world__history_size": 600},
    "lending_fico_controlled": {"world__n_applicants": 300, "world__history_size": 400},
    "coordination_toy": {},
}


def _env(name: str, rounds: int = 3) -> RecourseEnv:
    return RecourseEnv(name, rounds=rounds, **CONTROLLED[name])


@pytest.mark.parametrize("name", sorted(CONTROLLED))
def test_gymnasium_check_env_without_warnings(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gym.make("recourse_sim/Recourse-v0", scenario=name, rounds=3, **CONTROLLED[name])
        check_env(env.unwrapped)


@pytest.mark.parametrize("name", sorted(CONTROLLED))
def test_sb3_check_env_without_warnings(name):
    sb3_checker = pytest.importorskip("stable_baselines3.common.env_checker")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sb3_checker.check_env(_env(name), warn=True)


@pytest.mark.parametrize("name", sorted(CONTROLLED))
def test_the_action_drives_a_controlled_collective(name):
    env = _env(name)
    controlled = [s for s in env.strategies if isinstance(s, Controlled)]
    assert len(controlled) == 1
    k, m = env.action_space.shape
    assert k == env.n_classes and m == int(controlled[0].action_set.actionable.sum())
    assert env.action_space.dtype == np.float32
    assert np.all(env.action_space.low == -1) and np.all(env.action_space.high == 1)


@pytest.mark.parametrize("name", sorted(CONTROLLED))
def test_reward_is_query_success_minus_weighted_cost(name):
    env = _env(name)
    obs, _ = env.reset(seed=0)
    for sign in (-1.0, 1.0, 0.0):
        obs, reward, terminated, truncated, info = env.step(
            np.full(env.action_space.shape, sign, np.float32)
        )
        parts = info["rewards"]
        assert set(parts) == {"query_success", "cost", "cost_weight"}
        assert reward == pytest.approx(
            parts["query_success"] - parts["cost_weight"] * parts["cost"]
        )
        assert 0.0 <= parts["query_success"] <= 1.0 and parts["cost"] >= 0.0
        assert env.observation_space.contains(obs) and np.isfinite(obs).all()
    assert truncated and not terminated


def test_info_reports_each_collective():
    env = _env("school_assignment_controlled")
    env.reset(seed=0)
    info = env.step(np.array([[1.0], [-1.0]], np.float32))[4]
    own = info["collectives"]["h1_students"]
    assert set(own) == {"participants", "cost", "query_success"}
    # one collective acting for the scenario's query group: the reward's components
    assert own["query_success"] == info["rewards"]["query_success"]
    assert own["cost"] == pytest.approx(info["rewards"]["cost"])
    assert own["participants"] == info["metrics"][-1]["collective_participants"] > 0


def test_one_action_unit_spends_the_whole_budget_whatever_the_features_unit():
    """Lending scores are in FICO points at 0.01 cost units per point: -1 under-reports a
    score by ε / 0.01 = 50 points (not 0.5 points), costing exactly ε."""
    env = _env("lending_fico_controlled")
    env.reset(seed=0)
    info = env.step(np.array([[-1.0], [-1.0]], np.float32))[4]
    assert info["metrics"][-1]["collective_participants"] > 0
    # almost everyone can move the whole 50 points (a few are near the 300 floor)
    assert info["rewards"]["cost"] == pytest.approx(0.5, rel=0.02)
    strategy = next(s for s in env.strategies if isinstance(s, Controlled))
    assert strategy.budget_scale == pytest.approx([50.0])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_envs_match_single_envs(mode):
    name, n = "coordination_toy", 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        venv = gym.make_vec(
            "recourse_sim/Recourse-v0", num_envs=n, vectorization_mode=mode, scenario=name, rounds=3
        )
        try:
            obs, _ = venv.reset(seed=[10, 11])
            actions = np.stack(
                [np.full(venv.single_action_space.shape, v, np.float32) for v in (-1.0, 0.5)]
            )
            trace = [obs]
            for _ in range(3):
                obs, reward, terminated, truncated, info = venv.step(actions)
                trace += [obs, reward]
            assert truncated.all() and not terminated.any()
            assert "rewards" in info and "query_success" in info["rewards"]
        finally:
            venv.close()
    for i in range(n):
        env = RecourseEnv(name, rounds=3)
        single = [env.reset(seed=10 + i)[0]]
        for _ in range(3):
            o, r, *_ = env.step(actions[i])
            single += [o, r]
        assert np.array_equal(trace[0][i], single[0])
        for t in range(1, len(single)):
            assert np.array_equal(trace[t][i], single[t])
