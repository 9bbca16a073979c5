"""Deployed models that anticipate people's response: ``learner.strategic`` and the
``perfgd`` / ``dfo`` update rules.

`strategic_learner` builds `recourse_sim.learners.strategic.StrategicLinear` from the
scenario: the response it anticipates is the one population that responds to the
model (individual ``min_cost`` seekers: movers to the boundary within their budget;
``best_response``: the quadratic-cost response), with that population's action set
(norm, cost weights, immutable and monotone features) and the decision threshold.
`performative_learner` builds the ``perfgd`` / ``dfo`` learner; with
``learner.params.jacobian: response`` it is given the one ``best_response``
population's action set, strength ε and responding classes.
"""

from __future__ import annotations

from recourse_sim.errors import ConfigError
from recourse_sim.learners.performative import (
    PerformativeLogisticRegression,
    performative_params_problem,
)
from recourse_sim.learners.strategic import StrategicLinear


def strategic_learner(scenario, strategies, favourable: int, params: dict) -> StrategicLinear:
    """The ``learner.strategic: s_hinge`` model of `scenario` (its populations'
    `strategies`; `params`: ``learner.params`` and ``standardize``)."""
    where = f"{scenario.source}: learner.strategic"
    if favourable != 1:
        raise ConfigError(f"{where}: s_hinge needs the favourable class to be class 1")
    # (the scenario's validation made sure there is exactly one, and a threshold rule)
    (name,) = scenario.responding_populations
    s = next(s for s in strategies if s.population == name)
    rule = scenario.decision
    allowed = set(StrategicLinear._get_param_names()) - {
        "update_rule",
        "window",
        "response",
        "strength",
        "action_set",
        "threshold",
    }
    unknown = sorted(set(params) - allowed - {"n_classes"})
    if unknown:
        raise ConfigError(
            f"{scenario.source}: learner.params: {', '.join(map(repr, unknown))} is not a "
            f"parameter of the strategic model (allowed: {', '.join(sorted(allowed))})"
        )
    return StrategicLinear(
        update_rule=scenario.learner.update_rule,
        response="quadratic" if s.name == "best_response" else "threshold",
        strength=float(s.spec.epsilon),
        action_set=s.action_set,
        threshold=float(rule.threshold),
        **params,
    )


def performative_learner(
    scenario, strategies, favourable: int, params: dict, random_state: int
) -> PerformativeLogisticRegression:
    """The learner of ``learner.update_rule: perfgd | dfo`` (`params`: ``learner.params``
    and ``standardize``; `random_state`: the learner's seed, for dfo's directions). With
    ``jacobian: response`` it differentiates the response of the scenario's one
    ``best_response`` population (among its populations' `strategies`; the scenario's
    validation made sure there is exactly one, everyone else truthful)."""
    problem = performative_params_problem(scenario.learner.update_rule, params)
    if problem:
        raise ConfigError(f"{scenario.source}: learner.params: {problem}")
    params = {"random_state": random_state % 2**32, **params}
    if params.get("jacobian") == "response":
        if favourable != 1:
            raise ConfigError(
                f"{scenario.source}: learner.params.jacobian: response needs the favourable "
                "class to be class 1"
            )
        s = next(s for s in strategies if s.name == "best_response")
        classes = s.spec.classes
        params.update(
            action_set=s.action_set,
            strength=float(s.spec.epsilon),
            responding_classes=None if classes is None else tuple(int(c) for c in classes),
        )
    return PerformativeLogisticRegression(update_rule=scenario.learner.update_rule, **params)
