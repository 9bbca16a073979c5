"""analyses/critical_mass.py: how the critical participation is read off the runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


@pytest.fixture(scope="module")
def cm(analysis_script):
    return analysis_script("critical_mass")


def _table(gains: dict[float, list[float]], noise: float = 0.01) -> pd.DataFrame:
    alphas = [0.0, 0.1, 0.2, 0.5, 1.0]
    rows = []
    for h, g in gains.items():
        for alpha, gain in zip(alphas, [0.0, *g], strict=True):
            for seed, e in enumerate((-noise, 0.0, noise)):
                rows.append(
                    {
                        "homophily": h,
                        "alpha": alpha,
                        "seed": seed,
                        "query_success": 0.4 + gain + e,
                        "participant_share": alpha * 0.1,
                    }
                )
    return pd.DataFrame(rows)


def test_critical_alpha_is_the_first_whose_gain_is_large_and_clear(cm):
    table = _table({0.5: [0.01, 0.02, 0.05, 0.2], 0.99: [0.0, 0.0, 0.01, 0.04]})
    summary = cm._summary(table, min_gain=0.03)
    critical = summary.groupby("homophily")[["critical_alpha", "critical_participant_share"]]
    first = critical.first()
    assert first.loc[0.5, "critical_alpha"] == 0.5  # gains 0.01 and 0.02 are too small
    assert first.loc[0.99, "critical_alpha"] == 1.0
    assert first.loc[0.5, "critical_participant_share"] == pytest.approx(0.05)
    at = summary.set_index(["homophily", "alpha"])
    assert at.loc[(0.5, 0.0), "gain"] == pytest.approx(0.0)
    assert at.loc[(0.5, 1.0), "gain"] == pytest.approx(0.2)


def test_a_gain_within_the_noise_is_not_critical(cm):
    summary = cm._summary(_table({0.5: [0.0, 0.0, 0.0, 0.04]}, noise=0.1), min_gain=0.03)
    assert np.isnan(summary["critical_alpha"]).all()


def test_no_gain_no_critical_mass(cm):
    summary = cm._summary(_table({0.8: [0.0, 0.0, 0.0, 0.0]}))
    assert np.isnan(summary["critical_alpha"]).all()
