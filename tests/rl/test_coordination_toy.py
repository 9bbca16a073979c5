"""The tiny coordination problem: its closed-form optimum, and PPO learning it."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from recourse_sim.agents.policies import ToyOptimum, evaluate, make_baseline
from recourse_sim.env import RecourseEnv

EVAL_SEEDS = range(1000, 1010)  # held out: training seeds are small integers


def _expected_reward(env: RecourseEnv, shift: float) -> float:
    """Closed form: every data subject moves its report by `shift` along -x1.

    The centroids move to m0 = (n0 (μ0 - shift) + nq q) / (n0 + nq) (the query people are
    recorded as class 0) and m1 = μ1 - shift; with q on the x1 axis the boundary is the
    perpendicular bisector x1 = (m0 + m1) / 2, so a query person at q + N(0, s²) gets
    class 1 with probability Φ((q - mid) / s). Cost: every member moves `shift`.
    """
    spec, lam = env.world.spec, env.scenario.reward.cost_weight
    (mu0, _), (mu1, _) = spec.means
    n0, nq, q = spec.class_sizes[0], spec.query_size, spec.query_mean[0]
    m0 = (n0 * (mu0 - shift) + nq * q) / (n0 + nq)
    m1 = mu1 - shift
    z = (q - (m0 + m1) / 2) / spec.query_sd
    return 0.5 * (1 + math.erf(z / math.sqrt(2))) - lam * shift


def test_the_closed_form_optimum_spends_the_whole_budget_along_the_axis():
    env = RecourseEnv("coordination_toy")
    action = ToyOptimum(env).action()
    assert action == pytest.approx(np.array([[-1.0, 0.0], [-1.0, 0.0]]))
    eps = env.scenario.populations["data_subjects"].epsilon
    # spending more of the budget always pays: the expected reward rises to the full ε
    grid = [_expected_reward(env, t) for t in np.linspace(0, eps, 9)]
    assert np.all(np.diff(grid) > 0)


@pytest.mark.slow
def test_the_closed_form_matches_the_simulation_and_beats_other_actions():
    env = RecourseEnv("coordination_toy")
    seeds = range(1000, 1005)
    best = np.mean([r["reward"] for r in evaluate(ToyOptimum(), env, seeds)])
    eps = env.scenario.populations["data_subjects"].epsilon
    # centroids estimated from 100 people per class add a little noise to the closed form
    assert best == pytest.approx(_expected_reward(env, eps), abs=0.05)
    rng = np.random.default_rng(0)
    for _ in range(12):
        action = rng.uniform(-1, 1, env.action_space.shape).astype(np.float32)
        rewards = []
        for seed in seeds:
            env.reset(seed=seed)
            rewards += [env.step(action)[1] for _ in range(env.scenario.rounds)]
        assert np.mean(rewards) <= best + 1e-9


def test_collective_oar_finds_the_closed_form_optimum():
    # OAR solves for the round's sample (20 query people, 100 per class), the closed
    # form for the population: the sample's solution tilts off the axis by up to ~0.2,
    # either way; averaged over a few samples it is the closed form's
    env = RecourseEnv("coordination_toy", rounds=3)
    actions = []
    for seed in range(6):
        env.reset(seed=seed)
        actions.append(make_baseline("oar", env, steps=20).action())
    assert np.mean(actions, axis=0) == pytest.approx(ToyOptimum(env).action(), abs=0.1)


def _train(seed: int, timesteps: int):
    pytest.importorskip("stable_baselines3")
    from recourse_sim.agents.training import PPOConfig, train_ppo

    return train_ppo("coordination_toy", seed, PPOConfig(timesteps=timesteps))


@pytest.mark.slow
def test_training_twice_with_one_seed_gives_the_same_learning_curve():
    _, first = _train(seed=3, timesteps=400)
    _, again = _train(seed=3, timesteps=400)
    assert len(first) == 400 // 10
    assert first.equals(again)
    _, other = _train(seed=4, timesteps=400)
    assert not first.equals(other)


@pytest.mark.slow
def test_ppo_reaches_ninety_percent_of_the_optimum():
    """SB3's IdentityEnv test, for collective action: a short PPO run (2000 rounds, about
    20 s) gets at least 90 % of the closed-form optimum's reward on held-out seeds."""
    model, curve = _train(seed=0, timesteps=2000)
    env = RecourseEnv("coordination_toy")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ppo = np.mean([r["reward"] for r in evaluate(model, env, EVAL_SEEDS)])
    best = np.mean([r["reward"] for r in evaluate(ToyOptimum(), env, EVAL_SEEDS)])
    none = np.mean([r["reward"] for r in evaluate(make_baseline("none"), env, EVAL_SEEDS)])
    assert best > 0.7 and none < 0.1
    assert ppo >= 0.9 * best, (ppo, best)
    assert curve["reward"].tail(20).mean() > curve["reward"].head(20).mean()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"means": [[0.0, 0.0]]}, "at least two classes"),
        ({"means": [[0.0, 0.0], [1.0]]}, "same number"),
        ({"class_sizes": [10]}, "1 class_sizes for 2 classes"),
        ({"query_mean": [0.0]}, "query_mean has 1 features"),
        ({"query_label": 2}, "query_label 2"),
    ],
)
def test_gaussian_world_shapes_are_checked(change, message):
    from recourse_sim.errors import ConfigError
    from recourse_sim.scenarios import load_scenario

    overrides = {f"world.{k}": v for k, v in change.items()}
    with pytest.raises(ConfigError, match=message) as info:
        load_scenario("coordination_toy", overrides)
    assert "world" in str(info.value)


def test_gaussian_world_draws_classes_and_the_query_group():
    env = RecourseEnv("coordination_toy", rounds=2)
    env.reset(seed=0)
    c = env.state.cohort
    spec = env.world.spec
    assert len(c.X) == sum(spec.class_sizes) + spec.query_size
    assert c.query.sum() == spec.query_size and (c.group == c.query).all()
    assert (c.y0[c.query] == spec.query_label).all()
    for k, mean in enumerate(spec.means):
        rows = ~c.query & (c.y0 == k)
        assert rows.sum() == spec.class_sizes[k]
        assert c.X[rows].mean(0) == pytest.approx(mean, abs=4 * spec.sd / np.sqrt(rows.sum()))
