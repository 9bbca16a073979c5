"""Intervals over seeds: the one place the project computes them.

Every analysis reports a mean over seeds with the half-width of its Student-t 95 %
interval, and every comparison as a paired difference (the same seeds on both sides)
with its interval and the paired t-test's p-value. With n values the half-width is
t_{(1+c)/2, n-1} · s / √n (s the sample standard deviation); a normal quantile (1.96)
would be 29 % too narrow at n = 5. Below two values there is no interval: the
half-width and the p-value are NaN (never 0, which would claim certainty).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["MeanCI", "PairedDifference", "mean_ci", "paired_difference", "t_half_width"]


@dataclass(frozen=True)
class MeanCI:
    """A mean over n values and the half-width of its confidence interval."""

    mean: float
    """mean of the finite values (NaN if there are none)"""
    half_width: float
    """half-width of the Student-t interval (NaN below two values)"""
    n: int
    """number of finite values"""


@dataclass(frozen=True)
class PairedDifference:
    """The mean of paired differences a − b, its interval and the paired t-test."""

    mean: float
    """mean of a − b over the pairs with both values finite"""
    half_width: float
    """half-width of the Student-t interval of that mean (NaN below two pairs)"""
    p_value: float
    """paired t-test's p-value (NaN below two pairs or when every difference is equal)"""
    n: int
    """number of pairs"""


def t_half_width(std, n, confidence: float = 0.95):
    """Half-width of the Student-t interval of a mean, t_{(1+c)/2, n-1} · std / √n, for
    sample standard deviations `std` (ddof 1) and counts `n`: scalars, arrays, a pandas
    Series (kept with its index) or a DataFrame with one row per count in `n` (a
    groupby's ``std()`` beside its ``size()``); NaN where n < 2."""
    n_arr = np.asarray(n, dtype=np.float64)
    ok = n_arr >= 2
    dof, count = np.where(ok, n_arr - 1, 1), np.where(ok, n_arr, 1)
    factor = np.where(ok, stats.t.ppf(0.5 + confidence / 2, dof) / np.sqrt(count), np.nan)
    if isinstance(std, pd.DataFrame):
        return std.mul(factor, axis=0)
    half = np.asarray(std, dtype=np.float64) * factor
    if isinstance(std, pd.Series):
        return pd.Series(half, index=std.index, name=std.name)
    return half if np.ndim(half) else float(half)


def mean_ci(values, confidence: float = 0.95) -> MeanCI:
    """Mean of the finite `values` and the half-width of its Student-t interval."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return MeanCI(float("nan"), float("nan"), 0)
    std = float(v.std(ddof=1)) if len(v) > 1 else float("nan")
    return MeanCI(float(v.mean()), float(t_half_width(std, len(v), confidence)), len(v))


def paired_difference(
    a,
    b,
    confidence: float = 0.95,
    alternative: Literal["two-sided", "greater", "less"] = "two-sided",
) -> PairedDifference:
    """a − b paired elementwise (the same seed on both sides): mean, the half-width of
    its Student-t interval, and the p-value of the paired t-test (`alternative` as in
    `scipy.stats.ttest_rel`: ``greater`` tests mean(a − b) > 0). Pairs with a
    non-finite side are left out."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired values differ in length: {len(a)} and {len(b)}")
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    diff = mean_ci(a - b, confidence)
    p = float("nan")
    if diff.n >= 2 and np.ptp(a - b) > 0:
        p = float(stats.ttest_rel(a, b, alternative=alternative).pvalue)
    return PairedDifference(diff.mean, diff.half_width, p, diff.n)
