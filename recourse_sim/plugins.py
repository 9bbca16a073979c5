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


# the scenario field that names a plugin of each group (for error messages)
FIELDS = {LEARNERS_GROUP: "learner.type", OUTCOME_MODELS_GROUP: "world.oracle.model"}


def entry_point(group: str, name: str) -> Any | None:
    """What the installed entry point `name` of `group` names (loaded), or None.
    ConfigError naming the plugin and its entry point if loading it fails (a missing
    module, an import that raises, a missing attribute)."""
    from importlib.metadata import entry_points

    for point in entry_points(group=group):
        if point.name == name:
            try:
                return point.load()
            except Exception as e:  # the plugin's own failure, whatever it is: named
                raise plugin_error(group, name, point.value, "cannot be loaded", e) from None
    return None


def plugin_error(group: str, name: str, where: str, what: str, error: BaseException):
    """A one-line ConfigError: plugin `name` of `group` (at `where`) `what`, and why."""
    from recourse_sim.errors import ConfigError

    reason = " ".join(f"{type(error).__name__}: {error}".split())[:200]
    return ConfigError(
        f"{FIELDS.get(group, group)}: plugin {name!r} (entry point {where} in group "
        f"{group}) {what} ({reason})"
    )


def qualified_name(obj: Any) -> str:
    """module:name of a function or class (where a plugin's code is)."""
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', repr(obj)[:60])}"


def entry_point_names(group: str) -> list[str]:
    """The names installed packages declare in `group`."""
    from importlib.metadata import entry_points

    return sorted(point.name for point in entry_points(group=group))
