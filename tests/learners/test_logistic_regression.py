import numpy as np
import pytest
import sklearn.linear_model
import torch
from sklearn.datasets import make_classification

from recourse_sim.learners import LogisticRegression


@pytest.fixture(scope="module")
def binary():
    X, y = make_classification(
        n_samples=200, n_features=5, n_informative=3, n_redundant=1, random_state=0
    )
    return X, y


def _sklearn(X, y, C, solver="lbfgs"):
    return sklearn.linear_model.LogisticRegression(
        C=C, tol=1e-10, max_iter=10000, solver=solver
    ).fit(X, y)


def _rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.parametrize("C", [0.1, 1.0, 10.0])
@pytest.mark.parametrize("data", ["iris", "binary"])
def test_matches_sklearn(request, data, C):
    X, y = request.getfixturevalue(data)
    ours = LogisticRegression(C=C).fit(X, y)
    ref = _sklearn(X, y, C)
    assert ours.coef_.shape == ref.coef_.shape
    assert ours.intercept_.shape == ref.intercept_.shape
    assert _rel(ours.coef_, ref.coef_) < 1e-5
    assert _rel(ours.intercept_, ref.intercept_) < 1e-5
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-5)


def test_matches_sklearn_newton_to_solver_precision(iris):
    # scikit-learn's lbfgs stops at ~1e-6; its Newton solver agrees with ours to ~1e-12.
    ours = LogisticRegression(C=1.0).fit(*iris)
    ref = _sklearn(*iris, 1.0, solver="newton-cholesky")
    assert _rel(ours.coef_, ref.coef_) < 1e-9
    assert _rel(ours.intercept_, ref.intercept_) < 1e-9


def test_no_intercept_matches_sklearn(binary):
    ours = LogisticRegression(C=1.0, fit_intercept=False).fit(*binary)
    ref = sklearn.linear_model.LogisticRegression(
        C=1.0, fit_intercept=False, tol=1e-10, max_iter=10000, solver="newton-cholesky"
    ).fit(*binary)
    assert _rel(ours.coef_, ref.coef_) < 1e-9
    assert np.all(ours.intercept_ == 0)


def _split(X, y, n_rounds):
    order = np.random.default_rng(0).permutation(len(X))
    return [(X[i], y[i]) for i in np.array_split(order, n_rounds)]


@pytest.mark.parametrize("data", ["iris", "binary"])
def test_refit_equals_fit_on_concatenation(request, data):
    rounds = _split(*request.getfixturevalue(data), 3)
    model = LogisticRegression().fit(*rounds[0])
    for X, y in rounds[1:]:
        assert model.update(X, y) is model
    full = LogisticRegression().fit(*map(np.concatenate, zip(*rounds, strict=True)))
    assert _rel(model.coef_, full.coef_) < 1e-9
    assert _rel(model.intercept_, full.intercept_) < 1e-9


def test_window_equals_fit_on_last_rounds(iris):
    rounds = _split(*iris, 5)
    model = LogisticRegression(update_rule="window", window=2).fit(*rounds[0])
    for X, y in rounds[1:]:
        model.update(X, y)
    ref = LogisticRegression().fit(*map(np.concatenate, zip(*rounds[-2:], strict=True)))
    assert _rel(model.coef_, ref.coef_) < 1e-9
    assert len(model.state_["X_mem"]) == sum(len(r[0]) for r in rounds[-2:])


def test_sgd_moves_towards_the_round_optimum(binary):
    X, y = binary
    model = LogisticRegression(update_rule="sgd", epochs=200, lr=1.0).fit(X[:20], y[:20])
    target = LogisticRegression().fit(X[20:], y[20:])
    before = np.abs(model.coef_ - target.coef_).max()
    model.update(X[20:], y[20:])
    assert np.abs(model.coef_ - target.coef_).max() < 0.1 * before
    assert "X_mem" not in model.state_


def _hypergrad_setup(X, y, rule, n_fit=60):
    """A learner fitted and updated once, plus the next round and a query point."""
    order = np.random.default_rng(3).permutation(len(X))
    fit, first, second = order[:n_fit], order[n_fit : n_fit + 40], order[n_fit + 40 : n_fit + 70]
    window = 2 if rule == "window" else None
    model = LogisticRegression(C=1.0, update_rule=rule, window=window).fit(X[fit], y[fit])
    model.update(X[first], y[first])
    proba = model.predict_proba(X)
    # A query whose prediction is confident and not the goal: the interesting case.
    goal = 0
    query = X[np.argmin(proba[:, goal])][None]
    return model, X[second], y[second], torch.as_tensor(query), goal


@pytest.mark.parametrize("rule", ["refit", "window", "sgd"])
@pytest.mark.parametrize("data", ["iris", "binary"])
def test_hypergradient_matches_finite_differences(
    request, data, rule, query_loss, hypergrad_errors
):
    X, y = request.getfixturevalue(data)
    model, X_round, y_round, query, goal = _hypergrad_setup(X, y, rule)
    loss = query_loss(model, model.state(), torch.as_tensor(y_round), query, goal)
    err, grad = hypergrad_errors(loss, X_round)
    assert err < 1e-4, err
    assert np.abs(grad).max() > 1e-6


def test_hypergradient_through_two_rounds(iris, hypergrad_errors):
    # Lookahead: rows reported now stay in memory and shape the model after the next
    # round too, so the gradient must flow through the remembered rows.
    X, y = iris
    model, X_round, y_round, query, goal = _hypergrad_setup(X, y, "refit")
    X_next, y_next = torch.as_tensor(X[:30]), torch.as_tensor(y[:30])
    state, y_round = model.state(), torch.as_tensor(y_round)

    def loss(X_now):
        after = model.update_fn(model.update_fn(state, X_now, y_round), X_next, y_next)
        return -torch.log(model.proba_fn(after, query)[:, goal]).sum()

    err, _ = hypergrad_errors(loss, X_round)
    assert err < 1e-4, err


@pytest.mark.parametrize("data", ["iris", "binary"])
def test_hypergradient_matches_sklearn_brute_force(request, data):
    """Refit scikit-learn from scratch on X ± h·e and compare the query-loss change."""
    X, y = request.getfixturevalue(data)
    model, X_round, y_round, query, goal = _hypergrad_setup(X, y, "refit")
    memory = model.state_["X_mem"].numpy(), model.state_["y_mem"].numpy().astype(int)
    X_t = torch.tensor(X_round, requires_grad=True)
    new = model.update_fn(model.state(), X_t, torch.as_tensor(y_round))
    (-torch.log(model.proba_fn(new, query)[:, goal]).sum()).backward()
    grad = X_t.grad.numpy()

    def sklearn_loss(X_new):
        ref = _sklearn(
            np.concatenate([memory[0], X_new]),
            np.concatenate([memory[1], y_round]),
            1.0,
            solver="newton-cholesky",
        )
        return -np.log(ref.predict_proba(query.numpy())[0, goal])

    h = 1e-4
    for flat in np.argsort(-np.abs(grad).ravel())[:3]:  # the most influential coordinates
        e = np.zeros(X_round.size)
        e[flat] = h
        e = e.reshape(X_round.shape)
        fd = (sklearn_loss(X_round + e) - sklearn_loss(X_round - e)) / (2 * h)
        assert abs(fd - grad.ravel()[flat]) < 1e-4 * abs(fd), (fd, grad.ravel()[flat])


def test_update_fn_is_pure(iris):
    X, y = iris
    model = LogisticRegression().fit(X[:60], y[:60])
    state = model.state()
    before = {k: v.clone() for k, v in state.items()}
    X_new = torch.tensor(X[60:90])
    X_copy = X_new.clone()
    model.update_fn(state, X_new, torch.as_tensor(y[60:90]))
    assert all(torch.equal(state[k], before[k]) for k in state)
    assert torch.equal(X_new, X_copy)
    assert torch.equal(model.state_["coef"], before["coef"])


def torch_risk(model, theta, Z, Y, weight=None) -> torch.Tensor:
    """The regularised risk written out in torch, the reference the closed forms are
    checked against: 0.5 ‖W‖² + C Σ wᵢ lossᵢ, plus 0.5 (Σ b)² for softmax intercepts."""
    logits = Z @ theta.T
    if theta.shape[0] == 1:
        loss = torch.nn.functional.softplus(logits) - Y * logits
    else:
        loss = torch.logsumexp(logits, dim=1, keepdim=True) - (Y * logits).sum(1, keepdim=True)
    if weight is not None:
        loss = weight[:, None] * loss
    penalised = theta[:, :-1] if model.fit_intercept else theta
    risk = 0.5 * (penalised**2).sum() + model.C * loss.sum()
    if model.fit_intercept and theta.shape[0] > 1:
        risk = risk + 0.5 * theta[:, -1].sum() ** 2
    return risk


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("data", ["iris", "binary"])
def test_closed_form_gradient_and_hessian_match_torch_func(request, data, fit_intercept):
    X, y = request.getfixturevalue(data)
    model = LogisticRegression(fit_intercept=fit_intercept).fit(X, y)
    theta = model.pack(model.state()) + 0.1  # away from the optimum: g ≠ 0
    Z = model.design(torch.as_tensor(X))
    Y = model._targets(torch.as_tensor(y), theta.shape[0])

    def risk(flat):
        return torch_risk(model, flat.reshape(theta.shape), Z, Y)

    flat = theta.reshape(-1)
    # Reverse-over-reverse: torch.func.hessian's forward mode warns (DeprecationWarning)
    # on first use in torch 2.13.
    torch.testing.assert_close(
        model._grad(theta, Z, Y).reshape(-1), torch.func.grad(risk)(flat), rtol=1e-10, atol=1e-9
    )
    torch.testing.assert_close(
        torch.from_numpy(model._hessian(theta.numpy(), Z.numpy())),
        torch.func.jacrev(torch.func.grad(risk))(flat),
        rtol=1e-10,
        atol=1e-9,
    )
    # the numpy forms the Newton solve runs on
    np.testing.assert_allclose(
        model._grad_np(theta.numpy(), Z.numpy(), Y.numpy()),
        model._grad(theta, Z, Y).numpy(),
        rtol=1e-12,
        atol=1e-10,
    )
    weight = torch.linspace(0.5, 2.0, len(Z), dtype=torch.float64)
    np.testing.assert_allclose(
        model._risk_np(theta.numpy(), Z.numpy(), Y.numpy(), weight.numpy()),
        float(torch_risk(model, theta, Z, Y, weight)),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        model._grad_np(theta.numpy(), Z.numpy(), Y.numpy(), weight.numpy()),
        model._grad(theta, Z, Y, weight).numpy(),
        rtol=1e-12,
        atol=1e-10,
    )
    torch.testing.assert_close(
        torch.from_numpy(model._hessian(theta.numpy(), Z.numpy(), weight.numpy())),
        torch.func.jacrev(
            torch.func.grad(lambda f: torch_risk(model, f.reshape(theta.shape), Z, Y, weight))
        )(flat),
        rtol=1e-10,
        atol=1e-9,
    )


# -- numpy fast paths against the torch definitions ----------------------------------------


@pytest.mark.parametrize("standardize", [False, True])
@pytest.mark.parametrize("data", ["iris", "binary"])
def test_numpy_proba_and_goal_gradient_match_torch(request, data, standardize):
    from recourse_sim.recourse.individual import goal_loss

    X, y = request.getfixturevalue(data)
    model = LogisticRegression(standardize=standardize).fit(X, y)
    state = model.state()
    Xt = torch.tensor(X, requires_grad=True)
    np.testing.assert_allclose(
        model.predict_proba(X), model.proba_fn(state, Xt).detach().numpy(), rtol=1e-12, atol=1e-15
    )
    goal = torch.as_tensor((y + 1) % len(model.classes_))
    loss = goal_loss(model, state, Xt, goal)
    (grad,) = torch.autograd.grad(loss.sum(), Xt)
    fast_loss, fast_grad = model.goal_loss_grad(state, X, goal.numpy())
    np.testing.assert_allclose(fast_loss, loss.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fast_grad, grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("standardize", [False, True])
def test_goal_margin_is_the_goal_log_odds(binary, iris, standardize):
    # the binary goal loss is softplus(−margin): its x-gradient is −p(other) · ∇margin
    X, y = binary
    model = LogisticRegression(standardize=standardize).fit(X, y)
    state = model.state()
    goal = (np.arange(len(X)) % 2).astype(np.int64)
    coef = model.goal_margin_coef(state, goal)
    proba = model.predict_proba(X)
    log_odds = np.log(proba[np.arange(len(X)), goal] / proba[np.arange(len(X)), 1 - goal])
    shifted = model.predict_proba(X + 1e-3 * coef)
    moved = np.log(shifted[np.arange(len(X)), goal] / shifted[np.arange(len(X)), 1 - goal])
    np.testing.assert_allclose(moved - log_odds, 1e-3 * (coef * coef).sum(1), rtol=1e-6)
    _, grad = model.goal_loss_grad(state, X, goal)
    other = proba[np.arange(len(X)), 1 - goal][:, None]
    np.testing.assert_allclose(grad, -other * coef, rtol=1e-10, atol=1e-14)
    multiclass = LogisticRegression().fit(*iris)
    assert multiclass.goal_margin_coef(multiclass.state(), np.zeros(3, np.int64)) is None


@pytest.mark.slow
def test_newton_with_kept_float32_curvature_matches_plain_newton(monkeypatch):
    # many parameters: the steering Hessians are kept across small steps and formed in
    # float32; θ* and the factor at θ* must be those of plain float64 Newton
    from recourse_sim.learners import logistic

    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 40))
    y = (X @ rng.normal(size=40) / 6 + 0.5 * rng.normal(size=3000) > 0).astype(np.int64)
    X_new = rng.normal(size=(3000, 40))
    y_new = (X_new @ rng.normal(size=40) / 6 + rng.normal(size=3000) > 0).astype(np.int64)
    model = LogisticRegression(update_rule="window", window=1).fit(X, y)
    Z = model.design(torch.as_tensor(X_new))
    Y = model._targets(torch.as_tensor(y_new), 1)
    theta0 = model.pack(model.state())
    assert theta0.numel() >= logistic._LAG_MIN_PARAMS
    fast, L_fast, P_fast, step = model._newton(theta0, Z, Y)
    monkeypatch.setattr(logistic, "_LAG_MIN_PARAMS", 10**9)
    plain, L_plain, _, _ = model._newton(theta0, Z, Y)
    np.testing.assert_allclose(fast.numpy(), plain.numpy(), rtol=0, atol=1e-9)
    np.testing.assert_allclose(L_fast.numpy(), L_plain.numpy(), rtol=1e-7)
    H = model._hessian(fast.numpy(), Z.numpy())
    np.testing.assert_allclose(L_fast.numpy() @ L_fast.numpy().T, H, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(P_fast, torch.sigmoid(Z @ fast.T).numpy(), rtol=1e-12)
    g = model._grad(fast, Z, Y).reshape(-1, 1)
    np.testing.assert_allclose(
        step, torch.cholesky_solve(g, L_fast).reshape(fast.shape), atol=1e-14
    )
    # a first step with another problem's factor (a nearby refit's) changes nothing either
    _, L_other, _, _ = model._newton(theta0, model.design(torch.as_tensor(X)), Y)
    started, L_started, _, _ = model._newton(theta0, Z, Y, factor=L_other)
    np.testing.assert_allclose(started.numpy(), plain.numpy(), rtol=0, atol=1e-9)
    np.testing.assert_allclose(L_started.numpy(), L_plain.numpy(), rtol=1e-7)


@pytest.mark.parametrize("weighted", [False, True])
def test_hessian_of_few_columns_matches_the_blocked_product(weighted, monkeypatch):
    # Zᵀ(curvature ⊙ Z) on few columns against the blocked AᵀA, A = √curvature ⊙ Z
    from recourse_sim.learners import logistic

    rng = np.random.default_rng(1)
    Z = np.c_[rng.normal(size=(5000, 4)), np.ones(5000)]
    theta = rng.normal(size=(1, 5))
    weight = rng.uniform(0.5, 2.0, size=5000) if weighted else None
    model = LogisticRegression(C=0.7)
    direct = model._hessian(theta, np.asfortranarray(Z), weight)
    monkeypatch.setattr(logistic, "_SMALL_DESIGN", 0)
    monkeypatch.setattr(logistic, "_HESSIAN_BLOCK_BYTES", 8 * 5 * 700)  # several blocks
    blocked = model._hessian(theta, Z, weight)
    np.testing.assert_allclose(direct, blocked, rtol=1e-12)


def test_sigmoid_is_the_plain_formula_bit_for_bit():
    from recourse_sim.learners.logistic_math import sigmoid as _sigmoid
    from recourse_sim.learners.logistic_math import softplus_sigmoid as _softplus_sigmoid

    z = np.r_[np.random.default_rng(3).normal(scale=30, size=5000), np.nan, np.inf, -np.inf]
    z = np.r_[z, 0.0, -0.0, 800.0, -800.0][:, None]
    e = np.exp(-np.abs(z))
    plain = np.where(z >= 0, 1.0, e) / (1.0 + e)
    np.testing.assert_array_equal(_sigmoid(z), plain)
    softplus, sigmoid = _softplus_sigmoid(z)
    np.testing.assert_array_equal(sigmoid, plain)
    np.testing.assert_array_equal(softplus, np.maximum(z, 0.0) + np.log1p(e))


def test_low_rank_gradient_rows_are_the_product_of_its_factors():
    from recourse_sim.learners.base import LowRankGradient

    rng = np.random.default_rng(2)
    coefficients, directions = rng.normal(size=(300, 2)), rng.normal(size=(2, 5))
    scale = rng.uniform(0.5, 2.0, size=5)
    grad = LowRankGradient(coefficients, directions, scale)
    dense = coefficients @ directions / scale
    assert grad.shape == (300, 5)
    np.testing.assert_allclose(np.asarray(grad), dense, rtol=1e-15)
    np.testing.assert_allclose(grad.rows(slice(10, 20)), dense[10:20], rtol=1e-15)
    np.testing.assert_allclose(grad.rows(np.array([3, 1, 299])), dense[[3, 1, 299]], rtol=1e-15)
    assert np.asarray(grad, dtype=np.float32).dtype == np.float32


def test_warm_refit_recovers_from_a_start_where_every_probability_saturates():
    """A window refit after shifting every row far along the weights starts where the
    Hessian is nearly singular (Newton's full step ~1e14): it must still reach the cold
    fit's optimum (the intercept moves by the shift, the weights stay)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 3))
    y = (X @ [1.0, -0.5, 0.3] + 0.5 * rng.standard_normal(300) > 0).astype(int)
    warm = LogisticRegression(C=1.0, update_rule="window", window=1).fit(X, y)
    w = warm.coef_[0].copy()
    shifted = X + 1000.0 * w
    warm.update(shifted, y)
    cold = LogisticRegression(C=1.0).fit(shifted, y)
    np.testing.assert_allclose(warm.coef_, cold.coef_, atol=1e-8)
    np.testing.assert_allclose(warm.intercept_, cold.intercept_, rtol=1e-9)
    np.testing.assert_allclose(warm.coef_[0], w, atol=1e-8)


def _assert_fitted_alike(batched, single, rtol):
    """Two fitted learners' states: the same entries, shapes and dtypes, the parameters
    within `rtol` (relative to their largest), everything else equal."""
    assert batched.state_.keys() == single.state_.keys()
    for key, value in single.state_.items():
        got = batched.state_[key]
        assert got.shape == value.shape and got.dtype == value.dtype, key
        if key not in single.param_keys:
            torch.testing.assert_close(got, value, rtol=0, atol=0)
    assert _rel(batched.param_vector(), single.param_vector()) <= rtol
    np.testing.assert_array_equal(batched.classes_, single.classes_)
    assert batched.n_features_in_ == single.n_features_in_


@pytest.mark.filterwarnings("ignore::recourse_sim.learners.logistic.ConvergenceWarning")
def test_fit_batch_is_each_learners_own_fit(monkeypatch):
    """`fit_batch` leaves every learner as its own `fit` would: θ to rounding for the
    batched ones (rows of several sizes, standardised or not, memory or none); exactly
    `fit` for those it does not batch (one class in the rows, three classes, other
    solver settings)."""
    from recourse_sim.learners.logistic_batch import fit_batch

    rng = np.random.default_rng(3)
    data, learners, batched = [], [], []
    for k, (n, kwargs) in enumerate(
        [
            (300, {"standardize": True, "update_rule": "window", "window": 1}),
            (120, {"standardize": True, "update_rule": "window", "window": 1}),
            (250, {"update_rule": "sgd"}),
            (200, {"update_rule": "refit", "n_classes": 2}),
            (40, {"n_classes": 2}),  # one class: `fit` itself
            (150, {"n_classes": 3}),  # softmax: `fit` itself
            (150, {"C": 0.5}),  # another C than the first batched learner's: `fit` itself
        ]
    ):
        X = rng.normal(size=(n, 3)) * [1.0, 10.0, 0.1] + [0.0, 50.0, 1.0]
        w = rng.normal(size=3)
        y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(X - X.mean(0)) / X.std(0) @ w))).astype(int)
        if k == 4:
            y[:] = 1
        if k == 5:
            y = rng.integers(0, 3, n)
        data.append((X, y))
        learners.append(LogisticRegression(**kwargs))
        batched.append(k < 4)
    fitted_alone = []
    fit = LogisticRegression.fit

    def counted_fit(self, X, y):
        fitted_alone.append(self)
        return fit(self, X, y)

    monkeypatch.setattr(LogisticRegression, "fit", counted_fit)
    fit_batch(learners, data)
    monkeypatch.undo()
    assert fitted_alone == [ln for ln, b in zip(learners, batched, strict=True) if not b]
    for learner, (X, y), in_batch in zip(learners, data, batched, strict=True):
        single = LogisticRegression(**learner.get_params()).fit(X, y)
        _assert_fitted_alike(learner, single, 1e-9 if in_batch else 0.0)


@pytest.mark.parametrize(("B", "n"), [(64, 200), (16, 8), (8, 12)])
def test_batched_risk_of_some_worlds_is_the_whole_stacks_bit_for_bit(B, n):
    """The batched refit's risk of the worlds it tests equals, to the last bit, the risk
    of the whole stack at those worlds (torch rounds vector blocks and tails apart)."""
    from recourse_sim.learners.logistic_batch import _risk_batch, _risk_of

    rng = np.random.default_rng(B + n)
    theta = rng.normal(size=(B, 5))
    logits = 4.0 * rng.normal(size=(B, n))
    y = (rng.random((B, n)) < 0.5).astype(np.float64)
    penalised = np.array([1.0, 1.0, 1.0, 1.0, 0.0])
    for rows in (None, rng.random((B, n)) < 0.8):
        whole = _risk_batch(theta, logits, y, 2.0, penalised, rows)
        for which in ([0], [1, 3, 4], np.arange(0, B, 2), np.arange(B)):
            part = _risk_of(np.asarray(which), theta, logits, y, 2.0, penalised, rows)
            assert part.tobytes() == whole[which].tobytes()
