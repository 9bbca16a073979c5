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
  With ``jacobian="response"`` the Jacobian is not estimated but computed: the rule is
  given the response itself (below).
* ``dfo`` — derivative-free descent with the two-point estimate of ∇PR (Flaxman,
  Kalai & McMahan 2005; Miller, Perdomo & Zrnic 2021): the deployed model alternates
  between θ + δu and θ − δu for a random unit direction u; after the second of the two
  rounds, g = D (PR₊ − PR₋) / (2δ) u with PR± the risks measured on the rows each of
  them induced, and θ ← θ − lr g. It needs no model of the response, only two rounds per
  step.

PerfGD with the response's own derivative (``jacobian="response"``): when people report
x = x₀ + δ(θ), the best response of the ``best_response`` strategy
(`recourse_sim.agents.best_response.best_response_delta`: the maximiser of the model's
log-odds of class 1 minus ‖w ⊙ δ‖²_p / (2ε) within the action set's bounds), the rule is
given what defines δ: the responding population's action set (norm p, cost weights w,
immutable and monotone features, value bounds ``lower``/``upper`` and ``max_change``),
its strength ε and the classes whose rows respond (``responding_classes``; None:
every row). It is not given people's unmoved features x₀. On continuous features the
response is a clip of a move m(g) that is the same for every row (p = 2: ε g / w²; p = 1:
ε g_j / w_j² on the feature of largest |g_j / w_j|; p = ∞: ε ‖g / w‖₁ sign(g_j) / w_j;
g the log-odds' weights in the units of x, zero where a move cannot help), so

    ∂x_ij/∂θ = ∂m_j/∂θ   where row i responds and no bound stopped its move of feature j,
    ∂x_ij/∂θ = 0         elsewhere,

with ∂m/∂θ from automatic differentiation of m (`response_move`,
`torch.autograd.functional.jacobian`).
Which bounds stopped a move is read off the reports and the deployed θ: a move up was
stopped where the report is at the feature's ``upper`` bound or m_j exceeds its
``max_change`` (down: ``lower``, −``max_change``). The Jacobian is then exact wherever δ is
differentiable in θ, that is everywhere but the kinks (a report exactly at a bound it
would just reach, a tie of p = 1's largest |g_j / w_j|, a weight of 0 on a monotone
feature), when the rows are the responses to the deployed θ of rows x₀ that do not
depend on θ (``memory: false``; with ``memory: true`` it is the derivative of this
round's response, the history held fixed), every row of a responding class responds and
the recorded labels are the outcomes people had when they responded. Typed (discrete)
actionable features are refused: their response is a step function of θ.

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

JACOBIANS = ("estimated", "response")
"""Where ``perfgd``'s Jacobian ∂x/∂θ comes from: estimated from past rounds, or computed
from the response (see the module docstring)."""


def response_move(coef: torch.Tensor, action_set, strength: float) -> torch.Tensor:
    """The best response's move before bounds m(g), (d,), to log-odds weights g (d,) in
    the units of x: what `best_response_delta` clips to the box on continuous features
    (its h_j = 0 where a move cannot help), as a differentiable torch function of g."""
    a = action_set
    coef = coef.to(torch.float64)
    increase, decrease = torch.tensor(a.increase_mask), torch.tensor(a.decrease_mask)
    helps = torch.tensor(a.actionable) & ~(increase & (coef < 0)) & ~(decrease & (coef > 0))
    w = torch.from_numpy(np.where(a.actionable, a.weights_, 1.0))
    h = torch.where(helps, coef, torch.zeros_like(coef)) / w
    eps = float(strength)
    if a.p == 2:
        u = eps * h
    elif a.p == 1:  # all on the feature of largest |h_j| (the first of ties)
        u = eps * h * torch.nn.functional.one_hot(h.abs().argmax(), len(h)).to(h.dtype)
    else:
        u = eps * h.abs().sum() * torch.sign(h)
    return u / w


def move_to_model(
    theta: torch.Tensor, scaling, action_set, strength: float, sign: float = 1.0
) -> torch.Tensor:
    """The best response's move before bounds (d,) to the model θ (1, D) (`learner.pack`'s
    layout, standardised by `scaling`): `response_move` of the weights of its log-odds of
    the favourable class in the units of x (`sign` −1: the favourable class is class 0)."""
    coef = theta[0, : action_set.n_features]
    if "x_scale" in scaling:
        coef = coef / scaling["x_scale"].reshape(-1)
    return response_move(sign * coef, action_set, strength)


def binary_risk(
    learner: LogisticRegression, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor, scaling
) -> torch.Tensor:
    """The per-row objective of binary logistic regression's ``sgd`` rule, as a torch
    function of θ (1, D) (`learner.pack`'s layout): mean cross-entropy at labels y (0/1)
    + ‖W‖² / (2 C m) on the m rows X, standardised by `scaling`."""
    Z = learner.design(scaled(scaling, X.to(torch.float64)))
    logits = (Z @ theta.T)[:, 0]
    loss = torch.nn.functional.softplus(logits) - y.to(torch.float64) * logits
    weights = theta[:, : X.shape[1]]
    return loss.mean() + (weights**2).sum() / (2.0 * learner.C * max(len(X), 1))


ENVIRONMENT_PARAMS = ("update_rule", "window", "action_set", "strength", "responding_classes")
"""`PerformativeLogisticRegression`'s parameters the environment sets from the scenario
(the rule; the response that ``jacobian="response"`` differentiates)."""


def performative_params_problem(rule: str, params) -> str | None:
    """What is wrong with the names of `params` (``learner.params``, with
    ``standardize``) for update rule `rule`: the ones that are not a parameter a scenario
    may give `PerformativeLogisticRegression` (None: nothing)."""
    allowed = set(PerformativeLogisticRegression._get_param_names()) - set(ENVIRONMENT_PARAMS)
    unknown = sorted(set(params) - allowed - {"n_classes"})
    if not unknown:
        return None
    return (
        f"{', '.join(map(repr, unknown))} is not a parameter of update_rule {rule} "
        f"(allowed: {', '.join(sorted(allowed))})"
    )


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
    jacobian : {"estimated", "response"}
        ``perfgd``: estimate ∂x/∂θ from past rounds, or differentiate the response given
        by ``action_set``, ``strength`` and ``responding_classes`` (module docstring).
    action_set : ActionSet or None
        ``jacobian="response"``: the responding population's action set (continuous
        actionable features).
    strength : float
        ``jacobian="response"``: the response's strength ε (≥ 0).
    responding_classes : tuple of int or None
        ``jacobian="response"``: the classes whose rows respond (None: every row).
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
        jacobian: str = "estimated",
        action_set=None,
        strength: float = 1.0,
        responding_classes: tuple[int, ...] | None = None,
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
        self.jacobian = jacobian
        self.action_set = action_set
        self.strength = strength
        self.responding_classes = responding_classes
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
        if self.jacobian not in JACOBIANS:
            raise ConfigError(f"jacobian={self.jacobian!r} is not one of {', '.join(JACOBIANS)}")
        if self.jacobian == "response":
            self._check_response()

    def _check_response(self) -> None:
        if self.update_rule != "perfgd":
            raise ConfigError(f"jacobian='response' is an option of perfgd, not {self.update_rule}")
        a = self.action_set
        if a is None:
            raise ConfigError("jacobian='response' needs the response's action_set")
        check_positive("strength", self.strength, allow_zero=True)
        typed = a.typed_actionable_names()
        if typed:
            raise ConfigError(
                f"jacobian='response' differentiates a continuous response; {', '.join(typed)} "
                "move by whole steps or levels (a step function of the model)"
            )

    # -- the risk --------------------------------------------------------------------
    def risk(self, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor, scaling: State):
        """`binary_risk` of θ on the rows (X, y)."""
        return binary_risk(self, theta, X, y, scaling)

    # -- fit and update -----------------------------------------------------------------
    def _init_state(self, X: torch.Tensor, y: torch.Tensor) -> State:
        state = super()._init_state(X, y)
        d = X.shape[1]
        if self.update_rule == "perfgd" and self.jacobian == "response":
            return state  # the Jacobian comes from the response: no history
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
        if self.jacobian == "response":
            second_term = self.response_term(theta, X, y, scaling)
            for _ in range(self.epochs):
                theta = theta - self.lr * self._performative_gradient(
                    theta, X, y, scaling, second_term
                )
            new = self.unpack(theta)
            new.update(scaling)
            return new
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
        second_term = None
        if jacobians is not None:

            def second_term(grad_x: torch.Tensor) -> torch.Tensor:
                per_class = torch.stack([grad_x[y == c].sum(0) for c in (0, 1)])  # (2, d)
                return torch.einsum("cd,cdk->k", per_class, jacobians)[None]

        for _ in range(self.epochs):
            grad = self._performative_gradient(theta, X, y, scaling, second_term)
            theta = theta - self.lr * grad
        new = self.unpack(theta)
        new.update(
            scaling,
            theta_hist=theta_hist,
            mean_hist=mean_hist,
            filled=torch.tensor(float(filled), dtype=torch.float64),
        )
        return new

    def _performative_gradient(self, theta, X, y, scaling, second_term) -> torch.Tensor:
        """∇_θ of the risk on (X, y), plus Σᵢ (∂xᵢ/∂θ)ᵀ ∇_{xᵢ} of it: `second_term` of the
        risk's gradient in X, (n, d) → (1, D) (None: the first term alone)."""
        with torch.enable_grad():
            th = theta.detach().requires_grad_(True)
            Xg = X.detach().requires_grad_(second_term is not None)
            r = self.risk(th, Xg, y, scaling)
            inputs = (th, Xg) if second_term is not None else (th,)
            grads = torch.autograd.grad(r, inputs, create_graph=torch.is_grad_enabled())
        grad = grads[0]
        if second_term is not None:
            grad = grad + second_term(grads[1])  # grads[1] (n, d): ∂risk/∂x_i
        return grad

    # -- the response's own derivative (jacobian="response") ------------------------------
    def move_of(self, theta: torch.Tensor, scaling: State) -> torch.Tensor:
        """The response's move before bounds (d,) to θ (1, D) (`move_to_model`)."""
        return move_to_model(theta, scaling, self.action_set, self.strength)

    def response_jacobian(self, theta: torch.Tensor, scaling: State) -> torch.Tensor:
        """∂m/∂θ (d, D) of the move before bounds, at θ (1, D)."""
        with torch.enable_grad():  # (one backward pass per feature: d is small)
            jac = torch.autograd.functional.jacobian(
                lambda th: self.move_of(th, scaling), theta.detach()
            )
        return jac.reshape(jac.shape[0], -1)

    def moving(self, theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor, scaling: State):
        """(n, d) bool: which reports move with θ, the responses to the deployed θ (1, D)
        of the rows (X, y): rows of a responding class, on features whose move m no bound
        stopped (a move up stops at ``upper`` or beyond ``max_change``; down likewise)."""
        a = self.action_set
        move = self.move_of(theta.detach(), scaling)
        X = X.detach().to(torch.float64)
        upper, lower = torch.tensor(a.upper_), torch.tensor(a.lower_)
        limit = torch.tensor(a.max_change_)
        # (a report a bound stopped is on it, to the rounding of x₀ + (bound − x₀))
        tol = 1e-9 * (1.0 + torch.where(torch.isfinite(upper), upper.abs(), 0.0))
        at_upper = torch.isfinite(upper) & (X >= upper - tol)
        tol = 1e-9 * (1.0 + torch.where(torch.isfinite(lower), lower.abs(), 0.0))
        at_lower = torch.isfinite(lower) & (X <= lower + tol)
        stopped = ((move > 0) & (at_upper | (move > limit))) | (
            (move < 0) & (at_lower | (-move > limit))
        )
        rows = torch.ones(len(X), dtype=torch.bool)
        if self.responding_classes is not None:
            rows = torch.isin(y, torch.tensor(list(self.responding_classes), dtype=y.dtype))
        return rows[:, None] & ~stopped

    def response_term(self, theta, X, y, scaling):
        """The performative gradient's second term as a function of ∇_X risk (n, d):
        Σᵢⱼ [xᵢⱼ moves] ∂risk/∂xᵢⱼ ∂mⱼ/∂θ, at the deployed θ (1, D)."""
        jac = self.response_jacobian(theta, scaling)  # (d, D)
        moving = self.moving(theta, X, y, scaling).to(torch.float64)

        def second_term(grad_x: torch.Tensor) -> torch.Tensor:
            return ((moving * grad_x).sum(0) @ jac)[None]

        return second_term

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
