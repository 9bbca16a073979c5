"""Per-round metrics and per-person rows, computed from a compact record of the round.

The environment keeps, for each round, one `RoundRecord` (who applied, who got which
decision before and after recourse, who sought recourse at what cost, the true outcomes,
the model's scores, who arrived and who leaves, and a few scalars); `round_metrics`
turns it into tidy rows (``metrics.csv``): one per group, one for the query group
(``group == "query"``) and one for everyone (``group == "all"``); `people_columns`
into one row per person (``people.csv``). Any further metric can be computed from the
same record. This page documents every column of both files.

## metrics.csv

Every row (each group, ``query``, ``all``) has:

- ``round``: round number (1 = the first round)
- ``group``: group name, ``query`` or ``all``; one row per (round, group). A Gaussian
  world's own query group (its group ``query``) is the ``query`` row, written once; if
  the scenario's query group is other people, that group's row is ``query_group``. A
  CSV world refuses a group named ``all`` or ``query``
- ``n``: people applying this round
- ``acceptance_rate``: share given the favourable decision (the final one, after
  recourse)
- ``acceptance_rate_before``: share given it on the reports they applied with, before
  this round's individual recourse
- ``n_seekers``: people whose application used recourse: they sought it this round and
  were decided again (``reapply: same_round``), or apply with what their recourse of
  last round left them (``next_round``); under ``objective: min_cost`` this includes
  those whose recourse would cost more than ε (they change nothing), but not people
  already at a capacity cut-off who lost the tie (nothing to move)
- ``recourse_success_rate``: share of the seekers given the favourable decision (empty
  in a round with no seekers: there is no rate to report, and 0 would read as "every
  seeker failed")
- ``mean_cost``: mean cost of the seekers' changes (cost units; empty if no seekers). Under
  ``objective: min_cost`` a seeker whose decision cannot be reached within ε changes
  nothing and counts with cost 0
- ``true_outcome_rate``: share whose true outcome is favourable (success, repayment), at
  their true features after this round's recourse
- ``model_accuracy``: share whose final decision agrees with their true outcome:
  favourable decision and favourable outcome, or neither. In multiclass worlds
  (``oar_iris``, ``oar_digits``) it is the accuracy of the favourable-vs-rest decision,
  not of the predicted class (``class_accuracy``)
- ``approved_favourable_rate``: share of those given the favourable decision whose true
  outcome is favourable (a lender: one minus the default rate of its loans; empty if
  nobody was approved)
- ``newcomers``: applicants who arrived this round (with a fresh cohort: everyone)
- ``leavers``: applicants who leave the pool after this round: given the favourable
  decision (unless they return later) or at the end of their stay (``max_rounds``)
- ``pool_size``: people in the pool this round: the applicants and those away
  (``return_after``)
- ``mean_time_to_favourable``: mean rounds from arrival (or return) to the favourable
  decision of those given it this round (0: on arrival; empty if nobody)
- ``mean_failed_attempts``: mean failed recourse attempts (applications with recourse
  that were turned down) of the leavers, over their stay (empty if nobody leaves)
- ``recourse_reliability``: of the people whose recourse last round got (``same_round``)
  or reached (``next_round``) the favourable decision of last round, the share whose
  changed reports the decision rule of this round favours (the people still applying as
  they are decided; those who left as they would be, capacity at this round's cut-off
  score); empty when nobody's recourse succeeded last round (in round 1, unless
  a round 0 was played: ``reapply: next_round``)
- ``seekers_at_cutoff``: share of the seekers (``n_seekers``) whose final score ends
  within ``TIE_RESOLUTION`` (1e-9) of the score the round's final decision needs of
  them: under ``capacity`` the round's cut-off (the lowest score given a place), under
  a threshold rule their threshold. Seekers who aim exactly at it (``margin: 0``) pile
  there, and under ``capacity`` a pile is one tied score that only the first of them
  (``ties``) gets a place with; empty without seekers, under ``argmax`` and when the
  capacity rule gave nobody a place
- ``aim_unreachable``: seekers (a count) whose aim, the score the round's decision
  needs of them plus their ``margin`` (drawn per person from a spread), is at or above
  P = 1: no change reaches it, so they change nothing (a lognormal margin's upper tail;
  margins are clipped just below 1). 0 for populations with a fixed margin below
  1 − the score needed, and outside ``objective: min_cost``

On causal worlds (``world.kind: scm``) every row also has (empty where nobody counts):

- ``recourse_valid_at_reapply``: of the people re-applying this round after their
  recourse got them the favourable decision last round, the share favoured now (by the
  model refit since): the mean of people.csv's ``recourse_valid_at_reapply``
- ``improved_rate``: of this round's seekers, the share whose true outcome went from
  unfavourable to favourable: the mean of people.csv's ``improved``
- ``recourse_valid_after_T``: of the people whose recourse got them the favourable
  decision T rounds ago (T = ``world.validity_horizon``), the share whose reports from
  then this round's decision rule favours (whether they apply now or not). Every other
  world kind has this column too when its ``world.validity_horizon`` is set (by default
  it is not)

plus the world's own per-group statistics (lending: ``mean_score``, the applicants'
mean credit score after the round, FICO points).

Every row also has the strategic-classification view of the round:

- ``acc_under_response``: share whose final decision (on the reports after every
  response: best responses and recourse) agrees with their true outcome at the start of
  the round, before anyone responded (the label a gaming response cannot change; equal
  to ``model_accuracy`` where features are proxies)
- ``social_burden``: Milli et al. (2019)'s social burden: over the people whose true
  outcome at the start of the round is favourable, the mean least cost (the scenario's
  cost, within the features' bounds, budget not imposed) of a change of the reports they
  applied with that gets them the favourable decision (0 for those who get it as they
  are); exact for binary linear models, empty for other models, under ``argmax``, and
  where nobody counts; people no change can get favoured are left out

The ``all`` row adds:

- ``auc``: area under the ROC curve of the model's P(favourable) on the final reports
  against the true favourable outcome, with scores the decision rule treats as equal
  counted as ties (those with one `tie_key`: closer than ``TIE_RESOLUTION``, as the
  capacity rule sees them; a pile of seekers at a cut-off is one tied score, not an
  order set by rounding); empty if everyone's outcome is the same
- ``class_accuracy``: multiclass worlds only: share whose most probable class is their
  true class
- ``disparity``: largest minus smallest group acceptance rate
- ``dissimilarity_index``: two groups: ½ Σ over the two decisions of |share of group 1 −
  share of group 2| (school: segregation across H1/H2); else 0
- ``model_shift``: ‖θₜ − θ₀‖ of the model that decided this round
- ``theta_step``: ‖θ₊ − θ‖, how far this round's update moved the parameters
  (`Learner.params`, flattened) from the model that decided the round (0 under
  ``frozen``); performative stability is ``theta_step`` = 0
- ``performative_risk``: the loss of the model that decided this round on the
  distribution it induced: mean cross-entropy −log p(y | x) over this round's applicants,
  at their final reports and true outcomes (Perdomo et al.'s PR(θₜ), without the L2 term)
- ``optimum_gap``: only where a ``best_response`` population asks for it
  (``optimum_gap: true``): PR(θₜ) − min_θ PR(θ), the gap of the model that decided this
  round to the performative optimum on this round's applicants under that population's
  exact response, PR(θ) the mean cross-entropy of θ on the reports θ would induce plus
  the learner's L2 term ‖W‖² / (2 C n) (so PR(θₜ) is ``performative_risk`` plus that
  term); the minimum is the lowest local one L-BFGS-B finds from last round's minimiser
  and from θₜ (`recourse_sim.env.optimum` says exactly when it is computable)
- ``loss_before_refit``: mean cross-entropy of the model that decided this round on the
  rows the update trains on (the reports and recorded labels; equal to
  ``performative_risk`` when labels are not selective and nobody perturbs training
  rows); empty when there are none
- ``loss_after_refit``: the same rows' mean cross-entropy under the updated model
- ``collective_participants``: people who perturbed training reports in a collective
- ``collective_mean_cost``: their mean cost (cost units; 0 if none)
- ``query_success_next``: share of this round's query group the updated model gives its
  goal
- ``reward``: the environment's reward
- ``decision_threshold``: ``pare`` rule only: the threshold deployed this round
- ``pare_upper``: ``pare`` rule only: τ̂, the largest threshold the bank's calibration
  certified
- ``has_recourse_rate``: ``pare`` rule only: share of the round's applications that have
  recourse at the threshold (favoured as they are or after the linear δ* within the
  bank's budget): the rate PARE guarantees to be ≥ 1 − ε with probability ≥ 1 − α

With ``world.shift_metrics`` (the shifts recourse causes, Altmeyer et al. 2023; computed
after the round's update by `recourse_sim.env.shift`, which documents each exactly), the
``all`` row adds:

- ``domain_mmd``: unbiased MMD² (Gaussian kernel; length-scale by default the median
  pairwise distance of round 0's sample, in SDs of the history's features) between the
  rows labelled favourable that the first model was fit on and those this round's
  update trained on (after collective recourse and honoured labels); empty with fewer
  than two such rows
- ``domain_mmd_p``: its permutation p-value, (1 + the permutations at least as large) /
  (1 + ``permutations``); empty with ``permutations: 0``
- ``model_mmd``: unbiased MMD² (kernel length-scale 0.5) between the first and the
  updated model's P(favourable) on a fixed probe set (the first ``probe_size`` rows of the
  history)
- ``disagreement``: share of the probe set whose most probable class differs between the
  first and the updated model
- ``decisiveness``: | ‖p₀ − ½‖₂ − ‖pₜ − ½‖₂ | of the two models' P(favourable) over the
  probe set
- ``theta_0``, ``theta_1``, …: the updated model's parameters (`Learner.param_vector`:
  a logistic regression's coefficients, per SD under ``standardize``, then its intercept)

## people.csv

One row per applicant per round, in person order:

- ``round``: round number
- ``person``: the person's id: stable across rounds, assigned in order of arrival
- ``group``: group name (``all`` in a world without groups)
- ``arrived``: round the person arrived (``arrived == round``: a newcomer)
- ``favourable_before``: the decision on the reports they applied with
- ``favourable``: the final decision
- ``tried``: their application used recourse (as ``n_seekers``)
- ``cost``: the cost of that recourse (0 if not tried)
- ``true_favourable``: their true outcome is favourable
- ``score``: the model's P(favourable) on their final reports
- ``leaves``: they leave the pool after this round

on causal worlds (``world.kind: scm``), two more (empty where they do not apply):

- ``recourse_valid_at_reapply``: for people whose recourse got them the favourable
  decision last round and who apply again this round (``world.people`` with
  ``return_after``): whether this round's decision, by the model refit since, favours
  the reports their recourse left them; empty for everyone else
- ``improved``: for this round's seekers (``tried``): whether their true outcome went
  from unfavourable (at the start of the round) to favourable (after their recourse);
  empty for people who did not seek recourse

and, when asked for (``recourse-sim run --people-features``), for every feature f:
``feature_<f>``, its true value at the start of the round (for a newcomer, as drawn), and
``reported_<f>``, the final report the decision was made on.

When asked for (``recourse-sim run --people-collective``, ``simulate(...,
people_collective=True)``), what the round's collectives did with each person's
training row (the reports the next model is trained on; people whose row does not
train, as the rejected under ``labels.unobserved: drop``, are in no collective):

- ``collective``: the population of the collective the person joined this round; empty
  for everyone else
- ``collective_cost``: the cost of their change to their training report (cost units; 0
  for non-members), as ``collective_mean_cost`` averages it
- ``collective_<f>`` for every feature f: the change of their training report of f, the
  report the model trains on minus the one they applied with (0 for non-members)

(The labels a ``collective_signal`` with ``set_label`` reports are not among these
columns.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "PEOPLE_COLUMNS",
    "TIE_RESOLUTION",
    "CollectiveChanges",
    "RoundRecord",
    "least_cost_to_favour",
    "people_columns",
    "roc_auc",
    "round_metrics",
    "tie_key",
]

TIE_RESOLUTION = 1e-9
"""P(favourable) scores closer than this are ties for the decision rule (the capacity
rule's cut-off) and for every rank metric (``auc``)."""


def tie_key(p: np.ndarray) -> np.ndarray:
    """Scores on the tie grid: equal keys are ties (`TIE_RESOLUTION`)."""
    return np.floor(p * (1.0 / TIE_RESOLUTION))


PEOPLE_COLUMNS = (
    "round",
    "person",
    "group",
    "arrived",
    "favourable_before",
    "favourable",
    "tried",
    "cost",
    "true_favourable",
    "score",
    "leaves",
)
"""The columns of ``people.csv`` (without the optional feature columns), in order."""


@dataclass(frozen=True)
class CollectiveChanges:
    """The round's training rows before and after its collectives acted, kept as they
    are: the per-person columns are computed only when ``people.csv`` asks for them."""

    rows: np.ndarray  # (t,) int64: the training rows' indices among the applicants
    applied: np.ndarray  # (t, d) the training rows as the applicants reported them
    trained: np.ndarray  # (t, d) the rows the update trains on
    # per collective, in order of acting: population, who joined (t,) bool, and each
    # member's cost (None: nobody joined)
    members: tuple[tuple[str, np.ndarray, np.ndarray | None], ...]

    def columns(self, n: int, feature_names: tuple[str, ...]) -> dict[str, np.ndarray]:
        """``collective``, ``collective_cost`` and ``collective_<f>`` for n applicants."""
        collective = np.full(n, None, dtype=object)
        cost = np.zeros(n)
        for population, joined, member_cost in self.members:
            who = self.rows[joined]
            collective[who] = population
            if member_cost is not None:
                cost[who] = member_cost
        change = np.zeros((n, len(feature_names)))
        change[self.rows] = self.trained - self.applied
        columns = {"collective": collective, "collective_cost": cost}
        for j, name in enumerate(feature_names):
            columns[f"collective_{name}"] = change[:, j]
        return columns


@dataclass
class RoundRecord:
    """What happened to each of the n applicants of one round, plus scalars.

    Arrays of length n unless said otherwise; ``pool_*`` describe everyone in the pool
    during the round (m people: the applicants and those away), ``holder_*`` the h
    people whose recourse last round succeeded (`recourse_reliability`).
    """

    round: int
    group: np.ndarray  # int64 group codes
    query: np.ndarray  # bool: member of the query group
    favourable_before: np.ndarray  # bool: decision on the reports they applied with
    favourable: np.ndarray  # bool: final decision
    tried: np.ndarray  # bool: the application used recourse
    cost: np.ndarray  # float: cost of that recourse (0 for the others)
    true_favourable: np.ndarray  # bool: true outcome is the favourable one
    score: np.ndarray  # float: P(favourable) of the final reports
    model_shift: float
    collective_participants: int
    collective_mean_cost: float
    query_success_next: float
    reward: float
    # world statistics: name -> (per-group values (n_groups,), value for everyone)
    group_stats: dict[str, tuple[np.ndarray, float]] = field(default_factory=dict)
    # decision-rule statistics for the "all" row (pare: decision_threshold, pare_upper,
    # has_recourse_rate); empty for the other rules
    decision_stats: dict[str, float] = field(default_factory=dict)
    # the model's statistics for the "all" row: theta_step, performative_risk,
    # loss_before_refit, loss_after_refit (None: an empty cell)
    model_stats: dict[str, float | None] = field(default_factory=dict)
    class_correct: np.ndarray | None = None  # bool, multiclass worlds: argmax == true class
    person: np.ndarray | None = None  # int64 ids (None: 0..n-1)
    arrived: np.ndarray | None = None  # int64 round of arrival (None: this round)
    waited: np.ndarray | None = None  # int64 rounds since arrival or return (None: 0)
    failed: np.ndarray | None = None  # int64 failed recourse attempts, this round's included
    leaving: np.ndarray | None = None  # bool: leaves the pool after the round (None: all)
    pool_group: np.ndarray | None = None  # (m,) int64 (None: the applicants)
    pool_query: np.ndarray | None = None  # (m,) bool
    holder_group: np.ndarray | None = None  # (h,) int64 (None: nobody)
    holder_query: np.ndarray | None = None  # (h,) bool
    holder_favoured: np.ndarray | None = None  # (h,) bool: favoured by this round's rule
    X: np.ndarray | None = None  # (n, d) true features at the start of the round
    report: np.ndarray | None = None  # (n, d) final reports
    # (n,) the P(favourable) the final decision needs of each (capacity: the round's
    # cut-off score; threshold rules: their threshold); None: no such score (argmax)
    cutoff: np.ndarray | None = None
    # (n,) bool: sought recourse aiming at P(favourable) ≥ 1 (the score needed plus a
    # margin drawn per person); None: nobody
    aim_unreachable: np.ndarray | None = None
    # causal (scm) worlds only, else None. Per person, NaN where it does not apply:
    # 1/0 whether the recourse that got them the favourable decision last round is
    # honoured now that they re-apply (after the refit), and whether this round's
    # seekers' true outcome went from unfavourable to favourable
    valid_at_reapply: np.ndarray | None = None  # (n,) float
    improved: np.ndarray | None = None  # (n,) float
    # the people whose recourse succeeded T rounds ago and whether this round's rule
    # favours the reports it left them (recourse_valid_after_T)
    past_holder_group: np.ndarray | None = None  # (h_T,) int64
    past_holder_query: np.ndarray | None = None  # (h_T,) bool
    past_holder_favoured: np.ndarray | None = None  # (h_T,) bool
    # what the round's collectives did to the training rows (None: no collective acted)
    collective: CollectiveChanges | None = None
    # T of recourse_valid_after_T (None: no such column; causal worlds always have one)
    validity_horizon: int | None = None
    # true outcome at the start of the round, before anyone responded (bool; None: not
    # recorded): the label of `acc_under_response` and `social_burden`
    favourable_at_start: np.ndarray | None = None
    # per person, the least cost of a change of the reports they applied with that gets
    # the favourable decision (0 if it is theirs already; NaN: unreachable, or the model
    # is not binary linear): `social_burden`
    least_cost: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.group)
        for name, make in (
            ("person", lambda: np.arange(n, dtype=np.int64)),
            ("arrived", lambda: np.full(n, self.round, np.int64)),
            ("waited", lambda: np.zeros(n, np.int64)),
            ("failed", lambda: np.zeros(n, np.int64)),
            ("leaving", lambda: np.ones(n, bool)),
            ("pool_group", lambda: self.group),
            ("pool_query", lambda: self.query),
            ("holder_group", lambda: np.zeros(0, np.int64)),
            ("holder_query", lambda: np.zeros(0, bool)),
            ("holder_favoured", lambda: np.zeros(0, bool)),
        ):
            if getattr(self, name) is None:
                setattr(self, name, make())


def round_metrics(r: RoundRecord, group_labels: tuple[str, ...]) -> list[dict]:
    """Tidy rows for one round: each group, ``query``, then ``all``."""
    G = len(group_labels)
    rows = []
    for j, rates in enumerate(_set_rates(r, G)):
        name = group_labels[j] if j < G else ("query", "all")[j - G]
        row = {"round": r.round, "group": name, **rates}
        if j < G:
            for key, (values, _) in r.group_stats.items():
                row[key] = float(values[j])
        rows.append(row)
    everyone = rows[-1]
    everyone["auc"] = roc_auc(tie_key(r.score), r.true_favourable)
    if r.class_correct is not None:
        everyone["class_accuracy"] = _share(int(np.count_nonzero(r.class_correct)), len(r.group))
    present = [row["acceptance_rate"] for row in rows[:G] if row["n"] > 0]
    everyone["disparity"] = float(max(present) - min(present)) if len(present) > 1 else 0.0
    everyone["dissimilarity_index"] = _dissimilarity(rows[:G])
    everyone["model_shift"] = float(r.model_shift)
    everyone["collective_participants"] = int(r.collective_participants)
    everyone["collective_mean_cost"] = float(r.collective_mean_cost)
    everyone["query_success_next"] = float(r.query_success_next)
    everyone["reward"] = float(r.reward)
    for key, (_, overall) in r.group_stats.items():
        everyone[key] = float(overall)
    for key, value in r.decision_stats.items():
        everyone[key] = float(value)
    for key, value in r.model_stats.items():
        everyone[key] = None if value is None else float(value)
    if r.valid_at_reapply is not None:
        _add_validity(rows, r, G)
    elif r.validity_horizon is not None:
        _add_valid_after_T(rows, r, G)
    if r.favourable_at_start is not None:
        _add_strategic(rows, r, G)
    return rows


def _add_strategic(rows: list[dict], r: RoundRecord, n_groups: int) -> None:
    """``acc_under_response`` and ``social_burden`` of each row."""
    member = _membership(r.group, r.query, n_groups)
    label = np.asarray(r.favourable_at_start, bool)
    correct = member @ (r.favourable == label)
    n = member.sum(1)
    deserving = label if r.least_cost is None else label & ~np.isnan(r.least_cost)
    counted = member @ deserving
    burden = None if r.least_cost is None else member @ np.where(deserving, r.least_cost, 0.0)
    for j, row in enumerate(rows):
        row["acc_under_response"] = _ratio(int(correct[j]), int(n[j]))
        row["social_burden"] = (
            None if burden is None or not counted[j] else float(burden[j] / counted[j])
        )


def least_cost_to_favour(
    learner, X: np.ndarray, need: np.ndarray | None, action_set, goal: int, rows: np.ndarray
) -> np.ndarray:
    """For the `rows` (a mask) of reports X, the least cost ‖w ⊙ δ‖_p (the action set's
    weights and norm, within its box, its budget not imposed) of a change that gets
    P(goal) ≥ need under the deployed model: 0 where the row has it already, NaN where
    no change in the box gets it; NaN outside `rows`. Exact for binary linear models
    (`cheapest_linear_recourse`); NaN for every row of other models or without a
    threshold (`need` None: argmax)."""
    from recourse_sim.recourse.cheapest import cheapest_linear_recourse

    out = np.full(len(X), np.nan)
    goals = np.full(1, goal)
    coef = learner.goal_margin_coef(learner.state_, goals)
    if coef is None or need is None or not rows.any():
        return out
    idx = np.flatnonzero(rows)
    need = np.clip(np.asarray(need, dtype=np.float64)[idx], 1e-300, 1.0 - 1e-16)
    X = np.asarray(X, dtype=np.float64)[idx]
    gap = (
        np.log(need)
        - np.log1p(-need)
        - learner.goal_margin(learner.state_, X, goals[[0] * len(idx)])
    )
    out[idx] = 0.0
    moving = gap > 0  # only those the model does not favour need the solver
    if moving.any():
        c = np.repeat(coef, int(moving.sum()), axis=0)
        delta, reachable = cheapest_linear_recourse(c, gap[moving], X[moving], action_set)
        cost = np.asarray(action_set.cost(delta), dtype=np.float64)
        out[idx[moving]] = np.where(reachable, cost, np.nan)
    return out


def _add_validity(rows: list[dict], r: RoundRecord, n_groups: int) -> None:
    """The causal worlds' validity columns of each row (empty where nobody counts)."""
    member = _membership(r.group, r.query, n_groups)
    for name, values in (
        ("recourse_valid_at_reapply", r.valid_at_reapply),
        ("improved_rate", r.improved),
    ):
        counted = ~np.isnan(values)
        n = (member @ counted).astype(np.int64)
        hits = (member @ np.where(counted, values, 0.0)).astype(np.int64)
        for j, row in enumerate(rows):
            row[name] = _ratio(int(hits[j]), int(n[j]))
    _add_valid_after_T(rows, r, n_groups)


def _add_valid_after_T(rows: list[dict], r: RoundRecord, n_groups: int) -> None:
    """``recourse_valid_after_T`` of each row (empty until T rounds have been played and
    where nobody's recourse succeeded T rounds ago)."""
    if r.past_holder_group is None:
        for row in rows:
            row["recourse_valid_after_T"] = None
        return
    past = _membership(r.past_holder_group, r.past_holder_query, n_groups)
    n = past.sum(1).astype(np.int64)
    hits = (past @ r.past_holder_favoured).astype(np.int64)
    for j, row in enumerate(rows):
        row["recourse_valid_after_T"] = _ratio(int(hits[j]), int(n[j]))


def _membership(group: np.ndarray, query: np.ndarray, n_groups: int) -> np.ndarray:
    """(n_groups + 2, n) 0/1 rows: each group, the query group, everyone."""
    member = np.empty((n_groups + 2, len(group)))
    member[:n_groups] = group == np.arange(n_groups)[:, None]
    member[n_groups] = query
    member[n_groups + 1] = 1.0
    return member


def _set_rates(r: RoundRecord, n_groups: int) -> list[dict[str, float | int | None]]:
    """The rates of each group, the query group and everyone, in that order.

    Every count (people, the favourable, the seekers, ...) and every sum of whole
    numbers (rounds waited, failed attempts) of every set comes from one product of
    the people's values with their set memberships (sums of integers, exact in float64);
    a rate is then count / count, as the mean of a flag would give it.
    """
    n = len(r.group)
    member = _membership(r.group, r.query, n_groups)
    fav, true_fav, tried, leaving = r.favourable, r.true_favourable, r.tried, r.leaving
    values = np.empty((14, n))
    values[0] = 1.0
    values[1] = fav
    values[2] = r.favourable_before
    values[3] = true_fav
    values[4] = fav == true_fav
    values[5] = tried
    values[6] = tried & fav
    values[7] = fav & true_fav
    values[8] = r.arrived == r.round
    values[9] = leaving
    values[10] = np.where(fav, r.waited, 0)
    values[11] = np.where(leaving, r.failed, 0)
    values[12] = tried & (r.cutoff is not None and np.abs(r.score - r.cutoff) <= TIE_RESOLUTION)
    values[13] = False if r.aim_unreachable is None else r.aim_unreachable
    counts = (member @ values.T).astype(np.int64).tolist()
    pool = _membership(r.pool_group, r.pool_query, n_groups).sum(1).astype(np.int64).tolist()
    holders = _membership(r.holder_group, r.holder_query, n_groups)
    held = (holders @ np.stack([np.ones(len(r.holder_favoured)), r.holder_favoured]).T).astype(
        np.int64
    )
    # the seekers' costs, summed over exactly the rows (and in the order) of a mask
    cost, group, query = r.cost[tried], r.group[tried], r.query[tried]
    out = []
    for j, row in enumerate(counts):
        size, n_fav, fav_before, n_true, correct, seekers, seekers_fav = row[:7]
        fav_true, new, leavers, waited, failed, at_cutoff, unreachable = row[7:14]
        mean_cost = None  # no seekers: the seekers' rates are empty, never 0
        if seekers:
            own = cost if j == n_groups + 1 else cost[query if j == n_groups else group == j]
            mean_cost = float(own.sum() / seekers)
        out.append(
            {
                "n": size,
                "acceptance_rate": _share(n_fav, size),
                "acceptance_rate_before": _share(fav_before, size),
                "n_seekers": seekers,
                "recourse_success_rate": _ratio(seekers_fav, seekers),
                "mean_cost": mean_cost,
                "true_outcome_rate": _share(n_true, size),
                "model_accuracy": _share(correct, size),
                "approved_favourable_rate": _ratio(fav_true, n_fav),
                "newcomers": new,
                "leavers": leavers,
                "pool_size": pool[j],
                "mean_time_to_favourable": _ratio(waited, n_fav),
                "mean_failed_attempts": _ratio(failed, leavers),
                "recourse_reliability": _ratio(int(held[j, 1]), int(held[j, 0])),
                "seekers_at_cutoff": None if r.cutoff is None else _ratio(at_cutoff, seekers),
                "aim_unreachable": unreachable,
            }
        )
    return out


def _share(count: int, n: int) -> float:
    """count / n (0 if n = 0): the mean of a flag over n people, count of them set."""
    return count / n if n else 0.0


def _ratio(total: int, n: int) -> float | None:
    """total / n, or None (an empty cell) where nobody is counted. (None, not NaN: the
    rows are in each step's info, and equal infos must compare equal.)"""
    return total / n if n else None


def roc_auc(score: np.ndarray, positive: np.ndarray) -> float | None:
    """Area under the ROC curve of `score` for `positive`: the share of (positive,
    negative) pairs the score orders rightly, equal scores counted half (Mann-Whitney);
    None without both classes. (Callers pass `tie_key` scores, so that ties are the
    decision rule's.)"""
    n_pos = int(np.count_nonzero(positive))
    n_neg = len(score) - n_pos
    if not n_pos or not n_neg:
        return None
    # average ranks (1-based, ties sharing the mean of their ranks) of the positives
    ordered = np.sort(score)
    scores = score[positive]
    ranks = np.searchsorted(ordered, scores, "left") + np.searchsorted(ordered, scores, "right")
    # the sum of the positives' ranks minus its least value, over the pairs (halves exact)
    return float((0.5 * (ranks.sum() + n_pos) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _dissimilarity(group_rows: list[dict]) -> float:
    """Duncan's dissimilarity index of two groups over the two decisions (0 = even mix),
    from the groups' rows (0 unless exactly two groups have people)."""
    present = [row for row in group_rows if row["n"] > 0]
    if len(present) != 2:
        return 0.0
    share_a, share_b = (row["acceptance_rate"] for row in present)
    return float(0.5 * (abs(share_a - share_b) + abs((1 - share_a) - (1 - share_b))))


def people_columns(
    r: RoundRecord,
    group_labels: tuple[str, ...],
    feature_names: tuple[str, ...] | None = None,
    collective_features: tuple[str, ...] | None = None,
) -> dict[str, np.ndarray]:
    """The rows of ``people.csv`` for one round, column by column (`PEOPLE_COLUMNS`;
    with `feature_names`, then ``feature_<f>`` and ``reported_<f>`` for each feature;
    with `collective_features`, the feature names, then ``collective``,
    ``collective_cost`` and ``collective_<f>`` for each feature)."""
    n = len(r.group)
    labels = np.array(group_labels or ("all",), dtype=object)
    columns: dict[str, np.ndarray] = {
        "round": np.full(n, r.round, np.int64),
        "person": r.person,
        "group": labels[np.minimum(r.group, len(labels) - 1)],
        "arrived": r.arrived,
        "favourable_before": r.favourable_before,
        "favourable": r.favourable,
        "tried": r.tried,
        "cost": r.cost,
        "true_favourable": r.true_favourable,
        "score": r.score,
        "leaves": r.leaving,
    }
    if r.valid_at_reapply is not None:
        for name, values in (
            ("recourse_valid_at_reapply", r.valid_at_reapply),
            ("improved", r.improved),
        ):
            flags = np.array([None if np.isnan(v) else bool(v) for v in values], dtype=object)
            columns[name] = flags
    if feature_names is not None:
        assert r.X is not None and r.report is not None
        for j, name in enumerate(feature_names):
            columns[f"feature_{name}"] = r.X[:, j]
        for j, name in enumerate(feature_names):
            columns[f"reported_{name}"] = r.report[:, j]
    if collective_features is not None:
        empty = np.zeros((0, len(collective_features)))
        changes = r.collective or CollectiveChanges(np.zeros(0, np.int64), empty, empty, ())
        columns.update(changes.columns(n, collective_features))
    return columns
