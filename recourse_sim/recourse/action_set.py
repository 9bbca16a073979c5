"""Action sets: which perturbations δ a person can make to their features x.

An `ActionSet` is the feasible set

    A(x) = { δ : δ_j = 0 for immutable j,  δ_j ≥ 0 for increase-only j,  δ_j ≤ 0 for
             decrease-only j,  |δ_j| ≤ max_change_j,  lower_j ≤ x_j + δ_j ≤ upper_j,
             ‖w ⊙ δ‖_p ≤ ε }

i.e. a per-row box intersected with a weighted p-norm ball. Doing nothing (δ = 0) is
always feasible: a bound that x already violates is widened to include x itself.
`project` is the exact Euclidean projection onto A(x) (closed form for p = ∞, a
vectorised bracketed root search on the KKT multiplier for p ∈ {1, 2}, stopped on the
feasible side), so every recourse method and population that goes through it stays feasible.

Feature types. Each feature is ``continuous`` (the default), ``integer`` (δ_j a whole
number of steps), ``binary`` (x_j + δ_j ∈ {0, 1}), ``ordinal`` (x_j + δ_j one of its
ordered levels; monotone rules follow the level order) or ``categorical`` (one column of
level codes, or a one-hot group of 0/1 columns with exactly one at 1, which moves as a
whole). Staying put is allowed whatever x is. With a discrete feature A(x) is no longer
convex: `project_rows` (and `projection`, which descents use on their iterates) projects
onto its relaxation, the box (narrowed to each discrete feature's range) intersected with
the ball, and `repair` moves a relaxed δ onto the typed set: each discrete feature to the
nearest allowed value within the box, or, where that breaks the budget, to the nearest
allowed value between x and x + δ (never costlier than δ, so always feasible). `project`
is the two in turn. `rounded` gives the roundings themselves, for repairs that know which
direction helps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from recourse_sim.errors import ConfigError, InfeasibleActionSetError
from recourse_sim.lazy import LazyModule
from recourse_sim.recourse.roots import budget_excess, feasible_root

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds this without torch
    torch = LazyModule("torch", globals())

Features = Sequence[int | str]
FEATURE_TYPES = ("continuous", "integer", "binary", "ordinal", "categorical")

# Relative distance below which a value counts as on a step or level (float rounding).
_HAIR = 1e-12


def _mask(n: int, which: Features, names: tuple[str, ...] | None, field_name: str) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    for f in which:
        if isinstance(f, str):
            if names is None or f not in names:
                known = ", ".join(names) if names else "none (no feature_names given)"
                raise ConfigError(f"{field_name}: unknown feature {f!r}; known features: {known}")
            mask[names.index(f)] = True
        elif isinstance(f, int | np.integer) and 0 <= f < n:
            mask[int(f)] = True
        else:
            raise ConfigError(f"{field_name}: feature index {f!r} out of range 0..{n - 1}")
    return mask


def _by_feature(n: int, value, names: tuple[str, ...] | None, field_name: str) -> dict[int, object]:
    """{feature index: value} from a mapping by name or index, or a length-n sequence."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        out = {}
        for key, v in value.items():
            out[int(np.flatnonzero(_mask(n, [key], names, field_name))[0])] = v
        return out
    if isinstance(value, str) or len(value) != n:
        raise ConfigError(f"{field_name}: give a mapping by feature or a list of {n} values")
    return dict(enumerate(value))


def _per_feature(n: int, value, default: float, field_name: str) -> np.ndarray:
    if value is None:
        return np.full(n, default, dtype=np.float64)
    if isinstance(value, dict):
        raise ConfigError(f"{field_name}: give a scalar or a length-{n} list, not a mapping")
    arr = (
        np.broadcast_to(np.asarray(value, dtype=np.float64), (n,)).copy()
        if np.ndim(value) == 0
        else np.asarray(value, dtype=np.float64)
    )
    if arr.shape != (n,):
        raise ConfigError(f"{field_name}: expected {n} values, got shape {arr.shape}")
    if np.isnan(arr).any():
        raise ConfigError(f"{field_name}: contains NaN")
    return arr


@dataclass(frozen=True, eq=False)
class ActionSet:
    """Feasible perturbations of d features.

    Parameters
    ----------
    n_features: number of features d.
    immutable, increase_only, decrease_only: features (indices or names) that cannot
        change / can only go up / can only go down.
    lower, upper: bounds on the *resulting* feature value x + δ (scalar or length d;
        ±inf for none).
    max_change: bound on |δ_j| per feature (scalar or length d; inf for none).
    cost_weights: w ≥ 0 per feature; cost(δ) = ‖w ⊙ δ‖_p.
    p: the norm, 1, 2 or inf.
    epsilon: the budget ε ≥ 0 on cost(δ).
    feature_names: optional names, so features can be given by name.
    feature_types: per feature (a mapping by name or index, or a list of d) one of
        ``continuous`` (default), ``integer``, ``binary``, ``ordinal``, ``categorical``.
    steps: per integer feature its step (> 0, default 1): δ_j is a whole number of steps.
    levels: per ordinal feature its ordered levels, per single-column categorical feature
        its level codes: x_j + δ_j must be one of them.
    onehot_groups: the 0/1 columns of each one-hot categorical feature (exactly one at 1;
        they are categorical whatever feature_types says of them).
    """

    n_features: int
    immutable: Features = ()
    increase_only: Features = ()
    decrease_only: Features = ()
    lower: object = None
    upper: object = None
    max_change: object = None
    cost_weights: object = None
    p: float = 2
    epsilon: float = 1.0
    feature_names: Sequence[str] | None = None
    feature_types: object = None
    steps: object = None
    levels: Mapping | None = None
    onehot_groups: Sequence[Features] = ()
    # resolved arrays (derived in __post_init__)
    immutable_mask: np.ndarray = field(init=False, repr=False)
    increase_mask: np.ndarray = field(init=False, repr=False)
    decrease_mask: np.ndarray = field(init=False, repr=False)
    lower_: np.ndarray = field(init=False, repr=False)
    upper_: np.ndarray = field(init=False, repr=False)
    max_change_: np.ndarray = field(init=False, repr=False)
    weights_: np.ndarray = field(init=False, repr=False)
    types_: np.ndarray = field(init=False, repr=False)  # (d,) str, one of FEATURE_TYPES
    step_: np.ndarray = field(init=False, repr=False)  # (d,) integer step, 0 elsewhere
    # {j: sorted allowed values} of ordinal, single-column categorical and binary ({0, 1})
    levels_: dict = field(init=False, repr=False)
    onehot_groups_: tuple = field(init=False, repr=False)  # index arrays of one-hot groups

    def __post_init__(self) -> None:
        n = self.n_features
        if not isinstance(n, int | np.integer) or n < 1:
            raise ConfigError(f"n_features must be a positive integer, got {n!r}")
        names = tuple(self.feature_names) if self.feature_names is not None else None
        if names is not None and len(names) != n:
            raise ConfigError(f"feature_names has {len(names)} names for {n} features")
        if self.p not in (1, 2, np.inf):
            raise ConfigError(f"p must be 1, 2 or inf, got {self.p!r}")
        if not np.isfinite(self.epsilon) or self.epsilon < 0:
            raise InfeasibleActionSetError(
                f"epsilon must be a finite number >= 0, got {self.epsilon!r}"
            )
        imm = _mask(n, self.immutable, names, "immutable")
        inc = _mask(n, self.increase_only, names, "increase_only")
        dec = _mask(n, self.decrease_only, names, "decrease_only")
        lower = _per_feature(n, self.lower, -np.inf, "lower")
        upper = _per_feature(n, self.upper, np.inf, "upper")
        max_change = _per_feature(n, self.max_change, np.inf, "max_change")
        weights = _per_feature(n, self.cost_weights, 1.0, "cost_weights")
        label = names or tuple(str(j) for j in range(n))
        for what, clash in (("immutable", imm & (inc | dec)), ("increase_only", inc & dec)):
            if clash.any():
                other = "decrease_only" if what == "increase_only" else "monotone"
                raise InfeasibleActionSetError(
                    f"feature {label[int(np.argmax(clash))]!r} is declared both {what} and {other}"
                )
        types, steps, levels, groups = self._resolve_types(n, names, label, inc, dec)
        # a discrete feature's values lie within its levels' range (binary: [0, 1])
        lower, upper = lower.copy(), upper.copy()  # (may be the caller's arrays)
        for j, values in levels.items():
            lower[j], upper[j] = max(lower[j], values[0]), min(upper[j], values[-1])
        for g in groups:
            lower[g], upper[g] = np.maximum(lower[g], 0.0), np.minimum(upper[g], 1.0)
            if (upper[g] < 1.0).all():
                raise ConfigError(
                    f"onehot_groups: the group of {label[g[0]]!r} has no allowed level "
                    "(no column may be 1)"
                )
        if (bad := lower > upper).any():
            j = int(np.argmax(bad))
            raise InfeasibleActionSetError(
                f"feature {label[j]!r}: lower bound {lower[j]} is above upper bound {upper[j]}"
            )
        if (bad := max_change < 0).any():
            j = int(np.argmax(bad))
            raise InfeasibleActionSetError(f"feature {label[j]!r}: max_change {max_change[j]} < 0")
        if (bad := (weights < 0) | ~np.isfinite(weights)).any():
            j = int(np.argmax(bad))
            raise ConfigError(f"feature {label[j]!r}: cost weight {weights[j]} must be >= 0")
        for name, value in (
            ("immutable_mask", imm),
            ("increase_mask", inc),
            ("decrease_mask", dec),
            ("lower_", lower),
            ("upper_", upper),
            ("max_change_", max_change),
            ("weights_", weights),
            ("types_", types),
            ("step_", steps),
        ):
            value.flags.writeable = False
            object.__setattr__(self, name, value)
        object.__setattr__(self, "levels_", levels)
        object.__setattr__(self, "onehot_groups_", groups)

    def _resolve_types(self, n, names, label, inc, dec):
        """(types_, step_, levels_, onehot_groups_) from the declared types, checked."""
        types = np.full(n, "continuous", dtype=object)
        for j, kind in _by_feature(n, self.feature_types, names, "feature_types").items():
            if kind not in FEATURE_TYPES:
                raise ConfigError(
                    f"feature_types: feature {label[j]!r} has type {kind!r}; "
                    f"expected one of {', '.join(FEATURE_TYPES)}"
                )
            types[j] = kind
        groups = []
        in_group = np.zeros(n, dtype=bool)
        for i, group in enumerate(self.onehot_groups):
            g = np.flatnonzero(_mask(n, group, names, "onehot_groups"))
            if len(g) == 0:
                raise ConfigError(f"onehot_groups: group {i} has no allowed level (no columns)")
            if in_group[g].any():
                j = int(g[np.argmax(in_group[g])])
                raise ConfigError(f"onehot_groups: feature {label[j]!r} is in two groups")
            if (bad := ~np.isin(types[g], ("continuous", "binary", "categorical"))).any():
                j = int(g[np.argmax(bad)])
                raise ConfigError(
                    f"onehot_groups: feature {label[j]!r} is declared {types[j]}, not a 0/1 column"
                )
            in_group[g] = True
            types[g] = "categorical"
            groups.append(g)
        step = np.zeros(n)
        given_steps = _by_feature(n, self.steps, names, "steps")
        if isinstance(self.steps, Mapping):
            for j in given_steps:
                if types[j] != "integer":
                    raise ConfigError(
                        f"steps: feature {label[j]!r} is {types[j]}; only integer features "
                        "have a step"
                    )
        for j in np.flatnonzero(types == "integer"):
            value = given_steps.get(int(j), 1.0)
            if value is None:
                value = 1.0
            if not (np.isfinite(float(value)) and float(value) > 0):
                raise ConfigError(
                    f"steps: integer feature {label[j]!r} has step {value}; it must be > 0"
                )
            step[j] = float(value)
        levels = {}
        given_levels = _by_feature(n, self.levels, names, "levels")
        for j, values in given_levels.items():
            if types[j] not in ("ordinal", "categorical") or in_group[j]:
                raise ConfigError(
                    f"levels: feature {label[j]!r} is {types[j]}"
                    f"{' (a one-hot column)' if in_group[j] else ''}; only ordinal and "
                    "single-column categorical features have levels"
                )
            arr = np.unique(np.asarray(values, dtype=np.float64))
            if np.isnan(arr).any():
                raise ConfigError(f"levels: feature {label[j]!r} has a NaN level")
            levels[j] = arr
        for j in np.flatnonzero(types == "binary"):
            levels[int(j)] = np.array([0.0, 1.0])
        for j in np.flatnonzero(np.isin(types, ("ordinal", "categorical")) & ~in_group):
            if len(levels.get(int(j), ())) == 0:
                raise ConfigError(f"levels: {types[j]} feature {label[j]!r} has no allowed level")
        for rule, mask in (("increase_only", inc), ("decrease_only", dec)):
            if (categorical := (types == "categorical") & mask).any():
                j = int(np.argmax(categorical))
                raise ConfigError(
                    f"{rule}: feature {label[j]!r} is categorical; a monotone rule needs an "
                    "order of its levels (declare it ordinal)"
                )
        for value in levels.values():
            value.flags.writeable = False
        return types.astype(str), step, dict(sorted(levels.items())), tuple(groups)

    @property
    def discrete_mask(self) -> np.ndarray:
        """Mask of the features that are not continuous."""
        return self.types_ != "continuous"

    @property
    def typed(self) -> bool:
        """Whether any feature is not continuous."""
        return bool(self.discrete_mask.any())

    def typed_actionable_names(self) -> list[str]:
        """Names (or indices, without names) of the features that can change but not
        continuously: their responses are step functions of a model."""
        label = self.feature_names or [str(j) for j in range(self.n_features)]
        return [label[j] for j in np.flatnonzero(self.actionable & self.discrete_mask)]

    # ------------------------------------------------------------------------------
    @property
    def actionable(self) -> np.ndarray:
        """Mask of the features that can change at all."""
        return ~self.immutable_mask & (self.max_change_ > 0)

    def replace(self, **changes) -> ActionSet:
        """A copy with some declared fields changed (e.g. a different budget)."""
        fields = {
            k: getattr(self, k)
            for k in (
                "n_features immutable increase_only decrease_only lower upper max_change "
                "cost_weights p epsilon feature_names feature_types steps levels onehot_groups"
            ).split()
        }
        return ActionSet(**(fields | changes))

    def box(self, X):
        """Per-row bounds (lo, hi) on δ from everything but the norm ball; lo ≤ 0 ≤ hi."""
        if isinstance(X, torch.Tensor):
            lo, hi = self._box(X.detach().numpy().astype(np.float64))
            return torch.from_numpy(lo).to(X.dtype), torch.from_numpy(hi).to(X.dtype)
        return self._box(np.asarray(X, dtype=np.float64))

    def _box(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`box` on a float64 array, as float64 arrays."""
        with np.errstate(invalid="ignore"):  # inf − inf cannot occur: X is finite
            hi, lo = self.upper_ - X, self.lower_ - X
            if np.isfinite(self.max_change_).any():  # (an infinite one changes nothing)
                np.minimum(self.max_change_, hi, out=hi)
                np.maximum(-self.max_change_, lo, out=lo)
        np.copyto(hi, 0.0, where=self.decrease_mask | self.immutable_mask)
        np.copyto(lo, 0.0, where=self.increase_mask | self.immutable_mask)
        # staying put is always allowed, even where x already breaks a bound
        return np.minimum(lo, 0.0, out=lo), np.maximum(hi, 0.0, out=hi)

    def cost(self, delta):
        """cost(δ) = ‖w ⊙ δ‖_p per row."""
        if isinstance(delta, np.ndarray) and delta.ndim == 2 and self.p != np.inf:
            return self._norm(delta.astype(np.float64, copy=False))  # (the common case)
        dt, to_out = _to_torch(delta)
        w = torch.tensor(self.weights_, dtype=dt.dtype)
        return to_out(torch.linalg.vector_norm(w * dt, ord=self.p, dim=-1))

    def contains(self, X, delta, tol: float = 1e-9) -> np.ndarray:
        """Which rows of δ are feasible (within `tol`), feature types included."""
        X = np.asarray(X, dtype=np.float64)
        lo, hi = self._box(X)
        d = np.asarray(delta, dtype=np.float64)
        in_box = ((d >= lo - tol) & (d <= hi + tol)).all(axis=-1)
        ok = in_box & (np.asarray(self.cost(d)) <= self.epsilon + tol)
        if self.typed:
            ok &= self.respects_types(X, d, tol)
        return ok

    def respects_types(self, X, delta, tol: float = 1e-9) -> np.ndarray:
        """Which rows of δ respect the feature types (bounds and budget aside): integer
        moves by whole steps, the others onto an allowed value, or stay put."""
        X = np.asarray(X, dtype=np.float64)
        d = np.asarray(delta, dtype=np.float64)
        X, d = np.broadcast_arrays(X, d)
        ok = np.ones(d.shape[:-1], dtype=bool)
        still = np.abs(d) <= tol
        for j in np.flatnonzero(self.step_ > 0):
            s = self.step_[j]
            ok &= np.abs(d[..., j] - s * np.round(d[..., j] / s)) <= tol * (1 + np.abs(X[..., j]))
        for j, values in self.levels_.items():
            v = X[..., j] + d[..., j]
            near = np.abs(v[..., None] - values) <= tol * (1 + np.abs(values))
            ok &= still[..., j] | near.any(-1)
        for g in self.onehot_groups_:
            v = X[..., g] + d[..., g]
            zero_one = ((np.abs(v) <= tol) | (np.abs(v - 1) <= tol)).all(-1)
            one_hot = zero_one & (np.abs(v.sum(-1) - 1) <= tol * len(g))
            ok &= still[..., g].all(-1) | one_hot
        return ok

    # Ross et al.'s δ* solver (set by `recourse_sim.recourse.ross`, which builds on this)
    delta_solver: ClassVar[Callable | None] = None

    def recourse_delta(self, learner, state, X, goal: int = 1):
        """Ross et al.'s δ* of every row of X over this action set, the learner at
        `state` (`recourse_sim.recourse.ross.recourse_delta`, which sets `delta_solver`
        when the package loads): what a learner trained with a recourse loss asks of the
        action set it was given (the learners sit below this package)."""
        return type(self).delta_solver(learner, state, X, self, goal)

    def project(self, X, delta):
        """A feasible δ near each row of `delta`; same type as `delta`.

        Without discrete features it is the Euclidean projection onto A(x); with them, the
        projection onto the relaxation followed by `repair`. Works on numpy arrays and
        torch tensors (computed in float64 numpy; no graph is recorded, so solvers call it
        on detached iterates).
        """
        if isinstance(delta, torch.Tensor):
            X_np = X.detach().numpy() if isinstance(X, torch.Tensor) else X
            d_np = delta.detach().numpy().astype(np.float64, copy=False)
            return torch.from_numpy(self._project_typed(X_np, d_np)).to(delta.dtype)
        return self._project_typed(X, np.asarray(delta, dtype=np.float64))

    def _project_typed(self, X, delta: np.ndarray) -> np.ndarray:
        relaxed = self.project_rows(X, delta)
        return self.repair(X, relaxed) if self.typed else relaxed

    def repair(self, X, delta) -> np.ndarray:
        """δ within the relaxation (box and budget) moved onto the typed set: per row the
        nearest rounding (`rounded`, "nearest") where it keeps the budget, else the
        rounding towards x, which is never costlier than δ. Continuous features are kept."""
        X = np.asarray(X, dtype=np.float64)
        delta = np.asarray(delta, dtype=np.float64)
        if not self.typed:
            return delta.copy()
        shape = delta.shape
        X = np.broadcast_to(X, shape).reshape(-1, self.n_features)
        delta = delta.reshape(-1, self.n_features)
        box = self._box(X)
        nearest = self.rounded(X, delta, "nearest", box=box)
        over = np.asarray(self.cost(nearest)) > self.epsilon
        if over.any():
            nearest[over] = self.rounded(
                X[over], delta[over], "toward", box=(box[0][over], box[1][over])
            )
        return nearest.reshape(shape)

    def rounded(self, X, delta, mode: str = "nearest", direction=None, box=None) -> np.ndarray:
        """δ (n, d) with each discrete feature moved onto an allowed value within the box
        (continuous features kept; the budget is not checked).

        `mode`: ``"nearest"`` the allowed value nearest x + δ; ``"toward"`` the one nearest
        x + δ between x and x + δ (so |δ_j| never grows; a one-hot group stays put unless
        δ is already one of its levels); ``"direction"`` the nearest on the side of x + δ
        that `direction` (n, d; e.g. the score's gradient) points to, falling back to the
        nearest where there is none, and for a one-hot group the level of largest
        directional gain, or staying put if none gains.
        """
        X = np.asarray(X, dtype=np.float64)
        delta = np.asarray(delta, dtype=np.float64)
        out = delta.copy()
        if not self.typed:
            return out
        lo, hi = self._box(X) if box is None else box
        if mode == "direction":
            direction = np.asarray(direction, dtype=np.float64)
        elif mode not in ("nearest", "toward"):
            raise ConfigError(f"mode={mode!r} is not one of nearest, toward, direction")
        for j in np.flatnonzero(self.step_ > 0):
            s = self.step_[j]
            k = delta[:, j] / s
            # a whole number of steps that division left a hair off stays that number
            k = np.where(np.abs(k - np.round(k)) <= _HAIR * (1 + np.abs(k)), np.round(k), k)
            if mode == "nearest":
                k = np.round(k)
            elif mode == "toward":
                k = np.fix(k)
            else:
                k = np.where(
                    direction[:, j] > 0,
                    np.ceil(k),
                    np.where(direction[:, j] < 0, np.floor(k), np.round(k)),
                )
            # the lattice points within the box (lo ≤ 0 ≤ hi: k = 0 is one)
            k = np.minimum(np.maximum(k, np.ceil(lo[:, j] / s)), np.floor(hi[:, j] / s))
            out[:, j] = k * s
        for j, values in self.levels_.items():
            x = X[:, j]
            target = x + delta[:, j]
            # candidates: the levels within the box, and staying at x (always allowed)
            cand = np.concatenate([np.broadcast_to(values, (len(x), len(values))), x[:, None]], 1)
            allowed = (cand >= (x + lo[:, j])[:, None]) & (cand <= (x + hi[:, j])[:, None])
            allowed[:, -1] = True
            gap = cand - target[:, None]
            # a level that x + δ misses by rounding alone is x + δ
            gap[np.abs(gap) <= _HAIR * (1 + np.abs(cand))] = 0.0
            if mode == "toward":
                between = (cand - x[:, None]) * np.sign(target - x)[:, None] >= 0
                within = np.abs(cand - x[:, None]) <= np.abs(target - x)[:, None]
                allowed &= between & (within | (gap == 0))
                allowed[:, -1] = True
            elif mode == "direction":
                side = np.sign(direction[:, j])[:, None] * gap >= 0
                on_side = allowed & side
                allowed = np.where(on_side.any(1, keepdims=True), on_side, allowed)
            dist = np.where(allowed, np.abs(gap), np.inf)
            # ties go to staying put (the last column), then to the lower level
            pick = len(values) - np.argmin(dist[:, ::-1], axis=1)
            out[:, j] = cand[np.arange(len(x)), pick] - x
        for g in self.onehot_groups_:
            out[:, g] = self._onehot_rounded(
                X[:, g],
                delta[:, g],
                lo[:, g],
                hi[:, g],
                mode,
                None if direction is None else direction[:, g],
            )
        return out

    @staticmethod
    def _onehot_rounded(x, d, lo, hi, mode, direction) -> np.ndarray:
        """`rounded` for the columns of one one-hot group: δ of the chosen level, or 0."""
        n, k = x.shape
        moves = np.eye(k)[None] - x[:, None, :]  # (n, level, column): δ to each level
        allowed = ((moves >= lo[:, None] - 1e-12) & (moves <= hi[:, None] + 1e-12)).all(-1)
        stay = np.zeros(n, dtype=bool)
        if mode == "direction":
            gain = np.einsum("nlc,nc->nl", moves, direction)
            score = np.where(allowed, gain, -np.inf)
            best = score.argmax(1)
            stay = ~(score[np.arange(n), best] > 0)
        else:
            dist = np.where(allowed, ((moves - d[:, None]) ** 2).sum(-1), np.inf)
            best = dist.argmin(1)
            d_best = dist[np.arange(n), best]
            stay = ~(d_best < (d**2).sum(-1))  # staying put is nearer (or as near)
            if mode == "toward":  # only where δ is already that level
                stay |= d_best > 1e-18
        chosen = moves[np.arange(n), best]
        return np.where(stay[:, None], 0.0, chosen)

    def project_rows(
        self,
        X,
        delta: np.ndarray,
        box=None,
        *,
        root_search_only: bool = False,
        multipliers: np.ndarray | None = None,
        out: np.ndarray | None = None,
    ):
        """The Euclidean projection onto the box ∩ ball on float64 (n, d) arrays: `project`
        without feature types, and with them the projection onto the relaxation (see
        `repair`); `box` = (lo, hi) of X if already known.

        `multipliers`: an (n,) float64 array of the rows' KKT multipliers from a nearby
        projection (NaN: none), where the searches start; it is overwritten with the ones
        found (see `projection`, which keeps it for a descent's iterates). `out`: an (n, d)
        array to write the projection into (e.g. rows of a larger batch), returned.

        Shortcuts before the multiplier search: with equal cost weights (p = 2) a row's
        projection onto the ball alone, a scaling, is the answer wherever it lies in the
        box; rows whose box-clipped δ is within the budget are the projection as they
        are; and with a single actionable feature the projection is a clip to the box
        intersected with the ball (``root_search_only`` sends every row outside the
        budget through the search).
        """
        delta = np.asarray(delta, dtype=np.float64)
        if delta.shape[-1:] != (self.n_features,):
            raise ConfigError(
                f"delta has shape {delta.shape}, the action set has {self.n_features} features"
            )
        if delta.ndim != 2:  # one row, or a stack of batches
            flat = delta.reshape(-1, self.n_features)
            X_flat = np.broadcast_to(np.asarray(X, dtype=np.float64), delta.shape)
            return self.project_rows(X_flat.reshape(flat.shape), flat).reshape(delta.shape)
        if box is None and not self.boxless:
            box = self._box(np.asarray(X, dtype=np.float64))
        if box is None:  # no bound anywhere: the ball alone (the box checks are skipped)
            lo, hi = np.broadcast_to(-np.inf, delta.shape), np.broadcast_to(np.inf, delta.shape)
        else:
            lo, hi = (b if b.shape == delta.shape else np.broadcast_to(b, delta.shape) for b in box)
        w = self.weights_
        eps = float(self.epsilon)
        priced = self._priced
        if self.p == np.inf:
            # the weighted ∞-ball is a box too: |δ_j| ≤ ε / w_j
            r = np.where(priced, eps / np.where(priced, w, 1.0), np.inf)
            return np.minimum(np.maximum(delta, np.maximum(lo, -r)), np.minimum(hi, r), out=out)
        if self.p == 2 and self._uniform_price and not root_search_only:
            # equal weights: the ball alone projects by scaling; where that lands inside
            # the box it is the projection onto box ∩ ball too (the nearest point of a
            # superset, and it lies in the subset). A hair inside ε, as the search ends.
            with np.errstate(divide="ignore", invalid="ignore"):  # δ = 0: 0/0, kept as is
                scale = np.fmin(1.0, (eps * (1.0 - 1e-14)) / self._norm(delta))[:, None]
            if self._all_priced:
                z = np.multiply(delta, scale, out=out)
            else:
                z = np.where(priced, delta * scale, delta)
            in_box = None if box is None else ((z >= lo) & (z <= hi)).all(1)
            if in_box is not None and not in_box.all():
                rest = ~in_box
                found = None if multipliers is None else multipliers[rest]
                z[rest] = self._project_box_ball(delta[rest], lo[rest], hi[rest], False, found)
                if multipliers is not None:
                    multipliers[rest] = found
        else:
            z = self._project_box_ball(delta, lo, hi, root_search_only, multipliers)
        if out is None or z is out:
            return z
        out[...] = z
        return out

    def projection(self, X, box=None) -> RowProjection:
        """`project_rows` for successive δ of the same rows X, e.g. a descent's iterates."""
        return RowProjection(self, X, box)

    def _project_box_ball(
        self, delta, lo, hi, root_search_only: bool, multipliers: np.ndarray | None
    ) -> np.ndarray:
        """`project_rows` for p ∈ {1, 2} on arrays of one shape, box given."""
        w = self.weights_
        eps = float(self.epsilon)
        priced = self._priced
        clipped = np.minimum(np.maximum(delta, lo), hi)
        outside = self._norm(clipped) > eps
        if not outside.any():
            return clipped
        out = clipped
        rows = np.flatnonzero(outside)
        if eps == 0.0:
            out[rows] = np.where(priced, 0.0, clipped[rows])
            return out
        j = self._single_actionable
        if j is not None and not root_search_only:
            # one feature j: the ball is the interval |δ_j| ≤ ε / w_j (w_j > 0, else the
            # row would be inside); every other feature is pinned at 0 by the box
            r = eps / w[j]
            r = np.nextafter(r, 0.0) if w[j] * r > eps else r
            out[rows, j] = np.minimum(
                np.maximum(delta[rows, j], np.maximum(lo[rows, j], -r)), np.minimum(hi[rows, j], r)
            )
            return out
        all_priced = self._all_priced
        d, lo_r, hi_r = delta[rows], lo[rows], hi[rows]
        w2, inverse_w = self._w2, self._inverse_w

        def candidate(lam: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
            # KKT stationary point for multiplier lam clipped to the box, the point before
            # the clip, and (p = 2) the shrink factor 1 / (1 + λw²) of that point
            lam = lam[:, None]
            shrink = None
            # (in place where possible: on large batches fresh arrays cost page faults)
            if self.p == 2:
                shrink = lam * w2
                shrink += 1.0
                np.reciprocal(shrink, out=shrink)
                z = d * shrink
            else:
                z = np.sign(d) * np.maximum(np.abs(d) - lam * w, 0.0)
            if not all_priced:  # unpriced features ignore the multiplier (and λ = inf
                z = np.where(priced, z, d)  # must not give inf·0)
            clipped = np.maximum(z, lo_r)
            return np.minimum(clipped, hi_r, out=clipped), z, shrink

        # tiny budgets overflow λ and the relative excess to inf: handled as limits
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            # an upper bracket on the multiplier at which the cost is surely within ε
            ratio = np.abs(d) * inverse_w
            if self.p == 2:
                lam_hi = np.sqrt(np.einsum("ij,ij->i", ratio, ratio)) / eps
            else:
                lam_hi = ratio.max(-1)
            zero = np.zeros(len(rows))
            done = np.zeros(len(rows), bool)

            def excess(lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                clipped, z, shrink = candidate(lam)
                moves = clipped == z  # coordinates the box does not hold still
                if self.p == 2:
                    # cost² = Σ w²z², ∂z/∂λ = −w²z / (1 + λw²) where z moves, so
                    # ∂(1 − ε/cost)/∂λ = ε (∂cost²/∂λ) / (2 cost³) = −ε S / cost³ with
                    # S = Σ (w²z)² / (1 + λw²) over the moving z; w = 0 adds nothing
                    wz = w2 * clipped
                    cost2 = np.einsum("ij,ij->i", wz, clipped)
                    cost = np.sqrt(cost2)
                    shrink *= moves
                    shrink *= wz
                    s = np.einsum("ij,ij->i", shrink, wz)
                    return budget_excess(cost, eps), (-eps * s) / (cost2 * cost)
                # the soft-threshold cost is piecewise linear in λ, of slope −Σ w² moving
                moves &= (z != 0.0) & priced
                return self._norm(clipped) / eps - 1.0, -(moves * w2).sum(-1) / eps

            start = None
            if multipliers is not None:
                start = multipliers[rows]
                start[np.isnan(start)] = 0.0
            lam = feasible_root(excess, zero, lam_hi, done, start)
            out[rows] = candidate(lam)[0]
            if multipliers is not None:
                multipliers[rows] = lam
        return out

    @cached_property  # (the declaration is frozen: these derived facts never change)
    def boxless(self) -> bool:
        """Whether no feature has a bound, monotonicity or immutability: A(x) is the
        norm ball alone, the same for every x."""
        return not (
            self.immutable_mask.any()
            or self.increase_mask.any()
            or self.decrease_mask.any()
            or np.isfinite(self.lower_).any()
            or np.isfinite(self.upper_).any()
            or np.isfinite(self.max_change_).any()
        )

    @cached_property
    def _uniform_price(self) -> bool:
        """Whether every priced feature (w > 0) has the same cost weight."""
        priced = self.weights_[self._priced]
        return priced.size == 0 or bool((priced == priced[0]).all())

    @cached_property
    def _priced(self) -> np.ndarray:
        """Mask of the features with a cost weight w > 0."""
        return self.weights_ > 0

    @cached_property
    def _all_priced(self) -> bool:
        """Whether every feature has a cost weight w > 0."""
        return bool(self._priced.all())

    @cached_property
    def _w2(self) -> np.ndarray:
        """The squared cost weights."""
        return self.weights_**2

    @cached_property
    def _inverse_w(self) -> np.ndarray:
        """1 / w for the priced features, 0 for the free ones."""
        return np.where(self._priced, 1.0 / np.where(self._priced, self.weights_, 1.0), 0.0)

    @cached_property
    def _single_actionable(self) -> int | None:
        """The feature that alone can change, if exactly one can."""
        moving = self.actionable
        return int(np.argmax(moving)) if moving.sum() == 1 else None

    @cached_property
    def _unit_weights(self) -> bool:
        """Whether every cost weight is 1."""
        return bool((self.weights_ == 1.0).all())

    def _norm(self, d: np.ndarray) -> np.ndarray:
        if self.p == 2 and self._unit_weights:  # (one pass fewer)
            return np.sqrt(np.einsum("ij,ij->i", d, d))
        wd = self.weights_ * d
        if self.p == 2:
            return np.sqrt(np.einsum("ij,ij->i", wd, wd))
        return np.abs(wd).sum(-1)


class RowProjection:
    """`ActionSet.project_rows` for successive δ of the same rows X (a descent's iterates;
    with feature types, onto the relaxation, to be repaired at the end): the box is taken
    once, and each row's multiplier search starts from that row's last multiplier, since
    consecutive iterates need nearly the same one."""

    def __init__(self, action_set: ActionSet, X, box=None):
        self.action_set = action_set
        self.X = np.asarray(X, dtype=np.float64)
        if box is None and not action_set.boxless:
            box = action_set._box(self.X)
        self.box = box
        self.multipliers = np.full(len(self.X), np.nan)

    def __call__(
        self, delta: np.ndarray, rows: slice = slice(None), out: np.ndarray | None = None
    ) -> np.ndarray:
        """The projection of δ, the new iterate of the rows `rows` of X (default all),
        written into `out` if given."""
        box = None if self.box is None else (self.box[0][rows], self.box[1][rows])
        return self.action_set.project_rows(
            self.X[rows], delta, box, multipliers=self.multipliers[rows], out=out
        )

    @property
    def separable(self) -> bool:
        """Whether each row's projection is the same whatever other rows share the call,
        so that a batch may be projected in parts. The closed forms are (the ∞-ball with
        its box; the ℓ2 ball of equal weights without one); a multiplier search runs
        until every row of the call has converged, so its last bits depend on the batch."""
        aset = self.action_set
        return aset.p == np.inf or (aset.p == 2 and aset._uniform_price and self.box is None)


def _to_torch(a):
    """(tensor, converter back to the input's type)."""
    if isinstance(a, torch.Tensor):
        return a, lambda t: t
    arr = np.asarray(a, dtype=np.float64)
    # torch cannot share memory with a read-only array (cached datasets are read-only)
    tensor = torch.from_numpy(arr) if arr.flags.writeable else torch.tensor(arr)
    return tensor, lambda t: t.detach().numpy()
