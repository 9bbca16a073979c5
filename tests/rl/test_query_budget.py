"""analyses/query_budget.py and analyses/arms_race.py: shares of white-box gain, paired."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


@pytest.fixture(scope="module")
def qb(analysis_script):
    return analysis_script("query_budget")


@pytest.fixture(scope="module")
def ar(analysis_script):
    return analysis_script("arms_race")


def test_share_kept_is_the_per_seed_ratio_of_paired_gains(qb):
    none = np.array([0.40, 0.42, 0.44])
    white = none + np.array([0.10, 0.20, 0.10])
    half = none + np.array([0.05, 0.10, 0.05])
    rows = [
        {"arm": arm, "seed": s, "query_success": v[s]}
        for arm, v in (("none", none), ("white_box", white), ("scores_Binf", half))
        for s in range(3)
    ]
    summary = qb.summarise(pd.DataFrame(rows))
    assert summary.loc["scores_Binf", "share"] == pytest.approx(0.5)
    assert summary.loc["scores_Binf", "share_half"] == pytest.approx(0.0, abs=1e-12)
    assert summary.loc["white_box", "share"] == pytest.approx(1.0)
    assert summary.loc["none", "share"] == pytest.approx(0.0)
    # success lost against the correct belief: white-box minus half, in points
    assert summary.loc["white_box", "lost_pp"].startswith("-6.7")


def test_every_wrong_belief_differs_from_the_learner(qb):
    for rule in qb.LEARNERS:
        arms = qb.arms(rule)
        assert f"assume_{rule}" not in arms
        assert {f"scores_B{b or 'inf'}" for b in qb.BUDGETS} <= set(arms)
        assert all(arms[f"decisions_B{b or 'inf'}"]["access"] == "decisions" for b in qb.BUDGETS)
        assert arms["scores_B5"]["memory"] == 10


def test_arms_race_ci_low_is_the_student_t_lower_end(ar):
    from scipy import stats

    v = np.array([0.1, 0.3, 0.2, 0.4])
    half = stats.t.ppf(0.975, 3) * v.std(ddof=1) / 2
    assert ar._ci_low(v) == pytest.approx(v.mean() - half)
    assert ar._ci_low([0.5]) == -np.inf
