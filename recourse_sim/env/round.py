"""A round as named phases over a public episode state.

`RoundState` is everything a world carries from one round to the next (the applicants
waiting, the pool, last round's recourse holders, the deployed learner and its
defense, the random streams and keys, the rates the observation remembers, ...).
A round is the phases in `PHASES`, in order, each a function ``phase(engine, work)``
that reads the engine's rules (`recourse_sim.env.engine.RoundEngine`) and its
``state``, changes the state where the round does, and fills in its part of `RoundWork`,
the round in progress; `close_round` then writes the round's `RoundRecord` and metric
rows:

``respond``
    ``respond``-stage populations best-respond to the deployed model: the reports the
    cohort applies with.
``decide``
    the decision rule on those reports (capacity: the cut-off score), and whether last
    round's recourse holders are favoured again.
``individual_recourse``
    rejected members of decision-stage populations seek recourse and move (same round:
    decided again; next round: carried to the next application).
``outcomes``
    the world's true outcomes at the true features people end with; causal worlds'
    validity of recourse; the query group.
``collective``
    the training-stage collectives perturb the rows that train the next model.
``update``
    the learner's update (through its defense, if any) and what strategies observe.
``advance``
    what people carry on with, the next round's applicants (the pool advances), the
    next PARE threshold, the query's success and the reward.

`play_round` runs them; its `on_phase` hook sees the work after each phase, which is
how the equality tests between the single and batched environments name the phase
where two worlds part. A new per-round column goes into `RoundRecord`
(`recourse_sim.env.metrics`) from the phase that knows it, through `RoundWork`; a new
piece of state that lasts between rounds goes into `RoundState` (and
`recourse_sim.env.state` for checkpoints).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from recourse_sim.agents.social import recruit
from recourse_sim.env.construction import log_loss, log_loss_of
from recourse_sim.env.limits import limited, spend
from recourse_sim.env.metrics import (
    CollectiveChanges,
    RoundRecord,
    least_cost_to_favour,
    round_metrics,
)
from recourse_sim.env.round_state import RoundState, no_holders
from recourse_sim.env.shift import honour
from recourse_sim.env.streams import WORLD

if TYPE_CHECKING:
    from recourse_sim.env.engine import Moves, RoundEngine
    from recourse_sim.env.worlds import Cohort

__all__ = [
    "PHASES",
    "RoundState",
    "RoundWork",
    "advance",
    "close_round",
    "collective",
    "controlled_summary",
    "decide",
    "decision_cutoff",
    "individual_recourse",
    "no_holders",
    "outcomes",
    "play_round",
    "respond",
    "update",
]


@dataclass
class RoundWork:
    """One round in progress: what each phase found, for the phases after it."""

    actions: dict[str, np.ndarray]  # controlled collectives' actions, by population
    default: np.ndarray | None  # the action of a collective not in `actions`
    cohort: Cohort  # the applicants, with their responses (respond)
    honest_proba: np.ndarray | None = None  # (n, k) on the reports applied with (decide)
    favourable_before: np.ndarray | None = None  # (n,) decisions on them (decide)
    cut: float | None = None  # capacity rule: the cut-off score (decide)
    last_holders: dict[str, np.ndarray] | None = None  # last round's holders (decide)
    holder_favoured: np.ndarray | None = None  # ... favoured this round (decide)
    least_cost: np.ndarray | None = None  # per person, least cost to be favoured (decide)
    moves: Moves | None = None  # individual recourse (individual_recourse)
    cutoff: np.ndarray | None = None  # per person, the score the final decision needed
    y: np.ndarray | None = None  # true outcomes (outcomes)
    validity: dict[str, Any] = field(default_factory=dict)  # causal worlds (outcomes)
    query: np.ndarray | None = None  # the query group (outcomes)
    X_train: np.ndarray | None = None  # the rows the update trains on (collective)
    y_train: np.ndarray | None = None
    participants: np.ndarray | None = None  # rows of a collective's members (collective)
    changed: np.ndarray | None = None  # ... whose reports they changed (collective)
    changes: CollectiveChanges | None = None  # what collectives changed (collective)
    collectives: dict[str, dict[str, Any]] = field(default_factory=dict)  # per collective
    clipped: dict[str, bool] = field(default_factory=dict)  # by its limit (collective)
    applied: dict[str, Any] = field(default_factory=dict)  # OAR's settings played (collective)
    eligible: dict[str, int] = field(default_factory=dict)  # each one's eligible (collective)
    collective_cost: float = 0.0  # mean cost of every participant (collective)
    trimmed_share: float = 0.0  # share of the changed rows the trimmed refit dropped (update)
    update_start: Any = None  # the update a collective solved, to start from (collective)
    model_shift: float = 0.0  # ‖θ − θ0‖ before the update (update)
    pare_now: dict[str, float] = field(default_factory=dict)  # PARE's stats (update)
    model_stats: dict[str, float | None] = field(default_factory=dict)  # (update)
    failed: np.ndarray | None = None  # failed recourse attempts so far (advance)
    departures: Any = None  # who leaves the pool (advance)
    next_cohort: Cohort | None = None  # the next round's applicants (advance)
    query_success: float = 0.0  # the query's success under the updated model (advance)
    reward: float = 0.0  # query success − λ · cost − trimmed_weight · trimmed (advance)
    record: RoundRecord | None = None  # the round's record (close_round)
    metrics: list[dict] = field(default_factory=list)  # its metric rows (close_round)


def respond(engine: RoundEngine, work: RoundWork) -> None:
    """Best responses to the deployed model: the reports people apply with."""
    work.cohort = engine.respond_cohort(work.cohort)


def decide(engine: RoundEngine, work: RoundWork) -> None:
    """The decision on the reports people apply with (the last observation's)."""
    c = work.cohort
    work.honest_proba, work.favourable_before = engine.honest_decisions(c)
    work.cut = engine.capacity_cut(work.honest_proba, work.favourable_before)
    work.least_cost = least_cost_to_favour(  # (social_burden: the truly favourable)
        engine.learner,
        c.report,
        engine.needed(c.group, work.cut),
        engine.action_set,
        engine.favourable,
        c.y0 == engine.favourable,
    )
    work.last_holders = engine.state.holders
    work.holder_favoured = engine.holders_favoured(c, work.favourable_before, work.cut)


def individual_recourse(engine: RoundEngine, work: RoundWork) -> None:
    """Rejected members of individual populations seek recourse: moves decided again
    now (same_round) or carried to next round's application."""
    c = work.cohort
    moves = engine.seek_recourse(c, work.honest_proba, work.favourable_before, work.cut)
    work.moves = moves
    # the score the final decision needs of each person (`seekers_at_cutoff`)
    final_cut = engine.capacity_cut(moves.proba, moves.favourable)
    work.cutoff = None if final_cut == np.inf else engine.needed(c.group, final_cut)


def outcomes(engine: RoundEngine, work: RoundWork) -> None:
    """True outcomes at the true features people end with; validity; the query group."""
    c, moves = work.cohort, work.moves
    work.y = engine.world.outcome(c, moves.X_true, moves.changed)
    work.validity = engine.validity(
        c, work.last_holders, work.holder_favoured, moves.tried, work.y, work.cut
    )
    work.query = engine.query_mask(engine.scenario.query, c)


def collective(engine: RoundEngine, work: RoundWork) -> None:
    """The training-stage collectives perturb the reports that train the next model."""
    c, moves, query, learner = work.cohort, work.moves, work.query, engine.learner
    favourable = moves.favourable
    recorded = np.where(c.record >= 0, c.record, work.y)
    if engine.honour:
        recorded, engine.state.honoured = honour(
            engine.state.honoured, c.person, recorded, moves.tried & favourable, engine.favourable
        )
    X_train, y_train, train_rows = engine.training_rows(moves.X_rep, recorded, favourable)
    participants_all = np.zeros(len(X_train), bool)
    X_applied, members = X_train, []  # (for people.csv's collective columns)
    costs = []
    collectives: dict[str, dict[str, Any]] = {}
    rows_group, rows_favourable = c.group[train_rows], favourable[train_rows]
    update_start = None
    for s in engine.strategies:
        if s.stage != "training":
            continue
        eligible = s.select(rows_group, y_train, engine.group_labels) & ~participants_all
        if s.spec.decisions == "favourable":
            eligible &= rows_favourable
        elif s.spec.decisions == "unfavourable":
            eligible &= ~rows_favourable
        # OAR's settings as the action chooses them, held to the population's limit
        action, work.clipped[s.population] = limited(
            s, work.actions.get(s.population, work.default), engine.state
        )
        work.applied[s.population] = action
        joined = recruit(
            s.spec.graph,
            s.participation_of(action),
            eligible,
            rows_group,
            engine.group_labels,
            engine.stream_of(s),
        )
        qspec = s.spec.query or engine.scenario.query
        qmask = query if qspec is engine.scenario.query else engine.query_mask(qspec, c)
        delta = s.act(learner, X_train, y_train, joined, c.report[qmask], qspec.goal, action=action)
        X_train = X_train + delta
        if s.labels_after is not None:  # a collective that reports labels (crowd labelling)
            y_train = s.labels_after
        # the update this collective solved is of exactly these rows, unless a later
        # one changes them
        update_start = s.state_after
        participants_all |= joined
        own_cost = np.asarray(s.action_set.cost(delta[joined])) if joined.any() else None
        if own_cost is not None:
            costs.append(own_cost)
        members.append((s.population, joined, own_cost))
        work.eligible[s.population] = int(eligible.sum())
        collectives[s.population] = {
            "participants": int(joined.sum()),
            "cost": float(own_cost.mean()) if own_cost is not None else 0.0,
            "query": (qmask, qspec.goal),
        }
        spend(s, action, collectives[s.population]["cost"], engine.state)
    all_costs = np.concatenate(costs) if costs else np.zeros(0)
    work.collective_cost = float(all_costs.mean()) if all_costs.size else 0.0
    work.X_train, work.y_train, work.participants = X_train, y_train, participants_all
    work.changed = participants_all & (X_train != X_applied).any(axis=1)
    work.collectives, work.update_start = collectives, update_start
    if members:
        work.changes = CollectiveChanges(train_rows, X_applied, X_train, tuple(members))


def update(engine: RoundEngine, work: RoundWork) -> None:
    """The learner's update on the training rows (through its defense, if any), and
    what the populations' strategies observe of it."""
    state, learner = engine.state, engine.learner
    X_train, y_train = work.X_train, work.y_train
    work.model_shift = float(np.linalg.norm(learner.param_vector() - state.theta0))
    work.pare_now = dict(state.pare)
    if work.pare_now:
        work.pare_now["has_recourse_rate"] = engine.has_recourse_rate(work.cohort.report)
    theta_before = learner.param_vector()
    loss_before = log_loss(learner, X_train, y_train)
    c = work.cohort
    gap = engine.optimum.gap(learner, c.X, c.y0, work.y) if engine.optimum else None
    if len(X_train) and state.defense.active:
        state.defense.update(learner, X_train, y_train, start=work.update_start)
        n_changed = np.count_nonzero(work.changed)
        if n_changed and state.defense.trimmed.any():
            trimmed = np.count_nonzero(state.defense.trimmed & work.changed)
            work.trimmed_share = trimmed / n_changed
        if work.changes is not None:  # each collective's own share (its agent's penalty)
            for population, joined, _ in work.changes.members:
                own = joined & work.changed
                dropped = np.count_nonzero(state.defense.trimmed & own)
                work.collectives[population]["trimmed"] = dropped / max(int(own.sum()), 1)
    elif len(X_train):
        learner.update(X_train, y_train, start=work.update_start)
    work.model_stats = {
        "theta_step": float(np.linalg.norm(learner.param_vector() - theta_before)),
        # the deployed model's loss on the distribution it induced: this round's
        # people, as they reported, with their true outcomes
        "performative_risk": log_loss_of(work.moves.proba, work.y),
        "loss_before_refit": loss_before,
        "loss_after_refit": log_loss(learner, X_train, y_train),
        **({"optimum_gap": gap} if engine.optimum else {}),
    }
    if engine.shift is not None:
        work.model_stats.update(
            engine.shift.round_stats(learner, X_train, y_train, state.round + 1)
        )
    for s in engine.strategies:
        s.observe(learner, X_train, y_train)


def advance(engine: RoundEngine, work: RoundWork) -> None:
    """What people carry on with, this round's recourse holders, the next round's
    applicants, the query's success under the updated model and the reward."""
    state, c, moves, query = engine.state, work.cohort, work.moves, work.query
    after, work.failed = engine.carry_on(c, moves, work.y, moves.favourable)
    holders = moves.holders
    state.holders = {
        "person": c.person[holders],
        "report": after.report[holders],
        "group": c.group[holders],
        "query": query[holders],
    }
    horizon = engine.validity_horizon
    if horizon is not None:
        state.past_holders = [*state.past_holders, state.holders][-horizon:]
    # The next applicants come before the query's success is measured so that a PARE
    # threshold can be recalibrated for the updated model first (the success is the
    # next round's, at the next round's threshold); nothing in between draws randomness.
    work.next_cohort, work.departures = state.pool.advance(
        engine.world, state.streams[WORLD], state.round + 1, after, moves.favourable
    )
    if work.pare_now:
        state.pare = engine.pare_threshold(work.next_cohort)
    work.query_success = engine.query_success(c, query)
    for stats in work.collectives.values():
        stats["query_success"] = engine.query_success(c, *stats.pop("query"))
    spec = engine.scenario.reward
    work.reward = (
        work.query_success
        - spec.cost_weight * work.collective_cost
        - spec.trimmed_weight * work.trimmed_share
    )


PHASES: tuple[Callable[[RoundEngine, RoundWork], None], ...] = (
    respond,
    decide,
    individual_recourse,
    outcomes,
    collective,
    update,
    advance,
)
"""A round's phases, in order."""


def close_round(engine: RoundEngine, work: RoundWork) -> None:
    """The round's `RoundRecord` and metric rows; the rates the observation remembers;
    the round counter and the next applicants."""
    state, c, moves = engine.state, work.cohort, work.moves
    proba, y = moves.proba, work.y
    departures, last_holders = work.departures, work.last_holders
    record = RoundRecord(
        round=state.round + 1,
        group=c.group,
        query=work.query,
        favourable_before=work.favourable_before,
        favourable=moves.favourable,
        tried=moves.tried,
        cost=moves.cost,
        true_favourable=y == engine.favourable,
        score=proba[:, engine.favourable],
        class_correct=proba.argmax(1) == y if engine.n_classes > 2 else None,
        model_shift=work.model_shift,
        collective_participants=int(work.participants.sum()),
        collective_mean_cost=work.collective_cost,
        query_success_next=work.query_success,
        reward=work.reward,
        group_stats=engine.world.group_stats(state.pool.people),
        decision_stats=work.pare_now,
        model_stats=work.model_stats,
        person=c.person,
        arrived=c.arrived,
        waited=state.round + 1 - c.since,
        failed=work.failed,
        leaving=departures.leaving,
        pool_group=departures.pool.group,
        pool_query=engine.query_mask(engine.scenario.query, departures.pool),
        holder_group=last_holders["group"],
        holder_query=last_holders["query"],
        holder_favoured=work.holder_favoured,
        X=c.X,
        report=moves.X_rep,
        cutoff=work.cutoff,
        aim_unreachable=moves.aim_unreachable,
        favourable_at_start=c.y0 == engine.favourable,
        least_cost=work.least_cost,
        **work.validity,
        collective=work.changes,
    )
    metrics = round_metrics(record, engine.row_labels)
    G = len(engine.group_labels)
    state.last = {
        "acceptance": np.array([m["acceptance_rate"] for m in metrics[:G]]),
        "true_outcome": np.array([m["true_outcome_rate"] for m in metrics[:G]]),
        "query_acceptance": np.array([metrics[G]["acceptance_rate"]]),
    }
    if engine.controlled is not None and engine.controlled.spec.action != "shift":
        state.last["controlled"] = controlled_summary(engine, work)
    if engine.query_group_row is not None:  # the same people as the query row: once
        del metrics[engine.query_group_row]
    work.record, work.metrics = record, metrics
    state.last_record = record
    state.round += 1
    state.cohort = work.next_cohort


def decision_cutoff(engine: RoundEngine, cut: float | None) -> float:
    """The decision's cut-off as a probability: under ``capacity`` the P(favourable) of
    the last one given a place (`cut`), under a threshold rule its threshold (PARE's
    current one), else (nobody given a place, ``argmax``) 1/2."""
    rule = engine.scenario.decision
    if cut is not None:
        return float(cut) if np.isfinite(cut) else 0.5
    if rule.rule == "pare":
        return float(engine.state.pare["decision_threshold"])
    if rule.rule == "threshold":
        return float(rule.threshold)
    return 0.5


def controlled_summary(engine: RoundEngine, work: RoundWork | None) -> np.ndarray:
    """What the observation of a controlled collective with OAR's settings as its action
    remembers of a round (`work`; None: before round 1, the first model's cut-off on the
    first cohort): the action as applied (`Controlled.applied_action`; zeros before round
    1), its mean cost per participant / ε (clipped to [0, 1]), the decision's cut-off
    (`decision_cutoff`), participants / eligible and eligible / applicants."""
    s = engine.controlled
    if work is None:
        c = engine.state.cohort
        proba, favourable = engine.honest_decisions(c)
        cut = decision_cutoff(engine, engine.capacity_cut(proba, favourable))
        (entries,) = s.action_shape(engine.n_classes)
        return np.array([*np.zeros(entries), 0.0, cut, 0.0, 0.0])
    stats = work.collectives.get(s.population, {"participants": 0, "cost": 0.0})
    eps = s.action_set.epsilon
    cost = min(stats["cost"] / eps, 1.0) if eps > 0 else 0.0
    eligible = work.eligible.get(s.population, 0)
    return np.array(
        [
            *s.applied_action(work.applied.get(s.population)),
            cost,
            decision_cutoff(engine, work.cut),
            stats["participants"] / eligible if eligible else 0.0,
            eligible / len(work.cohort.group) if len(work.cohort.group) else 0.0,
        ]
    )


def play_round(
    engine: RoundEngine,
    actions: dict[str, np.ndarray],
    default: np.ndarray | None,
    on_phase: Callable[[str, RoundWork], None] | None = None,
) -> RoundWork:
    """One round of `engine`'s world: every phase of `PHASES`, then `close_round`.
    Collective `p` acts on ``actions.get(p, default)``; `on_phase(name, work)` is
    called after each phase."""
    assert engine.state.cohort is not None
    work = RoundWork(actions=actions, default=default, cohort=engine.state.cohort)
    for phase in PHASES:
        phase(engine, work)
        if on_phase is not None:
            on_phase(phase.__name__, work)
    close_round(engine, work)
    return work
