"""The outcome oracle: cross-fitted halves, and a disk cache that holds no code."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.calibration import CalibratedClassifierCV
from sklearn.ensemble import RandomForestClassifier
from sklearn.metrics import roc_auc_score

from recourse_sim.env import oracle as oracle_module
from recourse_sim.env.forest import CalibratedForest
from recourse_sim.env.oracle import fit_oracle
from recourse_sim.errors import DataError
from recourse_sim.scenarios import OracleSpec


def _data(n: int = 400, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4))
    y = (X[:, 0] + rng.standard_normal(n) > 0).astype(np.int64)  # noisy: forests overfit
    return X, y


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RECOURSE_SIM_CACHE", str(tmp_path))
    oracle_module._MEMORY.clear()
    yield tmp_path / "oracles"
    oracle_module._MEMORY.clear()


@pytest.mark.slow
def test_each_half_is_scored_by_the_forest_of_the_other_half(cache):
    X, y = _data()
    spec = OracleSpec(trees=10, fit="cross", seed=3)
    oracle = fit_oracle(X, y, spec)
    assert sorted(np.bincount(oracle.fold)) == [200, 200]
    for k in (0, 1):  # refit independently on the other half: the same model
        train = oracle.fold != k
        forest = RandomForestClassifier(n_estimators=10, min_samples_leaf=5, random_state=3)
        model = CalibratedClassifierCV(forest, method="sigmoid", cv=3).fit(X[train], y[train])
        rows = np.flatnonzero(oracle.fold == k)
        assert np.array_equal(oracle.predict_proba(rows, X[rows]), model.predict_proba(X[rows]))


@pytest.mark.slow
def test_in_sample_scores_are_optimistic_and_cross_fitting_is_not(cache):
    X, y = _data(600)
    rows = np.arange(len(y))
    all_rows = fit_oracle(X, y, OracleSpec(trees=30, fit="all")).predict_proba(rows, X)[:, 1]
    held_out = fit_oracle(X, y, OracleSpec(trees=30, fit="cross")).predict_proba(rows, X)[:, 1]
    X_new, y_new = _data(600, seed=1)  # fresh rows from the same world
    fresh = fit_oracle(X, y, OracleSpec(trees=30, fit="all")).predict_proba(rows, X_new)[:, 1]
    auc_in, auc_cross, auc_fresh = (
        roc_auc_score(y, all_rows),
        roc_auc_score(y, held_out),
        roc_auc_score(y_new, fresh),
    )
    assert auc_in > auc_fresh + 0.03  # the forest remembers its own rows
    assert abs(auc_cross - auc_fresh) < 0.03


@pytest.mark.slow
def test_a_cached_oracle_predicts_identically_and_holds_no_pickle(cache):
    X, y = _data()
    for fit in ("cross", "all"):
        spec = OracleSpec(trees=5, fit=fit)
        fitted = fit_oracle(X, y, spec)
        oracle_module._MEMORY.clear()
        loaded = fit_oracle(X, y, spec)
        assert loaded is not fitted
        rows, Z = np.arange(50), np.random.default_rng(1).standard_normal((50, 4))
        assert np.array_equal(fitted.predict_proba(rows, Z), loaded.predict_proba(rows, Z))
    for path in cache.iterdir():
        with np.load(path, allow_pickle=False) as arrays:  # plain arrays only
            assert all(arrays[name].dtype != object for name in arrays.files)


@pytest.mark.parametrize("damage", ["garbage", "a loop", "a feature out of range"])
def test_a_damaged_or_foreign_cache_file_is_refit_and_replaced(cache, monkeypatch, damage):
    X, y = _data()
    spec = OracleSpec(trees=5, fit="all")
    fit_oracle(X, y, spec)
    (path,) = cache.iterdir()
    if damage == "garbage":
        path.write_bytes(b"not an npz")
    else:
        with np.load(path, allow_pickle=False) as arrays:
            named = {k: arrays[k] for k in arrays.files}
        inner = np.flatnonzero(named["m0_f0_left"] >= 0)
        if damage == "a loop":  # a child pointing back at the root: a walk never ends
            named["m0_f0_left"][inner[-1]] = 0
        else:
            named["m0_f0_feature"][inner[0]] = X.shape[1]
        with path.open("wb") as f:
            np.savez(f, **named)
    oracle_module._MEMORY.clear()
    fits = []
    real_fit = oracle_module._fit
    monkeypatch.setattr(oracle_module, "_fit", lambda *a: fits.append(1) or real_fit(*a))
    with pytest.warns(UserWarning, match="failed its check"):
        fit_oracle(X, y, spec)
    assert fits == [1]
    oracle_module._MEMORY.clear()
    monkeypatch.setattr(oracle_module, "_fit", None)  # replaced by a good one: loads
    fit_oracle(X, y, spec)


@pytest.mark.slow
@pytest.mark.parametrize("n_classes", [2, 3])
def test_the_array_forest_predicts_as_scikit_learn_bit_for_bit(n_classes):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((300, 5))
    y = np.digitize(X[:, 0] + 0.7 * rng.standard_normal(300), [-0.5, 0.5][: n_classes - 1])
    forest = RandomForestClassifier(n_estimators=20, min_samples_leaf=3, random_state=0)
    model = CalibratedClassifierCV(forest, method="sigmoid", cv=3).fit(X, y)
    ours = CalibratedForest.from_sklearn(model)
    Z = np.vstack([rng.standard_normal((200, 5)) * 3, X])  # also far outside the data
    assert np.array_equal(ours.predict_proba(Z), model.predict_proba(Z))
    again = CalibratedForest.from_arrays(ours.arrays("m_"), "m_", d=5)
    assert np.array_equal(again.predict_proba(Z), model.predict_proba(Z))


def test_the_disk_cache_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("RECOURSE_SIM_CACHE", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    oracle_module._MEMORY.clear()
    X, y = _data()
    fit_oracle(X, y, OracleSpec(trees=3))
    assert not any(tmp_path.iterdir())


def test_too_few_rows_of_a_class_is_a_data_error_naming_the_oracle(cache):
    X, y = _data(40)
    y[:] = 0
    y[:5] = 1  # 5 rows: enough for one calibrated forest (3), not for two halves (6)
    fit_oracle(X, y, OracleSpec(trees=3, fit="all"))
    with pytest.raises(DataError, match=r"world\.oracle: class 1 has 5 rows; fit: cross"):
        fit_oracle(X, y, OracleSpec(trees=3, fit="cross"))


def lr_factory(X, y):
    """An outcome model a scenario can name: logistic regression on the data."""
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(max_iter=500).fit(X, y)


def test_a_scenario_names_its_own_outcome_model(cache, monkeypatch):
    from importlib.metadata import EntryPoint

    from recourse_sim.errors import ConfigError

    X, y = _data()
    rows, Z = np.arange(20), np.random.default_rng(2).standard_normal((20, 4))
    expected = lr_factory(X, y).predict_proba(Z)
    monkeypatch.setattr(oracle_module, "OUTCOME_MODELS", {})
    oracle_module.register_outcome_model("in_process_lr", lr_factory)
    got = fit_oracle(X, y, OracleSpec(model="in_process_lr")).predict_proba(rows, Z)
    assert np.allclose(got, expected)
    # an installed package's entry point (group recourse_sim.outcome_models)
    point = EntryPoint("installed_lr", f"{__name__}:lr_factory", oracle_module.ENTRY_POINT_GROUP)
    monkeypatch.setattr(
        "importlib.metadata.entry_points",
        lambda group=None: [point] if group == oracle_module.ENTRY_POINT_GROUP else [],
    )
    got = fit_oracle(X, y, OracleSpec(model="installed_lr")).predict_proba(rows, Z)
    assert np.allclose(got, expected)
    with pytest.raises(ConfigError, match=r"world\.oracle\.model: no outcome model named 'x'"):
        fit_oracle(X, y, OracleSpec(model="x"))
    oracle_module.register_outcome_model(
        "bad", lambda X, y: type("M", (), {"predict_proba": lambda self, X: np.ones((len(X), 3))})()
    )
    with pytest.raises(ConfigError, match=r"predict_proba must return one probability per"):
        fit_oracle(X, y, OracleSpec(model="bad"))
