"""The ``genre`` population strategy: GenRe samples inside the action set, refit every K
rounds on the rows the deployed model was trained on, seeded by the caller's generator."""

from __future__ import annotations

import numpy as np
import pytest

from recourse_sim.agents import GenreRecourse, make_strategy
from recourse_sim.checkpoint import load_checkpoint, save_checkpoint
from recourse_sim.learners import make_learner
from recourse_sim.recourse import ActionSet, GenRe
from recourse_sim.scenarios import GenrePopulation


def _data(seed: int = 0, n: int = 100):
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(-1, 0.7, (n // 2, 2)), rng.normal(1, 0.7, (n // 2, 2))])
    y = np.repeat([0, 1], n // 2)
    return X, y


def _spec(**changes) -> GenrePopulation:
    fields = dict(
        strategy="genre", participation=1.0, epsilon=0.8, retrain_every=2, memory=150,
        epochs=3, layers=1, samples=4,
    )  # fmt: skip
    return GenrePopulation(**(fields | changes))


def _setup(update_rule: str = "refit", **changes):
    X, y = _data()
    learner = make_learner("logistic_regression", update_rule=update_rule).fit(X, y)
    spec = _spec(**changes)
    aset = ActionSet(2, increase_only=[0], epsilon=spec.epsilon)
    return make_strategy("applicants", spec, aset), learner, X, y


def _seekers(learner, X):
    return learner.predict(X) == 0


def test_acts_inside_the_action_set_and_only_for_participants():
    s, learner, X, _ = _setup(participation=0.6)
    assert isinstance(s, GenreRecourse)
    seekers = _seekers(learner, X)
    res = s.act(learner, X, seekers, 1, np.random.default_rng(0))
    # fitted before round 1 on the learner's remembered rows (its history)
    assert s.fits == 1 and len(s.buffer[0]) == len(X)
    assert res.tried.any() and not (res.tried & ~seekers).any()
    assert (res.tried.sum() < seekers.sum()) and res.delta[res.tried].any()
    assert not res.delta[~res.tried].any() and not res.cost[~res.tried].any()
    assert s.action_set.contains(X, res.delta).all()
    np.testing.assert_allclose(res.cost, s.action_set.cost(res.delta))
    assert (res.delta[:, 0] >= 0).all()  # increase-only
    # the chosen changes help: the deployed model likes the new reports better
    before = learner.predict_proba(X)[res.tried, 1]
    after = learner.predict_proba(X + res.delta)[res.tried, 1]
    assert (after >= before - 1e-12).all() and after.mean() > before.mean()


def test_refits_every_k_rounds_on_the_latest_observed_rows(monkeypatch):
    s, learner, X, y = _setup(retrain_every=2, memory=150)
    fitted_on = []
    original = GenRe.fit

    def spy(self, X_fit, y_fit, classifier):
        fitted_on.append(len(X_fit))
        return original(self, X_fit, y_fit, classifier)

    monkeypatch.setattr(GenRe, "fit", spy)
    rng = np.random.default_rng(1)
    rounds = [_data(seed) for seed in (11, 12, 13, 14)]
    fits = []
    for X_round, y_round in rounds:
        s.act(learner, X_round, _seekers(learner, X_round), 1, rng)
        fits.append(s.fits)
        learner.update(X_round, y_round)
        s.observe(learner, X_round, y_round)
    # round 1 fits (on the memory), round 3 after two updates; rounds 2 and 4 do not
    assert fits == [1, 1, 2, 2] and s.fitted_at == 2
    assert fitted_on == [100, 150]
    # the buffer holds the latest `memory` observed rows, oldest first
    X_kept, y_kept = s.buffer
    all_X = np.vstack([X, *(r[0] for r in rounds)])
    np.testing.assert_array_equal(X_kept, all_X[-150:])
    np.testing.assert_array_equal(y_kept, np.concatenate([y, *(r[1] for r in rounds)])[-150:])


def test_without_learner_memory_nobody_acts_until_rows_are_observed():
    s, learner, X, y = _setup(update_rule="sgd")
    seekers = _seekers(learner, X)
    first = s.act(learner, X, seekers, 1, np.random.default_rng(0))
    assert s.model is None and not first.tried.any() and not first.delta.any()
    s.observe(learner, X, y)
    second = s.act(learner, X, seekers, 1, np.random.default_rng(0))
    assert s.fits == 1 and second.tried.any()


def test_same_generator_state_same_numbers():
    results = []
    for seed in (5, 5, 6):
        s, learner, X, _ = _setup()
        results.append(s.act(learner, X, _seekers(learner, X), 1, np.random.default_rng(seed)))
    np.testing.assert_array_equal(results[0].delta, results[1].delta)
    np.testing.assert_array_equal(results[0].tried, results[1].tried)
    assert not np.array_equal(results[0].delta, results[2].delta)


def test_state_round_trips_through_a_checkpoint_exactly(tmp_path):
    s, learner, X, y = _setup()
    seekers = _seekers(learner, X)
    s.act(learner, X, seekers, 1, np.random.default_rng(0))
    s.observe(learner, X, y)
    save_checkpoint(tmp_path, round=1, state={"genre": s.get_state()})
    restored, _, _, _ = _setup()
    loaded = load_checkpoint(tmp_path)
    assert loaded is not None
    restored.set_state(loaded.state["genre"])
    assert restored.fits == s.fits and restored.rounds_observed == s.rounds_observed
    a = s.act(learner, X, seekers, 1, np.random.default_rng(9))
    b = restored.act(learner, X, seekers, 1, np.random.default_rng(9))
    np.testing.assert_array_equal(a.delta, b.delta)


def test_zero_budget_or_participation_changes_nothing():
    for changes in ({"epsilon": 0.0}, {"participation": 0.0}):
        s, learner, X, _ = _setup(**changes)
        res = s.act(learner, X, _seekers(learner, X), 1, np.random.default_rng(0))
        assert not res.delta.any()


@pytest.mark.parametrize(
    ("field", "value"),
    [("retrain_every", 0), ("memory", -1), ("epochs", 0), ("samples", 0), ("temperature", 0)],
)
def test_bad_fields_are_rejected(field, value):
    with pytest.raises(ValueError, match=field):
        _spec(**{field: value})
