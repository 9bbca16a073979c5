"""The analytic coordination policies: interface, privileged preview, evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from recourse_sim.agents.policies import (
    BASELINES,
    AnalyticPolicy,
    NoCollective,
    evaluate,
    make_baseline,
    members_to_action,
    preview_round,
)
from recourse_sim.agents.strategies import Controlled
from recourse_sim.env import RecourseEnv
from recourse_sim.errors import ConfigError

SCHOOL = {"world__cohort_size": 300, "world__history_size": 600}


def _school(rounds: int = 3) -> RecourseEnv:
    return RecourseEnv("school_assignment_controlled", rounds=rounds, **SCHOOL)


def _rollout(env: RecourseEnv, actions) -> list:
    out = []
    for a in actions:
        obs, reward, _, _, info = env.step(a)
        out.append((obs, reward, info["rewards"]))
    return out


def test_registry_and_names():
    assert set(BASELINES) == {"none", "individual", "oar", "optimum"}
    for name, cls in BASELINES.items():
        assert cls.name == name
    with pytest.raises(ConfigError, match="valid: none"):
        make_baseline("random")


def test_predict_has_the_sb3_interface():
    env = _school()
    obs, _ = env.reset(seed=0)
    policy = NoCollective(env)
    action, state = policy.predict(obs, state=None, episode_start=None, deterministic=True)
    assert action.shape == env.action_space.shape and state is None
    assert env.action_space.contains(action)
    batch, _ = policy.predict(obs[None])
    assert batch.shape == (1, *env.action_space.shape)
    with pytest.raises(ConfigError, match="one environment"):
        policy.predict(np.stack([obs, obs]))


def test_unbound_or_uncontrolled_is_a_config_error():
    with pytest.raises(ConfigError, match="bind"):
        NoCollective().predict(np.zeros(3))
    env = RecourseEnv("oar_iris", rounds=2)
    env.reset(seed=0)
    with pytest.raises(ConfigError, match="no controlled population"):
        make_baseline("oar", env).action()


def test_preview_leaves_the_environment_untouched_and_sees_the_real_round():
    env, twin = _school(), _school()
    env.reset(seed=4)
    twin.reset(seed=4)
    p = preview_round(env)
    assert p.members.any() and len(p.X) == len(p.y) == len(p.members)
    assert len(p.queries) > 0 and p.goal == 1
    action = np.array([[0.5], [-1.0]], np.float32)
    assert _same(_rollout(env, [action] * 2), _rollout(twin, [action] * 2))
    # the members the preview saw are the ones who act in the real step
    twin.reset(seed=4)
    info = twin.step(action)[4]
    assert info["metrics"][-1]["collective_participants"] == int(p.members.sum())


def _same(a, b) -> bool:
    return all(
        np.array_equal(x[0], y[0]) and x[1] == y[1] and x[2] == y[2]
        for x, y in zip(a, b, strict=True)
    )


def test_members_to_action_averages_movers_in_budget_units():
    env = RecourseEnv("lending_fico_controlled", rounds=2, world__n_applicants=200)
    strategy = next(s for s in env.strategies if isinstance(s, Controlled))
    delta = np.array([[-50.0], [-25.0], [0.0], [-10.0]])  # FICO points
    y = np.array([1, 1, 1, 0])
    action = members_to_action(delta, y, strategy, 2)
    # class 1: the two who moved, 50 and 25 points = 1 and 0.5 budget units
    assert action == pytest.approx(np.array([[-0.2], [-0.75]]))


@pytest.mark.parametrize("name", ["none", "individual", "oar"])
def test_baselines_give_feasible_actions_and_evaluate(name):
    env = _school(rounds=2)
    policy = make_baseline(name)
    rows = evaluate(policy, env, [7])
    assert isinstance(policy, AnalyticPolicy) and policy.env is env
    assert set(rows[0]) == {"seed", "query_success", "reward", "cost"}
    env.reset(seed=7)
    action = policy.action()
    assert env.action_space.contains(action)
    if name == "none":
        assert not action.any() and rows[0]["cost"] == 0.0


def test_individual_moves_reports_the_way_a_query_subject_would():
    """Individual recourse raises P(H1) by reporting *more* activities (the proxy);
    every class gets that same direction."""
    env = _school()
    env.reset(seed=0)
    action = make_baseline("individual", env).action()
    assert (action > 0).all() and action[0] == pytest.approx(action[1])
