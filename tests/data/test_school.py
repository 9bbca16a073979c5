"""The synthetic school-assignment world (OAR paper, §1)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from recourse_sim.data import SCHOOL_FEATURES, school_world, true_success_probability
from recourse_sim.errors import ConfigError

EXTRA = SCHOOL_FEATURES.index("extracurriculars")


def test_reproducible_with_the_same_seed() -> None:
    a = school_world(500, np.random.default_rng(7))
    b = school_world(500, np.random.default_rng(7))
    c = school_world(500, np.random.default_rng(8))
    for field in ("X", "neighbourhood", "ability", "y_true", "y_hist", "query"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.X, c.X)


def test_shapes_and_types() -> None:
    n = 400
    cohort = school_world(n, np.random.default_rng(0))
    assert cohort.X.shape == (n, 4) and cohort.X.dtype == np.float64
    assert cohort.feature_names == SCHOOL_FEATURES
    assert cohort.causal.tolist() == [True, True, True, False]
    assert np.isfinite(cohort.X).all()
    for field in ("neighbourhood", "y_true", "y_hist"):
        arr = getattr(cohort, field)
        assert arr.shape == (n,) and arr.dtype == np.int64 and set(np.unique(arr)) == {0, 1}
    assert cohort.query.dtype == np.bool_ and cohort.ability.shape == (n,)
    assert not cohort.X.flags.writeable


def test_proxy_richer_in_n1_and_query_group() -> None:
    cohort = school_world(2_000, np.random.default_rng(0))
    n1 = cohort.neighbourhood == 0
    extra = cohort.X[:, EXTRA]
    assert extra[n1].mean() > extra[~n1].mean() + 1.5
    assert cohort.query.any() and (cohort.neighbourhood[cohort.query] == 1).all()
    # S is high-achieving: most of it would thrive in H1.
    assert cohort.y_true[cohort.query].mean() > 0.75


def test_true_outcome_ignores_the_proxy() -> None:
    X = school_world(300, np.random.default_rng(0)).X.copy()
    p = true_success_probability(X)
    X[:, EXTRA] += 5.0
    np.testing.assert_array_equal(true_success_probability(X), p)
    X[:, SCHOOL_FEATURES.index("gpa")] += 0.5
    assert (true_success_probability(X) > p).all()


def test_model_trained_on_history_learns_the_proxy_and_sends_s_to_h2() -> None:
    cohort = school_world(5_000, np.random.default_rng(0))
    scaler = StandardScaler().fit(cohort.X)
    model = LogisticRegression().fit(scaler.transform(cohort.X), cohort.y_hist)
    weights = model.coef_[0]
    assert weights[EXTRA] > 2 * weights[:EXTRA].max() > 0
    assigned_h1 = model.predict(scaler.transform(cohort.X)) == 1
    assert assigned_h1[cohort.query].mean() < 0.6
    n1 = cohort.neighbourhood == 0
    assert assigned_h1[n1].mean() > assigned_h1[~n1].mean() + 0.3


def test_cohort_true_outcome_uses_its_parameters() -> None:
    cohort = school_world(1_000, np.random.default_rng(0), outcome_threshold=10.0)
    assert cohort.params["outcome_threshold"] == 10.0
    assert cohort.true_outcome(cohort.X, np.random.default_rng(1)).sum() == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n": 0}, "n must be"),
        ({"rng": 0}, "rng must be"),
        ({"frac_n2": 1.5}, "frac_n2"),
        ({"h1_capacity": -0.1}, "h1_capacity"),
        ({"extracurricular_rate_n2": -1.0}, "extracurricular_rate_n2"),
        ({"outcome_sharpness": 0.0}, "outcome_sharpness"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    args = {"n": 10, "rng": np.random.default_rng(0), **kwargs}
    with pytest.raises(ConfigError, match=match):
        school_world(**args)


def test_bad_feature_shape() -> None:
    with pytest.raises(ConfigError, match="shape"):
        true_success_probability(np.zeros((3, 3)))


@pytest.mark.parametrize("n", [1, 2, 3, 10, 201, 1000])
def test_quantile_is_numpys_bit_for_bit(n) -> None:
    from recourse_sim.data.school import _quantile

    rng = np.random.default_rng(n)
    for a in (rng.normal(size=n), rng.poisson(2.0, size=n).astype(np.float64)):  # ties too
        before = a.copy()
        for q in (0.0, 0.25, 0.5, 0.6, 0.75, 1.0, *rng.random(5)):
            assert _quantile(a, float(q)) == np.quantile(a, q)
        np.testing.assert_array_equal(a, before)  # the partition was of a copy


def test_draw_school_is_school_worlds_draw() -> None:
    from recourse_sim.data.school import draw_school

    kwargs = {"outcome_threshold": 0.3, "outcome_sharpness": 1.5, "h1_capacity": 0.3}
    cohort = school_world(700, np.random.default_rng(5), **kwargs)
    rng = np.random.default_rng(5)
    draw = draw_school(700, rng, **cohort.params)
    for field in ("X", "neighbourhood", "ability", "y_true", "y_hist", "query"):
        np.testing.assert_array_equal(getattr(draw, field), getattr(cohort, field))
        assert getattr(draw, field).dtype == getattr(cohort, field).dtype
    np.testing.assert_array_equal(
        draw.success_probability,
        true_success_probability(cohort.X, threshold=0.3, sharpness=1.5),
    )
    assert draw.X.flags.writeable


@pytest.mark.parametrize(("cohorts", "n", "gap"), [(3, 200, 0.0), (1, 57, 0.7), (2, 1, -0.4)])
def test_cohort_arithmetic_is_the_plain_formulas_bit_for_bit(cohorts, n, gap) -> None:
    """`school_from_numbers` computes the structural model as the plain numpy formulas
    (np.clip, np.std, np.mean, one standardised matrix) would, to the last bit."""
    from recourse_sim.data.school import (
        _LOADING,
        _MEAN,
        _MERIT_WEIGHTS,
        _NOISE,
        _SCALE,
        _quantile,
        school_from_numbers,
        school_numbers,
    )

    rngs = [np.random.default_rng(k) for k in range(cohorts)]
    rates = {"extracurricular_rate_n1": 3.0, "extracurricular_rate_n2": 1.0}
    numbers = school_numbers(n, rngs, frac_n2=0.5, **rates)
    kwargs = {"h1_capacity": 0.4, "proxy_weight": 1.5, "admission_noise": 0.5}
    kwargs |= {"query_quantile": 0.75, "outcome_threshold": 0.1, "outcome_sharpness": 2.0}
    draw = school_from_numbers(numbers, ability_gap=gap, **kwargs)

    ability = numbers.ability_noise + gap * (0.5 - numbers.neighbourhood)
    X = _MEAN + ability[..., None] * _LOADING + numbers.feature_noise * _NOISE
    X[..., 0] = np.clip(X[..., 0], 0.0, 4.0)
    X[..., 2] = np.clip(X[..., 2], 0.0, None)
    merit = ((X - _MEAN) / _SCALE) @ _MERIT_WEIGHTS
    p = 1.0 / (1.0 + np.exp(-2.0 * (merit - 0.1)))
    extra = numbers.extracurriculars
    sd = extra.std(axis=-1, keepdims=True)
    z = (extra - extra.mean(axis=-1, keepdims=True)) / np.where(sd > 0, sd, 1.0)
    score = merit + 1.5 * z + 0.5 * numbers.admission_noise
    for got, want in [
        (draw.ability, ability),
        (draw.X[..., :3], X),
        (draw.X[..., 3], extra),
        (draw.success_probability, p),
        (draw.y_hist, (score > _quantile(score, 0.6)[..., None]).astype(np.int64)),
    ]:
        assert got.tobytes() == np.ascontiguousarray(want).tobytes()
