"""Deployed models and their online update rules (see `recourse_sim.learners.base`)."""

from __future__ import annotations

from recourse_sim.errors import ConfigError
from recourse_sim.learners.base import UPDATE_RULES, Learner, State, as_tensor
from recourse_sim.learners.logistic import LogisticRegression
from recourse_sim.learners.mlp import MLPClassifier
from recourse_sim.learners.nearest_centroid import NearestCentroid
from recourse_sim.learners.robust import (
    ChiSquareDROLogisticRegression,
    JTTLogisticRegression,
    ReweightedLogisticRegression,
)

LEARNERS: dict[str, type[Learner]] = {
    "nearest_centroid": NearestCentroid,
    "logistic_regression": LogisticRegression,
    "mlp": MLPClassifier,
    "reweighted": ReweightedLogisticRegression,
    "jtt": JTTLogisticRegression,
    "chi2_dro": ChiSquareDROLogisticRegression,
}
"""Learner names accepted by `make_learner` (scenario files use these); add your own
here, or declare an entry point in the group ``recourse_sim.learners``
(`recourse_sim.plugins`)."""


def learner_class(name: str) -> type[Learner] | None:
    """The learner class a scenario's ``learner.type`` names: from `LEARNERS`, else from
    an installed entry point (then added to `LEARNERS`); None if neither has it."""
    if name not in LEARNERS:
        from recourse_sim.plugins import LEARNERS_GROUP, entry_point

        cls = entry_point(LEARNERS_GROUP, name)
        if cls is None:
            return None
        if not (isinstance(cls, type) and issubclass(cls, Learner)):
            raise ConfigError(
                f"learner.type: the entry point {name!r} names {cls!r}, not a Learner subclass"
            )
        LEARNERS[name] = cls
    return LEARNERS[name]


def make_learner(name: str, **params) -> Learner:
    """Build a learner by name (a key of `LEARNERS`) with hyperparameters `params`.

    Raises ConfigError naming an unknown learner or parameter. Values are validated
    when the learner is fitted.
    """
    cls = learner_class(name)
    if cls is None:
        raise ConfigError(f"unknown learner {name!r}; choose one of {', '.join(LEARNERS)}")
    allowed = cls._get_param_names()
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ConfigError(
            f"unknown parameter(s) {', '.join(map(repr, unknown))} for learner {name!r}; "
            f"allowed: {', '.join(allowed)}"
        )
    if cls.__module__.startswith("recourse_sim."):
        return cls(**params)
    try:  # an installed package's learner: its own failure, named
        return cls(**params)
    except Exception as e:
        from recourse_sim.plugins import LEARNERS_GROUP, plugin_error, qualified_name

        raise plugin_error(LEARNERS_GROUP, name, qualified_name(cls), "failed", e) from None


__all__ = [
    "LEARNERS",
    "UPDATE_RULES",
    "ChiSquareDROLogisticRegression",
    "JTTLogisticRegression",
    "Learner",
    "LogisticRegression",
    "MLPClassifier",
    "NearestCentroid",
    "ReweightedLogisticRegression",
    "State",
    "as_tensor",
    "learner_class",
    "make_learner",
]
