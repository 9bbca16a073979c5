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


def test_direct_changes_set_keeps_descendants_intervene_moves_them():
    """A change of x1 made directly (ce): under ``set`` x2 keeps its value; under
    ``intervene`` x2 follows y and x1 with the person's noise (do(x1 = x1'))."""
    from recourse_sim.env.worlds import follow_direct_changes

    base = _ladd_world()
    spec = base.spec.model_copy(update={"direct_changes": "intervene"})
    world = Scm(spec)
    people = world.newcomers(50, np.random.default_rng(3))
    X_set = people.X.copy()
    X_set[::2, 0] += 2.0  # every other person raises x1 directly
    report = X_set + 0.5  # reports that differ from the true features by a fixed amount
    same, same_report = follow_direct_changes(base, people, people.X, X_set, report)
    assert same is X_set and same_report is report
    after, moved_report = follow_direct_changes(world, people, people.X, X_set, report)
    y = after[:, 0] + people.noise[:, 1]
    np.testing.assert_allclose(after[:, 0], X_set[:, 0])
    np.testing.assert_allclose(after[::2, 1], (y + after[:, 0] + people.noise[:, 2])[::2])
    np.testing.assert_array_equal(after[1::2], people.X[1::2])  # unchanged people stay
    np.testing.assert_allclose(moved_report - report, after - X_set)


@pytest.mark.parametrize("kind", [None, "ce"])
def test_direct_changes_intervene_in_a_run(kind):
    """ce, and individual recourse without a causal type, change x1 (x2 not actionable):
    under ``intervene`` every mover's x2 follows; ``set`` (the default) leaves x2 as is."""
    overrides = [
        "world.cohort_size=200",
        "world.history_size=400",
        "rounds=1",
        "populations.applicants.actionable=[x1]",
    ]
    overrides += (
        [f"populations.applicants.recourse={kind}"]
        if kind
        else ["populations.applicants.recourse=null", "populations.applicants.method=linear"]
    )
    runs = {}
    for mode in ("set", "intervene"):
        env = RecourseEnv(
            load_scenario(
                "performative_linear_additive", [*overrides, f"world.direct_changes={mode}"]
            )
        )
        env.reset(seed=0)
        before = env.state.pool.people
        env.step(np.zeros(env.action_space.shape, env.action_space.dtype))
        after = env.state.pool.people
        at = np.searchsorted(after.person, before.person)
        moved = after.X[at, 0] != before.X[:, 0]
        assert moved.any()
        runs[mode] = (before, after, at, moved)
    before, after, at, moved = runs["set"]
    np.testing.assert_array_equal(after.X[at, 1], before.X[:, 1])
    before, after, at, moved = runs["intervene"]
    x1, noise = after.X[at, 0], before.noise
    x2 = (x1 + noise[:, 1]) + x1 + noise[:, 2]
    np.testing.assert_allclose(after.X[at][moved, 1], x2[moved])
    np.testing.assert_array_equal(after.X[at][~moved, 1], before.X[~moved, 1])


def _random_world(seed: int, link: str) -> Scm:
    """Four features and a label: x1, x2 roots, x3 <- x1, x2; y <- x1, x3; x4 <- y, x2."""
    rng = np.random.default_rng(seed)
    coef = lambda k: [float(c) for c in rng.normal(0, 1, k)]  # noqa: E731
    return Scm(
        ScmWorld(
            kind="scm",
            nodes={
                "x1": {"noise": {"dist": "binomial", "trials": 6}, "integer": True},
                "x2": {"noise": {"scale": 1.0}},
                "x3": {"parents": ["x1", "x2"], "coef": coef(2), "link": link},
                "y": {"parents": ["x1", "x3"], "coef": coef(2), "noise": {"scale": 0.5}},
                "x4": {"parents": ["y", "x2"], "coef": coef(2)},
            },
        )
    )


@pytest.mark.parametrize("kind", ["ce", "cr", "icr"])
@pytest.mark.parametrize(
    ("seed", "link", "p", "epsilon"),
    [
        (0, "identity", 2, 3.0),
        (1, "tanh", 1, 2.0),
        (2, "identity", np.inf, 100.0),
        (3, "square", 2, 1.5),
    ],
)
def test_the_ordered_search_equals_the_enumeration(kind, seed, link, p, epsilon):
    """Cheapest first, stopping at each seeker's first hit: the same action (ties to
    the first in grid order), cost and change as trying every action."""
    from recourse_sim.recourse.causal import enumerate_search, ordered_search

    world = _random_world(seed, link)
    people = world.newcomers(80, np.random.default_rng(seed + 10))
    rng = np.random.default_rng(seed)
    aset = ActionSet(
        n_features=4,
        cost_weights=rng.uniform(0.5, 2.0, 4),
        p=p,
        epsilon=epsilon,
        increase_only=[0],
        upper=[np.inf, 1.0, np.inf, np.inf],
    )
    grid = action_grid(np.array([1.0, 0.25, 0.5, 0.5]), np.ones(4, bool), 3)
    w = rng.normal(0, 1, 4)

    def model(F, rows):
        return F @ w >= 0.5

    seekers = rng.random(80) < 0.7
    args = (kind, world, people.X, people.noise, seekers, aset, model, grid)
    fast, slow = ordered_search(*args), enumerate_search(*args)
    assert slow.found.any()
    np.testing.assert_array_equal(fast.found, slow.found)
    np.testing.assert_array_equal(fast.acted, slow.acted)
    np.testing.assert_array_equal(fast.cost, slow.cost)
    np.testing.assert_array_equal(fast.delta, slow.delta)


FOUR_FEATURES = """
name: four_causes
world:
  kind: scm
  label: y
  cohort_size: 200
  history_size: 400
  nodes:
    income: {noise: {dist: normal, scale: 1.0}}
    savings: {parents: [income], coef: [0.5], noise: {scale: 0.5}}
    education: {noise: {dist: binomial, trials: 6}, integer: true}
    debt: {parents: [income], coef: [-0.3], noise: {scale: 0.7}}
    y: {parents: [income, savings, education, debt], coef: [1.0, 1.0, 0.5, -1.0]}
learner: {type: logistic_regression, update_rule: refit}
populations:
  applicants: {strategy: individual, recourse: cr, epsilon: 1000.0}
"""


def test_validate_prints_the_action_count_and_warns_above_the_documented_size(tmp_path, capsys):
    from recourse_sim.cli import main
    from recourse_sim.recourse.causal import LARGE_GRID

    path = tmp_path / "four.yaml"
    path.write_text(FOUR_FEATURES)
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "causal search: populations.applicants (cr): 83,521 candidate actions per person" in out
    assert "s CPU" in out and 17**4 > LARGE_GRID
    assert "warning: populations.applicants.search_steps: 83,521 candidate actions" in out
    assert main(["validate", str(path), "--set", "populations.applicants.search_steps=2"]) == 0
    out = capsys.readouterr().out
    assert "625 candidate actions per person" in out and "search_steps: 625" not in out
