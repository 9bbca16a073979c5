"""What a run says about its world before and after it runs: the world summary that
``recourse-sim validate`` prints, warnings for settings that are legal but likely
mistakes, and the warning at the end of a run whose seekers piled on the cut-off."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from recourse_sim.scenarios import Scenario

SUMMARY_FEATURES = 20  # features listed by `world_summary` (then "… N more")
LEAK_AUC = 0.95  # a single feature predicting the label this well alone is suspect
APPROVES_MOST = 0.95  # a first model approving this share of its history is suspect
CONTINUOUS_UNIT = 0.01  # a continuous feature's smallest change: this share of its range


def world_summary(env: Any) -> list[str]:
    """A screen about the world a scenario builds: its rows, how labels are coded and
    balanced, its groups and their sizes, each feature with its type, what people may
    do with it and at what cost, then a ``warning:`` line for each setting that is legal
    but likely a mistake (`world_warnings`). Groups and class shares are of one cohort
    drawn with seed 0 (of every row for tabular worlds)."""
    world, actions = env.world, env.action_set
    data = getattr(world, "data", None)
    if data is not None:
        y, group, rows = data.y, data.group, f"{len(data.y):,} rows"
    else:
        cohort = world.newcomers(world.cohort_size, np.random.default_rng(0))
        y, group, rows = cohort.y0, cohort.group, f"a cohort of {len(cohort.y0):,} people"
    values = getattr(data, "class_values", ()) or tuple(str(k) for k in range(world.n_classes))
    shares = np.bincount(np.asarray(y, np.int64), minlength=world.n_classes) / max(len(y), 1)
    classes = ", ".join(
        f"class {k} = label {values[k]!r} ({share:.0%})" for k, share in enumerate(shares[:4])
    ) + (f", … ({len(shares)} classes)" if len(shares) > 4 else "")
    lines = [
        f"world: {env.scenario.world.kind}, {rows}, {len(actions.feature_names)} features",
        f"labels: {classes}; favourable: class {world.favourable}",
    ]
    if world.group_labels:
        sizes = np.bincount(np.asarray(group, np.int64), minlength=len(world.group_labels))
        lines.append(
            "groups: "
            + ", ".join(f"{g} {n:,}" for g, n in zip(world.group_labels, sizes, strict=True))
        )
    movable = np.flatnonzero(~actions.immutable_mask)
    lines.append(
        f"features ({len(movable)} of {actions.n_features} actionable; cost norm p = "
        f"{actions.p:g}; weight: cost per unit, unit: cost of the smallest change):"
    )
    types = feature_types(env)
    units = unit_costs(actions, types)
    table = [("name", "type", "action", "range", "weight", "unit")]
    for j in range(min(actions.n_features, SUMMARY_FEATURES)):
        if actions.immutable_mask[j]:
            action, weight, unit = "immutable", "", ""
        else:
            way = ", up only" if actions.increase_mask[j] else ""
            way = ", down only" if actions.decrease_mask[j] else way
            action, weight = f"actionable{way}", f"{actions.weights_[j]:.4g}"
            unit = f"{units[j]:.4g}" if np.isfinite(units[j]) else ""
        span = f"[{actions.lower_[j]:g}, {actions.upper_[j]:g}]"
        table.append((actions.feature_names[j], types[j], action, span, weight, unit))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        cells = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
        lines.append(f"  {cells}".rstrip())
    if actions.n_features > SUMMARY_FEATURES:
        lines.append(f"  … and {actions.n_features - SUMMARY_FEATURES} more")
    from recourse_sim.agents.best_response import best_response_bounds
    from recourse_sim.recourse.causal import search_summary

    lines += [f"warning: {w}" for w in world_warnings(env)]
    lines += search_summary(env) if env.scenario.world.kind == "scm" else []

    for s in getattr(env, "strategies", ()):
        if s.name == "best_response":
            note = best_response_bounds(s.action_set)
            if note:
                lines.append(f"note: populations.{s.population} (best_response): {note}")
    return lines


def feature_types(env: Any) -> list[str]:
    """Each feature's type, as the action set holds it (``types_``)."""
    return [str(t) for t in env.action_set.types_]


def unit_costs(actions: Any, types: Sequence[str]) -> np.ndarray:
    """The cost of the smallest change of each feature alone, its weight times: one step
    of an integer feature (the action set's ``step_``, else 1), 1 for a binary, ordinal
    or categorical one (a level), and for a continuous one `CONTINUOUS_UNIT` of its range
    (inf where the range is unbounded). A change of one feature costs weight × size
    under every norm p."""
    step = actions.step_
    size = np.empty(actions.n_features)
    for j, kind in enumerate(types):
        if kind == "integer":
            size[j] = step[j] if step[j] > 0 else 1.0
        elif kind in ("binary", "ordinal", "categorical"):
            size[j] = 1.0
        else:
            size[j] = CONTINUOUS_UNIT * (actions.upper_[j] - actions.lower_[j])
    return np.asarray(actions.weights_, float) * size


def world_warnings(env: Any) -> list[str]:
    """Settings that are legal but likely mistakes, each said once: a cohort or history
    larger than the data (rows drawn with replacement), a feature that predicts the
    label almost perfectly alone (AUC ≥ `LEAK_AUC`, in data: a leak of the outcome?), a
    budget ε below the smallest change of every feature a population may change (it can
    change nothing), and a first model that approves ≥ `APPROVES_MOST` of its history."""
    from recourse_sim.env.metrics import roc_auc

    world, spec, out = env.world, env.scenario.world, []
    data = getattr(world, "data", None)
    if data is not None and getattr(spec, "population", "sample") != "file":
        rows = len(data.y)
        for name in ("cohort_size", "history_size"):
            size = getattr(spec, name, None)
            if size is not None and size > rows:
                out.append(
                    f"world.{name} {size:,} is larger than the data's {rows:,} rows: rows are "
                    "drawn with replacement, so the same rows appear several times"
                )
    leaks = []  # (in data; a generated world's features predict its labels by design)
    for j, name in enumerate(env.action_set.feature_names if data is not None else ()):
        auc = roc_auc(np.asarray(data.X[:, j], float), data.y == world.favourable)
        if auc is not None and max(auc, 1 - auc) >= LEAK_AUC:
            leaks.append(f"{name} (AUC {max(auc, 1 - auc):.3f})")
    if leaks:
        out.append(
            f"alone, {', '.join(leaks)} predicts the favourable label with AUC ≥ "
            f"{LEAK_AUC:g}: does it leak the outcome?"
        )
    types = feature_types(env)
    for s in env.strategies:
        epsilon = getattr(s.spec, "epsilon", None)
        movable = np.flatnonzero(s.action_set.actionable)
        if epsilon is None or not len(movable):
            continue
        units = unit_costs(s.action_set, types)[movable]
        cheapest = int(np.argmin(units))
        if np.isfinite(units).all() and epsilon < units[cheapest]:
            j = movable[cheapest]
            out.append(
                f"populations.{s.population}.epsilon {epsilon:g} is below the cost of the "
                f"smallest change of every feature it may change (cheapest: "
                f"{s.action_set.feature_names[j]}, {types[j]}, {units[cheapest]:.4g}): its "
                "members can change nothing"
            )
    rule = env.scenario.decision
    X_hist, y_hist = world.history(np.random.default_rng(0))
    if rule.rule == "capacity":
        share = rule.capacity if rule.places is None else rule.places / max(len(X_hist), 1)
    else:  # at the rule's threshold (group thresholds left aside: the history has no groups)
        proba = env.learner.predict_proba(X_hist)
        share = float(env.decide(proba, np.zeros(len(X_hist), np.int64)).mean())
    if share >= APPROVES_MOST:
        out.append(
            f"the first model's decision rule ({rule.rule}) approves {share:.1%} of the "
            f"history (favourable base rate {np.mean(y_hist == world.favourable):.1%}): "
            "nearly nobody gets the unfavourable decision (is world.favourable the right "
            "label value?)"
        )
    return out


PILE_WARNING_SHARE = 0.5
"""A run under a capacity rule warns when, in some round, more than this share of the
seekers end on the round's cut-off score (``seekers_at_cutoff``)."""


def warn_if_piled(frame: pd.DataFrame, scenario: Scenario) -> None:
    """One line at the end of a capacity-rule run in which most seekers of some round
    piled on the cut-off score, with the numbers. (At a threshold a pile is harmless:
    everyone on it is favoured.)"""
    rule = getattr(getattr(scenario, "decision", None), "rule", None)
    if rule != "capacity" or "seekers_at_cutoff" not in frame:
        return
    everyone = frame[frame["group"] == "all"]
    share = everyone["seekers_at_cutoff"].astype(float)
    piled = share > PILE_WARNING_SHARE
    if not piled.any():
        return
    worst = everyone.loc[share.idxmax()]
    at = round(float(worst["seekers_at_cutoff"]) * int(worst["n_seekers"]))
    warnings.warn(
        f"{scenario.name}: in {int(piled.sum())} of {len(everyone)} rounds most seekers "
        f"ended on the round's cut-off score (seekers_at_cutoff up to "
        f"{float(worst['seekers_at_cutoff']):.3f}: {at} of {int(worst['n_seekers'])} in "
        f"round {int(worst['round'])}): they tie there and few of them get a place (a "
        "margin drawn per person, populations.<name>.margin, spreads them)",
        stacklevel=3,
    )
