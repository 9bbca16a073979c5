"""Collective recourse: Online Algorithmic Recourse (Creager & Zemel, Eq. 3).

The data subjects whose rows train the next model perturb their *reported* features,
each within its action set, so that the *updated* model gives the query subjects their
goal labels:

    Δ* = argmin_Δ  mean_q −log p(goal_q | x_q; θ_H(Δ))
         s.t.  θ_h = U(θ_{h−1}, X + Δ, y)  for h = 1..H,  θ_0 = the current state,
               δ_i ∈ A(x_i) for members,  δ_i = 0 for everyone else,

where U is the learner's own differentiable update rule (`Learner.update_fn`). The
hypergradient ∂loss/∂Δ is taken by autograd straight through U, so it is whatever
the learner makes it: closed form (nearest centroid), implicit differentiation
(logistic regression) or unrolled SGD (MLP). A learner may also give the objective
and its hypergradient for one update in closed form (`Learner.refit_hypergradient`;
logistic regression's Newton refits do), which spares building the graph; the tests
hold the two equal.

Horizon H > 1 (the paper's "multiple timesteps", left to future work there) assumes the
collective *commits* to one perturbation for H rounds: every round the same members
report the same batch X + Δ, and the loss is taken on the model after the H-th update.
With a sliding window of one round this equals H = 1; with memory (refit on everything
seen) or warm-started SGD the perturbed batch gains weight round after round.

The upper problem is solved by projected gradient descent as in the paper's Appendix A:
each member steps along its own normalised negative hypergradient (ℓ2: the gradient
direction scaled to the step length; ℓ∞: its sign), then is projected back onto its
action set. The step length adapts — longer after a step that lowered the query loss,
halved (and the step retried) after one that did not — so the iterates only improve
and the last one is the best; a fixed step oscillates badly on the bilevel loss of an
MLP trained by SGD, whose landscape in Δ is rough.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.errors import ConfigError
from recourse_sim.lazy import LazyModule
from recourse_sim.learners.base import Learner, LowRankGradient, State, as_tensor
from recourse_sim.recourse.action_set import ActionSet
from recourse_sim.recourse.linear_program import goal_loss

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds this without torch
    torch = LazyModule("torch", globals())

METHODS = ("pgd", "fgm")
"""Upper-level solvers. ``pgd``: projected normalised-gradient descent with an adaptive,
monotone step (`_pgd`). ``fgm`` (fast gradient method): the paper's one-shot reading —
one normalised gradient step of the full budget ε from Δ = 0, then projection."""

# An iterate that moves no coordinate by more than this (relative to the budget) is a
# fixed point of the projected step: further steps cannot change it.
_STALL_TOL = 1e-12
# Step-length control of "pgd", as fractions of the budget ε: first step, the longest
# step, and the step below which a failed step ends the search; growth after a success.
_INITIAL_STEP = 0.25
_MAX_STEP = 1.0
_MIN_STEP = 1e-6
_GROW = 1.25
# Bytes of an (rows, d) block of a step over a separable projection (fits in cache).
_BLOCK_BYTES = 1 << 20


@dataclass(frozen=True)
class CollectiveResult:
    """Outcome of collective recourse for one batch of data subjects."""

    delta: np.ndarray  # (N, d) feasible perturbations of the training rows; 0 for non-members
    query_loss_before: float  # mean goal cross-entropy under θ_H(Δ = 0): the honest update
    query_loss_after: float  # mean goal cross-entropy under θ_H(Δ*)
    state_after: State  # θ_H(Δ*), detached: the model after the H perturbed updates
    query_proba_after: np.ndarray  # (m, k) class probabilities of the queries under θ_H(Δ*)
    success: np.ndarray  # (m,) bool: each query is predicted its goal under θ_H(Δ*)
    cost: np.ndarray  # (N,) action-set cost of each row's perturbation
    # query loss of the current iterate after each trial step (and, with feature types,
    # last the loss after rounding onto them)
    loss_history: np.ndarray


def collective_recourse(
    learner: Learner,
    X,
    y,
    queries,
    goals,
    action_set: ActionSet,
    horizon: int = 1,
    *,
    members=None,
    state: State | None = None,
    steps: int = 100,
    step_size: float | None = None,
    method: str = "pgd",
    init=None,
    random_start: bool = False,
    seed: int | None = None,
) -> CollectiveResult:
    """Perturb the training batch (X, y) so the updated learner serves the queries.

    Parameters
    ----------
    learner: a fitted learner; only its `proba_fn` and `update_fn` are used, it is not
        modified.
    X: (N, d) the features the data subjects would report honestly this round.
    y: (N,) their class labels (not perturbed).
    queries: (m, d) or (d,) features of the query subjects (not perturbed).
    goals: the goal class of each query, an int or m ints.
    action_set: the feasible perturbations of each training row, budget ε included.
    horizon: number H of successive online updates with the same batch X + Δ; the loss
        is taken on the model after the last one.
    members: (N,) bool mask of the data subjects who take part; the others report
        honestly (δ = 0). Default: everyone.
    state: the parameters θ_0 the updates start from; default `learner.state()`.
    steps: maximum number of projected-gradient steps ("pgd"); each costs one
        evaluation of the query loss and its hypergradient.
    step_size: length of the first step in cost units (‖w ⊙ step‖_p); default ε/4.
        The length then adapts (see `_pgd`) but never exceeds ε, so ε = 0 gives Δ = 0
        even where a feature is free (cost weight 0).
    method: "pgd" or "fgm" (see `METHODS`).
    init: (N, d) a Δ to start "pgd" from instead of 0, projected onto the action sets
        (non-members zeroed): e.g. the solution for a smaller budget (continuation,
        which makes the loss non-increasing in ε) or the previous round's.
    random_start: start "pgd" from a random feasible Δ instead of 0.
    seed: seeds the random start (a private `torch.Generator`; no global RNG).

    Returns
    -------
    CollectiveResult; ``query_loss_before`` is the loss after H *honest* updates, so
    ``query_loss_before − query_loss_after`` is what the collective action gained.
    """
    if method not in METHODS:
        raise ConfigError(f"method={method!r} is not one of {', '.join(METHODS)}")
    if not isinstance(horizon, int | np.integer) or horizon < 1:
        raise ConfigError(f"horizon must be an integer >= 1, got {horizon!r}")
    if not isinstance(steps, int | np.integer) or steps < 1:
        raise ConfigError(f"steps must be an integer >= 1, got {steps!r}")
    if init is not None and random_start:
        raise ConfigError("give init or random_start=True, not both")
    Xt, yt, Q, goal_t, theta0 = _prepare(learner, X, y, queries, goals, action_set, state)
    n = len(Xt)
    # the steps and projections work on the members' rows only (the others stay at 0)
    member_idx = None
    if members is not None:
        member_np = np.asarray(members)
        if member_np.shape != (n,) or member_np.dtype != bool:
            raise ConfigError(
                f"members must be a bool mask of shape ({n},), got {member_np.dtype} "
                f"{member_np.shape}"
            )
        member_idx = np.flatnonzero(member_np)

    # Each evaluation's refits start Newton where the previous evaluation's ended (the
    # iterates move little), and evaluations return their states, so the honest loss
    # and the final model need no refit of their own.
    warm: list[State] | None = None
    warm_factor = None
    honest: list[State] | None = None

    def objective(delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[State]]:
        nonlocal warm, warm_factor, honest
        loss, grad, states, warm_factor = _loss_and_grad(
            learner, theta0, Xt, yt, Q, goal_t, delta, horizon, warm, warm_factor
        )
        warm = states
        if delta is zero:
            honest = states
        return loss, grad, states

    eps = float(action_set.epsilon)
    X_members = Xt.detach().numpy()
    if member_idx is not None:
        X_members = X_members[member_idx]

    def rows(a: np.ndarray) -> np.ndarray:
        """The members' rows of an (N, d) array."""
        return a if member_idx is None else a[member_idx]

    bounds = None if action_set.boxless else action_set.box(X_members)  # None: unbounded
    box = _Box(bounds, action_set)
    zero = torch.zeros_like(Xt)
    project = action_set.projection(X_members, bounds)

    def feasible(delta_members: np.ndarray) -> torch.Tensor:
        """The full Δ (N, d) whose members' rows are `delta_members` projected."""
        projected = project(delta_members)
        if member_idx is None:
            return torch.from_numpy(projected)
        full = torch.zeros_like(Xt)
        full.numpy()[member_idx] = projected
        return full

    n_members = n if member_idx is None else len(member_idx)
    # A separable projection lets a step run over blocks of rows that stay in cache:
    # the same numbers with a fraction of the passes over large (N, d) arrays.
    block_rows = max(n_members, 1)
    if project.separable:
        block_rows = max(_BLOCK_BYTES // (8 * max(Xt.shape[1], 1)), 1)

    stall = _STALL_TOL * max(eps, 1.0)

    def propose(delta: torch.Tensor, grad, length: float, out: torch.Tensor | None = None):
        """The trial Δ of a step of `length` from Δ along −grad (a tensor or a
        `LowRankGradient`), projected (`box.step`, then `project`), written into `out`
        (a former trial: its non-members' rows are 0) or a new tensor; and whether it
        is a fixed point: no coordinate moves by more than `_STALL_TOL` (relative to
        the budget)."""
        if out is None:
            out = torch.empty_like(Xt) if member_idx is None else torch.zeros_like(Xt)
        current, trial = delta.numpy(), out.numpy()
        # a factored gradient's rows are formed a block at a time; picked members' rows
        # are gathered from the whole gradient
        factored = isinstance(grad, LowRankGradient) and member_idx is None
        slope = grad if factored else np.asarray(grad)
        stalled = True
        for start in range(0, n_members, block_rows):
            block = slice(start, start + block_rows)
            idx = block if member_idx is None else member_idx[block]
            here = current[idx]
            if factored:  # its rows are a new array the step may overwrite
                rows_grad = slope.rows(idx)
                moved = box.step(here, rows_grad, length, block, out=rows_grad)
            else:
                moved = box.step(here, slope[idx], length, block)
            if member_idx is None:  # the trial's rows are a view: projected in place
                projected = project(moved, block, out=trial[idx])
            else:
                projected = trial[idx] = project(moved, block)
            if stalled:  # (once one block moves, the others need not be checked)
                np.subtract(projected, here, out=moved)
                stalled = not max(moved.max(), -moved.min()) > stall  # NaN: not stalled
        return out, stalled

    if method == "fgm":
        loss0, grad0, states0 = objective(zero)
        candidate, _ = propose(zero, grad0, eps)
        loss1, _, states1 = objective(candidate)
        history = [float(loss0), float(loss1)]
        best, best_states = (candidate, states1) if loss1 < loss0 else (zero, states0)
    else:
        delta = zero
        if init is not None:
            init_t = as_tensor(init)
            if init_t.shape != Xt.shape:
                raise ConfigError(f"init has shape {tuple(init_t.shape)}, X has {tuple(Xt.shape)}")
            delta = feasible(rows(init_t.numpy().astype(np.float64)))
        elif random_start:
            gen = torch.Generator().manual_seed(0 if seed is None else int(seed))
            z = torch.randn(Xt.shape, generator=gen, dtype=Xt.dtype)
            radius = eps * torch.rand((n, 1), generator=gen, dtype=Xt.dtype)
            delta = feasible(
                rows((radius * z / torch.linalg.vector_norm(z, dim=1, keepdim=True)).numpy())
            )
        step0 = step_size if step_size is not None else _INITIAL_STEP * eps
        best, history, best_states = _pgd(objective, propose, delta, eps, step0, steps)

    if action_set.typed and eps > 0:
        best, best_states, loss_typed = _typed(
            objective, best, action_set, X_members, bounds, member_idx
        )
        history.append(loss_typed)

    with torch.no_grad():
        if honest is None:  # started elsewhere than Δ = 0
            honest = rollout_states(learner, theta0, Xt, yt, horizon, warm)
        loss_before = float(goal_loss(learner, honest[-1], Q, goal_t).mean())
        theta = best_states[-1]
        proba = learner.proba_fn(theta, Q)
        loss_after = float(goal_loss(learner, theta, Q, goal_t).mean())
    delta_np = best.detach().numpy().copy()
    return CollectiveResult(
        delta=delta_np,
        query_loss_before=loss_before,
        query_loss_after=loss_after,
        state_after={k: v.detach().clone() for k, v in theta.items()},
        query_proba_after=proba.numpy(),
        success=(proba.argmax(1) == goal_t).numpy(),
        cost=np.asarray(action_set.cost(delta_np)),
        loss_history=np.asarray(history),
    )


def _typed(objective, delta, action_set, X_members, bounds, member_idx):
    """The descent's Δ (on the relaxation) moved onto the typed action set: of the nearest
    rounding (`ActionSet.repair`) and the rounding along the query loss's descent
    direction (rows where that breaks the budget take the nearest), the one of lower
    query loss. Returns (Δ, the states at Δ, its query loss)."""

    def members(a: np.ndarray) -> np.ndarray:
        return a if member_idx is None else a[member_idx]

    def full(rows: np.ndarray) -> torch.Tensor:
        if member_idx is None:
            return torch.from_numpy(rows)
        out = torch.zeros_like(delta)
        out.numpy()[member_idx] = rows
        return out

    relaxed = members(delta.numpy())
    _, grad, _ = objective(delta)
    nearest = action_set.repair(X_members, relaxed)
    along = action_set.rounded(X_members, relaxed, "direction", -members(np.asarray(grad)), bounds)
    over = np.asarray(action_set.cost(along)) > action_set.epsilon
    along[over] = nearest[over]
    best = None
    for rows in (nearest, along):
        candidate = full(rows)
        loss, _, states = objective(candidate)
        if best is None or float(loss) < best[2]:
            best = (candidate, states, float(loss))
    return best


def _pgd(objective, propose, delta, eps, step, steps):
    """Monotone projected normalised-gradient descent; returns (Δ, accepted losses,
    the states θ_1..θ_H at Δ). `propose(Δ, grad, length, out)` gives the projected
    trial step (in `out` if given) and whether it stalls (moves nothing).

    A trial step that does not lower the loss is discarded and the step halved; an
    accepted one lengthens the next by `_GROW` (up to ε). The search ends after `steps`
    trials, when the step falls below `_MIN_STEP`·ε, or at a fixed point of the
    projected step (e.g. every member already on the boundary in its best direction).
    """
    start = delta
    loss, grad, states = objective(delta)
    history = [float(loss)]
    spare = None  # a former trial the next one may overwrite (never the caller's start)
    for _ in range(steps):
        trial, stalled = propose(delta, grad, step, spare)
        if stalled:
            break
        trial_loss, trial_grad, trial_states = objective(trial)
        if trial_loss < loss:
            spare = None if delta is start else delta
            delta, loss, grad, states = trial, trial_loss, trial_grad, trial_states
            step = min(step * _GROW, _MAX_STEP * eps)
        else:
            spare = trial
            step *= 0.5
            if step < _MIN_STEP * eps:
                break
        history.append(float(loss))
    return delta, history, states


def collective_hypergradient(
    learner: Learner,
    X,
    y,
    queries,
    goals,
    delta,
    horizon: int = 1,
    *,
    state: State | None = None,
) -> tuple[float, np.ndarray]:
    """The collective query loss at Δ and its hypergradient ∂loss/∂Δ, (N, d).

    This is exactly the objective and gradient `collective_recourse` descends (without
    the action set); exposed so the hypergradients can be checked and reused.

    Parameters
    ----------
    learner, X, y, queries, goals, horizon, state: as in `collective_recourse`.
    delta: (N, d) the perturbation of the training rows at which to evaluate.
    """
    Xt, yt, Q, goal_t, theta0 = _prepare(learner, X, y, queries, goals, None, state)
    delta_t = as_tensor(delta)
    if delta_t.shape != Xt.shape:
        raise ConfigError(f"delta has shape {tuple(delta_t.shape)}, X has {tuple(Xt.shape)}")
    loss, grad, _, _ = _loss_and_grad(learner, theta0, Xt, yt, Q, goal_t, delta_t, horizon)
    return float(loss), np.asarray(grad)


# -- internals -------------------------------------------------------------------------


def _prepare(learner, X, y, queries, goals, action_set, state):
    """Validated float64/long tensors and the starting state θ_0 (detached)."""
    Xt = as_tensor(X)
    if Xt.ndim != 2:
        raise ConfigError(f"X must be 2-d (N, d), got shape {tuple(Xt.shape)}")
    n, d = Xt.shape
    if action_set is not None and action_set.n_features != d:
        raise ConfigError(f"X has {d} features, the action set has {action_set.n_features}")
    y_np = np.asarray(y)
    if y_np.shape != (n,) or (y_np.size and not np.issubdtype(y_np.dtype, np.integer)):
        raise ConfigError(f"y must hold {n} integer class labels, got {y_np.dtype} {y_np.shape}")
    Q = as_tensor(queries)
    Q = Q[None] if Q.ndim == 1 else Q
    if Q.ndim != 2 or Q.shape[1] != d:
        raise ConfigError(f"queries must have shape (m, {d}) or ({d},), got {tuple(Q.shape)}")
    goals_np = np.asarray(goals)
    if goals_np.ndim > 1 or (goals_np.ndim == 1 and goals_np.shape != (len(Q),)):
        raise ConfigError(f"goals must be an int or {len(Q)} ints, got shape {goals_np.shape}")
    if not np.issubdtype(goals_np.dtype, np.integer):
        raise ConfigError(f"goals must be integer class labels, got dtype {goals_np.dtype}")
    goal_t = torch.as_tensor(np.broadcast_to(goals_np, (len(Q),)).astype(np.int64))
    # the update rule is pure, so the learner's own tensors serve without a copy
    if state is None:
        learner._check_fitted()  # NotFittedError, as learner.state() would raise
    theta0 = learner.state_ if state is None else {k: as_tensor(v) for k, v in state.items()}
    theta0 = {k: v.detach() for k, v in theta0.items()}
    n_classes = _n_classes(learner, theta0, Q)
    if goal_t.numel() and (goal_t.min() < 0 or goal_t.max() >= n_classes):
        raise ConfigError(f"goals must be class labels in 0..{n_classes - 1}, got {goals_np}")
    return Xt, torch.as_tensor(y_np, dtype=torch.long), Q, goal_t, theta0


def _n_classes(learner: Learner, state: State, Q: torch.Tensor) -> int:
    """Number of classes k of the learner (read off its probabilities)."""
    with torch.no_grad():
        return int(learner.proba_fn(state, Q[:1]).shape[1])


def rollout(
    learner: Learner, state: State, X: torch.Tensor, y: torch.Tensor, horizon: int
) -> State:
    """θ_H: `horizon` successive online updates of `state` with the same batch (X, y).

    Differentiable in X (and in the state where the update rule is); with Δ = 0 it is
    the model the honest reports produce, the one individual recourse faces.
    """
    return rollout_states(learner, state, X, y, horizon)[-1]


def rollout_states(
    learner: Learner,
    state: State,
    X: torch.Tensor,
    y: torch.Tensor,
    horizon: int,
    starts: list[State] | None = None,
) -> list[State]:
    """The states θ_1..θ_H of `rollout`; `starts` (the states of a rollout on nearby
    rows) warm-start the learner's solver, which changes nothing beyond its tolerance."""
    states = []
    for h in range(horizon):
        start = None if starts is None else starts[h]
        state = learner.warm_update_fn(state, X, y, start)
        states.append(state)
    return states


def _loss_and_grad(learner, theta0, X, y, Q, goal, delta, horizon, starts=None, factor=None):
    """Query loss at Δ, its hypergradient (a tensor or a `LowRankGradient`), the states
    θ_1..θ_H (detached) and, where the learner has one, the Hessian factor of its refit
    (for the next call's `factor`).

    A learner with a closed-form hypergradient of one refit (`refit_hypergradient`,
    which may decline) skips the autograd graph for horizon 1; `starts` and `factor`
    (from a call on nearby rows) warm-start its solver."""
    if horizon == 1:
        start = None if starts is None else starts[0]
        out = learner.refit_hypergradient(theta0, X, delta, y, start, Q, goal, factor)
        if out is not None:
            loss, grad, state, factor = out
            return torch.tensor(loss, dtype=torch.float64), grad, [state], factor
    delta = delta.detach().requires_grad_(True)
    states = rollout_states(learner, theta0, X + delta, y, horizon, starts)
    loss = goal_loss(learner, states[-1], Q, goal).mean()
    (grad,) = torch.autograd.grad(loss, delta)
    detached = [{k: v.detach() for k, v in st.items()} for st in states]
    return loss.detach(), grad, detached, None


class _Box:
    """The members' box bounds (None: unbounded) and the action set's weights, for the
    descent direction."""

    def __init__(self, bounds: tuple[np.ndarray, np.ndarray] | None, action_set: ActionSet):
        self.lo, self.hi = bounds if bounds is not None else (None, None)
        self.p = action_set.p
        # a box that is infinite everywhere blocks nothing: skip the test
        self.bounded = bounds is not None and bool(
            np.isfinite(self.lo).any() or np.isfinite(self.hi).any()
        )
        w = action_set.weights_
        priced = w > 0
        # free features (w = 0) are bounded only by the box; give them a typical weight
        # so their step has a sensible length rather than an infinite one
        typical = w[priced].mean() if priced.any() else 1.0
        self.w = np.where(priced, w, typical)
        self.uniform = bool((self.w == self.w[0]).all())
        self.inv_w2 = 1.0 / self.w**2

    def step(
        self,
        delta: np.ndarray,
        grad: np.ndarray,
        length: float,
        rows: slice = slice(None),
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Δ + length · (each row's steepest-descent direction of unit cost,
        ‖w ⊙ direction‖_p = 1), written into `out` (may be grad itself) or a new array;
        `rows`: the members' rows δ and grad hold.

        Components that push into a box bound the row already sits on are dropped
        first, so an increase-only or immutable feature does not waste the step
        (projection would undo that part and shorten the useful move). p = ∞: the sign
        of the gradient (FGSM/PGD-∞); p ∈ {1, 2}: the (cost-weighted) ℓ2-normalised
        gradient. (Few passes over the (N, d) arrays: OAR batches are large.)
        """
        if self.bounded:
            d = np.negative(grad)
            lo, hi = self.lo[rows], self.hi[rows]
            blocked = ((d < 0) & (delta <= lo)) | ((d > 0) & (delta >= hi))
            d[blocked] = 0.0
            sign = 1.0
        else:
            d, sign = grad, -1.0
        if self.p == np.inf:
            out = np.sign(d, out=out)
            out *= sign * length
            out /= self.w
            out += delta
            return out
        # (d / w) / ‖d / w‖ / w: d / (w ‖d‖) for equal weights
        if self.uniform:
            norm = np.sqrt(np.einsum("ij,ij->i", d, d)) * self.w[0]
        else:
            norm = np.sqrt(np.square(d) @ self.inv_w2)
            d = d * self.inv_w2
        scale = np.where(norm > 0, (sign * length) / np.maximum(norm, 1e-300), 0.0)
        # one pass writes the scaled direction (into grad only if the caller says so)
        out = np.multiply(d, scale[:, None], out=out)
        out += delta
        return out
