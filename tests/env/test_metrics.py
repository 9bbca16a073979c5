"""Round metrics against their plain definition: one mask per group and flag."""

from __future__ import annotations

import re

import numpy as np
import pytest

from recourse_sim.env import metrics as metrics_module
from recourse_sim.env.metrics import RoundRecord, round_metrics

metrics_doc = metrics_module.__doc__


def _plain_rates(r: RoundRecord, mask: np.ndarray, pool: np.ndarray, held: np.ndarray) -> dict:
    def mean(values, where):
        return float(values[where].mean()) if where.any() else 0.0

    def ratio(values, where):  # undefined (None) over nobody
        return float(values[where].mean()) if where.any() else None

    seekers = mask & r.tried
    favoured = mask & r.favourable
    leaving = mask & r.leaving
    return {
        "n": int(mask.sum()),
        "acceptance_rate": mean(r.favourable, mask),
        "acceptance_rate_before": mean(r.favourable_before, mask),
        "n_seekers": int(seekers.sum()),
        "recourse_success_rate": ratio(r.favourable, seekers),
        "mean_cost": ratio(r.cost, seekers),
        "true_outcome_rate": mean(r.true_favourable, mask),
        "model_accuracy": mean(r.favourable == r.true_favourable, mask),
        "approved_favourable_rate": ratio(r.true_favourable, favoured),
        "newcomers": int((mask & (r.arrived == r.round)).sum()),
        "leavers": int(leaving.sum()),
        "pool_size": int(pool.sum()),
        "mean_time_to_favourable": ratio(r.waited, favoured),
        "mean_failed_attempts": ratio(r.failed, leaving),
        "recourse_reliability": ratio(r.holder_favoured, held),
        "seekers_at_cutoff": None
        if r.cutoff is None
        else ratio(np.abs(r.score - r.cutoff) <= 1e-9, seekers),
        "aim_unreachable": 0
        if r.aim_unreachable is None
        else int((mask & r.aim_unreachable).sum()),
    }


def _plain_auc(score: np.ndarray, positive: np.ndarray) -> float | None:
    """P(score of a positive > score of a negative) + ½ P(tie), over all pairs."""
    pos, neg = score[positive], score[~positive]
    if not len(pos) or not len(neg):
        return None
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


def _plain_metrics(r: RoundRecord, group_labels: tuple[str, ...]) -> list[dict]:
    rows = []
    for g, name in enumerate(group_labels):
        masks = (r.group == g, r.pool_group == g, r.holder_group == g)
        row = {"round": r.round, "group": name, **_plain_rates(r, *masks)}
        for key, (values, _) in r.group_stats.items():
            row[key] = float(values[g])
        rows.append(row)
    masks = (r.query, r.pool_query, r.holder_query)
    rows.append({"round": r.round, "group": "query", **_plain_rates(r, *masks)})
    masks = (
        np.ones(len(r.group), bool),
        np.ones(len(r.pool_group), bool),
        np.ones(len(r.holder_group), bool),
    )
    everyone = {"round": r.round, "group": "all", **_plain_rates(r, *masks)}
    auc = _plain_auc(r.score, r.true_favourable)
    everyone["auc"] = auc if auc is None else pytest.approx(auc, rel=1e-12)
    if r.class_correct is not None:
        everyone["class_accuracy"] = float(r.class_correct.mean()) if len(r.group) else 0.0
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


def _record(rng, n: int, n_groups: int, seek: float, classes: int = 2) -> RoundRecord:
    tried = rng.random(n) < seek
    m, h = n + 7, n // 3  # a pool with people away; last round's successful recourse
    g = max(n_groups, 1)
    favourable = rng.random(n) < 0.5
    return RoundRecord(
        round=3,
        group=rng.integers(g, size=n),
        query=rng.random(n) < 0.2,
        favourable_before=rng.random(n) < 0.4,
        favourable=favourable,
        tried=tried,
        cost=np.where(tried, rng.random(n), 0.0),
        true_favourable=rng.random(n) < 0.6,
        score=np.round(rng.random(n), 1),  # ties, as a capacity rule's cut-off makes
        class_correct=rng.random(n) < 0.7 if classes > 2 else None,
        model_shift=0.25,
        collective_participants=4,
        collective_mean_cost=0.125,
        query_success_next=0.5,
        reward=0.375,
        group_stats={"mean_score": (rng.random(g), 0.5)} if n_groups else {},
        decision_stats={"decision_threshold": 0.5},
        person=np.arange(n) * 2,
        arrived=rng.integers(1, 4, size=n),
        waited=rng.integers(0, 3, size=n),
        failed=rng.integers(0, 4, size=n),
        leaving=favourable | (rng.random(n) < 0.1),
        pool_group=rng.integers(g, size=m),
        pool_query=rng.random(m) < 0.2,
        holder_group=rng.integers(g, size=h),
        holder_query=rng.random(h) < 0.3,
        holder_favoured=rng.random(h) < 0.6,
        # the cut-off score, at which some seekers sit (None: an argmax rule)
        cutoff=None if classes > 2 else np.full(n, 0.5),
        # seekers aiming at P ≥ 1 (a margin drawn per person)
        aim_unreachable=tried & (rng.random(n) < 0.1),
    )


@pytest.mark.parametrize("n_groups", [0, 1, 2, 3])
@pytest.mark.parametrize("n", [0, 1, 5, 300, 5000])
@pytest.mark.parametrize("seek", [0.0, 0.3])
@pytest.mark.parametrize("classes", [2, 3])
def test_round_metrics_are_the_plain_masked_means(n_groups, n, seek, classes):
    rng = np.random.default_rng(n + 10 * n_groups)
    r = _record(rng, n, n_groups, seek, classes)
    labels = tuple(f"g{g}" for g in range(n_groups))
    fast, plain = round_metrics(r, labels), _plain_metrics(r, labels)
    assert [list(row) for row in fast] == [list(row) for row in plain]  # columns, in order
    for a, b in zip(fast, plain, strict=True):
        for key in a:
            assert b[key] == a[key], key
            if not isinstance(b[key], type(pytest.approx(0))):
                assert type(a[key]) is type(b[key]), key


def test_dissimilarity_needs_two_groups_with_people():
    rng = np.random.default_rng(0)
    r = _record(rng, 50, 3, 0.2)
    r.group[:] = np.where(r.group == 2, 1, r.group)  # group 2 is empty
    row = round_metrics(r, ("a", "b", "c"))[-1]
    assert (
        row["dissimilarity_index"] == _plain_metrics(r, ("a", "b", "c"))[-1]["dissimilarity_index"]
    )
    assert row["dissimilarity_index"] > 0


def _documented() -> set[str]:
    """Column names listed in the metrics module's docstring (``- ``name``: ...``)."""
    return set(re.findall(r"^- ``([a-z_<>]+)``:", metrics_doc, flags=re.MULTILINE))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "more"),
    [
        ("lending_fico", {"world__n_applicants": 200, "world__history_size": 300}),
        ("oar_iris", {}),
        ("lending_german_pare", {"world__cohort_size": 300, "world__history_size": 300}),
    ],
)
def test_every_column_is_documented(name, more):
    from recourse_sim.env import RecourseEnv

    env = RecourseEnv(name, rounds=2, **more)
    env.reset(seed=0)
    rows = env.step(np.zeros(env.action_space.shape, np.float32))[4]["metrics"]
    world_stats = {"mean_score"}  # the world's own, documented with its world
    documented = _documented()
    for row in rows:
        assert set(row) - world_stats <= documented
    features = {f"feature_{f}" for f in env.world.features.names}
    features |= {f"reported_{f}" for f in env.world.features.names}
    columns = set(env.people(features=True))
    assert columns - features <= documented
    assert "``feature_<f>``" in metrics_doc and "``reported_<f>``" in metrics_doc
    assert "``mean_score``" in metrics_doc


def test_auc_counts_the_decision_rules_ties_as_ties():
    """A pile of seekers at a capacity cut-off (scores a hair apart, as rounding leaves
    people who moved to one cut-off) is one tied score: ``auc`` is sklearn's on the
    tie-resolved scores, not on the raw ones (which the pile's rounding noise orders)."""
    from sklearn.metrics import roc_auc_score

    from recourse_sim.env.metrics import TIE_RESOLUTION, tie_key

    rng = np.random.default_rng(4)
    r = _record(rng, 400, 2, 0.3)
    cut = 0.4123456789
    pile = np.arange(200)  # a pile with both outcomes, ordered by noise below 1e-12
    r.score = rng.random(400)
    r.score[pile] = cut + rng.random(200) * 1e-13
    r.true_favourable[pile] = np.argsort(np.argsort(r.score[pile])) < 100  # positives low
    assert np.ptp(r.score[pile]) < TIE_RESOLUTION and len(np.unique(tie_key(r.score[pile]))) == 1
    auc = round_metrics(r, ("a", "b"))[-1]["auc"]
    tied = roc_auc_score(r.true_favourable, tie_key(r.score))
    raw = roc_auc_score(r.true_favourable, r.score)
    assert auc == pytest.approx(tied, abs=1e-12)
    assert auc - raw > 0.1  # the pile matters


def test_a_round_without_seekers_leaves_the_seekers_rates_empty(tmp_path):
    """Nobody seeks recourse: recourse_success_rate and mean_cost are empty cells in
    metrics.csv (NaN when read, null in summary.json), never 0, and the run resumes."""
    import json

    from recourse_sim import load_scenario, simulate
    from recourse_sim.simulate import read_metrics

    scenario = load_scenario(
        "oar_iris",
        {"populations.query_subjects.participation": 0, "populations.data_subjects.epsilon": 0},
    )
    out = tmp_path / "run"
    frame = simulate(scenario, rounds=2, seed=0, out=out)
    assert (frame["n_seekers"] == 0).all()
    assert frame["recourse_success_rate"].isna().all() and frame["mean_cost"].isna().all()
    header, first = (out / "metrics.csv").read_text().splitlines()[:2]
    cells = dict(zip(header.split(","), first.split(","), strict=True))
    assert cells["recourse_success_rate"] == "" and cells["mean_cost"] == ""
    final = json.loads((out / "summary.json").read_text())["final"]["all"]
    assert final["recourse_success_rate"] is None and final["mean_cost"] is None
    resumed = simulate(scenario, rounds=3, seed=0, out=out, resume=True)
    assert resumed["recourse_success_rate"].isna().all()
    assert simulate(scenario, rounds=3, seed=0).equals(resumed)  # as if never interrupted
    assert read_metrics(out)["mean_cost"].isna().all()


def test_roc_auc_equals_scikit_learns_with_ties():
    from sklearn.metrics import roc_auc_score

    from recourse_sim.env.metrics import roc_auc

    rng = np.random.default_rng(3)
    score = rng.integers(0, 5, 200).astype(float)  # many ties
    positive = rng.random(200) < 0.4
    assert roc_auc(score, positive) == pytest.approx(roc_auc_score(positive, score), abs=1e-14)
    assert roc_auc(score, np.zeros(200, bool)) is None
