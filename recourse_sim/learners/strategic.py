"""A linear classifier that anticipates the population's response (strategic classification).

The deployed model decides on reports that people have moved in response to it. For a
linear score s(x) = g·x + b and a population whose response raises everyone's score by
the same *gain* G(g) (a function of the weights only), the model's decisions under the
response are those of the score s + G on the features people started from. Two
responses have such a gain:

* ``response: threshold`` — strategic classification's best response (Hardt et al.
  2016; strategic-ml's ``LinearStrategicDelta``): a person the model rejects moves to
  the decision boundary when that costs at most the reach r (their budget), and stays
  otherwise. The cheapest move to the boundary under the cost ‖w ⊙ δ‖_p costs
  −s(x) / ‖h‖_q, with h = g / w and q the dual norm of p, so a person is accepted after
  responding exactly when s(x) + r‖h‖_q ≥ 0: G = r‖h‖_q.
* ``response: quadratic`` — the `best_response` strategy (score minus ‖w ⊙ δ‖²_p / (2ε)):
  every row moves by the same δ, raising the score by G = ε‖h‖_q².

Levanon & Rosenfeld (2021)'s strategic hinge loss is the hinge of the score the model
will see, max(0, 1 − ỹ (s(x) + G(g))) with ỹ = ±1 (their "2 z y ‖w‖" term is G for
L2 costs and reach 2). With an unpenalised intercept, b' = b + G(g) maps the problem
one-to-one onto the plain hinge-loss SVM in (g, b'): the strategic hinge risk is
minimised exactly by the SVM fitted on the features people start from (a convex
problem, solved by libsvm through scikit-learn's ``SVC``) followed by b = b' − G(g).

Dual norms of the cost ‖w ⊙ δ‖_p: p = 2 ↔ ‖h‖₂, p = 1 ↔ ‖h‖_∞, p = ∞ ↔ ‖h‖₁. Features
a person cannot change (immutable) count with h_j = 0, and a monotone feature only in
its allowed direction; value bounds are not anticipated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.errors import ConfigError
from recourse_sim.lazy import LazyModule
from recourse_sim.learners.base import State, as_array, check_positive
from recourse_sim.learners.logistic import LogisticRegression
from recourse_sim.learners.logistic_math import standardisation, standardisation_arrays

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds learners without torch
    torch = LazyModule("torch", globals())

RESPONSES = ("threshold", "quadratic")
"""Responses `StrategicLinear` anticipates (see the module docstring)."""


def dual_norm(coef: np.ndarray, action_set=None) -> float:
    """‖h‖_q of h = g / w: the largest score gain g·δ per unit of cost ‖w ⊙ δ‖_p, over
    the changes the action set allows (immutable features fixed, monotone ones in their
    direction; its bounds and budget not used). Without an action set: ‖g‖₂."""
    g = np.asarray(coef, dtype=np.float64).reshape(-1)
    if action_set is None:
        return float(np.linalg.norm(g))
    a = action_set
    g = np.where(a.actionable, g, 0.0)
    g = np.where(a.increase_mask & (g < 0), 0.0, g)
    g = np.where(a.decrease_mask & (g > 0), 0.0, g)
    w = a.weights_
    if ((w == 0) & (g != 0)).any():
        return float("inf")  # a free feature that moves the score: any gain costs nothing
    h = np.abs(np.divide(g, w, out=np.zeros_like(g), where=w > 0))
    if a.p == 2:
        return float(np.sqrt((h**2).sum()))
    if a.p == 1:
        return float(h.max(initial=0.0))
    return float(h.sum())


def response_gain(coef: np.ndarray, action_set, response: str, strength: float) -> float:
    """The score gain G(g) of the response (`RESPONSES`) of strength r or ε to weights g
    in the units of x: r‖h‖_q (threshold) or ε‖h‖_q² (quadratic)."""
    norm = dual_norm(coef, action_set)
    return float(strength * norm if response == "threshold" else strength * norm**2)


class StrategicLinear(LogisticRegression):
    """A linear model trained with the strategic hinge loss against the population's
    response (Levanon & Rosenfeld 2021), solved exactly (see the module docstring).

    The deployed model scores P(favourable) = sigmoid(g·x + b) and favours a report
    when that is at least ``threshold``: s(x) = g·x + b − logit(threshold) ≥ 0. Its
    objective is the mean strategic hinge loss max(0, 1 − ỹ (s(x) + G(g))) plus
    ‖g‖² / (2 C n) (intercept unpenalised), on the rows it is fitted on, which are the
    features people start from (truthful history). The scores are margins, not
    calibrated probabilities.

    Parameters
    ----------
    C : float
        Inverse regularisation strength of the hinge risk (> 0).
    update_rule : {"frozen"}
        The model is trained once, on the first data, against the response (the
        Stackelberg model of strategic classification); it is not retrained.
    window : None
        Unused (the scikit-learn conventions list every parameter).
    response : {"threshold", "quadratic"}
        Which response to anticipate: movers to the boundary within reach ``strength``
        (individual ``min_cost`` seekers) or the quadratic-cost best response of
        strength ``strength`` (``best_response``).
    strength : float
        The reach r (cost units) or the strength ε of the response (≥ 0).
    action_set : ActionSet or None
        The responding population's action set: its norm p, cost weights, immutable and
        monotone features (None: Euclidean cost, every feature free).
    threshold : float
        The decision rule's threshold on P(favourable), in (0, 1).
    n_classes : int or None
        Must be 2 (or None): the favourable class is class 1.
    standardize : bool
        Fit on standardised features (the gain is computed in the units of x).
    tol : float
        Stopping tolerance of libsvm's solver.
    """

    fit_intercept = True
    recourse_loss_weight = 0.0

    def __init__(
        self,
        C: float = 1.0,
        update_rule: str = "frozen",
        window: int | None = None,
        response: str = "threshold",
        strength: float = 1.0,
        action_set=None,
        threshold: float = 0.5,
        n_classes: int | None = None,
        standardize: bool = False,
        tol: float = 1e-8,
    ):
        self.C = C
        self.update_rule = update_rule
        self.window = window
        self.response = response
        self.strength = strength
        self.action_set = action_set
        self.threshold = threshold
        self.n_classes = n_classes
        self.standardize = standardize
        self.tol = tol

    def _check_params(self) -> None:
        check_positive("C", self.C)
        check_positive("tol", self.tol)
        check_positive("strength", self.strength, allow_zero=True)
        if self.update_rule != "frozen":
            raise ConfigError(
                f"update_rule={self.update_rule!r}: a strategic model is trained once "
                "against the response; use update_rule='frozen'"
            )
        if self.response not in RESPONSES:
            raise ConfigError(f"response={self.response!r} is not one of {', '.join(RESPONSES)}")
        if not 0.0 < float(self.threshold) < 1.0:
            raise ConfigError(f"threshold={self.threshold!r} must lie strictly between 0 and 1")
        if len(self.classes_) != 2:
            raise ConfigError(f"a strategic model needs two classes, got {len(self.classes_)}")

    def gain(self, state: State) -> float:
        """G(g) of the state's weights, in the units of x (score units)."""
        coef = as_array(state["coef"])[0]
        if "x_scale" in state:
            coef = coef / as_array(state["x_scale"])
        return response_gain(coef, self.action_set, self.response, float(self.strength))

    def strategic_hinge_loss(self, state: State, X, y) -> np.ndarray:
        """Per row, max(0, 1 − ỹ (s(x) + G(g))): ỹ = +1 for class 1, −1 for class 0."""
        X = np.asarray(X, dtype=np.float64)
        s = self._logits_np(state, X)[:, 0] - _logit(self.threshold)
        signed = np.where(np.asarray(y) == 1, 1.0, -1.0)
        return np.maximum(0.0, 1.0 - signed * (s + self.gain(state)))

    def objective(self, state: State, X, y) -> float:
        """The fitted risk: mean strategic hinge loss + ‖g‖² / (2 C n) (g per standard
        deviation under ``standardize``)."""
        penalty = float((state["coef"] ** 2).sum()) / (2.0 * self.C * len(X))
        return float(self.strategic_hinge_loss(state, X, y).mean()) + penalty

    def _init_state(self, X: torch.Tensor, y: torch.Tensor) -> State:
        scaling = standardisation(X) if self.standardize else {}
        arrays = {k: v.numpy() for k, v in scaling.items()}
        state = self._svm_state(X.numpy(), y.numpy(), arrays)
        return {k: torch.from_numpy(v) for k, v in state.items()}

    def _fits_on_numpy(self) -> bool:
        return True

    def _init_state_np(self, X: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
        scaling = standardisation_arrays(X) if self.standardize else {}
        return self._svm_state(X, y, scaling)

    def _svm_state(self, X: np.ndarray, y: np.ndarray, scaling: dict) -> dict[str, np.ndarray]:
        """The fitted state (numpy) on rows (X, y), standardised by `scaling` (numpy)."""
        from sklearn.svm import SVC  # (imported only where a strategic model is fitted)

        if len(np.unique(y)) < 2:
            raise ConfigError("a strategic model needs rows of both classes to fit on")
        Z = (X - scaling["x_shift"]) / scaling["x_scale"] if scaling else X
        # libsvm minimises ½‖g‖² + C' Σ hinge, the intercept unpenalised: C' = C
        svm = SVC(kernel="linear", C=float(self.C), tol=float(self.tol)).fit(Z, y)
        sign = 1.0 if svm.classes_[1] == 1 else -1.0
        state = {
            "coef": (sign * svm.coef_.astype(np.float64)).reshape(1, -1),
            "intercept": np.zeros(1),
            **scaling,
        }
        # b = b' + logit(threshold) − G(g): the SVM's boundary after the response
        b_shifted = sign * float(svm.intercept_[0])
        state["intercept"] = np.array([b_shifted + _logit(self.threshold) - self.gain(state)])
        return state

    def update_fn(self, state: State, X: torch.Tensor, y: torch.Tensor) -> State:
        return dict(state)

    def warm_update_fn(self, state, X, y, start):
        return dict(state)

    def refit_hypergradient(self, *args, **kwargs):
        return None


def _logit(p: float) -> float:
    return float(np.log(p) - np.log1p(-p))
