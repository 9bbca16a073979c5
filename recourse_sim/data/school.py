"""Synthetic school-assignment world of the OAR paper (Creager & Zemel, §1).

An amalgamated district has two neighbourhoods, N1 and N2, and two high
schools, H1 (more AP courses) and H2. Each 8th-grade student has a latent
ability; three *causal* features follow from it, and one *proxy* follows from
the neighbourhood only:

=================  ======================================  ======  =======
feature            meaning                                 unit    causal
=================  ======================================  ======  =======
gpa                8th-grade grade point average           0-4     yes
test_score         district standardised test              SD      yes
study_hours        homework / study time (effort)          h/week  yes
extracurriculars   number of extracurricular activities    count   no
=================  ======================================  ======  =======

N1 has more sports facilities, so its students take part in more activities
(Poisson rates 3 vs 1 by default) whatever their ability.

The **true outcome** ("would thrive in H1", e.g. graduate with AP credit)
depends on the causal features only, through a merit score: the weighted sum
of their standardised values (`true_success_probability`). Changing a causal
feature moves the true outcome; changing extracurriculars does not.

The **historical label** `y_hist` is the biased H1 admission that trained the
first model: the top `h1_capacity` share of the cohort by merit *plus*
standardised extracurriculars (weight `proxy_weight`) plus noise. A model fit
on it learns to reward extracurriculars, and so tends to send the query group
S, high-achieving N2 students, to H2. Current H1 students can collectively
under-report extracurriculars to undo this (the paper's collective recourse).

With the defaults (5,000 students, seeds 0-2), a standardised logistic
regression fit on `y_hist` weighs extracurriculars about 5.2 against about
1.3-1.4 for gpa and test_score and 0.7 for study_hours; it sends about 42 % of
S to H1 (88 % of S would thrive there), against 87 % of the top-quarter-merit
N1 students, and 61 % of N1 against 17 % of N2 overall.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from recourse_sim.errors import ConfigError

SCHOOL_FEATURES: tuple[str, ...] = ("gpa", "test_score", "study_hours", "extracurriculars")
_CAUSAL = np.array([True, True, True, False])
_CAUSAL.flags.writeable = False

# Structural model of the causal features: feature = mean + loading * ability + noise.
# The true outcome standardises each with its population mean and SD (ability ~ N(0, 1)),
# fixed constants so that the outcome is a function of the features alone.
_MEAN = np.array([2.8, 0.0, 6.0])  # gpa points, test SD, hours/week
_LOADING = np.array([0.5, 0.8, 2.0])  # change per SD of ability
_NOISE = np.array([0.3, 0.6, 2.0])  # SD of the ability-independent part
_SCALE = np.sqrt(_LOADING**2 + _NOISE**2)  # population SD of each causal feature
_MERIT_WEIGHTS = np.array([0.4, 0.4, 0.2])  # gpa, test_score, study_hours


@dataclass(frozen=True, eq=False)
class SchoolCohort:
    """One cohort of 8th graders (n students, d = 4 features, see `SCHOOL_FEATURES`)."""

    X: np.ndarray  # (n, d) float64 true features
    feature_names: tuple[str, ...]
    causal: np.ndarray  # (d,) bool: True = changing it moves the true outcome
    neighbourhood: np.ndarray  # (n,) int64: 0 = N1, 1 = N2
    ability: np.ndarray  # (n,) float64 latent ability (SD units)
    y_true: np.ndarray  # (n,) int64: 1 = would thrive in H1 (causal features only)
    y_hist: np.ndarray  # (n,) int64: 1 = admitted to H1 by the biased historical rule
    query: np.ndarray  # (n,) bool: the query group S (high-achieving N2 students)
    params: Mapping[str, float]  # the `school_world` keyword arguments used

    def true_outcome(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """`true_outcome` with this cohort's outcome parameters (e.g. after features change)."""
        return true_outcome(
            X,
            rng,
            threshold=self.params["outcome_threshold"],
            sharpness=self.params["outcome_sharpness"],
        )


def _check_features(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != len(SCHOOL_FEATURES):
        raise ConfigError(
            f"school features must have shape (n, {len(SCHOOL_FEATURES)}) "
            f"{SCHOOL_FEATURES}, got {X.shape}"
        )
    return X


def _merit(X: np.ndarray) -> np.ndarray:
    return ((X[:, :3] - _MEAN) / _SCALE) @ _MERIT_WEIGHTS


def true_success_probability(
    X: np.ndarray,
    *,
    threshold: float = 0.0,  # merit at which success is a coin flip (merit units)
    sharpness: float = 2.0,  # logistic slope (per merit unit)
) -> np.ndarray:
    """P(thrive in H1) for true features X (n, 4); ignores extracurriculars.

    Merit is the 0.4/0.4/0.2 weighted sum of standardised gpa, test_score and
    study_hours (population SD of merit about 0.88).
    """
    X = _check_features(X)
    return _success_probability(_merit(X), threshold, sharpness)


def _success_probability(merit: np.ndarray, threshold: float, sharpness: float) -> np.ndarray:
    # 1 / (1 + exp(-sharpness (merit - threshold))), in place in one new array
    z = np.subtract(merit, threshold)
    z *= -sharpness
    np.exp(z, out=z)
    z += 1.0
    return np.divide(1.0, z, out=z)


def true_outcome(
    X: np.ndarray,
    rng: np.random.Generator,
    *,
    threshold: float = 0.0,  # merit at which success is a coin flip (merit units)
    sharpness: float = 2.0,  # logistic slope (per merit unit)
) -> np.ndarray:
    """Draw the true outcome (int64, 1 = thrives in H1) for true features X."""
    _check_rng(rng)
    p = true_success_probability(X, threshold=threshold, sharpness=sharpness)
    return (rng.random(len(p)) < p).astype(np.int64)


def _check_rng(rng: object) -> None:
    if not isinstance(rng, np.random.Generator):
        raise ConfigError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")


def _check_range(name: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ConfigError(f"{name} must be in [{low}, {high}], got {value!r}")


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def school_world(
    n: int,
    rng: np.random.Generator,
    *,
    frac_n2: float = 0.5,  # probability that a student lives in N2
    ability_gap: float = 0.0,  # mean ability of N1 minus N2 (ability SD units)
    extracurricular_rate_n1: float = 3.0,  # mean activities per N1 student (count)
    extracurricular_rate_n2: float = 1.0,  # mean activities per N2 student (count)
    h1_capacity: float = 0.4,  # share of the cohort historically admitted to H1 (AP places)
    proxy_weight: float = 1.5,  # weight of standardised extracurriculars in historical admission
    admission_noise: float = 0.5,  # SD of the historical admission score's noise (merit units)
    query_quantile: float = 0.75,  # S = N2 students whose merit exceeds this cohort quantile
    outcome_threshold: float = 0.0,  # merit at which the true outcome is a coin flip
    outcome_sharpness: float = 2.0,  # slope of the true-outcome logistic (per merit unit)
) -> SchoolCohort:
    """Draw one cohort of `n` students from the school-assignment world.

    All randomness comes from `rng`; the same seed gives the same cohort.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ConfigError(f"n must be a positive integer, got {n!r}")
    _check_rng(rng)
    _check_range("frac_n2", frac_n2, 0.0, 1.0)
    _check_range("h1_capacity", h1_capacity, 0.0, 1.0)
    _check_range("query_quantile", query_quantile, 0.0, 1.0)
    for name, value in [
        ("extracurricular_rate_n1", extracurricular_rate_n1),
        ("extracurricular_rate_n2", extracurricular_rate_n2),
        ("admission_noise", admission_noise),
    ]:
        _check_range(name, value, 0.0, np.inf)
    if not outcome_sharpness > 0:
        raise ConfigError(f"outcome_sharpness must be positive, got {outcome_sharpness!r}")
    params = {
        "frac_n2": frac_n2,
        "ability_gap": ability_gap,
        "extracurricular_rate_n1": extracurricular_rate_n1,
        "extracurricular_rate_n2": extracurricular_rate_n2,
        "h1_capacity": h1_capacity,
        "proxy_weight": proxy_weight,
        "admission_noise": admission_noise,
        "query_quantile": query_quantile,
        "outcome_threshold": outcome_threshold,
        "outcome_sharpness": outcome_sharpness,
    }
    draw = draw_school(n, rng, **params)
    return SchoolCohort(
        X=_readonly(draw.X),
        feature_names=SCHOOL_FEATURES,
        causal=_CAUSAL,
        neighbourhood=_readonly(draw.neighbourhood),
        ability=_readonly(draw.ability),
        y_true=_readonly(draw.y_true),
        y_hist=_readonly(draw.y_hist),
        query=_readonly(draw.query),
        params=MappingProxyType(params),
    )


class SchoolDraw(NamedTuple):
    """The arrays of one cohort as `draw_school` drew them (writeable, owned by the
    caller), plus each student's probability of thriving in H1."""

    X: np.ndarray  # (n, 4) float64 true features
    neighbourhood: np.ndarray  # (n,) int64: 0 = N1, 1 = N2
    ability: np.ndarray  # (n,) float64
    success_probability: np.ndarray  # (n,) float64: `true_success_probability(X)`
    y_true: np.ndarray  # (n,) int64
    y_hist: np.ndarray  # (n,) int64
    query: np.ndarray  # (n,) bool


def draw_school(
    n: int,
    rng: np.random.Generator,
    *,
    frac_n2: float,
    ability_gap: float,
    extracurricular_rate_n1: float,
    extracurricular_rate_n2: float,
    h1_capacity: float,
    proxy_weight: float,
    admission_noise: float,
    query_quantile: float,
    outcome_threshold: float,
    outcome_sharpness: float,
) -> SchoolDraw:
    """`school_world`'s cohort as plain arrays, without its argument checks (for callers
    whose parameters are already validated, such as a scenario's world drawing a cohort
    every round). The same random numbers in the same order, so the same cohort:
    `school_numbers`, then `school_from_numbers`."""
    numbers = school_numbers(
        n,
        [rng],
        frac_n2=frac_n2,
        extracurricular_rate_n1=extracurricular_rate_n1,
        extracurricular_rate_n2=extracurricular_rate_n2,
    )
    draw = school_from_numbers(
        numbers,
        ability_gap=ability_gap,
        h1_capacity=h1_capacity,
        proxy_weight=proxy_weight,
        admission_noise=admission_noise,
        query_quantile=query_quantile,
        outcome_threshold=outcome_threshold,
        outcome_sharpness=outcome_sharpness,
    )
    return SchoolDraw(*(a[0] for a in draw))


class SchoolNumbers(NamedTuple):
    """The random numbers of one cohort of n students, in the order they are drawn
    (arrays of shape (n,) and (n, 3); or, stacked, (B, n) and (B, n, 3) for B cohorts)."""

    neighbourhood: np.ndarray  # int64: 0 = N1, 1 = N2 (a uniform below frac_n2)
    ability_noise: np.ndarray  # standard normals
    feature_noise: np.ndarray  # (..., 3) standard normals of the causal features
    extracurriculars: np.ndarray  # float64 Poisson counts (rate by neighbourhood)
    outcome_uniform: np.ndarray  # uniforms of the true outcome
    admission_noise: np.ndarray  # standard normals of the historical admission


def school_numbers(
    n: int,
    rngs: list[np.random.Generator],
    *,
    frac_n2: float,
    extracurricular_rate_n1: float,
    extracurricular_rate_n2: float,
) -> SchoolNumbers:
    """The random numbers of one cohort of `n` from each generator of `rngs` (a stack of
    B cohorts: a batched environment's worlds, each from its own stream, or one). Each
    generator draws, in this order: ``random(n)`` (neighbourhoods), ``standard_normal(4 n)``
    (the ability's n, then the causal features' (n, 3), as two calls would give them),
    ``poisson(rates)`` (rates by neighbourhood), ``random(n)``, ``standard_normal(n)``.
    Generators are independent, so the draws go generator by generator in two passes
    (the rates of all cohorts are computed at once in between)."""
    B = len(rngs)
    uniforms, normals = np.empty((B, n)), np.empty((B, 4 * n))
    for rng, u, z in zip(rngs, uniforms, normals, strict=True):
        rng.random(out=u)
        rng.standard_normal(out=z)
    neighbourhood = (uniforms < frac_n2).astype(np.int64)
    rates = np.array([extracurricular_rate_n1, extracurricular_rate_n2])[neighbourhood]
    extracurriculars, outcome, admission = np.empty((B, n)), np.empty((B, n)), np.empty((B, n))
    for b, rng in enumerate(rngs):
        extracurriculars[b] = rng.poisson(rates[b])
        rng.random(out=outcome[b])
        rng.standard_normal(out=admission[b])
    return SchoolNumbers(
        neighbourhood,
        normals[:, :n],
        normals[:, n:].reshape(B, n, 3),
        extracurriculars,
        outcome,
        admission,
    )


def school_from_numbers(
    numbers: SchoolNumbers,
    *,
    ability_gap: float,
    h1_capacity: float,
    proxy_weight: float,
    admission_noise: float,
    query_quantile: float,
    outcome_threshold: float,
    outcome_sharpness: float,
) -> SchoolDraw:
    """The cohort (or, along the last axis, each of a stack of cohorts) that the random
    `numbers` make."""
    neighbourhood = numbers.neighbourhood
    # Shift N1 up and N2 down by half the gap so the cohort mean stays near 0
    # (``ability_gap * (0.5 - neighbourhood)``, looked up).
    shift = np.array([ability_gap * 0.5, ability_gap * (0.5 - 1)])
    ability = numbers.ability_noise + shift[neighbourhood]
    shape = ability.shape
    X = np.empty((*shape, 4))
    # merit once, for the true outcome (`true_outcome`'s draw), the admission and S
    standardised = np.empty((*shape, 3))
    # feature by feature, in one contiguous buffer: numpy is slow on a last axis of 3
    # broadcast against a stack, and on strided operands
    noise = numbers.feature_noise
    feature = np.empty(shape)
    for j in range(3):
        np.multiply(ability, _LOADING[j], out=feature)
        feature += _MEAN[j]
        feature += noise[..., j] * _NOISE[j]
        if j == 0:  # GPA scale (np.clip's result, features being finite)
            np.maximum(feature, 0.0, out=feature)
            np.minimum(feature, 4.0, out=feature)
        elif j == 2:  # hours cannot be negative
            np.maximum(feature, 0.0, out=feature)
        X[..., j] = feature
        feature -= _MEAN[j]
        np.divide(feature, _SCALE[j], out=standardised[..., j])
    extracurriculars = numbers.extracurriculars
    X[..., 3] = extracurriculars
    merit = standardised @ _MERIT_WEIGHTS
    p = _success_probability(merit, outcome_threshold, outcome_sharpness)
    y_true = (numbers.outcome_uniform < p).astype(np.int64)

    # Historical admission: a fixed number of H1 places, ranked by a score that
    # wrongly rewards the proxy; standardised within the cohort so proxy_weight
    # is comparable to merit whatever the activity rates.
    # np.std's and np.mean's arithmetic, without their overhead
    n = shape[-1]
    extra_dev = extracurriculars - np.add.reduce(extracurriculars, axis=-1, keepdims=True) / n
    extra_sd = np.sqrt(np.add.reduce(extra_dev * extra_dev, axis=-1, keepdims=True) / n)
    extra_z = extra_dev / np.where(extra_sd > 0, extra_sd, 1.0)
    hist_score = merit + proxy_weight * extra_z + admission_noise * numbers.admission_noise
    cut = _quantile(hist_score, 1.0 - h1_capacity)
    y_hist = (hist_score > cut[..., None]).astype(np.int64)

    query = (neighbourhood == 1) & (merit > _quantile(merit, query_quantile)[..., None])
    return SchoolDraw(X, neighbourhood, ability, p, y_true, y_hist, query)


def _quantile(a: np.ndarray, q: float) -> np.ndarray:
    """``np.quantile(a, q, axis=-1)`` (its default, linear method) of a float array
    without NaN, bit for bit: the two neighbouring order statistics from one partition
    and numpy's interpolation formula, without the general machinery that costs more
    than the partition itself on a cohort of a few hundred."""
    n = a.shape[-1]
    index = (n - 1) * q
    if index >= n - 1:
        return a.max(axis=-1)
    below = math.floor(index)
    part = np.partition(a, below, axis=-1)
    # the order statistics below and above
    lo, hi = part[..., below], part[..., below + 1 :].min(axis=-1)
    gamma = index - below
    diff = hi - lo
    # numpy's _lerp: from the nearer end, so that gamma = 1 gives exactly hi
    return hi - diff * (1 - gamma) if gamma >= 0.5 else lo + diff * gamma
