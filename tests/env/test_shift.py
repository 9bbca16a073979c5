"""Endogenous-shift measures (domain and model MMD, disagreement, decisiveness, θ per
round), honoured recourse and recourse_valid_after_T on every world, each recomputed
independently from a run's outputs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.spatial.distance import cdist, pdist

from recourse_sim import load_scenario, simulate
from recourse_sim.env.recourse_env import RecourseEnv
from recourse_sim.env.shift import (
    decisiveness,
    disagreement,
    median_length_scale,
    mmd2_unbiased,
    mmd_permutation_p,
)


def naive_mmd2(X: np.ndarray, Y: np.ndarray, length: float) -> float:
    """Gretton et al.'s unbiased MMD², pair by pair (an independent implementation)."""
    k = lambda a, b: np.exp(-cdist(a, b, "sqeuclidean") / (2 * length**2))  # noqa: E731
    m, n = len(X), len(Y)
    kxx, kyy = k(X, X), k(Y, Y)
    xx = (kxx.sum() - np.trace(kxx)) / (m * (m - 1))
    yy = (kyy.sum() - np.trace(kyy)) / (n * (n - 1))
    return float(xx + yy - 2 * k(X, Y).mean())


def test_mmd_equals_an_independent_unbiased_mmd_on_fixed_arrays():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(37, 3))
    Y = rng.normal(size=(52, 3)) + np.array([0.5, 0.0, -0.2])
    for length in (0.3, 1.0, median_length_scale(X)):
        assert mmd2_unbiased(X, Y, length) == pytest.approx(naive_mmd2(X, Y, length), abs=1e-12)
    assert median_length_scale(X) == pytest.approx(np.median(pdist(X)), abs=1e-12)
    # the permutation p-value against the same permutations, pair by pair
    value, p = mmd_permutation_p(X, Y, 1.0, 50, np.random.default_rng(3))
    assert value == pytest.approx(naive_mmd2(X, Y, 1.0), abs=1e-12)
    again = np.random.default_rng(3)
    Z = np.vstack([X, Y])
    null = []
    for _ in range(50):
        keep = np.zeros(len(Z), bool)
        keep[again.permutation(len(Z))[: len(X)]] = True
        null.append(naive_mmd2(Z[keep], Z[~keep], 1.0))
    assert p == pytest.approx((1 + np.sum(np.array(null) >= value - 1e-12)) / 51, abs=1e-12)
    # same distribution: a large p; a clear shift: the smallest p
    assert mmd_permutation_p(X, X[::-1] + 0.0, 1.0, 20, rng)[1] > 0.5
    assert mmd_permutation_p(X, X + 3.0, 1.0, 20, rng)[1] == pytest.approx(1 / 21)


def test_disagreement_and_decisiveness_follow_the_definitions():
    p0 = np.array([[0.2, 0.8], [0.6, 0.4], [0.5, 0.5]])
    pt = np.array([[0.7, 0.3], [0.6, 0.4], [0.1, 0.9]])
    assert disagreement(p0, pt) == pytest.approx(2 / 3)
    expected = abs(np.sqrt(0.3**2 + 0.1**2 + 0.0) - np.sqrt(0.2**2 + 0.1**2 + 0.4**2))
    assert decisiveness(p0[:, 1], pt[:, 1]) == pytest.approx(expected, abs=1e-15)


@pytest.fixture
def file_world(tmp_path):
    rng = np.random.default_rng(1)
    n = 160
    y = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 2)) + np.where(y[:, None] == 1, 1.0, -1.0)
    pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "y": y}).to_csv(tmp_path / "w.csv", index=False)
    return {
        "name": "shift_file_world",
        "rounds": 4,
        "world": {
            "kind": "csv",
            "path": str(tmp_path / "w.csv"),
            "label": "y",
            "outcome": "label",
            "population": "file",
            "honour_recourse": True,
            "validity_horizon": 2,
            "shift_metrics": {"permutations": 0, "max_rows": 10000, "probe_size": 100},
        },
        "features": {"actionable": ["a", "b"]},
        "learner": {"type": "logistic_regression", "update_rule": "refit", "standardize": False},
        "decision": {"rule": "threshold", "threshold": 0.5},
        "populations": {
            "seekers": {
                "strategy": "individual",
                "method": "wachter",
                "labels": [0],
                "epsilon": 5.0,
                "participation": 0.3,
                "margin": 0.1,
            }
        },
    }


def test_shift_columns_recomputed_from_people_csv_and_theta(file_world, tmp_path):
    """domain_mmd from people.csv's reports and honoured labels; model_mmd, disagreement
    and decisiveness from the theta columns; recourse_valid_after_T from both."""
    scenario = load_scenario(file_world)
    metrics, people = simulate(
        scenario, seed=5, out=tmp_path / "run", people=True, people_features=True
    )
    data = pd.read_csv(file_world["world"]["path"])
    X_file, y_file = data[["a", "b"]].to_numpy(), data["y"].to_numpy()
    mean, sd = X_file.mean(0), X_file.std(0)
    reference = (X_file[y_file == 1] - mean) / sd
    length = np.median(pdist(reference))
    env = RecourseEnv(scenario)
    env.reset(seed=5)
    probe = X_file[:100]
    p0 = env.learner.predict_proba(probe)[:, 1]
    every = metrics[metrics.group == "all"].set_index("round")
    honoured: set[int] = set()
    theta_cols = [c for c in every.columns if c.removeprefix("theta_").isdigit()]
    assert len(theta_cols) == 3  # coef a, coef b, intercept
    for t in range(1, 5):
        rows = people[people["round"] == t]
        honoured |= set(rows.person[rows.tried & rows.favourable])
        label = np.where(rows.person.isin(honoured), 1, rows.true_favourable.astype(int))
        reports = rows[["reported_a", "reported_b"]].to_numpy()
        target = (reports[label == 1] - mean) / sd
        assert every.loc[t, "domain_mmd"] == pytest.approx(
            naive_mmd2(reference, target, length), rel=1e-9, abs=1e-12
        )  # (metrics.csv keeps 10 significant digits)
        w = every.loc[t, theta_cols].to_numpy(float)
        pt = 1 / (1 + np.exp(-(probe @ w[:2] + w[2])))
        assert every.loc[t, "model_mmd"] == pytest.approx(
            naive_mmd2(p0[:, None], pt[:, None], 0.5), abs=1e-8
        )  # (θ as written to metrics.csv: 10 significant digits)
        assert every.loc[t, "disagreement"] == pytest.approx(
            np.mean((p0 >= 0.5) != (pt >= 0.5)), abs=1e-9
        )
        assert every.loc[t, "decisiveness"] == pytest.approx(
            abs(np.linalg.norm(p0 - 0.5) - np.linalg.norm(pt - 0.5)), abs=1e-9
        )
        assert pd.isna(every.loc[t, "domain_mmd_p"])
    assert honoured, "someone's recourse was honoured"
    # recourse_valid_after_T (T = 2) on a CSV world: the holders of round t - 2 (their
    # recourse got the decision) favoured by the model that decides round t (θ of t - 1)
    for t in (3, 4):
        then = people[people["round"] == t - 2]
        held = then[then.tried & then.favourable]
        w = every.loc[t - 1, theta_cols].to_numpy(float)
        x = held[["reported_a", "reported_b"]].to_numpy()
        favoured = 1 / (1 + np.exp(-(x @ w[:2] + w[2]))) >= 0.5
        expected = favoured.mean() if len(held) else np.nan
        np.testing.assert_allclose(every.loc[t, "recourse_valid_after_T"], expected, atol=1e-12)


def test_shift_metrics_are_seeded_and_survive_a_resume(file_world, tmp_path):
    file_world["world"]["shift_metrics"] = {"permutations": 30, "max_rows": 50}
    scenario = load_scenario(file_world)
    full = simulate(scenario, rounds=4, seed=2, out=tmp_path / "a")
    simulate(scenario, rounds=2, seed=2, out=tmp_path / "b")
    resumed = simulate(scenario, rounds=4, seed=2, out=tmp_path / "b", resume=True)
    pd.testing.assert_frame_equal(full, resumed)
    p = full[full.group == "all"]["domain_mmd_p"]
    assert ((p > 0) & (p <= 1)).all()


def test_options_are_off_by_default_and_leave_metrics_unchanged():
    sc = load_scenario("lending_german")
    assert sc.world.shift_metrics is None and not sc.world.honour_recourse
    assert sc.world.validity_horizon is None
    env = RecourseEnv(sc)
    env.reset(seed=0)
    _, _, _, _, info = env.step(None)
    names = set(info["metrics"][-1])
    assert not names & {"domain_mmd", "model_mmd", "theta_0", "recourse_valid_after_T"}
