"""The real classification datasets: sizes, types, labels and recourse metadata."""

from __future__ import annotations

import numpy as np
import pytest

from recourse_sim.data import DATASET_NAMES, load
from recourse_sim.errors import ConfigError

# Exact sizes after preprocessing (documented in recourse_sim/data/tabular.py).
EXPECTED = {
    # name: (rows, features, classes, rows with label 1)
    "adult": (45_222, 12, 2, 11_208),
    "compas": (6_172, 9, 2, 3_363),
    "compas_score": (6_172, 7, 2, 3_421),
    "german": (1_000, 13, 2, 700),
    "iris": (150, 4, 3, 50),
    "digits": (1_797, 64, 10, 182),
}

# Ross et al. (2021), Appendix A.3: actionable features and direction constraints.
ROSS_ACTIONABLE = {
    "adult": ({"education_num", "hours_per_week"}, {"education_num"}),
    "compas": ({"priors_count"}, set()),
    "compas_score": ({"priors_count"}, set()),
    "german": ({"age", "credit_amount"}, {"age"}),
}

PROTECTED = {
    "adult": "sex_male",
    "compas": "race_white",
    "compas_score": "race_white",
    "german": "sex_male",
}


def test_names_cover_expected() -> None:
    assert set(DATASET_NAMES) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shapes_and_types(name: str) -> None:
    ds = load(name)
    rows, d, k, positives = EXPECTED[name]
    assert ds.name == name
    assert ds.X.shape == (rows, d) and ds.X.dtype == np.float64
    assert ds.y.shape == (rows,) and ds.y.dtype == np.int64
    assert np.isfinite(ds.X).all()
    assert set(np.unique(ds.y)) == set(range(k)) and ds.n_classes == k
    assert int((ds.y == 1).sum()) == positives
    assert len(ds.feature_names) == len(set(ds.feature_names)) == d
    for mask in (ds.categorical, ds.immutable, ds.increase_only, ds.decrease_only):
        assert mask.shape == (d,) and mask.dtype == np.bool_
    # A direction constraint only makes sense on a feature that may change.
    assert not (ds.immutable & (ds.increase_only | ds.decrease_only)).any()
    assert not (ds.increase_only & ds.decrease_only).any()
    # Binary features really are 0/1.
    assert np.isin(ds.X[:, ds.categorical], [0.0, 1.0]).all()


@pytest.mark.parametrize("name", sorted(ROSS_ACTIONABLE))
def test_actionability_follows_ross(name: str) -> None:
    ds = load(name)
    actionable, increase = ROSS_ACTIONABLE[name]
    names = np.array(ds.feature_names)
    assert set(names[ds.actionable]) == actionable
    assert set(names[ds.increase_only]) == increase
    assert not ds.decrease_only.any()
    assert ds.immutable[ds.feature_names.index(PROTECTED[name])]


@pytest.mark.parametrize("name", sorted(PROTECTED))
def test_group_is_the_protected_binary_feature(name: str) -> None:
    ds = load(name)
    assert ds.group is not None and ds.group_labels is not None and ds.group_name
    assert ds.group.dtype == np.int64 and ds.group.shape == ds.y.shape
    np.testing.assert_array_equal(ds.group, ds.X[:, ds.feature_names.index(PROTECTED[name])])
    assert set(np.unique(ds.group)) == {0, 1} and len(ds.group_labels) == 2


def test_group_counts() -> None:
    assert np.bincount(load("adult").group).tolist() == [14_695, 30_527]  # female, male
    assert np.bincount(load("compas").group).tolist() == [4_069, 2_103]  # non-white, white
    assert np.bincount(load("german").group).tolist() == [310, 690]  # female, male


def test_compas_never_uses_the_score_or_the_outcome_as_a_feature() -> None:
    names = set(load("compas").feature_names)
    assert not names & {"decile_score", "score_text", "is_recid", "two_year_recid"}


def test_sklearn_datasets_have_no_group_and_are_fully_actionable() -> None:
    for name in ("iris", "digits"):
        ds = load(name)
        assert ds.group is None and ds.group_name is None and ds.group_labels is None
        assert ds.actionable.all()


def test_cached_and_read_only() -> None:
    ds = load("german")
    assert load("german") is ds
    for arr in (ds.X, ds.y, ds.group, ds.immutable):
        assert not arr.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        ds.X[0, 0] = 1.0


def test_frame() -> None:
    ds = load("compas")
    df = ds.frame()
    assert list(df.columns) == [*ds.feature_names, ds.target_name, "race"]
    assert len(df) == 6_172
    assert set(df["race"].unique()) == {"white", "non-white"}


@pytest.mark.parametrize("bad", ["mnist", "Adult", "", 3])
def test_unknown_name_lists_valid_names(bad: object) -> None:
    valid = "valid names: adult, compas, compas_score, digits, german, iris"
    with pytest.raises(ConfigError, match=valid):
        load(bad)  # type: ignore[arg-type]
