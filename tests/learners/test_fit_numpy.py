"""`Learner.fit_numpy`: `fit` without torch, for checks that only read the fitted model
(`recourse-sim validate`). Its state matches `fit`'s to rounding, becomes torch when
`state_` is read, and learners without a numpy fit fall back to `fit`."""

import numpy as np
import pytest
import torch

from recourse_sim.learners import make_learner

# (learner, params, data): every learner with a numpy fit, each rule's state layout
CONFIGS = [
    ("logistic_regression", {"update_rule": "window", "window": 2}, "binary"),
    ("logistic_regression", {"update_rule": "refit", "standardize": True}, "binary"),
    ("logistic_regression", {"update_rule": "sgd", "fit_intercept": False}, "binary"),
    ("logistic_regression", {"update_rule": "refit", "n_classes": 3}, "iris"),
    ("logistic_regression", {"update_rule": "frozen", "standardize": True}, "iris"),
    ("nearest_centroid", {"update_rule": "refit"}, "iris"),
    ("nearest_centroid", {"update_rule": "window", "window": 3}, "iris"),
    ("nearest_centroid", {"update_rule": "frozen"}, "iris"),
]


@pytest.fixture
def data(iris, request):
    X, y = iris
    if request.param == "binary":  # two overlapping classes: a finite optimum
        return X[50:], y[50:] - 1
    return X, y


def _pair(name, params, X, y):
    torch_fit = make_learner(name, **params).fit(X, y)
    numpy_fit = make_learner(name, **params).fit_numpy(X, y)
    return torch_fit, numpy_fit


@pytest.mark.parametrize(
    "name,params,data", CONFIGS, indirect=["data"], ids=[f"{c[0]}-{c[2]}-{c[1]}" for c in CONFIGS]
)
def test_fit_numpy_is_fit_to_rounding_and_becomes_torch_when_read(name, params, data):
    X, y = data
    torch_fit, numpy_fit = _pair(name, params, X, y)
    expected = torch_fit.state_
    held = numpy_fit.current_state()
    assert "state_" not in vars(numpy_fit) and list(held) == list(expected)
    for key, value in held.items():
        assert isinstance(value, np.ndarray) and value.dtype == np.float64, key
        np.testing.assert_allclose(value, expected[key].numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(numpy_fit.param_vector(), torch_fit.param_vector(), rtol=1e-9)
    np.testing.assert_allclose(numpy_fit.predict_proba(X), torch_fit.predict_proba(X), atol=1e-12)
    assert (numpy_fit.predict(X) == torch_fit.predict(X)).all()

    # reading state_ (an update does) turns the arrays into tensors, once
    state = numpy_fit.state_
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    assert numpy_fit.state_ is state and "numpy_state_" not in vars(numpy_fit)
    for key, value in held.items():
        assert np.array_equal(state[key].numpy(), value)
    if params["update_rule"] != "frozen":
        rows = np.random.default_rng(0).choice(len(X), 40, replace=False)
        numpy_fit.update(X[rows], y[rows])
        torch_fit.update(X[rows], y[rows])
        np.testing.assert_allclose(numpy_fit.param_vector(), torch_fit.param_vector(), rtol=1e-8)


def test_a_strategic_model_fits_on_numpy_as_on_torch(iris):
    from recourse_sim.learners.strategic import StrategicLinear

    X, y = iris[0][50:], iris[1][50:] - 1
    for standardize in (False, True):
        torch_fit = StrategicLinear(strength=0.5, standardize=standardize).fit(X, y)
        numpy_fit = StrategicLinear(strength=0.5, standardize=standardize).fit_numpy(X, y)
        held = numpy_fit.current_state()
        assert list(held) == list(torch_fit.state_)
        for key, value in held.items():
            np.testing.assert_allclose(value, torch_fit.state_[key].numpy(), rtol=1e-9)
        np.testing.assert_allclose(numpy_fit.predict_proba(X), torch_fit.predict_proba(X))


def test_a_later_fit_replaces_the_numpy_state(iris):
    X, y = iris
    model = make_learner("logistic_regression", n_classes=3).fit_numpy(X, y)
    model.fit(X, y)
    expected = make_learner("logistic_regression", n_classes=3).fit(X, y).state_
    assert "numpy_state_" not in vars(model)
    for key, value in expected.items():
        assert torch.equal(model.state_[key], value)


def _performative():
    from recourse_sim.learners.performative import PerformativeLogisticRegression

    return PerformativeLogisticRegression(update_rule="perfgd")


@pytest.mark.parametrize(
    "build",
    [
        lambda: make_learner("mlp", fit_epochs=2, random_state=0),
        lambda: make_learner("reweighted"),
        lambda: make_learner("jtt"),
        lambda: make_learner("chi2_dro"),
        _performative,
    ],
    ids=["mlp", "reweighted", "jtt", "chi2_dro", "perfgd"],
)
def test_learners_without_a_numpy_fit_fall_back_to_fit(iris, build):
    X, y = iris[0][50:], iris[1][50:] - 1
    model = build().fit_numpy(X, y)
    assert "numpy_state_" not in vars(model)
    expected = build().fit(X, y).state_
    for key, value in expected.items():
        assert torch.equal(model.state_[key], value), key


def test_fit_numpy_checks_as_fit_does():
    from recourse_sim.errors import ConfigError, NotFittedError

    X, y = np.array([[0.0], [1.0], [2.0]]), np.array([0, 1, 1])
    with pytest.raises(ConfigError, match="C=-1"):
        make_learner("logistic_regression", C=-1).fit_numpy(X, y)
    with pytest.raises(ConfigError, match=r"classes \[2\] have no rows"):
        make_learner("nearest_centroid", n_classes=3).fit_numpy(X, y)
    with pytest.raises(NotFittedError):
        make_learner("logistic_regression").param_vector()
