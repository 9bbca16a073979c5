"""Smoke test of analyses/dynamics.py: two rounds, one seed, every output written."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest


@pytest.fixture(scope="module")
def dynamics(analysis_script):
    return analysis_script("dynamics")


@pytest.mark.slow  # ~10 s on a loaded machine: 14 short runs plus the torch import
def test_quick_run_writes_every_output(dynamics, tmp_path: Path) -> None:
    argv = ["--quick", "--rounds", "2", "--seeds", "1", "--workers", "1", "--out", str(tmp_path)]
    tables = dynamics.main(argv)

    arms = {"none", "individual", "collective", "both"}
    for name, extra in (("school_assignment", set()), ("lending_fico", {"genre"})):
        frame = pd.read_csv(tmp_path / f"dynamics_{name}.csv")
        assert list(frame.columns[:4]) == ["arm", "seed", "round", "group"]
        assert set(frame["arm"]) == arms | extra
        assert sorted(frame["round"].unique()) == [1, 2]
        assert "query" in set(frame["group"])
        assert (tmp_path / f"dynamics_{name}.png").stat().st_size > 0
    lending = tables["dynamics_lending_fico"]
    assert {"white", "black"} <= set(lending["group"]) and "mean_score" in lending

    # the arms switch populations off: no collective members where the collective is off
    school = tables["dynamics_school_assignment"]
    everyone = school[school["group"] == "all"].groupby("arm")["collective_participants"].sum()
    assert everyone["none"] == 0 and everyone["individual"] == 0 and everyone["collective"] > 0
    seekers = school[school["group"] == "all"].groupby("arm")["n_seekers"].sum()
    assert seekers["none"] == 0 and seekers["collective"] == 0 and seekers["individual"] > 0

    claim = pd.read_csv(tmp_path / "dynamics_school_claim.csv")
    assert {"collective_minus_none", "both_minus_individual"} <= set(claim.columns)

    rules = pd.read_csv(tmp_path / "dynamics_lending_rules.csv")
    assert {"rule", "seed", "group", "selection_rate_round1", "delta_mu_round1"} <= set(
        rules.columns
    )
    assert rules["rule"].nunique() >= 3
    assert rules["delta_mu_round1"].notna().all()
    assert (tmp_path / "dynamics_lending_rules_rounds.csv").exists()
    assert (tmp_path / "dynamics_lending_rules.png").exists()

    # the genre arm: rejected applicants follow GenRe, nobody acts collectively
    genre = lending[(lending["arm"] == "genre") & (lending["group"] == "all")]
    assert genre["n_seekers"].sum() > 0 and genre["collective_participants"].sum() == 0

    report = (tmp_path / "dynamics.md").read_text(encoding="utf-8")
    assert "collective_minus_none" in report and "Wall time" in report
    assert "GenRe vs their own gradient step" in report
