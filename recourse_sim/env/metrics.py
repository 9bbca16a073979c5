"""Per-round metrics, computed from a compact record of the round.

The environment keeps, for each round, one `RoundRecord` (who got which decision
before and after recourse, who sought recourse at what cost, the true outcomes, the
model's predictions, and a few scalars); `round_metrics` turns it into tidy rows: one
per group, one for the query group (``group == "query"``) and one for everyone
(``group == "all"``). Any further metric can be computed from the same record.

Columns of every row:

``round``                     round number (1 = the first round)
``group``                     group name, ``query`` or ``all``
``n``                         people in the group this round
``acceptance_rate``           share given the favourable decision (after recourse)
``acceptance_rate_before``    share given it before individual recourse
``n_seekers``                 people who sought individual recourse
``recourse_success_rate``     share of seekers given the favourable decision (0 if none)
``mean_cost``                 mean cost of the seekers' changes (0 if none)
``true_outcome_rate``         share whose true outcome is favourable (success, repayment)
``model_accuracy``            share whose model prediction equals the true outcome

plus the world's own per-group statistics (lending: ``mean_score``, the applicants'
mean credit score after the round). The ``all`` row adds ``disparity`` (largest minus
smallest group acceptance rate), ``dissimilarity_index`` (two groups: ½ Σ over the two
decisions of |share of group 1 − share of group 2|; school: segregation across H1/H2),
``model_shift`` (‖θₜ − θ₀‖ of the model that decided this round), the collectives'
``collective_participants`` and ``collective_mean_cost``, ``query_success_next`` (share
of this round's query group the updated model gives its goal) and ``reward``. Under the
``pare`` decision rule it also has ``decision_threshold`` (the threshold deployed this
round), ``pare_upper`` (τ̂, the largest threshold the bank's calibration certified) and
``has_recourse_rate`` (share of the round's honest reports that have recourse at the
threshold: favoured as they are or after the linear δ* within the bank's budget — the
rate PARE guarantees to be ≥ 1 − ε with probability ≥ 1 − α).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class RoundRecord:
    """What happened to each person in one round (arrays of length n) plus scalars."""

    round: int
    group: np.ndarray  # int64 group codes
    query: np.ndarray  # bool: member of the query group
    favourable_before: np.ndarray  # bool: decision before individual recourse
    favourable: np.ndarray  # bool: final decision
    tried: np.ndarray  # bool: sought individual recourse
    cost: np.ndarray  # float: cost of their change (0 for the others)
    true_favourable: np.ndarray  # bool: true outcome is the favourable one
    correct: np.ndarray  # bool: model prediction equals the true outcome
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
    return rows


def _set_rates(r: RoundRecord, n_groups: int) -> list[dict[str, float | int]]:
    """The rates of each group, the query group and everyone, in that order.

    Every count (people, the favourable, the seekers, ...) of every set comes from one
    product of the people's flags with their set memberships (sums of 0/1, exact in
    float64); a rate is then count / count, as the mean of a flag would give it.
    """
    n = len(r.group)
    member = np.empty((n_groups + 2, n))
    member[:n_groups] = r.group == np.arange(n_groups)[:, None]
    member[n_groups] = r.query
    member[n_groups + 1] = 1.0
    flags = np.empty((7, n))
    flags[0] = 1.0
    for i, flag in enumerate(
        (r.favourable, r.favourable_before, r.true_favourable, r.correct, r.tried)
    ):
        flags[i + 1] = flag
    flags[6] = r.tried & r.favourable
    counts = (member @ flags.T).astype(np.int64).tolist()
    # the seekers' costs, summed over exactly the rows (and in the order) of a mask
    cost, group, query = r.cost[r.tried], r.group[r.tried], r.query[r.tried]
    out = []
    for j, (size, fav, fav_before, true_fav, correct, seekers, seekers_fav) in enumerate(counts):
        if seekers == 0:
            mean_cost = 0.0
        else:
            own = cost if j == n_groups + 1 else cost[query if j == n_groups else group == j]
            mean_cost = float(own.sum() / seekers)
        out.append(
            {
                "n": size,
                "acceptance_rate": _share(fav, size),
                "acceptance_rate_before": _share(fav_before, size),
                "n_seekers": seekers,
                "recourse_success_rate": _share(seekers_fav, seekers),
                "mean_cost": mean_cost,
                "true_outcome_rate": _share(true_fav, size),
                "model_accuracy": _share(correct, size),
            }
        )
    return out


def _share(count: int, n: int) -> float:
    """count / n (0 if n = 0): the mean of a flag over n people, count of them set."""
    return count / n if n else 0.0


def _dissimilarity(group_rows: list[dict]) -> float:
    """Duncan's dissimilarity index of two groups over the two decisions (0 = even mix),
    from the groups' rows (0 unless exactly two groups have people)."""
    present = [row for row in group_rows if row["n"] > 0]
    if len(present) != 2:
        return 0.0
    share_a, share_b = (row["acceptance_rate"] for row in present)
    return float(0.5 * (abs(share_a - share_b) + abs((1 - share_a) - (1 - share_b))))
