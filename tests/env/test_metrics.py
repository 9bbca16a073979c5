"""Round metrics against their plain definition: one mask per group and flag."""

from __future__ import annotations

import numpy as np
import pytest

from recourse_sim.env.metrics import RoundRecord, round_metrics


def _plain_rates(r: RoundRecord, mask: np.ndarray) -> dict:
    def mean(values, where):
        return float(values[where].mean()) if where.any() else 0.0

    seekers = mask & r.tried
    return {
        "n": int(mask.sum()),
        "acceptance_rate": mean(r.favourable, mask),
        "acceptance_rate_before": mean(r.favourable_before, mask),
        "n_seekers": int(seekers.sum()),
        "recourse_success_rate": mean(r.favourable, seekers),
        "mean_cost": mean(r.cost, seekers),
        "true_outcome_rate": mean(r.true_favourable, mask),
        "model_accuracy": mean(r.correct, mask),
    }


def _plain_metrics(r: RoundRecord, group_labels: tuple[str, ...]) -> list[dict]:
    rows = []
    for g, name in enumerate(group_labels):
        row = {"round": r.round, "group": name, **_plain_rates(r, r.group == g)}
        for key, (values, _) in r.group_stats.items():
            row[key] = float(values[g])
        rows.append(row)
    rows.append({"round": r.round, "group": "query", **_plain_rates(r, r.query)})
    everyone = {"round": r.round, "group": "all", **_plain_rates(r, np.ones(len(r.group), bool))}
    present = [row["acceptance_rate"] for row in rows[: len(group_labels)] if row["n"] > 0]
    everyone["disparity"] = float(max(present) - min(present)) if len(present) > 1 else 0.0
    codes = np.unique(r.group[r.group < len(group_labels)])
    if len(codes) == 2:
        a, b = (r.favourable[r.group == c].mean() for c in codes)
        everyone["dissimilarity_index"] = float(0.5 * (abs(a - b) + abs((1 - a) - (1 - b))))
    else:
        everyone["dissimilarity_index"] = 0.0
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


def _record(rng, n: int, n_groups: int, seek: float) -> RoundRecord:
    tried = rng.random(n) < seek
    return RoundRecord(
        round=3,
        group=rng.integers(max(n_groups, 1), size=n),
        query=rng.random(n) < 0.2,
        favourable_before=rng.random(n) < 0.4,
        favourable=rng.random(n) < 0.5,
        tried=tried,
        cost=np.where(tried, rng.random(n), 0.0),
        true_favourable=rng.random(n) < 0.6,
        correct=rng.random(n) < 0.7,
        model_shift=0.25,
        collective_participants=4,
        collective_mean_cost=0.125,
        query_success_next=0.5,
        reward=0.375,
        group_stats={"mean_score": (rng.random(max(n_groups, 1)), 0.5)} if n_groups else {},
        decision_stats={"decision_threshold": 0.5},
    )


@pytest.mark.parametrize("n_groups", [0, 1, 2, 3])
@pytest.mark.parametrize("n", [0, 1, 5, 300, 5000])
@pytest.mark.parametrize("seek", [0.0, 0.3])
def test_round_metrics_are_the_plain_masked_means(n_groups, n, seek):
    rng = np.random.default_rng(n + 10 * n_groups)
    r = _record(rng, n, n_groups, seek)
    labels = tuple(f"g{g}" for g in range(n_groups))
    fast, plain = round_metrics(r, labels), _plain_metrics(r, labels)
    assert [list(row) for row in fast] == [list(row) for row in plain]  # columns, in order
    for a, b in zip(fast, plain, strict=True):
        for key in a:
            assert a[key] == b[key] and type(a[key]) is type(b[key]), key


def test_dissimilarity_needs_two_groups_with_people():
    rng = np.random.default_rng(0)
    r = _record(rng, 50, 3, 0.2)
    r.group[:] = np.where(r.group == 2, 1, r.group)  # group 2 is empty
    row = round_metrics(r, ("a", "b", "c"))[-1]
    assert (
        row["dissimilarity_index"] == _plain_metrics(r, ("a", "b", "c"))[-1]["dissimilarity_index"]
    )
    assert row["dissimilarity_index"] > 0
