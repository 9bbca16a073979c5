"""Who applies each round: a pool of identified people that persists across rounds.

Every world keeps its people in a `Pool`. Each person has a stable integer id
(``person``), assigned in order of arrival, and carries from round to round their true
features, the reports they apply with, their outcome noise and effort quantile (and
in a causal world their exogenous noise, one value per node), the round they arrived,
the round their current wait began and their failed recourse attempts. The rules
(`PoolRules`) come from the world:

* a world without ``people`` draws a fresh cohort: everyone leaves after their round
  and ``cohort_size`` newcomers arrive;
* a world with ``people`` (`recourse_sim.scenarios.PeopleSpec`): people given the
  favourable decision leave (or apply again ``return_after`` rounds later), the others
  stay with what their recourse left them, ``newcomers`` arrive each round and anyone
  ``max_rounds`` rounds after arrival leaves;
* FICO lending: its applicants all stay and apply every round; each loan is a new
  event, so their outcome noise is drawn afresh every round;
* a CSV world with ``population: file``: the file's rows are the people, all of whom
  stay and apply every round (favoured or not), with the outcome noise of arrival.

The pool is kept in id order; a round's applicants are the people not away, in that
order. All draws go to the world's stream: after each round, fresh outcome noise
(FICO) with one ``rng.random(pool size)``, then the newcomers with one
`World.newcomers` call. Their number is fixed by the rules, so a world with people who
stay draws the same newcomers in every run of a seed, whatever the decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recourse_sim.env.worlds import Cohort, World

__all__ = ["Pool", "PoolRules", "pool_rules"]


@dataclass(frozen=True)
class PoolRules:
    """How a world's people come and go (see the module docstring)."""

    initial: int  # people applying in round 1
    newcomers: int  # people arriving each later round
    persist: bool  # False: everyone leaves after their round (a fresh cohort)
    return_after: int | None  # rounds after a favourable decision to the next application
    max_rounds: int | None  # rounds anyone stays after arriving (None: no cap)
    redraw_noise: bool  # outcome noise drawn afresh every round (each outcome a new event)


def pool_rules(world: World) -> PoolRules:
    """The rules of `world`: its spec's ``people`` block, or its own default."""
    if world.persistent_applicants:
        return PoolRules(world.cohort_size, 0, True, 1, None, True)
    if world.fixed_population:  # everyone applies every round, favoured or not
        return PoolRules(world.cohort_size, 0, True, 1, None, False)
    people = getattr(world.spec, "people", None)
    if people is None:
        n = world.cohort_size
        return PoolRules(n, n, False, None, None, False)
    initial = world.cohort_size if people.initial is None else people.initial
    return PoolRules(initial, people.newcomers, True, people.return_after, people.max_rounds, False)


@dataclass(frozen=True)
class Departures:
    """Who of a round's applicants leaves the pool after it."""

    leaving: np.ndarray  # (n,) bool: leaves (favourable decision or the cap)
    pool: Cohort  # everyone in the pool during the round (as it began)


class Pool:
    """The people of one episode (see the module docstring)."""

    # per-person arrays beyond a Cohort's: rounds until the person applies again
    _EXTRA = ("away",)

    def __init__(self, rules: PoolRules):
        self.rules = rules
        self.people: Cohort | None = None  # everyone in the pool, in id order
        self.away = np.zeros(0, np.int64)  # (m,) rounds until they apply (0: this round)
        self.next_id = 0

    # -- the round's applicants -------------------------------------------------------------
    def start(self, world: World, rng: np.random.Generator, round_: int = 1) -> Cohort:
        """The first applicants: `initial` newcomers, arriving in round `round_`."""
        self.people = self._arrivals(world, rng, self.rules.initial, round_=round_)
        self.away = np.zeros(self.rules.initial, np.int64)
        return self.applicants()

    def applicants(self) -> Cohort:
        """This round's applicants (people not away), as a cohort nobody modifies in place
        (with nobody away, the pool itself: `advance` works on a copy)."""
        assert self.people is not None
        if not self.away.any():
            return self.people
        return self.people.take(np.flatnonzero(self.away == 0))

    @property
    def empty(self) -> bool:
        """Nobody in the pool and nobody will arrive: the world has ended."""
        return self.people is not None and not len(self.away) and not self.rules.newcomers

    def _arrivals(self, world: World, rng: np.random.Generator, n: int, round_: int) -> Cohort:
        people = world.newcomers(n, rng)
        people.person = np.arange(self.next_id, self.next_id + n, dtype=np.int64)
        people.arrived = np.full(n, round_, np.int64)
        people.since = np.full(n, round_, np.int64)
        self.next_id += n
        return people

    # -- after a round ----------------------------------------------------------------------
    def advance(
        self,
        world: World,
        rng: np.random.Generator,
        round_: int,
        after: Cohort,
        favourable: np.ndarray,
    ) -> tuple[Cohort, Departures]:
        """Move on from round `round_`, whose applicants ended it as `after` (their true
        features, reports, outcome at those features, pending moves and failed attempts)
        with decisions `favourable`; returns the next round's applicants and who left."""
        assert self.people is not None
        rules = self.rules
        applying = np.flatnonzero(self.away == 0)
        during = self.people
        if not rules.persist:  # a fresh cohort: everyone goes, the newcomers are the pool
            self.people = self._arrivals(world, rng, rules.newcomers, round_ + 1)
            self.away = np.zeros(rules.newcomers, np.int64)
            return self.people, Departures(np.ones(len(applying), bool), during)
        people = self.people.take(None)
        people.put(applying, after)
        away = self.away.copy()
        leaving = np.zeros(len(applying), bool)
        if rules.return_after is None:
            leaving |= favourable
        else:
            favoured = applying[favourable]
            away[favoured] = rules.return_after
            people.since[favoured] = round_ + rules.return_after
            people.failed[favoured] = 0
        if rules.max_rounds is not None:
            leaving |= round_ + 1 - people.arrived[applying] >= rules.max_rounds
        stay = np.ones(len(away), bool)
        stay[applying[leaving]] = False
        if rules.max_rounds is not None:  # people away count their time too
            stay &= round_ + 1 - people.arrived < rules.max_rounds
        kept = people.take(np.flatnonzero(stay))
        away = np.maximum(away[stay] - 1, 0)
        if rules.redraw_noise and len(kept.u):
            kept.u = rng.random(len(kept.u))
            kept.y0 = world.outcome(kept, kept.X, np.ones(len(kept.u), bool))
        arrivals = self._arrivals(world, rng, rules.newcomers, round_ + 1)
        self.people = Cohort.concat(kept, arrivals)
        self.away = np.concatenate([away, np.zeros(rules.newcomers, np.int64)])
        departures = Departures(leaving, during)
        return self.applicants(), departures

    # -- checkpoints ------------------------------------------------------------------------
    def get_state(self) -> dict:
        assert self.people is not None
        return {
            "people": {k: v.copy() for k, v in self.people.arrays().items()},
            "away": self.away.copy(),
            "next_id": int(self.next_id),
        }

    def set_state(self, state: dict) -> None:
        self.people = Cohort.from_arrays(state["people"])
        self.away = np.array(state["away"], dtype=np.int64)
        self.next_id = int(state["next_id"])
