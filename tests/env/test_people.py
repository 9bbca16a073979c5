"""People who persist: the pool's comings and goings, what people carry from round to
round, the pool metrics against the people rows, and paired runs."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from recourse_sim.env import RecourseEnv
from recourse_sim.env.metrics import PEOPLE_COLUMNS
from recourse_sim.errors import ConfigError
from recourse_sim.scenarios import load_scenario
from recourse_sim.simulate import read_people, simulate

GERMAN = {"world__cohort_size": 120, "world__history_size": 300}


def _play(env: RecourseEnv, seed: int, rounds: int) -> tuple[list[dict], list[pd.DataFrame]]:
    """Metrics (the ``all`` row) and people frames of each round."""
    env.reset(seed=seed)
    everyone, people = [], []
    for _ in range(rounds):
        info = env.step(np.zeros(env.action_space.shape, np.float32))[4]
        everyone.append(info["metrics"][-1])
        people.append(pd.DataFrame(env.people(features=True)))
    return everyone, people


def _german(rounds: int = 6, **more) -> RecourseEnv:
    people = more.pop("people", {"newcomers": 80, "max_rounds": 3})
    return RecourseEnv("lending_german", rounds=rounds, world__people=people, **GERMAN, **more)


def test_a_fresh_cohort_is_everyone_new_and_gone():
    env = RecourseEnv("school_assignment", rounds=3, world__cohort_size=50, world__history_size=200)
    rows, people = _play(env, 0, 3)
    for t, (row, frame) in enumerate(zip(rows, people, strict=True), start=1):
        assert list(frame["person"]) == list(range(50 * (t - 1), 50 * t))
        assert (frame["arrived"] == t).all() and frame["leaves"].all()
        assert row["newcomers"] == row["leavers"] == row["pool_size"] == 50
        assert row["mean_time_to_favourable"] == 0.0


@pytest.mark.slow
def test_rejected_people_stay_and_favoured_people_leave():
    env = _german()
    _, people = _play(env, 1, 6)
    reported = [f"reported_{f}" for f in env.world.features.names]
    for before, after in itertools.pairwise(people):
        stayed = before[~before["leaves"]].set_index("person")
        now = after.set_index("person")
        assert set(stayed.index) <= set(now.index)  # everyone who stays applies again
        # those who did not change their reports again apply with last round's final ones
        same = now.loc[stayed.index][~now.loc[stayed.index, "tried"]]
        np.testing.assert_array_equal(same[reported], stayed.loc[same.index, reported])
        # favoured people left; newcomers carry the next ids
        assert not set(before.loc[before["favourable"], "person"]) & set(after["person"])
        new = after[after["arrived"] == after["round"]]
        assert len(new) == 80 and new["person"].is_monotonic_increasing
        assert new["person"].min() > before["person"].max()
    # the cap: nobody applies in more than max_rounds rounds
    everyone = pd.concat(people)
    assert everyone.groupby("person").size().max() == 3
    assert (everyone["round"] - everyone["arrived"]).max() == 2


def test_reports_and_true_features_carry_over():
    env = _german(rounds=3)
    env.reset(seed=2)
    env.step(np.zeros(env.action_space.shape, np.float32))
    last = env.people(features=True)
    stay = ~last["leaves"]
    features = env.world.features.names
    c = env.state.cohort
    index = np.searchsorted(c.person, last["person"][stay])
    assert (c.person[index] == last["person"][stay]).all()
    reported = np.stack([last[f"reported_{f}"] for f in features], 1)[stay]
    np.testing.assert_array_equal(c.report[index], reported)
    # true features moved with the causal part of each report change only
    start = np.stack([last[f"feature_{f}"] for f in features], 1)[stay]
    change = c.X[index] - start
    np.testing.assert_allclose(change[:, env.causal], (reported - start)[:, env.causal])


def test_favoured_people_return_after_the_set_rounds():
    env = _german(rounds=5, people={"newcomers": 60, "return_after": 2})
    _, people = _play(env, 3, 5)
    first = people[0]
    favoured = set(first.loc[first["favourable"], "person"])
    assert favoured and not favoured & set(people[1]["person"])  # away in round 2
    assert favoured <= set(people[2]["person"])  # and back in round 3


def test_pool_metrics_agree_with_the_people_rows():
    env = _german(rounds=5)
    rows, people = _play(env, 4, 5)
    for row, frame in zip(rows, people, strict=True):
        assert row["n"] == len(frame)
        assert row["newcomers"] == int((frame["arrived"] == frame["round"]).sum())
        assert row["leavers"] == int(frame["leaves"].sum())
        agree = (frame["favourable"] == frame["true_favourable"]).mean()
        assert row["model_accuracy"] == pytest.approx(agree, abs=1e-15)
        approved = frame[frame["favourable"]]
        assert row["approved_favourable_rate"] == pytest.approx(approved["true_favourable"].mean())
        seekers = frame[frame["tried"]]
        assert row["n_seekers"] == len(seekers)


def test_next_round_recourse_is_judged_when_people_apply_again():
    """Seekers of a next_round population move after the decision and are judged when
    they apply again; a round 0 at reset makes round 1 judge the first moves."""
    env = _german(rounds=4, populations__applicants__reapply="next_round")
    rows, people = _play(env, 5, 4)
    for row, frame in zip(rows, people, strict=True):
        # nobody is decided again within a round
        assert (frame["favourable"] == frame["favourable_before"]).all()
        moved = frame[frame["tried"]]
        assert len(moved) and (moved["arrived"] < row["round"]).all()  # moved earlier
        assert row["n_seekers"] == len(moved)
        assert row["recourse_success_rate"] == pytest.approx(moved["favourable"].mean())
        assert row["recourse_reliability"] is not None
    assert (people[0]["arrived"] <= 1).all() and (people[0]["arrived"] == 0).any()
    # round 0's favoured people left before round 1: 80 newcomers replaced them
    assert (people[0]["arrived"] == 1).sum() == 80


def test_next_round_needs_people_who_stay():
    with pytest.raises(ConfigError, match=r"populations.applicants.reapply: 'next_round' needs"):
        load_scenario(
            "lending_german",
            {"world.people": None, "populations.applicants.reapply": "next_round"},
        )


def test_capacity_places_is_a_number_of_people():
    env = _german(rounds=3, decision__rule="capacity", decision__places=25)
    _rows, people = _play(env, 6, 3)
    for frame in people:
        assert frame["favourable_before"].sum() == 25


def test_people_columns_and_fico_ids():
    env = RecourseEnv("lending_fico", rounds=3, world__n_applicants=200, world__history_size=300)
    _, people = _play(env, 0, 3)
    for frame in people:
        assert list(frame.columns[: len(PEOPLE_COLUMNS)]) == list(PEOPLE_COLUMNS)
        assert list(frame["person"]) == list(range(200))  # everyone applies every round
        assert not frame["leaves"].any() and (frame["arrived"] == 1).all()


def test_a_pool_checkpoint_continues_identically():
    env = _german(rounds=6, populations__applicants__reapply="next_round")
    env.reset(seed=7)
    action = np.zeros(env.action_space.shape, np.float32)
    for _ in range(2):
        env.step(action)
    state = env.get_state()
    expected = [env.step(action)[4]["metrics"] for _ in range(3)]
    other = _german(rounds=6, populations__applicants__reapply="next_round")
    other.reset(seed=99)
    other.set_state(state)
    got = [other.step(action)[4]["metrics"] for _ in range(3)]
    assert got == expected


@pytest.mark.slow
def test_paired_runs_draw_the_same_newcomers(tmp_path):
    """Acceptance: two runs of lending_german with seed 0, one with the collective's
    participation set to 0, have identical person ids and true features in the rows of
    people.csv of round 10 that both runs drew as newcomers; and every round's
    model_accuracy is the agreement of favourable and true_favourable in people.csv."""
    runs, pools = [], []
    for name, overrides in (
        ("collective", []),
        ("none", ["populations.women_borrowers.participation=0"]),
    ):
        scenario = load_scenario("lending_german", overrides)
        metrics, _ = simulate(
            scenario, rounds=10, seed=0, out=tmp_path / name, people=True, people_features=True
        )
        people = read_people(tmp_path / name)
        everyone = metrics[metrics["group"] == "all"].set_index("round")["model_accuracy"]
        agree = (people["favourable"] == people["true_favourable"]).groupby(people["round"]).mean()
        pd.testing.assert_series_equal(everyone, agree, check_names=False, rtol=1e-9, atol=0)
        last = people[people["round"] == 10]
        pools.append(set(last["person"]))
        runs.append(last[last["arrived"] == 10].reset_index(drop=True))
    assert pools[0] != pools[1]  # the collective changed who is still applying ...
    a, b = runs  # ... not who arrived
    assert len(a) == len(b) == 400
    features = [c for c in a.columns if c.startswith("feature_")]
    assert len(features) == 13  # German credit's features
    pd.testing.assert_frame_equal(a[["person", *features]], b[["person", *features]])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "more"),
    [
        ("school_assignment", {"world__cohort_size": 200, "world__history_size": 400}),
        ("coordination_toy", {}),
        ("oar_iris", {}),
    ],
)
def test_every_world_kind_can_keep_its_people(name, more):
    """School, Gaussian and bundled-dataset worlds with a `people` block (CSV worlds share
    the dataset worlds' class; FICO keeps its applicants anyway): people stay, return
    and leave as asked, and a checkpoint taken mid-episode continues identically."""
    people = {"initial": 60, "newcomers": 20, "return_after": 2, "max_rounds": 4}
    env = RecourseEnv(name, rounds=6, world__people=people, **more)
    action = np.zeros(env.action_space.shape, np.float32)
    _, frames = _play(env, 0, 3)
    assert len(frames[0]) == 60
    for t, frame in enumerate(frames, start=1):
        assert frame["person"].is_unique and frame["person"].is_monotonic_increasing
        assert ((t - frame["arrived"]) < 4).all()
    state = env.get_state()
    expected = [env.step(action)[4]["metrics"] for _ in range(3)]
    again = RecourseEnv(name, rounds=6, world__people=people, **more)
    again.reset(seed=1)
    again.set_state(state)
    assert [again.step(action)[4]["metrics"] for _ in range(3)] == expected


SCHOOL_SMALL = ["world.cohort_size=200", "world.history_size=400"]


@pytest.mark.slow
def test_people_collective_columns_hold_each_members_change(tmp_path):
    """With people_collective, people.csv says who joined the collective and how it
    changed their training report: members are as many as the metrics' participants, each
    member's cost recomputed from the written changes is the written cost and averages to
    collective_mean_cost, non-members changed nothing, and every other column is the
    run's without the option."""
    scenario = load_scenario("school_assignment", overrides=SCHOOL_SMALL)
    metrics, people = simulate(
        scenario, rounds=3, seed=1, out=tmp_path / "with", people=True, people_collective=True
    )
    _, plain = simulate(scenario, rounds=3, seed=1, people=True)
    env = RecourseEnv(scenario)
    changes = [f"collective_{f}" for f in env.world.features.names]
    assert list(people.columns) == [*plain.columns, "collective", "collective_cost", *changes]
    pd.testing.assert_frame_equal(people[plain.columns], plain)
    assert people.equals(read_people(tmp_path / "with"))

    members = people["collective"].notna()
    assert set(people.loc[members, "collective"]) == {"h1_students"}
    assert (people.loc[~members, [*changes, "collective_cost"]] == 0).all().all()
    everyone = metrics[metrics["group"] == "all"].set_index("round")
    per_round = people[members].groupby("round")
    assert per_round.size().to_dict() == everyone["collective_participants"].to_dict()
    np.testing.assert_allclose(
        per_round["collective_cost"].mean(), everyone["collective_mean_cost"], rtol=1e-9
    )
    # the cost of each written change (10 digits), by the population's own action set
    (oar,) = [s for s in env.strategies if s.population == "h1_students"]
    delta = people.loc[members, changes].to_numpy()
    assert np.abs(delta).sum(1).max() > 0  # (a member may move nothing: whole activities)
    np.testing.assert_allclose(
        oar.action_set.cost(delta), people.loc[members, "collective_cost"], rtol=1e-8, atol=1e-12
    )
