"""GenRe: a generative recourse model R_θ(x⁺ | x) (Garg, Nagalapatti & Sarawagi).

GenRe learns to *sample* recourse instead of searching for it at inference time:

1. **Pairs** (§4.1, Eq. 6). Sources D⁻ are training rows with label 0 that the deployed
   classifier h scores ≤ 0.5 (people who need recourse); targets D⁺ are rows with
   label 1 that h scores > γ (confidently and truly positive). Each source x gets the
   empirical distribution Q(x⁺ | x) ∝ exp(−λ · ‖x⁺ − x‖₁) over the targets whose
   immutable features equal x's, truncated to its K most likely targets
   (`pairing_distribution`).
2. **Model** (§4.2). A transformer encoder–decoder: the encoder reads x as d tokens (a
   per-feature embedding of the value plus a learned position embedding), the decoder
   reads x⁺ shifted right behind a learned start token with causal self-attention and
   cross-attention to the encoder. Feature j's output is a softmax over ``n_bins``
   uniform bins of its range in D⁺ (centres μ_{j,k}, width w_j), the weights of an
   RBF kernel density. It is trained with the soft-label cross-entropy of Eq. 8, the
   soft labels being K((x⁺_j − μ_{j,k}) / w_j) normalised over k with K(u) = exp(−u²/2)
   (`soft_labels`), on a fresh x⁺ ~ Q(· | x) for every source in every epoch
   (Algorithm 1).
3. **Inference** (§4.3, Algorithm 2). Forward sampling feature by feature: bin k is
   drawn from softmax(τ · logits) and x⁺_j = μ_{j,k} + σ · ε with ε ~ N(0, 1);
   immutable features are copied from x and categorical ones snapped to their nearest
   observed level as they are drawn (so later features condition on a valid value);
   of ``k`` samples per row the one h scores highest is returned. Rows and samples are
   drawn in batches: the decoder keeps a KV cache, the samples of a row share its
   encoder states (cross-attention keys and values are computed once per row), and the
   network runs on cache-sized blocks (`GenRe.sample`).

Feature values enter the network rescaled by each feature's range in D⁺, so the model
works on raw or min–max scaled data alike; costs (λ, the ℓ1 distance of Q) are in the
units of the data given to `GenRe.fit`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.errors import ConfigError, NotFittedError
from recourse_sim.lazy import LazyModule
from recourse_sim.recourse.action_set import ActionSet
from recourse_sim.recourse.individual import RecourseResult

if TYPE_CHECKING:
    import torch

    from recourse_sim.recourse import genre_model
    from recourse_sim.recourse.genre_model import RecourseTransformer, soft_labels
else:  # imported on first use: checking a scenario builds this without torch
    torch = LazyModule("torch", globals())
    genre_model = LazyModule("recourse_sim.recourse.genre_model", globals())

ScoreFn = Callable[[np.ndarray], np.ndarray]
"""Maps an (m, d) float64 array to h(x) = P(favourable | x), shape (m,)."""

CONFIG_FILE = "genre.json"
WEIGHTS_FILE = "genre.pt"
_FORMAT_VERSION = 1

# Rows per chunk of the (sources × targets) cost matrix in `pairing_distribution`: bounds
# its memory at ~chunk × |D⁺| float64 numbers whatever the size of D⁻.
_PAIR_CHUNK = 1024
# Sequences sampled at once: bounds the activations' memory; the random draws of a
# chunk are made together, so the samples of a seed depend on it.
_SAMPLE_CHUNK = 16384
# Sequences that go through the network together when sampling: small enough that a
# block's KV cache and attention intermediates stay in the CPU cache.
_DECODE_BLOCK = 2048
# Smallest feature span used for bins: a feature constant in D⁺ gets (near-)identical
# bin centres instead of a division by zero.
_MIN_SPAN = 1e-6


# ----------------------------------------------------------------------------- helpers
def score_function(classifier) -> ScoreFn:
    """h(x) = P(favourable class 1 | x) as a numpy function of an (m, d) array.

    `classifier` is anything with ``predict_proba`` (a recourse_sim learner or a
    scikit-learn classifier; column 1 is used) or a callable already returning h(x).
    """
    if hasattr(classifier, "predict_proba"):

        def score(X: np.ndarray) -> np.ndarray:
            return np.asarray(classifier.predict_proba(X), dtype=np.float64)[:, 1]

        return score
    if callable(classifier):
        return lambda X: np.asarray(classifier(X), dtype=np.float64).reshape(len(X))
    raise ConfigError(
        f"classifier must have predict_proba or be callable, got {type(classifier).__name__}"
    )


def best_sample(
    X: np.ndarray,
    samples: np.ndarray,
    classifier,
    action_set: ActionSet | None = None,
    need: np.ndarray | None = None,
) -> RecourseResult:
    """Of the k candidate recourse instances ``samples`` (n, k, d) of each row of X, the
    one the classifier scores highest (see `score_function`); with `action_set`, each
    change x⁺ − x is projected onto it first and ``cost`` is the action set's cost,
    else the ℓ1 norm of the change. With `need` (n,), the score each row's decision
    needs, the cheapest candidate that reaches it instead (the highest-scoring where
    none does), and success is reaching it."""
    n, k, d = samples.shape
    delta = samples - X[:, None, :]
    if action_set is not None:
        if action_set.n_features != d:
            raise ConfigError(f"action set has {action_set.n_features} features, X has {d}")
        flat_x = np.repeat(X, k, axis=0)
        delta = np.asarray(action_set.project(flat_x, delta.reshape(n * k, d)))
        delta = delta.reshape(n, k, d)
    score_fn = score_function(classifier)
    scores = score_fn((X[:, None, :] + delta).reshape(n * k, d)).reshape(n, k)
    best = scores.argmax(1)
    if need is not None:
        flat = delta.reshape(n * k, d)
        costs = np.asarray(action_set.cost(flat)) if action_set is not None else np.abs(flat).sum(1)
        enough = scores >= np.asarray(need)[:, None]
        cheapest = np.where(enough, costs.reshape(n, k), np.inf).argmin(1)
        best = np.where(enough.any(1), cheapest, best)
    delta = delta[np.arange(n), best]
    score = scores[np.arange(n), best]
    cost = np.asarray(action_set.cost(delta)) if action_set is not None else np.abs(delta).sum(1)
    return RecourseResult(
        delta=delta,
        loss=-np.log(np.clip(score, 1e-300, None)),
        success=score > 0.5 if need is None else score >= need,
        cost=cost,
    )


def feature_mask(d: int, features, field_name: str) -> np.ndarray:
    """A length-d boolean mask from a mask, a list of indices, or None (no feature)."""
    if features is None:
        return np.zeros(d, dtype=bool)
    arr = np.asarray(features)
    if arr.dtype == bool:
        if arr.shape != (d,):
            raise ConfigError(f"{field_name}: boolean mask has shape {arr.shape}, expected ({d},)")
        return arr.copy()
    if arr.size and (not np.issubdtype(arr.dtype, np.integer) or arr.min() < 0 or arr.max() >= d):
        raise ConfigError(f"{field_name}: feature indices must be integers in 0..{d - 1}")
    mask = np.zeros(d, dtype=bool)
    mask[arr.astype(np.int64)] = True
    return mask


def categorical_levels(X: np.ndarray, categorical: np.ndarray) -> dict[int, np.ndarray]:
    """The sorted observed values of each categorical feature: {feature index: levels}."""
    return {int(j): np.unique(X[:, j]) for j in np.flatnonzero(categorical)}


def snap_to_levels(X: np.ndarray, levels: dict[int, np.ndarray]) -> np.ndarray:
    """A copy of X with each categorical feature moved to its nearest level.

    This is the "project categoricals" step of Algorithm 2; for a binary feature it
    rounds to 0 or 1. Ties go to the lower level.
    """
    out = np.array(X, dtype=np.float64, copy=True)
    for j, lv in levels.items():
        out[..., j] = _nearest_level(out[..., j], lv)
    return out


def _nearest_level(values: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Nearest of the sorted `levels` for each value; ties go to the lower level."""
    lv = np.asarray(levels, dtype=np.float64)
    if len(lv) == 1:
        return np.full_like(values, lv[0])
    idx = np.clip(np.searchsorted(lv, values), 1, len(lv) - 1)
    lower, upper = lv[idx - 1], lv[idx]
    return np.where(values - lower <= upper - values, lower, upper)


def _check_number(name: str, value, *, integer: bool = False, minimum=0.0, strict=True) -> None:
    kind = Integral if integer else Real
    ok = isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > minimum if strict else value >= minimum)
    if not ok:
        what = "an integer" if integer else "a number"
        rel = ">" if strict else ">="
        raise ConfigError(f"{name}={value!r} must be {what} {rel} {minimum}")


def _seed_from(random_state) -> int:
    """A 63-bit seed from None (fresh entropy), an int or a numpy Generator."""
    if random_state is None:
        return int(np.random.default_rng().integers(2**63 - 1))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(2**63 - 1))
    if isinstance(random_state, Integral) and not isinstance(random_state, bool):
        return int(random_state)
    raise ConfigError(
        f"random_state={random_state!r} must be None, an int or a numpy.random.Generator"
    )


# ----------------------------------------------------------------- pairing distribution
@dataclass(frozen=True)
class PairingDistribution:
    """The truncated pairing distribution Q_trunc(x⁺ | x) of Eq. 6 / Algorithm 1.

    Row i describes source i: its top-K targets (indices into the target array), their
    probabilities renormalised over the K kept, and their ℓ1 costs. Fewer than K
    targets may be compatible (immutables must match): the unused slots have index −1
    and probability 0. A source with no compatible target has an all-zero row and
    ``has_target[i]`` False.
    """

    targets: np.ndarray  # (n_sources, K) int64 target indices, −1 for unused slots
    probs: np.ndarray  # (n_sources, K) float64 Q_trunc, each used row sums to 1
    cost: np.ndarray  # (n_sources, K) float64 ℓ1 costs (inf for unused slots)

    @property
    def has_target(self) -> np.ndarray:
        """(n_sources,) bool: the source has at least one compatible target."""
        return self.targets[:, 0] >= 0


def pairing_distribution(
    X_neg,
    X_pos,
    *,
    lam: float = 5.0,
    top_k: int = 1000,
    immutable=None,
) -> PairingDistribution:
    """Q(x⁺ | x) ∝ exp(−λ ‖x⁺ − x‖₁) over compatible targets, truncated to the top K.

    Parameters
    ----------
    X_neg : (n, d) sources x (D⁻).
    X_pos : (m, d) candidate targets x⁺ (D⁺).
    lam : λ ≥ 0, the cost coefficient, per unit of ℓ1 distance in the data's units.
    top_k : K, targets kept per source (the K cheapest; at most m).
    immutable : mask or indices of features a target must share exactly with its source.

    Vectorised over sources in chunks; the costs are exact float64.
    """
    X_neg = np.asarray(X_neg, dtype=np.float64)
    X_pos = np.asarray(X_pos, dtype=np.float64)
    if X_neg.ndim != 2 or X_pos.ndim != 2 or X_neg.shape[1] != X_pos.shape[1]:
        raise ConfigError(
            f"X_neg and X_pos must be 2-d with equal widths, got {X_neg.shape} and {X_pos.shape}"
        )
    _check_number("lam", lam, strict=False)
    _check_number("top_k", top_k, integer=True)
    d = X_neg.shape[1]
    imm = feature_mask(d, immutable, "immutable")
    n, m = len(X_neg), len(X_pos)
    k = min(int(top_k), m)
    targets = np.full((n, max(k, 1)), -1, dtype=np.int64)
    probs = np.zeros((n, max(k, 1)))
    costs = np.full((n, max(k, 1)), np.inf)
    if m == 0 or n == 0:
        return PairingDistribution(targets, probs, costs)
    pos = torch.from_numpy(X_pos)
    for start in range(0, n, _PAIR_CHUNK):
        neg = torch.from_numpy(X_neg[start : start + _PAIR_CHUNK])
        cost = torch.cdist(neg, pos, p=1.0)
        if imm.any():
            # exact equality, not a tolerance: an immutable feature cannot move at all
            same = (neg[:, None, imm] == pos[None, :, imm]).all(-1)
            cost = torch.where(same, cost, torch.inf)
        top_cost, top_idx = torch.topk(cost, k, dim=1, largest=False, sorted=True)
        valid = torch.isfinite(top_cost)
        logits = torch.where(valid, -lam * top_cost, -torch.inf)
        # softmax of an all −inf row is NaN: those sources simply get no target
        p = torch.softmax(logits, dim=1).nan_to_num(nan=0.0)
        rows = slice(start, start + len(neg))
        targets[rows] = torch.where(valid, top_idx, -1).numpy()
        probs[rows] = p.numpy()
        costs[rows] = top_cost.numpy()
    return PairingDistribution(targets, probs, costs)


# ------------------------------------------------------------------------- soft labels
class GenRe:
    """The GenRe recourse model: fit on labelled data and a classifier, then sample.

    Parameters (scikit-learn style: stored as given, validated by `fit`)
    ----------
    n_bins : int
        Bins per feature in the output layer (paper: 50).
    d_model : int
        Transformer embedding size (paper: 32).
    n_heads : int
        Attention heads (paper: 8); must divide d_model.
    n_layers : int
        Layers in the encoder and, separately, the decoder. The paper uses 16 + 16;
        the default 2 + 2 trains the Table 2 budgets (600–1,675 Adam steps of 256
        pairs) in 1–4.5 minutes on one CPU core, ~0.15 s per step (see
        ``analyses/results/genre_table2.md``).
    dim_feedforward : int
        Feed-forward width inside each layer (paper: 32).
    dropout : float
        Dropout inside the transformer layers while training (authors' code: 0.1).
    lam : float
        λ of Q (Eq. 6), per unit of ℓ1 distance in the data's units (paper: 5).
    gamma : float
        γ: targets are label-1 rows the classifier scores above γ (paper: 0.7).
    top_k : int
        K of Q's top-K truncation (authors' code: 1000).
    epochs : int
        Passes over the sources D⁻; each pass draws a fresh target per source.
    batch_size : int
        Source–target pairs per Adam step.
    lr : float
        Adam learning rate.
    immutable : mask, indices or None
        Features that never change: Q pairs only targets that match them and the
        sampler copies them from x.
    categorical : mask, indices or None
        Features whose sampled value is snapped to the nearest level observed in the
        training X (for binary features: rounded to 0 or 1).
    random_state : int, numpy Generator or None
        Seeds the initialisation, the minibatch order, the pair draws and dropout.

    Fitted attributes: ``module_`` (the `RecourseTransformer`), ``n_features_in_``,
    ``immutable_``, ``levels_`` ({feature: sorted levels}), ``n_sources_``,
    ``n_targets_``, ``loss_history_`` (mean Eq. 8 loss per epoch, nats per pair).
    """

    def __init__(
        self,
        *,
        n_bins: int = 50,
        d_model: int = 32,
        n_heads: int = 8,
        n_layers: int = 2,
        dim_feedforward: int = 32,
        dropout: float = 0.1,
        lam: float = 5.0,
        gamma: float = 0.7,
        top_k: int = 1000,
        epochs: int = 30,
        batch_size: int = 256,
        lr: float = 1e-3,
        immutable=None,
        categorical=None,
        random_state=0,
    ):
        self.n_bins = n_bins
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.dim_feedforward = dim_feedforward
        self.dropout = dropout
        self.lam = lam
        self.gamma = gamma
        self.top_k = top_k
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.immutable = immutable
        self.categorical = categorical
        self.random_state = random_state

    # -- hyperparameters ---------------------------------------------------------------
    _ARCH = ("n_bins", "d_model", "n_heads", "n_layers", "dim_feedforward", "dropout")
    _TRAIN = ("lam", "gamma", "top_k", "epochs", "batch_size", "lr")

    def _check_params(self) -> None:
        for name in ("n_bins", "d_model", "n_heads", "n_layers", "dim_feedforward"):
            _check_number(name, getattr(self, name), integer=True)
        for name in ("top_k", "epochs", "batch_size"):
            _check_number(name, getattr(self, name), integer=True, strict=name != "epochs")
        _check_number("lr", self.lr)
        _check_number("lam", self.lam, strict=False)
        _check_number("dropout", self.dropout, strict=False)
        if self.dropout >= 1:
            raise ConfigError(f"dropout={self.dropout!r} must be in [0, 1)")
        _check_number("gamma", self.gamma, strict=False)
        if not 0.5 <= self.gamma < 1:
            raise ConfigError(f"gamma={self.gamma!r} must be in [0.5, 1)")
        if self.d_model % self.n_heads:
            raise ConfigError(f"n_heads={self.n_heads} must divide d_model={self.d_model}")

    def _build(self, d: int) -> RecourseTransformer:
        return genre_model.RecourseTransformer(
            d,
            self.n_bins,
            self.d_model,
            self.n_heads,
            self.n_layers,
            self.dim_feedforward,
            self.dropout,
        )

    # -- training ------------------------------------------------------------------------
    def fit(self, X, y, classifier) -> GenRe:
        """Build D⁻, D⁺ and Q from (X, y) and `classifier`, then train R_θ (Algorithm 1).

        `y` holds labels with 1 = favourable; `classifier` is the deployed model h (an
        object with ``predict_proba`` or a callable returning h(x), see
        `score_function`). Raises ConfigError when D⁻ or D⁺ is empty or no source has a
        target with matching immutable features.
        """
        self._check_params()
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y)
        if X.ndim != 2 or y.shape != (len(X),):
            raise ConfigError(f"X must be (n, d) and y (n,), got {X.shape} and {y.shape}")
        if not np.isfinite(X).all():
            raise ConfigError("X contains NaN or infinite values")
        d = X.shape[1]
        score = score_function(classifier)(X)
        sources = X[(y == 0) & (score <= 0.5)]
        targets = X[(y == 1) & (score > self.gamma)]
        if len(sources) == 0 or len(targets) == 0:
            raise ConfigError(
                f"GenRe needs sources and targets: |D⁻| = {len(sources)} rows with y = 0 and "
                f"h ≤ 0.5, |D⁺| = {len(targets)} rows with y = 1 and h > gamma={self.gamma}"
            )
        self.immutable_ = feature_mask(d, self.immutable, "immutable")
        categorical = feature_mask(d, self.categorical, "categorical")
        self.levels_ = categorical_levels(X, categorical)
        self.n_features_in_ = d
        q = pairing_distribution(
            sources, targets, lam=self.lam, top_k=self.top_k, immutable=self.immutable_
        )
        keep = q.has_target
        if not keep.any():
            raise ConfigError("no source in D⁻ has a target in D⁺ with the same immutable features")
        self.n_sources_, self.n_targets_ = int(keep.sum()), len(targets)

        seed = _seed_from(self.random_state)
        gen = torch.Generator().manual_seed(seed)
        # nn.Module construction and dropout draw from torch's global generator; fork it
        # so training is reproducible from `random_state` and callers' streams stay put
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            module = self._build(d)
            module.reset_parameters(gen)
            self._set_bins(module, targets)
            self.loss_history_ = self._train(
                module, sources[keep], targets, q.targets[keep], q.probs[keep], gen
            )
        self.module_ = module.eval()
        return self

    def _set_bins(self, module: RecourseTransformer, targets: np.ndarray) -> None:
        """Uniform bins over each feature's range in D⁺ (§4.2)."""
        lo, hi = targets.min(0), targets.max(0)
        span = np.maximum(hi - lo, _MIN_SPAN)
        width = span / self.n_bins
        centres = lo[:, None] + (np.arange(self.n_bins) + 0.5) * width[:, None]
        module.centres.copy_(torch.from_numpy(centres))
        module.widths.copy_(torch.from_numpy(width))
        module.lo.copy_(torch.from_numpy(lo))
        module.span.copy_(torch.from_numpy(span))

    def _train(self, module, sources, targets, pair_idx, pair_prob, gen) -> list[float]:
        src = torch.as_tensor(sources, dtype=torch.float32)
        tgt = torch.as_tensor(targets, dtype=torch.float32)
        idx = torch.as_tensor(pair_idx).clamp_min(0)  # unused slots have probability 0
        prob = torch.as_tensor(pair_prob, dtype=torch.float32)
        # immutable features are copied at sampling time, so they need no loss
        learn = torch.as_tensor(~self.immutable_, dtype=torch.float32)
        opt = torch.optim.Adam(module.parameters(), lr=self.lr)
        history = []
        module.train()
        for _ in range(self.epochs):
            order = torch.randperm(len(src), generator=gen)
            total = 0.0
            for batch in order.split(self.batch_size):
                slot = torch.multinomial(prob[batch], 1, generator=gen).squeeze(1)
                x, x_plus = src[batch], tgt[idx[batch, slot]]
                loss = self.pair_loss(module, x, x_plus, learn).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(batch)
            history.append(total / len(src))
        return history

    @staticmethod
    def pair_loss(
        module: RecourseTransformer, x: torch.Tensor, x_plus: torch.Tensor, learn: torch.Tensor
    ) -> torch.Tensor:
        """Eq. 8 per pair: Σ_j Σ_k −soft_label_{j,k} log p_{j,k} over features in `learn`."""
        log_p = torch.log_softmax(module(x, x_plus), dim=-1)
        target = genre_model.soft_labels(x_plus, module.centres, module.widths)
        return -((target * log_p).sum(-1) * learn).sum(-1)

    # -- sampling ------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "module_"):
            raise NotFittedError("GenRe is not fitted yet; call fit(X, y, classifier) first")

    def _check_X(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ConfigError(f"X must have shape (n, {self.n_features_in_}), got {X.shape}")
        if not np.isfinite(X).all():
            raise ConfigError("X contains NaN or infinite values")
        return X

    def sample(
        self,
        X,
        n_samples: int = 10,
        *,
        temperature: float = 10.0,
        sigma: float = 0.0,
        random_state=None,
    ) -> np.ndarray:
        """Draw `n_samples` recourse instances x⁺ ~ R_θ(· | x) per row (Algorithm 2).

        Parameters
        ----------
        X : (n, d) negative instances.
        n_samples : samples per row.
        temperature : τ, multiplies the logits (τ > 1 sharpens towards the mode).
        sigma : σ ≥ 0, std of the Gaussian noise added to the chosen bin centre, in the
            feature's units.
        random_state : seeds the draws (int, numpy Generator or None for fresh entropy).

        Returns an (n, n_samples, d) float64 array. Immutable features equal x's and
        categorical features lie on their levels.
        """
        self._check_fitted()
        X = self._check_X(X)
        _check_number("n_samples", n_samples, integer=True)
        _check_number("temperature", temperature)
        _check_number("sigma", sigma, strict=False)
        gen = torch.Generator().manual_seed(_seed_from(random_state))
        out = np.empty((len(X), n_samples, self.n_features_in_))
        per_chunk = max(1, _SAMPLE_CHUNK // n_samples)
        with torch.no_grad():
            for start in range(0, len(X), per_chunk):
                chunk = X[start : start + per_chunk]
                out[start : start + len(chunk)] = self._sample_chunk(
                    chunk, n_samples, temperature, sigma, gen
                )
        return out

    def _sample_chunk(
        self, X: np.ndarray, n_samples: int, tau: float, sigma: float, gen: torch.Generator
    ) -> np.ndarray:
        """(m, n_samples, d) samples for the m rows of X.

        The network runs on blocks of rows small enough for the CPU cache; the random
        draws of each feature are made for the whole chunk at once, so the samples do
        not depend on the block size.
        """
        module = self.module_
        m, d = X.shape
        n = m * n_samples
        x = torch.as_tensor(X, dtype=torch.float32)
        rows_per_block = max(1, _DECODE_BLOCK // n_samples)
        blocks = []  # (slice of the n sequences, its cache)
        for start in range(0, m, rows_per_block):
            stop = min(start + rows_per_block, m)
            cache = module.start_decoding(module.encode(x[start:stop]), n_samples)
            blocks.append((slice(start * n_samples, stop * n_samples), cache))
        rows = np.repeat(X, n_samples, axis=0)
        x_plus = torch.zeros(n, d, dtype=torch.float64)
        centres = module.centres.double()
        token = (module.start + module.dec_position[0]).expand(n, -1)
        logits = torch.empty(n, module.centres.shape[1])
        for j in range(d):
            # every position goes through the cache: later features attend to it
            for seqs, cache in blocks:
                if j == 0:  # the same start token for all samples of a source
                    first = module.decode_step(token[seqs][::n_samples], cache, 0)
                    logits[seqs] = first.repeat_interleave(n_samples, 0)
                else:
                    logits[seqs] = module.decode_step(token[seqs], cache, j)
            if self.immutable_[j]:
                value = torch.as_tensor(rows[:, j])
            else:
                value = centres[j, genre_model.draw_bins(tau * logits, gen)]
                if sigma > 0:
                    value = value + sigma * torch.randn(n, generator=gen, dtype=torch.float64)
                if j in self.levels_:
                    value = torch.from_numpy(_nearest_level(value.numpy(), self.levels_[j]))
            x_plus[:, j] = value
            if j + 1 < d:
                token = module.embed(value.float()[:, None], slice(j, j + 1))[:, 0]
                token = token + module.dec_position[j + 1]
        return x_plus.numpy().reshape(m, n_samples, d)

    def recourse(
        self,
        X,
        classifier,
        *,
        k: int = 10,
        temperature: float = 10.0,
        sigma: float = 0.0,
        action_set: ActionSet | None = None,
        random_state=None,
    ) -> RecourseResult:
        """GenRe recourse: the best of `k` samples per row by the classifier's score.

        Parameters
        ----------
        X : (n, d) negative instances.
        classifier : the deployed model h (``predict_proba`` or a callable, see
            `score_function`) that ranks the samples.
        k : samples drawn per row (paper: 10).
        temperature, sigma : τ and σ of `sample` (paper: 10 and 0).
        action_set : if given, every sample's change δ = x⁺ − x is first projected onto
            the action set (so the result is feasible) and the best is chosen among the
            projected samples; ``cost`` is then the action set's cost. Otherwise cost
            is the ℓ1 norm of δ. The projection respects the action set's feature
            types (`ActionSet.project`), so a projected categorical or integer feature
            stays on its levels or steps even where the budget binds.
        random_state : seeds the draws.

        Returns a `RecourseResult`: ``delta`` (n, d), ``loss`` −log h(x + δ),
        ``success`` h(x + δ) > 0.5 and ``cost``.
        """
        self._check_fitted()
        X = self._check_X(X)
        samples = self.sample(X, k, temperature=temperature, sigma=sigma, random_state=random_state)
        return best_sample(X, samples, classifier, action_set)

    # -- persistence ---------------------------------------------------------------------
    def _config(self) -> dict:
        """Hyperparameters and fitted feature metadata, JSON-serialisable."""
        return {
            "format_version": _FORMAT_VERSION,
            "params": {name: getattr(self, name) for name in self._ARCH + self._TRAIN},
            "n_features": self.n_features_in_,
            "immutable": np.flatnonzero(self.immutable_).tolist(),
            # float64 → Python float → JSON repr round-trips exactly
            "levels": {str(j): lv.tolist() for j, lv in self.levels_.items()},
            "n_sources": self.n_sources_,
            "n_targets": self.n_targets_,
            "loss_history": self.loss_history_,
        }

    @classmethod
    def _from_config(cls, config: dict, weights: dict[str, torch.Tensor], where: str) -> GenRe:
        """A fitted model from `_config` and a ``state_dict``; ConfigError naming `where`."""
        try:
            version = config["format_version"]
            if version != _FORMAT_VERSION:
                raise ConfigError(f"{where}: format_version {version!r} is not supported")
            d = int(config["n_features"])
            model = cls(
                **config["params"],
                immutable=config["immutable"],
                categorical=[int(j) for j in config["levels"]],
            )
            model._check_params()
            model.n_features_in_ = d
            model.immutable_ = feature_mask(d, config["immutable"], "immutable")
            model.levels_ = {
                int(j): np.asarray(lv, dtype=np.float64) for j, lv in config["levels"].items()
            }
            model.n_sources_, model.n_targets_ = config["n_sources"], config["n_targets"]
            model.loss_history_ = list(config["loss_history"])
            module = model._build(d)
            module.load_state_dict(weights)
        except (KeyError, TypeError, ValueError, RuntimeError) as err:
            raise ConfigError(f"{where}: not a GenRe model ({err})") from None
        model.module_ = module.eval()
        return model

    def save(self, path: str | Path) -> Path:
        """Write the fitted model to directory `path` (created if needed).

        Two files: ``genre.json`` (hyperparameters and feature metadata) and
        ``genre.pt`` (the module's ``state_dict``, plain tensors, loadable with
        ``torch.load(weights_only=True)``). Nothing is pickled. Returns the directory.
        """
        self._check_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / CONFIG_FILE).write_text(json.dumps(self._config(), indent=2))
        torch.save(self.module_.state_dict(), path / WEIGHTS_FILE)
        return path

    @classmethod
    def load(cls, path: str | Path) -> GenRe:
        """Load a model written by `save` (weights through ``torch.load(weights_only=True)``).

        Raises ConfigError naming the file when it is missing or not a GenRe save.
        """
        path = Path(path)
        config_file, weights_file = path / CONFIG_FILE, path / WEIGHTS_FILE
        for f in (config_file, weights_file):
            if not f.is_file():
                raise ConfigError(f"{f}: not found (expected a directory written by GenRe.save)")
        try:
            config = json.loads(config_file.read_text())
        except json.JSONDecodeError as err:
            raise ConfigError(f"{config_file}: not a GenRe configuration ({err})") from None
        if not isinstance(config, dict) or "format_version" not in config:
            raise ConfigError(f"{config_file}: not a GenRe configuration (no format_version)")
        weights = torch.load(weights_file, weights_only=True)
        return cls._from_config(config, weights, str(config_file))

    def get_state(self) -> dict:
        """The fitted model as plain data for checkpoints: ``config`` (a JSON string of the
        hyperparameters and feature metadata) and ``weights`` (the ``state_dict`` as
        numpy arrays). Nothing needs pickling; `from_state` restores it exactly."""
        self._check_fitted()
        weights = {k: v.detach().numpy().copy() for k, v in self.module_.state_dict().items()}
        return {"config": json.dumps(self._config()), "weights": weights}

    @classmethod
    def from_state(cls, state: dict) -> GenRe:
        """The model `get_state` described; ConfigError if `state` is not one."""
        try:
            config = json.loads(state["config"])
            weights = {k: torch.from_numpy(np.array(v)) for k, v in state["weights"].items()}
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as err:
            raise ConfigError(f"GenRe state: not a GenRe model ({err!r})") from None
        return cls._from_config(config, weights, "GenRe state")


def __getattr__(name: str):
    # the network's pieces, re-exported here: torch is imported when one is first read
    if name in ("RecourseTransformer", "soft_labels"):
        return getattr(genre_model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "GenRe",
    "PairingDistribution",
    "RecourseTransformer",
    "ScoreFn",
    "categorical_levels",
    "pairing_distribution",
    "score_function",
    "snap_to_levels",
    "soft_labels",
]
