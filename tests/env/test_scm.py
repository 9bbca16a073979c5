"""Causal (scm) worlds: the structural causal model, the recourse types and the
validity of recourse over time."""

from __future__ import annotations

import numpy as np
import pytest

from recourse_sim import load_scenario, simulate
from recourse_sim.env.recourse_env import RecourseEnv
from recourse_sim.env.scm import Mechanism, Noise, StructuralCausalModel
from recourse_sim.env.worlds import Scm
from recourse_sim.recourse import ActionSet
from recourse_sim.recourse.causal import action_grid, causal_recourse
from recourse_sim.scenarios import ScmWorld


def _linear_model(B: np.ndarray, c: np.ndarray, scale: np.ndarray) -> StructuralCausalModel:
    """x = B x + c + u, u ~ N(0, diag(scale²)); B strictly lower triangular."""
    k = len(c)
    mechanisms = []
    for j in range(k):
        parents = tuple(int(p) for p in np.flatnonzero(B[j]))
        mechanisms.append(
            Mechanism(
                parents=parents,
                coef=B[j, list(parents)],
                intercept=float(c[j]),
                combine="sum",
                link="identity",
                noise_enters="add",
                noise=Noise("normal", float(scale[j])),
            )
        )
    return StructuralCausalModel(tuple(f"v{j}" for j in range(k)), tuple(mechanisms))


def test_linear_interventions_match_the_closed_form():
    rng = np.random.default_rng(3)
    k, n = 5, 200
    B = np.tril(rng.normal(size=(k, k)), -1) * (rng.random((k, k)) < 0.7)
    c, scale = rng.normal(size=k), rng.uniform(0.5, 2.0, k)
    scm = _linear_model(B, c, scale)
    values, noise = scm.sample(n, rng)
    # observational: x = (I - B)^-1 (c + u)
    closed = np.linalg.solve(np.eye(k) - B, (c + noise).T).T
    np.testing.assert_allclose(values, closed, atol=1e-10)
    # do(x_j = v) per person: row j of B and of c + u replaced by v
    fixed = rng.random((n, k)) < 0.3
    target = rng.normal(size=(n, k)) * 3
    out = scm.intervene(noise, fixed, target)
    for i in range(n):
        Bi, bi = B.copy(), c + noise[i]
        Bi[fixed[i]] = 0.0
        bi[fixed[i]] = target[i, fixed[i]]
        np.testing.assert_allclose(out[i], np.linalg.solve(np.eye(k) - Bi, bi), atol=1e-10)
    # a counterfactual from the observed values alone: abduction recovers the noise
    np.testing.assert_allclose(scm.abduct(values), noise, atol=1e-10)
    np.testing.assert_allclose(scm.counterfactual(values, fixed, target), out, atol=1e-10)


@pytest.mark.parametrize(
    "link,enters",
    [("cube", "inside"), ("square", "multiply"), ("tanh", "add"), ("sigmoid", "inside")],
)
def test_nonlinear_mechanisms_abduct_exactly(link, enters):
    rng = np.random.default_rng(0)
    noise_spec = Noise("uniform", 0.4, mean=1.0 if enters == "multiply" else 0.0)
    root = Mechanism((), np.zeros(0), 0.0, "sum", "identity", "add", Noise("normal", 1.0))
    child = Mechanism((0,), np.array([0.7]), 0.2, "sum", link, enters, noise_spec)
    scm = StructuralCausalModel(("a", "b"), (root, child))
    values, noise = scm.sample(500, rng)
    np.testing.assert_allclose(scm.abduct(values), noise, atol=1e-8)
    # an intervention on the root moves the child through its equation, noise kept
    fixed = np.zeros((500, 2), bool)
    fixed[:, 0] = True
    moved = scm.intervene(noise, fixed, np.full((500, 2), 1.5))
    np.testing.assert_allclose(moved[:, 1], child.evaluate(moved, noise[:, 1]))
    assert scm.descendants(0).tolist() == [False, True]


def _ladd_world() -> Scm:
    binomial = {"dist": "binomial"}
    return Scm(
        ScmWorld(
            kind="scm",
            nodes={
                "x1": {"noise": {**binomial, "trials": 8}, "integer": True},
                "y": {"parents": ["x1"], "coef": [1.0], "noise": {**binomial, "trials": 2}},
                "x2": {
                    "parents": ["y", "x1"],
                    "coef": [1.0, 1.0],
                    "noise": {**binomial, "trials": 2},
                    "integer": True,
                },
            },
        )
    )


def test_ce_on_a_non_cause_leaves_the_outcome_and_icr_changes_it():
    world = _ladd_world()
    people = world.newcomers(300, np.random.default_rng(1))
    seekers = people.y0 == 0
    grid = action_grid(np.ones(2), np.ones(2, bool), 12)

    def everyone_favoured(F, rows):
        return F[:, 1] >= 2  # a model that reads only x2, the label's effect

    only_x2 = ActionSet(n_features=2, immutable=[0], epsilon=100.0)
    ce = causal_recourse(
        "ce", world, people.X, people.noise, seekers, only_x2, everyone_favoured, grid
    )
    assert ce.found[seekers].all() and (ce.delta[:, 0] == 0).all()
    after = people.X + ce.delta
    moved = ce.delta.any(1)
    assert moved.any()
    np.testing.assert_array_equal(world.outcome(people, after, moved), people.y0)

    both = ActionSet(n_features=2, epsilon=100.0)
    icr = causal_recourse(
        "icr", world, people.X, people.noise, seekers, both, everyone_favoured, grid
    )
    assert icr.found[seekers].all()
    y_after = world.outcome(people, people.X + icr.delta, icr.found)
    assert (y_after[seekers] == 1).all()
    # cr's intervention on x1 moves x2 through y: the change is the propagated one
    assert (icr.acted[seekers, 0]).all() and not icr.acted[seekers, 1].any()
    values = world.values_of(people.X + icr.delta, people.noise)
    expected_x2 = values[:, 1] + values[:, 0] + people.noise[:, 2]
    np.testing.assert_allclose(values[seekers, 2], expected_x2[seekers])


def _scenario(kind: str, rounds: int = 3):
    return load_scenario(
        "performative_linear_additive",
        [
            f"populations.applicants.recourse={kind}",
            "world.cohort_size=300",
            "world.history_size=500",
            f"rounds={rounds}",
        ],
    )


def test_each_person_keeps_their_noise_across_rounds():
    env = RecourseEnv(_scenario("cr"))
    env.reset(seed=4)
    first = env.state.pool.people
    label = env.world.label
    noise0 = dict(zip(first.person.tolist(), first.noise.tolist(), strict=True))
    for _ in range(2):
        env.step(env.action_space.sample() * 0)
        people = env.state.pool.people
        for person, row in zip(people.person.tolist(), people.noise.tolist(), strict=True):
            assert row[label] == noise0[person][label]  # the label's noise never changes
        # the kept noise explains the person's true features after their interventions
        values = env.world.scm.intervene(people.noise)
        np.testing.assert_allclose(values[:, env.world.feature_nodes], people.X, atol=1e-9)
    assert env.state.pool.people.X.shape[0] == len(noise0)


def test_validity_in_people_csv_matches_the_metrics():
    metrics, people = simulate(_scenario("ce"), seed=2, people=True)
    assert {"recourse_valid_at_reapply", "improved"} <= set(people.columns)
    for rnd, rows in people.groupby("round"):
        row = metrics[(metrics["round"] == rnd) & (metrics["group"] == "all")].iloc[0]
        valid = rows["recourse_valid_at_reapply"].dropna()
        if len(valid):
            assert row["recourse_valid_at_reapply"] == pytest.approx(valid.astype(float).mean())
        else:
            assert np.isnan(row["recourse_valid_at_reapply"])
        improved = rows["improved"].dropna()
        assert len(improved) == rows["tried"].sum()
        if len(improved):
            assert row["improved_rate"] == pytest.approx(improved.astype(float).mean())
    # round 1: nobody re-applies yet (empty, not 0); round 3: T = 2 rounds after round 1
    first = metrics[(metrics["round"] == 1) & (metrics["group"] == "all")].iloc[0]
    assert np.isnan(first["recourse_valid_at_reapply"])
    assert np.isnan(first["recourse_valid_after_T"])
    third = metrics[(metrics["round"] == 3) & (metrics["group"] == "all")].iloc[0]
    assert 0.0 <= third["recourse_valid_after_T"] <= 1.0


def test_same_seed_same_numbers():
    a = simulate(_scenario("icr", rounds=2), seed=5)
    b = simulate(_scenario("icr", rounds=2), seed=5)
    assert a.equals(b)


def test_resume_keeps_the_noise_and_the_past_holders(tmp_path):
    """People's noise and the holders of the last T rounds travel in the checkpoint: a
    resumed run writes the same bytes as an uninterrupted one."""
    scenario = _scenario("cr", rounds=4)
    simulate(scenario, rounds=4, seed=1, out=tmp_path / "full")
    simulate(scenario, rounds=2, seed=1, out=tmp_path / "part")
    simulate(scenario, rounds=4, seed=1, out=tmp_path / "part", resume=True)
    for name in ("metrics.csv", "people.csv"):
        assert (tmp_path / "part" / name).read_bytes() == (tmp_path / "full" / name).read_bytes()


@pytest.mark.parametrize("kind", ["ce", "cr", "icr"])
def test_the_search_finds_the_cheapest_action_by_hand(kind):
    """Against a loop over people and actions with LAdd's equations written out."""
    world = _ladd_world()
    people = world.newcomers(60, np.random.default_rng(7))
    seekers = people.y0 == 0
    weights = np.array([1.0, 0.3])
    aset = ActionSet(n_features=2, cost_weights=weights, epsilon=4.0, increase_only=[0])
    grid = action_grid(np.ones(2), np.ones(2, bool), 4)

    def model(F, rows):
        return 0.8 * F[:, 0] + 0.4 * F[:, 1] >= 1.0

    got = causal_recourse(kind, world, people.X, people.noise, seekers, aset, model, grid)
    u_y, u_2 = people.noise[:, 1], people.noise[:, 2]
    for i in np.flatnonzero(seekers):
        best, best_cost = None, np.inf
        for d1 in range(-4, 5):
            for d2 in range(-4, 5):
                if d1 < 0 or np.hypot(weights[0] * d1, weights[1] * d2) > 4.0:
                    continue
                x1 = people.X[i, 0] + d1
                y = x1 + u_y[i]
                if kind == "ce" or d2 != 0:
                    x2 = people.X[i, 1] + d2
                else:  # cr, icr: x2 follows y and x1 with the person's noise
                    x2 = y + x1 + u_2[i]
                goal = y >= world.threshold if kind == "icr" else 0.8 * x1 + 0.4 * x2 >= 1.0
                cost = np.hypot(weights[0] * d1, weights[1] * d2)
                if goal and cost < best_cost - 1e-12:
                    best, best_cost = (x1, x2), cost
        if best is None:
            assert not got.found[i]
        else:
            assert got.found[i]
            assert got.cost[i] == pytest.approx(best_cost)
            np.testing.assert_allclose(people.X[i] + got.delta[i], best)
