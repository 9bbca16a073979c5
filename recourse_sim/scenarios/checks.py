"""Checks that need the world: feature, group and class names, memory budgets, the
learner's settings, CSV contents."""

from __future__ import annotations

import difflib
import warnings
from pathlib import Path
from typing import Any, NoReturn

from recourse_sim.errors import ConfigError
from recourse_sim.scenarios.decision import pare_min_calibration
from recourse_sim.scenarios.learner import _RECOURSE_TRAINING_KEYS
from recourse_sim.scenarios.scenario import Scenario
from recourse_sim.scenarios.world import WorldSpec


def world_feature_names(world: WorldSpec) -> tuple[str, ...]:
    """The feature names a world produces (its spec's `feature_names`)."""
    return world.feature_names


def check_classes(scenario: Scenario, n_classes: int, class_values: tuple[str, ...] = ()) -> None:
    """Goals must be classes of the world (0..k-1); each ``labels`` entry must be a label
    value as it appears in the data (`class_values`: a CSV's label values, by class) or
    a class number. The labels are resolved to class numbers (their spec's `classes`)."""

    def fail(path: str, message: str) -> NoReturn:
        raise ConfigError(f"{scenario.source}: {path}: {message}")

    def check(path: str, values: list[int]) -> None:
        for v in values:
            if not 0 <= v < n_classes:
                fail(
                    path,
                    f"class {v} out of range; the world has {n_classes} classes "
                    f"(0..{n_classes - 1})",
                )

    def resolve(path: str, spec: Any) -> None:
        if spec.labels is None:
            return
        classes = []
        for i, v in enumerate(spec.labels):
            named = [k for k, value in enumerate(class_values) if _same_label(value, v)]
            if named:  # a label value as in the data wins over a class number
                classes.append(named[0])
            elif isinstance(v, int) and 0 <= v < n_classes:
                classes.append(v)
            elif class_values:
                values = ", ".join(repr(c) for c in class_values[:10])
                fail(
                    f"{path}.{i}",
                    f"{v!r} is neither a label value ({values}) nor a class number "
                    f"(0..{n_classes - 1})",
                )
            else:
                fail(
                    f"{path}.{i}",
                    f"{v!r} is not a class of the world: its labels are class numbers "
                    f"0..{n_classes - 1}",
                )
        spec._classes = classes

    check("query.goal", [scenario.query.goal])
    resolve("query.labels", scenario.query)
    for name, pop in scenario.populations.items():
        resolve(f"populations.{name}.labels", pop)
        query = getattr(pop, "query", None)
        if query is not None:
            check(f"populations.{name}.query.goal", [query.goal])
            resolve(f"populations.{name}.query.labels", query)


def _same_label(value: str, entry: int | str) -> bool:
    """Whether a ``labels`` entry names label value `value` (as text or as a number)."""
    if str(entry) == value:
        return True
    try:
        return float(value) == float(entry)
    except ValueError:
        return False


def world_group_names(world: WorldSpec) -> tuple[str, ...] | None:
    """The group names of a world (None when they are only known from the CSV's rows)."""
    return world.group_names


def _check_budgets(scenario: Scenario, d: int, fail) -> None:
    """Every declared count of people against this machine's memory (before anything
    is allocated)."""
    from recourse_sim.budget import rows_over_budget

    world = scenario.world
    n, field = cohort_size(world)
    counts = [(field, n, "people a round")]
    if hasattr(world, "history_size"):
        counts.append(("world.history_size", world.history_size, "history rows"))
    people = getattr(world, "people", None)
    if people is not None and people.initial is not None:
        counts.append(("world.people.initial", people.initial, "people"))
    if people is not None:  # the pool, if nobody left: the first cohort and every arrival
        stay = min(scenario.rounds, people.max_rounds or scenario.rounds)
        pool = (people.initial or n) + people.newcomers * max(stay - 1, 0)
        counts.append(("world.people.newcomers", pool, "people in the pool"))
    for field, n, what in counts:
        problem = rows_over_budget(n, d, what)
        if problem:
            fail(field, problem)


def cohort_size(world: WorldSpec) -> tuple[int, str]:
    """People in one cohort of a world, and the field that sets it."""
    return world.cohort


def _check_scm_interventions(scenario: Scenario, fail) -> None:
    """Recourse types need a causal world, and nobody intervenes on an immutable node."""
    world = scenario.world
    for pname, pop in scenario.populations.items():
        if getattr(pop, "recourse", None) is not None and not world.causal:
            fail(
                f"populations.{pname}.recourse",
                f"{pop.recourse!r} needs a causal world (world.kind: scm), not {world.kind!r}",
            )
    for pname, pop in scenario.populations.items():
        if getattr(pop, "recourse", None) is None:
            continue
        # the search finds whole interventions: a share of one is not an intervention
        unsupported = {
            "objective": pop.objective != "min_cost",
            "move": pop.move != 1.0,
            "just_enough": pop.just_enough,
            "tolerance": pop.tolerance is not None,
            "margin": not (isinstance(pop.margin, float | int) and pop.margin == 0),
        }
        for field, set_ in unsupported.items():
            if set_:
                fail(
                    f"populations.{pname}.{field}",
                    f"not supported with recourse: {pop.recourse} (the causal search finds "
                    "the cheapest whole action that meets its goal); remove it",
                )
    if not world.causal:
        return
    immutable = {k for k, v in world.nodes.items() if v.immutable}
    named = [("features.actionable", scenario.features.actionable)]
    named += [
        (f"populations.{p}.actionable", pop.actionable) for p, pop in scenario.populations.items()
    ]
    for path, names in named:
        for i, f in enumerate(names or []):
            if f in immutable:
                fail(
                    f"{path}.{i}",
                    f"node {f!r} is immutable (world.nodes.{f}.immutable): "
                    "no one can intervene on it",
                )


def _check_semantics(scenario: Scenario, data: dict, source: str, base_dir: Path) -> None:
    """Cross-field checks: feature and group names, learner, CSV contents."""

    def fail(path: str, message: str) -> None:
        raise ConfigError(f"{source}: {path}: {message}")

    world = scenario.world
    world.check(source, base_dir, fail)
    names = world_feature_names(world)
    _check_budgets(scenario, len(names), fail)
    check_classes(scenario, world.n_classes, world.class_values)

    def check_names(path: str, values: list[str] | dict | str | None) -> None:
        if isinstance(values, str):  # (features.cost: std)
            return
        for i, f in enumerate(values or []):
            if f not in names:
                close = difflib.get_close_matches(f, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                key = f"{path}.{f}" if isinstance(values, dict) else f"{path}.{i}"
                fail(key, f"unknown feature {f!r}{hint} (features: {', '.join(names)})")

    rules = scenario.features
    for field in ("actionable", "immutable", "increase_only", "decrease_only", "proxy"):
        check_names(f"features.{field}", getattr(rules, field))
    for field in ("lower", "upper", "max_change", "cost", "types", "steps", "levels"):
        check_names(f"features.{field}", getattr(rules, field))
    for i, group in enumerate(rules.onehot_groups):
        check_names(f"features.onehot_groups.{i}", group)
        if all(rules.upper.get(f, float("inf")) < 1 for f in group):
            fail(
                f"features.onehot_groups.{i}",
                "the categorical group has no allowed level (every column's upper bound is "
                "below 1)",
            )
    # a categorical feature has no order for a monotone rule to follow
    categorical = {f for f, kind in rules.types.items() if kind == "categorical"}
    categorical |= {f for group in rules.onehot_groups for f in group}
    monotone = [("features", rules)] + [
        (f"populations.{n}", p) for n, p in scenario.populations.items()
    ]
    for where, holder in monotone:
        for field in ("increase_only", "decrease_only"):
            for f in getattr(holder, field):
                if f in categorical:
                    fail(
                        f"{where}.{field}",
                        f"feature {f!r} is categorical; a monotone rule needs an order of "
                        "its levels (declare it ordinal)",
                    )
    for pname, pop in scenario.populations.items():
        for field in ("actionable", "increase_only", "decrease_only"):
            check_names(f"populations.{pname}.{field}", getattr(pop, field))
        if pop.strategy == "collective_signal":
            check_names(f"populations.{pname}.signal", pop.signal)
        both = set(pop.increase_only) & set(pop.decrease_only)
        if both:
            fail(
                f"populations.{pname}",
                f"feature {sorted(both)[0]!r} is both increase_only and decrease_only",
            )

    _check_scm_interventions(scenario, fail)
    persistent = world.persistent
    for pname, pop in scenario.populations.items():
        if getattr(pop, "reapply", None) == "next_round" and not persistent:
            fail(
                f"populations.{pname}.reapply",
                "'next_round' needs people who stay and apply again (set world.people; "
                f"a {world.kind} world without it draws new people every round)",
            )

    groups = world_group_names(world)
    if groups is None:
        from recourse_sim.data.csv_world import read_csv_world

        groups = read_csv_world(world, source).group_labels

    def check_groups(path: str, values: list[str] | dict | None) -> None:
        for i, g in enumerate(values or []):
            if g not in groups:
                close = difflib.get_close_matches(str(g), groups, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                key = f"{path}.{g}" if isinstance(values, dict) else f"{path}.{i}"
                fail(key, f"unknown group {g!r}{hint} (groups: {', '.join(groups)})")

    check_groups("query.groups", scenario.query.groups)
    check_groups("decision.group_thresholds", scenario.decision.group_thresholds)
    for pname, pop in scenario.populations.items():
        check_groups(f"populations.{pname}.groups", pop.groups)
        if pop.strategy in (
            "collective_oar",
            "controlled",
            "collective_blackbox",
            "collective_signal",
        ):
            check_groups(f"populations.{pname}.graph.seed_groups", pop.graph.seed_groups)
            if pop.query is not None:
                check_groups(f"populations.{pname}.query.groups", pop.query.groups)

    from recourse_sim.learners import LEARNERS, learner_class, make_learner
    from recourse_sim.learners.performative import (
        PERFORMATIVE_RULES,
        performative_params_problem,
    )

    spec = scenario.learner
    if learner_class(spec.type) is None:
        close = difflib.get_close_matches(spec.type, list(LEARNERS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        fail("learner.type", f"unknown learner {spec.type!r}{hint} (valid: {', '.join(LEARNERS)})")
    if spec.recourse_loss_weight > 0:
        supported = [
            name
            for name, cls in LEARNERS.items()
            if set(_RECOURSE_TRAINING_KEYS) <= set(cls._get_param_names())
        ]
        if spec.type not in supported:
            fail(
                "learner.recourse_loss_weight",
                f"learner {spec.type!r} has no recourse-aware training "
                f"(got {spec.recourse_loss_weight!r}; supported: {', '.join(supported)})",
            )
    rule = scenario.decision
    if rule.rule == "pare":
        n, where = cohort_size(world)
        need = pare_min_calibration(rule.pare.epsilon, rule.pare.alpha)
        if n < need:
            fail(
                "decision.pare",
                f"epsilon={rule.pare.epsilon:g}, alpha={rule.pare.alpha:g} need at least "
                f"{need} calibration rows ((1 - epsilon)^n <= alpha), but a cohort has {n} "
                f"({where}); raise it or loosen epsilon/alpha",
            )
    try:
        params = spec.learner_params(LEARNERS[spec.type]._get_param_names())
    except ValueError as exc:
        fail("learner.standardize", str(exc))
    # names are checked here; values when the environment fits the learner
    if spec.update_rule in PERFORMATIVE_RULES:  # a learner of its own
        problem = performative_params_problem(spec.update_rule, params)
        if problem:
            fail("learner.params", problem)
    try:
        if spec.update_rule not in PERFORMATIVE_RULES:
            make_learner(spec.type, update_rule=spec.update_rule, window=spec.window, **params)
    except ConfigError as exc:
        fail("learner", str(exc))
    except TypeError as exc:
        fail("learner.params", f"{exc} (got {spec.params!r})")
    from recourse_sim.learners.base import Learner

    k = world.n_classes
    for pname, pop in scenario.populations.items():
        # the response is closed-form for log-odds linear in x (a learner that says so)
        linear = learner_class(spec.type).goal_margin_coef is not Learner.goal_margin_coef
        if pop.strategy == "best_response" and (not linear or k != 2):
            fail(
                f"populations.{pname}.strategy",
                "best_response needs a model whose log-odds are linear in the features "
                f"(two classes, logistic_regression); learner {spec.type!r} with {k} classes "
                "is not",
            )
    for pname, pop in scenario.populations.items():
        if pop.strategy != "collective_blackbox" or not pop.assumed_params:
            continue
        field = f"populations.{pname}.assumed_params"
        fixed = sorted(set(pop.assumed_params) & {"update_rule", "window"})
        if fixed:
            fail(field, f"{fixed[0]!r} is not a hyperparameter here (use assumed_update_rule)")
        fixed = sorted(set(pop.assumed_params) & {"standardize", *_RECOURSE_TRAINING_KEYS})
        if fixed:
            fail(field, f"{fixed[0]!r} is the learner's, set by the environment")
        try:
            assumed = {**params, **pop.assumed_params}
            model = make_learner(spec.type, update_rule="frozen", **assumed)
            # values are checked by a fit, here on two rows (one per class)
            import numpy as np

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(np.repeat([[0.0], [1.0]], len(names), axis=1), np.array([0, 1]))
        except ConfigError as exc:
            fail(field, str(exc))
        except TypeError as exc:
            fail(field, f"{exc} (got {pop.assumed_params!r})")


def belief_notes(scenario: Scenario) -> list[str]:
    """One line per black-box collective that assumes an update rule other than the
    learner's: a belief the scenario sets on purpose (a wrong model of the firm), not an
    error. Without ``assumed_update_rule`` the belief follows ``learner.update_rule``
    (an override of it moves the belief too), and nothing is said."""
    lines = []
    actual = scenario.learner.update_rule
    for name, pop in scenario.populations.items():
        assumed = getattr(pop, "assumed_update_rule", None)
        if assumed is not None and assumed != actual:
            lines.append(
                f"populations.{name}.assumed_update_rule: the collective believes the "
                f"learner updates by {assumed!r}; it updates by {actual!r} "
                "(a wrong belief, as set; leave it out to assume the learner's own rule)"
            )
    return lines
