"""The coordination tasks' baselines, oracles and scores."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import trim_mean

from recourse_sim.agents.coordination import (
    IDLE,
    OAR,
    Constant,
    Idle,
    Myopic,
    constant_grid,
    episode_return,
    evenly_spread,
    first_k,
    gap_closed,
    iqm,
    iqm_interval,
    last_k,
    normalised_score,
    oar_setting,
    privileged_oracle,
    simple_baselines,
)
from recourse_sim.env import RecourseEnv
from recourse_sim.errors import ConfigError


def small_lending(rounds: int = 6) -> RecourseEnv:
    return RecourseEnv(
        "lending_fico_controlled",
        rounds=rounds,
        world__n_applicants=300,
        world__history_size=300,
        populations__borrowers__action="oar",
    )


def test_schedules_act_in_the_rounds_they_name():
    env = small_lending(rounds=8)
    assert sorted(first_k().bind(env).acting) == [0, 1]  # K = T // 4 without a limit
    assert sorted(last_k().bind(env).acting) == [6, 7]
    assert sorted(evenly_spread().bind(env).acting) == [0, 4]
    policy = first_k().bind(env)
    env.reset(seed=0)
    played = []
    for _ in range(8):
        action, _ = policy.predict(None)
        played.append(bool(action[0] >= -0.5))
        env.step(action)
    assert played == [True, True] + [False] * 6


def test_oar_setting_is_the_files_oar_at_one_and_idle_below_the_threshold():
    assert np.array_equal(oar_setting(), np.zeros(4, np.float32))
    assert oar_setting(act=False)[0] == -1.0
    assert np.allclose(oar_setting(alpha=0.5, budget=0.25), [0, -0.5, -0.75, 0])
    with pytest.raises(ConfigError, match="alpha share"):
        oar_setting(alpha=1.5)
    assert len(constant_grid()) == 16 and constant_grid()[-1].name == "oar"


def test_the_myopic_oracle_takes_each_rounds_best_candidate():
    env = small_lending(rounds=3)
    policy = Myopic().bind(env)
    env.reset(seed=3)
    for _ in range(3):
        start = env.get_state()
        rewards = []
        for a in policy.candidates:
            env.set_state(start)
            rewards.append(env.step(a)[1])
        env.set_state(start)
        chosen, _ = policy.predict(None)
        assert env.get_state()["round"] == start["round"]  # the search leaves no trace
        assert env.step(chosen)[1] == pytest.approx(max(rewards), abs=0.0)


@pytest.mark.slow
def test_the_privileged_oracle_is_at_least_every_baseline_on_every_seed():
    env = small_lending(rounds=5)
    bases = [*simple_baselines(), Constant(0.5, 0.5)]
    for seed in (1000, 1001, 1002):
        values = {p.name: episode_return(env, p, seed)[0] for p in bases}
        myopic = episode_return(env, Myopic(), seed)[0]
        oracle = privileged_oracle(env, seed, bases, base_values=values)
        assert oracle.value >= max(values.values()) - 1e-12
        assert oracle.base_value == max(values.values())
        # the oracle's plan replays to its value: the search used common random numbers
        replay = episode_return(env, _Replay(oracle.actions), seed)[0]
        assert replay == pytest.approx(oracle.value, abs=1e-12)
        assert np.isfinite(myopic)


class _Replay(Idle):
    def __init__(self, actions):
        super().__init__()
        self.actions = actions

    def action(self):
        return self.actions[self.round]


def test_a_policy_of_another_action_space_is_refused():
    env = RecourseEnv("lending_fico_controlled", rounds=2, world__n_applicants=100)
    with pytest.raises(ConfigError, match="OAR's settings"):
        Idle().bind(env)


def test_scores_normalise_by_idle_and_the_best_simple_baseline():
    assert normalised_score(0.7, 0.5, 0.7) == pytest.approx(1.0)
    assert normalised_score(0.5, 0.5, 0.7) == pytest.approx(0.0)
    assert gap_closed(0.8, 0.7, 0.9) == pytest.approx(0.5)
    assert np.isnan(gap_closed(0.8, 0.7, 0.7))
    with pytest.raises(ConfigError, match="nothing to normalise"):
        normalised_score(0.6, 0.5, 0.5)
    assert IDLE[0] < -0.5 <= OAR[0]


def test_iqm_is_the_mean_of_the_middle_half_and_its_interval_covers_it():
    x = np.arange(1.0, 9.0)  # 8 values: 2 cut from each end
    assert iqm(x) == pytest.approx(np.mean([3, 4, 5, 6]))
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(5, 6))
    point, low, high = iqm_interval(scores, reps=500, seed=1)
    assert point == pytest.approx(trim_mean(scores.ravel(), 0.25))
    assert low <= point <= high
    assert iqm_interval(scores, reps=500, seed=1) == (point, low, high)  # reproducible
    # stratified: a task's column keeps its own values (a constant column stays constant)
    constant = np.tile(np.arange(6.0), (5, 1))
    assert iqm_interval(constant, reps=200)[1:] == (iqm(constant), iqm(constant))
    with pytest.raises(ConfigError, match="runs × tasks"):
        iqm_interval(np.ones(3))


def test_seed_cycle_resets_each_episode_with_the_next_training_seed():
    from recourse_sim.agents.training import SeedCycle

    env = SeedCycle(small_lending(rounds=2), [5, 6])
    firsts = [env.reset(seed=123)[0] for _ in range(3)]
    plain = small_lending(rounds=2)
    assert np.array_equal(firsts[0], plain.reset(seed=5)[0])
    assert np.array_equal(firsts[1], plain.reset(seed=6)[0])
    assert np.array_equal(firsts[2], firsts[0])


@pytest.mark.slow
def test_the_benchmark_pages_oracle_example_runs():
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "benchmark.md"
    oracle, training = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    exec(compile(oracle, "docs/benchmark.md", "exec"), {})
    assert "train_seeds=range(100)" in training  # (trained in the benchmark's own run)
