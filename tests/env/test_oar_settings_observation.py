"""The -v2 action's snapped budget entry and what the oar action's observation adds."""

from __future__ import annotations

import numpy as np
import pytest

from recourse_sim.agents import OAR_ACTION
from recourse_sim.agents.strategies import oar_budget_share
from recourse_sim.env import RecourseEnv

SMALL = {"world__cohort_size": 300, "world__history_size": 600, "rounds": 3}
POP = "populations__h1_students__"


def _rollout(env: RecourseEnv, action: np.ndarray) -> list:
    obs, _ = env.reset(seed=5)
    out = [obs]
    for _ in range(3):
        obs, reward, _, _, info = env.step(action)
        out.append((obs, reward, info["rewards"]))
    return out


def _budget(entry: float) -> np.ndarray:
    a = np.zeros(len(OAR_ACTION), np.float32)
    a[OAR_ACTION.index("budget")] = entry
    return a


def test_budget_share_snaps_to_whole_levels_halves_up():
    # L = 4: every entry from -1/8 up keeps the whole budget
    for a in (-0.001, -0.1, -0.125, 0.0, 0.5, 1.0):
        assert oar_budget_share(a, 4) == 1.0
    assert oar_budget_share(-0.2, 4) == 0.75
    assert oar_budget_share(-0.375, 4) == 0.75  # 2.5 + 1/2 = 3: halves up
    assert oar_budget_share(-0.5, 4) == 0.5
    assert oar_budget_share(-0.9, 4) == 0.0 and oar_budget_share(-1.5, 4) == 0.0
    # L = 0: the continuous min(1, 1 + a)
    assert oar_budget_share(-0.2, 0) == pytest.approx(0.8)
    assert oar_budget_share(-0.001, 0) == pytest.approx(0.999)
    # against the formula on a grid
    for L in (1, 2, 4, 7):
        for a in np.linspace(-1, 1, 81):
            assert oar_budget_share(a, L) == np.floor(L * min(1, 1 + a) + 0.5) / L


def _without_tail(rollout: list, n: int) -> list:
    """The rollout's observations cut to their first `n` entries (the oar action's
    appended entries, which record the action itself, differ between budget entries)."""
    return [rollout[0][:n]] + [(o[:n], r, rw) for o, r, rw in rollout[1:]]


def _same(a: list, b: list) -> None:
    np.testing.assert_array_equal(a[0], b[0])
    for (oa, ra, wa), (ob, rb, wb) in zip(a[1:], b[1:], strict=True):
        np.testing.assert_array_equal(oa, ob)
        assert ra == rb and wa == wb


def test_a_small_step_below_zero_keeps_the_files_epsilon():
    env = RecourseEnv("school_assignment_controlled", **SMALL, **{POP + "action": "oar"})
    n = env.observation_space.shape[0] - 10  # (the appended entries: 2 + 4 + 4)
    oar = _without_tail(_rollout(env, _budget(0.0)), n)
    for entry in (-0.001, -0.1):
        _same(_without_tail(_rollout(env, _budget(entry)), n), oar)
    # -0.2: three quarters of ε, as a collective_oar population of that ε
    quarter = _without_tail(_rollout(env, _budget(-0.2)), n)
    other = RecourseEnv(
        "school_assignment_controlled",
        **SMALL,
        **{POP + "strategy": "collective_oar", POP + "epsilon": 0.75},
    )
    _same(quarter, _rollout(other, None))


def test_no_levels_keeps_the_continuous_budget():
    env = RecourseEnv(
        "school_assignment_controlled", **SMALL, **{POP + "action": "oar", POP + "budget_levels": 0}
    )
    n = env.observation_space.shape[0] - 10
    other = RecourseEnv(
        "school_assignment_controlled",
        **SMALL,
        **{POP + "strategy": "collective_oar", POP + "epsilon": 0.8},
    )
    _same(
        _without_tail(_rollout(env, _budget(-0.2)), n),
        _rollout(other, None),
    )


@pytest.mark.parametrize(
    ("scenario", "population", "small"),
    [
        ("school_assignment_controlled", "h1_students", {"world__cohort_size": 300}),
        ("lending_fico_controlled", "borrowers", {"world__n_applicants": 300}),
    ],
)
def test_the_observation_adds_what_the_settings_need(scenario, population, small):
    env = RecourseEnv(
        scenario,
        rounds=3,
        world__history_size=600,
        **small,
        **{f"populations__{population}__action": "oar"},
    )
    v1 = RecourseEnv(scenario, rounds=3, world__history_size=600, **small)
    obs, _ = env.reset(seed=2)
    v1_obs, _ = v1.reset(seed=2)
    assert obs.shape[0] == v1_obs.shape[0] + 10 == env.observation_space.shape[0]
    np.testing.assert_array_equal(obs[: len(v1_obs)], v1_obs)  # today's entries first
    tail = obs[len(v1_obs) :]
    # no limit; no action yet; no cost; the first model's cut-off; no collective yet
    np.testing.assert_array_equal(tail[:2], [1.0, 1.0])
    np.testing.assert_array_equal(tail[2:7], 0.0)
    assert 0.0 < tail[7] < 1.0
    np.testing.assert_array_equal(tail[8:], 0.0)
    action = np.array([0.2, -0.3, -0.2, 0.9], np.float32)  # act, 0.7 α, 3/4 ε, own goal
    obs, _, _, _, info = env.step(action)
    tail = obs[len(v1_obs) :]
    np.testing.assert_allclose(tail[2:6], [0.0, -0.3, -0.25, 0.0], atol=1e-7)
    stats = info["collectives"][population]
    eps = env.controlled.action_set.epsilon
    assert stats["participants"] > 0
    np.testing.assert_allclose(tail[6], min(stats["cost"] / eps, 1.0), rtol=1e-6)
    # eligible: school's H1 students are the favoured, lending's borrowers the approved
    n = len(env.people()["person"])
    favoured = {m["group"]: m for m in info["metrics"]}["all"]["acceptance_rate"] * n
    np.testing.assert_allclose(tail[9], favoured / n, rtol=1e-6)
    np.testing.assert_allclose(tail[8], stats["participants"] / round(favoured), rtol=1e-6)
    rule = env.scenario.decision
    if rule.rule == "threshold":
        assert tail[7] == np.float32(rule.threshold)
    # idle, another goal: act -1, no budget spent, the goal entry kept
    obs, *_ = env.step(np.array([-0.9, 0.0, 0.0, -0.8], np.float32))
    np.testing.assert_allclose(obs[len(v1_obs) + 2 : len(v1_obs) + 6], [-1, 0, -1, -0.8], atol=1e-7)
    assert env.observation_space.contains(obs)
