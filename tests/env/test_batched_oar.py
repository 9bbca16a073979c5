"""The native batched ``-v2`` env (``action: oar``): OAR solved for every world at once
(`recourse_sim.env.batched_oar`) equals the single environment's OAR world by world."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import recourse_sim  # noqa: F401 - registers the environments
from recourse_sim.env import RecourseEnv
from recourse_sim.env.batched import BatchedRecourseEnv, native_reason
from recourse_sim.env.batched_oar import Refits, _at, _hessian, newton_solve, oar_batch
from recourse_sim.learners.logistic import LogisticRegression
from recourse_sim.recourse import ActionSet
from recourse_sim.recourse.collective import collective_recourse

SCHOOL, LENDING = "recourse_sim/SchoolAssignment-v2", "recourse_sim/Lending-v2"
SMALL = {
    SCHOOL: {"world__cohort_size": 300, "world__history_size": 600},
    LENDING: {"world__n_applicants": 300, "world__history_size": 400},
}


def _compare(
    env_id: str, worlds: int, rounds: int, zero: bool = False, **overrides
) -> tuple[float, int, float]:
    """Batched and single ``-v2`` rollouts of random actions (seeds 100.., actions from
    seed 0; `zero`: OAR itself in every world): (largest observation difference,
    observation entries that differ, largest reward difference)."""
    kwargs = {**gym.spec(env_id).kwargs, **overrides}
    venv = BatchedRecourseEnv(worlds, **kwargs)
    singles = [RecourseEnv(**kwargs) for _ in range(worlds)]
    obs, _ = venv.reset(seed=100)
    single_obs = np.stack([env.reset(seed=100 + i)[0] for i, env in enumerate(singles)])
    worst, differing, worst_reward = 0.0, int((obs != single_obs).sum()), 0.0
    rng = np.random.default_rng(0)
    for _ in range(rounds):
        actions = rng.uniform(-1, 1, (worlds, 4)).astype(np.float32)
        actions[::5] = 0.0  # OAR itself, and the corners
        actions[1::7] = 1.0
        if zero:
            actions[:] = 0.0
        obs, reward, *_ = venv.step(actions)
        steps = [env.step(a) for env, a in zip(singles, actions, strict=True)]
        single_obs = np.stack([s[0] for s in steps])
        worst = max(worst, float(np.abs(obs - single_obs).max()))
        differing += int((obs != single_obs).sum())
        single_reward = np.array([s[1] for s in steps])
        worst_reward = max(worst_reward, float(np.abs(reward - single_reward).max()))
    return worst, differing, worst_reward


@pytest.mark.parametrize("env_id", [SCHOOL, LENDING])
def test_v2_is_native_and_each_world_is_the_single_envs(env_id):
    assert native_reason(gym.make(env_id, **SMALL[env_id]).unwrapped) is None
    venv = gym.make_vec(env_id, num_envs=2, vectorization_mode="vector_entry_point")
    assert isinstance(venv.unwrapped, BatchedRecourseEnv)
    worst, differing, worst_reward = _compare(env_id, 4, 4, **SMALL[env_id])
    assert differing == 0, worst  # observations bit for bit
    assert worst_reward <= 1e-12


@pytest.mark.parametrize("env_id", [SCHOOL, LENDING])
def test_v2_with_oar_in_every_world_is_each_single_env(env_id):
    # every world solves OAR, so the update refits on OAR's own design, its members moved
    worst, differing, worst_reward = _compare(env_id, 4, 3, zero=True, **SMALL[env_id])
    assert differing == 0, worst
    assert worst_reward <= 1e-12


@pytest.mark.slow
@pytest.mark.parametrize("env_id", [SCHOOL, LENDING])
def test_v2_batched_equals_single_over_20_rounds_of_16_worlds(env_id):
    # (measured: observations bit for bit, rewards within 5e-16)
    worst, differing, worst_reward = _compare(env_id, 16, 20)
    assert differing == 0, worst
    assert worst_reward <= 1e-12


def test_autoreset_restarts_a_world_with_the_oar_observation():
    venv = BatchedRecourseEnv(2, **gym.spec(LENDING).kwargs, rounds=2, **SMALL[LENDING])
    venv.reset(seed=0)
    a = np.zeros((2, 4), np.float32)
    for _ in range(2):
        venv.step(a)
    obs, reward, *_ = venv.step(a)  # NEXT_STEP: the reset observation
    single = RecourseEnv(**gym.spec(LENDING).kwargs, rounds=2, **SMALL[LENDING])
    single.reset(seed=0)
    for _ in range(2):
        single.step(a[0])
    np.testing.assert_array_equal(obs[0], single.reset()[0])
    assert (reward == 0).all()


def _problem(seed: int, n: int = 200, d: int = 3, old: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * [1.0, 2.0, 0.5][:d] + [0.5, -1.0, 2.0][:d]
    y = (X @ np.array([1.0, -0.5, 0.8][:d]) + rng.normal(size=n) > 0).astype(np.int64)
    X_old = rng.normal(size=(old, d))
    y_old = (rng.random(old) < 0.4).astype(np.int64)
    return X, y, X_old, y_old


def _learner(X, y, window):
    learner = LogisticRegression(update_rule="window", window=window, standardize=True)
    return learner.fit(X, y)


def test_refit_pieces_are_the_single_learners_closed_forms():
    """P, the risk, gradient and Hessian of the batched refits (`_at`, `_hessian`) are
    the single learner's (`_risk_np`, `_grad_np`, `_hessian`) to rounding, world by
    world: padded worlds, and logits past ±700, where exp(−z) overflows, included."""
    rng = np.random.default_rng(3)
    n, d = 120, 2
    learner = LogisticRegression(C=0.7)
    X = rng.normal(size=(2, n, d))
    y = (rng.random((2, n)) < 0.4).astype(float)
    theta = np.array([[0.8, -1.3, 0.2], [400.0, -300.0, 5.0]])  # world 1: |z| up to ~1000
    rows = np.ones((2, n))
    rows[0, 100:] = 0.0  # world 0 has 100 rows
    Z = np.concatenate([X, np.ones((2, n, 1))], axis=2) * rows[:, :, None]
    refits = Refits(
        X,
        y,
        rows.astype(bool),
        [(np.zeros((0, d)), np.zeros(0))] * 2,
        np.zeros((2, d)),
        np.ones((2, d)),
    )
    assert np.abs(refits.Zt[1].T @ theta[1]).max() > 700
    # each world alone (world 0: exp(−z) everywhere finite) and both in one block
    for part in (slice(0, 1), slice(1, 2), slice(0, 2)):
        args = (refits.Zt[part], refits.y[part], refits.rows_float[part], learner.C)
        P, f = _at(theta[part], *args)
        g, H = _hessian(
            refits.Zt[part], refits.outer[part], P, refits.y[part], learner.C, refits.fill
        )
        g[:, :-1] += theta[part, :-1]  # (the penalty's part)
        for k, w in enumerate(range(2)[part]):
            m = 100 if w == 0 else n
            Z_w, th = Z[w, :m], theta[w][None]
            risk, P_w = learner._risk_np(th, Z_w, y[w, :m, None], with_proba=True)
            np.testing.assert_allclose(P[k, :m], P_w[:, 0], rtol=1e-14, atol=1e-300)
            assert abs(f[k] - risk) <= 1e-13 * abs(risk)
            g_w = learner._grad_np(th, Z_w, y[w, :m, None], None, P_w)[0]
            np.testing.assert_allclose(g[k], g_w, rtol=1e-12, atol=1e-12)
            H_w = learner._hessian(th, Z_w, None, P_w)
            np.testing.assert_allclose(H[k], H_w, rtol=1e-13, atol=1e-13)


def test_newton_solve_is_the_single_learners_refit():
    """Worlds of different sizes, padded: each θ⁺ is `_numpy_refit`'s to rounding."""
    worlds, expected = [], []
    for seed, n in enumerate([150, 200, 90]):
        X, y, X_old, y_old = _problem(seed, n, old=40 * seed)
        learner = _learner(np.concatenate([X_old, X[:50]]), np.concatenate([y_old, y[:50]]), 3)
        new, _ = learner._numpy_refit(
            learner.state_, torch.from_numpy(X), torch.from_numpy(y), None, None
        )
        expected.append(learner._pack(new).numpy()[0])
        worlds.append((learner, X, y))
    longest = max(len(X) for _, X, _ in worlds)
    d = 3
    X_new = np.zeros((3, longest, d))
    y_new = np.zeros((3, longest))
    rows = np.zeros((3, longest), bool)
    old, theta, shift, scale = [], [], [], []
    for k, (learner, X, y) in enumerate(worlds):
        X_new[k, : len(X)], y_new[k, : len(X)], rows[k, : len(X)] = X, y, True
        st = learner.state_
        old.append((st["X_mem"].numpy(), st["y_mem"].numpy()))
        theta.append(learner._pack(st).numpy()[0])
        shift.append(st["x_shift"].numpy())
        scale.append(st["x_scale"].numpy())
    refits = Refits(X_new, y_new, rows, old, np.array(shift), np.array(scale))
    th_star, _, _, step, one = newton_solve(
        np.array(theta),
        refits.Zt,
        refits.outer,
        refits.fill,
        refits.y,
        refits.rows,
        1.0,
        1e-10,
        100,
    )
    assert not one.any()
    np.testing.assert_allclose(th_star - step, np.array(expected), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("typed", [False, True])
def test_oar_batch_is_collective_recourse_world_by_world(typed):
    """Worlds with their own budgets, members and queries: each Δ and refit is
    `collective_recourse`'s (pgd, horizon 1) to rounding."""
    d = 3
    base = _action_set(typed)
    n, eps_list = 120, [1.5, 0.75, 1.5, 0.375]
    X_new, y_new, members, Zq, q_rows, theta0, goal = [], [], [], [], [], [], []
    shift, scale, expected = [], [], []
    for k, eps in enumerate(eps_list):
        X, y, _, _ = _problem(10 + k, n, d)
        if typed:
            X[:, 2] = np.round(np.abs(X[:, 2]) * 2)
        learner = _learner(X, y, 1)
        rng = np.random.default_rng(k)
        member = rng.random(n) < 0.4
        Q = X[rng.random(n) < 0.2][: 10 + 3 * k] + 0.3
        aset = base if eps == base.epsilon else base.replace(epsilon=eps)
        res = collective_recourse(learner, X, y, Q, 1, aset, members=member, steps=10)
        st = learner.state_
        expected.append((res.delta, learner._pack(res.state_after).numpy()[0]))
        s, c = st["x_shift"].numpy(), st["x_scale"].numpy()
        X_new.append(X)
        y_new.append(y.astype(float))
        members.append(member)
        theta0.append(learner._pack(st).numpy()[0])
        goal.append(1)
        shift.append(s)
        scale.append(c)
        Zq.append(Q)
    m = max(len(Q) for Q in Zq)
    Zq_t = np.zeros((4, d + 1, m))
    q_rows = np.zeros((4, m), bool)
    for k, Q in enumerate(Zq):
        Zq_t[k, :d, : len(Q)] = ((Q - shift[k]) / scale[k]).T
        Zq_t[k, d, : len(Q)] = 1.0
        q_rows[k, : len(Q)] = True
    refits = Refits(
        np.array(X_new),
        np.array(y_new),
        np.ones((4, n), bool),
        [(np.zeros((0, d)), np.zeros(0))] * 4,
        np.array(shift),
        np.array(scale),
        np.array(members),
        np.flatnonzero(base.actionable),
    )
    moved, state = oar_batch(
        refits,
        Zq_t,
        q_rows,
        np.array(goal),
        np.array(eps_list),
        base,
        np.array(theta0),
        10,
        1.0,
        1e-10,
        100,
    )
    delta = np.zeros((4, n, d))
    delta[refits.mw, refits.mr] = moved
    assert sum(np.abs(want).max() > 0 for want, _ in expected) >= 2  # they act
    for k, (want_delta, want_state) in enumerate(expected):
        np.testing.assert_allclose(delta[k], want_delta, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(state[k], want_state, rtol=1e-9, atol=1e-12)


def _action_set(typed: bool) -> ActionSet:
    """One actionable feature (c), bounded below; integer counts when `typed`."""
    return ActionSet(
        n_features=3,
        immutable=[0, 1],
        lower=[-np.inf, -np.inf, 0.0],
        cost_weights=[1.0, 1.0, 0.5],
        epsilon=1.5,
        feature_types=["continuous", "continuous", "integer"] if typed else None,
    )


@pytest.mark.parametrize(
    ("setting", "value", "reason"),
    [
        ("horizon", 2, "horizon 2"),
        ("solver", "fgm", "solver 'fgm'"),
        ("actionable", ["gpa", "extracurriculars"], "several actionable features"),
    ],
)
def test_oar_settings_outside_the_batch_are_refused_with_the_reason(setting, value, reason):
    env = RecourseEnv(
        **gym.spec(SCHOOL).kwargs,
        **SMALL[SCHOOL],
        **{f"populations__h1_students__{setting}": value},
    )
    assert reason in native_reason(env)
    with pytest.warns(UserWarning, match=reason):
        venv = gym.make_vec(
            SCHOOL,
            num_envs=2,
            vectorization_mode="vector_entry_point",
            **SMALL[SCHOOL],
            **{f"populations__h1_students__{setting}": value},
        )
    assert not isinstance(venv.unwrapped, BatchedRecourseEnv)
