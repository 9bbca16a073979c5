"""Named random streams: the world's draws do not depend on strategies or learner settings."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils import seeding

from recourse_sim.env import RecourseEnv
from recourse_sim.env.streams import derive_streams, population_stream, stream

# lending_german with a fresh cohort each round (no people who stay)
LENDING = {"world__cohort_size": 100, "world__history_size": 300, "world__people": None}


def _cohorts(env: RecourseEnv, seed: int, rounds: int) -> list[np.ndarray]:
    env.reset(seed=seed)
    out = [env.state.cohort.X.copy()]
    for _ in range(rounds):
        env.step(np.zeros(env.action_space.shape, np.float32))
        out.append(env.state.cohort.X.copy())
    return out


def test_a_stream_is_found_by_name_not_position():
    a = derive_streams(seeding.np_random(3)[0], ["world", "population/x", "learner"])
    b = derive_streams(seeding.np_random(3)[0], ["learner", "world"])
    for name in ("world", "learner"):
        assert a[name].bit_generator.state == b[name].bit_generator.state
    assert a["world"].random() != a["learner"].random()


def test_the_derivation_is_the_documented_one():
    rng = seeding.np_random(7)[0]
    words = seeding.np_random(7)[0].integers(0, 2**32, size=4)
    derived = derive_streams(rng, ["world"])["world"]
    seed = np.random.SeedSequence([int(w) for w in words], spawn_key=tuple(b"world"))
    expected = np.random.Generator(np.random.PCG64(seed))
    assert derived.random(5).tolist() == expected.random(5).tolist()
    assert stream(words, "world").random() == stream(words, "world").random()


@pytest.mark.slow
def test_runs_that_differ_in_strategies_see_the_same_people():
    """lending_german drawing a fresh cohort each round: with the collective off, without
    individual recourse, or with another learner rule, every round's applicants are the
    same, and so is the history the first model is fit on."""
    base = RecourseEnv("lending_german", rounds=4, **LENDING)
    others = [
        RecourseEnv(
            "lending_german", rounds=4, populations__women_borrowers__participation=0, **LENDING
        ),
        RecourseEnv("lending_german", rounds=4, populations={}, **LENDING),
        RecourseEnv("lending_german", rounds=4, learner__update_rule="refit", **LENDING),
    ]
    expected = _cohorts(base, 5, 4)
    theta0 = base.state.theta0
    for env in others:
        got = _cohorts(env, 5, 4)
        for a, b in zip(expected, got, strict=True):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(env.state.theta0, theta0)


def test_each_population_draws_from_its_own_stream():
    env = RecourseEnv("lending_german", rounds=2, **LENDING)
    env.reset(seed=0)
    names = set(env.state.streams)
    assert names == {
        "world",
        "learner",
        "decision",
        population_stream("applicants"),
        population_stream("women_borrowers"),
    }
    states = {k: g.bit_generator.state["state"]["state"] for k, g in env.state.streams.items()}
    env.step(np.zeros(env.action_space.shape, np.float32))
    moved = {
        k
        for k, g in env.state.streams.items()
        if g.bit_generator.state["state"]["state"] != states[k]
    }
    # a round draws people (world), who tries (applicants), who joins (women_borrowers);
    # nothing draws from the learner or decision streams after reset
    assert moved == {"world", population_stream("applicants"), population_stream("women_borrowers")}
