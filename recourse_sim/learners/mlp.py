"""A torch multilayer perceptron with unrolled and implicit (CG) hypergradients."""

from __future__ import annotations

from collections.abc import Callable
from numbers import Integral
from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.errors import ConfigError
from recourse_sim.lazy import LazyModule
from recourse_sim.learners.base import (
    MEMORY_RULES,
    Learner,
    State,
    check_positive,
    check_recourse_training,
    first_memory,
    remember,
)

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds learners without torch
    torch = LazyModule("torch", globals())

ACTIVATIONS = ("relu", "tanh")
"""The hidden layers' activations (torch functions of these names)."""
HYPERGRADS = ("unrolled", "implicit")

# Adam's moment decay rates and denominator offset (the usual defaults).
_BETAS = (0.9, 0.999)
_ADAM_EPS = 1e-8
# Relative residual at which the implicit conjugate-gradient solve stops.
_CG_TOL = 1e-10


def conjugate_gradient(
    matvec: Callable[[torch.Tensor], torch.Tensor], b: torch.Tensor, maxiter: int, tol: float
) -> torch.Tensor:
    """Approximate A⁻¹ b for symmetric A given as `matvec`.

    Stops after `maxiter` products, when the residual falls below ``tol · ‖b‖``, or at
    the first direction of non-positive curvature (then A is not positive definite
    there and the iterate so far is returned).
    """
    x = torch.zeros_like(b)
    r, p = b.clone(), b.clone()
    rs = r @ r
    stop = (tol * torch.sqrt(rs)) ** 2
    for _ in range(maxiter):
        if rs <= stop:
            break
        Ap = matvec(p)
        curvature = p @ Ap
        if curvature <= 0:
            break
        alpha = rs / curvature
        x = x + alpha * p
        r = r - alpha * Ap
        rs_new = r @ r
        p = r + (rs_new / rs) * p
        rs = rs_new
    return x


class MLPClassifier(Learner):
    """A multilayer perceptron with softmax output, trained on the cross-entropy.

    The regularised risk on rows (X, y) is ``R(θ) = mean CE + (weight_decay / 2) ‖θ‖²``
    (all weights and biases). `fit` trains it with Adam from a ``random_state``-seeded
    initialisation (PyTorch's default uniform scheme).

    Parameters
    ----------
    hidden : tuple of int
        Width of each hidden layer.
    activation : {"relu", "tanh"}
        Hidden-layer nonlinearity.
    update_rule : {"sgd", "refit", "window", "frozen"}
        ``"sgd"``: ``epochs`` warm-started full-batch gradient steps of size ``lr`` on R
        of the new round. ``"refit"``: retrain from the current θ by full-batch L-BFGS
        (at most ``fit_epochs`` iterations, gradient tolerance ``tol``) on every row seen
        so far. ``"window"``: the same on the last ``window`` rounds. ``"frozen"``:
        never updated.
    window : int or None
        Rounds kept by the ``"window"`` rule (must be None otherwise).
    epochs : int
        Gradient steps per ``"sgd"`` update.
    lr : float
        Step size of the ``"sgd"`` rule.
    fit_epochs : int
        Passes over the data of the Adam fit; also the L-BFGS iteration cap of a refit.
    fit_lr : float
        Adam step size of `fit`.
    batch_size : int or None
        Minibatch size of the Adam fit (None: full batch). Updates are full batch.
    weight_decay : float
        L2 coefficient in R (≥ 0); > 0 makes the implicit hypergradient better posed.
    dropout : float
        Dropout rate on hidden units during `fit` only; updates are deterministic.
    random_state : int, numpy Generator or None
        Seeds the initialisation, minibatch order and dropout masks of `fit` (through
        one ``torch.Generator``; never the global RNG). None draws fresh entropy.
    hypergrad : {"unrolled", "implicit"}
        How ``update_fn`` is differentiated. ``"unrolled"`` (``"sgd"`` rule only):
        backpropagation through the steps, exact, differentiable in X and θ.
        ``"implicit"``: θ⁺ is computed without a graph and its derivative in X is
        the implicit-function theorem's ``−(H + λI)⁻¹ ∂²R/∂θ∂X`` at θ⁺, with H the
        Hessian of R on the update's rows and the solve by conjugate gradient on
        Hessian-vector products. It treats the update as if it reached a stationary
        point of R, so it is exact only at convergence (a refit, or many steps), and
        θ⁺ does not depend on the previous θ. Required for ``"refit"``/``"window"``,
        whose unrolled graph (hundreds of steps over all remembered rows) is too costly.
    n_classes : int or None
        Number of classes k (output units); inferred as ``max(y) + 1`` when None.
    tol : float
        L-BFGS gradient tolerance (max |∇R|) of a refit.
    cg_damping : float
        λ added to H in the implicit solve (≥ 0); guards against a singular H.
    cg_maxiter : int
        Maximum Hessian-vector products of the implicit solve.
    recourse_loss_weight : float
        λ ≥ 0 of Ross et al.'s recourse-aware objective (Eq. 1): every risk above — the
        Adam fit, the ``"sgd"`` steps and the refits — becomes
        ``mean [CE(x, y) + λ · CE(x + δ*, recourse_goal)] + (weight_decay / 2) ‖θ‖²``
        over all its rows, δ* the ``"linear"`` recourse of each row under the current θ
        (recomputed every minibatch / step / L-BFGS evaluation; see
        `recourse_sim.recourse.ross`; δ* is computed on the network without dropout,
        the deployed model). The data term and the recourse term share one dropout
        mask. 0 (default) is plain training.
    action_set : ActionSet or None
        The actionable polytope Δ of δ*, in the units of X; required when λ > 0.
    recourse_goal : int
        The favourable class whose score δ* raises.

    Hypergradients with λ > 0 hold δ* fixed (it is piecewise constant in θ and X, so
    this is the derivative almost everywhere, except where a ``lower``/``upper`` bound of
    the action set clips x + δ*).

    State: one tensor per layer weight and bias (``layers.0.weight``, ...); the refit
    rules also keep ``X_mem``, ``y_mem`` and ``round_sizes``.
    """

    def __init__(
        self,
        hidden: tuple[int, ...] = (10,),
        activation: str = "relu",
        update_rule: str = "sgd",
        window: int | None = None,
        epochs: int = 5,
        lr: float = 0.05,
        fit_epochs: int = 200,
        fit_lr: float = 1e-2,
        batch_size: int | None = None,
        weight_decay: float = 0.0,
        dropout: float = 0.0,
        random_state=None,
        hypergrad: str = "unrolled",
        n_classes: int | None = None,
        tol: float = 1e-8,
        cg_damping: float = 1e-4,
        cg_maxiter: int = 100,
        recourse_loss_weight: float = 0.0,
        action_set=None,
        recourse_goal: int = 1,
    ):
        self.hidden = hidden
        self.activation = activation
        self.update_rule = update_rule
        self.window = window
        self.epochs = epochs
        self.lr = lr
        self.fit_epochs = fit_epochs
        self.fit_lr = fit_lr
        self.batch_size = batch_size
        self.weight_decay = weight_decay
        self.dropout = dropout
        self.random_state = random_state
        self.hypergrad = hypergrad
        self.n_classes = n_classes
        self.tol = tol
        self.cg_damping = cg_damping
        self.cg_maxiter = cg_maxiter
        self.recourse_loss_weight = recourse_loss_weight
        self.action_set = action_set
        self.recourse_goal = recourse_goal

    def _check_params(self) -> None:
        hidden = self.hidden
        if not isinstance(hidden, tuple | list) or not all(
            isinstance(h, Integral) and not isinstance(h, bool) and h > 0 for h in hidden
        ):
            raise ConfigError(f"hidden={hidden!r} must be a tuple of positive integers")
        if self.activation not in ACTIVATIONS:
            raise ConfigError(
                f"activation={self.activation!r} is not one of {', '.join(ACTIVATIONS)}"
            )
        if self.hypergrad not in HYPERGRADS:
            raise ConfigError(f"hypergrad={self.hypergrad!r} is not one of {', '.join(HYPERGRADS)}")
        if self.update_rule in MEMORY_RULES and self.hypergrad != "implicit":
            raise ConfigError(
                f"hypergrad={self.hypergrad!r} is not supported with "
                f"update_rule={self.update_rule!r}; use hypergrad='implicit'"
            )
        check_positive("epochs", self.epochs, integer=True, allow_zero=True)
        check_positive("lr", self.lr)
        check_positive("fit_epochs", self.fit_epochs, integer=True, allow_zero=True)
        check_positive("fit_lr", self.fit_lr)
        if self.batch_size is not None:
            check_positive("batch_size", self.batch_size, integer=True)
        check_positive("weight_decay", self.weight_decay, allow_zero=True)
        check_positive("dropout", self.dropout, allow_zero=True)
        if self.dropout >= 1:
            raise ConfigError(f"dropout={self.dropout!r} must be in [0, 1)")
        check_positive("tol", self.tol)
        check_positive("cg_damping", self.cg_damping, allow_zero=True)
        check_positive("cg_maxiter", self.cg_maxiter, integer=True)
        self._check_window()
        check_recourse_training(self)

    # -- the model -------------------------------------------------------------------
    def _net(self) -> torch.nn.Module:
        from recourse_sim.learners.mlp_torch import shared_net

        sizes = (self.n_features_in_, *self.hidden, len(self.classes_))
        return shared_net(sizes, self.activation)

    @property
    def param_keys(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self._net().named_parameters())

    def proba_fn(self, state: State, X: torch.Tensor) -> torch.Tensor:
        net = self._net()
        params = {name: state[name] for name, _ in net.named_parameters()}
        return torch.softmax(torch.func.functional_call(net, params, (X.to(torch.float64),)), dim=1)

    def _risk_fn(self) -> Callable[..., torch.Tensor]:
        """R(params, X, y, masks=None, X_recourse=None): mean cross-entropy
        (+ λ · mean cross-entropy of the rows X_recourse = X + δ* at the recourse goal)
        + (weight_decay / 2) ‖θ‖²."""
        net, wd = self._net(), self.weight_decay
        lam, goal = self.recourse_loss_weight, self.recourse_goal

        def risk(
            params: State,
            X: torch.Tensor,
            y: torch.Tensor,
            masks=None,
            X_recourse: torch.Tensor | None = None,
        ) -> torch.Tensor:
            logits = torch.func.functional_call(net, params, (X,), {"masks": masks})
            # Sum / max(n, 1) rather than mean: an empty round contributes nothing.
            ce = torch.nn.functional.cross_entropy(logits, y.long(), reduction="sum")
            if X_recourse is not None:
                logits_r = torch.func.functional_call(net, params, (X_recourse,), {"masks": masks})
                goals = torch.full((len(X_recourse),), goal, dtype=torch.long)
                ce_r = torch.nn.functional.cross_entropy(logits_r, goals, reduction="sum")
                ce = ce + lam * ce_r
            ce = ce / max(len(X), 1)
            return ce + 0.5 * wd * sum((p * p).sum() for p in params.values())

        return risk

    def _recourse_delta(self, params: State, X: torch.Tensor) -> torch.Tensor | None:
        """Ross's δ* of every row of X under `params` (detached), or None when λ = 0."""
        if self.recourse_loss_weight == 0:
            return None
        params = {k: params[k] for k in self.param_keys}
        return self.action_set.recourse_delta(self, params, X, self.recourse_goal)

    def _recourse_rows(self, params: State, X: torch.Tensor) -> torch.Tensor | None:
        """X + δ* (X keeps its graph), or None when λ = 0."""
        delta = self._recourse_delta(params, X)
        return None if delta is None else X + delta

    # -- fitting ---------------------------------------------------------------------
    def _generator(self) -> torch.Generator:
        rs = self.random_state
        if isinstance(rs, np.random.Generator):
            seed = int(rs.integers(2**63 - 1))
        elif rs is None:
            seed = torch.Generator().seed()  # fresh OS entropy, not the global RNG
        elif isinstance(rs, Integral) and not isinstance(rs, bool):
            seed = int(rs)
        else:
            raise ConfigError(
                f"random_state={rs!r} must be None, an int or a numpy.random.Generator"
            )
        return torch.Generator().manual_seed(seed)

    def _init_state(self, X: torch.Tensor, y: torch.Tensor) -> State:
        gen = self._generator()
        params = {}
        for name, p in self._net().named_parameters():
            # PyTorch's default Linear init: U(−1/√fan_in, 1/√fan_in) for W and b.
            bound = 1.0 / np.sqrt(self._fan_in(name))
            u = torch.rand(p.shape, generator=gen, dtype=torch.float64)
            params[name] = (2 * u - 1) * bound
        params = self._adam_fit(params, X, y, gen)
        if self.update_rule in MEMORY_RULES:
            params.update(first_memory(X, y))
        return params

    def _fan_in(self, name: str) -> int:
        index = int(name.split(".")[1])
        return [self.n_features_in_, *self.hidden][index]

    def _adam_fit(self, params: State, X: torch.Tensor, y: torch.Tensor, gen) -> State:
        """`fit_epochs` passes of Adam over minibatches (with dropout if set)."""
        risk_grad = torch.func.grad(self._risk_fn())
        n = len(X)
        batch = self.batch_size or n
        m = {k: torch.zeros_like(p) for k, p in params.items()}
        v = {k: torch.zeros_like(p) for k, p in params.items()}
        (b1, b2), t = _BETAS, 0
        with torch.no_grad():
            for _ in range(self.fit_epochs):
                order = torch.randperm(n, generator=gen) if batch < n else torch.arange(n)
                for start in range(0, n, batch):
                    idx = order[start : start + batch]
                    masks = self._dropout_masks(len(idx), gen)
                    X_recourse = self._recourse_rows(params, X[idx])
                    g = risk_grad(params, X[idx], y[idx], masks, X_recourse)
                    t += 1
                    for k in params:
                        m[k] = b1 * m[k] + (1 - b1) * g[k]
                        v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
                        step = (m[k] / (1 - b1**t)) / (torch.sqrt(v[k] / (1 - b2**t)) + _ADAM_EPS)
                        params[k] = params[k] - self.fit_lr * step
        return params

    def _dropout_masks(self, n: int, gen: torch.Generator) -> list[torch.Tensor] | None:
        if self.dropout == 0:
            return None
        keep = 1.0 - self.dropout
        return [
            (torch.rand((n, h), generator=gen, dtype=torch.float64) < keep) / keep
            for h in self.hidden
        ]

    def _lbfgs(self, params: State, X: torch.Tensor, y: torch.Tensor) -> State:
        """Full-batch L-BFGS on R(X, y) from `params`; no graph to the inputs."""
        risk = self._risk_fn()
        leaves = {k: p.detach().clone().requires_grad_(True) for k, p in params.items()}
        X, y = X.detach(), y.detach()
        opt = torch.optim.LBFGS(
            list(leaves.values()),
            lr=1.0,
            max_iter=self.fit_epochs,
            max_eval=2 * self.fit_epochs,
            tolerance_grad=self.tol,
            tolerance_change=0.0,  # stop on the gradient tolerance or the cap only
            history_size=20,
            line_search_fn="strong_wolfe",
        )

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = risk(leaves, X, y, None, self._recourse_rows(leaves, X))
            loss.backward()
            return loss

        if self.fit_epochs > 0:
            with torch.enable_grad():
                opt.step(closure)
        return {k: p.detach() for k, p in leaves.items()}

    # -- the update ------------------------------------------------------------------
    def update_fn(self, state: State, X: torch.Tensor, y: torch.Tensor) -> State:
        if self.update_rule == "frozen":
            return dict(state)
        params = {k: state[k] for k in self.param_keys}
        X = X.to(torch.float64)
        if "X_mem" in state:  # refit / window: retrain on the remembered rows
            X_mem, y_mem, sizes = remember(state, X, y, self.window)
            trained = self._lbfgs(params, X_mem, y_mem)
            new = self._implicit(trained, X_mem, y_mem)
            new.update(X_mem=X_mem, y_mem=y_mem, round_sizes=sizes)
            return new
        risk_grad = torch.func.grad(self._risk_fn())
        if self.hypergrad == "unrolled":
            # torch.func.grad composes with outer autograd: the steps stay differentiable.
            for _ in range(self.epochs):
                g = risk_grad(params, X, y, None, self._recourse_rows(params, X))
                params = {k: p - self.lr * g[k] for k, p in params.items()}
            return params
        with torch.no_grad():
            params = {k: p.detach() for k, p in params.items()}
            X_fixed = X.detach()
            for _ in range(self.epochs):
                g = risk_grad(params, X_fixed, y, None, self._recourse_rows(params, X_fixed))
                params = {k: p - self.lr * g[k] for k, p in params.items()}
        return self._implicit(params, X, y)

    def _implicit(self, params: State, X: torch.Tensor, y: torch.Tensor) -> State:
        """Attach the implicit-function derivative dθ/dX at θ = `params` (value unchanged)."""
        if not (torch.is_grad_enabled() and X.requires_grad):
            return params
        from recourse_sim.learners.mlp_torch import ImplicitCorrection

        risk = self._risk_fn()
        keys = list(params)
        shapes = [params[k].shape for k in keys]
        sizes = [params[k].numel() for k in keys]
        theta = torch.cat([params[k].reshape(-1) for k in keys]).detach()

        def unflatten(flat: torch.Tensor) -> State:
            parts = torch.split(flat, sizes)
            return {k: p.reshape(s) for k, p, s in zip(keys, parts, shapes, strict=True)}

        X_fixed, y_fixed = X.detach(), y.detach()
        # δ* at θ, held fixed (piecewise constant in θ and X)
        delta = self._recourse_delta(params, X_fixed)
        X_recourse = None if delta is None else X_fixed + delta

        def flat_grad(flat: torch.Tensor) -> torch.Tensor:
            g = torch.func.grad(risk)(unflatten(flat), X_fixed, y_fixed, None, X_recourse)
            return torch.cat([g[k].reshape(-1) for k in keys])

        def solve(v: torch.Tensor) -> torch.Tensor:
            # Reverse-over-reverse: the graph of ∇R is built once and reused by every
            # Hessian-vector product (H is symmetric, so a vjp is an hvp).
            _, hvp = torch.func.vjp(flat_grad, theta)

            def matvec(u: torch.Tensor) -> torch.Tensor:
                return hvp(u)[0] + self.cg_damping * u

            return conjugate_gradient(matvec, v.detach(), self.cg_maxiter, tol=_CG_TOL)

        X_recourse = None if delta is None else X + delta
        g = torch.func.grad(risk)(unflatten(theta), X, y, None, X_recourse)  # with its graph to X
        g_flat = torch.cat([g[k].reshape(-1) for k in keys])
        return unflatten(theta + ImplicitCorrection.apply(g_flat, solve))
