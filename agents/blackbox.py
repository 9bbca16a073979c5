"""Black-box collective recourse: OAR against a surrogate of the deployed model.

White-box OAR (`CollectiveOAR`) differentiates through the deployed model's parameters
θ and its update rule. A black-box collective has neither. It sees what an applicant
sees: the answer of the deployed model (its decision, or with ``access: scores`` its
class probabilities) to reports it submits, at most ``budget`` a round; and it knows the
model family, hyperparameters and update rule only as assumptions (the learner's own
family; its hyperparameters overridden by ``assumed_params``; ``assumed_update_rule``, by
default the learner's own rule). A correct assumption includes the learner's input
scaling (``standardize``: the shift and scale fitted on the learner's history), which
the surrogate shares (`Learner.scaling_keys`) instead of fitting its own to the probes.

Each round it

1. submits reports — the query subjects', its members' and the other applicants' honest
   reports of the round, evenly spaced, ``budget`` of them — and keeps the answers
   (the latest ``memory``);
2. fits a surrogate: a model of the assumed family and update rule whose parameters
   minimise the cross-entropy between its probabilities and the answers (soft targets
   for scores, the decisions as hard targets otherwise), its memory (for memory rules)
   being the rows the surrogate was updated on so far;
3. runs OAR (`recourse_sim.recourse.collective_recourse`) with the surrogate in place
   of the deployed model; after the real update, updates the surrogate like the learner
   on the rows it was trained on (`observe`).

With scores and a correct family, a logistic model's answers on d + 1 reports in
general position determine its parameters, so the surrogate is the model and the plan
is white-box OAR's. With decisions only, the boundary is learnt but not the slope (a
small ridge, `DECISIONS_RIDGE`, keeps it finite); a wrong update rule changes the hypergradient.

Assumption stated here: like white-box OAR the collective knows the round's training
rows (X, y) it acts on; only the model is hidden. Answers kept from earlier rounds
(``memory`` beyond one round's reports) were given by earlier models: the surrogate is
fitted to them too, so against a learner that moves it matches the deployed model (and
its plan white-box OAR's) exactly only when it keeps one round's answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.agents.strategies import Strategy, register
from recourse_sim.lazy import LazyModule
from recourse_sim.learners import Learner
from recourse_sim.learners.base import State, as_tensor

if TYPE_CHECKING:
    import torch
else:  # imported on first use: checking a scenario builds this without torch
    torch = LazyModule("torch", globals())

__all__ = ["CollectiveBlackbox", "fit_surrogate_params"]

DECISIONS_RIDGE = 1e-4  # on the parameters, per answer: keeps a decisions-only fit finite
_LBFGS_ITERATIONS = 100


def fit_surrogate_params(
    surrogate: Learner, state: State, X: np.ndarray, targets: np.ndarray, ridge: float = 0.0
) -> State:
    """`state` with its parameters (``surrogate.param_keys``) refitted so the surrogate's
    class probabilities on X match `targets` (n, k) in cross-entropy, plus `ridge` times
    the parameters' squared norm; the other entries (scaling, memory) are kept."""
    keys = surrogate.param_keys
    params = {k: state[k].detach().clone().requires_grad_(True) for k in keys}
    Xt, T = as_tensor(X), as_tensor(targets)
    opt = torch.optim.LBFGS(
        list(params.values()),
        max_iter=_LBFGS_ITERATIONS,
        tolerance_grad=1e-10,
        tolerance_change=1e-14,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        proba = surrogate.proba_fn({**state, **params}, Xt).clamp_min(1e-300)
        loss = -(T * torch.log(proba)).sum(1).mean()
        loss = loss + ridge * sum((p**2).sum() for p in params.values())
        loss.backward()
        return loss

    opt.step(closure)
    return {**state, **{k: v.detach() for k, v in params.items()}}


@register
class CollectiveBlackbox(Strategy):
    """Participants perturb their training reports by OAR solved on a surrogate model
    fitted to the deployed model's answers (see the module docstring)."""

    name = "collective_blackbox"
    stage = "training"
    learns = True

    def __init__(self, population: str, spec, action_set):
        super().__init__(population, spec, action_set)
        d = action_set.n_features
        self._P = np.zeros((0, d))  # reports submitted so far (the latest `memory`)
        self._R = np.zeros((0, 0))  # the answers: probabilities or one-hot decisions
        self.surrogate: Learner | None = None
        self.surrogate_state: State | None = None  # its state, updated like the learner
        self.queries_used = 0  # reports submitted in the last round

    # -- what it sees -------------------------------------------------------------------
    def _probe(self, learner: Learner, X: np.ndarray, queries: np.ndarray, members) -> None:
        rows = np.concatenate([queries, X[members], X[~members]])
        budget = self.spec.budget
        if budget is not None and len(rows) > budget:
            rows = rows[np.linspace(0, len(rows) - 1, budget).round().astype(int)]
        proba = learner.predict_proba(rows)
        if self.spec.access == "decisions":
            proba = np.eye(proba.shape[1])[proba.argmax(1)]
        keep = self.spec.memory
        R = proba if not len(self._R) else np.concatenate([self._R, proba])
        self._P, self._R = np.concatenate([self._P, rows])[-keep:], R[-keep:]
        self.queries_used = len(rows)

    def _assumed(self, learner: Learner) -> Learner:
        """An unfitted learner of the deployed family and hyperparameters, with the
        assumed hyperparameters and update rule."""
        from sklearn.base import clone

        model = clone(learner)
        rule = self.spec.assumed_update_rule or learner.update_rule
        params = {**self.spec.assumed_params, "update_rule": rule}
        # a window only goes with the window rule (the learner's, or one round)
        params["window"] = (learner.window or 1) if rule == "window" else None
        return model.set_params(**params)

    def _ensure(self, learner: Learner) -> bool:
        """Build the surrogate from the answers once (after a restore: keep its state);
        False while the answers hold one class only (no boundary to fit)."""
        if self.surrogate is None:
            labels = self._R.argmax(1) if len(self._R) else np.zeros(0, int)
            if len(np.unique(labels)) < 2:
                return False
            self.surrogate = self._assumed(learner).fit(self._P, labels)
            if self.surrogate_state is None:
                # the learner's own input scaling (fitted on its history): part of a
                # correct assumption, like its family; one fitted on the probes is not it
                scaling = {k: learner.state_[k].clone() for k in learner.scaling_keys}
                self.surrogate_state = {**self.surrogate.state_, **scaling}
        return True

    def _surrogate(self, learner: Learner) -> tuple[Learner, State] | None:
        if not self._ensure(learner):
            return None
        ridge = DECISIONS_RIDGE if self.spec.access == "decisions" else 0.0
        state = fit_surrogate_params(
            self.surrogate, self.surrogate_state, self._P, self._R, ridge=ridge
        )
        self.surrogate_state = state
        return self.surrogate, state

    # -- what it does -------------------------------------------------------------------
    def act(
        self,
        learner: Learner,
        X: np.ndarray,
        y: np.ndarray,
        participants: np.ndarray,
        queries: np.ndarray,
        goal: int,
        action: np.ndarray | None = None,
    ) -> np.ndarray:
        """Perturbations (n, d) of the training rows; zero for non-participants."""
        from recourse_sim.recourse.collective import collective_recourse

        members = np.asarray(participants, bool)
        if not members.any() or len(queries) == 0 or self.action_set.epsilon == 0:
            return np.zeros_like(X)
        self._probe(learner, X, queries, members)
        fitted = self._surrogate(learner)
        if fitted is None:
            return np.zeros_like(X)
        surrogate, state = fitted
        if surrogate.update_rule == "frozen":  # it believes the reports cannot move the model
            return np.zeros_like(X)
        res = collective_recourse(
            surrogate,
            X,
            y,
            queries,
            goal,
            self.action_set,
            self.spec.horizon,
            members=members,
            state=state,
            steps=self.spec.steps,
        )
        return res.delta

    def observe(self, learner: Learner, X: np.ndarray, y: np.ndarray) -> None:
        """Update the surrogate like the learner, on the rows the learner trained on."""
        if self.surrogate_state is None or not len(X) or not self._ensure(learner):
            return
        with torch.no_grad():
            state = self.surrogate.update_fn(self.surrogate_state, as_tensor(X), as_tensor(y))
        self.surrogate_state = {k: v.detach() for k, v in state.items()}

    def get_state(self) -> dict:
        state = {"P": self._P.copy(), "R": self._R.copy(), "queries_used": self.queries_used}
        if self.surrogate_state is not None:
            state["surrogate_state"] = {
                k: v.numpy().copy() for k, v in self.surrogate_state.items()
            }
        return state

    def set_state(self, state: dict) -> None:
        self._P = np.array(state["P"], dtype=np.float64).reshape(-1, self.action_set.n_features)
        self._R = np.array(state["R"], dtype=np.float64)
        self.queries_used = int(state["queries_used"])
        self.surrogate = self.surrogate_state = None
        if "surrogate_state" in state:
            # the surrogate object is fitted again on the answers when next needed
            self.surrogate_state = {
                k: torch.from_numpy(np.array(v, dtype=np.float64))
                for k, v in state["surrogate_state"].items()
            }
