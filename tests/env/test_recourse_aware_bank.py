"""The decision-maker's side as a choice: a recourse-aware learner (Ross et al.'s recourse
loss, ``learner.recourse_loss_weight``) and a PARE threshold recomputed each round
(``decision.rule: pare``)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from recourse_sim.env import RecourseEnv
from recourse_sim.errors import ConfigError
from recourse_sim.recourse.ross import recourse_scores
from recourse_sim.scenarios import load_scenario, pare_min_calibration

torch.set_num_threads(1)

NAME = "lending_german_pare"
# A small, fast German world: fewer people, a smaller oracle, and no collective (its OAR
# solve is not what these tests are about).
SMALL = {
    "world__cohort_size": 200,
    "world__history_size": 300,
    "world__oracle__trees": 20,
    "populations__women_borrowers__participation": 0.0,
}


def _env(rounds: int = 3, **more) -> RecourseEnv:
    return RecourseEnv(NAME, rounds=rounds, **{**SMALL, **more})


def _all_rows(infos: list[dict]) -> list[dict]:
    return [next(m for m in info["metrics"] if m["group"] == "all") for info in infos]


def _play(env: RecourseEnv, seed: int, steps: int) -> list[dict]:
    env.reset(seed=seed)
    zero = np.zeros(env.action_space.shape, np.float32)
    return [env.step(zero)[4] for _ in range(steps)]


def _recourse_rate(env: RecourseEnv, threshold: float) -> float:
    """Share of the pending cohort's honest reports with recourse at `threshold` under the
    current model (linear δ* within the bank's action set)."""
    s = recourse_scores(env.learner, env.state.cohort.X, env.pare_action_set, goal=env.favourable)
    return float((s >= threshold).mean())


# -- schema ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("decision.pare.epsilon", 1.5, r"decision\.pare\.epsilon: .*between 0 and 1.*1\.5"),
        ("decision.pare.alpha", 0, r"decision\.pare\.alpha: .*between 0 and 1.*got 0"),
        ("decision.pare.calibration", "labels", r"decision\.pare\.calibration: .*'labels'"),
        ("learner.recourse_loss_weight", -0.5, r"learner\.recourse_loss_weight: .*-0\.5"),
        ("learner.params.action_set", 1, r"learner\.params: action_set is set by the env"),
        ("decision.group_thresholds", {"female": 0.4}, r"decision: .*group_thresholds"),
    ],
)
def test_schema_errors_name_the_field_and_value(key, value, expected):
    with pytest.raises(ConfigError, match=expected):
        load_scenario(NAME, {key: value})


def test_too_few_calibration_rows_names_the_minimum():
    need = pare_min_calibration(0.05, 0.05)
    assert need == 59  # (1 - 0.05)^59 = 0.0485 <= 0.05 < (1 - 0.05)^58
    with pytest.raises(ConfigError, match=r"decision\.pare: .*at least 59 .*has 30 .*cohort_size"):
        load_scenario(NAME, {"world.cohort_size": 30})
    # the threshold rule needs no calibration
    load_scenario(NAME, {"world.cohort_size": 30, "decision.rule": "threshold"})


def test_recourse_loss_needs_a_learner_that_supports_it():
    centroid = {"learner.type": "nearest_centroid", "learner.params": {}}
    with pytest.raises(ConfigError, match=r"learner\.recourse_loss_weight: .*'nearest_centroid'"):
        load_scenario(NAME, centroid)
    load_scenario(NAME, {**centroid, "learner.recourse_loss_weight": 0})


# -- the environment -----------------------------------------------------------------------------


@pytest.mark.slow
def test_recourse_aware_learner_gets_the_action_set_and_raises_recourse():
    plain = _env(learner__recourse_loss_weight=0.0, decision__rule="threshold")
    aware = _env(decision__rule="threshold")
    plain.reset(seed=0)
    aware.reset(seed=0)  # same history, same first cohort
    assert plain.learner.recourse_loss_weight == 0.0
    assert aware.learner.recourse_loss_weight == 0.8 and aware.learner.recourse_goal == 1
    assert aware.learner.action_set.epsilon == 1.0  # learner.recourse_budget
    assert np.array_equal(aware.learner.action_set.actionable, aware.action_set.actionable)
    before = (_recourse_rate(plain, 0.5), _recourse_rate(aware, 0.5))
    assert before[1] > before[0] + 0.02, before
    # every update trains with the recourse loss too: recourse stays higher over a run
    zero = np.zeros(aware.action_space.shape, np.float32)
    for _ in range(2):
        plain.step(zero)
        aware.step(zero)
    assert _recourse_rate(aware, 0.5) > _recourse_rate(plain, 0.5)


@pytest.mark.slow
def test_pare_threshold_guarantees_recourse_and_differs_from_the_plain_threshold():
    plain = _env(learner__recourse_loss_weight=0.0, decision__rule="threshold")
    pare = _env(learner__recourse_loss_weight=0.0)
    plain_rows = _all_rows(_play(plain, seed=3, steps=3))
    rows = _all_rows(_play(pare, seed=3, steps=3))
    assert "decision_threshold" not in plain_rows[0]
    for row in rows:
        # deployed: the bank's usual 0.5, lowered to the certified bound when it is below
        assert row["decision_threshold"] == min(0.5, row["pare_upper"])
        assert row["has_recourse_rate"] >= 1 - 0.05 - 0.03  # 1 - ε, up to sampling
    # a plain-trained model needs the threshold lowered to guarantee recourse
    assert max(r["decision_threshold"] for r in rows) < 0.5
    # round 1 has the same model and cohort: the lower threshold accepts more people
    assert rows[0]["acceptance_rate_before"] > plain_rows[0]["acceptance_rate_before"]
    plain.reset(seed=3)
    assert _recourse_rate(plain, 0.5) < rows[0]["has_recourse_rate"]


def test_pare_with_a_recourse_aware_learner_keeps_the_usual_threshold():
    rows = _all_rows(_play(_env(), seed=0, steps=2))
    for row in rows:
        assert row["pare_upper"] > 0.5 and row["decision_threshold"] == 0.5
        assert row["has_recourse_rate"] >= 0.92


@pytest.mark.slow
def test_pare_checkpoint_continues_identically():
    env = _env(rounds=4)
    _play(env, seed=5, steps=1)
    state = env.get_state()
    zero = np.zeros(env.action_space.shape, np.float32)
    straight = [env.step(zero) for _ in range(2)]
    resumed_env = _env(rounds=4)
    resumed_env.set_state(state)
    resumed = [resumed_env.step(zero) for _ in range(2)]
    for (o1, r1, *_, i1), (o2, r2, *_, i2) in zip(straight, resumed, strict=True):
        assert np.array_equal(o1, o2) and r1 == r2
        assert i1["metrics"] == i2["metrics"]


@pytest.mark.slow
def test_check_env_passes_on_the_pare_scenario():
    env = gym.make("recourse_sim/Recourse-v0", scenario=NAME, rounds=3, warn_passive=False, **SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
