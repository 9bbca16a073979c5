"""The cut-off: seekers' margins (a number, or drawn per person), the capacity rule's tie
rule (arrival or a lottery), ``seekers_at_cutoff`` and the warning of a pile."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from recourse_sim.cli import main
from recourse_sim.env import RecourseEnv
from recourse_sim.env.engine import capacity_decisions
from recourse_sim.env.metrics import TIE_RESOLUTION, tie_key
from recourse_sim.env.streams import keyed_uniforms, margin_stream, stream, stream_key
from recourse_sim.errors import ConfigError
from recourse_sim.scenarios import load_scenario
from recourse_sim.simulate import read_metrics, read_people

SMALL = {"world__cohort_size": 300, "world__history_size": 1000}
SPREAD = {"kind": "lognormal", "median": 0.05, "sigma": 0.5}
# a pile: everyone aims at the cut-off itself, with recourse that can land on it (whole
# extracurricular activities take a seeker past it)
PILE = {
    "populations__students__margin": 0.0,
    "decision__ties": "arrival",
    "features__types": {"extracurriculars": "continuous"},
}


def _step(env: RecourseEnv) -> list[dict]:
    return env.step(np.zeros(env.action_space.shape, np.float32))[4]["metrics"]


# -- keyed numbers ---------------------------------------------------------------------------


def test_keyed_uniforms_are_uniform_and_a_function_of_their_counters():
    key = stream_key(stream([1, 2, 3, 4], "ties"))
    u = keyed_uniforms(key, np.arange(200_000))
    assert 0.0 <= u.min() and u.max() < 1.0
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01  # neighbouring ids: independent
    by_round = keyed_uniforms(key, np.arange(5000), np.full(5000, 3))
    assert stats.kstest(by_round, "uniform").pvalue > 1e-3
    assert abs(np.corrcoef(by_round, u[:5000])[0, 1]) < 0.05  # another round, another number
    ids = np.array([7, 3, 7, 11])
    again = keyed_uniforms(key, ids)
    assert again[0] == again[2] == u[7] and again[1] == u[3]
    other = keyed_uniforms(stream_key(stream([1, 2, 3, 5], "ties")), np.arange(5000))
    assert abs(np.corrcoef(other, u[:5000])[0, 1]) < 0.05  # another seed, another number
    per_key = keyed_uniforms(np.array([key, key + 1], np.uint64)[:, None], np.tile(ids, (2, 1)))
    np.testing.assert_array_equal(per_key[0], again)


def test_a_stream_key_leaves_the_stream_where_it_was():
    g = stream([5, 6, 7, 8], "margin/x")
    key = stream_key(g)
    assert stream_key(g) == key
    assert g.random() == stream([5, 6, 7, 8], "margin/x").random()


# -- margins ---------------------------------------------------------------------------------


@pytest.mark.parametrize("extracurriculars", ["continuous", "integer"])
def test_each_seeker_lands_its_own_margin_above_the_cut_off(extracurriculars):
    """School seekers (exact min-cost recourse of a logistic model) who can reach their
    aim end at the round's cut-off score plus their margin: the lognormal's quantile at
    the keyed uniform of their id, recomputed here from the stream, not the env. With
    extracurriculars whole activities (the world's own type), a whole one may take a
    seeker past their aim, never short of it."""
    types = {"features__types": {"extracurriculars": extracurriculars}}
    env = RecourseEnv("school_assignment", rounds=2, **SMALL, **types)
    assert env.scenario.populations["students"].margin.median == 0.05  # the default
    env.reset(seed=1)
    c = env.state.cohort
    proba, favourable = env.honest_decisions(c)
    cut = env.capacity_cut(proba, favourable)
    _step(env)
    r = env.state.last_record
    moved = r.tried & (r.cost > 0)
    assert moved.sum() > 15
    key = stream_key(env.state.streams[margin_stream("students")])
    q = keyed_uniforms(key, c.person[moved])
    margin = stats.lognorm.ppf(q, s=0.5, scale=0.05)
    if extracurriculars == "continuous":
        np.testing.assert_allclose(r.score[moved] - cut, margin, atol=1e-9)
    else:
        assert (r.score[moved] - cut >= margin - 1e-9).all()
    assert np.ptp(margin) > 0.05  # people aim differently


def test_a_persons_margin_is_the_same_in_every_arm_and_round():
    """Common random numbers: arms that differ in other populations draw the same key;
    the margin depends only on the person, whatever the order of the rows."""
    kwargs = {**SMALL, "populations__students__margin": SPREAD}
    base = RecourseEnv("school_assignment", **kwargs)
    other = RecourseEnv("school_assignment", populations__h1_students__participation=0.0, **kwargs)
    base.reset(seed=4)
    other.reset(seed=4)
    students = next(s for s in base.strategies if s.population == "students")
    ids = np.array([3, 1_000_000, 42, 3])
    m = base.margins(students, ids)
    np.testing.assert_array_equal(m, other.margins(students, ids))
    np.testing.assert_array_equal(base.margins(students, ids[::-1]), m[::-1])
    assert m[0] == m[3] and len(np.unique(m)) == 3
    _step(base)
    np.testing.assert_array_equal(base.margins(students, ids), m)  # a later round
    state = base.get_state()
    restored = RecourseEnv("school_assignment", **kwargs)
    restored.reset(seed=99)
    restored.set_state(state)
    np.testing.assert_array_equal(restored.margins(students, ids), m)


def test_a_number_margin_adds_no_stream_and_moves_the_pile_without_spreading_it():
    """The same margin for everyone: every reachable seeker aims at one score, so the
    pile moves up by the margin and stays a pile (a spread is what removes it)."""
    env = RecourseEnv(
        "school_assignment",
        rounds=3,
        **SMALL,
        **{**PILE, **{"populations__students__margin": 0.05}},
    )
    assert margin_stream("students") not in env.stream_names
    env.reset(seed=0)
    shares = [_step(env)[-1]["seekers_at_cutoff"] for _ in range(3)]
    assert max(shares) > 0.5


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"kind": "uniform", "high": 1.0}, "populations.students.margin.spread.high"),
        ({"kind": "uniform", "low": 0.2, "high": 0.1}, "populations.students.margin.spread"),
        ({"kind": "lognormal", "median": 0.0}, "populations.students.margin.spread.median"),
        ({"kind": "beta", "a": 1}, "populations.students.margin.spread.kind"),
        (-0.1, "populations.students.margin.number"),
        (1.0, "populations.students.margin.number"),
    ],
)
def test_a_bad_margin_is_one_error_naming_the_field(override, field):
    with pytest.raises(ConfigError) as info:
        load_scenario("school_assignment", overrides=[f"populations.students.margin={override}"])
    message = str(info.value)
    assert field in message and "\n" not in message


def test_a_bad_tie_rule_is_one_error_naming_the_field():
    with pytest.raises(ConfigError, match=r"decision\.ties: .*'arrival' or 'random'"):
        load_scenario("school_assignment", overrides=["decision.ties=lottery"])


# -- ties ------------------------------------------------------------------------------------


def test_capacity_with_a_priority_takes_the_tied_in_priority_order():
    """Brute force: sort by score key (descending), then priority; the first `places`."""
    rng = np.random.default_rng(0)
    for n, places in [(1, 1), (9, 4), (300, 120), (1000, 999)]:
        p = rng.choice([0.2, 0.4, 0.4 + 1e-13, 0.7], size=(3, n))  # ties across 1e-13
        priority = rng.random((3, n))
        got = capacity_decisions(p, places, priority)
        for w in range(3):
            order = np.lexsort((priority[w], -tie_key(p[w])))
            expected = np.zeros(n, bool)
            expected[order[:places]] = True
            np.testing.assert_array_equal(got[w], expected)
        # no priority: row order, as before
        order = np.lexsort((np.arange(n), -tie_key(p[0])))
        expected = np.zeros(n, bool)
        expected[order[:places]] = True
        np.testing.assert_array_equal(capacity_decisions(p[0], places), expected)


def test_random_ties_are_a_lottery_per_round_of_the_tied_not_arrival_order():
    """With seekers piled on the cut-off (margin 0), the places left for the tied go to
    the lowest lottery numbers of the round (keyed by person and round), not to the
    earliest rows; the same seed gives the same lottery."""
    env = RecourseEnv(
        "school_assignment", rounds=2, **SMALL, **{**PILE, "decision__ties": "random"}
    )
    env.reset(seed=2)
    c = env.state.cohort
    _step(env)
    r = env.state.last_record
    cut = tie_key(r.score[r.favourable].min())
    tied = tie_key(r.score) == cut
    assert tied.sum() > 20 and r.favourable[tied].any() and not r.favourable[tied].all()
    lottery = keyed_uniforms(env.state.keys["ties"], c.person, np.full(len(c.person), 1))
    won = r.favourable & tied
    assert lottery[won].max() < lottery[tied & ~r.favourable].min()
    rows = np.flatnonzero(tied)
    assert not (won[rows] == (np.arange(len(rows)) < won.sum())).all()  # not the first rows
    again = RecourseEnv(
        "school_assignment", rounds=2, **SMALL, **{**PILE, "decision__ties": "random"}
    )
    again.reset(seed=2)
    _step(again)
    np.testing.assert_array_equal(again.state.last_record.favourable, r.favourable)


# -- seekers_at_cutoff and the warning -------------------------------------------------------


def test_seekers_at_cutoff_is_the_share_of_seekers_on_the_final_cut_off(tmp_path):
    """Recomputed from people.csv: per round, the seekers whose score is within 1e-9 of
    the lowest score given a place; the pile of margin 0 is warned of at the end."""
    out = tmp_path / "run"
    argv = ["run", "school_assignment", "--rounds", "3", "--seed", "0", "--out", str(out), "-q"]
    for key in ("world.cohort_size=300", "world.history_size=1000"):
        argv += ["--set", key]
    argv += ["--set", "populations.students.margin=0", "--set", "decision.ties=arrival"]
    argv += ["--set", "features.types.extracurriculars=continuous"]  # (see PILE)
    with pytest.warns(UserWarning, match=r"in 3 of 3 rounds most seekers .* of \d+ in round"):
        assert main(argv) == 0
    metrics, people = read_metrics(out), read_people(out)
    for (r, group), rows in metrics.set_index(["round", "group"]).iterrows():
        seen = people[people["round"] == r]
        if group not in ("all", "query"):
            seen_group = seen[seen["group"] == group]
        else:
            seen_group = seen if group == "all" else None
        if seen_group is None:
            continue
        cut = seen.loc[seen["favourable"], "score"].min()
        seekers = seen_group[seen_group["tried"]]
        share = (np.abs(seekers["score"] - cut) <= TIE_RESOLUTION).mean()
        assert rows["seekers_at_cutoff"] == pytest.approx(share, abs=1e-9), (r, group)
    everyone = metrics[metrics["group"] == "all"]
    assert (everyone["seekers_at_cutoff"] > 0.5).all()


def test_seekers_at_cutoff_is_empty_without_seekers_and_under_argmax():
    env = RecourseEnv(
        "school_assignment", rounds=1, populations__students__participation=0.0, **SMALL
    )
    env.reset(seed=0)
    assert all(row["seekers_at_cutoff"] is None for row in _step(env))
    env = RecourseEnv("oar_iris", rounds=1)
    env.reset(seed=0)
    assert all(row["seekers_at_cutoff"] is None for row in _step(env))


@pytest.mark.slow
def test_the_readme_job_has_no_pile_with_the_defaults(tmp_path):
    """`recourse-sim run school_assignment --rounds 20 --seed 0` as bundled: fewer than
    half of the seekers end on the cut-off in every round, nothing is warned of, and
    recourse succeeds for a share of the seekers that the README states (19-24 %)."""
    out = tmp_path / "school"
    argv = ["run", "school_assignment", "--rounds", "20", "--seed", "0", "--out", str(out)]
    assert main([*argv, "-q"]) == 0  # (warnings are errors in the tests: none)
    metrics = read_metrics(out)
    everyone = metrics[metrics["group"] == "all"]
    assert len(everyone) == 20
    assert (everyone["seekers_at_cutoff"] < 0.5).all()
    success = everyone["recourse_success_rate"]
    assert 0.18 < success.min() and success.max() < 0.25


@pytest.mark.slow
@pytest.mark.parametrize(("name", "cut"), [("school_assignment", True), ("oar_iris", False)])
def test_a_margin_per_row_is_each_rows_number(name, cut):
    """`Individual.act` with one margin per person gives each person the recourse of
    their margin as a number (a capacity cut-off, and the argmax of three classes)."""
    env = RecourseEnv(name, rounds=1, **(SMALL if cut else {}))
    env.reset(seed=0)
    c = env.state.cohort
    proba, favourable = env.honest_decisions(c)
    target = env.needed(c.group, env.capacity_cut(proba, favourable))
    s = next(s for s in env.strategies if s.stage == "decision")
    s.spec = s.spec.model_copy(update={"participation": 1.0, "margin": 0.0})
    seekers = ~favourable
    margins = np.where(np.arange(len(c.group)) % 2 == 0, 0.02, 0.1)
    together = s.act(
        env.learner,
        c.report,
        seekers,
        env.favourable,
        np.random.default_rng(0),
        target=target,
        margin=margins,
    )
    assert together.tried.sum() > 10
    for m in (0.02, 0.1):
        alone = s.act(
            env.learner,
            c.report,
            seekers,
            env.favourable,
            np.random.default_rng(0),
            target=target,
            margin=m,
        )
        rows = together.tried & (margins == m)
        np.testing.assert_allclose(together.delta[rows], alone.delta[rows], atol=1e-12)
