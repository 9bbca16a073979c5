"""The outcome oracle of tabular worlds: P(true outcome | true features).

A calibrated random forest (scikit-learn's `RandomForestClassifier` inside a sigmoid
`CalibratedClassifierCV`). With ``fit: cross`` (the default) the rows are split into two
class-stratified halves and each half's outcomes come from the forest fit on the *other*
half, so no row is scored by a model that saw it (a forest fit on every row reproduces
its training labels: in-sample AUC well above the held-out one). ``fit: all`` fits one
forest on every row.

Fitted oracles are kept in memory and on disk, keyed by a hash of the data, the oracle
settings and the scikit-learn version, so a second process, `gym.make` or sweep worker
loads one instead of refitting. The disk cache lives in ``$RECOURSE_SIM_CACHE`` (``off``:
no disk cache), else ``$XDG_CACHE_HOME/recourse-sim``, else ``~/.cache/recourse-sim``.
A cached oracle is an ``.npz`` of plain arrays (no pickles): each forest's trees as
flat node arrays and each calibrator's two sigmoid coefficients (`CalibratedForest`),
with the cache key and a SHA-256 of all arrays. Loading never executes code from the
file and needs no scikit-learn (`CalibratedForest` predicts as scikit-learn does, bit
for bit (tested), and about three times as fast), and verifies everything first: the
digest and key; the size against the memory budget; each row's half, recomputed from
the labels and seed; the number of calibration folds and trees; at most 2n − 1 nodes
per tree, every child after its parent in its own tree (so prediction cannot loop);
finite split thresholds within the features' values; class shares in [0, 1] summing
to 1; finite calibrators. A file that fails is never used: it is removed, with one
warning, and the oracle is refit and stored again.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from recourse_sim.checkpoint import atomic_write_bytes, read_bounded
from recourse_sim.env.forest import CalibratedForest
from recourse_sim.errors import ConfigError, DataError
from recourse_sim.scenarios import OracleSpec

__all__ = ["ENTRY_POINT_GROUP", "Oracle", "cache_dir", "fit_oracle", "register_outcome_model"]

ENTRY_POINT_GROUP = "recourse_sim.outcome_models"  # see recourse_sim.plugins

CV_FOLDS = 3  # CalibratedClassifierCV's folds: every class needs this many rows per model
FORMAT = 5  # bump when the cached content changes meaning

_MEMORY: dict[str, Oracle] = {}
_MAX_MEMORY = 8

# Outcome models a scenario can name (`world.oracle.model`): name -> factory(X, y)
# returning a fitted object with predict_proba (columns: the classes 0 … k−1).
OUTCOME_MODELS: dict[str, Callable[[np.ndarray, np.ndarray], Any]] = {}


def register_outcome_model(name: str, factory: Callable[[np.ndarray, np.ndarray], Any]):
    """Let scenarios name `factory` as ``world.oracle.model: NAME`` (in this process;
    an installed package can instead declare an entry point in the group
    ``recourse_sim.outcome_models``)."""
    OUTCOME_MODELS[name] = factory
    return factory


def _outcome_model(name: str) -> Callable[[np.ndarray, np.ndarray], Any]:
    from recourse_sim.plugins import entry_point, entry_point_names

    if name in OUTCOME_MODELS:
        return OUTCOME_MODELS[name]
    factory = entry_point(ENTRY_POINT_GROUP, name)
    if factory is not None:
        return factory
    known = sorted({*OUTCOME_MODELS, *entry_point_names(ENTRY_POINT_GROUP)})
    raise ConfigError(
        f"world.oracle.model: no outcome model named {name!r} is registered "
        f"(registered: {', '.join(known) if known else 'none'})"
    )


def _named_oracle(name: str, X: np.ndarray, y: np.ndarray) -> Oracle:
    """The scenario's own outcome model, fit by its factory and checked on the data."""
    from recourse_sim.plugins import plugin_error, qualified_name

    factory = _outcome_model(name)
    try:
        model = factory(X.copy(), y.copy())
    except Exception as e:  # a plugin's own failure, named
        where = qualified_name(factory)
        raise plugin_error(ENTRY_POINT_GROUP, name, where, "failed fitting", e) from None
    n_classes = int(y.max()) + 1
    try:
        p = np.asarray(model.predict_proba(X[:5]), np.float64)
    except Exception as e:  # a plugin's own failure, named
        raise ConfigError(f"world.oracle.model {name!r}: predict_proba failed ({e})") from None
    if p.shape != (min(5, len(X)), n_classes) or not np.allclose(p.sum(1), 1.0, atol=1e-6):
        raise ConfigError(
            f"world.oracle.model {name!r}: predict_proba must return one probability per "
            f"class (shape (n, {n_classes}), rows summing to 1), got shape {p.shape}"
        )
    return Oracle([model], None)


class Oracle:
    """One model per fold; row i of the data is scored by the model of fold ``fold[i]``,
    which was fit without it (``fold`` is None for a single model fit on every row)."""

    def __init__(self, models: list, fold: np.ndarray | None):
        self.models = models
        self.fold = fold

    def predict_proba(self, rows: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Class probabilities at features X of the people drawn from data rows `rows`."""
        if self.fold is None:
            return self.models[0].predict_proba(X)
        fold = self.fold[rows]
        out = np.empty((len(X), len(self.models[0].classes_)))
        for k, model in enumerate(self.models):
            mine = fold == k
            if mine.any():
                out[mine] = model.predict_proba(X[mine])
        return out


def cache_dir() -> Path | None:
    """Where fitted oracles are kept (None: ``RECOURSE_SIM_CACHE=off``)."""
    chosen = os.environ.get("RECOURSE_SIM_CACHE")
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "0", "none") else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "recourse-sim"


def fit_oracle(X: np.ndarray, y: np.ndarray, spec: OracleSpec) -> Oracle:
    """The oracle of data (X, y) under `spec`, from memory, the disk cache or fitted."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.int64)
    if spec.model is not None:  # the scenario's own model: fitted by it, not cached
        return _named_oracle(spec.model, X, y)
    key = hashlib.sha256()
    # the version from the package's metadata: importing scikit-learn takes a second
    fitted_by = importlib.metadata.version("scikit-learn")
    for part in (X.shape, X.tobytes(), y.tobytes(), spec.model_dump_json(), fitted_by):
        key.update(str(part).encode() if not isinstance(part, bytes) else part)
    key.update(f"format {FORMAT}".encode())
    digest = key.hexdigest()
    if digest in _MEMORY:
        return _MEMORY[digest]
    folder = cache_dir()
    path = folder / "oracles" / f"{digest}.npz" if folder is not None else None
    oracle = _load(path, digest, X, y, spec) if path is not None else None
    if oracle is None:
        oracle = _fit(X, y, spec)
        if path is not None:
            _store(path, oracle, digest)
    if len(_MEMORY) >= _MAX_MEMORY:
        _MEMORY.pop(next(iter(_MEMORY)))
    _MEMORY[digest] = oracle
    return oracle


def _fit(X: np.ndarray, y: np.ndarray, spec: OracleSpec) -> Oracle:
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.ensemble import RandomForestClassifier

    classes, counts = np.unique(y, return_counts=True)
    halves = 2 if spec.fit == "cross" else 1
    if counts.min() < CV_FOLDS * halves:
        raise DataError(
            f"world.oracle: class {classes[counts.argmin()]} has {counts.min()} rows; "
            f"fit: {spec.fit} needs at least {CV_FOLDS * halves} of every class "
            "(or use outcome: label)"
        )
    fold = _stratified_halves(y, spec.seed) if halves == 2 else None
    models = []
    for k in range(halves):
        train = np.ones(len(y), bool) if fold is None else fold != k
        forest = RandomForestClassifier(
            n_estimators=spec.trees,
            min_samples_leaf=spec.min_samples_leaf,
            random_state=spec.seed,
            n_jobs=1,
        )
        model = CalibratedClassifierCV(forest, method="sigmoid", cv=CV_FOLDS)
        models.append(CalibratedForest.from_sklearn(model.fit(X[train], y[train])))
    return Oracle(models, fold)


def _stratified_halves(y: np.ndarray, seed: int) -> np.ndarray:
    """Fold 0 or 1 per row: each class's rows shuffled and dealt alternately."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(y), np.int64)
    for c in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == c))
        fold[rows] = np.arange(len(rows)) % 2
    return fold


def _arrays_sha256(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of named arrays: every name, dtype, shape and the bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}|{value.dtype.str}|{value.shape}|".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def _store(path: Path, oracle: Oracle, key: str) -> None:
    """Write the oracle to the cache as plain arrays with the cache key they belong to
    and a SHA-256 of them all; a cache that cannot be written is skipped."""
    arrays = {"fold": np.zeros(0, np.int64) if oracle.fold is None else oracle.fold}
    for i, model in enumerate(oracle.models):
        arrays.update(model.arrays(f"m{i}_"))
    arrays.update(format=np.array(FORMAT), models=np.array(len(oracle.models)), key=np.array(key))
    buffer = io.BytesIO()
    np.savez(buffer, sha256=np.array(_arrays_sha256(arrays)), **arrays)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buffer.getvalue())
    except (OSError, ConfigError) as e:  # (ConfigError: a link in the cache's place)
        reason = getattr(e, "strerror", None) or e
        warnings.warn(f"oracle cache not written ({reason}: {path})", stacklevel=3)


def _load(path: Path, key: str, X: np.ndarray, y: np.ndarray, spec: OracleSpec) -> Oracle | None:
    """The cached oracle at `path` for data (X, y) fitted under `spec`, or None if there
    is none. A file that fails a check (damaged, edited, foreign or too large) is removed,
    with a warning, so the oracle is refitted: a wrong oracle would silently change every
    outcome of the world."""
    if not path.is_file():
        return None
    try:
        oracle = _verified(path, key, X, y, spec)
    except Exception as e:  # damaged or foreign: never used
        warnings.warn(
            f"oracle cache {path} failed its check ({str(e)[:120] or type(e).__name__}); "
            "refitting the oracle",
            stacklevel=3,
        )
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    return oracle


def _verified(path: Path, key: str, X: np.ndarray, y: np.ndarray, spec: OracleSpec) -> Oracle:
    """The oracle stored at `path`; ValueError saying what is wrong unless the file holds
    exactly what `_store` wrote for this key and every value is one a fitted oracle has."""
    from recourse_sim.budget import memory_limit

    size, allowed = path.stat().st_size, memory_limit() // 4
    if size > allowed:  # loaded, it takes its size once more while checked
        raise ValueError(f"{size:,} bytes, more than the {allowed:,} this run may use")
    data = read_bounded(path, allowed, "oracle cache", DataError)
    with np.load(io.BytesIO(data), allow_pickle=False) as stored:
        arrays = {name: stored[name] for name in stored.files}
    stored_sha256 = str(arrays.pop("sha256", ""))
    if stored_sha256 != _arrays_sha256(arrays):
        raise ValueError("its SHA-256 digest does not match")
    if int(arrays["format"]) != FORMAT or str(arrays["key"]) != key:
        raise ValueError("written for other data or settings")
    # the halves are a function of the labels and the seed: recompute them (a swapped
    # fold array would score each row by the model that saw it)
    fold = arrays["fold"]
    expected = _stratified_halves(y, spec.seed) if spec.fit == "cross" else np.zeros(0, np.int64)
    if fold.dtype != np.int64 or not np.array_equal(fold, expected):
        raise ValueError("the fold of each row is not the one of these data")
    n_models = int(arrays["models"])
    if n_models != (2 if spec.fit == "cross" else 1):
        raise ValueError("wrong number of models")
    # a tree fit on n rows has at most 2n - 1 nodes (every leaf holds a row); its splits
    # lie between values of the (float32) features it saw
    seen = X.astype(np.float32).astype(np.float64)
    models = [
        CalibratedForest.from_arrays(
            arrays,
            f"m{i}_",
            X.shape[1],
            folds=CV_FOLDS,
            trees=spec.trees,
            max_tree_nodes=2 * len(y) - 1,
            feature_range=(seen.min(0), seen.max(0)),
        )
        for i in range(n_models)
    ]
    return Oracle(models, None if fold.size == 0 else fold)
