"""PPO's action parametrisation (`FeasibleActions`, `TrainedPolicy`) and its logs."""

from __future__ import annotations

import numpy as np
import pytest

from recourse_sim.agents.training import FeasibleActions, TrainedPolicy, feasible_range
from recourse_sim.env import RecourseEnv

pytest.importorskip("stable_baselines3")


def test_a_decrease_only_feature_gets_the_lower_half_of_the_range():
    # lending's borrowers may only under-report their score; the school's H1 students
    # may shift their activities either way
    low, high = feasible_range(RecourseEnv("lending_fico_controlled"))
    assert low.shape == (2, 1) and (low == -1).all() and (high == 0).all()
    low, high = feasible_range(RecourseEnv("school_assignment_controlled"))
    assert (low == -1).all() and (high == 1).all()


def test_the_wrapper_spreads_minus_one_to_one_over_the_feasible_range():
    env = FeasibleActions(RecourseEnv("lending_fico_controlled"))
    for a, expected in ((-1.0, -1.0), (0.0, -0.5), (1.0, 0.0), (3.0, 0.0)):
        assert env.action(np.full((2, 1), a, np.float32)) == pytest.approx(
            np.full((2, 1), expected)
        )


def test_trained_policy_acts_as_during_training():
    class Model:  # stands in for an SB3 model: a fixed raw action
        def predict(self, obs, state=None, episode_start=None, deterministic=True):
            return np.array([[[0.5], [-1.0]]], np.float32), state

    low, high = feasible_range(RecourseEnv("lending_fico_controlled"))
    action, _ = TrainedPolicy(Model(), low, high).predict(np.zeros((1, 3)))
    assert action == pytest.approx(np.array([[[-0.25], [-1.0]]]))


def test_tensorboard_logs_one_run_per_scenario_and_seed(tmp_path):
    pytest.importorskip("tensorboard")
    from recourse_sim.agents.training import PPOConfig, train_ppo

    policy, _ = train_ppo(
        "coordination_toy", 7, PPOConfig(timesteps=100, n_steps=50), tensorboard=str(tmp_path)
    )
    runs = [p.name for p in tmp_path.iterdir()]
    assert runs == ["coordination_toy_seed7_1"]
    assert any(f.name.startswith("events.out.tfevents") for f in (tmp_path / runs[0]).iterdir())
    assert isinstance(policy, TrainedPolicy)


@pytest.mark.parametrize(("threads", "during"), [(None, 3), (1, 1), (2, 2)])
def test_train_ppo_trains_on_one_torch_thread_unless_told(monkeypatch, threads, during):
    """Default one thread during training, torch's own setting restored afterwards."""
    import torch
    from stable_baselines3 import PPO

    from recourse_sim.agents.training import PPOConfig, train_ppo

    seen = []

    def learn(self, *args, **kwargs):  # instead of training: what torch would use
        seen.append(torch.get_num_threads())
        return self

    monkeypatch.setattr(PPO, "learn", learn)
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        kwargs = {} if threads == 1 else {"threads": threads}
        train_ppo(
            "coordination_toy", 0, PPOConfig(timesteps=10, n_steps=10, batch_size=10), **kwargs
        )
        assert seen == [during] and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
