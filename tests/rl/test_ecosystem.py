"""The RL ecosystem's tools work on the registered IDs with their defaults: SB3's
``make_vec_env`` (which asks for ``render_mode="rgb_array"``), its checker and PPO,
Gymnasium's checker and ``RecordVideo``."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import recourse_sim  # noqa: F401  (registers the IDs)
from recourse_sim.env import RecourseEnv
from recourse_sim.env.rendering import FRAME_SIZE
from recourse_sim.errors import ConfigError

sb3 = pytest.importorskip("stable_baselines3")
SMALL = {"world__cohort_size": 60, "world__history_size": 120, "rounds": 5}


@pytest.mark.slow
def test_rgb_array_frames_show_the_rounds_so_far():
    env = RecourseEnv("school_assignment_controlled", render_mode="rgb_array", **SMALL)
    env.reset(seed=0)
    first = env.render()
    width, height = FRAME_SIZE
    assert first.shape == (height, width, 3) and first.dtype == np.uint8
    env.step(env.action_space.sample())
    second = env.render()
    assert second.shape == first.shape and (second != first).any()  # a round was drawn
    made = gym.make("recourse_sim/SchoolAssignment-v1", render_mode="rgb_array", **SMALL)
    check_env(made.unwrapped)  # Gymnasium's checker, its render modes included


def test_human_mode_needs_a_display(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    with pytest.raises(ConfigError, match="needs a display"):
        RecourseEnv("school_assignment_controlled", render_mode="human", **SMALL)


@pytest.mark.slow
@pytest.mark.parametrize("vec", ["dummy", "subproc"])
def test_make_vec_env_with_its_defaults_trains_ppo(vec):
    """Acceptance: make_vec_env on the v1 ID with no env_kwargs trains PPO for 256 steps
    (with Dummy and Subproc vector envs)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    if vec == "dummy":
        venv = make_vec_env("recourse_sim/SchoolAssignment-v1", n_envs=2)
        assert isinstance(venv, DummyVecEnv)
    else:
        # worker processes start without the registry: the "module:" form imports it
        venv = make_vec_env(
            "recourse_sim:recourse_sim/SchoolAssignment-v1", n_envs=2, vec_env_cls=SubprocVecEnv
        )
    try:
        venv.reset()
        assert all(f.shape[-1] == 3 for f in venv.get_images())  # rgb_array, the default
        model = PPO("MlpPolicy", venv, n_steps=128, batch_size=64, n_epochs=1, seed=0)
        model.learn(total_timesteps=256)
        assert model.num_timesteps >= 256
    finally:
        venv.close()


def test_sb3_checker():
    from stable_baselines3.common.env_checker import check_env as sb3_check

    env = gym.make("recourse_sim/SchoolAssignment-v1", render_mode="rgb_array", **SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sb3_check(env.unwrapped, warn=True)


@pytest.mark.slow
def test_record_video_of_three_steps(tmp_path):
    pytest.importorskip("moviepy")
    env = gym.make("recourse_sim/SchoolAssignment-v1", render_mode="rgb_array", **SMALL)
    folder = tmp_path / "videos"
    env = gym.wrappers.RecordVideo(env, str(folder), episode_trigger=lambda e: True)
    env.reset(seed=0)
    for _ in range(3):
        env.step(env.action_space.sample())
    env.close()
    videos = list(folder.glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 0
