"""A controlled collective's hard constraint (``limit``: acting rounds K, total cost C)
and the ``-v3`` action (``action: oar_plan``: OAR's settings, look-ahead and a bank of
unspent budget): the schema refuses what it cannot mean, in one line naming the field."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import recourse_sim.env  # noqa: F401 - registers the environments
from recourse_sim.agents import OAR_ACTION, OAR_PLAN_ACTION
from recourse_sim.agents.oar_settings import bank_draw, plan_horizon
from recourse_sim.env import RecourseEnv
from recourse_sim.env.batched_scope import native_reason
from recourse_sim.errors import ConfigError

SMALL = {"world__cohort_size": 300, "world__history_size": 600}
POP = "populations__h1_students__"


def _env(rounds: int = 4, **settings) -> RecourseEnv:
    overrides = {f"{POP}{k}": v for k, v in settings.items()}
    return RecourseEnv("school_assignment_controlled", rounds=rounds, **SMALL, **overrides)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"action": "oar", "limit": {}}, r"limit: a limit needs acting_rounds .* or total_cost"),
        (
            {"action": "oar", "limit": {"acting_rounds": 0}},
            r"limit\.acting_rounds: .*greater than or equal to 1",
        ),
        ({"action": "oar", "limit": {"total_cost": 0.0}}, r"limit\.total_cost: .*greater than 0"),
        ({"action": "oar", "limit": {"cost": 1.0}}, r"limit\.cost: unknown key.*'total_cost'"),
        ({"limit": {"acting_rounds": 2}}, r"limit .* needs action: oar or oar_plan"),
        ({"action": "oar", "bank_cap": 1.0}, r"bank_cap is a setting of the oar_plan action"),
        ({"action": "oar", "max_horizon": 4}, r"max_horizon is a setting of the oar_plan"),
        ({"action": "oar_plan", "bank_cap": -1.0}, r"bank_cap: .*greater than or equal to 0"),
        ({"action": "oar_plan", "horizon": 5}, r"max_horizon \(3\) must be at least horizon \(5\)"),
    ],
)
def test_the_schema_refuses_a_bad_limit_or_plan_in_one_line(settings, message):
    with pytest.raises(ConfigError, match=message) as err:
        _env(**settings)
    assert "\n" not in str(err.value)


def test_a_limit_or_the_plan_action_is_not_batched_natively():
    assert native_reason(_env(action="oar", limit={"acting_rounds": 2})) is not None
    assert "limit" in native_reason(_env(action="oar", limit={"total_cost": 1.0}))
    assert "oar_plan" in native_reason(_env(action="oar_plan"))


# -- the limit -------------------------------------------------------------------------

LENDING = {"world__n_applicants": 300, "world__history_size": 400}
ROUNDS = 6


def _lending(rounds: int = ROUNDS, **settings) -> RecourseEnv:
    overrides = {f"populations__borrowers__{k}": v for k, v in settings.items()}
    return RecourseEnv("lending_fico_controlled", rounds=rounds, **LENDING, **overrides)


def _play(env: RecourseEnv, actions, seed: int = 3) -> list:
    """Observations, rewards and infos of an episode of seed `seed` under `actions` (one
    per round; None for an env without a controlled collective)."""
    obs, _ = env.reset(seed=seed)
    steps = [obs]
    for a in actions:
        obs, reward, _, _, info = env.step(None if a is None else np.asarray(a, np.float32))
        steps.append((obs, reward, info))
    return steps


def _same_rounds(a: list, b: list) -> None:
    np.testing.assert_array_equal(a[0], b[0])
    for (obs_a, r_a, i_a), (obs_b, r_b, i_b) in zip(a[1:], b[1:], strict=True):
        np.testing.assert_array_equal(obs_a, obs_b)
        assert r_a == r_b
        assert i_a["metrics"] == i_b["metrics"] and i_a["rewards"] == i_b["rewards"]


def _entries(names, **values) -> np.ndarray:
    a = np.zeros(len(names), np.float32)
    for name, value in values.items():
        a[names.index(name)] = value
    return a


def test_acting_rounds_clip_an_acting_action_to_idle_after_k():
    k = 2
    limited = _play(
        _lending(action="oar", limit={"acting_rounds": k}), [_entries(OAR_ACTION)] * ROUNDS
    )
    # the same rounds as a policy that acts k times and then sets act to -1 itself
    schedule = [_entries(OAR_ACTION)] * k + [_entries(OAR_ACTION, act=-1.0)] * (ROUNDS - k)
    _same_rounds(limited, _play(_lending(action="oar"), schedule))
    infos = [step[2] for step in limited[1:]]
    assert sum(i["rewards"]["cost"] > 0 for i in infos) == k
    assert [i["limit"]["clipped"] for i in infos] == [False] * k + [True] * (ROUNDS - k)
    assert [i["limit"]["acting_rounds_left"] for i in infos] == [1, 0, 0, 0, 0, 0]
    assert all(i["limit"]["cost_left"] is None for i in infos)


def test_an_idle_action_uses_no_acting_round():
    env = _lending(action="oar", limit={"acting_rounds": 1})
    idle = [_entries(OAR_ACTION, **{entry: -1.0}) for entry in ("act", "alpha", "budget")]
    steps = _play(env, idle + [_entries(OAR_ACTION)] * 2)  # (not acting: no α, or no ε)
    infos = [step[2] for step in steps[1:]]
    assert [i["limit"]["acting_rounds_left"] for i in infos] == [1, 1, 1, 0, 0]
    assert [i["limit"]["clipped"] for i in infos] == [False] * 4 + [True]
    assert infos[3]["rewards"]["cost"] > 0 and infos[4]["rewards"]["cost"] == 0
    assert env.limit_left() == (0.0, 1.0)


def test_total_cost_caps_each_round_at_the_cost_left():
    epsilon = 0.5  # (lending's borrowers)
    budget = 2.3 * epsilon
    env = _lending(action="oar", limit={"total_cost": budget})
    assert env.controlled.action_set.epsilon == epsilon
    steps = _play(env, [_entries(OAR_ACTION)] * ROUNDS)  # the full budget, every round
    costs = [step[2]["rewards"]["cost"] for step in steps[1:]]
    left = [budget] + [step[2]["limit"]["cost_left"] for step in steps[1:]]
    for cost, before, after in zip(costs, left, left[1:], strict=False):
        assert cost <= min(epsilon, before) * (1 + 1e-12)  # each member's cost <= the cap
        assert after == pytest.approx(max(0.0, before - cost), abs=1e-12)
    assert sum(costs) <= budget * (1 + 1e-12)
    assert sum(costs) >= 0.95 * budget  # the continuous scores spend nearly all of it
    clipped = [step[2]["limit"]["clipped"] for step in steps[1:]]
    assert clipped[:2] == [False, False] and all(clipped[2:])
    assert env.limit_left()[1] == pytest.approx(left[-1] / budget)


def test_a_restored_checkpoint_continues_bit_for_bit(tmp_path):
    from recourse_sim.checkpoint import load_checkpoint, save_checkpoint

    limit = {"acting_rounds": 3, "total_cost": 1.2}
    actions = [
        _entries(OAR_PLAN_ACTION, act=-1.0),
        _entries(OAR_PLAN_ACTION, bank=0.7, horizon=-1.0),
        _entries(OAR_PLAN_ACTION, budget=-0.5),
        _entries(OAR_PLAN_ACTION, act=-1.0),
        _entries(OAR_PLAN_ACTION, bank=1.0),
        _entries(OAR_PLAN_ACTION),
    ]
    uninterrupted = _lending(action="oar_plan", limit=limit)
    whole = _play(uninterrupted, actions)
    env = _lending(action="oar_plan", limit=limit)
    env.reset(seed=3)
    for a in actions[:3]:
        env.step(a)
    # through the checkpoint files, as a resumed run reads them
    save_checkpoint(tmp_path, round=3, state=env.get_state())
    state = load_checkpoint(tmp_path).state
    assert state["allowances"]["borrowers"]["acting_rounds"] == 2
    assert state["allowances"]["borrowers"]["bank"] > 0  # (round 1 banked, round 3 too)
    resumed = _lending(action="oar_plan", limit=limit)
    resumed.reset(seed=99)  # another episode first: the restore replaces all of it
    resumed.set_state(state)
    assert resumed.limit_left() == env.limit_left()
    assert resumed.bank_share() == env.bank_share() > 0
    for a, (obs, reward, info) in zip(actions[3:], whole[4:], strict=True):
        got_obs, got_reward, _, _, got_info = resumed.step(a)
        np.testing.assert_array_equal(got_obs, obs)
        assert got_reward == reward
        assert got_info["metrics"] == info["metrics"] and got_info["rewards"] == info["rewards"]
        assert got_info["limit"] == info["limit"]
    assert resumed.get_state()["allowances"] == uninterrupted.get_state()["allowances"]


@pytest.mark.parametrize(
    ("part", "message"),
    [
        ({"acting_rounds": -1, "cost": 0.0, "bank": 0.0}, "acting_rounds must be a count"),
        ({"acting_rounds": 1, "cost": float("nan"), "bank": 0.0}, "cost must be a finite"),
        ({"acting_rounds": 1, "cost": 0.0, "bank": -1.0}, "bank must be a finite"),
        (None, "no allowance for population 'borrowers'"),
    ],
)
def test_a_corrupt_allowance_is_refused(part, message):
    from recourse_sim.errors import CheckpointError

    env = _lending(action="oar", limit={"acting_rounds": 2})
    env.reset(seed=0)
    state = env.get_state()
    if part is None:
        del state["allowances"]["borrowers"]
    else:
        state["allowances"]["borrowers"] = part
    with pytest.raises(CheckpointError, match=message):
        env.set_state(state)


# -- the -v3 action (oar_plan) -----------------------------------------------------------


def test_the_plan_horizon_and_bank_draw_mappings():
    # at or below 0: the file's horizon; (0, 1] split evenly between the longer ones
    assert [plan_horizon(e, 1, 3) for e in (-1.0, 0.0, 0.1, 1 / 3, 0.34, 0.67, 1.0)] == [
        1, 1, 1, 2, 2, 3, 3,
    ]  # fmt: skip
    assert [plan_horizon(e, 2, 2) for e in (-0.5, 0.5, 1.0)] == [2, 2, 2]
    assert plan_horizon(1.0, 2, 5) == 5 and plan_horizon(0.2, 2, 5) == 2
    assert plan_horizon(0.25, 2, 5) == 3  # 2 + floor(0.25 · 4)
    # a share of bank_cap · ε, at most the bank; nothing at or below 0
    assert bank_draw(0.0, 1.0, 2.0) == 0.0 and bank_draw(-1.0, 1.0, 2.0) == 0.0
    assert bank_draw(0.25, 1.0, 2.0) == 0.5 and bank_draw(1.0, 1.0, 2.0) == 1.0


@pytest.mark.parametrize(
    ("name", "population", "small"),
    [
        ("school_assignment_controlled", "h1_students", SMALL),
        ("lending_fico_controlled", "borrowers", LENDING),
    ],
)
def test_the_zero_plan_action_is_the_collective_oar_population(name, population, small):
    def env(**settings):
        overrides = {f"populations__{population}__{k}": v for k, v in settings.items()}
        return RecourseEnv(name, rounds=4, **small, **overrides)

    oar = _play(env(strategy="collective_oar"), [None] * 4)
    for constant in (0.0, 1.0, 0.3):  # act, alpha, budget, goal in [0, 1]
        for plan in ((0.0, 0.0), (-1.0, -0.4)):  # horizon, bank at or below 0
            action = np.array([constant] * 4 + list(plan), np.float32)
            _same_rounds(_play(env(action="oar_plan"), [action] * 4), oar)


def test_the_horizon_entry_is_oar_with_that_look_ahead():
    plan = _play(
        _lending(rounds=3, action="oar_plan", max_horizon=2),
        [_entries(OAR_PLAN_ACTION, horizon=1.0)] * 3,
    )
    _same_rounds(plan, _play(_lending(rounds=3, strategy="collective_oar", horizon=2), [None] * 3))
    # (and the look-ahead matters here: the file's horizon, 1, plays other rounds)
    one = _play(_lending(rounds=3, strategy="collective_oar"), [None] * 3)
    assert [step[1] for step in one[1:]] != [step[1] for step in plan[1:]]


def test_an_idle_round_banks_its_budget_and_a_draw_spends_it():
    epsilon = 0.5  # (lending's borrowers; bank_cap 2: at most 1.0 banked)
    idle, draw = _entries(OAR_PLAN_ACTION, act=-1.0), _entries(OAR_PLAN_ACTION, bank=0.5)
    env = _lending(action="oar_plan")
    env.reset(seed=3)
    shares = []
    for a in (idle, idle, idle, draw, _entries(OAR_PLAN_ACTION, budget=-0.5)):
        env.step(a)
        shares.append(env.bank_share())
    # idle: +ε each (capped at 2ε); the draw takes 0.5 · 2ε = ε for a round of 2ε, which
    # used all of its own ε: -ε; half the budget banks the other half: +ε/2
    assert shares == [0.5, 1.0, 1.0, 0.5, 0.75]
    assert env.state.allowances["borrowers"].bank == pytest.approx(0.75 * 2 * epsilon)


def test_a_draw_is_oar_with_that_budget():
    # after one idle round (ε banked) a draw of all of it is OAR with budget 2ε
    idle, draw = _entries(OAR_PLAN_ACTION, act=-1.0), _entries(OAR_PLAN_ACTION, bank=1.0)
    plan = _play(_lending(rounds=2, action="oar_plan", bank_cap=1.0), [idle, draw])
    doubled = _lending(rounds=2, action="oar", epsilon=1.0)
    _same_rounds(plan, _play(doubled, [_entries(OAR_ACTION, act=-1.0), _entries(OAR_ACTION)]))


def test_a_cost_limit_caps_the_draw_too():
    draw = _entries(OAR_PLAN_ACTION, bank=1.0)
    env = _lending(action="oar_plan", limit={"total_cost": 0.7})
    steps = _play(env, [_entries(OAR_PLAN_ACTION, act=-1.0), draw, draw])
    costs = [step[2]["rewards"]["cost"] for step in steps[1:]]
    assert costs[0] == 0 and 0.5 < costs[1] <= 0.7 and sum(costs) <= 0.7 * (1 + 1e-12)
    assert steps[2][2]["limit"]["clipped"]  # 2ε asked, 0.7 left


@pytest.mark.parametrize("env_id", ["recourse_sim/SchoolAssignment-v3", "recourse_sim/Lending-v3"])
def test_v3_ids_have_the_plan_action_and_pass_the_checker(env_id):
    small = SMALL if "School" in env_id else LENDING
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gym.make(env_id, rounds=3, **small)
        assert env.action_space.shape == (len(OAR_PLAN_ACTION),)
        assert env.unwrapped.controlled.spec.action == "oar_plan"
        check_env(env.unwrapped)


def test_the_batched_env_falls_back_for_the_plan_action():
    with pytest.warns(UserWarning, match="oar_plan"):
        envs = gym.make_vec(
            "recourse_sim/Lending-v3",
            num_envs=2,
            vectorization_mode="vector_entry_point",
            rounds=2,
            **LENDING,
        )
    envs.reset(seed=0)
    envs.step(np.zeros((2, len(OAR_PLAN_ACTION)), dtype=np.float32))
    envs.close()
