"""What an environment is built from, read off its scenario: the action sets (the
world's features under the scenario's rules, then each population's), the rows of its
metrics table, and the losses a round reports."""

from __future__ import annotations

import warnings

import numpy as np

from recourse_sim.env.worlds import World
from recourse_sim.errors import ConfigError
from recourse_sim.learners import Learner
from recourse_sim.recourse import ActionSet
from recourse_sim.scenarios import QuerySpec, Scenario

__all__ = [
    "base_action_set",
    "log_loss",
    "log_loss_of",
    "metric_row_labels",
    "population_action_set",
    "scenario_bounds",
    "warn_if_powerless",
]


def _mask(names: tuple[str, ...], which: list[str] | None) -> np.ndarray:
    m = np.zeros(len(names), bool)
    for f in which or []:
        m[names.index(f)] = True
    return m


_WARNED_POWERLESS: set[tuple[str, str]] = set()


def warn_if_powerless(scenario: Scenario, name: str, pop, aset: ActionSet) -> None:
    """Warn (once per scenario and population in a process) when a population that acts
    can change nothing: every recourse and collective number of it would be 0."""
    if pop.strategy == "truthful" or (scenario.name, name) in _WARNED_POWERLESS:
        return
    if aset.actionable.any():  # (a budget of 0 is a setting, e.g. the start of a sweep)
        return
    _WARNED_POWERLESS.add((scenario.name, name))
    why = "no feature it may change is actionable"
    hint = (
        " (a CSV world has no actionable feature unless features.actionable lists some)"
        if scenario.world.kind == "csv" and scenario.features.actionable is None
        else ""
    )
    warnings.warn(
        f"{scenario.source}: populations.{name} can change nothing: {why}{hint}",
        stacklevel=4,
    )


def _values(cost) -> list:
    """The values of ``features.cost`` (the string ``std`` stands for itself)."""
    return [cost] if isinstance(cost, str) else list(cost.values())


def metric_row_labels(
    group_labels: tuple[str, ...], query: QuerySpec
) -> tuple[tuple[str, ...], int | None]:
    """The names of a round's per-group rows in metrics.csv, and the index of a group row
    to leave out. Only a Gaussian world has a group named ``query`` (its query people):
    when the scenario's query group is exactly that group, its row would repeat the
    ``query`` row, so it is written once (the row to leave out); otherwise the group's
    row is named ``query_group`` so that (round, group) stays unique. Data groups are
    never named ``query`` or ``all`` (a CSV world refuses those values)."""
    if "query" not in group_labels:
        return group_labels, None
    j = group_labels.index("query")
    exact = (
        query.labels is None
        and query.groups in (None, ["query"])
        and (query.world or query.groups == ["query"])
    )
    if exact:
        return group_labels, j
    return tuple("query_group" if g == "query" else g for g in group_labels), None


def base_action_set(scenario: Scenario, world: World) -> tuple[ActionSet, np.ndarray]:
    """The scenario-wide action set (budget ε = 1) and the causal-feature mask."""
    f, rules = world.features, scenario.features
    names = f.names
    actionable = f.actionable.copy() if rules.actionable is None else _mask(names, rules.actionable)
    actionable &= ~_mask(names, rules.immutable)
    inc = (f.increase_only & ~_mask(names, rules.decrease_only)) | _mask(names, rules.increase_only)
    dec = (f.decrease_only & ~_mask(names, rules.increase_only)) | _mask(names, rules.decrease_only)
    proxy = f.proxy.copy() if rules.proxy is None else _mask(names, rules.proxy)
    lower, upper = f.lower.copy(), f.upper.copy()
    max_change, cost = np.full(len(names), np.inf), np.ones(len(names))
    per_sd = 1.0 / world.feature_sd() if "std" in _values(rules.cost) else None
    given_cost = dict.fromkeys(names, "std") if rules.cost == "std" else rules.cost
    for target, given in (
        (lower, rules.lower),
        (upper, rules.upper),
        (max_change, rules.max_change),
        (cost, given_cost),
    ):
        for name, value in given.items():
            j = names.index(name)
            target[j] = per_sd[j] if value == "std" else value
    # types: the world's, then the scenario's by name; levels likewise
    types = dict(zip(names, f.types, strict=False)) | rules.types
    in_groups = {name for group in rules.onehot_groups for name in group}
    levels = {name: list(v) for name, v in f.levels.items() if name not in in_groups}
    levels |= rules.levels
    data = getattr(world, "data", None)  # (tabular worlds: the values a feature takes)
    for j, name in enumerate(names):
        leveled = types.get(name) in ("ordinal", "categorical") and name not in in_groups
        if leveled and name not in levels and data is not None:
            levels[name] = np.unique(data.X[:, j]).tolist()
    try:
        aset = ActionSet(
            n_features=len(names),
            immutable=np.flatnonzero(~actionable).tolist(),
            increase_only=np.flatnonzero(inc & actionable).tolist(),
            decrease_only=np.flatnonzero(dec & actionable).tolist(),
            lower=lower,
            upper=upper,
            max_change=max_change,
            cost_weights=cost,
            p=rules.p,
            epsilon=1.0,
            feature_names=names,
            feature_types=types,
            steps=rules.steps,
            levels=levels,
            onehot_groups=rules.onehot_groups,
        )
    except ConfigError as exc:
        raise ConfigError(f"{scenario.source}: features: {exc}") from None
    return aset, ~proxy


def scenario_bounds(base: ActionSet, rules) -> ActionSet:
    """`base` with value bounds only where the scenario's ``features.lower``/``upper``
    set them (no world defaults)."""
    names = base.feature_names
    lower, upper = np.full(base.n_features, -np.inf), np.full(base.n_features, np.inf)
    for target, given in ((lower, rules.lower), (upper, rules.upper)):
        for name, value in given.items():
            target[names.index(name)] = value
    return base.replace(lower=lower, upper=upper)


def log_loss_of(proba: np.ndarray, y: np.ndarray) -> float | None:
    """Mean cross-entropy −log p(y | x) of class probabilities `proba` (n, k) at labels
    y (probabilities clamped at 1e-300); None for no rows."""
    if not len(y):
        return None
    p = proba[np.arange(len(y)), y]
    return float(-np.log(np.maximum(p, 1e-300)).mean())


def log_loss(learner: Learner, X: np.ndarray, y: np.ndarray) -> float | None:
    """`log_loss_of` the learner's probabilities on rows X."""
    return log_loss_of(learner.predict_proba(X), y) if len(y) else None


def population_action_set(base: ActionSet, pop, names: tuple[str, ...], where: str) -> ActionSet:
    actionable = base.actionable.copy()
    if pop.actionable is not None:
        actionable &= _mask(names, pop.actionable)
    inc, dec = base.increase_mask.copy(), base.decrease_mask.copy()
    inc = (inc & ~_mask(names, pop.decrease_only)) | _mask(names, pop.increase_only)
    dec = (dec & ~_mask(names, pop.increase_only)) | _mask(names, pop.decrease_only)
    try:
        return base.replace(
            immutable=np.flatnonzero(~actionable).tolist(),
            increase_only=np.flatnonzero(inc & actionable).tolist(),
            decrease_only=np.flatnonzero(dec & actionable).tolist(),
            epsilon=pop.epsilon,
        )
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
