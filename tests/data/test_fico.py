"""The FICO score distributions and repayment curves."""

from __future__ import annotations

import numpy as np
import pytest

from recourse_sim.data import FICO_GROUPS, load_fico
from recourse_sim.errors import ConfigError


def test_groups_and_sizes_match_totals() -> None:
    fico = load_fico()
    assert fico.groups == FICO_GROUPS == ("white", "black", "hispanic", "asian")
    assert dict(fico.group_sizes) == {
        "white": 133_165,
        "black": 18_274,
        "hispanic": 14_702,
        "asian": 7_906,
    }
    assert set(fico.cdf) == set(fico.repay) == set(fico.groups)


def test_score_grid() -> None:
    scores = load_fico().scores
    assert scores.dtype == np.float64 and scores.shape == (198,)
    assert scores[0] == 0.0 and scores[-1] == 100.0 and np.all(np.diff(scores) > 0)


@pytest.mark.parametrize("group", FICO_GROUPS)
def test_cdf_and_repay_are_probabilities(group: str) -> None:
    fico = load_fico()
    cdf, repay = fico.cdf[group], fico.repay[group]
    assert cdf.shape == repay.shape == fico.scores.shape
    assert np.all((cdf >= 0) & (cdf <= 1)) and np.all(np.diff(cdf) >= 0) and cdf[-1] == 1.0
    assert np.all((repay >= 0) & (repay <= 1))
    # The file gives default rates in percent; repayment must rise with the score.
    assert repay[0] < 0.1 and repay[-1] > 0.98
    assert not cdf.flags.writeable and not repay.flags.writeable


def test_repayment_value_from_file() -> None:
    # transrisk_performance_by_race_ssa.csv, score 0: 98.54 % of white applicants default.
    assert load_fico().repay["white"][0] == pytest.approx(1 - 0.9854)


@pytest.mark.parametrize("group", FICO_GROUPS)
def test_sampled_scores_follow_the_cdf(group: str) -> None:
    fico = load_fico()
    scores = fico.sample_scores(group, 50_000, np.random.default_rng(1))
    assert scores.shape == (50_000,) and scores.min() >= 0 and scores.max() <= 100
    empirical = np.searchsorted(np.sort(scores), fico.scores, side="right") / scores.size
    assert np.abs(empirical - fico.cdf[group]).max() < 0.01  # DKW bound at n = 50,000
    again = fico.sample_scores(group, 50_000, np.random.default_rng(1))
    np.testing.assert_array_equal(scores, again)


def test_repay_probability_interpolates() -> None:
    fico = load_fico()
    grid, repay = fico.scores, fico.repay["black"]
    np.testing.assert_allclose(fico.repay_probability("black", grid), repay)
    mid = fico.repay_probability("black", (grid[10] + grid[11]) / 2)
    assert mid == pytest.approx((repay[10] + repay[11]) / 2)
    # Clamped outside the grid.
    assert fico.repay_probability("black", [-5.0, 120.0]).tolist() == [repay[0], repay[-1]]


@pytest.mark.parametrize("group", FICO_GROUPS)
def test_repay_probability_is_np_interp_bit_for_bit(group: str) -> None:
    # the grid's cells find each segment; np.interp's binary search is the reference
    fico = load_fico()
    grid = fico.scores
    rng = np.random.default_rng(0)
    scores = np.concatenate(
        [
            rng.uniform(-5.0, 105.0, 200_000),
            grid,
            np.nextafter(grid, np.inf),
            np.nextafter(grid, -np.inf),
            grid + 1e-13 * rng.standard_normal(len(grid)),
            [np.nan, np.inf, -np.inf, -0.0],
        ]
    )
    expected = np.interp(scores, grid, fico.repay[group])
    got = fico.repay_probability(group, scores)
    assert got.tobytes() == expected.tobytes()
    assert fico.repay_probability(group, 50.25) == np.interp(50.25, grid, fico.repay[group])
    assert fico.repay_probability(group, scores.reshape(-1, 2)).shape == (len(scores) // 2, 2)


def test_repay_probabilities_are_each_groups_curve() -> None:
    fico = load_fico()
    rng = np.random.default_rng(1)
    group = rng.integers(0, len(FICO_GROUPS), 50_000)
    scores = rng.uniform(-5.0, 105.0, len(group))
    expected = np.empty(len(group))
    for g, name in enumerate(FICO_GROUPS):
        expected[group == g] = np.interp(scores[group == g], fico.scores, fico.repay[name])
    got = fico.repay_probabilities(FICO_GROUPS, group, scores)
    assert got.tobytes() == expected.tobytes()


def test_bad_arguments() -> None:
    fico = load_fico()
    with pytest.raises(ConfigError, match="valid groups: white, black, hispanic, asian"):
        fico.repay_probability("White", 50.0)
    with pytest.raises(ConfigError, match="rng"):
        fico.sample_scores("white", 3, 0)  # type: ignore[arg-type]
