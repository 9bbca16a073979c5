"""The round engine: what a round is made of, for one world.

`RoundEngine` holds what a scenario fixes for a whole episode (the world, the
populations and their strategies, their action sets, the decision rule, the streams'
names) and the episode's mutable `~recourse_sim.env.round.RoundState` (``state``).
Its methods are the pieces the phases of a round (`recourse_sim.env.round`) are made
of: decisions under the rule, the population's responses, individual recourse, the
rows the next update trains on, what people carry on with. `RecourseEnv` is the
Gymnasium face of an engine; the batched and multi-agent environments use the same
public pieces.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from recourse_sim.agents.strategies import (
    IndividualResult,
    Strategy,
    adapt,
    aim_unreachable,
    make_strategy,
    seeker_margins,
)
from recourse_sim.env import limits
from recourse_sim.env.anticipation import performative_learner, strategic_learner
from recourse_sim.env.construction import (
    base_action_set,
    metric_row_labels,
    population_action_set,
    scenario_bounds,
    warn_if_powerless,
)
from recourse_sim.env.metrics import tie_key
from recourse_sim.env.optimum import PerformativeOptimum
from recourse_sim.env.pool import pool_rules
from recourse_sim.env.round_state import RoundState
from recourse_sim.env.shift import SHIFT_STREAM, ShiftTracker
from recourse_sim.env.streams import (
    DECISION,
    LEARNER,
    TIES,
    WORLD,
    keyed_uniforms,
    margin_stream,
    population_stream,
)
from recourse_sim.env.worlds import Cohort, World, build_world, follow_direct_changes
from recourse_sim.errors import ConfigError
from recourse_sim.learners import LEARNERS, Learner, make_learner
from recourse_sim.learners.defense import Defense
from recourse_sim.learners.performative import PERFORMATIVE_RULES
from recourse_sim.recourse.individual import least_share
from recourse_sim.scenarios import QuerySpec, Scenario, check_classes

__all__ = ["Moves", "RoundEngine", "capacity_decisions"]


class RoundEngine:
    """The rules of one scenario's rounds and the episode state they act on (see the
    module docstring). Built from a loaded scenario; `RecourseEnv` is its Gymnasium face."""

    # the action drives one controlled population (the multi-agent env lifts this)
    single_controlled: ClassVar[bool] = True

    def __init__(self, scenario: Scenario) -> None:
        self.scenario: Scenario = scenario
        self.world: World = build_world(scenario.world, scenario.source)
        names = self.world.features.names
        self.n_features = len(names)
        self.n_classes = self.world.n_classes
        self.favourable = self.world.favourable
        self.group_labels = self.world.group_labels
        self.row_labels, self.query_group_row = metric_row_labels(self.group_labels, scenario.query)

        # a CSV's labels may be named by their values in the file
        values = self.world.data.class_values if scenario.world.kind == "csv" else ()
        check_classes(scenario, self.n_classes, values)
        self.action_set, self.causal = base_action_set(scenario, self.world)
        self.strategies: list[Strategy] = []
        for pname, pop in scenario.populations.items():
            # a best response is bounded only where the scenario says so, not by the
            # world's own ranges (a tabular world's data min and max)
            base = self.action_set
            if pop.strategy == "best_response":
                base = scenario_bounds(base, scenario.features)
            aset = population_action_set(base, pop, names, f"populations.{pname}")
            self.strategies.append(make_strategy(pname, pop, aset))
            warn_if_powerless(scenario, pname, pop, aset)
        controlled = [s for s in self.strategies if s.name == "controlled"]
        if len(controlled) > 1 and self.single_controlled:
            raise ConfigError(
                f"{scenario.source}: populations: at most one controlled population per "
                f"RecourseEnv, got {[s.population for s in controlled]} (several collectives, "
                "each its own agent: recourse_sim.env.multi.RecourseParallelEnv)"
            )
        self.controlled = controlled[0] if controlled else None
        self.pool_rules = pool_rules(self.world)
        # T of recourse_valid_after_T (None: no validity columns; causal worlds: always)
        self.validity_horizon = getattr(scenario.world, "validity_horizon", None)
        # the shifts recourse causes (world.shift_metrics) and honoured recourse labels
        shift = scenario.world.shift_metrics
        self.shift = ShiftTracker(shift, self.favourable) if shift is not None else None
        self.honour = scenario.world.honour_recourse
        # people who re-apply next round start in motion: a round 0 (see Starting State)
        self.has_round_zero = any(
            s.stage == "decision" and s.spec.reapply == "next_round" for s in self.strategies
        )
        # keyed streams (`recourse_sim.env.streams`): per-person margins, tie lotteries
        self.lottery = scenario.decision.rule == "capacity" and scenario.decision.ties == "random"
        self.keyed_names = (
            *(
                margin_stream(s.population)
                for s in self.strategies
                if not isinstance(getattr(s.spec, "margin", 0.0), int | float)
            ),
            *((TIES,) if self.lottery else ()),
            *((SHIFT_STREAM,) if self.shift is not None else ()),
        )
        self.stream_names = (
            WORLD,
            LEARNER,
            DECISION,
            *(population_stream(s.population) for s in self.strategies),
            *self.keyed_names,
        )

        self.pare_action_set = self.action_set.replace(
            epsilon=self.recourse_budget(scenario.decision.pare.budget)
        )
        learner = self.new_learner(random_state=0)
        self.state = RoundState(
            learner=learner, defense=Defense(scenario.learner.defense, self.n_features)
        )
        # optimum_gap, where the performative optimum is computable (None: no column)
        self.optimum = PerformativeOptimum.of(scenario, self.strategies, learner, self.favourable)

    @property
    def learner(self) -> Learner:
        """The deployed model (the episode state's)."""
        return self.state.learner

    @learner.setter
    def learner(self, learner: Learner) -> None:
        self.state.learner = learner

    def limit_left(self) -> tuple[float, float]:
        """The controlled collective's (acting rounds left / K, cost left / C), each 1.0
        where its ``limit`` sets none (`recourse_sim.env.limits`)."""
        return limits.limit_left(self.controlled, self.state)

    def bank_share(self) -> float:
        """The controlled collective's banked budget / (bank_cap · ε), in [0, 1] (0 where
        it banks nothing: an action other than ``oar_plan``, or bank_cap 0)."""
        return limits.bank_share(self.controlled, self.state)

    # -- construction helpers ------------------------------------------------------------
    def stream_of(self, strategy: Strategy) -> np.random.Generator:
        """The random stream of a population's strategy (`recourse_sim.env.streams`)."""
        return self.state.streams[population_stream(strategy.population)]

    def new_learner(self, random_state: int) -> Learner:
        spec = self.scenario.learner
        accepted = LEARNERS[spec.type]._get_param_names()
        try:
            params = spec.learner_params(accepted)
        except ValueError as exc:
            raise ConfigError(f"{self.scenario.source}: learner.standardize: {exc}") from None
        if "n_classes" in accepted:
            params.setdefault("n_classes", self.n_classes)
        if "random_state" in accepted:
            params.setdefault("random_state", random_state)
        if spec.recourse_loss_weight > 0:
            # Ross et al.'s recourse loss: δ* over the scenario's actionable set, in the
            # units of X (the learner standardises internally), towards the query's goal
            params.update(
                recourse_loss_weight=spec.recourse_loss_weight,
                action_set=self.action_set.replace(epsilon=self.recourse_budget()),
                recourse_goal=self.scenario.query.goal,
            )
        if spec.strategic != "none":  # trained against the responding population
            return strategic_learner(self.scenario, self.strategies, self.favourable, params)
        if spec.update_rule in PERFORMATIVE_RULES:  # descends the performative risk
            return performative_learner(
                self.scenario, self.strategies, self.favourable, params, random_state
            )
        update_rule, window = spec.update_rule, spec.window
        if update_rule == "refit" and self.world.fixed_population:
            # the file's rows are people, each reporting every round: every row seen is
            # each person's latest report, so a refit trains on the last round (RRM)
            update_rule, window = "window", 1
        try:
            return make_learner(spec.type, update_rule=update_rule, window=window, **params)
        except ConfigError as exc:
            raise ConfigError(f"{self.scenario.source}: learner: {exc}") from None

    def recourse_budget(self, given: float | None = None) -> float:
        """Budget of the bank's recourse δ* (cost units): `given`, else
        ``learner.recourse_budget``, else the largest budget of the populations that seek
        recourse for themselves (those acting at the decision), else 1."""
        if given is not None:
            return float(given)
        if self.scenario.learner.recourse_budget is not None:
            return float(self.scenario.learner.recourse_budget)
        budgets = [s.spec.epsilon for s in self.strategies if s.stage == "decision"]
        return float(max(budgets)) if budgets else 1.0

    def pare_threshold(self, cohort: Cohort) -> dict[str, float]:
        """This round's PARE threshold (``decision.rule: pare``) for the current model.

        Calibrates on honest reports only (features, never outcomes): a fresh draw of
        applicants from the world (from the ``decision`` stream, so the world's own draws
        are the same whatever the rule), or the cohort about to be decided. Returns the
        deployed ``decision_threshold`` = min(decision.threshold, τ̂) and ``pare_upper``
        = τ̂, the largest threshold the calibration certifies.
        """
        from recourse_sim.recourse.ross import pare_threshold

        rule = self.scenario.decision
        spec = rule.pare
        if spec.calibration == "fresh":
            X_cal = self.world.newcomers(self.world.cohort_size, self.state.streams[DECISION]).X
        else:
            X_cal = cohort.report
        with warnings.catch_warnings():
            # too few rows is a load-time error (scenarios.pare_min_calibration); nothing
            # else warns
            warnings.simplefilter("ignore")
            pare = pare_threshold(
                self.learner,
                X_cal,
                self.pare_action_set,
                epsilon=spec.epsilon,
                alpha=spec.alpha,
                goal=self.favourable,
            )
        return {
            "decision_threshold": float(min(rule.threshold, pare.upper)),
            "pare_upper": float(pare.upper),
        }

    def has_recourse_rate(self, X: np.ndarray) -> float:
        """Share of honest reports X that have recourse at the deployed threshold: the
        model favours x or x + δ* (linear, the bank's action set and budget) (PARE only)."""
        from recourse_sim.recourse.ross import recourse_scores

        s = recourse_scores(self.learner, X, self.pare_action_set, goal=self.favourable)
        return float((s >= self.state.pare["decision_threshold"]).mean()) if len(s) else 0.0

    def param_count(self) -> int:
        """Length of the learner's parameter vector, from a fit on a tiny fixed dataset
        (the count depends only on the learner, d and k); on numpy where the learner
        can (`Learner.fit_numpy`: only the shapes matter)."""
        k, d = self.n_classes, self.n_features
        y = np.tile(np.arange(k), 2)
        X = np.outer(y, np.ones(d)) + np.repeat([0.0, 0.5], k)[:, None]
        probe = self.new_learner(random_state=0)
        with warnings.catch_warnings():
            # only the shapes of the probe's parameters matter, not how well it fit
            warnings.simplefilter("ignore")
            try:
                probe.fit_numpy(X, y)
            except ConfigError as exc:
                raise ConfigError(f"{self.scenario.source}: learner: {exc}") from None
        return len(probe.param_vector())

    def decide(
        self, proba: np.ndarray, group: np.ndarray, person: np.ndarray | None = None
    ) -> np.ndarray:
        """Favourable decisions (bool) from class probabilities under the decision rule
        (`person`: the rows' ids, for a capacity rule's tie lottery)."""
        rule = self.scenario.decision
        p = proba[:, self.favourable]
        if rule.rule == "argmax":
            return proba.argmax(1) == self.favourable
        if rule.rule == "capacity":
            # the `places` most probable, ties in row order (applicants are in order of
            # arrival: the earlier first): the first `places` of a stable sort of −p,
            # found by a partition (linear time) instead of the sort. Scores within
            # TIE_RESOLUTION are ties: people who moved to the same cut-off land there up
            # to rounding, and rounding should not decide who gets a place. With
            # ``ties: random`` the tied are taken in the order of this round's lottery
            priority = None
            if self.lottery:
                assert person is not None
                priority = self.keyed(TIES, person, np.full(len(person), self.state.round + 1))
            return capacity_decisions(p, self.places(len(p)), priority)
        return p >= self.thresholds(group)

    def keyed(self, name: str, *counters: np.ndarray) -> np.ndarray:
        """Uniforms of the keyed stream `name` for these counters (person ids, rounds)."""
        return keyed_uniforms(self.state.keys[name], *counters)

    def margins(self, strategy: Strategy, person: np.ndarray) -> float | np.ndarray:
        """A seeking population's margins: its number, or per person (ids `person`) the
        spread's value at the person's quantile of the stream ``margin/<population>``."""
        spec = getattr(strategy.spec, "margin", 0.0)
        if isinstance(spec, int | float):
            return float(spec)
        return seeker_margins(spec, self.keyed(margin_stream(strategy.population), person))

    def places(self, n: int) -> int:
        """Places the capacity rule gives among `n` applicants (``places``, or the share
        ``capacity`` of them, rounded), at most n."""
        rule = self.scenario.decision
        places = round(rule.capacity * n) if rule.places is None else rule.places
        return min(places, n)

    def thresholds(self, group: np.ndarray) -> np.ndarray:
        """Per person, the P(favourable) a threshold rule needs (``threshold`` with its
        per-group values, or PARE's)."""
        rule = self.scenario.decision
        if rule.rule == "pare":
            return np.full(len(group), self.state.pare["decision_threshold"])
        threshold = np.full(len(group), rule.threshold)
        for g, label in enumerate(self.group_labels):
            if label in rule.group_thresholds:
                threshold[group == g] = rule.group_thresholds[label]
        return threshold

    def needed(self, group: np.ndarray, cut: float | None) -> np.ndarray | None:
        """Per person, the P(favourable) this round's decision needs, which min-cost
        recourse aims at: the threshold, or under ``capacity`` the round's cut-off score;
        None under ``argmax``."""
        if cut is not None:
            return np.full(len(group), cut)
        if self.scenario.decision.rule == "argmax":
            return None
        return self.thresholds(group)

    def query_mask(self, spec: QuerySpec, c: Cohort) -> np.ndarray:
        mask = c.query.copy() if spec.world else np.ones(len(c.group), bool)
        # (kind="sort", as `Strategy.select`: the default table method is far slower)
        if spec.groups is not None:
            mask &= np.isin(c.group, [self.group_labels.index(g) for g in spec.groups], kind="sort")
        if spec.classes is not None:
            mask &= np.isin(c.y0, spec.classes, kind="sort")
        return mask

    def capacity_cut(self, proba: np.ndarray, favourable: np.ndarray) -> float | None:
        """Capacity rule: the lowest P(favourable) among those given a place (the
        round's cut-off score; +inf when nobody got one); None under the other rules."""
        if self.scenario.decision.rule != "capacity":
            return None
        p = proba[favourable, self.favourable]
        return float(p.min()) if len(p) else np.inf

    def favoured(self, people: dict[str, np.ndarray], cut: float | None) -> np.ndarray:
        """Whether the decision rule of this round favours each of `people` (their
        ``report`` and ``group``), one by one: thresholds as they are, capacity at the
        round's cut-off score `cut`."""
        if not len(people["group"]):
            return np.zeros(0, bool)
        proba = self.learner.predict_proba(people["report"])
        if cut is not None:
            return tie_key(proba[:, self.favourable]) >= tie_key(np.array(cut))
        return self.decide(proba, people["group"])

    def respond_cohort(self, c: Cohort) -> Cohort:
        """The cohort applying with the best responses of the ``respond``-stage
        populations' members (eligible by group and true outcome, each with probability
        α) to the deployed model, from their own features (``memory: false``) or the
        reports they come with (``memory: true``); `c` itself when there are none."""
        responders = [s for s in self.strategies if s.stage == "respond"]
        if not responders:
            return c
        report = c.report.copy()
        done = np.zeros(len(c.group), bool)
        for s in responders:
            eligible = s.select(c.group, c.y0, self.group_labels) & ~done
            members = s.participants(eligible, self.stream_of(s))
            base = c.report if s.spec.memory else c.X
            delta = s.act(self.learner, base, members, self.favourable)
            report[members] = base[members] + delta[members]
            done |= members
        return dataclasses.replace(c, report=report)

    def play_round_zero(self) -> None:
        """Round 0, before round 1 of a world whose seekers apply again next round (as
        recourse-game's initial state): the first model decides on the initial
        applicants; those favoured leave (or go away); rejected members of the
        ``next_round`` populations make their moves; round 1's newcomers arrive. Nothing
        is recorded, nothing trains the model and the world has no consequences, so
        round 1 is the first in which recourse is judged."""
        c = self.state.cohort
        assert c is not None
        proba, favourable = self.honest_decisions(c)
        cut = self.capacity_cut(proba, favourable)
        moves = self.seek_recourse(c, proba, favourable, cut, next_round_only=True)
        after, _ = self.carry_on(c, moves, c.y0, favourable, consequences=False)
        self.state.holders = {
            "person": c.person[moves.holders],
            "report": after.report[moves.holders],
            "group": c.group[moves.holders],
            "query": self.query_mask(self.scenario.query, c)[moves.holders],
        }
        self.state.cohort, _ = self.state.pool.advance(
            self.world, self.state.streams[WORLD], 0, after, favourable
        )

    def seek_recourse(
        self,
        c: Cohort,
        honest_proba: np.ndarray,
        favourable_before: np.ndarray,
        cut: float | None,
        next_round_only: bool = False,
    ) -> Moves:
        """Step 3: rejected members of the decision-stage populations seek recourse from
        the reports they applied with and move as their population's behaviour takes
        them (`recourse_sim.agents.strategies.adapt`); ``same_round`` moves are decided
        again now, ``next_round`` ones wait for the next application. `next_round_only`:
        only next-round populations act (round 0)."""
        learner, n = self.learner, len(c.group)
        X_rep, X_true = c.report.copy(), c.X.copy()
        tried, cost = c.moved.copy(), c.move_cost.copy()
        acted, unreachable = np.zeros(n, bool), np.zeros(n, bool)
        later = np.zeros_like(X_rep)
        moved, move_cost = np.zeros(n, bool), np.zeros(n)
        for s in self.strategies:
            if s.stage != "decision" or (next_round_only and s.spec.reapply != "next_round"):
                continue
            seekers = ~favourable_before & ~acted & s.select(c.group, c.y0, self.group_labels)
            if getattr(s.spec, "recourse", None) is not None:
                found = s.causal_act(
                    self.world,
                    X_true,
                    c.noise,
                    seekers,
                    lambda F, rows: self.favoured({"report": F, "group": c.group[rows]}, cut),
                )
            else:
                target, margin = self.needed(c.group, cut), self.margins(s, c.person)
                found = s.act(
                    learner,
                    X_rep,
                    seekers,
                    self.favourable,
                    self.stream_of(s),
                    target=target,
                    margin=margin,
                )
                unreachable |= found.tried & aim_unreachable(s.spec, target, margin)
            if cut is not None and found.tried.any():
                # rejected at the cut-off by a tie: nothing to move, so nobody tries
                rows = np.flatnonzero(found.tried)
                there = self.favoured({"report": X_rep[rows], "group": c.group[rows]}, cut)
                idle = np.zeros(n, bool)
                idle[rows[there]] = True
                if idle.any():
                    found = IndividualResult(
                        np.where(idle[:, None], 0.0, found.delta),
                        found.tried & ~idle,
                        np.where(idle, 0.0, found.cost),
                    )
            enough = None
            if s.spec.just_enough and found.tried.any():
                enough = self.just_enough(X_rep, found.delta, found.tried, c.group, cut)
            res = adapt(s.spec, found, c.v, enough, s.action_set, X_rep)
            acted |= res.tried
            if s.spec.reapply == "next_round":
                later += res.delta
                moved |= res.tried
                move_cost = np.where(res.tried, res.cost, move_cost)
            else:
                X_rep += res.delta
                tried |= res.tried
                cost = np.where(res.tried, res.cost, cost)
        if (tried & ~c.moved).any():
            change = X_rep - c.report
            X_true[:, self.causal] += change[:, self.causal]
            X_true, X_rep = follow_direct_changes(self.world, c, c.X, X_true, X_rep)
            changed = (change[:, self.causal] != 0).any(1)
            proba = learner.predict_proba(X_rep)
            favourable = self.decide(proba, c.group, c.person)
        else:  # nobody changed their reports this round
            changed = np.zeros(n, bool)
            proba, favourable = honest_proba, favourable_before
        # whose recourse got (same round) or reached (next round) this round's decision
        holders = (tried & ~c.moved & favourable) | moved
        if moved.any():
            reached = self.favoured(
                {"report": (X_rep + later)[moved], "group": c.group[moved]}, cut
            )
            holders[np.flatnonzero(moved)[~reached]] = False
        return Moves(
            X_rep, X_true, tried, cost, changed, later, moved, move_cost, proba, favourable,
            holders, unreachable & tried,
        )  # fmt: skip

    def validity(
        self,
        c: Cohort,
        holders: dict[str, np.ndarray],
        holder_favoured: np.ndarray,
        tried: np.ndarray,
        y: np.ndarray,
        cut: float | None,
    ) -> dict[str, np.ndarray | None]:
        """The validity of recourse (`RoundRecord`): who of the holders of T rounds ago
        this round's rule favours (any world with ``validity_horizon``); a causal
        world's per person too: whether the recourse that succeeded last round is
        honoured at re-application and whether this round's seekers improved."""
        if self.validity_horizon is None:
            return {}
        if self.scenario.world.kind != "scm":
            return self.valid_after_T(cut)
        n = len(c.person)
        valid = np.full(n, np.nan)
        if len(holders["person"]) and n:
            at = np.minimum(np.searchsorted(c.person, holders["person"]), n - 1)
            present = c.person[at] == holders["person"]
            valid[at[present]] = holder_favoured[present]
        fav = self.favourable
        improved = np.where(tried, (y == fav) & (c.y0 != fav), np.nan)
        return {"valid_at_reapply": valid, "improved": improved, **self.valid_after_T(cut)}

    def valid_after_T(self, cut: float | None) -> dict[str, Any]:
        """`RoundRecord`'s ``validity_horizon`` T and, once T rounds have been played,
        the groups, query membership and whether this round's decision rule favours the
        reports that the recourse of the people whose recourse succeeded T rounds ago
        left them (capacity: at this round's cut-off score `cut`; whether they apply now
        or not)."""
        out: dict[str, Any] = {"validity_horizon": self.validity_horizon}
        if len(self.state.past_holders) == self.validity_horizon:
            past = self.state.past_holders[0]
            out["past_holder_group"] = past["group"]
            out["past_holder_query"] = past["query"]
            out["past_holder_favoured"] = self.favoured(past, cut)
        return out

    def just_enough(
        self,
        X: np.ndarray,
        delta: np.ndarray,
        rows: np.ndarray,
        group: np.ndarray,
        cut: float | None,
    ) -> np.ndarray:
        """Per person, the least share s ∈ [0, 1] of their recourse δ with which this
        round's decision rule favours x + s·δ (`least_share`; 0 for people it favours as
        they are, who lost a tie at a capacity cut-off; 1 where all of δ does not get
        it, and for the people not in `rows`)."""
        enough = np.ones(len(X))
        index = np.flatnonzero(rows)
        g = group[index]

        def favoured(reports: np.ndarray) -> np.ndarray:
            return self.favoured({"report": reports, "group": g}, cut)

        enough[index] = least_share(favoured, X[index], delta[index])
        return enough

    def holders_favoured(self, c: Cohort, favourable: np.ndarray, cut: float | None) -> np.ndarray:
        """Whether this round's decision favours each person whose recourse succeeded
        last round (`recourse_reliability`): those applying now as they were decided,
        those who left as the rule would decide them (capacity: at the cut-off)."""
        holders = self.state.holders
        out = self.favoured(holders, cut)
        if len(out) and len(c.person):
            at = np.minimum(np.searchsorted(c.person, holders["person"]), len(c.person) - 1)
            present = c.person[at] == holders["person"]
            out[present] = favourable[at[present]]
        return out

    def carry_on(
        self,
        c: Cohort,
        moves: Moves,
        y: np.ndarray,
        favourable: np.ndarray,
        consequences: bool = True,
    ) -> tuple[Cohort, np.ndarray]:
        """The round's applicants as they go on (those who stay apply so next round):
        the true features and reports their recourse left them, moves for the next round
        included, then the world's `consequences` (lending: loans move scores, and so the
        reports of them); their true outcome at those features; their failed recourse
        attempts (applications with recourse turned down)."""
        X_next, report, y_next = moves.X_true, moves.X_rep, y
        later, moved = moves.later, moves.moved
        if moved.any():
            X_next = moves.X_true.copy()
            X_next[:, self.causal] += later[:, self.causal]
            report = moves.X_rep + later
            X_next, report = follow_direct_changes(self.world, c, moves.X_true, X_next, report)
            changed = (later[:, self.causal] != 0).any(1)
            if changed.any():
                y_next = np.where(changed, self.world.outcome(c, X_next, changed), y)
        X_after = self.world.after_round(c, X_next, favourable, y) if consequences else X_next
        if X_after is not X_next:  # what the world changes is real, and reported so
            report = report + (X_after - X_next)
        failed = c.failed + (moves.tried & ~favourable)
        after = Cohort(
            X=X_after,
            group=c.group,
            query=c.query,
            u=c.u,
            v=c.v,
            y0=y_next,
            rows=c.rows,
            record=c.record,
            report=report,
            person=c.person,
            arrived=c.arrived,
            since=c.since,
            failed=failed,
            moved=moved,
            move_cost=moves.move_cost,
            noise=self.world.noise_after(c, X_after),
        )
        return after, failed

    def training_rows(
        self, X_rep: np.ndarray, y: np.ndarray, favourable: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rows the next update trains on: (X, y, indices into the cohort)."""
        rule = self.scenario.labels
        rows = np.arange(len(y))
        if not rule.selective:
            return X_rep.copy(), y.copy(), rows
        if rule.unobserved == "drop":
            return X_rep[favourable].copy(), y[favourable].copy(), rows[favourable]
        unfavourable = 0 if self.favourable != 0 else 1
        return X_rep.copy(), np.where(favourable, y, unfavourable), rows

    def query_success(self, c: Cohort, query: np.ndarray, goal: int | None = None) -> float:
        """Share of a query group the current model gives its goal (honest reports);
        the goal defaults to the scenario query's."""
        n_query = np.count_nonzero(query)
        if not n_query:
            return 0.0
        proba, favourable = self.honest_decisions(c)
        goal = self.scenario.query.goal if goal is None else goal
        got = favourable if goal == self.favourable else proba.argmax(1) == goal
        return np.count_nonzero(got & query) / n_query

    def honest_decisions(self, c: Cohort) -> tuple[np.ndarray, np.ndarray]:
        """Class probabilities (n, k) and favourable decisions (n,) of cohort c's honest
        reports under the deployed model; callers only read them.

        Kept for one model, cohort and decision threshold: the observation evaluates the
        cohort that the next round decides, and the query successes of a round all
        evaluate one cohort. Updates replace the learner's state dict rather than
        modify it, so its identity tells two models apart.
        """
        key = (
            self.learner,
            self.learner.current_state(),
            c,
            self.state.pare.get("decision_threshold"),
        )
        if self.state.kept_decisions is not None:
            (learner, state, cohort, threshold), proba, favourable = self.state.kept_decisions
            if learner is key[0] and state is key[1] and cohort is key[2] and threshold == key[3]:
                return proba, favourable
        proba = self.learner.predict_proba(c.report)
        favourable = self.decide(proba, c.group, c.person)
        favourable.flags.writeable = False
        self.state.kept_decisions = (key, proba, favourable)
        return proba, favourable


def capacity_decisions(
    p: np.ndarray, places: int, priority: np.ndarray | None = None
) -> np.ndarray:
    """The capacity rule along the last axis of P(favourable) scores `p` (one row of
    applicants, or a stack of worlds' rows): the `places` highest scores get a place,
    ties (`TIE_RESOLUTION`) in row order, or with `priority` (the shape of `p`) in
    increasing priority. The cut-off key is found by a partition (linear time) instead
    of a sort; the tied rows that fill the remaining places are the first ones of a
    running count."""
    if places <= 0:
        return np.zeros(p.shape, bool)
    if priority is not None:  # the rule on the rows in priority order, put back
        order = np.argsort(priority, axis=-1, kind="stable")
        ranked = capacity_decisions(np.take_along_axis(p, order, axis=-1), places)
        out = np.empty_like(ranked)
        np.put_along_axis(out, order, ranked, axis=-1)
        return out
    key = tie_key(p)
    n = key.shape[-1]
    cut = np.partition(key, n - places, axis=-1)[..., n - places, None]
    out = key > cut
    ties = key == cut
    free = places - np.count_nonzero(out, axis=-1)[..., None]
    out |= ties & (np.cumsum(ties, axis=-1) <= free)
    return out


@dataclass
class Moves:
    """Step 3's outcome for a round's n applicants (see `RoundEngine.seek_recourse`)."""

    X_rep: np.ndarray  # (n, d) final reports of this round
    X_true: np.ndarray  # (n, d) true features after this round's (same-round) changes
    tried: np.ndarray  # (n,) bool: the application used recourse
    cost: np.ndarray  # (n,) its cost
    changed: np.ndarray  # (n,) bool: true features changed this round
    later: np.ndarray  # (n, d) next-round moves
    moved: np.ndarray  # (n,) bool: made one
    move_cost: np.ndarray  # (n,) its cost
    proba: np.ndarray  # (n, k) class probabilities of the final reports
    favourable: np.ndarray  # (n,) bool: final decision
    holders: np.ndarray  # (n,) bool: their recourse got or reached this round's decision
    aim_unreachable: np.ndarray  # (n,) bool: sought recourse aiming at P ≥ 1 (margin)
