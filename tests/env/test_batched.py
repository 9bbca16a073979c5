"""The native batched vector env (`recourse_sim.env.batched`): each world plays exactly
the single environment's rollout of its seed; autoreset as Gymnasium 1.x specifies; the
synchronous fallback for scenarios it does not batch; the SB3 adapter."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import recourse_sim
from recourse_sim.env import RecourseEnv
from recourse_sim.env.batched import BatchedRecourseEnv, native_reason

SCHOOL = "recourse_sim/SchoolAssignment-v1"
SMALL = {"world__cohort_size": 200}
# Observations are float32 views of float64 numbers that the batched env sums in
# another order (rounding differs in the last bits): equal to float32 rounding.
# Rewards are float64: equal within 1e-12 (measured: both are bit for bit equal).
OBS_RTOL, OBS_ATOL, REWARD_ATOL = 1e-6, 1e-7, 1e-12


def _make_vec(n: int, env_id: str = SCHOOL, **kwargs) -> gym.vector.VectorEnv:
    return gym.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point", **kwargs)


def _actions(space: gym.Space, rounds: int, seed: int) -> np.ndarray:
    """A varied action sequence: random actions, with the corners and 0 mixed in."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (rounds, *space.shape)).astype(np.float32)
    a[::5] = 1.0
    a[2::5] = -1.0
    a[3::7] = 0.0
    return a


def _single_rollout(env_id, seed, actions, **kwargs):
    env = gym.make(env_id, **kwargs).unwrapped
    obs, _ = env.reset(seed=seed)
    out = [(obs, 0.0, False, False)]
    for a in actions:
        obs, reward, terminated, truncated, _ = env.step(a)
        out.append((obs, reward, terminated, truncated))
    return out


def _assert_same(batched, single, world):
    for t, ((o_b, r_b, te_b, tr_b), (o_s, r_s, te_s, tr_s)) in enumerate(
        zip(batched, single, strict=True)
    ):
        where = f"world {world}, round {t}"
        np.testing.assert_allclose(o_b, o_s, rtol=OBS_RTOL, atol=OBS_ATOL, err_msg=where)
        assert abs(r_b - r_s) <= REWARD_ATOL, (where, r_b, r_s)
        assert (te_b, tr_b) == (te_s, tr_s), where


def _batched_rollout(venv, seed, actions):
    obs, _ = venv.reset(seed=seed)
    rows = [[(obs[i], 0.0, False, False)] for i in range(venv.num_envs)]
    for a in actions:
        obs, reward, terminated, truncated, _ = venv.step(a)
        for i in range(venv.num_envs):
            rows[i].append((obs[i], reward[i], terminated[i], truncated[i]))
    return rows


def test_make_vec_gives_the_native_batched_env():
    venv = _make_vec(2, **SMALL)
    assert isinstance(venv.unwrapped, BatchedRecourseEnv)
    assert isinstance(venv, gym.vector.VectorEnv)
    assert venv.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    single = gym.make(SCHOOL, **SMALL)
    assert venv.single_observation_space == single.observation_space
    assert venv.single_action_space == single.action_space
    assert venv.observation_space.shape == (2, *single.observation_space.shape)


@pytest.mark.parametrize("cohort", [200, 12])
def test_each_world_plays_the_single_envs_rollout_of_its_seed(cohort):
    """Sub-env i reset with seed s + i gives the observations, rewards and ends of the
    single env reset with s + i, over a whole 20-round episode of varied actions (with
    12 students a cohort, graphs have blocks of one member or none, and no members)."""
    kwargs = {"world__cohort_size": cohort}
    venv = _make_vec(4, **kwargs)
    actions = _actions(venv.action_space, 20, seed=1)
    batched = _batched_rollout(venv, 11, actions)
    assert batched[0][-1][3]  # the episode's 20 rounds end it
    for i in range(4):
        _assert_same(batched[i], _single_rollout(SCHOOL, 11 + i, actions[:, i], **kwargs), i)


def test_a_list_of_seeds_seeds_each_world():
    venv = _make_vec(2, **SMALL)
    actions = _actions(venv.action_space, 3, seed=2)
    obs, _ = venv.reset(seed=[5, 42])
    rows = [[(obs[i], 0.0, False, False)] for i in range(2)]
    for a in actions:
        o, r, te, tr, _ = venv.step(a)
        for i in range(2):
            rows[i].append((o[i], r[i], te[i], tr[i]))
    for i, seed in enumerate([5, 42]):
        _assert_same(rows[i], _single_rollout(SCHOOL, seed, actions[:, i], **SMALL), i)


@pytest.mark.slow
def test_the_contract_size_and_many_worlds_match_too():
    """The scenario's own cohort size (1,000) and 8 worlds, 20 rounds."""
    venv = _make_vec(8)
    actions = _actions(venv.action_space, 20, seed=3)
    batched = _batched_rollout(venv, 100, actions)
    for i in range(8):
        _assert_same(batched[i], _single_rollout(SCHOOL, 100 + i, actions[:, i]), i)


def test_bounded_integers_from_raw_bits_are_numpys():
    """One world's SBM draws (`_sbm_draws`: binomial edge counts, endpoints from
    ``random_raw`` with numpy's bounded-integer method; `_stream_words`: the words in
    order, the uint32 buffered across block pairs and rounds) are numpy's own
    ``binomial`` and ``integers``."""
    from recourse_sim.env.batched_sbm import (
        _lemire_rejects,
        _lemire_threshold,
        _sbm_draws,
        _stream_words,
    )

    # block pairs: (node pairs, edge probability, first end's block size, second's)
    pairs = [(780, 0.14, 40, 40), (9, 0.5, 7, 1), (4, 0.5, 1, 1), (1600, 0.06, 40, 13)]
    pairs += [(3, 0.7, 2**31, 5), (0, 0.5, 3, 3), (1, 0.9, 2, 1)]
    for seed in range(20):
        ours, theirs = np.random.default_rng(seed), np.random.default_rng(seed)
        pending = None
        for start in range(len(pairs)):  # a round: a rotation of the pairs
            plan = pairs[start:] + pairs[:start]
            expected = []
            for n_pairs, p, high_a, high_b in plan:
                m = theirs.binomial(n_pairs, p)
                expected.append(
                    (m, theirs.integers(high_a, size=m), theirs.integers(high_b, size=m))
                )
            raws, edges = [], []
            draws = [(n, p, (a > 1) + (b > 1)) for n, p, a, b in plan]
            halves, used, buffered = _sbm_draws(ours, draws, pending is not None, raws, edges)
            stays = buffered and halves > 0
            words, left = _stream_words(
                raws, [0] * used, [pending] * used, [halves - 1] if stays else []
            )
            pending = left[0] if stays else pending if buffered else None
            at = 0
            for (m, a, b), got_m, (*_, high_a, high_b) in zip(expected, edges, plan, strict=True):
                assert got_m == m
                for high, want in [(high_a, a), (high_b, b)]:
                    if high == 1:  # integers(1, size=m) draws nothing
                        np.testing.assert_array_equal(want, np.zeros(m))
                        continue
                    product = words[at : at + m].astype(np.uint64) * np.uint64(high)
                    at += m
                    threshold = _lemire_threshold(np.array([high], np.uint64))
                    assert not _lemire_rejects(product, threshold).any()
                    np.testing.assert_array_equal((product >> np.uint64(32)).astype(np.int64), want)
            assert at == len(words)
            assert ours.random() == theirs.random()  # doubles in between: the buffer stays


@pytest.mark.parametrize("redraw", [False, True], ids=["drawn", "redrawn"])
def test_each_worlds_population_streams_stand_where_the_single_envs_do(redraw, monkeypatch):
    """Round by round, each world's population streams stand where the single env's
    do: the same PCG64 state and the same uint32 word buffered (20 students a cohort:
    blocks of one leave a word buffered across block pairs, worlds and rounds), also
    where a world's graph is drawn again after a rejected bounded draw."""
    import recourse_sim.env.batched_sbm as batched
    from recourse_sim.env.streams import population_stream

    if redraw:  # the first draw of every round rejected
        monkeypatch.setattr(batched, "_lemire_rejects", lambda product, _: _first(product))
    kwargs = {"world__cohort_size": 20, "rounds": 8}
    venv = _make_vec(4, **kwargs)
    actions = _actions(venv.action_space, 8, seed=8)
    venv.reset(seed=60)
    singles = [gym.make(SCHOOL, **kwargs).unwrapped for _ in range(4)]
    for i, env in enumerate(singles):
        env.reset(seed=60 + i)
    buffered_words = 0
    for a in actions:
        venv.step(a)
        for i, env in enumerate(singles):
            env.step(a[i])
            for population, rngs in venv._pop_rngs.items():
                theirs = env.state.streams[population_stream(population)].bit_generator.state
                assert rngs[i].bit_generator.state["state"] == theirs["state"]
                word = theirs["uinteger"] if theirs["has_uint32"] else None
                assert venv._pending[population][i] == word
                buffered_words += word is not None
    assert buffered_words  # (the buffer is exercised)


def _first(values: np.ndarray) -> np.ndarray:
    out = np.zeros(len(values), bool)
    out[:1] = True
    return out


def test_a_rejected_bounded_draw_redraws_that_world_numpys_way(monkeypatch):
    """Lemire's method rejects about one draw in 10^5 world-rounds; the world whose draw
    it was builds its graph again with numpy's own calls, and the rollout stays exact."""
    import recourse_sim.env.batched_sbm as batched

    def reject_first(product, threshold):
        out = np.zeros(len(product), bool)
        out[0] = True
        return out

    monkeypatch.setattr(batched, "_lemire_rejects", reject_first)
    venv = _make_vec(2, **SMALL)
    actions = _actions(venv.action_space, 4, seed=6)
    rows = _batched_rollout(venv, 30, actions)
    for i in range(2):
        _assert_same(rows[i], _single_rollout(SCHOOL, 30 + i, actions[:, i], **SMALL), i)


@pytest.mark.parametrize(
    ("env_id", "scenario", "size"),
    [
        (SCHOOL, "school_assignment_controlled", SMALL),
        ("recourse_sim/Lending-v1", "lending_fico_controlled", {"world__n_applicants": 200}),
    ],
)
def test_next_step_autoreset_starts_the_next_episode_as_a_seedless_reset(env_id, scenario, size):
    """The step after truncation resets the world (reward 0, the reset observation; the
    action is ignored); the episode after it is the single env's after ``reset()`` (a
    lending world's pool and the bank's memory start again too)."""
    kwargs = {**size, "rounds": 3}
    venv = _make_vec(2, env_id, **kwargs)
    actions = _actions(venv.action_space, 8, seed=4)
    _obs, _ = venv.reset(seed=20)
    steps = [venv.step(a) for a in actions]
    assert not steps[1][3].any() and steps[2][3].all()  # truncated after round 3
    o, r, te, tr, info = steps[3]
    assert not te.any() and not tr.any() and (r == 0).all() and (info["round"] == 0).all()
    for i in range(2):
        env = RecourseEnv(scenario, **kwargs)
        env.reset(seed=20 + i)
        for t in range(3):
            env.step(actions[t, i])
        first, _ = env.reset()
        np.testing.assert_allclose(o[i], first, rtol=OBS_RTOL, atol=OBS_ATOL)
        for t in range(4, 7):  # the second episode, from the action after the reset step
            o_s, r_s, _, tr_s, _ = env.step(actions[t, i])
            np.testing.assert_allclose(steps[t][0][i], o_s, rtol=OBS_RTOL, atol=OBS_ATOL)
            assert abs(steps[t][1][i] - r_s) <= REWARD_ATOL
            assert steps[t][3][i] == tr_s
    assert steps[6][3].all() and not steps[7][3].any()


def test_same_step_autoreset_reports_the_final_observation():
    venv = BatchedRecourseEnv(
        2, "school_assignment_controlled", autoreset_mode="SameStep", rounds=2, **SMALL
    )
    assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    venv.reset(seed=0)
    a = np.zeros(venv.action_space.shape, np.float32)
    venv.step(a)
    obs, _, _, truncated, info = venv.step(a)
    assert truncated.all() and info["_final_obs"].all()
    assert info["final_obs"][0][-1] == 1.0 and (obs[:, -1] == 0.0).all()  # round fraction


def test_disabled_autoreset_needs_a_masked_reset():
    venv = BatchedRecourseEnv(
        2, "school_assignment_controlled", autoreset_mode=AutoresetMode.DISABLED, rounds=1, **SMALL
    )
    venv.reset(seed=0)
    a = np.zeros(venv.action_space.shape, np.float32)
    venv.step(a)
    with pytest.raises(gym.error.ResetNeeded):
        venv.step(a)
    _obs, info = venv.reset(options={"reset_mask": np.array([True, True])})
    assert info["_round"].all()
    venv.step(a)


def test_spaces_seeding_and_bad_actions():
    """The vector-env counterpart of env_checker's checks: observations in the space,
    one seed one rollout, a wrong action shape refused with a clear error."""
    venv = _make_vec(2, **SMALL)
    obs1, _ = venv.reset(seed=3)
    assert obs1.dtype == np.float32 and venv.observation_space.contains(obs1)
    action = venv.action_space.sample()
    o1, r1, *_ = venv.step(action)
    assert venv.observation_space.contains(o1) and r1.dtype == np.float64
    obs2, _ = venv.reset(seed=3)
    o2, r2, *_ = venv.step(action)
    np.testing.assert_array_equal(obs1, obs2)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(r1, r2)
    with pytest.raises(recourse_sim.errors.ConfigError, match="action has shape"):
        venv.step(action[0])
    with pytest.raises(recourse_sim.errors.ConfigError, match="seeds for 2"):
        venv.reset(seed=[1, 2, 3])


@pytest.mark.parametrize(
    ("env_id", "kwargs", "why"),
    [
        ("recourse_sim/Recourse-v0", {"scenario": "school_assignment"}, "collective_oar"),
        ("recourse_sim/Lending-v2", {"populations__borrowers__horizon": 2}, "horizon 2"),
        ("recourse_sim/Recourse-v0", {"scenario": "lending_fico"}, "refit"),
    ],
)
def test_unsupported_scenarios_fall_back_to_a_synchronous_loop(env_id, kwargs, why):
    with pytest.warns(UserWarning) as record:
        venv = _make_vec(2, env_id, **kwargs)
    messages = [str(w.message) for w in record]
    falling = [m for m in messages if "falling back to a synchronous loop" in m]
    assert len(falling) == 1 and why in falling[0] and "\n" not in falling[0]
    assert isinstance(venv, gym.vector.SyncVectorEnv)
    assert venv.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    venv.reset(seed=0)


def test_native_reason_names_what_is_not_batched():
    assert native_reason(RecourseEnv("school_assignment_controlled")) is None
    refit = RecourseEnv(
        "school_assignment_controlled", learner__update_rule="refit", learner__window=None
    )
    assert "refit" in native_reason(refit)
    assert "collective_oar" in native_reason(RecourseEnv("school_assignment"))
    assert native_reason(RecourseEnv("lending_fico_controlled")) is None


@pytest.mark.slow
def test_sb3_adapter_trains_ppo():
    pytest.importorskip("stable_baselines3")
    import torch
    from stable_baselines3 import PPO

    from recourse_sim.agents.sb3 import BatchedVecEnv

    torch.set_num_threads(1)
    venv = BatchedVecEnv(
        BatchedRecourseEnv(4, "school_assignment_controlled", rounds=5, world__cohort_size=100)
    )
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scenario", "size"),
    [
        ("school_assignment_controlled", {"world__cohort_size": 60}),
        ("lending_fico_controlled", {"world__n_applicants": 200}),
    ],
)
def test_train_ppo_on_the_batched_env_learns_as_on_sb3s_vector_env(scenario, size):
    """One seed, the same curve: each world plays the rollout its seed gives the plain
    env, and SB3 sees the same observations, rewards and episode ends."""
    pytest.importorskip("stable_baselines3")
    import torch

    from recourse_sim.agents.training import PPOConfig, train_ppo

    torch.set_num_threads(1)
    config = PPOConfig(timesteps=64, n_envs=2, n_steps=16, batch_size=16, n_epochs=1)
    kwargs = {"rounds": 5, **size}
    _, plain = train_ppo(scenario, 3, config, **kwargs)
    _, batched = train_ppo(scenario, 3, config, batched=True, **kwargs)
    assert len(plain) > 0
    np.testing.assert_allclose(batched.to_numpy(), plain.to_numpy(), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(
    "overrides",
    [
        {"decision__rule": "threshold", "decision__threshold": 0.6},
        {"populations__students__move": 0.5},
        {"populations__students__tolerance": {"kind": "uniform", "low": 0.0, "high": 1.0}},
        {"populations__h1_students__graph__kind": "complete"},
        {
            "populations__h1_students__graph__seed_groups": ["N2"],
            "populations__students__groups": ["N2"],
        },
        {"learner__window": 3},  # the history, then the last three cohorts
    ],
    ids=["threshold", "move", "tolerance", "complete-graph", "seed-groups", "window-3"],
)
def test_native_variants_match_the_single_env(overrides):
    kwargs = {"world__cohort_size": 60, "rounds": 8, **overrides}
    venv = _make_vec(3, **kwargs)
    assert isinstance(venv, BatchedRecourseEnv)
    actions = _actions(venv.action_space, 8, seed=7)
    batched = _batched_rollout(venv, 50, actions)
    for i in range(3):
        _assert_same(batched[i], _single_rollout(SCHOOL, 50 + i, actions[:, i], **kwargs), i)


@pytest.mark.parametrize(
    "cut_off",
    [
        {"populations__students__margin": {"kind": "lognormal", "median": 0.05, "sigma": 0.5}},
        {"populations__students__margin": 0.0, "decision__ties": "random"},  # a pile, a lottery
        {
            "populations__students__margin": {"kind": "uniform", "low": 0.01, "high": 0.1},
            "decision__ties": "random",
        },
    ],
)
def test_margins_drawn_per_person_and_lottery_ties_are_the_single_envs(cut_off):
    """Seekers' margins drawn per person (keyed by their ids) and the capacity rule's
    lottery give each world the single env's rollout, natively."""
    kwargs = {**SMALL, **cut_off}
    venv = _make_vec(3, **kwargs)
    assert isinstance(venv, BatchedRecourseEnv)
    actions = _actions(venv.action_space, 6, seed=8)
    rows = _batched_rollout(venv, 40, actions)
    for i in range(3):
        _assert_same(rows[i], _single_rollout(SCHOOL, 40 + i, actions[:, i], **kwargs), i)


LENDING = "recourse_sim/Lending-v1"


def _assert_bit_for_bit(batched, single, world):
    """Observations equal bit for bit, rewards within 1e-12, the same ends."""
    for t, ((o_b, r_b, te_b, tr_b), (o_s, r_s, te_s, tr_s)) in enumerate(
        zip(batched, single, strict=True)
    ):
        where = f"world {world}, round {t}"
        np.testing.assert_array_equal(o_b, o_s, err_msg=where)
        assert abs(r_b - r_s) <= REWARD_ATOL, (where, r_b, r_s)
        assert (te_b, tr_b) == (te_s, tr_s), where


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"labels__unobserved": "unfavourable"},  # the rejected train as defaults
        {"learner__window": 1, "decision__threshold": 0.7},
    ],
    ids=["dropped", "labelled", "window-1"],
)
def test_lending_is_native_and_each_world_plays_the_single_envs_rollout(overrides):
    """FICO's persistent applicants, selective labels and the window refit, batched:
    each world is the single env's rollout of its seed (a small pool, few rounds)."""
    kwargs = {"world__n_applicants": 300, "rounds": 8, **overrides}
    venv = _make_vec(3, LENDING, **kwargs)
    assert isinstance(venv, BatchedRecourseEnv)
    actions = _actions(venv.action_space, 8, seed=9)
    rows = _batched_rollout(venv, 70, actions)
    for i in range(3):
        _assert_bit_for_bit(rows[i], _single_rollout(LENDING, 70 + i, actions[:, i], **kwargs), i)


@pytest.mark.filterwarnings("ignore::recourse_sim.learners.logistic.SingleClassWarning")
@pytest.mark.parametrize(
    "overrides",
    [
        {"world__n_applicants": 100, "decision__threshold": 0.97},  # rounds without a loan
        {"world__n_applicants": 50, "decision__threshold": 0.999},  # ... and one-class refits
        {"world__n_applicants": 60, "decision__threshold": 0.93, "learner__window": 2},
    ],
    ids=["no-loans", "one-class", "window-2"],
)
def test_lending_rounds_without_loans_or_with_one_class_are_the_single_envs(overrides):
    """A world whose round makes no loan is not updated (its memory keeps its rounds) and
    one whose window holds one class keeps its model, as in the single env."""
    kwargs = {"rounds": 10, **overrides}
    venv = _make_vec(4, LENDING, **kwargs)
    actions = _actions(venv.action_space, 10, seed=11)
    rows = _batched_rollout(venv, 5, actions)
    for i in range(4):
        _assert_bit_for_bit(rows[i], _single_rollout(LENDING, 5 + i, actions[:, i], **kwargs), i)


@pytest.mark.slow
def test_lending_16_worlds_20_rounds_equal_the_single_env():
    """The acceptance case: Lending-v1 as bundled (2,000 applicants), 16 worlds, a whole
    20-round episode of varied actions; no fallback warning (warnings are errors)."""
    venv = _make_vec(16, LENDING)
    assert isinstance(venv, BatchedRecourseEnv)
    actions = _actions(venv.action_space, 20, seed=10)
    rows = _batched_rollout(venv, 200, actions)
    assert rows[0][-1][3]  # the episode's 20 rounds end it
    for i in range(16):
        _assert_bit_for_bit(rows[i], _single_rollout(LENDING, 200 + i, actions[:, i]), i)


def test_a_refit_of_padded_worlds_is_each_worlds_own():
    """`newton_refit_batch` with rows of different numbers per world (zero columns past
    them) gives each world the refit of its own rows alone."""
    from recourse_sim.learners.logistic_batch import newton_refit_batch

    rng = np.random.default_rng(0)
    sizes = [40, 25, 3]
    Zt = np.zeros((3, 3, 40))
    y = np.zeros((3, 40))
    rows = np.zeros((3, 40), bool)
    for b, m in enumerate(sizes):
        Zt[b, :2, :m] = rng.normal(size=(2, m))
        Zt[b, 2, :m] = 1.0
        y[b, :m] = rng.random(m) < 0.5
        rows[b, :m] = True
    y[2, :3] = 1.0  # one class: θ kept
    theta0 = rng.normal(size=(3, 3)) * 0.1
    padded, kept = newton_refit_batch(theta0, Zt, y, 1.0, 1e-10, 100, rows=rows)
    assert kept.tolist() == [False, False, True]
    np.testing.assert_array_equal(padded[2], theta0[2])
    for b in range(2):
        m = sizes[b]
        alone, _ = newton_refit_batch(
            theta0[b : b + 1], Zt[b : b + 1, :, :m], y[b : b + 1, :m], 1.0, 1e-10, 100
        )
        np.testing.assert_allclose(padded[b], alone[0], rtol=1e-12, atol=1e-12)
