"""The shifts recourse causes, measured each round (Altmeyer, Angela, Buszydlik, Dobiczek,
van Deursen & Liem, "Endogenous Macrodynamics in Algorithmic Recourse", SaTML 2023).

With ``world.shift_metrics`` the ``all`` row of metrics.csv gets, after each round's
update:

- ``domain_mmd``: the unbiased estimate of the squared maximum mean discrepancy (MMD²)
  between the rows labelled with the favourable class that the model was first fit on
  (round 0: the history) and those it is updated on this round (after collective
  recourse and, with ``honour_recourse``, honoured labels): the domain shift of the
  target class. Features are standardised by the history's mean and SD; the kernel is
  Gaussian, k(x, y) = exp(−‖x − y‖² / (2ℓ²)), with ℓ = ``length_scale`` or, by default,
  the median pairwise distance of the round-0 sample (the median heuristic, fixed for
  the run). Each sample is a seeded subsample of at most ``max_rows`` rows.
- ``domain_mmd_p``: its permutation p-value: (1 + the number of ``permutations`` random
  relabellings of the pooled rows whose MMD² is at least the observed one) /
  (1 + ``permutations``); empty with ``permutations: 0``.
- ``model_mmd``: MMD² between the first model's and the updated model's P(favourable) on
  a fixed probe set (the first ``probe_size`` rows of the history), Gaussian kernel with
  ℓ = 0.5 (probability units; Altmeyer et al.'s default).
- ``disagreement``: Pr(h₀(x) ≠ hₜ(x)) on the probe set: the share of probe rows whose
  most probable class differs between the first and the updated model.
- ``decisiveness``: | ‖p₀ − ½‖₂ − ‖pₜ − ½‖₂ | over the probe set, p the P(favourable)
  (Altmeyer et al.'s definition: a norm over the probe set, not a mean).
- ``theta_0``, ``theta_1``, …: the updated model's parameters (`Learner.param_vector`).

Random subsamples and permutations of round t come from ``default_rng([key, t])``, key
the first draw of the run's stream ``shift`` (`recourse_sim.env.streams`), so they are
the same in every run of a seed and after a resume, and draw nothing from other streams.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "MODEL_LENGTH_SCALE",
    "SHIFT_STREAM",
    "ShiftTracker",
    "decisiveness",
    "disagreement",
    "honour",
    "median_length_scale",
    "mmd2_unbiased",
    "mmd_permutation_p",
]

SHIFT_STREAM = "shift"
MODEL_LENGTH_SCALE = 0.5  # kernel length-scale of model_mmd (probability units)


def _sq_dists(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances (m, n), clipped at 0 against rounding."""
    d = (X * X).sum(1)[:, None] + (Y * Y).sum(1)[None, :] - 2.0 * X @ Y.T
    return np.maximum(d, 0.0)


def gaussian_kernel(X: np.ndarray, Y: np.ndarray, length_scale: float) -> np.ndarray:
    """k(x, y) = exp(−‖x − y‖² / (2ℓ²)) for every pair of rows, (m, n)."""
    return np.exp(-_sq_dists(X, Y) / (2.0 * length_scale**2))


def mmd2_unbiased(X: np.ndarray, Y: np.ndarray, length_scale: float) -> float:
    """The unbiased MMD² estimate (Gretton et al. 2012, Eq. 3) of samples X (m, d) and
    Y (n, d) under the Gaussian kernel: the mean of k over distinct pairs within X, and
    within Y, minus twice the mean over X × Y (m, n ≥ 2)."""
    pooled = np.vstack([X, Y])
    member = np.zeros((len(pooled), 1))
    member[: len(X)] = 1.0
    return float(_split_mmd2(gaussian_kernel(pooled, pooled, length_scale), member)[0])


def _split_mmd2(K: np.ndarray, member: np.ndarray) -> np.ndarray:
    """Unbiased MMD² for each split of the pooled rows of the kernel matrix K (N, N, unit
    diagonal): column b of `member` (N, B) marks sample X with 1, sample Y with 0."""
    m = member.sum(0)
    n = len(K) - m
    other = 1.0 - member
    Km = K @ member
    xx = (member * Km).sum(0)  # s'Ks
    xy = (other * Km).sum(0)  # (1−s)'Ks
    yy = K.sum() - 2.0 * xy - xx
    return (xx - m) / (m * (m - 1)) + (yy - n) / (n * (n - 1)) - 2.0 * xy / (m * n)


def mmd_permutation_p(
    X: np.ndarray,
    Y: np.ndarray,
    length_scale: float,
    permutations: int,
    rng: np.random.Generator,
) -> tuple[float, float]:
    """(MMD², p-value): the share of `permutations` random splits of the pooled rows into
    samples of X's and Y's sizes whose MMD² is at least the observed one, (1 + count) /
    (1 + permutations)."""
    pooled = np.vstack([X, Y])
    K = gaussian_kernel(pooled, pooled, length_scale)
    N, m = len(pooled), len(X)
    member = np.zeros((N, permutations + 1))
    member[:m, 0] = 1.0
    for b in range(permutations):
        member[rng.permutation(N)[:m], b + 1] = 1.0
    values = _split_mmd2(K, member)
    count = int(np.count_nonzero(values[1:] >= values[0]))
    return float(values[0]), (1.0 + count) / (1.0 + permutations)


def median_length_scale(X: np.ndarray) -> float:
    """The median heuristic: the median Euclidean distance between distinct rows of X
    (1 where that is 0)."""
    d = np.sqrt(_sq_dists(X, X)[np.triu_indices(len(X), 1)])
    scale = float(np.median(d)) if len(d) else 1.0
    return scale if scale > 0 else 1.0


def disagreement(p0: np.ndarray, pt: np.ndarray) -> float:
    """Pr(h₀(x) ≠ hₜ(x)): the share of rows whose most probable class differs (p: (n, k))."""
    return float(np.mean(p0.argmax(1) != pt.argmax(1)))


def decisiveness(p0: np.ndarray, pt: np.ndarray) -> float:
    """| ‖p₀ − ½‖₂ − ‖pₜ − ½‖₂ | of two vectors of P(favourable) over the probe set."""
    return float(abs(np.linalg.norm(p0 - 0.5) - np.linalg.norm(pt - 0.5)))


def _subsample(X: np.ndarray, cap: int, rng: np.random.Generator) -> np.ndarray:
    """X, or `cap` of its rows drawn without replacement (in their order)."""
    if len(X) <= cap:
        return X
    return X[np.sort(rng.choice(len(X), cap, replace=False))]


class ShiftTracker:
    """The round-0 references and the per-round shift measures (module docstring).

    `spec`: the world's ``shift_metrics`` (`ShiftMetricsSpec`); `favourable`: the
    favourable class."""

    def __init__(self, spec: Any, favourable: int):
        self.spec = spec
        self.favourable = favourable
        self._history: tuple[np.ndarray, np.ndarray] | None = None
        self.state: dict[str, Any] = {}

    def remember_history(self, X: np.ndarray, y: np.ndarray) -> None:
        """The rows the first model is fit on (at reset, before the fit)."""
        self._history = (np.asarray(X, np.float64), np.asarray(y))

    def start(self, learner: Any, key: int) -> None:
        """Fix the references for the run, from the history and the fitted first model."""
        assert self._history is not None
        X, y = self._history
        self._history = None
        mean = X.mean(0)
        scale = X.std(0)
        scale = np.where(scale > 0, scale, 1.0)
        rng = np.random.default_rng([key, 0])
        reference = _subsample((X[y == self.favourable] - mean) / scale, self.spec.max_rows, rng)
        length = self.spec.length_scale
        if length == "median":
            length = median_length_scale(reference)
        probe = X[: self.spec.probe_size]
        self.state = {
            "key": int(key),
            "mean": mean,
            "scale": scale,
            "reference": reference,
            "length_scale": float(length),
            "probe": probe,
            "probe_proba": learner.predict_proba(probe),
        }

    def round_stats(
        self, learner: Any, X_train: np.ndarray, y_train: np.ndarray, round_: int
    ) -> dict[str, float | None]:
        """The round's shift measures and θ, for the ``all`` row."""
        st = self.state
        rng = np.random.default_rng([st["key"], round_])
        out: dict[str, float | None] = {}
        target = (X_train[y_train == self.favourable] - st["mean"]) / st["scale"]
        target = _subsample(target, self.spec.max_rows, rng)
        reference = st["reference"]
        if len(target) >= 2 and len(reference) >= 2:
            if self.spec.permutations:
                value, p = mmd_permutation_p(
                    reference, target, st["length_scale"], self.spec.permutations, rng
                )
            else:
                value, p = mmd2_unbiased(reference, target, st["length_scale"]), None
            out["domain_mmd"], out["domain_mmd_p"] = value, p
        else:  # fewer than two target rows: no estimate
            out["domain_mmd"], out["domain_mmd_p"] = None, None
        p0, pt = st["probe_proba"], learner.predict_proba(st["probe"])
        fav = self.favourable
        rows = _subsample(np.arange(len(p0))[:, None], self.spec.max_rows, rng)[:, 0]
        out["model_mmd"] = mmd2_unbiased(
            p0[rows, fav][:, None], pt[rows, fav][:, None], MODEL_LENGTH_SCALE
        )
        out["disagreement"] = disagreement(p0, pt)
        out["decisiveness"] = decisiveness(p0[:, fav], pt[:, fav])
        for i, value in enumerate(learner.param_vector()):
            out[f"theta_{i}"] = float(value)
        return out

    def get_state(self) -> dict[str, Any]:
        return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in self.state.items()}

    def set_state(self, state: dict[str, Any]) -> None:
        self.state = {
            k: (np.array(v, dtype=np.float64) if k not in ("key", "length_scale") else v)
            for k, v in state.items()
        }
        self.state["key"] = int(self.state["key"])
        self.state["length_scale"] = float(self.state["length_scale"])


def honour(
    honoured: np.ndarray,
    person: np.ndarray,
    recorded: np.ndarray,
    now: np.ndarray,
    favourable: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``world.honour_recourse``: (the labels recorded for this round's applicants, the
    sorted ids of everyone honoured so far). People whose recourse got the favourable
    decision (`now`), this round or before (`honoured`), are recorded with the
    favourable label: implemented recourse is honoured (Altmeyer et al.)."""
    honoured = np.union1d(honoured, person[now]).astype(np.int64)
    return np.where(np.isin(person, honoured), favourable, recorded), honoured
