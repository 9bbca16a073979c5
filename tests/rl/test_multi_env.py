"""Competing collectives: the PettingZoo ParallelEnv."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("pettingzoo")
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test

from recourse_sim.env import RecourseEnv
from recourse_sim.env.multi import RecourseParallelEnv, env, parallel_env
from recourse_sim.errors import ConfigError

SMALL = {"world__cohort_size": 200, "world__history_size": 400, "rounds": 3}


def _env(**more) -> RecourseParallelEnv:
    return RecourseParallelEnv("competing_collectives", **SMALL, **more)


def test_parallel_api_test_passes_without_warnings(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parallel_api_test(_env(), num_cycles=10)
    assert "Passed Parallel API test" in capsys.readouterr().out


def test_the_aec_env_passes_pettingzoos_api_test(capsys):
    """env(): the agents act in turn; the round is played once all of them have."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # (the one advice not taken: agents are named after their populations, not
        # "player_0")
        warnings.filterwarnings("ignore", "We recommend agents to be named", UserWarning)
        api_test(env("competing_collectives", **SMALL), num_cycles=10)
    assert "Passed API test" in capsys.readouterr().out
    aec = env("competing_collectives", **SMALL)
    aec.reset(seed=0)
    assert aec.agent_selection == "n2_h1_students"
    aec.step(np.zeros(aec.action_space("n2_h1_students").shape, np.float32))
    assert aec.agent_selection == "n1_h1_students"


def test_parallel_seed_test_passes():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parallel_seed_test(_env, num_cycles=10)


def test_each_collective_is_an_agent_with_its_own_query_group():
    env = _env()
    assert env.possible_agents == ["n2_h1_students", "n1_h1_students"]
    for agent in env.possible_agents:
        assert env.action_space(agent).shape == (2, 1)
    obs, infos = env.reset(seed=0)
    assert set(obs) == set(infos) == set(env.possible_agents)
    shared = env.state()
    for agent, o in obs.items():
        assert env.observation_space(agent).contains(o)
        assert np.array_equal(o[: len(shared)], shared)
    # different query groups: S (a few high-achieving N2 students) vs all of N1
    n2, n1 = obs["n2_h1_students"], obs["n1_h1_students"]
    share = len(shared) + 2
    assert n2[share] < n1[share]


def test_rewards_are_each_collectives_own():
    env = _env()
    env.reset(seed=1)
    actions = {"n2_h1_students": np.full((2, 1), -1.0), "n1_h1_students": np.full((2, 1), 1.0)}
    _, rewards, terms, truncs, infos = env.step(actions)
    for agent in env.possible_agents:
        parts = infos[agent]["rewards"]
        assert rewards[agent] == pytest.approx(
            parts["query_success"] - parts["cost_weight"] * parts["cost"]
        )
        assert parts["cost"] > 0 and infos[agent]["participants"] > 0
        assert not terms[agent] and not truncs[agent]
    assert rewards["n2_h1_students"] != rewards["n1_h1_students"]


def test_a_trimmed_refit_costs_each_agent_its_own_trimmed_share():
    env = _env(learner__defense__trim=0.2, reward__trimmed_weight=0.5)
    env.reset(seed=1)
    actions = {"n2_h1_students": np.full((2, 1), 1.0), "n1_h1_students": np.full((2, 1), 1.0)}
    _, rewards, _, _, infos = env.step(actions)
    for agent in env.possible_agents:
        parts = infos[agent]["rewards"]
        assert parts["trimmed_weight"] == 0.5 and 0.0 <= parts["trimmed"] <= 1.0
        assert rewards[agent] == pytest.approx(
            parts["query_success"] - parts["cost_weight"] * parts["cost"] - 0.5 * parts["trimmed"]
        )
    assert any(infos[a]["rewards"]["trimmed"] > 0 for a in env.possible_agents)


def test_with_one_collective_its_trimmed_share_is_the_single_envs():
    small = {"world__cohort_size": 200, "world__history_size": 400, "rounds": 2}
    multi = RecourseParallelEnv("coordination_school_defended", **small)
    single = RecourseEnv("coordination_school_defended", **small)
    (agent,) = multi.possible_agents
    multi.reset(seed=4)
    single.reset(seed=4)
    action = np.zeros(multi.action_space(agent).shape, np.float32)
    _, rewards, _, _, infos = multi.step({agent: action})
    _, reward, _, _, info = single.step(action)
    assert infos[agent]["rewards"]["trimmed"] == info["rewards"]["trimmed"]
    assert rewards[agent] == pytest.approx(reward, abs=1e-12)


def test_an_idle_agent_pays_nothing_and_the_other_still_acts():
    env = _env()
    env.reset(seed=2)
    _, _, _, _, infos = env.step(
        {"n2_h1_students": np.zeros((2, 1)), "n1_h1_students": np.ones((2, 1))}
    )
    assert infos["n2_h1_students"]["rewards"]["cost"] == 0.0
    assert infos["n1_h1_students"]["rewards"]["cost"] > 0.0


def test_bad_actions_and_single_agent_env_are_config_errors():
    env = _env()
    env.reset(seed=0)
    with pytest.raises(ConfigError, match="no action for agent"):
        env.step({"n2_h1_students": np.zeros((2, 1))})
    with pytest.raises(ConfigError, match="shape"):
        env.step({"n2_h1_students": np.zeros(3), "n1_h1_students": np.zeros((2, 1))})
    with pytest.raises(ConfigError, match="at most one controlled population"):
        RecourseEnv("competing_collectives", **SMALL)
    with pytest.raises(ConfigError, match="at least one controlled"):
        parallel_env("oar_iris", rounds=2)


def test_a_run_plays_every_collective_on_its_zero_action(tmp_path):
    """`recourse-sim run` and `validate` take a scenario of several collectives: each
    plays its zero action, round for round the ParallelEnv given zero actions."""
    from recourse_sim import load_scenario, simulate
    from recourse_sim.cli import main

    overrides = {k.replace("__", "."): v for k, v in SMALL.items()}
    scenario = load_scenario("competing_collectives", overrides=overrides)
    metrics = simulate(scenario, rounds=3, seed=4, out=tmp_path / "run")
    env = _env()
    env.reset(seed=4)
    for round_ in range(1, 4):
        env.step({a: np.zeros(env.action_space(a).shape, np.float32) for a in env.agents})
        ours = metrics[metrics["round"] == round_].reset_index(drop=True)
        theirs = env.env._last_metrics
        assert [row["group"] for row in theirs] == ours["group"].tolist()
        for k, row in enumerate(theirs):
            for column, value in row.items():
                if value is None:  # (an empty cell)
                    assert np.isnan(ours.loc[k, column]), column
                elif column != "group":
                    # (metrics.csv keeps 10 significant digits)
                    np.testing.assert_allclose(
                        ours.loc[k, column], value, rtol=1e-9, err_msg=column
                    )
    sets = [f"--set={k}={v}" for k, v in overrides.items()]
    assert main(["validate", "-q", "competing_collectives", *sets]) == 0


def test_the_collectives_engine_takes_no_single_action():
    from recourse_sim.env.multi import CollectivesEnv

    engine = CollectivesEnv("competing_collectives", **SMALL)
    engine.reset(seed=0)
    with pytest.raises(ConfigError, match="one action per agent"):
        engine.step(np.zeros((2, 1), np.float32))
