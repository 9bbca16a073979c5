"""The shared interval helper against scipy directly and against closed forms."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from recourse_sim.stats import mean_ci, paired_difference, t_half_width


def test_mean_ci_matches_scipy_t_interval():
    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 30):
        v = rng.normal(size=n)
        ci = mean_ci(v)
        low, high = stats.t.interval(0.95, n - 1, loc=v.mean(), scale=stats.sem(v))
        assert ci.n == n
        assert ci.mean == pytest.approx(v.mean(), abs=1e-15)
        assert ci.half_width == pytest.approx((high - low) / 2, rel=1e-12)
        assert mean_ci(v, confidence=0.9).half_width == pytest.approx(
            np.diff(stats.t.interval(0.9, n - 1, scale=stats.sem(v)))[0] / 2, rel=1e-12
        )


def test_mean_ci_closed_form_and_not_normal_quantile():
    # 1..5: mean 3, s = sqrt(2.5), t_{0.975, 4} = 2.7764451...
    ci = mean_ci([1, 2, 3, 4, 5])
    assert ci.half_width == pytest.approx(2.7764451051977987 * np.sqrt(2.5) / np.sqrt(5))
    # a normal quantile would be 1.96 / 2.776 = 0.706 of it: 29 % too narrow at n = 5
    assert 1.959964 * np.sqrt(2.5 / 5) / ci.half_width == pytest.approx(0.7059, abs=1e-4)


def test_mean_ci_small_and_non_finite():
    assert np.isnan(mean_ci([]).mean) and mean_ci([]).n == 0
    one = mean_ci([2.0, np.nan])
    assert one.mean == 2.0 and np.isnan(one.half_width) and one.n == 1
    assert mean_ci([1.0, np.inf, 3.0]).n == 2


def test_t_half_width_vectorised_keeps_index():
    frame = pd.DataFrame({"g": [0, 0, 0, 1, 1, 2], "v": [1.0, 2.0, 4.0, 3.0, 5.0, 7.0]})
    g = frame.groupby("g")["v"]
    half = t_half_width(g.std(ddof=1), g.size())
    assert list(half.index) == [0, 1, 2]
    assert half[0] == pytest.approx(mean_ci([1.0, 2.0, 4.0]).half_width)
    assert half[1] == pytest.approx(mean_ci([3.0, 5.0]).half_width)
    assert np.isnan(half[2])
    assert t_half_width(1.0, 4) == pytest.approx(stats.t.ppf(0.975, 3) / 2)


def test_paired_difference_matches_scipy():
    rng = np.random.default_rng(1)
    a = rng.normal(size=8)
    b = a - 0.3 + rng.normal(scale=0.2, size=8)
    d = paired_difference(a, b)
    ref = stats.ttest_rel(a, b)
    low, high = ref.confidence_interval(0.95)
    assert d.n == 8
    assert d.mean == pytest.approx(np.mean(a - b))
    assert d.half_width == pytest.approx((high - low) / 2, rel=1e-12)
    assert d.p_value == pytest.approx(ref.pvalue, rel=1e-12)
    one_sided = paired_difference(a, b, alternative="greater")
    assert one_sided.p_value == pytest.approx(
        stats.ttest_1samp(a - b, 0.0, alternative="greater").pvalue, rel=1e-12
    )


def test_paired_difference_edge_cases():
    equal = paired_difference([1.0, 2.0, 3.0], [0.0, 1.0, 2.0])  # every difference 1
    assert equal.mean == 1.0 and equal.half_width == 0.0 and np.isnan(equal.p_value)
    dropped = paired_difference([1.0, np.nan, 3.0, 4.0], [0.0, 1.0, np.nan, 2.0])
    assert dropped.n == 2
    single = paired_difference([1.0], [0.5])
    assert single.n == 1 and np.isnan(single.half_width) and np.isnan(single.p_value)
    with pytest.raises(ValueError, match="length"):
        paired_difference([1.0, 2.0], [1.0])


def test_t_half_width_of_a_frame_row_by_row():
    frame = pd.DataFrame({"a": [1.0, 2.0], "b": [0.5, np.nan]}, index=[10, 11])
    half = t_half_width(frame, pd.Series([3, 1], index=[10, 11]))
    assert half.loc[10, "a"] == pytest.approx(stats.t.ppf(0.975, 2) / np.sqrt(3))
    assert half.loc[10, "b"] == pytest.approx(0.5 * stats.t.ppf(0.975, 2) / np.sqrt(3))
    assert half.loc[11].isna().all()
