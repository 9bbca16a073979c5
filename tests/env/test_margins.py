"""Margins drawn per person: any spread that validates runs. A lognormal margin's upper
tail passes 1; such a margin is clipped below 1, the person's aim (the score needed
plus the margin) is above P = 1, they change nothing, and ``aim_unreachable`` counts
them."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from recourse_sim.agents.strategies import aim_unreachable, seeker_margins
from recourse_sim.env.recourse_env import RecourseEnv
from recourse_sim.scenarios import load_scenario
from recourse_sim.scenarios.populations import LognormalMargin


def test_margins_are_the_spread_clipped_below_one():
    """The inverse CDF of the lognormal (scipy's), clipped to the largest float below 1."""
    spec = LognormalMargin(kind="lognormal", median=0.05, sigma=2.0)
    q = np.linspace(0.0, 1.0, 10_001)[:-1]
    margins = seeker_margins(spec, q)
    reference = stats.lognorm(s=2.0, scale=0.05).ppf(q)
    assert (margins < 1.0).all() and margins.max() == np.nextafter(1.0, 0.0)
    np.testing.assert_allclose(margins, np.minimum(reference, margins.max()), rtol=1e-12)
    clipped = reference >= 1.0
    assert clipped.mean() == pytest.approx(stats.norm.sf(np.log(20.0) / 2.0), abs=2e-4)


def test_aim_unreachable_is_the_aim_at_or_above_one_under_min_cost():
    class Spec:
        objective = "min_cost"

    target, margin = np.array([0.5, 0.5, 0.9, 0.0]), np.array([0.49, 0.5, 0.2, 0.99])
    assert aim_unreachable(Spec, target, margin).tolist() == [False, True, True, False]
    assert aim_unreachable(Spec, None, margin) is False  # argmax: the aim is below 1

    class Budget:
        objective = "budget"

    assert aim_unreachable(Budget, target, margin) is False


@pytest.mark.parametrize("sigma", [1.0, 2.0])
def test_school_with_a_wide_lognormal_margin_runs(sigma):
    """The school scenario with margin lognormal(median 0.05, σ) completes its rounds
    (it stopped in round 1 at σ = 1 when a margin of 1 or more was refused); the
    people whose aim is above 1 are counted and change nothing."""
    scenario = load_scenario(
        "school_assignment",
        overrides=[
            f"populations.students.margin={{kind: lognormal, median: 0.05, sigma: {sigma}}}"
        ],
    )
    env = RecourseEnv(scenario)
    env.reset(seed=0)
    counted = 0
    for _ in range(2):
        info = env.step(np.zeros(env.action_space.shape, np.float32))[4]
        everyone = next(m for m in info["metrics"] if m["group"] == "all")
        groups = [m for m in info["metrics"] if m["group"] not in ("all", "query")]
        assert 0 <= everyone["aim_unreachable"] <= everyone["n_seekers"]
        assert sum(m["aim_unreachable"] for m in groups) == everyone["aim_unreachable"]
        record = env.state.last_record
        out = record.aim_unreachable
        assert not (out & ~record.tried).any()
        assert (record.cost[out] == 0).all()  # (they change nothing)
        counted += everyone["aim_unreachable"]
    # P(margin ≥ 1 − cut-off) is at least P(margin ≥ 0.5): 1 % at σ = 1, 13 % at σ = 2
    if sigma == 2.0:
        assert counted > 0
