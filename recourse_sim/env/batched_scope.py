"""What the native batched env (`recourse_sim.env.batched`) simulates, field by field.

Native scope (else the synchronous fallback): the school world with a fresh cohort
every round, and FICO lending (``Lending-v1``: its applicants all stay, loans move
their scores, fresh outcome noise every round); binary logistic regression refit on a
window of rounds (``update_rule: window``; standardised or not; no recourse loss or
defense); the ``capacity`` or ``threshold`` decision rule; labels selective or not
(the rejected dropped, or trained as unfavourable); populations ``truthful``,
``individual`` with ``objective: min_cost`` (exact for the linear model:
`recourse_sim.recourse.individual.linear_min_cost`; same-round, without
``just_enough``; a number ``margin`` or one drawn per person) and ``controlled`` with a
``complete`` or ``sbm`` graph (an ``sbm`` graph not over dropped rows), its action a
shift or OAR's settings (``action: oar``: horizon 1, solver ``pgd``, one actionable
feature or an ∞-norm budget, so that the projection is row by row;
`recourse_sim.env.batched_oar`); capacity ties
by arrival or lottery (``decision.ties``). Per-person margins and lottery numbers are
keyed numbers of each world's own keyed streams and the cohort's person ids (a fresh
cohort's ids follow the last one's), as in the single environment.

`native_reason` says why a scenario is outside that scope. `FIELD_SCOPE` declares
every field of the native world kinds and strategies (``world[kind].field``,
``populations[strategy].field``, nested fields dotted, ``.*`` a whole block) as
simulated natively or refused by `native_reason` with the reason named (another world
kind or strategy is refused whole: `field_scope`); a test walks the scenario schema and fails on a
field declared neither way, so a new field says where it stands here. Settings where
the two envs cannot be equal are refused: a Newton refit that may stop before it
converges (``learner.params`` ``max_iter`` below, or ``tol`` above, the defaults).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.learners.logistic import LogisticRegression

if TYPE_CHECKING:
    from recourse_sim.env.recourse_env import RecourseEnv

__all__ = ["FIELD_SCOPE", "drops_rejected", "field_scope", "native_reason"]

CONVERGED = LogisticRegression()
"""The solver settings (``max_iter``, ``tol``) below which a refit may stop unconverged."""

NATIVE = "native"
NATIVE_WORLDS = ("school", "fico")
NATIVE_STRATEGIES = ("truthful", "individual", "controlled")
_POPULATION = ("groups", "labels", "participation", "epsilon", "actionable")
_POPULATION += ("increase_only", "decrease_only")

FIELD_SCOPE: dict[str, str] = {
    "name": NATIVE,
    "description": NATIVE,
    "rounds": NATIVE,
    "multi_agent": NATIVE,
    # worlds: a fresh school cohort, FICO's applicants (their own generator and outcome
    # code, from each world's own stream)
    **{
        f"world[school].{f}": NATIVE
        for f in (
            "kind",
            "training_label",
            "cohort_size",
            "history_size",
            "frac_n2",
            "ability_gap",
            "extracurricular_rate_n1",
            "extracurricular_rate_n2",
            "h1_capacity",
            "proxy_weight",
            "admission_noise",
            "query_quantile",
            "outcome_threshold",
            "outcome_sharpness",
        )
    },
    **{
        f"world[{kind}].{f}": f"refused: {why}"
        for kind in NATIVE_WORLDS
        for f, why in (
            ("validity_horizon", "recourse_valid_after_T (world.validity_horizon)"),
            ("shift_metrics.*", "shift metrics (world.shift_metrics)"),
            ("honour_recourse", "honoured recourse (world.honour_recourse)"),
        )
    },
    "world[school].people.*": "refused: world 'school' with people who stay",
    **{
        f"world[fico].{f}": NATIVE
        for f in (
            "kind",
            "groups",
            "shares",
            "n_applicants",
            "history_size",
            "repay_gain",
            "default_loss",
        )
    },
    # the action sets are the single env's, built once for every world
    "features.*": NATIVE,
    "learner.type": "native: logistic_regression (two classes); else refused: learner",
    "learner.strategic": "native: none; else refused: learner strategic",
    "learner.update_rule": "native: window; else refused: update rule",
    "learner.window": NATIVE,
    "learner.standardize": NATIVE,
    "learner.recourse_loss_weight": "native: 0; else refused: a recourse loss",
    "learner.recourse_budget": "native (it sets only the refused recourse loss's and pare's)",
    "learner.params": (
        "native: C; refused: fit_intercept false, and max_iter below or tol above the "
        "defaults (a refit that may stop unconverged)"
    ),
    "learner.defense.*": "refused: a learner defense",
    "decision.rule": "native: capacity, threshold; else refused: decision rule",
    "decision.capacity": NATIVE,
    "decision.places": NATIVE,
    "decision.threshold": NATIVE,
    "decision.group_thresholds": NATIVE,
    "decision.ties": NATIVE,
    "decision.pare.*": "refused: decision rule 'pare'",
    "labels.selective": NATIVE,
    "labels.unobserved": NATIVE,
    "query.*": NATIVE,
    "reward.cost_weight": NATIVE,
    "reward.trimmed_weight": "native: 0; else refused: a penalty per trimmed participant",
    "hidden": "native: {} (none); else refused: hidden per-episode settings",
    "hidden.*": "refused: hidden per-episode settings (hidden)",
    "populations[truthful].*": NATIVE,
    **{
        f"populations[individual].{f}": NATIVE
        for f in (
            *_POPULATION,
            "strategy",
            "move",
            "tolerance.*",
            "margin",
            "margin.*",
            "steps",
            "search_steps",
        )
    },
    # (claproar and gravitational need objective budget, refused below)
    "populations[individual].method": "native: other than roar, probe; else refused: robust",
    **{
        f"populations[individual].{f}": "refused with method roar or probe (robust recourse)"
        for f in ("roar_delta", "probe_sigma", "probe_invalidation")
    },
    "populations[individual].mitigation_weight": (
        "refused with method claproar or gravitational (objective budget: recourse other)"
    ),
    "populations[individual].objective": "native: min_cost; else refused: recourse other",
    "populations[individual].reapply": "native: same_round; else refused: recourse other",
    "populations[individual].just_enough": "native: false; else refused: recourse other",
    "populations[individual].recourse": "refused: world (causal recourse needs an scm world)",
    **{
        f"populations[controlled].{f}": NATIVE
        for f in (
            *_POPULATION,
            "strategy",
            "decisions",
            "query.*",
            "graph.mean_degree",
            "graph.homophily",
            "graph.seed_fraction",
            "graph.seed_groups",
            "graph.spread",
        )
    },
    "populations[controlled].graph.kind": "native: complete, sbm; else refused: social graph",
    "populations[controlled].graph.generator": "refused: a social graph other than complete, sbm",
    "populations[controlled].graph.params": "refused: a social graph other than complete, sbm",
    "populations[controlled].action": (
        "native: shift, oar (one actionable feature or p = inf); else refused: OAR's settings"
    ),
    "populations[controlled].horizon": "native: 1; else refused: OAR's settings (horizon)",
    "populations[controlled].steps": NATIVE,
    "populations[controlled].solver": "native: pgd; else refused: OAR's settings (solver)",
    "populations[controlled].budget_levels": NATIVE,
    "populations[controlled].max_horizon": "refused with action oar_plan (look-ahead, bank)",
    "populations[controlled].bank_cap": "refused with action oar_plan (look-ahead, bank)",
    "populations[controlled].limit.*": "refused: a limit (the collective's hard constraint)",
}
"""The scenario fields of the native world kinds and strategies: simulated natively
(``native``, or within the values named) or refused by `native_reason` (``refused:
...``, the reason it gives). Every field of another world kind or strategy is refused
with it (`field_scope`)."""


def field_scope(path: str) -> str | None:
    """How the batched env treats scenario field `path` (``world[kind].field``,
    ``populations[strategy].field``, nested fields dotted); None: undeclared."""
    if path in FIELD_SCOPE:
        return FIELD_SCOPE[path]
    for key, how in FIELD_SCOPE.items():
        if key.endswith(".*") and path.startswith(key[:-1]):
            return how
    tagged = re.match(r"(world|populations)\[(\w+)\]", path)
    if tagged and tagged[1] == "world" and tagged[2] not in NATIVE_WORLDS:
        return f"refused: world {tagged[2]!r}"
    if tagged and tagged[1] == "populations" and tagged[2] not in NATIVE_STRATEGIES:
        return f"refused: population {tagged[2]!r}"
    return None


def native_reason(env: RecourseEnv) -> str | None:
    """Why `BatchedRecourseEnv` cannot simulate `env`'s scenario natively (None: it can)."""
    sc = env.scenario
    fico = sc.world.kind == "fico"
    if not (sc.world.kind == "school" and not env.pool_rules.persist) and not fico:
        return (
            f"world {sc.world.kind!r} with people who stay (only a fresh school cohort "
            "or FICO's applicants are)"
        )
    if getattr(sc.world, "validity_horizon", None) is not None:
        return "recourse_valid_after_T (world.validity_horizon)"
    if sc.world.shift_metrics is not None:
        return "shift metrics (world.shift_metrics)"
    if sc.world.honour_recourse:
        return "honoured recourse (world.honour_recourse)"
    if sc.hidden:
        return f"hidden per-episode settings (hidden: {', '.join(sc.hidden)})"
    if sc.reward.trimmed_weight:
        return "a penalty per trimmed participant (reward.trimmed_weight)"
    spec = sc.learner
    if spec.strategic != "none":
        return f"learner strategic {spec.strategic!r}"
    if spec.type != "logistic_regression" or env.n_classes != 2:
        return f"learner {spec.type!r} with {env.n_classes} classes"
    if spec.update_rule != "window":
        return f"update rule {spec.update_rule!r}, not a refit on a window of rounds"
    learner = env.learner
    if learner.recourse_loss_weight or not learner.fit_intercept:
        return "logistic regression with a recourse loss or without an intercept"
    if learner.max_iter < CONVERGED.max_iter or learner.tol > CONVERGED.tol:
        return (
            f"learner.params max_iter {learner.max_iter}, tol {learner.tol:g}: a Newton "
            "refit that may stop before it converges ends elsewhere in the batch (its "
            "worlds would not be the single env's)"
        )
    if env.state.defense.active:
        return "a learner defense"
    if sc.decision.rule not in ("capacity", "threshold"):
        return f"decision rule {sc.decision.rule!r}"
    if env.render_mode is not None:
        return f"render_mode={env.render_mode!r}"
    for s in env.strategies:
        spec = s.spec
        if s.name == "truthful":
            continue
        if s.name == "individual":
            if spec.objective != "min_cost" or spec.reapply != "same_round" or spec.just_enough:
                return f"population {s.population!r}: recourse other than same-round min_cost"
            if spec.method in ("roar", "probe"):
                return f"population {s.population!r}: robust recourse ({spec.method})"
            continue
        if s.name == "controlled":
            if spec.limit is not None:
                return f"population {s.population!r}: a limit (the collective's hard constraint)"
            if spec.action == "oar_plan":
                return f"population {s.population!r}: the oar_plan action (look-ahead, bank)"
            if spec.action != "shift":
                why = _oar_reason(s)
                if why is not None:
                    return f"population {s.population!r}: OAR's settings as the action ({why})"
            if spec.graph.kind not in ("complete", "sbm"):
                return f"population {s.population!r}: a {spec.graph.kind!r} social graph"
            if spec.graph.kind == "sbm" and drops_rejected(sc.labels):
                return f"population {s.population!r}: an sbm graph of selective labels' rows"
            continue
        return f"population {s.population!r} of strategy {s.name!r}"
    return None


def _oar_reason(s) -> str | None:
    """Why the batched OAR (`recourse_sim.env.batched_oar`) cannot solve a controlled
    population's OAR as its single env does (None: it can)."""
    spec, aset = s.spec, s.action_set
    if spec.action != "oar":
        return f"action {spec.action!r}"
    if spec.horizon != 1:
        return f"horizon {spec.horizon}: OAR's look-ahead solved per world"
    if spec.solver != "pgd":
        return f"solver {spec.solver!r}"
    if aset.p != np.inf and aset.actionable.sum() > 1:
        return (
            "several actionable features under a p = 1 or 2 budget: the projection's "
            "multiplier search ends by the whole batch's rows"
        )
    return None


def drops_rejected(labels) -> bool:
    """Whether only the approved people's rows train the model (selective labels, the
    rejected dropped): a number of rows per world."""
    return labels.selective and labels.unobserved == "drop"
