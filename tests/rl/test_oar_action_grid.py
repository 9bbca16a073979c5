"""analyses/oar_action_grid.py: the grid's actions, and a smoke run on the tiny scenario."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from recourse_sim.agents import OAR_ACTION
from recourse_sim.agents.strategies import _share


@pytest.fixture(scope="module")
def grid(analysis_script):
    return analysis_script("oar_action_grid")


def test_shares_map_to_the_actions_entries(grid):
    """A share s of α or ε is the entry the action maps back to s; (1, 1) is OAR's zero."""
    for alpha_share, budget_share in [(0.25, 0.5), (0.75, 1.0), (1.0, 0.25)]:
        a = grid.oar_action(alpha_share, budget_share)
        assert _share(a[OAR_ACTION.index("alpha")]) == pytest.approx(alpha_share, abs=1e-7)
        assert _share(a[OAR_ACTION.index("budget")]) == pytest.approx(budget_share, abs=1e-7)
        assert a[OAR_ACTION.index("act")] == 0.0 and a[OAR_ACTION.index("goal")] == 0.0
    np.testing.assert_array_equal(grid.oar_action(1.0, 1.0), np.zeros(len(OAR_ACTION)))


def test_quick_run_writes_the_grid_with_oar_at_zero_difference(grid, tmp_path):
    grid.main(grid.Args(scenarios=("coordination_toy",), quick=True, out=tmp_path))
    table = pd.read_csv(tmp_path / "oar_action_grid.csv")
    assert len(table) == 4 + 2 and set(table.alpha_share) == {0.5, 1.0}
    assert set(table[~table.own_horizon].horizon) == {2, 3}
    assert table.query_success.between(0, 1).all()
    report = (tmp_path / "oar_action_grid.md").read_text()
    assert "| coordination_toy | 1 | 1 | 1 |" in report and "+0.000" in report


def test_the_grid_must_hold_oar(grid, tmp_path):
    with pytest.raises(SystemExit, match="must include 1"):
        grid.main(grid.Args(scenarios=("coordination_toy",), shares=(0.5,), out=tmp_path))


@pytest.mark.parametrize("scenario", ["no_such_scenario", "school_assignment"])
def test_a_scenario_without_a_controlled_population_is_one_error(grid, tmp_path, scenario):
    with pytest.raises(SystemExit, match=r"^error: .*(unknown scenario|no controlled)"):
        grid.main(grid.Args(scenarios=(scenario,), quick=True, out=tmp_path))
