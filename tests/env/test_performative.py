"""Performative prediction: best-responding populations, a population from a file, the
field's update rules (RRM, RGD) and metrics (theta_step, performative_risk, losses)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize

from recourse_sim import load_scenario, simulate
from recourse_sim.agents import BestResponse
from recourse_sim.cli import main
from recourse_sim.env import RecourseEnv
from recourse_sim.errors import ConfigError
from recourse_sim.learners.logistic import LogisticRegression
from recourse_sim.recourse import ActionSet
from recourse_sim.scenarios import BestResponsePopulation

SCENARIO = "performative_credit"
STRATEGIC = ["duration", "credit_amount", "number_of_existing_credits"]


def _credit() -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    path = load_scenario(SCENARIO).world.path
    df = pd.read_csv(path)
    y = df.pop("good_credit").to_numpy()
    return df, df.to_numpy(), y


def _all_rows(metrics: pd.DataFrame) -> pd.DataFrame:
    return metrics[metrics.group == "all"].reset_index(drop=True)


# -- RRM on the bundled scenario: the exact algebra -------------------------------------------


@pytest.mark.parametrize("epsilon", [0.01, 1.0, 100.0, 1000.0])
def test_rrm_moves_only_the_bias_by_eps_theta_s_squared_then_stays(epsilon):
    """Unpenalised intercept, no standardisation, a uniform linear shift: the refit on
    x + ε θ_S is θ with the bias lowered by ε ‖θ_S‖² (substitute b' = b + ε ‖θ_S‖²), and
    that θ induces the same shift again: the fixed point after one round."""
    env = RecourseEnv(SCENARIO, populations__applicants__epsilon=epsilon)
    env.reset(seed=0)
    names = env.world.features.names
    S = [names.index(f) for f in STRATEGIC]
    p0 = env.learner.params
    shift = epsilon * float(np.sum(p0["coef"][0, S] ** 2))
    _, _, _, _, info1 = env.step(None)
    p1 = env.learner.params
    _, _, _, _, info2 = env.step(None)
    p2 = env.learner.params
    assert np.abs(p1["coef"] - p0["coef"]).max() <= 1e-9
    assert abs((p0["intercept"][0] - p1["intercept"][0]) - shift) <= 1e-9 * max(shift, 1.0)
    assert np.abs(p2["coef"] - p1["coef"]).max() <= 1e-9
    assert abs(p2["intercept"][0] - p1["intercept"][0]) <= 1e-9 * max(shift, 1.0)
    assert info1["metrics"][-1]["theta_step"] == pytest.approx(shift, rel=1e-6)
    assert info2["metrics"][-1]["theta_step"] <= 1e-8


@pytest.mark.slow  # 25 rounds through the CLI: ~3 s each on a loaded machine
@pytest.mark.parametrize("epsilon", [0.01, 1.0, 100.0, 1000.0])
def test_bundled_scenario_theta_step_is_at_the_fixed_point_after_round_one(epsilon, tmp_path):
    """The acceptance run: the YAML scenario alone, through the CLI, 25 rounds."""
    out = tmp_path / "run"
    status = main(
        [
            "run",
            SCENARIO,
            "--out",
            str(out),
            "-q",
            "--set",
            f"populations.applicants.epsilon={epsilon}",
        ]
    )
    assert status == 0
    rows = _all_rows(pd.read_csv(out / "metrics.csv"))
    assert len(rows) == 25
    _, X, y = _credit()
    theta = LogisticRegression(C=1.0).fit(X, y).params["coef"][0]
    names = list(_credit()[0].columns)
    S = [names.index(f) for f in STRATEGIC]
    want = epsilon * float(np.sum(theta[S] ** 2))
    assert rows.theta_step[0] == pytest.approx(want, rel=1e-6)
    assert (rows.theta_step[1:] <= 1e-8).all()


def test_refit_on_a_file_population_is_rrm():
    """With ``population: file`` every row seen is a person's latest report, so
    ``update_rule: refit`` is the refit on the last round: the same models, bit for bit,
    as ``window: 1``. A longer window trains on a growing mixture of responses to
    different models, and its θ keeps moving after round 1."""
    refit = _all_rows(simulate(load_scenario(SCENARIO), rounds=4, seed=0))
    one = load_scenario(SCENARIO, ["learner.update_rule=window", "learner.window=1"])
    pd.testing.assert_frame_equal(refit, _all_rows(simulate(one, rounds=4, seed=0)))
    many = load_scenario(SCENARIO, ["learner.update_rule=window", "learner.window=25"])
    steps = _all_rows(simulate(many, rounds=4, seed=0)).theta_step.to_numpy()
    assert (steps[1:] > 1e-4).all()


# -- RGD ------------------------------------------------------------------------------------


def test_rgd_theta_step_decays_geometrically_for_small_epsilon():
    """One gradient step a round (``sgd``, epochs 1, lr 0.5): a contraction for small ε,
    so every step is a fixed fraction (< 0.95) of the previous one."""
    sc = load_scenario(
        SCENARIO,
        [
            "populations.applicants.epsilon=0.01",
            "learner.update_rule=sgd",
            "learner.params={C: 1.0, epochs: 1, lr: 0.5}",
        ],
    )
    steps = _all_rows(simulate(sc, seed=0)).theta_step.to_numpy()
    ratios = steps[1:] / steps[:-1]
    assert (steps > 0).all()
    assert (ratios < 0.95).all(), ratios
    assert steps[-1] < 0.2 * steps[0]


# -- the best response itself ------------------------------------------------------------------


def _fitted(seed=0, d=4):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((200, d))
    y = (X @ rng.standard_normal(d) + 0.3 * rng.standard_normal(200) > 0).astype(int)
    return LogisticRegression(C=1.0).fit(X, y), X


def _spec(epsilon, memory=False):
    return BestResponsePopulation(strategy="best_response", epsilon=epsilon, memory=memory)


@pytest.mark.parametrize(
    ("p", "weights", "bounds"),
    [
        (2, [1.0, 1.0, 1.0, 1.0], False),
        (2, [0.5, 2.0, 1.0, 3.0], False),
        (2, [0.5, 2.0, 1.0, 3.0], True),
        (1, [0.5, 2.0, 1.0, 3.0], False),
        (np.inf, [0.5, 2.0, 1.0, 3.0], False),
    ],
)
def test_best_response_maximises_log_odds_minus_cost(p, weights, bounds):
    """Against a numerical maximiser of u(δ) = m(x + δ) − ‖w ⊙ δ‖²_p / (2ε) over the
    box (feature 3 immutable, feature 1 increase-only, bounds on feature 0)."""
    learner, X = _fitted()
    eps = 0.7
    kw = {"lower": [-0.2, -np.inf, -np.inf, -np.inf], "upper": [0.3, np.inf, np.inf, np.inf]}
    aset = ActionSet(
        n_features=4,
        immutable=[3],
        increase_only=[1],
        cost_weights=weights,
        p=p,
        epsilon=eps,
        **(kw if bounds else {}),
    )
    s = BestResponse("pop", _spec(eps), aset)
    rows = X[:5]
    delta = s.act(learner, rows, np.ones(5, bool), 1)
    w = np.asarray(weights)
    coef = learner.params["coef"][0]
    for x, got in zip(rows, delta, strict=True):
        lo, hi = aset.box(x[None])

        def neg_u(d):
            return -(coef @ d - np.linalg.norm(w * d, ord=p) ** 2 / (2 * eps))

        # the non-smooth norms: a smooth start from the closed form, then Powell
        best = minimize(
            neg_u,
            np.zeros(4),
            method="Powell",
            bounds=list(zip(lo[0], hi[0], strict=True)),
            options={"xtol": 1e-10, "ftol": 1e-14, "maxiter": 20000},
        )
        assert -neg_u(got) >= -best.fun - 1e-7
        assert np.all(got >= lo[0] - 1e-12) and np.all(got <= hi[0] + 1e-12)
        assert got[3] == 0.0 and got[1] >= 0.0


def test_best_response_is_x_plus_eps_theta_s_towards_the_favourable_class():
    """Unit weights, p = 2, no bounds: x_S + ε θ_S with θ the log-odds of the favourable
    class (Perdomo et al.'s x_S − ε θ_S, their θ the log-odds of default); with class 0
    favourable the population moves along −θ."""
    learner, X = _fitted()
    coef = learner.params["coef"][0]
    aset = ActionSet(n_features=4, immutable=[2], epsilon=1.0)
    s = BestResponse("pop", _spec(2.5), aset)
    members = np.array([True, False, True])
    up = s.act(learner, X[:3], members, goal=1)
    down = s.act(learner, X[:3], members, goal=0)
    want = 2.5 * np.where(np.arange(4) == 2, 0.0, coef)
    np.testing.assert_allclose(up[members], np.tile(want, (2, 1)), rtol=1e-12)
    np.testing.assert_allclose(down[members], -np.tile(want, (2, 1)), rtol=1e-12)
    assert (up[~members] == 0).all()


def test_memory_true_accumulates_memory_false_does_not():
    """memory: false responds from one's own features every round; true from last
    round's report, so reports drift by ε θ_S(θ_t) each round."""
    reports = {}
    for memory in (False, True):
        env = RecourseEnv(SCENARIO, populations__applicants__memory=memory)
        env.reset(seed=0)
        seen = []
        for _ in range(3):
            env.step(None)
            people = env.people(features=True)
            seen.append(np.stack([people[f"reported_{f}"] for f in STRATEGIC], 1))
        reports[memory] = seen
    df, _, _ = _credit()
    own = df[STRATEGIC].to_numpy()
    first = reports[False][0] - own
    np.testing.assert_allclose(reports[False][2] - own, first, atol=1e-9)
    np.testing.assert_allclose(reports[True][0], reports[False][0], atol=1e-12)
    # every row moved by the same vector ε θ_S, once more per round
    np.testing.assert_allclose(reports[True][2] - own, 3 * first, rtol=1e-6, atol=1e-9)


# -- the population from a file -------------------------------------------------------------------


def test_population_file_is_every_row_every_round_without_resampling():
    env = RecourseEnv(SCENARIO, rounds=3)
    env.reset(seed=5)
    _, X, y = _credit()
    # the first model is fit on the file itself
    np.testing.assert_allclose(
        env.learner.param_vector(), LogisticRegression(C=1.0).fit(X, y).param_vector(), atol=1e-9
    )
    for r in range(3):
        _, _, _, _, info = env.step(None)
        people = env.people(features=True)
        np.testing.assert_array_equal(people["person"], np.arange(len(y)))
        np.testing.assert_array_equal(people["true_favourable"], y == 1)
        np.testing.assert_allclose(people["feature_age"], X[:, 4])
        everyone = info["metrics"][-1]
        assert everyone["n"] == len(y) and everyone["leavers"] == 0
        assert everyone["newcomers"] == (len(y) if r == 0 else 0)


def test_population_file_seeds_do_not_change_the_people():
    a = _all_rows(simulate(load_scenario(SCENARIO), rounds=2, seed=0))
    b = _all_rows(simulate(load_scenario(SCENARIO), rounds=2, seed=1))
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.slow  # loads the analysis script (matplotlib, scipy)
def test_committed_credit_file_is_the_bundled_german_credit_standardised(analysis_script):
    module = analysis_script("performative")
    df, _, y = _credit()
    want = module.credit_table()
    np.testing.assert_allclose(
        df.to_numpy(), want.drop(columns="good_credit").to_numpy(), atol=5e-5
    )
    np.testing.assert_array_equal(y, want.good_credit.to_numpy())


# -- metrics and API -----------------------------------------------------------------------------


def test_losses_and_performative_risk_against_their_definitions():
    env = RecourseEnv(SCENARIO)
    env.reset(seed=0)
    before = LogisticRegression(C=1.0)
    before.fit(*_credit()[1:])
    _, _, _, _, info = env.step(None)
    people = env.people(features=True)
    names = env.world.features.names
    R = np.stack([people[f"reported_{f}"] for f in names], 1)
    y = people["true_favourable"].astype(int)

    def ce(model):
        p = model.predict_proba(R)[np.arange(len(y)), y]
        return float(-np.log(p).mean())

    everyone = info["metrics"][-1]
    assert everyone["performative_risk"] == pytest.approx(ce(before), rel=1e-9)
    assert everyone["loss_before_refit"] == pytest.approx(ce(before), rel=1e-9)
    assert everyone["loss_after_refit"] == pytest.approx(ce(env.learner), rel=1e-9)
    assert everyone["loss_after_refit"] < everyone["loss_before_refit"]


def test_theta_step_is_zero_for_a_frozen_model():
    sc = load_scenario(SCENARIO, ["learner.update_rule=frozen"])
    assert (_all_rows(simulate(sc, rounds=2, seed=0)).theta_step == 0).all()


def test_params_is_a_documented_copy_of_the_parameters():
    learner, _ = _fitted()
    p = learner.params
    assert list(p) == ["coef", "intercept"]
    np.testing.assert_array_equal(p["coef"], learner.coef_)
    np.testing.assert_array_equal(p["intercept"], learner.intercept_)
    np.testing.assert_array_equal(
        np.concatenate([v.ravel() for v in p.values()]), learner.param_vector()
    )
    p["coef"][:] = 0
    assert np.abs(learner.coef_).sum() > 0


def test_step_none_on_passive_scenarios_only():
    env = RecourseEnv(SCENARIO, rounds=2)
    env.reset(seed=0)
    env.step(None)
    env.step(np.zeros(env.action_space.shape, np.float32))  # an action is still accepted
    controlled = RecourseEnv("school_assignment_controlled", rounds=1)
    controlled.reset(seed=0)
    with pytest.raises(ConfigError, match="dtype"):
        controlled.step(None)


def test_validate_notes_bounds_in_force(capsys):
    assert main(["validate", SCENARIO]) == 0
    assert "note:" not in capsys.readouterr().out
    assert main(["validate", SCENARIO, "--set", "features.upper={duration: 2.0}"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "note:" in line]
    assert len(notes) == 1 and "populations.applicants" in notes[0] and "duration" in notes[0]


def test_bounds_clip_the_response_only_where_the_scenario_sets_them():
    env = RecourseEnv(SCENARIO, populations__applicants__epsilon=100.0)
    (s,) = env.strategies
    assert np.isinf(s.action_set.lower_).all() and np.isinf(s.action_set.upper_).all()
    env = RecourseEnv(SCENARIO, features__upper={"duration": 2.0})
    (s,) = env.strategies
    j = env.world.features.names.index("duration")
    assert s.action_set.upper_[j] == 2.0 and np.isinf(np.delete(s.action_set.upper_, j)).all()


@pytest.mark.slow  # loads the analysis script (matplotlib, scipy)
def test_analysis_tells_how_a_run_ends(analysis_script):
    ending = analysis_script("performative").ending
    steps = np.linspace(1.0, 0.1, 25)
    assert ending(np.full(25, 0.3), steps) == "fixed point"
    assert ending(np.tile([0.0, 0.43], 13)[:25], steps) == "cycle of period 2"
    assert ending(np.cumsum(steps), steps) == "converging"
    assert ending(np.cumsum(steps[::-1]), steps[::-1]) == "diverging"


def test_resume_continues_a_best_responding_file_population_exactly(tmp_path):
    """A checkpoint after round 2 continues to round 4 as an uninterrupted run."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    sets = ["--set", "populations.applicants.memory=true", "-q"]
    assert main(["run", SCENARIO, "--rounds", "4", "--out", str(whole), *sets]) == 0
    assert main(["run", SCENARIO, "--rounds", "2", "--out", str(part), *sets]) == 0
    assert main(["run", SCENARIO, "--rounds", "4", "--out", str(part), "--resume", *sets]) == 0
    pd.testing.assert_frame_equal(
        pd.read_csv(whole / "metrics.csv"), pd.read_csv(part / "metrics.csv")
    )
