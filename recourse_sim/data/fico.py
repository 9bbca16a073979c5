"""FICO TransRisk score distributions and repayment curves by group.

The data of Hardt, Price & Srebro (2016) and Liu et al. (2018), "Delayed
impact of fair machine learning": on a grid of TransRisk scores 0-100 (step
0.5, a few steps missing), each group's score CDF and default rate, both in
percent in the files. The performance file gives the percentage of people at
that score who *defaulted* (it falls from ~98 % at score 0 to ~1 % at 100), so
the repayment probability is ``1 - performance / 100``, as in Liu et al.'s code.

Groups are renamed from the files' headers: "Non- Hispanic white" -> "white",
"Black" -> "black", "Hispanic" -> "hispanic", "Asian" -> "asian".
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import pandas as pd

from recourse_sim.data._resources import open_data_file
from recourse_sim.errors import ConfigError, DataError

CDF_FILE = "transrisk_cdf_by_race_ssa.csv"
PERFORMANCE_FILE = "transrisk_performance_by_race_ssa.csv"
TOTALS_FILE = "totals.csv"

# File header -> group name used throughout recourse-sim.
_GROUP_COLUMNS = {
    "Non- Hispanic white": "white",
    "Black": "black",
    "Hispanic": "hispanic",
    "Asian": "asian",
}
FICO_GROUPS: tuple[str, ...] = tuple(_GROUP_COLUMNS.values())


@dataclass(frozen=True, eq=False)
class FicoData:
    """FICO score distributions (`cdf`) and repayment curves (`repay`) per group.

    Arrays are read-only and shared by every caller of `load_fico`.
    """

    scores: np.ndarray  # (m,) float64 score grid, increasing, 0..100
    cdf: Mapping[str, np.ndarray]  # group -> (m,) P(score <= s), nondecreasing, ends at 1
    repay: Mapping[str, np.ndarray]  # group -> (m,) P(repay | score = s) in [0, 1]
    group_sizes: Mapping[str, int]  # group -> number of people in the FICO sample
    groups: tuple[str, ...]

    def _check_group(self, group: str) -> None:
        if group not in self.cdf:
            raise ConfigError(
                f"unknown FICO group {group!r}; valid groups: {', '.join(self.groups)}"
            )

    def sample_scores(self, group: str, size: int, rng: np.random.Generator) -> np.ndarray:
        """Draw `size` scores of `group` by inverse-CDF sampling.

        The CDF is interpolated linearly between grid points, so scores are
        continuous in [0, 100]; the mass the files put at score 0 (cdf[0] > 0)
        stays an atom at 0.
        """
        self._check_group(group)
        if not isinstance(rng, np.random.Generator):
            raise ConfigError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        cdf = self.cdf[group]
        u = rng.random(size)
        s = self.scores
        # cdf[i - 1] <= u < cdf[i], so the segment rises and the division is safe;
        # flat stretches of the CDF (no mass) are never selected.
        i = np.searchsorted(cdf, u, side="right")
        atom = i == 0  # u < cdf[0]: the mass at the lowest score
        i = np.maximum(i, 1)
        rise = np.where(atom, 1.0, cdf[i] - cdf[i - 1])
        frac = (u - cdf[i - 1]) / rise
        return np.where(atom, s[0], s[i - 1] + frac * (s[i] - s[i - 1]))

    def repay_probability(self, group: str, scores: np.ndarray | float) -> np.ndarray:
        """Repayment probability of `group` at arbitrary scores (linear interpolation,
        clamped to the grid's ends): ``np.interp`` bit for bit (`_grid_interp`)."""
        self._check_group(group)
        x = np.asarray(scores, dtype=np.float64)
        return _grid_interp(x, self.scores, self.repay[group][None], None, *self._cells)

    def repay_probabilities(
        self, groups: tuple[str, ...], group: np.ndarray, scores: np.ndarray
    ) -> np.ndarray:
        """`repay_probability` of each person: `group` (n,) indexes `groups`, `scores` (n,)
        (one pass for every group)."""
        for g in groups:
            self._check_group(g)
        curves = np.stack([self.repay[g] for g in groups])
        x = np.asarray(scores, dtype=np.float64)
        return _grid_interp(x, self.scores, curves, np.asarray(group), *self._cells)

    @functools.cached_property
    def _cells(self) -> tuple[float, np.ndarray]:
        """The score grid cut into cells of its least step h: (h, per cell [s₀ + k h,
        s₀ + (k + 1) h) the grid segment its left end lies in)."""
        h = float(np.diff(self.scores).min())
        cells = int(np.ceil((self.scores[-1] - self.scores[0]) / h)) + 1
        edges = self.scores[0] + h * np.arange(cells)
        return h, np.searchsorted(self.scores, edges, side="right") - 1


def _grid_interp(x, xp: np.ndarray, curves: np.ndarray, curve, h: float, segment: np.ndarray):
    """``np.interp(x, xp, curves[curve])`` bit for bit, number by number (its formula,
    slope · (x − xp[j]) + fp[j], on the segment xp[j] ≤ x < xp[j + 1]; its ends beyond
    the grid): `curves` (k, m), `curve` each number's row of them (None: row 0). Each
    segment is found through the grid's cells of width `h` (`segment`: each cell's)
    rather than by numpy's binary search, which costs 60 ns a number on unsorted scores."""
    shape, x = np.shape(x), np.ravel(x)
    m = len(xp)
    # each number's curve as an offset into the flat curves
    base = np.zeros(len(x), np.intp) if curve is None else np.ravel(curve) * m
    flat = curves.ravel()
    below = x < xp[0]
    out = flat.take(np.where(below, base, base + (m - 1)))  # (each curve's ends)
    at = np.flatnonzero(~(below | (x >= xp[-1])))  # (on the grid, or NaN)
    x, base = x.take(at), base.take(at)
    last = m - 2  # (the last segment)
    cell = np.fmin(np.fmax((x - xp[0]) / h, 0.0), len(segment) - 1)  # (fmax: NaN → 0)
    j = np.minimum(segment.take(cell.astype(np.intp)), last)
    while True:  # a cell found one off by rounding: step to the segment holding x
        left, right = xp.take(j), xp.take(j + 1)
        down, up = (x < left) & (j > 0), (x >= right) & (j < last)
        if not (down.any() or up.any()):
            break
        j += up
        j -= down
    j += base
    f_left = flat.take(j)
    slope = (flat.take(j + 1) - f_left) / (right - left)
    out.put(at, slope * (x - left) + f_left)
    return out.reshape(shape)[()]  # (a number for a number, as np.interp)


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float64)
    a.flags.writeable = False
    return a


def _read_table(file: str) -> pd.DataFrame:
    with open_data_file(file) as stream:
        df = pd.read_csv(stream)
        missing = [c for c in _GROUP_COLUMNS if c not in df.columns]
        if missing:
            raise DataError(f"data file {file!r} is corrupt: missing columns {missing}")
        df = df.astype({c: np.float64 for c in _GROUP_COLUMNS})
        if df[list(_GROUP_COLUMNS)].isna().to_numpy().any():
            raise DataError(f"data file {file!r} is corrupt: missing values")
    return df


@functools.lru_cache(maxsize=1)
def _load_fico_cached() -> FicoData:
    cdf_df = _read_table(CDF_FILE)
    perf_df = _read_table(PERFORMANCE_FILE)
    totals_df = _read_table(TOTALS_FILE)
    scores = cdf_df["Score"].to_numpy(dtype=np.float64)
    if not np.array_equal(scores, perf_df["Score"].to_numpy(dtype=np.float64)):
        raise DataError(f"data file {PERFORMANCE_FILE!r} has a score grid unlike {CDF_FILE!r}")
    if np.any(np.diff(scores) <= 0):
        raise DataError(f"data file {CDF_FILE!r} is corrupt: scores are not increasing")
    cdf, repay, sizes = {}, {}, {}
    for column, group in _GROUP_COLUMNS.items():
        c = cdf_df[column].to_numpy() / 100.0
        if np.any(np.diff(c) < 0) or c.min() < 0 or abs(c[-1] - 1.0) > 1e-9:
            raise DataError(f"data file {CDF_FILE!r} is corrupt: column {column!r} is not a CDF")
        r = 1.0 - perf_df[column].to_numpy() / 100.0
        if r.min() < 0 or r.max() > 1:
            raise DataError(f"data file {PERFORMANCE_FILE!r} is corrupt: {column!r} not in 0-100")
        cdf[group], repay[group] = _readonly(c), _readonly(r)
        sizes[group] = int(totals_df[column].iloc[0])
    return FicoData(
        scores=_readonly(scores),
        cdf=MappingProxyType(cdf),
        repay=MappingProxyType(repay),
        group_sizes=MappingProxyType(sizes),
        groups=FICO_GROUPS,
    )


def load_fico() -> FicoData:
    """Load the bundled FICO data (cached; arrays read-only).

    Raises `DataError` naming the file when a bundled file is missing or corrupt.
    """
    return _load_fico_cached()
