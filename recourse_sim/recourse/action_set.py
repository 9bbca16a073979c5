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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from recourse_sim.errors import ConfigError, InfeasibleActionSetError

Features = Sequence[int | str]

_ROOT_STEPS = 100  # cap on regula-falsi steps; most rows converge in under 15


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
    # resolved arrays (derived in __post_init__)
    immutable_mask: np.ndarray = field(init=False, repr=False)
    increase_mask: np.ndarray = field(init=False, repr=False)
    decrease_mask: np.ndarray = field(init=False, repr=False)
    lower_: np.ndarray = field(init=False, repr=False)
    upper_: np.ndarray = field(init=False, repr=False)
    max_change_: np.ndarray = field(init=False, repr=False)
    weights_: np.ndarray = field(init=False, repr=False)

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
        ):
            value.flags.writeable = False
            object.__setattr__(self, name, value)

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
                "cost_weights p epsilon feature_names"
            ).split()
        }
        return ActionSet(**(fields | changes))

    def box(self, X):
        """Per-row bounds (lo, hi) on δ from everything but the norm ball; lo ≤ 0 ≤ hi."""
        Xt, to_out = _to_torch(X)

        def t(a: np.ndarray) -> torch.Tensor:
            return torch.tensor(a, dtype=Xt.dtype)

        hi = torch.minimum(t(self.max_change_), t(self.upper_) - Xt)
        lo = torch.maximum(-t(self.max_change_), t(self.lower_) - Xt)
        hi = torch.where(torch.tensor(self.decrease_mask | self.immutable_mask), 0.0, hi)
        lo = torch.where(torch.tensor(self.increase_mask | self.immutable_mask), 0.0, lo)
        # staying put is always allowed, even where x already breaks a bound
        return to_out(lo.clamp(max=0.0)), to_out(hi.clamp(min=0.0))

    def cost(self, delta):
        """cost(δ) = ‖w ⊙ δ‖_p per row."""
        dt, to_out = _to_torch(delta)
        w = torch.tensor(self.weights_, dtype=dt.dtype)
        return to_out(torch.linalg.vector_norm(w * dt, ord=self.p, dim=-1))

    def contains(self, X, delta, tol: float = 1e-9) -> np.ndarray:
        """Which rows of δ are feasible (within `tol`)."""
        lo, hi = (np.asarray(b) for b in self.box(np.asarray(X, dtype=np.float64)))
        d = np.asarray(delta, dtype=np.float64)
        in_box = ((d >= lo - tol) & (d <= hi + tol)).all(axis=-1)
        return in_box & (np.asarray(self.cost(d)) <= self.epsilon + tol)

    def project(self, X, delta):
        """The Euclidean projection of each row of δ onto A(x); same type as `delta`.

        Works on numpy arrays and torch tensors (the torch path is differentiable almost
        everywhere, but projected-gradient solvers call it without grad).
        """
        Xt, _ = _to_torch(X)
        dt, to_out = _to_torch(delta)
        lo, hi = self.box(Xt.to(dt.dtype))
        w = torch.tensor(self.weights_, dtype=dt.dtype)
        eps = float(self.epsilon)
        if self.p == np.inf:
            # the weighted ∞-ball is a box too: |δ_j| ≤ ε / w_j
            r = torch.where(w > 0, eps / torch.where(w > 0, w, 1.0), torch.inf)
            return to_out(
                torch.minimum(torch.maximum(dt, torch.maximum(lo, -r)), torch.minimum(hi, r))
            )

        def candidate(lam: torch.Tensor) -> torch.Tensor:
            # KKT stationary point for multiplier lam, clipped to the box
            lam = lam.unsqueeze(-1)
            if self.p == 2:
                z = dt / (1.0 + lam * w**2)
            else:
                z = torch.sign(dt) * torch.clamp(dt.abs() - lam * w, min=0.0)
            # unpriced features ignore the multiplier (and λ = inf must not give inf·0)
            z = torch.where(w > 0, z, dt)
            return torch.minimum(torch.maximum(z, lo), hi)

        def norm(d: torch.Tensor) -> torch.Tensor:
            return torch.linalg.vector_norm(w * d, ord=self.p, dim=-1)

        zero = torch.zeros(dt.shape[:-1], dtype=dt.dtype)
        clipped = candidate(zero)
        inside = norm(clipped) <= eps
        if bool(inside.all()):
            return to_out(clipped)
        priced = w > 0  # features with w = 0 are free: the ball does not bound them
        if eps == 0.0:
            return to_out(torch.where(priced, 0.0, clipped))
        # an upper bracket on the multiplier at which the cost is surely within ε
        ratio = torch.where(priced, dt.abs() / torch.where(priced, w, 1.0), 0.0)
        if self.p == 2:
            lam_hi = torch.linalg.vector_norm(ratio, dim=-1) / eps
        else:
            lam_hi = ratio.amax(-1)
        lam = feasible_root(lambda lam: norm(candidate(lam)) / eps - 1.0, zero, lam_hi, inside)
        out = torch.where(inside.unsqueeze(-1), clipped, candidate(lam))
        return to_out(out)


def feasible_root(excess, lo: torch.Tensor, hi: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
    """Per row, the root of a non-increasing `excess(λ)` in [lo, hi], from the feasible side.

    Needs excess(lo) > 0 ≥ excess(hi) on the rows not already `done`; `excess` is
    relative (e.g. cost / ε − 1), so one tolerance fits every scale. Regula falsi with
    the Illinois modification keeps the bracket, so the returned λ always has
    excess(λ) ≤ 0 (feasible), and converges superlinearly on these piecewise-smooth
    multiplier equations.
    """
    done = done | torch.isinf(hi)  # a budget so small that λ overflows: the limit λ = inf
    f_lo = torch.where(done, 1.0, excess(lo))
    f_hi = excess(hi)
    last = torch.zeros_like(lo)  # +1: the previous step moved hi, −1: it moved lo
    for _ in range(_ROOT_STEPS):
        converged = done | (hi - lo <= 1e-13 * hi) | (f_hi >= -1e-13)
        if bool(converged.all()):
            break
        c = (hi - f_hi * (hi - lo) / (f_hi - f_lo)).clamp(min=lo, max=hi)
        f_c = excess(c)
        feasible = (f_c <= 0) & ~converged
        infeasible = (f_c > 0) & ~converged
        # Illinois: halve the stale end's value when the same end moves twice running
        f_lo = torch.where(feasible & (last == 1), 0.5 * f_lo, f_lo)
        f_hi = torch.where(infeasible & (last == -1), 0.5 * f_hi, f_hi)
        hi, f_hi = torch.where(feasible, c, hi), torch.where(feasible, f_c, f_hi)
        lo, f_lo = torch.where(infeasible, c, lo), torch.where(infeasible, f_c, f_lo)
        last = torch.where(feasible, 1.0, torch.where(infeasible, -1.0, last))
    return hi


def _to_torch(a):
    """(tensor, converter back to the input's type)."""
    if isinstance(a, torch.Tensor):
        return a, lambda t: t
    arr = np.asarray(a, dtype=np.float64)
    # torch cannot share memory with a read-only array (cached datasets are read-only)
    tensor = torch.from_numpy(arr) if arr.flags.writeable else torch.tensor(arr)
    return tensor, lambda t: t.detach().numpy()
