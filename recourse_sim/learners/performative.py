"""Update rules that descend the performative risk: PerfGD and a two-point zeroth-order rule.

Repeated risk minimisation and repeated gradient descent minimise the risk on the data
the deployed model induced, as if that data did not depend on the model; they head for a
performatively *stable* point. The rules here descend the performative risk
PR(θ) = E_{Z∼D(θ)} ℓ(Z; θ) itself, whose gradient has a second term, the distribution
map's derivative:

    ∇PR(θ) = E_{D(θ)}[∇_θ ℓ(Z; θ)] + E_{D(θ)}[(∂x/∂θ)ᵀ ∇_x ℓ(Z; θ)].

* ``perfgd`` — performative gradient descent (Izzo, Ying & Zou, ICML 2021) for a
  location family: people of class c report x = x₀ + μ_c(θ), with μ_c linear in θ near
  the current model. The rule keeps the last ``history`` rounds' deployed θ and each
  class's mean report, estimates each class's Jacobian ∂μ_c/∂θ by ridge least squares on
  their round-to-round differences, and takes ``epochs`` steps of size ``lr`` along the
  estimated ∇PR on the round's rows (the first term exactly, the second with the
  estimated Jacobian; in round 1, with no difference yet, the first term alone).
* ``dfo`` — derivative-free descent with the two-point estimate of ∇PR (Flaxman,
  Kalai & McMahan 2005; Miller, Perdomo & Zrnic 2021): the deployed model alternates
  between θ + δu and θ − δu for a random unit direction u; after the second of the two
  rounds, g = D (PR₊ − PR₋) / (2δ) u with PR± the risks measured on the rows each of
  them induced, and θ ← θ − lr g. It needs no model of the response, only two rounds per
  step.

The risk is the per-row objective of `LogisticRegression`'s ``sgd`` rule, mean
cross-entropy + ‖W‖² / (2 C m) on a round of m rows. Both rules are binary logistic
regression (`PerformativeLogisticRegression`); their update is a torch function of the
round's rows (the PerfGD step is differentiable in X; the DFO step through the measured
risks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.errors import ConfigError
from recourse_sim.lazy import LazyModule
from recourse_sim.learners.base import State, check_positive
from recourse_sim.learners.logistic import LogisticRegression
from recourse_sim.learners.logistic_math import scaled

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds learners without torch
    torch = LazyModule("torch", globals())

PERFORMATIVE_RULES = ("perfgd", "dfo")
"""The update rules of `PerformativeLogisticRegression`."""


class PerformativeLogisticRegression(LogisticRegression):
    """Binary L2 logistic regression updated by ``perfgd`` or ``dfo`` (module docstring).

    The first model is the plain fit (`LogisticRegression`); each update is one round of
    the rule on the round's rows only.

    Parameters
    ----------
    C : float
        Inverse regularisation strength (> 0).
    update_rule : {"perfgd", "dfo"}
        The rule.
    window : None
        Unused (the scikit-learn conventions list every parameter).
    epochs : int
        ``perfgd``: gradient steps per round, on the round's rows.
    lr : float
        Step size (per-row objective, as the ``sgd`` rule).
    history : int
        ``perfgd``: rounds of (θ, class means) kept for the Jacobian estimate (≥ 2).
    ridge : float
        ``perfgd``: ridge of the Jacobian's least squares, relative to the mean squared
        step of θ over the history.
    perturbation : float
        ``dfo``: δ, the size of the two probes θ ± δu.
    random_state : int
        ``dfo``: seed of the random directions u (the k-th direction depends on the seed
        and k only).
    n_classes : int or None
        Must be 2 (or None).
    standardize : bool
        Learn on standardised features (as `LogisticRegression`).
    """

    fit_intercept = True
    recourse_loss_weight = 0.0
    tol = 1e-10
    max_iter = 100

    def __init__(
        self,
        C: float = 1.0,
        update_rule: str = "perfgd",
        window: int | None = None,
        epochs: int = 1,
        lr: float = 0.1,
        history: int = 5,
        ridge: float = 1e-3,
        perturbation: float = 0.1,
        random_state: int = 0,
        n_classes: int | None = None,
        standardize: bool = False,
    ):
        self.C = C
        self.update_rule = update_rule
        self.window = window
        self.epochs = epochs
        self.lr = lr
        self.history = history
        self.ridge = ridge
        self.perturbation = perturbation
        self.random_state = random_state
        self.n_classes = n_classes
        self.standardize = standardize

    def _validate(self, X, y, *, first: bool):
        # the base checks the rule's name against the base rules; ours are checked here
        rule = self.update_rule
        if rule not in PERFORMATIVE_RULES:
            raise ConfigError(f"update_rule={rule!r} is not one of {', '.join(PERFORMATIVE_RULES)}")
        self.update_rule = "sgd"
        try:
            return super()._validate(X, y, first=first)
        finally:
            self.update_rule = rule

    def _check_params(self) -> None:
        check_positive("C", self.C)
        check_positive("epochs", self.epochs, integer=True)
        check_positive("lr", self.lr)
        check_positive("history", self.history, integer=True)
        if self.history < 2:
            raise ConfigError(f"history={self.history!r} must be at least 2 rounds")
        check_positive("ridge", self.ridge)
        check_positive("perturbation", self.perturbation)
        if self.window is not None:
            raise ConfigError(f"window={self.window!r} is only used with update_rule='window'")
        if len(self.classes_) != 2:
            raise ConfigError(f"{self.update_rule} needs two classes, got {len(self.classes_)}")

    # -- the risk --------------------------------------------------------------------
    def risk(self, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor, scaling: State):
        """Mean cross-entropy + ‖W‖² / (2 C m) of θ (1, d + 1) on the rows (X, y)."""
        Z = self.design(scaled(scaling, X.to(torch.float64)))
        logits = (Z @ theta.T)[:, 0]
        loss = torch.nn.functional.softplus(logits) - y.to(torch.float64) * logits
        return loss.mean() + (theta[:, :-1] ** 2).sum() / (2.0 * self.C * max(len(X), 1))

    # -- fit and update -----------------------------------------------------------------
    def _init_state(self, X: torch.Tensor, y: torch.Tensor) -> State:
        state = super()._init_state(X, y)
        d = X.shape[1]
        if self.update_rule == "perfgd":
            # the last `history` rounds, oldest first, the last `filled` rows in use (fixed
            # shapes: a checkpoint of round 1 and of round 100 look alike)
            state["theta_hist"] = torch.zeros((self.history, d + 1), dtype=torch.float64)
            state["mean_hist"] = torch.zeros((self.history, 2, d), dtype=torch.float64)
            state["filled"] = torch.tensor(0.0, dtype=torch.float64)
            return state
        centre = self.pack(state)
        state.update(
            centre=centre.clone(),
            steps=torch.tensor(0.0, dtype=torch.float64),  # two-point estimates taken
            risk_plus=torch.tensor(0.0, dtype=torch.float64),
            phase=torch.tensor(0.0, dtype=torch.float64),  # 0: θ + δu deployed, 1: θ − δu
        )
        state.update(self.unpack(centre + self.perturbation * self._direction(0, d + 1)))
        return state

    def _direction(self, k: int, size: int) -> torch.Tensor:
        """The k-th random unit direction u (1, size)."""
        u = np.random.default_rng([int(self.random_state), int(k)]).standard_normal(size)
        return torch.from_numpy(u / np.linalg.norm(u))[None]

    def update_fn(self, state: State, X: torch.Tensor, y: torch.Tensor) -> State:
        return self.warm_update_fn(state, X, y, None)

    def warm_update_fn(self, state: State, X: torch.Tensor, y: torch.Tensor, start) -> State:
        scaling = {k: state[k] for k in ("x_shift", "x_scale") if k in state}
        X = X.to(torch.float64)
        new = dict(state)
        if not len(X):
            return new
        if self.update_rule == "perfgd":
            return self._perfgd(new, X, y, scaling)
        return self._dfo(new, X, y, scaling)

    def _perfgd(self, state: State, X: torch.Tensor, y: torch.Tensor, scaling: State) -> State:
        theta = self.pack(state)
        means = torch.stack(
            [X[y == c].mean(0) if bool((y == c).any()) else torch.zeros(X.shape[1]) for c in (0, 1)]
        )
        theta_hist = torch.cat([state["theta_hist"][1:], theta.detach()])
        mean_hist = torch.cat([state["mean_hist"][1:], means[None]])
        filled = min(int(state["filled"]) + 1, self.history)
        thetas, means_used = theta_hist[-filled:], mean_hist[-filled:]
        jacobians = None
        if filled >= 2:
            d_theta = (thetas[1:] - thetas[:-1]).detach()  # (k, D)
            d_mean = means_used[1:] - means_used[:-1]  # (k, 2, d)
            gram = d_theta.T @ d_theta
            # a ridge relative to the steps' size: the estimate does not fade as they shrink
            scale = torch.trace(gram) / gram.shape[0] + torch.finfo(torch.float64).tiny
            gram = gram + self.ridge * scale * torch.eye(gram.shape[0])
            # ∂μ_c/∂θ (d, D) per class: d_mean_c ≈ d_theta @ Jᵀ
            solve = torch.linalg.solve(gram, d_theta.T)  # (D, k)
            jacobians = torch.stack([(solve @ d_mean[:, c]).T for c in (0, 1)])  # (2, d, D)
        for _ in range(self.epochs):
            grad = self._performative_gradient(theta, X, y, scaling, jacobians)
            theta = theta - self.lr * grad
        new = self.unpack(theta)
        new.update(
            scaling,
            theta_hist=theta_hist,
            mean_hist=mean_hist,
            filled=torch.tensor(float(filled), dtype=torch.float64),
        )
        return new

    def _performative_gradient(self, theta, X, y, scaling, jacobians) -> torch.Tensor:
        """∇_θ of the risk on (X, y), plus (∂x/∂θ)ᵀ ∇_x of it through each class's
        estimated Jacobian (None: the first term alone)."""
        with torch.enable_grad():
            th = theta.detach().requires_grad_(True)
            Xg = X.detach().requires_grad_(jacobians is not None)
            r = self.risk(th, Xg, y, scaling)
            inputs = (th, Xg) if jacobians is not None else (th,)
            grads = torch.autograd.grad(r, inputs, create_graph=torch.is_grad_enabled())
        grad = grads[0]
        if jacobians is not None:
            grad_x = grads[1]  # (n, d): ∂risk/∂x_i
            per_class = torch.stack([grad_x[y == c].sum(0) for c in (0, 1)])  # (2, d)
            grad = grad + torch.einsum("cd,cdk->k", per_class, jacobians)[None]
        return grad

    def _dfo(self, state: State, X: torch.Tensor, y: torch.Tensor, scaling: State) -> State:
        theta = self.pack(state)
        risk = self.risk(theta, X, y, scaling)
        D = theta.shape[1]
        k = int(state["steps"])
        u = self._direction(k, D)
        centre = state["centre"]
        if float(state["phase"]) == 0.0:  # θ + δu measured: deploy θ − δu next
            deployed = centre - self.perturbation * u
            state.update(risk_plus=risk, phase=torch.tensor(1.0, dtype=torch.float64))
        else:  # both measured: one step, then the next direction's θ + δu
            grad = D * (state["risk_plus"] - risk) / (2.0 * self.perturbation) * u
            centre = centre - self.lr * grad
            deployed = centre + self.perturbation * self._direction(k + 1, D)
            state.update(
                centre=centre,
                steps=torch.tensor(float(k + 1), dtype=torch.float64),
                phase=torch.tensor(0.0, dtype=torch.float64),
            )
        state.update(self.unpack(deployed))
        return state

    def refit_hypergradient(self, *args, **kwargs):
        return None

    def update(self, X, y, start: State | None = None) -> PerformativeLogisticRegression:
        """Apply the rule to one round of reported rows (`Learner.update`)."""
        X_t, y_t = self._validate(X, y, first=False)
        with torch.no_grad():
            new = self.update_fn(self.state_, X_t, y_t)
        self.state_ = {k: v.detach() for k, v in new.items()}
        return self
