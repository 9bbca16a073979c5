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
flat node arrays and each calibrator's two sigmoid coefficients (`CalibratedForest`).
Loading checks their shapes and that every child node follows its parent (so a file
cannot make prediction loop), never executes code from the file and needs no
scikit-learn: `CalibratedForest` predicts as scikit-learn does, bit for bit (tested),
and about three times as fast. A damaged or foreign file is refit and replaced.
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

from recourse_sim.checkpoint import atomic_write_bytes
from recourse_sim.env.forest import CalibratedForest
from recourse_sim.errors import ConfigError, DataError
from recourse_sim.scenarios import OracleSpec

__all__ = ["ENTRY_POINT_GROUP", "Oracle", "cache_dir", "fit_oracle", "register_outcome_model"]

ENTRY_POINT_GROUP = "recourse_sim.outcome_models"  # see recourse_sim.plugins

CV_FOLDS = 3  # CalibratedClassifierCV's folds: every class needs this many rows per model
FORMAT = 4  # bump when the cached content changes meaning

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
    model = _outcome_model(name)(X.copy(), y.copy())
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
    oracle = _load(path, len(y), X.shape[1]) if path is not None else None
    if oracle is None:
        oracle = _fit(X, y, spec)
        if path is not None:
            _store(path, oracle)
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


def _store(path: Path, oracle: Oracle) -> None:
    """Write the oracle to the cache as plain arrays; a cache that cannot be written is
    skipped."""
    arrays = {"fold": np.zeros(0, np.int64) if oracle.fold is None else oracle.fold}
    for i, model in enumerate(oracle.models):
        arrays.update(model.arrays(f"m{i}_"))
    buffer = io.BytesIO()
    np.savez(buffer, format=np.array(FORMAT), models=np.array(len(oracle.models)), **arrays)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buffer.getvalue())
    except OSError as e:
        warnings.warn(f"oracle cache not written ({e.strerror}: {path})", stacklevel=3)


def _load(path: Path, n_rows: int, d: int) -> Oracle | None:
    """The cached oracle at `path` for `n_rows` rows of `d` features, or None if there is
    none or it is not one of ours."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
        fold = arrays["fold"]
        n_models = int(arrays["models"])
        if (
            int(arrays["format"]) != FORMAT
            or fold.dtype != np.int64
            or fold.size not in (0, n_rows)
            or n_models != (1 if fold.size == 0 else 2)
            or ((fold < 0) | (fold >= n_models)).any()
        ):
            raise ValueError("wrong shape")
        models = [CalibratedForest.from_arrays(arrays, f"m{i}_", d) for i in range(n_models)]
    except Exception:  # damaged or foreign: refit and replace
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    return Oracle(models, None if fold.size == 0 else fold)
