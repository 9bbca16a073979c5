"""The end-of-run cycle detector: planted cycles of θ are reported once with their period,
fixed points, convergence and drift are not; a refit on discrete best responses that
alternates between models warns from `simulate`."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from recourse_sim.env.cycles import theta_cycle, warn_if_cycling


def _run(thetas: list[np.ndarray]) -> pd.DataFrame:
    """metrics.csv's `all` rows of a run whose deployed models are `thetas` in turn."""
    thetas = [np.asarray(t, dtype=np.float64) for t in thetas]
    rows = []
    for r in range(len(thetas) - 1):
        rows.append(
            {
                "round": r + 1,
                "group": "all",
                "theta_step": float(np.linalg.norm(thetas[r + 1] - thetas[r])),
                "model_shift": float(np.linalg.norm(thetas[r] - thetas[0])),
            }
        )
        rows.append({"round": r + 1, "group": "g1", "theta_step": np.nan, "model_shift": np.nan})
    return pd.DataFrame(rows)


def _cycle(models: list[list[float]], lead: int, rounds: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    start = [rng.normal(size=len(models[0])) for _ in range(lead)]
    return start + [np.asarray(models[r % len(models)]) for r in range(rounds)]


@pytest.mark.parametrize("period", [2, 3, 4])
def test_a_planted_cycle_is_reported_once_with_its_period(period):
    models = [[np.cos(k), np.sin(k), 0.1 * k] for k in range(period)]
    frame = _run(_cycle(models, lead=3, rounds=20))
    with pytest.warns(UserWarning, match=f"cycle of period {period}") as caught:
        assert warn_if_cycling(frame, "planted") == period
    assert len(caught) == 1


def test_the_issue_s_four_cycle_of_steps_is_period_four():
    steps = [1.3, 0.9] + [0.222, 0.492, 0.870, 0.217] * 4
    assert theta_cycle(np.array(steps)) == 4


def test_a_two_cycle_has_a_constant_step_and_model_shift_tells_it_from_a_drift():
    a, b = np.array([0.0, 1.0]), np.array([1.0, 1.0])
    two = _run([np.zeros(2)] + [a, b] * 8)
    assert theta_cycle(two.theta_step[two.group == "all"], two.model_shift[two.group == "all"]) == 2
    drift = _run([np.array([0.5 * r, 0.0]) for r in range(16)])  # constant steps, no cycle
    everyone = drift[drift.group == "all"]
    assert theta_cycle(everyone.theta_step, everyone.model_shift) is None


@pytest.mark.parametrize(
    "steps",
    [
        [0.4] + [0.0] * 15,  # a fixed point after one round
        [0.5**r for r in range(16)],  # converging
        [2.0**r for r in range(16)],  # diverging
        [0.222, 0.492, 0.870, 0.217] * 2,  # too short to tell a 4-cycle
        [],
    ],
)
def test_no_cycle_is_reported_where_there_is_none(steps):
    assert theta_cycle(np.array(steps, dtype=np.float64)) is None


def test_no_warning_without_a_cycle():
    frame = _run([np.array([0.5**r, 1.0]) for r in range(16)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_if_cycling(frame, "settles") is None


def _typed_rrm(tmp_path, columns: dict[str, str]) -> dict:
    rng = np.random.default_rng(0)
    n = 300
    df = pd.DataFrame({"a": rng.integers(0, 6, n), "b": rng.integers(0, 2, n)})
    df["c"] = rng.normal(size=n)
    df["y"] = ((df.a - 2.5) * 0.6 + (df.b - 0.5) + df.c + rng.normal(size=n) > 0).astype(int)
    df.to_csv(tmp_path / "people.csv", index=False)
    return {
        "name": "typed_rrm",
        "rounds": 12,
        "world": {
            "kind": "csv",
            "path": str(tmp_path / "people.csv"),
            "label": "y",
            "outcome": "label",
            "population": "file",
            "columns": columns,
        },
        "features": {"actionable": ["a", "b"]},
        "learner": {"type": "logistic_regression", "update_rule": "refit", "standardize": False},
        "decision": {"rule": "threshold", "threshold": 0.5},
        "populations": {"people": {"strategy": "best_response", "epsilon": 1.0}},
    }


def test_refit_on_discrete_responses_cycles_and_simulate_warns(tmp_path):
    """An integer and a binary feature: the responses jump, the refit alternates between
    two models; with the same columns continuous RRM settles after one round."""
    from recourse_sim import load_scenario, simulate

    typed = _typed_rrm(tmp_path, {"a": "integer", "b": "binary", "c": "numeric"})
    with pytest.warns(UserWarning, match="cycle of period 2") as caught:
        frame = simulate(load_scenario(typed), seed=0)
    assert sum("cycle of period" in str(w.message) for w in caught) == 1
    steps = frame[frame.group == "all"].theta_step.to_numpy()
    assert steps[-1] > 0.1 and np.ptp(steps[-6:]) <= 1e-9
    plain = _typed_rrm(tmp_path, {"a": "numeric", "b": "numeric", "c": "numeric"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        frame = simulate(load_scenario(plain), seed=0)
    assert (frame[frame.group == "all"].theta_step.to_numpy()[1:] <= 1e-8).all()
