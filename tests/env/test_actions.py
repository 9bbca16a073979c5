"""Actions are checked, never reshaped or cast; the async vector env works after torch."""

from __future__ import annotations

import numpy as np
import pytest

from recourse_sim.env import RecourseEnv
from recourse_sim.errors import ConfigError

SMALL = {"world__cohort_size": 60, "world__history_size": 120, "rounds": 3}


@pytest.fixture(scope="module")
def env():
    env = RecourseEnv("school_assignment_controlled", **SMALL)
    env.reset(seed=0)
    return env


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda shape: np.zeros(int(np.prod(shape)), np.float32), "has shape"),  # flat
        (lambda shape: np.zeros((1, *shape), np.float32), "has shape"),  # batched
        (lambda shape: np.zeros(shape, bool), "has dtype bool"),
        (lambda shape: np.zeros(shape, complex), "has dtype complex"),
        (lambda shape: np.full(shape, "0.1"), "has dtype <U3"),
        (lambda shape: np.full(shape, np.nan, np.float32), "NaN or infinite"),
    ],
)
def test_wrong_actions_are_refused(env, make, message):
    shape = env.action_space.shape
    with pytest.raises(ConfigError, match=message):
        env.step(make(shape))


def test_integer_and_float_actions_of_the_right_shape_are_taken():
    """An integer action is taken as the float action of the same values: two same-seed
    rollouts, one stepped with int64 actions and one with float32, are the same."""
    rollouts = []
    for dtype in (np.int64, np.float32):
        env = RecourseEnv("school_assignment_controlled", **SMALL)
        obs, _ = env.reset(seed=1)
        steps = [obs]
        for a in (0, 1, -1):
            obs, reward, *_ = env.step(np.full(env.action_space.shape, a, dtype))
            steps.append((obs, reward))
        rollouts.append(steps)
    ints, floats = rollouts
    np.testing.assert_array_equal(ints[0], floats[0])
    for (obs_i, reward_i), (obs_f, reward_f) in zip(ints[1:], floats[1:], strict=True):
        np.testing.assert_array_equal(obs_i, obs_f)
        assert reward_i == reward_f


# spawn: fresh worker interpreters, each importing the package (several s of CPU)
@pytest.mark.parametrize("context", [None, pytest.param("spawn", marks=pytest.mark.slow)])
def test_async_vector_env_steps_after_torch_was_used(context):
    """Acceptance: gym.make_vec(..., vectorization_mode="async") steps after the parent
    process has run a torch matrix multiply on its thread pool: with the platform's
    default start method (fork on Linux: the ID is registered in the workers already),
    and with spawn (fresh workers: the "module:" form of the ID imports recourse_sim)."""
    import gymnasium as gym
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.ones(256, 256) @ torch.ones(256, 256)
    finally:
        torch.set_num_threads(threads)
    env_id = "recourse_sim/SchoolAssignment-v1"
    kwargs = {}
    if context is not None:
        env_id, kwargs = f"recourse_sim:{env_id}", {"vector_kwargs": {"context": context}}
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode="async", **kwargs, **SMALL)
    try:
        envs.reset(seed=0)
        _, rewards, _, _, _ = envs.step(envs.action_space.sample())
        assert rewards.shape == (2,) and np.isfinite(rewards).all()
    finally:
        envs.close()
