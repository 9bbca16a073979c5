"""Real classification datasets: iris, digits, Adult, COMPAS and German credit.

`load(name)` returns a `Dataset` whose arrays are read-only and shared between
calls (loading is cached): copy an array before changing it.

Preprocessing follows the recourse benchmarks (CARLA; Ross et al., 2021,
Appendix A.2) and the feature set is kept small, numeric and documented:
binary features are named ``<column>_<level>`` and are 1 when the level holds.
Actionability follows Ross et al., Appendix A.3: the features it lists are
actionable (with the direction it states), every other feature is immutable.
The label is 1 for the favourable outcome. Each feature has a type
(`Dataset.feature_types`, which recourse respects): the 0/1 features are binary, and
every year, month, day, count, currency amount and 1..k code is integer (whole numbers);
nothing in these tables is continuous.

adult (45,222 rows = 30,162 from adult.data + 15,060 from adult.test, after
    dropping every row with a missing value '?'; label 1 = income >50K)
    age (years), education_num (1-16), capital_gain (USD), capital_loss (USD),
    hours_per_week (hours), sex_male, race_white, native_country_us,
    marital_status_married (Married-civ-spouse or Married-AF-spouse),
    workclass_private, occupation_managerial_specialist (Exec-managerial or
    Prof-specialty), relationship_spouse (Husband or Wife). fnlwgt and the
    education string are dropped (education_num encodes the same thing).
    Ross et al. use the first nine; workclass, occupation and relationship
    are extra, immutable context (as in CARLA).
    Actionable: education_num (increase only), hours_per_week (either way).
    Ross et al.'s main text says hours may only increase but Appendix A.3
    constrains only education; we follow A.3. Group: sex (0 female, 1 male).
compas (6,172 rows of 7,214, filtered as ProPublica did: days_b_screening_arrest
    within +-30, is_recid != -1, c_charge_degree != 'O', score_text != 'N/A';
    label 1 = no recidivism within two years, i.e. 1 - two_year_recid)
    age (years), priors_count, length_of_stay (whole days, c_jail_out -
    c_jail_in; 183 same-day records released a few hours "before" booking,
    an entry error that gives -1, are set to 0),
    juv_fel_count, juv_misd_count, juv_other_count, sex_male, race_white
    (Caucasian vs everyone else, the white / non-white split of the recourse
    benchmarks), c_charge_degree_felony (F vs M). decile_score, score_text,
    is_recid and the violent-recidivism columns are never features; nor is
    days_b_screening_arrest (Ross et al. use it, but it records the arrest
    procedure, not the person).
    Actionable: priors_count, with no direction constraint, as in Ross et al.
    ("past" features are actionable by waiting and re-applying).
    Group: race (0 non-white, 1 white).
compas_score (the same 6,172 rows in the CARLA benchmarks' encoding, used by GenRe's
    Table 2; label 1 = a low COMPAS risk score, score_text 'Low')
    age, two_year_recid, priors_count, length_of_stay, c_charge_degree_felony,
    race_white, sex_male. Actionable: priors_count (either way), as for compas.
    Group: race.
german (1,000 rows; label 1 = good credit)
    duration (months), credit_amount (DM), installment_rate (percent of
    disposable income, coded 1-4), present_residence_since (years, coded 1-4),
    age (years), number_of_existing_credits, number_of_people_liable_for,
    sex_male (from status_sex), foreign_worker_yes, telephone_yes,
    housing_own, checking_account_negative (balance < 0 DM),
    checking_account_none (no checking account).
    Actionable: age (increase only) and credit_amount (either way), as in
    Ross et al. (their "credit given by the bank"). Group: sex (0 female, 1 male).
iris, digits (scikit-learn copies; 150 and 1,797 rows, 3 and 10 classes)
    every feature actionable in both directions, as in the OAR experiments
    that perturb features freely; no protected group.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from recourse_sim.data._resources import open_data_file
from recourse_sim.errors import ConfigError, DataError

if TYPE_CHECKING:
    from collections.abc import Callable

Action = Literal["immutable", "free", "increase", "decrease"]


@dataclass(frozen=True, eq=False)
class Dataset:
    """A classification dataset with the metadata recourse needs.

    All arrays are read-only views shared by every caller of `load`.
    """

    name: str
    X: np.ndarray  # (n, d) float64 features
    y: np.ndarray  # (n,) int64 labels 0..k-1; 1 = favourable for the tabular data
    feature_names: tuple[str, ...]
    categorical: np.ndarray  # (d,) bool: binary/categorical feature
    immutable: np.ndarray  # (d,) bool: may never change under recourse
    increase_only: np.ndarray  # (d,) bool: may only increase
    decrease_only: np.ndarray  # (d,) bool: may only decrease
    target_name: str
    class_names: tuple[str, ...]  # class_names[k] describes label k
    group: np.ndarray | None = None  # (n,) int64 protected-attribute codes
    group_name: str | None = None
    group_labels: tuple[str, ...] | None = None  # group_labels[g] describes code g
    # per feature: "continuous", "integer" (whole numbers, step 1) or "binary" (0/1);
    # empty: all continuous
    feature_types: tuple[str, ...] = ()

    @property
    def actionable(self) -> np.ndarray:
        """Features recourse may change (the complement of `immutable`)."""
        return ~self.immutable

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    def frame(self) -> pd.DataFrame:
        """A fresh DataFrame: features, the label and (if any) the group as its label."""
        df = pd.DataFrame(self.X, columns=list(self.feature_names))
        df[self.target_name] = self.y
        if self.group is not None and self.group_name is not None and self.group_labels:
            df[self.group_name] = pd.Categorical.from_codes(self.group, list(self.group_labels))
        return df


@dataclass(frozen=True)
class _Feature:
    name: str
    values: np.ndarray | pd.Series
    action: Action = "immutable"
    categorical: bool = False
    kind: str = "continuous"  # the feature's type (see `Dataset.feature_types`)


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


def _assemble(
    name: str,
    features: list[_Feature],
    y: np.ndarray | pd.Series,
    *,
    target_name: str,
    class_names: tuple[str, ...],
    group_feature: str | None = None,
    group_name: str | None = None,
    group_labels: tuple[str, ...] | None = None,
) -> Dataset:
    X = np.column_stack([np.asarray(f.values, dtype=np.float64) for f in features])
    names = tuple(f.name for f in features)
    actions = np.array([f.action for f in features])
    group = None
    if group_feature is not None:
        group = X[:, names.index(group_feature)].astype(np.int64)
    y = np.asarray(y, dtype=np.int64)
    # Internal invariants: loaders build these, users cannot break them.
    assert np.isfinite(X).all() and X.shape == (len(y), len(names))
    assert set(np.unique(y)) == set(range(len(class_names)))
    return Dataset(
        name=name,
        X=_readonly(X),
        y=_readonly(y),
        feature_names=names,
        categorical=_readonly(np.array([f.categorical for f in features])),
        immutable=_readonly(actions == "immutable"),
        increase_only=_readonly(actions == "increase"),
        decrease_only=_readonly(actions == "decrease"),
        target_name=target_name,
        class_names=class_names,
        group=None if group is None else _readonly(group),
        group_name=group_name,
        group_labels=group_labels,
        feature_types=tuple(f.kind for f in features),
    )


def _binary(name: str, mask: pd.Series | np.ndarray) -> _Feature:
    return _Feature(name, np.asarray(mask, dtype=np.float64), categorical=True, kind="binary")


def _count(name: str, values, action: Action = "immutable") -> _Feature:
    """A feature of whole numbers (years, days, counts, codes 1..k): integer, step 1."""
    return _Feature(name, values, action=action, kind="integer")


def _check_values(file: str, column: str, values: pd.Series, allowed: set) -> None:
    unexpected = set(values.unique()) - allowed
    if unexpected:
        raise DataError(
            f"data file {file!r} is corrupt: column {column!r} has unexpected values "
            f"{sorted(map(str, unexpected))[:5]}"
        )


# ---------------------------------------------------------------- Adult

ADULT_COLUMNS = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
    "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
    "hours-per-week", "native-country", "income",
)  # fmt: skip


def _read_adult(file: str, skiprows: int) -> pd.DataFrame:
    with open_data_file(file) as stream:
        df = pd.read_csv(
            stream,
            header=None,
            names=ADULT_COLUMNS,
            skiprows=skiprows,
            skipinitialspace=True,
            na_values=["?"],
            keep_default_na=False,
        )
        df = df.dropna()
        # adult.test writes its labels with a trailing '.' (">50K.").
        df["income"] = df["income"].str.rstrip(".")
        _check_values(file, "income", df["income"], {"<=50K", ">50K"})
        _check_values(file, "sex", df["sex"], {"Male", "Female"})
        numeric = ["age", "education-num", "capital-gain", "capital-loss", "hours-per-week"]
        df[numeric] = df[numeric].astype(np.float64)
    return df


def _load_adult() -> Dataset:
    # adult.test starts with a line "|1x3 Cross validator" that is not a record.
    df = pd.concat(
        [_read_adult("adult.data.gz", skiprows=0), _read_adult("adult.test.gz", skiprows=1)],
        ignore_index=True,
    )
    features = [
        _count("age", df["age"]),
        _count("education_num", df["education-num"], action="increase"),
        _count("capital_gain", df["capital-gain"]),
        _count("capital_loss", df["capital-loss"]),
        _count("hours_per_week", df["hours-per-week"], action="free"),
        _binary("sex_male", df["sex"] == "Male"),
        _binary("race_white", df["race"] == "White"),
        _binary("native_country_us", df["native-country"] == "United-States"),
        _binary(
            "marital_status_married",
            df["marital-status"].isin(["Married-civ-spouse", "Married-AF-spouse"]),
        ),
        _binary("workclass_private", df["workclass"] == "Private"),
        _binary(
            "occupation_managerial_specialist",
            df["occupation"].isin(["Exec-managerial", "Prof-specialty"]),
        ),
        _binary("relationship_spouse", df["relationship"].isin(["Husband", "Wife"])),
    ]
    return _assemble(
        "adult",
        features,
        df["income"] == ">50K",
        target_name="income_over_50k",
        class_names=("income <=50K", "income >50K"),
        group_feature="sex_male",
        group_name="sex",
        group_labels=("female", "male"),
    )


# ---------------------------------------------------------------- COMPAS

COMPAS_FILE = "compas-two-years-reduced.csv.gz"


def _read_compas() -> tuple[pd.DataFrame, pd.Series]:
    """ProPublica's filtered rows and their length of stay in jail (whole days)."""
    with open_data_file(COMPAS_FILE) as stream:
        # Only empty cells are missing: "N/A" is a real score_text value to filter on.
        df = pd.read_csv(stream, keep_default_na=False, na_values=[""])
        keep = (
            df["days_b_screening_arrest"].between(-30, 30)
            & (df["is_recid"] != -1)
            & (df["c_charge_degree"] != "O")
            & (df["score_text"] != "N/A")
        )
        df = df[keep]
        _check_values(COMPAS_FILE, "c_charge_degree", df["c_charge_degree"], {"F", "M"})
        _check_values(COMPAS_FILE, "two_year_recid", df["two_year_recid"], {0, 1})
        _check_values(COMPAS_FILE, "sex", df["sex"], {"Male", "Female"})
        stay = pd.to_datetime(df["c_jail_out"]) - pd.to_datetime(df["c_jail_in"])
        length_of_stay = stay.dt.days.clip(lower=0)
        if length_of_stay.isna().any():
            raise DataError(f"data file {COMPAS_FILE!r} is corrupt: missing jail dates")
        _check_values(COMPAS_FILE, "score_text", df["score_text"], {"Low", "Medium", "High"})
    return df, length_of_stay


def _load_compas() -> Dataset:
    df, length_of_stay = _read_compas()
    features = [
        _count("age", df["age"]),
        _count("priors_count", df["priors_count"], action="free"),
        _count("length_of_stay", length_of_stay),
        _count("juv_fel_count", df["juv_fel_count"]),
        _count("juv_misd_count", df["juv_misd_count"]),
        _count("juv_other_count", df["juv_other_count"]),
        _binary("sex_male", df["sex"] == "Male"),
        _binary("race_white", df["race"] == "Caucasian"),
        _binary("c_charge_degree_felony", df["c_charge_degree"] == "F"),
    ]
    return _assemble(
        "compas",
        features,
        1 - df["two_year_recid"],
        target_name="no_two_year_recid",
        class_names=("recidivated within two years", "no recidivism within two years"),
        group_feature="race_white",
        group_name="race",
        group_labels=("non-white", "white"),
    )


def _load_compas_score() -> Dataset:
    df, length_of_stay = _read_compas()
    features = [
        _count("age", df["age"]),
        _binary("two_year_recid", df["two_year_recid"] == 1),
        _count("priors_count", df["priors_count"], action="free"),
        _count("length_of_stay", length_of_stay),
        _binary("c_charge_degree_felony", df["c_charge_degree"] == "F"),
        _binary("race_white", df["race"] == "Caucasian"),
        _binary("sex_male", df["sex"] == "Male"),
    ]
    return _assemble(
        "compas_score",
        features,
        df["score_text"] == "Low",
        target_name="low_risk_score",
        class_names=("medium or high COMPAS risk score", "low COMPAS risk score"),
        group_feature="race_white",
        group_name="race",
        group_labels=("non-white", "white"),
    )


# ---------------------------------------------------------------- German credit

GERMAN_COLUMNS = (
    "status", "duration", "credit_history", "purpose", "credit_amount", "savings",
    "present_employment", "installment_rate", "status_sex", "other_debtors",
    "present_residence_since", "property", "age", "installment_plans", "housing",
    "number_of_existing_credits", "job", "number_of_people_liable_for", "telephone",
    "foreign_worker", "credit",
)  # fmt: skip


def _decode(file: str, df: pd.DataFrame, maps: dict, column: str) -> pd.Series:
    """Replace a column's A-codes by their meaning from values_maps.json."""
    decoded = df[column].map(maps[column])
    if decoded.isna().any():
        bad = sorted(df.loc[decoded.isna(), column].astype(str).unique())[:5]
        raise DataError(f"data file {file!r} is corrupt: column {column!r} has codes {bad}")
    return decoded


def _load_german() -> Dataset:
    with open_data_file("values_maps.json") as stream:
        maps = json.load(stream)
    with open_data_file("german.data.gz") as stream:
        df = pd.read_csv(stream, sep=r"\s+", header=None, names=GERMAN_COLUMNS)
        file = "german.data.gz"
        sex = _decode(file, df, maps, "status_sex")
        _decode(file, df, maps, "status")  # only to reject unknown codes; used as A11 / A14 below
        housing = _decode(file, df, maps, "housing")
        foreign = _decode(file, df, maps, "foreign_worker")
        telephone = _decode(file, df, maps, "telephone")
        _check_values(file, "credit", df["credit"], {1, 2})
    numeric = [
        "duration", "credit_amount", "installment_rate", "present_residence_since", "age",
        "number_of_existing_credits", "number_of_people_liable_for",
    ]  # fmt: skip
    action: dict[str, Action] = {"age": "increase", "credit_amount": "free"}
    # all whole numbers: months, DM, codes 1..4, years, counts
    features = [_count(c, df[c], action=action.get(c, "immutable")) for c in numeric]
    features += [
        # values_maps.json describes status_sex as "male : single", "female : ...", etc.
        _binary("sex_male", sex.str.startswith("male")),
        _binary("foreign_worker_yes", foreign == True),  # noqa: E712 (values are JSON booleans)
        _binary("telephone_yes", telephone == True),  # noqa: E712
        _binary("housing_own", housing == "own"),
        _binary("checking_account_negative", df["status"] == "A11"),
        _binary("checking_account_none", df["status"] == "A14"),
    ]
    return _assemble(
        "german",
        features,
        df["credit"] == 1,
        target_name="good_credit",
        class_names=("bad credit", "good credit"),
        group_feature="sex_male",
        group_name="sex",
        group_labels=("female", "male"),
    )


# ---------------------------------------------------------------- scikit-learn


def _load_iris() -> Dataset:
    from sklearn.datasets import load_iris

    bunch = load_iris()
    # "sepal length (cm)" -> "sepal_length_cm": names that work as YAML keys.
    names = [n.replace(" (cm)", "_cm").replace(" ", "_") for n in bunch.feature_names]
    features = [_Feature(n, bunch.data[:, j], action="free") for j, n in enumerate(names)]
    return _assemble(
        "iris",
        features,
        bunch.target,
        target_name="species",
        class_names=tuple(str(c) for c in bunch.target_names),
    )


def _load_digits() -> Dataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    features = [
        _Feature(str(n), bunch.data[:, j], action="free") for j, n in enumerate(bunch.feature_names)
    ]
    return _assemble(
        "digits",
        features,
        bunch.target,
        target_name="digit",
        class_names=tuple(str(c) for c in bunch.target_names),
    )


_LOADERS: dict[str, Callable[[], Dataset]] = {
    "adult": _load_adult,
    "compas": _load_compas,
    "compas_score": _load_compas_score,
    "digits": _load_digits,
    "german": _load_german,
    "iris": _load_iris,
}

DATASET_NAMES: tuple[str, ...] = tuple(sorted(_LOADERS))


@functools.lru_cache(maxsize=len(_LOADERS))
def _load_cached(name: str) -> Dataset:
    return _LOADERS[name]()


def load(name: str) -> Dataset:
    """Load a bundled dataset by name (see the module docstring for each one).

    Raises `ConfigError` for an unknown name and `DataError` naming the file
    when a bundled file is missing or corrupt. Returns a cached, read-only
    `Dataset`: copy its arrays before changing them.
    """
    if not isinstance(name, str) or name not in _LOADERS:
        raise ConfigError(f"unknown dataset {name!r}; valid names: {', '.join(DATASET_NAMES)}")
    return _load_cached(name)
