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


def _mean(values: np.ndarray, where: np.ndarray, n: int) -> float:
    """Mean of `values` over the n rows of mask `where` (0 if none); for flags a count,
    which is the same number with less overhead than indexing."""
    if n == 0:
        return 0.0
    if values.dtype == bool:
        return np.count_nonzero(values & where) / n
    return float(values[where].sum() / n)


def _rates(r: RoundRecord, mask: np.ndarray) -> dict[str, float | int]:
    n = int(np.count_nonzero(mask))
    seekers = mask & r.tried
    n_seekers = int(np.count_nonzero(seekers))
    return {
        "n": n,
        "acceptance_rate": _mean(r.favourable, mask, n),
        "acceptance_rate_before": _mean(r.favourable_before, mask, n),
        "n_seekers": n_seekers,
        "recourse_success_rate": _mean(r.favourable, seekers, n_seekers),
        "mean_cost": _mean(r.cost, seekers, n_seekers),
        "true_outcome_rate": _mean(r.true_favourable, mask, n),
        "model_accuracy": _mean(r.correct, mask, n),
    }


def round_metrics(r: RoundRecord, group_labels: tuple[str, ...]) -> list[dict]:
    """Tidy rows for one round: each group, ``query``, then ``all``."""
    rows = []
    for g, name in enumerate(group_labels):
        row = {"round": r.round, "group": name, **_rates(r, r.group == g)}
        for key, (values, _) in r.group_stats.items():
            row[key] = float(values[g])
        rows.append(row)
    rows.append({"round": r.round, "group": "query", **_rates(r, r.query)})
    everyone = {"round": r.round, "group": "all", **_rates(r, np.ones(len(r.group), bool))}
    present = [row["acceptance_rate"] for row in rows[: len(group_labels)] if row["n"] > 0]
    everyone["disparity"] = float(max(present) - min(present)) if len(present) > 1 else 0.0
    everyone["dissimilarity_index"] = _dissimilarity(r)
    everyone["model_shift"] = float(r.model_shift)
    everyone["collective_participants"] = int(r.collective_participants)
    everyone["collective_mean_cost"] = float(r.collective_mean_cost)
    everyone["query_success_next"] = float(r.query_success_next)
    everyone["reward"] = float(r.reward)
    for key, (_, overall) in r.group_stats.items():
        everyone[key] = float(overall)
    for key, value in r.decision_stats.items():
        everyone[key] = float(value)
    rows.append(everyone)
    return rows


def _dissimilarity(r: RoundRecord) -> float:
    """Duncan's dissimilarity index of two groups over the two decisions (0 = even mix)."""
    codes = np.unique(r.group)
    if len(codes) != 2:
        return 0.0
    a, b = (r.favourable[r.group == c] for c in codes)
    share_a, share_b = a.mean(), b.mean()
    return float(0.5 * (abs(share_a - share_b) + abs((1 - share_a) - (1 - share_b))))
