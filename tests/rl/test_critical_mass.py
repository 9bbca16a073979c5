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
    got = cm.signal_bound_empirical(alphas, x, y, carriers)
    for a, g in zip(alphas, got, strict=True):
        if a == 0:
            assert g == 0.0
            continue
        best = max(
            1 - np.mean(carriers < t) - (1 - a) / a * np.mean((x >= t) & (y != 1))
            for t in np.arange(-1.0, 30.0, 0.5)  # every distinct half-space, and more
        )
        assert g == pytest.approx(min(max(best, 0.0), 1.0))


def _two_classes(cm, alpha: float, offset: float) -> list:
    """x3 ~ N(0, 1) in both classes (half labelled 0), carriers at x3 + offset (1-d)."""
    return [
        cm.Component((1 - alpha) / 2, np.array([0.0]), 1.0, 0),
        cm.Component((1 - alpha) / 2, np.array([0.0]), 1.0, 1),
        cm.Component(alpha, np.array([offset]), 1.0, 1, carrier=True),
    ]


def _closed_form(alpha: float, offset: float, excess: float = 0.0) -> float:
    from scipy.stats import norm

    t = np.linspace(-8, offset + 8, 400_001)
    best = np.max(1 - norm.cdf(t - offset) - ((1 - alpha) * 0.5 * norm.sf(t) + excess) / alpha)
    return float(np.clip(best, 0, 1))


@pytest.mark.slow
def test_signal_bound_is_the_best_half_space_in_closed_form(cm):
    for alpha in (0.002, 0.02, 0.2):
        for excess in (0.0, 0.001, 0.01):
            got = cm.signal_bound(_two_classes(cm, alpha, 6.0), 0, excess)
            assert got == pytest.approx(_closed_form(alpha, 6.0, excess), abs=2e-4)
    assert cm.signal_bound(_two_classes(cm, 0.0, 6.0), 0) == 0.0
    # the learner's term only lowers it: E / α′ at the best half-space at most
    bayes = cm.signal_bound(_two_classes(cm, 0.02, 6.0), 0)
    with_e = cm.signal_bound(_two_classes(cm, 0.02, 6.0), 0, 0.001)
    assert bayes - 0.001 / 0.02 - 1e-9 <= with_e < bayes


def test_excess_risk_of_a_shifted_threshold_in_closed_form(cm):
    from scipy.stats import norm

    class Threshold:  # f(x) = 1 above c: the Bayes rule of the mixture below is c = 0
        def __init__(self, c):
            self.c = c

        def predict(self, X):
            return (X[:, 0] > self.c).astype(int)

    mixture = [
        cm.Component(0.5, np.array([-1.0]), 1.0, 0),
        cm.Component(0.5, np.array([1.0]), 1.0, 1),
    ]
    rng = np.random.default_rng(0)
    assert cm.excess_risk(Threshold(0.0), mixture, 10_000, rng) == 0.0
    for c in (0.3, 1.0):
        # ∫_0^c p(x, 1) − p(x, 0) dx, p(x, y) = φ(x ∓ 1) / 2
        exact = 0.5 * ((norm.cdf(c - 1) - norm.cdf(-1)) - (norm.cdf(c + 1) - norm.cdf(1)))
        got = cm.excess_risk(Threshold(c), mixture, 200_000, rng)
        assert got == pytest.approx(exact, abs=2e-3)


def test_the_bound_with_the_learners_excess_risk_holds_for_the_simulated_learner(cm):
    from dataclasses import replace

    args = replace(cm.Args(), rounds=3, burn_in=1, excess_draws=5000)
    for alpha in (0.002, 0.05):
        run = cm.run_signal(args, alpha, 0)
        bayes, learner = cm.signal_bounds(args, alpha, run["excess_risk"])
        assert run["excess_risk"] > 0
        assert learner <= run["success"] + 0.02  # (sampling noise of a few rounds' S)
        assert bayes > learner
    assert bayes == pytest.approx(0.991, abs=0.005)  # α = 0.05: E = 0 alone says ~0.99


def test_empirical_bound_on_gaussian_samples_matches_the_population_optimum(cm):
    rng = np.random.default_rng(1)
    n, offset = 200_000, 3.0
    x = rng.normal(size=n)
    y = rng.integers(0, 2, n)
    alphas = np.array([0.01, 0.05, 0.2])
    empirical = cm.signal_bound_empirical(alphas, x, y, x + offset)
    population = [cm.signal_bound(_two_classes(cm, a, offset), 0) for a in alphas]
    np.testing.assert_allclose(empirical, population, atol=0.02)
