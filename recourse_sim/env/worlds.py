"""Worlds: where each round's people, their true features and their true outcomes come from.

A world draws people (`World.newcomers`: true features, group, the world's own query
group and two uniform numbers per person: ``u`` fixes their outcome noise, ``v`` their
effort quantile), computes true outcomes from *true* features (`World.outcome`) and
says what a round does to them beyond recourse (`World.after_round`: lending's loans
move credit scores). Who of them applies each round, who stays and who leaves is the
pool's business (`recourse_sim.env.pool`, by the world's ``people`` block). All
randomness comes from the generator passed in: the environment's ``world`` stream
(`recourse_sim.env.streams`), which nothing else draws from, so runs that differ only
in strategies or learner settings see the same people.

The uniform ``u`` drawn with each person makes outcomes common random numbers: the
outcome after someone changes a causal feature differs from the outcome without the
change only through the change, not through fresh noise.

Each world draws a batch of n people with a few block-shaped calls (their number
does not depend on anything but n), ending with one ``rng.random((2, n))`` for
``u`` and ``v``:

* school: `recourse_sim.data.school.draw_school` (``random(n)``, ``standard_normal(n)``,
  ``standard_normal((n, 3))``, ``poisson(rates)``, ``random(n)``, ``standard_normal(n)``);
* dataset / CSV: ``integers(rows, size=n)`` (``population: file``: none, the rows in
  order);
* Gaussian: ``standard_normal((n, d))`` (classes in a fixed order, then the query group);
* FICO: ``choice(groups, size=n, p=shares)`` and one inverse-CDF draw per group;
* causal (scm): one block of n noise values per node, in node order
  (`recourse_sim.env.scm.StructuralCausalModel.sample`).

A causal world's person also carries their exogenous noise (``Cohort.noise``); a change
of their true features re-abducts the noise of the changed features
(`World.noise_after`), the label's noise never changes.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from recourse_sim.data.csv_world import TabularData, read_csv_world
from recourse_sim.env.oracle import fit_oracle
from recourse_sim.errors import ConfigError
from recourse_sim.scenarios import (
    CsvWorld,
    DatasetWorld,
    FicoWorld,
    GaussianWorld,
    SchoolWorld,
    ScmWorld,
)

# TransRisk score s (0-100) -> FICO points 300 + 5.5 s (our linear map of the two scales).
FICO_MIN, FICO_MAX = 300.0, 850.0
_FICO_SLOPE = (FICO_MAX - FICO_MIN) / 100.0


@dataclass
class Cohort:
    """People: a batch of newcomers, a round's applicants or a whole pool (one row each).

    A world fills the first eight fields; the pool (`recourse_sim.env.pool`) fills the
    rest, which default to a newcomer's (id -1 until assigned, reports = true features).
    Arrays are owned by the cohort (the env copies before changing).
    """

    X: np.ndarray  # (n, d) true features at the start of the round
    group: np.ndarray  # (n,) int64 group codes (indices into World.group_labels)
    query: np.ndarray  # (n,) bool: the world's own query group (school: S)
    u: np.ndarray  # (n,) uniforms fixing each person's outcome noise
    v: np.ndarray  # (n,) uniforms fixing each person's effort quantile (tolerance)
    y0: np.ndarray  # (n,) int64 true outcome at X (if nobody changes anything)
    rows: np.ndarray  # (n,) int64 source rows (tabular); else arange
    record: np.ndarray  # (n,) int64 label the institution records for training; -1: the outcome
    report: np.ndarray | None = None  # (n, d) reports they apply with (None: X)
    person: np.ndarray | None = None  # (n,) int64 stable ids (-1: not yet assigned)
    arrived: np.ndarray | None = None  # (n,) int64 round of arrival
    since: np.ndarray | None = None  # (n,) int64 round their current wait began
    failed: np.ndarray | None = None  # (n,) int64 failed recourse attempts in this wait
    moved: np.ndarray | None = None  # (n,) bool: apply with reports recourse moved last round
    move_cost: np.ndarray | None = None  # (n,) cost of that move (0 for the others)
    # (n, k) each person's exogenous noise, one column per node of a causal (scm) world
    # (k = 0 in other worlds): kept with the person from round to round
    noise: np.ndarray | None = None

    _FIELDS = (
        "X",
        "group",
        "query",
        "u",
        "v",
        "y0",
        "rows",
        "record",
        "report",
        "person",
        "arrived",
        "since",
        "failed",
        "moved",
        "move_cost",
        "noise",
    )

    def __post_init__(self) -> None:
        n = len(self.group)
        if self.report is None:
            self.report = self.X.copy()
        if self.noise is None:
            self.noise = np.zeros((n, 0))
        for name, fill, dtype in (
            ("person", -1, np.int64),
            ("arrived", 0, np.int64),
            ("since", 0, np.int64),
            ("failed", 0, np.int64),
            ("moved", False, bool),
            ("move_cost", 0.0, np.float64),
        ):
            if getattr(self, name) is None:
                setattr(self, name, np.full(n, fill, dtype))

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in self._FIELDS}

    @classmethod
    def from_arrays(cls, a: dict) -> Cohort:
        # (a state saved before causal worlds has no noise: none to keep)
        return cls(**{k: np.array(a[k], copy=True) for k in cls._FIELDS if k in a})

    def take(self, index: np.ndarray | None) -> Cohort:
        """A copy of the rows `index` (None: all rows)."""
        if index is None:
            return Cohort(**{k: v.copy() for k, v in self.arrays().items()})
        return Cohort(**{k: v[index] for k, v in self.arrays().items()})

    def put(self, index: np.ndarray, rows: Cohort) -> None:
        """Overwrite rows `index` with the rows of `rows` (in place)."""
        for k, v in rows.arrays().items():
            getattr(self, k)[index] = v

    @staticmethod
    def concat(first: Cohort, second: Cohort) -> Cohort:
        """The rows of `first`, then those of `second`."""
        a, b = first.arrays(), second.arrays()
        return Cohort(**{k: np.concatenate([a[k], b[k]]) for k in a})


@dataclass(frozen=True)
class FeatureDefaults:
    """A world's own declaration of its features (a scenario's `features` edits it)."""

    names: tuple[str, ...]
    actionable: np.ndarray  # (d,) bool
    increase_only: np.ndarray  # (d,) bool
    decrease_only: np.ndarray  # (d,) bool
    proxy: np.ndarray  # (d,) bool: changes are gaming
    lower: np.ndarray  # (d,) bound on values after a change (-inf: none)
    upper: np.ndarray  # (d,)
    # per feature its type for recourse ("continuous", "integer", "binary", "ordinal",
    # "categorical"; empty: all continuous), and the levels of ordinal / categorical
    # features by name
    types: tuple[str, ...] = ()
    levels: dict = field(default_factory=dict)


class World(ABC):
    """Base class of the worlds; see the module docstring."""

    features: FeatureDefaults
    group_labels: tuple[str, ...]  # empty when the world has no groups
    n_classes: int = 2
    favourable: int = 1

    cohort_size: int  # people in a fresh cohort (and the first round's, by default)
    # every applicant stays and applies every round, each outcome a new event (FICO)
    persistent_applicants: bool = False
    # the same people (a CSV file's rows) apply every round, outcomes as drawn on arrival
    fixed_population: bool = False

    def reset(self, rng: np.random.Generator) -> None:  # noqa: B027 - optional hook
        """Start an episode (state of the world beyond its people)."""

    @abstractmethod
    def history(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The (X, y) the first model is fit on."""

    @abstractmethod
    def newcomers(self, n: int, rng: np.random.Generator) -> Cohort:
        """`n` people drawn afresh (their reports are their true features)."""

    def feature_sd(self) -> np.ndarray:
        """Each feature's standard deviation (1 where it is constant), the unit of
        ``features.cost: std``: of a history drawn with a fixed seed, so that it is the
        same in every episode."""
        X, _ = self.history(np.random.default_rng(0))
        return _sd(X)

    @abstractmethod
    def outcome(self, cohort: Cohort, X_true: np.ndarray, changed: np.ndarray) -> np.ndarray:
        """True outcomes (int64) at true features `X_true`; rows not `changed` keep y0."""

    def after_round(
        self, cohort: Cohort, X_true: np.ndarray, favourable: np.ndarray, y: np.ndarray
    ) -> np.ndarray:
        """The true features the round's people carry on with, given the features
        `X_true` their recourse left them (lending: a loan moves the score)."""
        return X_true

    def group_stats(self, people: Cohort) -> dict[str, tuple[np.ndarray, float]]:
        """Extra metrics of the people in the pool after a round: name -> (per-group
        values, value for everyone)."""
        return {}

    def noise_after(self, cohort: Cohort, X_true: np.ndarray) -> np.ndarray:
        """The exogenous noise people carry on with at true features `X_true`."""
        return cohort.noise

    def get_state(self) -> dict:
        return {}

    def set_state(self, state: dict) -> None:  # noqa: B027 - stateless worlds
        pass


def _categorical(P: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Class drawn from probabilities P (n, k) by inverse CDF at uniforms u."""
    cdf = np.cumsum(P, axis=1)
    return np.minimum((cdf < u[:, None]).sum(1), P.shape[1] - 1).astype(np.int64)


# -- the school district --------------------------------------------------------------------


class School(World):
    """The OAR paper's district: neighbourhoods N1/N2 are the groups; H1 is favourable."""

    def __init__(self, spec: SchoolWorld):
        from recourse_sim.data import SCHOOL_FEATURES, true_success_probability
        from recourse_sim.data.school import draw_school

        self.spec = spec
        # the validated spec's keywords bound once: people are drawn every round
        self._draw_people = functools.partial(draw_school, **spec.generator_kwargs())
        self.cohort_size = spec.cohort_size
        self._p = functools.partial(
            true_success_probability,
            threshold=spec.outcome_threshold,
            sharpness=spec.outcome_sharpness,
        )
        d = len(SCHOOL_FEATURES)
        proxy = np.array([f == "extracurriculars" for f in SCHOOL_FEATURES])
        lower = np.zeros(d)
        lower[SCHOOL_FEATURES.index("test_score")] = -np.inf  # SD units, unbounded
        upper = np.full(d, np.inf)
        upper[SCHOOL_FEATURES.index("gpa")] = 4.0
        # extracurricular activities are counted; the others are measured
        types = tuple(
            "integer" if f == "extracurriculars" else "continuous" for f in SCHOOL_FEATURES
        )
        self.features = FeatureDefaults(
            types=types,
            names=SCHOOL_FEATURES,
            actionable=np.ones(d, bool),
            increase_only=np.zeros(d, bool),
            decrease_only=np.zeros(d, bool),
            proxy=proxy,
            lower=lower,
            upper=upper,
        )
        self.group_labels = ("N1", "N2")

    def history(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        # `school_world`'s cohort as new plain arrays (the scenario has validated the spec)
        c = self._draw_people(self.spec.history_size, rng)
        return c.X, c.y_hist

    def newcomers(self, n: int, rng: np.random.Generator) -> Cohort:
        # `school_world`'s cohort as plain arrays: the scenario has validated the spec,
        # and the arrays are new (the cohort owns them without a copy)
        c = self._draw_people(n, rng)
        u, v = rng.random((2, n))
        if self.spec.training_label == "recorded":
            record = c.y_hist
        else:
            record = np.full(n, -1, dtype=np.int64)
        return Cohort(
            X=c.X,
            group=c.neighbourhood,
            query=c.query,
            u=u,
            v=v,
            y0=(u < c.success_probability).astype(np.int64),
            rows=np.arange(n),
            record=record,
        )

    def outcome(self, cohort: Cohort, X_true: np.ndarray, changed: np.ndarray) -> np.ndarray:
        y = cohort.y0.copy()
        if changed.any():
            y[changed] = (cohort.u[changed] < self._p(X_true[changed])).astype(np.int64)
        return y


# -- FICO lending ---------------------------------------------------------------------------


class Lending(World):
    """Liu et al. (2018) lending: persistent applicants whose scores respond to loans.

    Its ``n_applicants`` people all stay and apply every round (the pool's FICO rules);
    each loan's repayment is a new event, drawn with fresh outcome noise every round."""

    def __init__(self, spec: FicoWorld):
        from recourse_sim.data import load_fico

        self.spec = spec
        self.fico = load_fico()
        self.group_labels = tuple(spec.groups)
        if spec.shares is not None:
            shares = np.asarray(spec.shares, dtype=np.float64)
        else:
            shares = np.array([self.fico.group_sizes[g] for g in spec.groups], dtype=np.float64)
        self.shares = shares / shares.sum()
        self.features = FeatureDefaults(
            names=("score",),
            actionable=np.array([True]),
            increase_only=np.array([True]),
            decrease_only=np.array([False]),
            proxy=np.array([False]),
            lower=np.array([FICO_MIN]),
            upper=np.array([FICO_MAX]),
        )
        self.cohort_size = spec.n_applicants
        self.persistent_applicants = True

    def _people(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        group = rng.choice(len(self.shares), size=n, p=self.shares).astype(np.int64)
        score = np.empty(n)
        for g, name in enumerate(self.group_labels):  # a loop over groups, not people
            mask = group == g
            score[mask] = self.fico.sample_scores(name, int(mask.sum()), rng)
        return group, FICO_MIN + _FICO_SLOPE * score

    def repay_probability(self, group: np.ndarray, score: np.ndarray) -> np.ndarray:
        transrisk = (score - FICO_MIN) / _FICO_SLOPE
        return self.fico.repay_probabilities(self.group_labels, group, transrisk)

    def history(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        group, score = self._people(self.spec.history_size, rng)
        y = (rng.random(len(score)) < self.repay_probability(group, score)).astype(np.int64)
        return score[:, None], y

    def newcomers(self, n: int, rng: np.random.Generator) -> Cohort:
        group, score = self._people(n, rng)
        u, v = rng.random((2, n))
        return Cohort(
            X=score[:, None],
            group=group,
            query=np.zeros(n, bool),
            u=u,
            v=v,
            y0=(u < self.repay_probability(group, score)).astype(np.int64),
            rows=np.arange(n),
            record=np.full(n, -1, dtype=np.int64),
        )

    def outcome(self, cohort: Cohort, X_true: np.ndarray, changed: np.ndarray) -> np.ndarray:
        y = cohort.y0.copy()
        if changed.any():
            rows = slice(None) if changed.all() else changed  # (everyone: no copies)
            p = self.repay_probability(cohort.group[rows], X_true[rows, 0])
            y[rows] = (cohort.u[rows] < p).astype(np.int64)
        return y

    def after_round(
        self, cohort: Cohort, X_true: np.ndarray, favourable: np.ndarray, y: np.ndarray
    ) -> np.ndarray:
        # Real (causal) score changes persist; then a loan moves the score (delayed impact).
        change = np.where(y == 1, self.spec.repay_gain, -self.spec.default_loss)
        score = np.where(favourable, X_true[:, 0] + change, X_true[:, 0])
        return np.clip(score, FICO_MIN, FICO_MAX)[:, None]

    def group_stats(self, people: Cohort) -> dict[str, tuple[np.ndarray, float]]:
        score, G = people.X[:, 0], len(self.group_labels)
        counts = np.bincount(people.group, minlength=G)
        sums = np.bincount(people.group, weights=score, minlength=G)
        means = np.divide(sums, counts, out=np.zeros(len(counts)), where=counts > 0)
        return {"mean_score": (means, float(score.mean()) if len(score) else 0.0)}


# -- tabular data (bundled datasets and user CSV files) ---------------------------------------


def _dataset_data(spec: DatasetWorld) -> TabularData:
    from recourse_sim.data import load

    ds = load(spec.name)
    k = ds.n_classes
    if spec.favourable >= k:
        raise ConfigError(
            f"world.favourable: class {spec.favourable} out of range for {spec.name!r} "
            f"({k} classes: {', '.join(ds.class_names)})"
        )
    has_groups = ds.group is not None and bool(ds.group_labels)
    return TabularData(
        X=np.asarray(ds.X, dtype=np.float64),
        y=np.asarray(ds.y, dtype=np.int64),
        feature_names=tuple(ds.feature_names),
        group=np.asarray(ds.group, dtype=np.int64) if has_groups else np.zeros(len(ds.y), np.int64),
        group_labels=tuple(ds.group_labels) if has_groups else (),
        n_classes=k,
        favourable=spec.favourable,
        actionable=~np.asarray(ds.immutable, bool),
        increase_only=np.asarray(ds.increase_only, bool),
        decrease_only=np.asarray(ds.decrease_only, bool),
        feature_types=tuple(ds.feature_types),
    )


def _sd(X: np.ndarray) -> np.ndarray:
    sd = np.asarray(X, dtype=np.float64).std(0)
    return np.where(sd > 0, sd, 1.0)


class Tabular(World):
    """Rows of a dataset or CSV file, drawn with replacement each round; with a CSV
    world's ``population: file``, the file's rows themselves, in file order, are the
    history and the people, who all stay and apply every round (`fixed_population`).

    True outcomes are the row's recorded label (``outcome: label``; feature changes do
    not move it) or drawn from a calibrated random-forest oracle at the true features
    (``outcome: oracle``), as in the lending scenarios over German credit and Adult.
    """

    def __init__(self, spec: DatasetWorld | CsvWorld, source: str = "<scenario>"):
        self.spec = spec
        if isinstance(spec, DatasetWorld):
            self.data = _dataset_data(spec)
        else:
            self.data = read_csv_world(spec, source)
        data = self.data
        # the file is the population: every row, every round, no resampling
        self.fixed_population = getattr(spec, "population", "sample") == "file"
        self.cohort_size = len(data.y) if self.fixed_population else spec.cohort_size
        self.n_classes, self.favourable = data.n_classes, data.favourable
        self.group_labels = data.group_labels
        self.features = FeatureDefaults(
            names=data.feature_names,
            actionable=data.actionable,
            increase_only=data.increase_only,
            decrease_only=data.decrease_only,
            proxy=np.zeros(len(data.feature_names), bool),
            lower=data.X.min(0),
            upper=data.X.max(0),
            types=data.feature_types,
            levels=data.levels,
        )
        self.oracle = None
        if spec.outcome == "oracle":
            self.oracle = fit_oracle(data.X, data.y, spec.oracle)

    def _outcomes(self, rows: np.ndarray, X: np.ndarray, u: np.ndarray) -> np.ndarray:
        if self.oracle is None:
            return self.data.y[rows].copy()
        return _categorical(self.oracle.predict_proba(rows, X), u)

    def feature_sd(self) -> np.ndarray:
        """Standard deviations over every row of the data (see `World.feature_sd`)."""
        return _sd(self.data.X)

    def _rows(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The source rows of n people: the file's rows in order (a fixed population;
        n > rows wraps around), else n drawn with replacement."""
        if self.fixed_population:
            return np.arange(n, dtype=np.int64) % len(self.data.y)
        return rng.integers(len(self.data.y), size=n)

    def history(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        size = len(self.data.y) if self.fixed_population else self.spec.history_size
        rows = self._rows(size, rng)
        u = rng.random(len(rows))
        X = self.data.X[rows].copy()
        return X, self._outcomes(rows, X, u)

    def newcomers(self, n: int, rng: np.random.Generator) -> Cohort:
        rows = self._rows(n, rng)
        u, v = rng.random((2, n))
        X = self.data.X[rows].copy()
        return Cohort(
            X=X,
            group=self.data.group[rows].copy(),
            query=np.zeros(len(rows), bool),
            u=u,
            v=v,
            y0=self._outcomes(rows, X, u),
            rows=rows.astype(np.int64),
            record=np.full(len(rows), -1, dtype=np.int64),
        )

    def outcome(self, cohort: Cohort, X_true: np.ndarray, changed: np.ndarray) -> np.ndarray:
        y = cohort.y0.copy()
        if self.oracle is not None and changed.any():
            p = self.oracle.predict_proba(cohort.rows[changed], X_true[changed])
            y[changed] = _categorical(p, cohort.u[changed])
        return y


# -- Gaussian classes (the coordination toy) ---------------------------------------------------


class Gaussian(World):
    """Gaussian classes (group ``data``) and a query group (group ``query``) each round.

    Labels are fixed by who a person is (class members: their class; query people:
    ``query_label``): changing features never changes a true outcome.
    """

    def __init__(self, spec: GaussianWorld):
        self.spec = spec
        self.means = np.asarray(spec.means, dtype=np.float64)
        self.n_classes = len(self.means)
        d = self.means.shape[1]
        self.features = FeatureDefaults(
            names=tuple(f"x{j + 1}" for j in range(d)),
            actionable=np.ones(d, bool),
            increase_only=np.zeros(d, bool),
            decrease_only=np.zeros(d, bool),
            proxy=np.zeros(d, bool),
            lower=np.full(d, -np.inf),
            upper=np.full(d, np.inf),
        )
        self.group_labels = ("data", "query")
        # a batch's composition: the classes' people, then the query group's
        self._sizes = np.array([*spec.class_sizes, spec.query_size], dtype=np.int64)
        self.cohort_size = int(self._sizes.sum())
        self._centres = np.vstack([self.means, np.asarray(spec.query_mean, dtype=np.float64)])
        self._spreads = np.array([spec.sd] * self.n_classes + [spec.query_sd])

    def _classes(
        self, sizes: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(self.n_classes), sizes)
        X = self.means[y] + self.spec.sd * rng.standard_normal((len(y), self.means.shape[1]))
        return X, y.astype(np.int64)

    def history(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        shares = np.asarray(self.spec.class_sizes, dtype=np.float64)
        sizes = np.maximum(np.round(shares / shares.sum() * self.spec.history_size), 1)
        return self._classes(sizes.astype(np.int64), rng)

    def newcomers(self, n: int, rng: np.random.Generator) -> Cohort:
        """n people: class_sizes and query_size people of each kind when n is their sum,
        else shares of n in their proportions (largest remainders)."""
        sizes = _split(n, self._sizes)
        kind = np.repeat(np.arange(len(sizes)), sizes)  # class index, or n_classes: query
        d = self.means.shape[1]
        X = self._centres[kind] + self._spreads[kind, None] * rng.standard_normal((n, d))
        u, v = rng.random((2, n))
        is_query = kind == self.n_classes
        return Cohort(
            X=X,
            group=is_query.astype(np.int64),
            query=is_query,
            u=u,
            v=v,
            y0=np.where(is_query, self.spec.query_label, kind).astype(np.int64),
            rows=np.arange(n),
            record=np.full(n, -1, dtype=np.int64),
        )

    def outcome(self, cohort: Cohort, X_true: np.ndarray, changed: np.ndarray) -> np.ndarray:
        return cohort.y0.copy()


def _split(n: int, sizes: np.ndarray) -> np.ndarray:
    """n split in the proportions of `sizes` (`sizes` itself when n is their sum), the
    remainder going to the largest fractional parts (first ones on ties)."""
    total = int(sizes.sum())
    if n == total:
        return sizes.copy()
    exact = sizes * (n / total)
    out = np.floor(exact).astype(np.int64)
    short = n - int(out.sum())
    out[np.argsort(-(exact - out), kind="stable")[:short]] += 1
    return out


# -- structural causal models -------------------------------------------------------------


class Scm(World):
    """A structural causal model over the features and the label (`recourse_sim.env.scm`).

    A person is their exogenous noise, one value per node, drawn on arrival and kept
    (``Cohort.noise``). Their true outcome is favourable when the label node, computed
    from its parents' true values and the person's own label noise, reaches the
    threshold. A change of true features is an intervention: the changed features take
    their new values, and the noise of those nodes is re-abducted so that the person's
    noise keeps explaining their values in later rounds; every other node's noise,
    the label's included, is the one they arrived with.
    """

    def __init__(self, spec: ScmWorld, source: str | None = None):
        from recourse_sim.env.scm import Mechanism, Noise, StructuralCausalModel

        self.spec = spec
        names = tuple(spec.nodes)
        mechanisms = tuple(
            Mechanism(
                parents=tuple(names.index(p) for p in node.parents),
                coef=np.asarray(node.coef, dtype=np.float64),
                intercept=node.intercept,
                combine=node.combine,
                link=node.link,
                noise_enters=node.noise_enters,
                noise=Noise(**node.noise.model_dump()),
            )
            for node in spec.nodes.values()
        )
        self.scm = StructuralCausalModel(names, mechanisms, source)
        self.label = names.index(spec.label)
        self.feature_nodes = np.array([j for j in range(len(names)) if j != self.label])
        fnames = spec.feature_names
        nodes = [spec.nodes[f] for f in fnames]
        self.integer = np.array([n.integer for n in nodes])
        self.features = FeatureDefaults(
            names=fnames,
            actionable=np.array([not n.immutable for n in nodes]),
            increase_only=np.zeros(len(fnames), bool),
            decrease_only=np.zeros(len(fnames), bool),
            proxy=np.zeros(len(fnames), bool),
            lower=np.full(len(fnames), -np.inf),
            upper=np.full(len(fnames), np.inf),
        )
        self.group_labels = ()
        self.cohort_size = spec.cohort_size
        if spec.label_threshold == "median":
            # of a large sample drawn with a fixed seed: the same in every episode
            values, _ = self.scm.sample(100_000, np.random.default_rng(0))
            self.threshold = float(np.median(values[:, self.label]))
        else:
            self.threshold = float(spec.label_threshold)

    # -- people ---------------------------------------------------------------------------
    def values_of(self, X: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """Every node's value (n, k) of people with true features X and their noise: the
        features as they are, the label from its parents and the person's label noise."""
        values = np.zeros(noise.shape)
        values[:, self.feature_nodes] = X
        values[:, self.label] = self.scm.mechanisms[self.label].evaluate(
            values, noise[:, self.label]
        )
        return values

    def favourable_label(self, label_values: np.ndarray) -> np.ndarray:
        return (label_values >= self.threshold).astype(np.int64)

    def history(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        values, _ = self.scm.sample(self.spec.history_size, rng)
        return values[:, self.feature_nodes], self.favourable_label(values[:, self.label])

    def newcomers(self, n: int, rng: np.random.Generator) -> Cohort:
        values, noise = self.scm.sample(n, rng)
        u, v = rng.random((2, n))
        return Cohort(
            X=values[:, self.feature_nodes],
            group=np.zeros(n, np.int64),
            query=np.zeros(n, bool),
            u=u,
            v=v,
            y0=self.favourable_label(values[:, self.label]),
            rows=np.arange(n),
            record=np.full(n, -1, dtype=np.int64),
            noise=noise,
        )

    def outcome(self, cohort: Cohort, X_true: np.ndarray, changed: np.ndarray) -> np.ndarray:
        y = cohort.y0.copy()
        if changed.any():
            values = self.values_of(X_true[changed], cohort.noise[changed])
            y[changed] = self.favourable_label(values[:, self.label])
        return y

    def noise_after(self, cohort: Cohort, X_true: np.ndarray) -> np.ndarray:
        if not len(X_true):
            return cohort.noise
        noise = cohort.noise.copy()
        moved = (X_true != cohort.X).any(1)
        if moved.any():
            values = self.values_of(X_true[moved], cohort.noise[moved])
            own = self.scm.abduct(values)
            noise[np.ix_(moved, self.feature_nodes)] = own[:, self.feature_nodes]
        return noise

    def feature_sd(self) -> np.ndarray:
        values, _ = self.scm.sample(20_000, np.random.default_rng(0))
        return _sd(values[:, self.feature_nodes])

    def directly_changed(self, X: np.ndarray, noise: np.ndarray, X_set: np.ndarray) -> np.ndarray:
        """The true features of people who change theirs from X to X_set directly (not
        by a causal search's intervention): X_set itself under ``direct_changes: set``;
        under ``intervene``, do(X_j = X_set_j) for every changed feature j, every other
        node recomputed from the person's noise (so the descendants of the changed
        features follow, as `causal_recourse`'s cr applies an intervention)."""
        changed = X_set != X
        rows = changed.any(1)
        if self.spec.direct_changes == "set" or not rows.any():
            return X_set
        k = noise.shape[1]
        fixed = np.zeros((int(rows.sum()), k), bool)
        fixed[:, self.feature_nodes] = changed[rows]
        target = np.zeros(fixed.shape)
        target[:, self.feature_nodes] = X_set[rows]
        out = X_set.copy()
        out[rows] = self.scm.intervene(noise[rows], fixed, target)[:, self.feature_nodes]
        return out


def follow_direct_changes(
    world: World, c: Cohort, X_true: np.ndarray, X_set: np.ndarray, report: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(true features, reports) after people changed their true features from X_true to
    X_set directly: on a causal world with ``direct_changes: intervene`` the descendants
    of the changed features follow (`Scm.directly_changed`), and their reports move with
    them; elsewhere (X_set, report) as they are."""
    if not isinstance(world, Scm) or world.spec.direct_changes == "set":
        return X_set, report
    after = world.directly_changed(X_true, c.noise, X_set)
    return after, report + (after - X_set)


WORLD_KINDS: dict[str, Callable[[Any, str], World]] = {
    "school": lambda spec, source: School(spec),
    "fico": lambda spec, source: Lending(spec),
    "dataset": Tabular,
    "csv": Tabular,
    "gaussian": lambda spec, source: Gaussian(spec),
    "scm": Scm,
}
"""How each ``world.kind`` builds its world from its spec (and the scenario's source,
for messages): a new kind adds its spec to `recourse_sim.scenarios.world` and its
class and entry here."""


def build_world(spec, source: str = "<scenario>") -> World:
    """The world a scenario's ``world`` block describes."""
    return WORLD_KINDS[spec.kind](spec, source)


__all__ = [
    "WORLD_KINDS",
    "Cohort",
    "FeatureDefaults",
    "Gaussian",
    "Lending",
    "School",
    "Scm",
    "Tabular",
    "TabularData",
    "World",
    "build_world",
    "follow_direct_changes",
    "read_csv_world",
]
