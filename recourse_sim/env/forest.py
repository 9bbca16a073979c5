"""A fitted calibrated random forest as plain arrays, predicting without scikit-learn.

The outcome oracle (`recourse_sim.env.oracle`) is fitted with scikit-learn's
`RandomForestClassifier` inside a sigmoid `CalibratedClassifierCV`. `CalibratedForest`
holds what that model predicts with (every tree's nodes, every calibrator's sigmoid)
and predicts as scikit-learn does, bit for bit, in vectorised numpy: all trees of a
forest walk down together, one level per pass over the (tree, row) pairs still inside
the trees. It spares a process that only loads a cached oracle the import of
scikit-learn (about a second), is about three times as fast as scikit-learn's
per-tree loop on a round's rows, and is stored as plain arrays (`arrays`,
`from_arrays`), so a cache file cannot hold code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

__all__ = ["CalibratedForest", "Forest"]


@dataclass(frozen=True, eq=False)
class Forest:
    """A random forest's trees end to end in scikit-learn's node layout: node i of the
    whole forest tests ``X[:, feature[i]] <= threshold[i]`` and goes to ``left[i]`` or
    ``right[i]`` (−1 at a leaf, where ``value[i]`` holds the class shares)."""

    roots: np.ndarray  # (trees,) each tree's first node
    left: np.ndarray  # (nodes,) int64
    right: np.ndarray  # (nodes,) int64
    feature: np.ndarray  # (nodes,) int64
    threshold: np.ndarray  # (nodes,) float64
    value: np.ndarray  # (nodes, classes) float64

    @classmethod
    def from_sklearn(cls, forest) -> Forest:
        """From a fitted `sklearn.ensemble.RandomForestClassifier`."""
        trees = [t.tree_ for t in forest.estimators_]
        starts = np.cumsum([0] + [t.node_count for t in trees])[:-1]

        def shifted(children, start):
            return np.where(children >= 0, children + start, -1).astype(np.int64)

        value = np.concatenate([t.value[:, 0, :] for t in trees]).astype(np.float64)
        totals = value.sum(1, keepdims=True)
        if not np.allclose(totals, 1.0, atol=1e-9):
            # leaf counts (scikit-learn < 1.4 kept them): the shares its trees divide by
            value = value / np.where(totals == 0, 1.0, totals)
        return cls(
            roots=starts.astype(np.int64),
            left=np.concatenate(
                [shifted(t.children_left, s) for t, s in zip(trees, starts, strict=True)]
            ),
            right=np.concatenate(
                [shifted(t.children_right, s) for t, s in zip(trees, starts, strict=True)]
            ),
            feature=np.concatenate([t.feature for t in trees]).astype(np.int64),
            threshold=np.concatenate([t.threshold for t in trees]).astype(np.float64),
            value=value,
        )

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities (n, classes): the mean of the trees' leaf shares."""
        n, d = X.shape
        # the trees compare float32 features (scikit-learn's input dtype) with float64
        # thresholds
        flat = np.ascontiguousarray(X, dtype=np.float32).astype(np.float64).ravel()
        trees = len(self.roots)
        node = np.repeat(self.roots, n)  # tree-major: pair t·n + i is tree t, row i
        offset = np.tile(np.arange(n, dtype=np.int64) * d, trees)
        inside = np.flatnonzero(self.left[node] >= 0)
        while inside.size:
            here = node[inside]
            go_left = flat[offset[inside] + self.feature[here]] <= self.threshold[here]
            there = np.where(go_left, self.left[here], self.right[here])
            node[inside] = there
            inside = inside[self.left[there] >= 0]
        shares = self.value[node].reshape(trees, n, -1)
        out = np.zeros((n, self.value.shape[1]))
        for tree in shares:  # summed tree by tree, in scikit-learn's order
            out += tree
        out /= trees
        return out


@dataclass(frozen=True, eq=False)
class CalibratedForest:
    """`CalibratedClassifierCV(RandomForestClassifier(...), method="sigmoid")` as fitted:
    one forest per calibration fold; column j of a fold's forest output is calibrated
    by expit(−(a·p + b)) into class ``columns[j]``; the folds' probabilities averaged."""

    forests: list[Forest]
    a: np.ndarray  # (folds, calibrated columns)
    b: np.ndarray  # (folds, calibrated columns)
    columns: np.ndarray  # (folds, calibrated columns) int64 class of each column
    classes_: np.ndarray  # (classes,)

    @classmethod
    def from_sklearn(cls, model) -> CalibratedForest:
        """From a fitted sigmoid `sklearn.calibration.CalibratedClassifierCV` over random
        forests."""
        folds = model.calibrated_classifiers_
        classes = np.asarray(model.classes_)
        columns = []
        for fold in folds:
            # as scikit-learn's _CalibratedClassifier: binary calibrates class 1 only
            found = np.searchsorted(classes, fold.estimator.classes_)
            columns.append(found[1:] if len(classes) == 2 else found)
        return cls(
            forests=[Forest.from_sklearn(fold.estimator) for fold in folds],
            a=np.array([[c.a_ for c in fold.calibrators] for fold in folds], np.float64),
            b=np.array([[c.b_ for c in fold.calibrators] for fold in folds], np.float64),
            columns=np.array(columns, np.int64),
            classes_=np.arange(len(classes)),
        )

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        n, k = len(X), len(self.classes_)
        mean = np.zeros((n, k))
        for forest, a, b, columns in zip(self.forests, self.a, self.b, self.columns, strict=True):
            scores = forest.predict_proba(X)
            if k == 2:
                scores = scores[:, 1:]
            proba = np.zeros((n, k))
            for j, column in enumerate(columns):
                proba[:, column] = expit(-(a[j] * scores[:, j] + b[j]))
            if k == 2:
                proba[:, 0] = 1.0 - proba[:, 1]
            else:
                total = proba.sum(1)[:, None]
                proba = np.divide(proba, total, out=np.full_like(proba, 1 / k), where=total != 0)
            proba[(1.0 < proba) & (proba <= 1.0 + 1e-5)] = 1.0
            mean += proba
        mean /= len(self.forests)
        return mean

    # -- plain arrays (the oracle cache) -------------------------------------------------
    _FOREST_FIELDS = ("roots", "left", "right", "feature", "threshold", "value")

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """The model as named plain arrays (keys start with `prefix`)."""
        out = {
            f"{prefix}a": self.a,
            f"{prefix}b": self.b,
            f"{prefix}columns": self.columns,
            f"{prefix}classes": self.classes_,
        }
        for i, forest in enumerate(self.forests):
            for name in self._FOREST_FIELDS:
                out[f"{prefix}f{i}_{name}"] = getattr(forest, name)
        return out

    @classmethod
    def from_arrays(
        cls,
        arrays: dict[str, np.ndarray],
        prefix: str,
        d: int,
        *,
        folds: int | None = None,
        trees: int | None = None,
        max_tree_nodes: int | None = None,
        feature_range: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> CalibratedForest:
        """The model `arrays` stored under `prefix`, for `d` features; ValueError saying
        what is wrong if they do not form a fitted one (a damaged, edited or foreign
        file): shapes and types, every walk down a tree ending at a leaf, finite
        thresholds, class shares in [0, 1] summing to 1, finite calibrators of at most
        `MAX_CALIBRATION` in size; and, where given, `folds` calibration folds, `trees`
        trees per forest, at most `max_tree_nodes` nodes per tree and every split
        threshold inside `feature_range` (each feature's lowest and highest value: a
        split lies between two values of the data it was fit on)."""
        a, b = arrays[f"{prefix}a"], arrays[f"{prefix}b"]
        columns, classes = arrays[f"{prefix}columns"], arrays[f"{prefix}classes"]
        k = len(classes)
        if (
            a.ndim != 2
            or a.shape != b.shape
            or columns.shape != a.shape
            or a.dtype != np.float64
            or b.dtype != np.float64
            or k < 2
            or not np.array_equal(classes, np.arange(k))
            or columns.dtype != np.int64
            or ((columns < 0) | (columns >= k)).any()
        ):
            raise ValueError("calibrators of the wrong shape")
        if not (np.isfinite(a).all() and np.isfinite(b).all()):
            raise ValueError("a calibrator coefficient is not finite")
        if max(np.abs(a).max(initial=0), np.abs(b).max(initial=0)) > MAX_CALIBRATION:
            raise ValueError(f"a calibrator coefficient is larger than {MAX_CALIBRATION:g}")
        if folds is not None and len(a) != folds:
            raise ValueError(f"{len(a)} calibration folds, not {folds}")
        forests = []
        for i in range(len(a)):
            f = {name: arrays[f"{prefix}f{i}_{name}"] for name in cls._FOREST_FIELDS}
            forests.append(Forest(**f))
            _check_forest(forests[-1], d, k, trees, max_tree_nodes, feature_range)
        if len(forests) == 0 or a.shape[1] != (1 if k == 2 else k):
            raise ValueError("folds")
        return cls(forests=forests, a=a, b=b, columns=columns, classes_=classes)


# Platt's sigmoid on scores in [0, 1] with smoothed targets needs slopes of a few tens
# to a few thousands; far larger is no fitted calibrator
MAX_CALIBRATION = 1e6


def _check_forest(
    forest: Forest,
    d: int,
    k: int,
    trees: int | None = None,
    max_tree_nodes: int | None = None,
    feature_range: tuple[np.ndarray, np.ndarray] | None = None,
) -> None:
    """ValueError unless `forest` is a well-formed forest on d features and k classes,
    every child after its parent in its own tree (so every walk down ends at a leaf),
    with finite thresholds and class shares (and `trees` trees of at most
    `max_tree_nodes` nodes each, where given)."""
    nodes = len(forest.left)
    node = np.arange(nodes)
    inner = forest.left >= 0
    ok = (
        forest.left.dtype == forest.right.dtype == forest.feature.dtype == np.int64
        and forest.roots.dtype == np.int64
        and forest.threshold.dtype == forest.value.dtype == np.float64
        and forest.left.shape == forest.right.shape == forest.feature.shape == (nodes,)
        and forest.threshold.shape == (nodes,)
        and forest.value.shape == (nodes, k)
        and forest.roots.ndim == 1
        and len(forest.roots) > 0
        and forest.roots[0] == 0
        and (np.diff(forest.roots) > 0).all()
        and forest.roots[-1] < nodes
        and ((forest.right >= 0) == inner).all()
        and (forest.left[inner] > node[inner]).all()
        and (forest.right[inner] > node[inner]).all()
        and (forest.left[inner] < nodes).all()
        and (forest.right[inner] < nodes).all()
        and ((forest.feature[inner] >= 0) & (forest.feature[inner] < d)).all()
    )
    if not ok:
        raise ValueError("a tree of the wrong shape")
    tree = np.searchsorted(forest.roots, node, side="right") - 1
    if not (
        (tree[forest.left[inner]] == tree[inner]).all()
        and (tree[forest.right[inner]] == tree[inner]).all()
    ):
        raise ValueError("a node's child is in another tree")
    if trees is not None and len(forest.roots) != trees:
        raise ValueError(f"{len(forest.roots)} trees, not {trees}")
    sizes = np.diff(np.append(forest.roots, nodes))
    if max_tree_nodes is not None and sizes.max() > max_tree_nodes:
        raise ValueError(f"a tree of {sizes.max():,} nodes (at most {max_tree_nodes:,})")
    if not np.isfinite(forest.threshold).all():
        raise ValueError("a threshold is not finite")
    if feature_range is not None:
        low, high = feature_range
        split, at = forest.threshold[inner], forest.feature[inner]
        if ((split < low[at]) | (split > high[at])).any():
            raise ValueError("a threshold outside its feature's values")
    value = forest.value
    if not (np.isfinite(value).all() and (value >= 0).all() and (value <= 1).all()):
        raise ValueError("a class share is not in [0, 1]")
    if not np.allclose(value.sum(1), 1.0, atol=1e-6):
        raise ValueError("a node's class shares do not sum to 1")
