"""GenRe: the pairing distribution Q, the soft labels of Eq. 8, the sampler, training on a
toy problem, and save/load."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from recourse_sim.errors import ConfigError, NotFittedError
from recourse_sim.learners import LogisticRegression
from recourse_sim.recourse import ActionSet
from recourse_sim.recourse.genre import (
    WEIGHTS_FILE,
    GenRe,
    RecourseTransformer,
    pairing_distribution,
    snap_to_levels,
    soft_labels,
)


def toy_score(X: np.ndarray) -> np.ndarray:
    """h(x) on the toy problem: favourable above the line x₀ + x₁ = 1."""
    return 1.0 / (1.0 + np.exp(-12.0 * (X[:, 0] + X[:, 1] - 1.0)))


def toy_data(n: int = 1500, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two uniform features plus a binary immutable one (its value does not matter)."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(size=(n, 2)), rng.integers(0, 2, size=n)])
    y = (rng.uniform(size=n) < toy_score(X)).astype(np.int64)
    return X.astype(np.float64), y


@pytest.fixture(scope="module")
def toy_model() -> GenRe:
    # ~170 Adam steps: a couple of seconds on one core
    X, y = toy_data()
    return GenRe(
        n_layers=1, epochs=15, batch_size=64, top_k=50, dropout=0.0,
        immutable=[2], categorical=[2], random_state=0,
    ).fit(X, y, toy_score)  # fmt: skip


# ----------------------------------------------------------------------------------- Q
def brute_force_q(X_neg, X_pos, lam, top_k, immutable):
    """Eq. 6 truncated to the top K, one source and one target at a time."""
    out = []
    for x in X_neg:
        costs = {}
        for i, z in enumerate(X_pos):
            if all(x[j] == z[j] for j in immutable):
                costs[i] = sum(abs(a - b) for a, b in zip(x, z, strict=True))
        kept = sorted(costs, key=lambda i: costs[i])[:top_k]
        total = sum(np.exp(-lam * costs[i]) for i in kept)
        out.append({i: np.exp(-lam * costs[i]) / total for i in kept})
    return out


def as_dicts(q):
    return [
        {int(t): float(p) for t, p in zip(row_t, row_p, strict=True) if t >= 0}
        for row_t, row_p in zip(q.targets, q.probs, strict=True)
    ]


@pytest.mark.parametrize("top_k", [1, 3, 100])
def test_pairing_distribution_matches_brute_force(top_k):
    rng = np.random.default_rng(1)
    X_neg = np.column_stack([rng.uniform(size=(6, 2)), rng.integers(0, 2, size=6)])
    X_pos = np.column_stack([rng.uniform(size=(9, 2)), rng.integers(0, 2, size=9)])
    X_neg[5, 2] = 7.0  # an immutable value no target has
    q = pairing_distribution(X_neg, X_pos, lam=2.0, top_k=top_k, immutable=[2])
    expected = brute_force_q(X_neg, X_pos, 2.0, top_k, [2])
    got = as_dicts(q)
    assert not q.has_target[5] and got[5] == {} and expected[5] == {}
    for e, g in zip(expected, got, strict=True):
        assert set(e) == set(g)
        for i in e:
            assert g[i] == pytest.approx(e[i], rel=1e-12)
    used = q.has_target
    np.testing.assert_allclose(q.probs[used].sum(1), 1.0)


def test_pairing_distribution_hand_computed():
    # one source at 0; targets at ℓ1 costs 1, 2 and 3; the third differs in the immutable
    X_neg = np.array([[0.0, 0.0, 1.0]])
    X_pos = np.array([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    q = pairing_distribution(X_neg, X_pos, lam=1.0, top_k=5, immutable=[2])
    z = np.exp(-1.0) + np.exp(-2.0)
    np.testing.assert_array_equal(q.targets[0], [0, 1, -1])
    np.testing.assert_allclose(q.probs[0], [np.exp(-1.0) / z, np.exp(-2.0) / z, 0.0])
    # λ = 0: uniform over the compatible targets; large λ: the nearest one only
    np.testing.assert_allclose(
        pairing_distribution(X_neg, X_pos, lam=0.0, top_k=5, immutable=[2]).probs[0],
        [0.5, 0.5, 0.0],
    )
    np.testing.assert_allclose(
        pairing_distribution(X_neg, X_pos, lam=1e3, top_k=5, immutable=[2]).probs[0],
        [1.0, 0.0, 0.0],
    )


def test_pairing_distribution_rejects_bad_input():
    with pytest.raises(ConfigError, match="equal widths"):
        pairing_distribution(np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(ConfigError, match="top_k"):
        pairing_distribution(np.zeros((2, 3)), np.zeros((2, 3)), top_k=0)


# ---------------------------------------------------------------------- soft labels
def test_soft_labels_hand_computed():
    centres = torch.tensor([[0.0, 1.0, 2.0]], dtype=torch.float64)
    widths = torch.tensor([1.0], dtype=torch.float64)
    got = soft_labels(torch.tensor([[0.0]], dtype=torch.float64), centres, widths)
    k = np.exp(-0.5 * np.array([0.0, 1.0, 4.0]))  # RBF K(u) = exp(−u²/2)
    np.testing.assert_allclose(got[0, 0].numpy(), k / k.sum())


def test_soft_labels_sum_to_one_and_peak_at_nearest_bin():
    n_bins = 50
    width = 1.0 / n_bins
    centres = ((torch.arange(n_bins) + 0.5) * width).repeat(3, 1).double()
    widths = torch.full((3,), width, dtype=torch.float64)
    values = torch.rand(100, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    labels = soft_labels(values, centres, widths)
    assert labels.shape == (100, 3, n_bins)
    np.testing.assert_allclose(labels.sum(-1).numpy(), 1.0, atol=1e-12)
    nearest = (values[..., None] - centres).abs().argmin(-1)
    assert torch.equal(labels.argmax(-1), nearest)


# -------------------------------------------------------------------------- sampler
def test_incremental_decoding_equals_teacher_forcing():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        module = RecourseTransformer(5, 7, 16, 4, 2, 16, 0.1).eval()
    x, x_plus = torch.rand(4, 5), torch.rand(4, 5)
    with torch.no_grad():
        full = module(x, x_plus)
        cache = module.start_decoding(module.encode(x))
        tokens = module.decoder_input(x_plus)
        steps = torch.stack([module.decode_step(tokens[:, j], cache, j) for j in range(5)], 1)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_sampler_picks_bin_centres_deterministically(toy_model):
    X = np.array([[0.1, 0.2, 0.0], [0.3, 0.4, 1.0], [0.45, 0.45, 1.0]])
    a = toy_model.sample(X, 4, temperature=1e6, sigma=0.0, random_state=1)
    b = toy_model.sample(X, 4, temperature=1e6, sigma=0.0, random_state=2)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, np.broadcast_to(a[:, :1], a.shape))  # all k alike
    centres = toy_model.module_.centres.double().numpy()
    for j in (0, 1):
        assert np.isin(a[..., j], centres[j]).all()
    # greedy decoding through the teacher-forced forward pass gives the same values
    module = toy_model.module_
    with torch.no_grad():
        x = torch.as_tensor(X, dtype=torch.float32)
        greedy = torch.as_tensor(X, dtype=torch.float32).clone()
        for j in (0, 1):
            k = module(x, greedy)[:, j].argmax(-1)
            greedy[:, j] = module.centres[j, k]
    np.testing.assert_allclose(a[:, 0, :2], greedy[:, :2].double().numpy())


@pytest.mark.slow
def test_sampler_noise_and_seeds(toy_model):
    X = np.array([[0.2, 0.3, 1.0]] * 3)
    a = toy_model.sample(X, 5, sigma=0.01, random_state=3)
    np.testing.assert_array_equal(a, toy_model.sample(X, 5, sigma=0.01, random_state=3))
    assert not np.array_equal(a, toy_model.sample(X, 5, sigma=0.01, random_state=4))
    centres = toy_model.module_.centres.double().numpy()
    assert not np.isin(a[..., 0], centres[0]).any()  # σ > 0 leaves the bin centres


def test_sampler_copies_immutables_and_snaps_categoricals():
    rng = np.random.default_rng(3)
    X = np.column_stack([rng.uniform(size=(400, 2)), rng.integers(0, 3, size=400) / 2.0])
    X = np.column_stack([X, rng.integers(0, 2, size=400)])  # feature 3: immutable group
    score = lambda Z: 1 / (1 + np.exp(-10 * (Z[:, 0] + Z[:, 2] - 1.0)))  # noqa: E731
    y = (rng.uniform(size=400) < score(X)).astype(np.int64)
    model = GenRe(
        n_layers=1, epochs=1, top_k=20, immutable=[3], categorical=[2], random_state=0
    ).fit(X, y, score)
    queries = np.column_stack([rng.uniform(size=(30, 2)), np.zeros(30), rng.integers(0, 2, 30)])
    samples = model.sample(queries, 6, temperature=1.0, random_state=0)
    np.testing.assert_array_equal(samples[..., 3], np.repeat(queries[:, 3:4], 6, axis=1))
    assert np.isin(samples[..., 2], [0.0, 0.5, 1.0]).all()
    assert model.levels_ == {2: pytest.approx(np.array([0.0, 0.5, 1.0]))}


def test_snap_to_levels_hand_computed():
    X = np.array([[0.2, 0.74, 5.0], [0.6, 0.76, -1.0]])
    out = snap_to_levels(X, {1: np.array([0.0, 0.5, 1.0]), 2: np.array([0.0, 1.0])})
    np.testing.assert_array_equal(out, [[0.2, 0.5, 1.0], [0.6, 1.0, 0.0]])


# ------------------------------------------------------------------------- training
def test_toy_model_moves_negatives_into_the_positive_region(toy_model):
    X, _ = toy_data(400, seed=5)
    negatives = X[toy_score(X) < 0.3][:100]
    result = toy_model.recourse(negatives, toy_score, k=10, random_state=0)
    assert result.success.mean() >= 0.9
    after = negatives + result.delta
    np.testing.assert_array_equal(after[:, 2], negatives[:, 2])  # immutable kept
    # the cheapest valid move costs (1 − x₀ − x₁)⁺ in ℓ1; GenRe's targets have h > 0.7
    optimal = np.maximum(0.0, 1.0 - negatives[:, 0] - negatives[:, 1])
    assert result.cost.mean() < optimal.mean() + 0.35
    np.testing.assert_allclose(result.cost, np.abs(result.delta).sum(1))
    np.testing.assert_allclose(result.loss, -np.log(toy_score(after)))
    # one sample is worse than the best of ten
    single = toy_model.recourse(negatives, toy_score, k=1, random_state=0)
    assert single.success.mean() <= result.success.mean()


def test_recourse_through_an_action_set_is_feasible(toy_model):
    X, _ = toy_data(200, seed=6)
    negatives = X[toy_score(X) < 0.5][:50]
    actions = ActionSet(3, immutable=[2], increase_only=[0], lower=0, upper=1, p=2, epsilon=0.3)
    result = toy_model.recourse(negatives, toy_score, action_set=actions, random_state=0)
    assert actions.contains(negatives, result.delta).all()
    np.testing.assert_allclose(result.cost, np.linalg.norm(result.delta, axis=1))


def test_fit_is_reproducible_and_leaves_the_global_rng_alone():
    X, y = toy_data(300)
    state = torch.get_rng_state()
    kwargs = {"n_layers": 1, "epochs": 2, "top_k": 10, "immutable": [2], "random_state": 7}
    a = GenRe(**kwargs).fit(X, y, toy_score)
    assert torch.equal(torch.get_rng_state(), state)
    b = GenRe(**kwargs).fit(X, y, toy_score)
    for key, value in a.module_.state_dict().items():
        assert torch.equal(value, b.module_.state_dict()[key]), key
    assert a.loss_history_ == b.loss_history_


def test_fit_accepts_a_learner_as_classifier():
    X, y = toy_data(300)
    learner = LogisticRegression(C=10.0).fit(X, y)
    model = GenRe(n_layers=1, epochs=1, top_k=10, random_state=0).fit(X, y, learner)
    result = model.recourse(X[:5], learner, k=2, random_state=0)
    assert result.delta.shape == (5, 3)


def test_fit_errors():
    X, y = toy_data(100)
    with pytest.raises(ConfigError, match=r"\|D⁺\| = 0"):
        GenRe(epochs=1).fit(X, y, lambda Z: np.full(len(Z), 0.6))
    with pytest.raises(ConfigError, match="n_heads"):
        GenRe(d_model=30, n_heads=8).fit(X, y, toy_score)
    with pytest.raises(ConfigError, match="gamma"):
        GenRe(gamma=0.3).fit(X, y, toy_score)
    with pytest.raises(ConfigError, match="same immutable"):
        Z = X.copy()
        Z[y == 1, 2] = 5.0  # no positive shares an immutable value with any negative
        GenRe(epochs=1, immutable=[2]).fit(Z, y, toy_score)
    with pytest.raises(NotFittedError):
        GenRe().sample(X)


# ---------------------------------------------------------------------- persistence
def test_save_load_round_trip(toy_model, tmp_path):
    path = toy_model.save(tmp_path / "model")
    # the weights are plain tensors: the safe loader reads them
    state = torch.load(path / WEIGHTS_FILE, weights_only=True)
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    config = json.loads((path / "genre.json").read_text())
    assert config["params"]["n_layers"] == 1 and config["immutable"] == [2]
    loaded = GenRe.load(path)
    for key, value in toy_model.module_.state_dict().items():
        assert torch.equal(value, loaded.module_.state_dict()[key]), key
    assert loaded.levels_.keys() == toy_model.levels_.keys()
    np.testing.assert_array_equal(loaded.immutable_, toy_model.immutable_)
    X = np.array([[0.1, 0.2, 1.0], [0.3, 0.1, 0.0]])
    np.testing.assert_array_equal(
        loaded.sample(X, 3, temperature=2.0, random_state=0),
        toy_model.sample(X, 3, temperature=2.0, random_state=0),
    )


def test_load_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        GenRe.load(tmp_path)
    (tmp_path / "genre.json").write_text("{not json")
    (tmp_path / WEIGHTS_FILE).write_bytes(b"")
    with pytest.raises(ConfigError, match="not a GenRe configuration"):
        GenRe.load(tmp_path)


# ------------------------------------------------------------------ fast sampling paths
def test_inference_encoder_equals_the_torch_encoder():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        module = RecourseTransformer(6, 5, 16, 4, 2, 16, 0.0).eval()
    x = torch.rand(7, 6)
    with torch.no_grad():
        tokens = module.embed(x, slice(None)) + module.enc_position
        torch.testing.assert_close(module.encode(x), module.encoder(tokens))


def test_samples_share_cross_attention_and_the_first_position():
    """Decoding k samples per source against one copy of its encoder states (and
    position 0 once per source) equals decoding every sequence on its own."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(2)
        module = RecourseTransformer(4, 6, 16, 4, 2, 16, 0.0).eval()
    x, k = torch.rand(3, 4), 5
    x_plus = torch.rand(3 * k, 4)
    with torch.no_grad():
        tokens = module.decoder_input(x_plus)
        memory = module.encode(x)
        alone = module.start_decoding(memory.repeat_interleave(k, 0))
        shared = module.start_decoding(memory, k)
        for j in range(4):
            first = tokens[::k, 0] if j == 0 else tokens[:, j]
            got = module.decode_step(first, shared, j)
            if j == 0:
                got = got.repeat_interleave(k, 0)
            torch.testing.assert_close(got, module.decode_step(tokens[:, j], alone, j))
        with pytest.raises(ValueError, match="per source"):
            module.decode_step(tokens[:3, 1], shared, 1)


def test_attention_is_softmax_attention_even_for_huge_scores():
    from recourse_sim.recourse.genre_model import attend as _attend

    torch.manual_seed(3)
    head_sum = torch.zeros(8, 2)
    head_sum[torch.arange(8), torch.arange(8) // 4] = 1.0
    for size in (1.0, 300.0):  # 300: exp overflows without the max shift
        q, k, v = size * torch.randn(5, 1, 8), size * torch.randn(5, 6, 8), torch.randn(5, 6, 8)
        ref = torch.nn.functional.scaled_dot_product_attention(
            q.view(5, 1, 2, 4).transpose(1, 2),
            k.view(5, 6, 2, 4).transpose(1, 2),
            v.view(5, 6, 2, 4).transpose(1, 2),
        )
        got = _attend(q, k, v, head_sum)
        torch.testing.assert_close(got, ref.transpose(1, 2).reshape(5, 1, 8)[:, 0])


def test_bins_are_drawn_with_their_probabilities():
    from recourse_sim.recourse.genre_model import draw_bins as _draw_bins

    logits = torch.log(torch.tensor([[0.5, 0.0, 0.3, 0.2]])).expand(40_000, -1)
    bins = _draw_bins(logits, torch.Generator().manual_seed(0))
    freq = torch.bincount(bins, minlength=4).double() / len(bins)
    torch.testing.assert_close(
        freq, torch.tensor([0.5, 0.0, 0.3, 0.2], dtype=torch.float64), atol=0.01, rtol=0
    )
    assert not (bins == 1).any()  # a bin of probability 0 is never drawn


def test_state_round_trip_is_exact(toy_model):
    state = toy_model.get_state()
    assert isinstance(state["config"], str)
    assert all(isinstance(w, np.ndarray) for w in state["weights"].values())
    again = GenRe.from_state(state)
    X = np.array([[0.1, 0.2, 0.0], [0.3, 0.1, 1.0]])
    np.testing.assert_array_equal(
        again.sample(X, 3, random_state=4), toy_model.sample(X, 3, random_state=4)
    )
    with pytest.raises(ConfigError, match="not a GenRe model"):
        GenRe.from_state({"config": "{}", "weights": {}})
