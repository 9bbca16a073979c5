"""analyses/endogenous_shift.py's paired table of each mitigation against Wachter's
generator, on a frame small enough to check by hand."""

from __future__ import annotations

import pandas as pd
import pytest


@pytest.fixture(scope="module")
def shift(analysis_script):
    return analysis_script("endogenous_shift")


def _frame(generators: dict[str, list[float]]) -> pd.DataFrame:
    """Two rounds, one set and model, a final domain MMD² per generator and fold (model
    MMD² its double, disagreement a tenth of it)."""
    rows = []
    for generator, finals in generators.items():
        for fold, final in enumerate(finals):
            for rnd, value in ((0, 0.0), (1, final)):
                rows.append(
                    {
                        "dataset": "moons",
                        "model": "logistic",
                        "generator": generator,
                        "fold": fold,
                        "round": rnd,
                        "domain_mmd": value,
                        "model_mmd": 2 * value,
                        "disagreement": value / 10,
                    }
                )
    return pd.DataFrame(rows)


def test_each_mitigation_minus_wachter_in_the_same_fold(shift):
    frame = _frame(
        {
            "wachter": [0.010, 0.020, 0.030],
            "wachter_gamma_0.9": [0.005, 0.010, 0.020],
            "claproar": [0.004, 0.025, 0.024],  # minus Wachter: -6, +5, -6 (×10³)
        }
    )
    table = shift.against_wachter_table(frame).splitlines()
    assert len(table) == 3  # header, rule, claproar's row (not the γ = 0.9 arm)
    cells = [c.strip() for c in table[2].strip("|").split("|")]
    assert cells[:4] == ["moons", "logistic", "claproar", "2 / 3"]
    assert cells[4].startswith("-2.33 [")  # mean of -6, +5, -6
    assert cells[5].startswith("-4.67 [")  # model MMD²: twice that
    assert cells[6].startswith("-0.0 [")  # disagreement: a tenth, in pp (-0.023)


def test_no_table_without_a_mitigation(shift):
    frame = _frame({"wachter": [0.01, 0.02], "wachter_gamma_0.9": [0.0, 0.01]})
    assert shift.against_wachter_table(frame) == ""
