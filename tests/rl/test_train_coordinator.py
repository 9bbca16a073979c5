"""analyses/train_coordinator.py end to end, on the tiny scenario (a smoke test)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

pytest.importorskip("stable_baselines3")


@pytest.fixture(scope="module")
def tc(analysis_script):
    return analysis_script("train_coordinator")


@pytest.mark.slow
def test_quick_run_writes_the_comparison_table(tc, tmp_path):
    args = tc.Args(
        scenarios=("coordination_toy",),
        timesteps=(200,),
        eval_seeds=(1000,),
        quick=True,
        out=tmp_path,
        jobs=1,  # worker processes re-import the script by name, which a test module is not
    )
    tc.main(args)
    table = pd.read_csv(tmp_path / "coordinator_comparison.csv")
    assert list(table.columns[:5]) == ["scenario", "policy", "seed", "query_success", "reward"]
    assert set(table["policy"]) == {"none", "individual", "oar", "ppo"}
    assert (table["scenario"] == "coordination_toy").all() and (table["seed"] == 1000).all()
    assert table["query_success"].between(0, 1).all()
    curves = pd.read_csv(tmp_path / "coordinator_curves.csv")
    assert len(curves) == 200 // 10 and set(curves["seed"]) == {0}
    for name in ("coordinator_curves.png", "coordinator.md"):
        assert (tmp_path / name).stat().st_size > 0
    summary = json.loads((tmp_path / "coordinator_summary.json").read_text())
    assert summary["ppo"]["timesteps"] == {"coordination_toy": 200}


def test_args_need_one_budget_per_scenario(tc, tmp_path):
    with pytest.raises(SystemExit, match="one number per scenario"):
        tc.main(tc.Args(scenarios=("coordination_toy",), timesteps=(100, 200), out=tmp_path))


def test_an_unknown_scenario_is_one_error_before_training(tc, tmp_path):
    with pytest.raises(SystemExit, match=r"^error: --scenarios: unknown scenario"):
        tc.main(tc.Args(scenarios=("no_such_scenario",), timesteps=(100,), out=tmp_path))
