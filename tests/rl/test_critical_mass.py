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


def test_empirical_bound_is_the_best_half_space_by_brute_force(cm):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 20, 60).astype(float)
    y = rng.integers(0, 2, 60)
    carriers = np.minimum(x + 7.0, 22.0)
    alphas = [0.0, 0.05, 0.2, 0.5]
    got = cm.hardt_bound_empirical(alphas, x, y, carriers)
    for a, g in zip(alphas, got, strict=True):
        if a == 0:
            assert g == 0.0
            continue
        best = max(
            1 - np.mean(carriers < t) - (1 - a) / a * np.mean((x >= t) & (y != 1))
            for t in np.arange(-1.0, 30.0, 0.5)  # every distinct half-space, and more
        )
        assert g == pytest.approx(min(max(best, 0.0), 1.0))


def test_empirical_bound_on_gaussian_samples_matches_the_population_optimum(cm):
    from scipy.stats import norm

    # x3 ~ N(0, 1) in both classes, half labelled 0; carriers at x3 + offset. The
    # population bound over half-spaces {x3 >= t} is max_t 1 - Φ(t - offset)
    # - (1 - α)/α · Φ(-t)/2 (on a fine grid here); `hardt_bound` fixes t = offset/2
    rng = np.random.default_rng(1)
    n, offset = 200_000, 3.0
    x = rng.normal(size=n)
    y = rng.integers(0, 2, n)
    alphas = np.array([0.01, 0.05, 0.2])
    empirical = cm.hardt_bound_empirical(alphas, x, y, x + offset)
    t = np.linspace(-5, 10, 30_001)
    population = [np.max(1 - norm.cdf(t - offset) - (1 - a) / a * 0.5 * norm.sf(t)) for a in alphas]
    np.testing.assert_allclose(empirical, population, atol=0.02)
    assert np.all(empirical >= cm.hardt_bound(alphas, offset) - 0.01)


def test_best_half_space_bound_is_at_least_the_fixed_one_and_the_sample_optimum(cm):
    alphas = np.array([0.0, 0.002, 0.02, 0.2])
    best = cm.hardt_bound_best(alphas, 6.0)
    assert best[0] == 0.0
    assert np.all(best >= cm.hardt_bound(alphas, 6.0) - 1e-12)
    rng = np.random.default_rng(2)
    x = rng.normal(size=400_000)
    y = rng.integers(0, 2, len(x))
    sample = cm.hardt_bound_empirical(alphas[1:], x, y, x + 6.0)
    np.testing.assert_allclose(best[1:], sample, atol=0.02)
