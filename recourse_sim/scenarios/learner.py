"""The ``learner`` section: the deployed model, its update rule and its defences."""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from recourse_sim.scenarios.base import NonNegative, Positive, PositiveInt, _Model

_RECOURSE_TRAINING_KEYS = ("recourse_loss_weight", "action_set", "recourse_goal")
"""Learner parameters the environment sets from `LearnerSpec`'s recourse fields."""


class DefenseSpec(_Model):
    """How the deployed model guards its update against manipulated reports
    (`recourse_sim.learners.defense`); every part is off by default."""

    # trimmed refit: drop this share of the round's rows with the highest loss under the
    # current model before updating
    trim: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    # report-anomaly filter: drop rows whose robust Mahalanobis distance from the recent
    # reports exceeds this chi-square quantile (None: off)
    anomaly_quantile: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None
    history: PositiveInt = 1000  # recent kept rows the anomaly filter compares against (rows)
    # rate limit: largest Euclidean norm of one update's change of the parameters (None: off)
    max_step: Positive | None = None


class LearnerSpec(_Model):
    """The deployed model (`recourse_sim.learners.make_learner`) and its update rule."""

    type: str = "logistic_regression"  # learner name (see recourse_sim.learners.LEARNERS)
    # online update rule (frozen: the first model is never updated; refit on a world with
    # population: file trains on each person's latest report, the last round; perfgd and
    # dfo descend the performative risk, recourse_sim.learners.performative)
    update_rule: Literal["refit", "window", "sgd", "frozen", "perfgd", "dfo"] = "window"
    window: PositiveInt | None = 1  # rounds remembered by the window rule (None otherwise)
    # features standardised once, on the first model's data (None: yes, if the learner can)
    standardize: bool | None = None
    params: dict[str, Any] = {}  # other hyperparameters of the learner (e.g. C, epochs, lr)
    # lambda of Ross et al.'s recourse loss, lambda * loss(g(x + delta*), goal) (0: plain training)
    recourse_loss_weight: NonNegative = 0.0
    # budget of delta* (cost units; None: the individual populations' largest budget, else 1)
    recourse_budget: Positive | None = None
    defense: DefenseSpec = DefenseSpec()  # filters and limits on each update
    # train the deployed linear model against the population's own response (none: plain
    # training; s_hinge: Levanon & Rosenfeld's strategic hinge loss, solved exactly, see
    # recourse_sim.learners.strategic); the model is then frozen
    strategic: Literal["none", "s_hinge"] = "none"

    def learner_params(self, accepted: typing.Iterable[str]) -> dict[str, Any]:
        """Keyword arguments of `make_learner` besides the update rule: ``params`` plus
        ``standardize`` when the learner takes it (`accepted`: its parameter names).

        Raises ValueError when ``standardize`` is set twice or set true for a learner
        without standardisation.
        """
        params = dict(self.params)
        if "standardize" in params:
            raise ValueError("set learner.standardize, not learner.params.standardize")
        if "standardize" in accepted:
            params["standardize"] = True if self.standardize is None else self.standardize
        elif self.standardize:
            raise ValueError(
                f"learner {self.type!r} has no standardize option (it learns on raw features)"
            )
        return params

    @field_validator("params")
    @classmethod
    def _no_recourse_params(cls, v: dict[str, Any]) -> dict[str, Any]:
        # the environment builds these from the scenario (the action set is not YAML)
        for key in _RECOURSE_TRAINING_KEYS:
            if key in v:
                raise ValueError(
                    f"{key} is set by the environment; use learner.recourse_loss_weight "
                    "(and learner.recourse_budget)"
                )
        return v

    @model_validator(mode="after")
    def _strategic_is_linear_and_frozen(self) -> LearnerSpec:
        if self.strategic == "none":
            return self
        if self.type != "logistic_regression":
            raise ValueError(
                f"strategic: {self.strategic} trains a linear model: it needs type "
                f"logistic_regression, not {self.type!r}"
            )
        if self.update_rule != "frozen":
            raise ValueError(
                f"strategic: {self.strategic} trains the first model against the response "
                f"and keeps it: it needs update_rule frozen, not {self.update_rule!r}"
            )
        if self.recourse_loss_weight > 0:
            raise ValueError("strategic and recourse_loss_weight cannot be combined")
        return self

    @model_validator(mode="after")
    def _performative_rules_are_logistic(self) -> LearnerSpec:
        if self.update_rule in ("perfgd", "dfo") and self.type != "logistic_regression":
            raise ValueError(
                f"update_rule {self.update_rule} is a rule of binary logistic regression "
                f"(type logistic_regression), not of {self.type!r}"
            )
        return self

    @model_validator(mode="after")
    def _window_only_for_window_rule(self) -> LearnerSpec:
        if self.update_rule != "window":
            self.window = None
        elif self.window is None:
            raise ValueError("update_rule 'window' needs window (rounds)")
        return self
