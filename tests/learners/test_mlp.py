import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification

from recourse_sim.errors import ConfigError
from recourse_sim.learners import MLPClassifier


@pytest.fixture(scope="module")
def blobs():
    """90 rows, 3 features, 3 classes: 60 to fit, 30 for the next round."""
    X, y = make_classification(
        n_samples=90,
        n_features=3,
        n_informative=3,
        n_redundant=0,
        n_classes=3,
        n_clusters_per_class=1,
        random_state=0,
    )
    return X[:60], y[:60], X[60:], y[60:]


def _query(X_fit, y_fit):
    """A fitted row and a goal class other than its label."""
    return torch.as_tensor(X_fit[:1]), int(y_fit[0] + 1) % 3


@pytest.mark.slow
def test_same_random_state_same_model(blobs):
    X, y, _, _ = blobs
    kwargs = dict(hidden=(5, 4), fit_epochs=20, batch_size=16, dropout=0.2)
    a = MLPClassifier(random_state=7, **kwargs).fit(X, y)
    b = MLPClassifier(random_state=7, **kwargs).fit(X, y)
    c = MLPClassifier(random_state=8, **kwargs).fit(X, y)
    assert a.param_keys == tuple(f"layers.{i}.{w}" for i in range(3) for w in ("weight", "bias"))
    assert all(torch.equal(a.state_[k], b.state_[k]) for k in a.param_keys)
    assert not torch.equal(a.state_["layers.0.weight"], c.state_["layers.0.weight"])
    np.testing.assert_array_equal(a.param_vector(), b.param_vector())


def test_numpy_generator_as_random_state(blobs):
    X, y, _, _ = blobs
    a = MLPClassifier(random_state=np.random.default_rng(1), fit_epochs=5).fit(X, y)
    b = MLPClassifier(random_state=np.random.default_rng(1), fit_epochs=5).fit(X, y)
    np.testing.assert_array_equal(a.param_vector(), b.param_vector())


def test_fit_does_not_touch_the_global_rng(blobs):
    X, y, _, _ = blobs
    before = torch.random.get_rng_state()
    MLPClassifier(random_state=0, fit_epochs=5, dropout=0.1, batch_size=8).fit(X, y)
    assert torch.equal(before, torch.random.get_rng_state())


@pytest.mark.slow
def test_fit_learns_and_sgd_update_is_deterministic(blobs):
    X, y, X_new, y_new = blobs
    model = MLPClassifier(hidden=(10,), random_state=0, fit_epochs=300).fit(X, y)
    assert (model.predict(X) == y).mean() > 0.85
    twin = MLPClassifier(hidden=(10,), random_state=0, fit_epochs=300).fit(X, y)
    assert model.update(X_new, y_new) is model
    twin.update(X_new, y_new)
    np.testing.assert_array_equal(model.param_vector(), twin.param_vector())


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_unrolled_hypergradient_is_exact(blobs, activation, query_loss, hypergrad_errors):
    X, y, X_new, y_new = blobs
    model = MLPClassifier(
        hidden=(6,), activation=activation, random_state=0, fit_epochs=100, epochs=5, lr=0.1
    ).fit(X, y)
    query, goal = _query(X, y)
    loss = query_loss(model, model.state(), torch.as_tensor(y_new), query, goal)
    err, grad = hypergrad_errors(loss, X_new)
    assert err < 1e-4, err
    assert np.abs(grad).max() > 1e-8


def test_unrolled_update_is_differentiable_in_theta(blobs):
    X, y, X_new, y_new = blobs
    model = MLPClassifier(hidden=(4,), random_state=0, fit_epochs=10).fit(X, y)
    state = {k: v.requires_grad_(True) for k, v in model.state().items()}
    new = model.update_fn(state, torch.as_tensor(X_new), torch.as_tensor(y_new))
    model.proba_fn(new, torch.as_tensor(X[:1]))[0, 0].backward()
    assert state["layers.0.weight"].grad.abs().max() > 0


def test_implicit_sgd_has_the_unrolled_value(blobs):
    X, y, X_new, y_new = blobs
    kwargs = dict(hidden=(5,), random_state=0, fit_epochs=50, epochs=4)
    unrolled = MLPClassifier(**kwargs).fit(X, y)
    implicit = MLPClassifier(hypergrad="implicit", **kwargs).fit(X, y)
    X_t = torch.tensor(X_new, requires_grad=True)
    a = unrolled.update_fn(unrolled.state(), X_t, torch.as_tensor(y_new))
    b = implicit.update_fn(implicit.state(), X_t, torch.as_tensor(y_new))
    for k in unrolled.param_keys:
        torch.testing.assert_close(a[k], b[k], rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_implicit_sgd_approaches_unrolled_gradient_at_convergence(blobs):
    # Many steps reach a stationary point of the round's risk, where the unrolled
    # derivative tends to the implicit-function one.
    X, y, X_new, y_new = blobs
    kwargs = dict(
        hidden=(5,),
        activation="tanh",
        random_state=0,
        fit_epochs=100,
        epochs=400,
        lr=0.5,
        weight_decay=0.1,
    )
    query, goal = _query(X, y)
    grads = []
    for hypergrad in ("unrolled", "implicit"):
        model = MLPClassifier(hypergrad=hypergrad, **kwargs).fit(X, y)
        X_t = torch.tensor(X_new, requires_grad=True)
        new = model.update_fn(model.state(), X_t, torch.as_tensor(y_new))
        (-torch.log(model.proba_fn(new, query)[:, goal]).sum()).backward()
        grads.append(X_t.grad)
    rel = (grads[0] - grads[1]).norm() / grads[0].norm()
    assert rel < 5e-3, rel


def _refit_model(blobs, **kwargs):
    X, y, X_new, y_new = blobs
    params = dict(
        hidden=(6,),
        activation="tanh",
        random_state=0,
        fit_epochs=300,
        update_rule="refit",
        hypergrad="implicit",
        weight_decay=0.1,
        tol=1e-10,
    )
    params.update(kwargs)
    model = MLPClassifier(**params).fit(X, y)
    # One refit first, so the state is a converged optimum of the regularised risk.
    return model.update(X_new[:10], y_new[:10])


@pytest.mark.slow
def test_implicit_refit_matches_finite_differences(blobs, query_loss, hypergrad_errors):
    """Tolerance 2e-3: the CG solve adds λ = cg_damping to H, a relative bias of about
    λ / λ_min(H) (≈3e-4 here); the refit's own stopping tolerance adds FD noise."""
    X, y, X_new, y_new = blobs
    model = _refit_model(blobs)
    query, goal = _query(X, y)
    loss = query_loss(model, model.state(), torch.as_tensor(y_new[10:]), query, goal)
    err, _ = hypergrad_errors(loss, X_new[10:], h=1e-3)
    assert err < 2e-3, err


@pytest.mark.slow
def test_implicit_cg_equals_dense_implicit_function_theorem(blobs):
    X, y, X_new, y_new = blobs
    model = _refit_model(blobs, cg_damping=0.0)
    query, goal = _query(X, y)
    X_t = torch.tensor(X_new[10:], requires_grad=True)
    new = model.update_fn(model.state(), X_t, torch.as_tensor(y_new[10:]))
    (-torch.log(model.proba_fn(new, query)[:, goal]).sum()).backward()

    # Dense reference: dL/dX = −(∂²R/∂θ∂X)ᵀ H⁻¹ ∂L/∂θ at θ⁺ on the remembered rows.
    keys, risk = model.param_keys, model._risk_fn()
    shapes = [new[k].shape for k in keys]
    theta = torch.cat([new[k].detach().reshape(-1) for k in keys])

    def unflatten(flat):
        parts = torch.split(flat, [s.numel() for s in shapes])
        return {k: p.reshape(s) for k, p, s in zip(keys, parts, shapes, strict=True)}

    X_mem, y_mem = new["X_mem"].detach(), new["y_mem"]
    H = torch.autograd.functional.hessian(lambda t: risk(unflatten(t), X_mem, y_mem), theta)
    th = theta.clone().requires_grad_(True)
    dL = torch.autograd.grad(-torch.log(model.proba_fn(unflatten(th), query)[:, goal]).sum(), th)
    v = torch.linalg.solve(H, dL[0])
    X_mem_g = X_mem.clone().requires_grad_(True)
    th = theta.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(risk(unflatten(th), X_mem_g, y_mem), th, create_graph=True)
    (dense,) = torch.autograd.grad(-(g * v).sum(), X_mem_g)
    torch.testing.assert_close(X_t.grad, dense[-len(X_t) :], rtol=1e-6, atol=1e-9)


def test_window_keeps_last_rounds(blobs):
    X, y, X_new, y_new = blobs
    model = MLPClassifier(
        update_rule="window", window=2, hypergrad="implicit", random_state=0, fit_epochs=20
    ).fit(X, y)
    model.update(X_new[:10], y_new[:10]).update(X_new[10:15], y_new[10:15])
    np.testing.assert_array_equal(model.state_["X_mem"].numpy(), X_new[:15])


def test_refit_with_unrolled_hypergradient_rejected(blobs):
    X, y, _, _ = blobs
    with pytest.raises(ConfigError, match="hypergrad='implicit'"):
        MLPClassifier(update_rule="refit").fit(X, y)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"hidden": (0,)},
        {"hidden": 5},
        {"activation": "sigmoid"},
        {"hypergrad": "magic"},
        {"dropout": 1.0},
        {"lr": -1.0},
        {"random_state": "seed"},
    ],
)
def test_bad_hyperparameters_rejected(blobs, kwargs):
    X, y, _, _ = blobs
    name = next(iter(kwargs))
    with pytest.raises(ConfigError, match=name):
        MLPClassifier(**kwargs).fit(X, y)
