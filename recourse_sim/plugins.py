"""Parts that installed packages add: entry points a scenario can name.

A package declares, in its ``pyproject.toml``::

    [project.entry-points."recourse_sim.learners"]
    my_model = "my_package.learners:MyLearner"        # a Learner subclass

    [project.entry-points."recourse_sim.outcome_models"]
    boosted = "my_package.models:boosted"             # factory(X, y) -> predict_proba

and a scenario names ``learner.type: my_model`` or ``world.oracle.model: boosted``. A
scenario names only registered names, never module paths: loading one imports only
what installed packages declared.
"""

from __future__ import annotations

from typing import Any

LEARNERS_GROUP = "recourse_sim.learners"
OUTCOME_MODELS_GROUP = "recourse_sim.outcome_models"


def entry_point(group: str, name: str) -> Any | None:
    """What the installed entry point `name` of `group` names (loaded), or None."""
    from importlib.metadata import entry_points

    for point in entry_points(group=group):
        if point.name == name:
            return point.load()
    return None


def entry_point_names(group: str) -> list[str]:
    """The names installed packages declare in `group`."""
    from importlib.metadata import entry_points

    return sorted(point.name for point in entry_points(group=group))
