import numpy as np
import pytest
import sklearn.neighbors
import torch

from recourse_sim.errors import ConfigError
from recourse_sim.learners import NearestCentroid


def _rounds(X, y, n_rounds, seed=0):
    """Split (X, y) into shuffled rounds that each contain every class."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(X))
    return [(X[idx], y[idx]) for idx in np.array_split(order, n_rounds)]


def test_matches_sklearn_on_iris(iris):
    X, y = iris
    ours = NearestCentroid().fit(X, y)
    ref = sklearn.neighbors.NearestCentroid().fit(X, y)
    np.testing.assert_allclose(ours.state_["means"].numpy(), ref.centroids_, rtol=1e-12)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    np.testing.assert_allclose(ours.predict_proba(X).sum(1), 1.0)


def test_refit_equals_fit_on_concatenation(iris):
    rounds = _rounds(*iris, 4)
    model = NearestCentroid().fit(*rounds[0])
    for X, y in rounds[1:]:
        assert model.update(X, y) is model
    full = NearestCentroid().fit(
        np.concatenate([r[0] for r in rounds]), np.concatenate([r[1] for r in rounds])
    )
    np.testing.assert_allclose(model.state_["means"], full.state_["means"], rtol=1e-12)
    np.testing.assert_allclose(model.state_["counts"], full.state_["counts"])


def test_window_equals_fit_on_last_rounds(iris):
    rounds = _rounds(*iris, 5)
    model = NearestCentroid(update_rule="window", window=2).fit(*rounds[0])
    for X, y in rounds[1:]:
        model.update(X, y)
    last = rounds[-2:]
    ref = NearestCentroid().fit(
        np.concatenate([r[0] for r in last]), np.concatenate([r[1] for r in last])
    )
    np.testing.assert_allclose(model.state_["means"], ref.state_["means"], rtol=1e-12)
    assert model.state_["window_sums"].shape == (2, 3, 4)


@pytest.mark.parametrize("rule", ["refit", "window"])
def test_class_without_rows_keeps_its_mean(iris, rule):
    X, y = iris
    model = NearestCentroid(update_rule=rule, window=1 if rule == "window" else None).fit(X, y)
    before = model.state_["means"].clone()
    model.update(X[y != 2], y[y != 2])
    assert torch.equal(model.state_["means"][2], before[2])
    assert torch.isfinite(model.state_["means"]).all()


@pytest.mark.parametrize("rule", ["refit", "window"])
def test_hypergradient_matches_finite_differences(iris, rule, query_loss, hypergrad_errors):
    X, y = iris
    rounds = _rounds(X, y, 3, seed=1)
    model = NearestCentroid(update_rule=rule, window=2 if rule == "window" else None)
    model.fit(*rounds[0]).update(*rounds[1])
    X_round, y_round = rounds[2]
    means = model.state_["means"]
    x_query = (0.25 * means[1] + 0.75 * means[2])[None]  # the paper's query point
    loss = query_loss(model, model.state(), torch.as_tensor(y_round), x_query, goal=1)
    err, grad = hypergrad_errors(loss, X_round)
    assert err < 1e-4, err
    assert np.abs(grad).max() > 0


def test_gradient_finite_at_a_centroid(iris):
    model = NearestCentroid().fit(*iris)
    x = model.state_["means"][:1].clone().requires_grad_(True)
    model.proba_fn(model.state(), x)[0, 0].backward()
    assert torch.isfinite(x.grad).all()


def test_sgd_rule_rejected(iris):
    with pytest.raises(ConfigError, match="sgd"):
        NearestCentroid(update_rule="sgd").fit(*iris)


def test_missing_class_at_fit_rejected(iris):
    X, y = iris
    with pytest.raises(ConfigError, match=r"\[1\]"):
        NearestCentroid(n_classes=3).fit(X[y != 1], y[y != 1])
