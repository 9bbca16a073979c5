"""``optimum_gap`` (the gap to the performative optimum) and ``learner.params.jacobian:
response`` in the environment: the column recomputed independently (the response by
`best_response_delta`, PR in numpy, its minimum by Powell's method), kept across a
resume, and every scenario it cannot be computed for refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize

from recourse_sim import load_scenario, simulate
from recourse_sim.agents.best_response import best_response_delta
from recourse_sim.cli import main
from recourse_sim.env import RecourseEnv
from recourse_sim.errors import ConfigError
from recourse_sim.recourse import ActionSet

SCENARIO = "performative_credit_bounded"
STRATEGIC = ["duration", "credit_amount", "number_of_existing_credits"]
ROWS = 120  # people of the small world the tests run (the file's first rows)


@pytest.fixture(scope="module")
def small_world(tmp_path_factory) -> tuple[str, pd.DataFrame]:
    full = pd.read_csv(load_scenario(SCENARIO).world.path)
    path = tmp_path_factory.mktemp("credit") / "credit.csv"
    full.head(ROWS).to_csv(path, index=False)
    return str(path), full.head(ROWS)


def _risk(theta: np.ndarray, X0: np.ndarray, y: np.ndarray, aset: ActionSet, eps: float):
    """PR(θ) = mean cross-entropy of θ on the reports it induces + ‖W‖² / (2 C n), C = 1."""
    W, b = theta[:-1], theta[-1]
    X = X0 + best_response_delta(aset, X0, W, eps)
    z = X @ W + b
    return float(np.mean(np.logaddexp(0.0, z) - y * z) + W @ W / (2.0 * len(y)))


def _reference_gap(theta, starts, X0, y, aset, eps) -> tuple[float, np.ndarray]:
    """PR(θ) − the lowest PR that Powell's method finds from `starts`, polished by
    Nelder–Mead, and where."""
    args = (X0, y, aset, eps)
    powell = {"xtol": 1e-9, "ftol": 1e-14}
    found = min(
        (minimize(_risk, s, args=args, method="Powell", options=powell) for s in starts),
        key=lambda r: r.fun,
    )
    simplex = {"xatol": 1e-10, "fatol": 1e-15, "maxiter": 40000, "maxfev": 40000}
    polished = minimize(_risk, found.x, args=args, method="Nelder-Mead", options=simplex)
    best = polished if polished.fun < found.fun else found
    return _risk(theta, *args) - best.fun, best.x


@pytest.mark.parametrize("rule", ["refit", "perfgd"])
def test_optimum_gap_equals_an_independent_minimisation(small_world, rule):
    path, table = small_world
    overrides = [f"world.path={path}"]
    if rule == "refit":
        overrides += ["learner.update_rule=refit", "learner.params={C: 1.0}"]
    env = RecourseEnv(load_scenario(SCENARIO, overrides))
    env.reset(seed=0)
    X0 = table.drop(columns="good_credit").to_numpy()
    y = table["good_credit"].to_numpy()
    names = list(table.columns[:-1])
    # the scenario's response, built here from its own words
    aset = ActionSet(
        len(names),
        immutable=[n for n in names if n not in STRATEGIC],
        lower=[-0.3 if n in ("duration", "credit_amount") else -np.inf for n in names],
        feature_names=names,
    )
    eps = 3.0
    last = None
    for _ in range(2):
        theta = env.learner.param_vector()
        _, _, _, _, info = env.step(None)
        everyone = info["metrics"][-1]
        starts = [theta] if last is None else [theta, last]
        gap, last = _reference_gap(theta, starts, X0, y, aset, eps)
        assert everyone["optimum_gap"] == pytest.approx(gap, abs=1e-8)
        # PR(θₜ) is the round's performative_risk plus the L2 term: the same reports
        l2 = theta[:-1] @ theta[:-1] / (2.0 * ROWS)
        assert _risk(theta, X0, y, aset, eps) - l2 == pytest.approx(
            everyone["performative_risk"], abs=1e-12
        )
    assert gap > 1e-5  # (a gap to measure: the floors bind)


def test_optimum_gap_survives_a_resume(small_world):
    scenario = load_scenario(SCENARIO, [f"world.path={small_world[0]}"])
    straight, paused = RecourseEnv(scenario), RecourseEnv(scenario)
    straight.reset(seed=1)
    paused.reset(seed=1)
    gaps = [straight.step(None)[4]["metrics"][-1]["optimum_gap"] for _ in range(4)]
    paused.step(None)
    paused.step(None)
    resumed = RecourseEnv(scenario)
    resumed.reset(seed=1)
    resumed.set_state(paused.get_state())
    assert [resumed.step(None)[4]["metrics"][-1]["optimum_gap"] for _ in range(2)] == gaps[2:]


def test_no_column_unless_asked_for():
    metrics = simulate(load_scenario("performative_credit"), rounds=1, seed=0)
    assert "optimum_gap" not in metrics.columns


@pytest.mark.slow
def test_perfgd_with_the_response_closes_the_gap_rrm_keeps():
    """The bundled scenario: PerfGD with the exact Jacobian descends to the optimum,
    repeated risk minimisation stops at a stable point away from it."""
    perfgd = simulate(load_scenario(SCENARIO), rounds=30, seed=0)
    rrm = simulate(
        load_scenario(SCENARIO, ["learner.update_rule=refit", "learner.params={C: 1.0}"]),
        rounds=30,
        seed=0,
    )
    gap = perfgd[perfgd.group == "all"]["optimum_gap"].to_numpy()
    stable = rrm[rrm.group == "all"]["optimum_gap"].to_numpy()
    assert gap[-1] < 1e-4 < 1e-3 < stable[-1]
    assert abs(stable[-1] - stable[-2]) < 1e-9  # (RRM has stopped)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["learner.update_rule=dfo"], "jacobian: response is an option of update_rule perfgd"),
        (["learner.params={jacobian: exact}"], "'exact' is not one of estimated, response"),
        (
            [
                "populations.applicants.participation=0.5",
                "populations.applicants.optimum_gap=false",
            ],
            "needs every member of populations.applicants to respond",
        ),
        (
            ["populations.seekers={strategy: individual, epsilon: 1.0}"],
            "found applicants (best_response), seekers (individual)",
        ),
        (["populations.applicants.memory=true"], "optimum_gap needs a response that is a function"),
        (
            [
                "learner.params={C: 1.0}",
                "populations.seekers={strategy: individual, epsilon: 1.0}",
            ],
            "optimum_gap: the performative optimum is computed for one best_response",
        ),
    ],
)
def test_what_cannot_be_anticipated_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_scenario(SCENARIO, overrides)


def test_refusals_when_the_environment_is_built():
    typed = ["features.types={number_of_existing_credits: integer}"]
    with pytest.raises(ConfigError, match="optimum is computed for continuous features"):
        RecourseEnv(load_scenario(SCENARIO, typed))
    asks_no_gap = load_scenario(SCENARIO, [*typed, "populations.applicants.optimum_gap=false"])
    with pytest.raises(ConfigError, match="number_of_existing_credits move by whole steps"):
        RecourseEnv(asks_no_gap).reset(seed=0)


def test_cli_refusal_is_one_line(capsys):
    assert main(["validate", SCENARIO, "--set", "learner.update_rule=dfo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "jacobian" in err[0]
