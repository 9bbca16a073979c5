"""What every learner promises: scikit-learn conventions and a pure torch update."""

import pickle

import numpy as np
import pytest
import torch

from recourse_sim.errors import ConfigError, NotFittedError
from recourse_sim.learners import (
    LEARNERS,
    Learner,
    LogisticRegression,
    MLPClassifier,
    NearestCentroid,
    make_learner,
)

# One configuration per learner and update rule it supports.
CONFIGS = [
    ("nearest_centroid", {"update_rule": "refit"}),
    ("nearest_centroid", {"update_rule": "window", "window": 2}),
    ("logistic_regression", {"update_rule": "refit"}),
    ("logistic_regression", {"update_rule": "window", "window": 2}),
    ("logistic_regression", {"update_rule": "sgd"}),
    ("mlp", {"update_rule": "sgd", "fit_epochs": 5, "random_state": 0}),
    ("mlp", {"update_rule": "sgd", "hypergrad": "implicit", "fit_epochs": 5, "random_state": 0}),
    (
        "mlp",
        {"update_rule": "refit", "hypergrad": "implicit", "fit_epochs": 5, "random_state": 0},
    ),
    (
        "mlp",
        {
            "update_rule": "window",
            "window": 2,
            "hypergrad": "implicit",
            "fit_epochs": 5,
            "random_state": 0,
        },
    ),
]
IDS = [f"{name}-{'-'.join(map(str, params.values()))}" for name, params in CONFIGS]


@pytest.mark.parametrize("name", ["nearest_centroid", "logistic_regression", "mlp"])
def test_a_frozen_learner_never_moves(iris, name):
    X, y = iris
    params = {"fit_epochs": 5, "random_state": 0} if name == "mlp" else {}
    model = make_learner(name, update_rule="frozen", **params).fit(X[::2], y[::2])
    before = model.state()
    assert "X_mem" not in before  # nothing to remember: the update ignores its rows
    model.update(X[1::2] + 3.0, (y[1::2] + 1) % 3)
    for key, value in before.items():
        torch.testing.assert_close(model.state_[key], value, rtol=0, atol=0)
    # the differentiable update is the identity: the reports cannot move it
    Xt = torch.as_tensor(X[1::2], dtype=torch.float64).requires_grad_(True)
    after = model.update_fn(model.state_, Xt, torch.as_tensor(y[1::2]))
    assert all(after[k] is model.state_[k] for k in model.state_)


@pytest.mark.parametrize(("name", "params"), CONFIGS, ids=IDS)
def test_fit_update_predict(iris, name, params):
    X, y = iris
    model = make_learner(name, **params)
    assert isinstance(model, Learner)
    with pytest.raises(NotFittedError):
        model.predict(X)
    with pytest.raises(NotFittedError):
        model.update(X, y)
    assert model.fit(X[::2], y[::2]) is model
    assert model.update(X[1::2], y[1::2]) is model
    proba = model.predict_proba(X)
    assert proba.shape == (len(X), 3)
    np.testing.assert_allclose(proba.sum(1), 1.0)
    assert set(model.predict(X)) <= {0, 1, 2}
    assert model.param_vector().ndim == 1
    assert 0.0 <= model.score(X, y) <= 1.0


@pytest.mark.parametrize(("name", "params"), CONFIGS, ids=IDS)
def test_update_fn_is_pure_and_differentiable(iris, name, params):
    X, y = iris
    model = make_learner(name, **params).fit(X[::2], y[::2])
    state = model.state()
    before = {k: v.clone() for k, v in state.items()}
    X_new = torch.tensor(X[1::2], requires_grad=True)
    X_copy = X_new.detach().clone()
    new = model.update_fn(state, X_new, torch.as_tensor(y[1::2]))
    loss = -torch.log(model.proba_fn(new, torch.as_tensor(X[:5]))[:, 1]).sum()
    loss.backward()
    assert torch.isfinite(X_new.grad).all() and X_new.grad.abs().max() > 0
    assert all(torch.equal(state[k], before[k]) for k in state)
    assert torch.equal(X_new.detach(), X_copy)
    assert all(torch.equal(model.state_[k], before[k]) for k in before)


@pytest.mark.parametrize("cls", [NearestCentroid, LogisticRegression, MLPClassifier])
def test_bad_update_rule(iris, cls):
    with pytest.raises(ConfigError, match="update_rule='online'"):
        cls(update_rule="online").fit(*iris)


@pytest.mark.parametrize("cls", [NearestCentroid, LogisticRegression, MLPClassifier])
def test_window_needs_a_window(iris, cls):
    extra = {"hypergrad": "implicit"} if cls is MLPClassifier else {}
    with pytest.raises(ConfigError, match="window"):
        cls(update_rule="window", **extra).fit(*iris)
    with pytest.raises(ConfigError, match="window"):
        cls(update_rule="refit", window=3, **extra).fit(*iris)


def test_bad_logistic_hyperparameters(iris):
    for params in ({"C": 0.0}, {"epochs": -1}, {"max_iter": 0}):
        with pytest.raises(ConfigError, match=next(iter(params))):
            LogisticRegression(**params).fit(*iris)


def test_make_learner_names_bad_name_and_param():
    assert set(LEARNERS) == {
        "nearest_centroid",
        "logistic_regression",
        "mlp",
        "reweighted",
        "jtt",
        "chi2_dro",
    }
    with pytest.raises(ConfigError, match="'svm'"):
        make_learner("svm")
    with pytest.raises(ConfigError, match="'learning_rate'"):
        make_learner("logistic_regression", learning_rate=0.1)
    assert make_learner("logistic_regression", C=2.0).get_params()["C"] == 2.0


def test_bad_data_rejected(iris):
    X, y = iris
    with pytest.raises(ConfigError, match="class indices"):  # n_classes: y is indices
        LogisticRegression(n_classes=3).fit(X, y - 1)
    # without n_classes, any labels (scikit-learn's convention), predicted as given
    assert LogisticRegression().fit(X, y - 1).classes_.tolist() == [-1, 0, 1]
    with pytest.raises(ConfigError, match="not one of the classes fitted"):
        LogisticRegression().fit(X, y).update(X, y + 1)
    with pytest.raises(ConfigError, match="features"):
        LogisticRegression().fit(X, y).update(X[:, :2], y)
    with pytest.raises(ConfigError, match="out of range"):
        LogisticRegression(n_classes=2).fit(X, y)


@pytest.mark.parametrize(("name", "params"), CONFIGS[::2], ids=IDS[::2])
def test_pickle_round_trip(iris, name, params):
    # Checkpoints pickle the learner; a restored one must continue identically.
    X, y = iris
    model = make_learner(name, **params).fit(X[::2], y[::2])
    restored = pickle.loads(pickle.dumps(model))
    model.update(X[1::2], y[1::2])
    restored.update(X[1::2], y[1::2])
    np.testing.assert_array_equal(model.predict_proba(X), restored.predict_proba(X))


@pytest.mark.parametrize(("name", "params"), CONFIGS, ids=IDS)
def test_warm_started_update_is_the_update(iris, name, params):
    # a start from the same update solved elsewhere changes at most the solver's
    # iterations; no start changes nothing at all
    X, y = iris
    cold = make_learner(name, **params).fit(X[::2], y[::2])
    warm = pickle.loads(pickle.dumps(cold))
    plain = pickle.loads(pickle.dumps(cold))
    with torch.no_grad():
        start = cold.update_fn(cold.state(), torch.as_tensor(X[1::2]), torch.as_tensor(y[1::2]))
    cold.update(X[1::2], y[1::2])
    warm.update(X[1::2], y[1::2], start=start)
    plain.update(X[1::2], y[1::2], start=None)
    for k in cold.state_:
        np.testing.assert_allclose(warm.state_[k], cold.state_[k], rtol=1e-9, atol=1e-12)
        assert torch.equal(plain.state_[k], cold.state_[k])
