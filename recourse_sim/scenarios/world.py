"""The ``world`` section: where people come from (school, FICO, a bundled dataset, any CSV
file, Gaussian classes, a structural causal model) and the outcome oracle of tabular worlds."""

from __future__ import annotations

import math
from typing import Annotated, Literal, Union

import networkx as nx
from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from recourse_sim.budget import MAX_CLASSES
from recourse_sim.scenarios.base import (
    MAX_MAGNITUDE,
    Name,
    NonNegative,
    NonNegativeInt,
    NotBoolean,
    Positive,
    PositiveInt,
    Probability,
    _Model,
)


class OracleSpec(_Model):
    """The outcome oracle of tabular worlds: a calibrated random forest (see
    `recourse_sim.env.oracle`)."""

    # cross: each half of the rows is scored by the forest fit on the other half (no row
    # by a model that saw it); all: one forest fit on every row
    fit: Literal["cross", "all"] = "cross"
    # a registered outcome model instead of the forest (`recourse_sim.env.oracle`:
    # register_outcome_model, or the entry point group recourse_sim.outcome_models)
    model: str | None = None

    # number of trees in the forest (a forest of 5,000 already takes minutes to fit)
    trees: Annotated[int, Field(ge=1, le=5000)] = 100
    min_samples_leaf: PositiveInt = 5  # smallest leaf (rows); larger = smoother probabilities
    # random_state of the forest (the oracle is part of the world, not the episode)
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0


class PeopleSpec(_Model):
    """People who stay from round to round (a world without it draws a fresh cohort).

    Round 1's applicants are `initial` newcomers. After each round, people given the
    favourable decision leave (or, with `return_after`, apply again that many rounds
    later, as borrowers do); the others stay and apply again next round with the
    reports and true features their recourse left them; `newcomers` people arrive; and
    anyone `max_rounds` rounds after their arrival leaves. Every person keeps a stable
    id (``person`` in people.csv) and the outcome noise drawn on arrival.
    """

    initial: PositiveInt | None = None  # people applying in round 1 (people; None: cohort_size)
    newcomers: NonNegativeInt  # people arriving each round from round 2 on (people per round)
    # rounds after a favourable decision before a person applies again (None: they leave)
    return_after: Annotated[int, Field(ge=1, le=MAX_MAGNITUDE)] | None = None
    # rounds anyone stays after arriving (None: no cap)
    max_rounds: Annotated[int, Field(ge=1, le=MAX_MAGNITUDE)] | None = None


class ShiftMetricsSpec(_Model):
    """Per-round measures of the shifts recourse causes (Altmeyer et al., SaTML 2023;
    `recourse_sim.env.shift`): ``domain_mmd`` (+ ``domain_mmd_p``), ``model_mmd``,
    ``disagreement``, ``decisiveness`` and the parameters ``theta_<i>`` of the updated
    model, on the ``all`` row of metrics.csv."""

    # rows of the history (in order) on which the models are compared: the fixed probe set
    probe_size: Annotated[int, Field(ge=2, le=100_000)] = 1000
    # at most this many rows of each sample enter an MMD (a seeded subsample beyond it)
    max_rows: Annotated[int, Field(ge=2, le=100_000)] = 1000
    # permutations of the domain MMD's p-value (0: no domain_mmd_p)
    permutations: Annotated[int, Field(ge=0, le=100_000)] = 100
    # Gaussian kernel length-scale of the domain MMD, in SDs of the history's features
    # (median: the median pairwise distance of the round-0 sample, fixed for the run)
    length_scale: Annotated[float, Field(gt=0.0, le=1e6)] | Literal["median"] = "median"


class WorldSpec(_Model):
    """What every world kind answers about itself, before anything is built: its feature
    and group names, its classes, the people of a cohort, whether people stay, and the
    checks that need its data. A new world kind answers these in its own class. Every
    kind takes the options below."""

    # T of recourse_valid_after_T: rounds after a recourse succeeded at which its validity
    # is measured again (rounds; None: no recourse_valid_after_T column)
    validity_horizon: Annotated[int, Field(ge=1, le=MAX_MAGNITUDE)] | None = None
    # implemented recourse is honoured: a person whose recourse got the favourable decision
    # is recorded (in every later training row) with the favourable label
    honour_recourse: bool = False
    shift_metrics: ShiftMetricsSpec | None = None  # per-round shift measures (None: none)

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The feature names the world produces (loads a bundled dataset if needed)."""
        raise NotImplementedError

    @property
    def group_names(self) -> tuple[str, ...] | None:
        """The group names (None when they are only known from a file's rows)."""
        return ("all",)

    @property
    def n_classes(self) -> int:
        """The number of classes of the world's labels."""
        return 2

    @property
    def class_values(self) -> tuple[str, ...]:
        """Label values by class number (a CSV's; other worlds' labels are classes)."""
        return ()

    @property
    def cohort(self) -> tuple[int, str]:
        """People in one cohort, and the field that sets it."""
        return self.cohort_size, "world.cohort_size"

    @property
    def persistent(self) -> bool:
        """Whether people stay and apply again (a rejected person can re-apply)."""
        return getattr(self, "people", None) is not None

    @property
    def causal(self) -> bool:
        """Whether the world is a structural causal model (causal recourse acts in it)."""
        return False

    def check(self, source: str, base_dir, fail) -> None:
        """Checks that need the world's data (`fail(path, message)` refuses)."""


class SchoolWorld(WorldSpec):
    """The OAR paper's school district (`recourse_sim.data.school_world`), a new cohort a year.

    The first model is fit on `history_size` students labelled by the biased historical
    admission rule (``y_hist``). Every year the district retrains on the success it
    *records* (``training_label: recorded``): a record that, like the history, credits
    extracurricular activities (the cohort's ``y_hist``, computed from the features at
    the start of the year), so the proxy keeps its grip unless someone acts; or on the
    true outcome (``true_outcome``: thriving in H1, causal features only). The other
    fields are `school_world`'s keyword arguments.
    """

    kind: Literal["school"]
    # what the district retrains on: its success record, or the true outcome
    training_label: Literal["recorded", "true_outcome"] = "recorded"
    cohort_size: PositiveInt = 2000  # 8th graders assigned each round (students)
    history_size: PositiveInt = 5000  # historical records the first model is fit on (students)
    frac_n2: Probability = 0.5  # probability that a student lives in N2
    ability_gap: float = 0.0  # mean ability of N1 minus N2 (ability SD units)
    extracurricular_rate_n1: NonNegative = 3.0  # mean activities per N1 student (count)
    extracurricular_rate_n2: NonNegative = 1.0  # mean activities per N2 student (count)
    h1_capacity: Probability = 0.4  # share historically admitted to H1 (labels of the history)
    proxy_weight: float = 1.5  # weight of standardised extracurriculars in historical admission
    admission_noise: NonNegative = 0.5  # SD of the historical admission noise (merit units)
    query_quantile: Probability = 0.75  # S = N2 students above this cohort merit quantile
    outcome_threshold: float = 0.0  # merit at which the true outcome is a coin flip
    outcome_sharpness: Positive = 2.0  # slope of the true-outcome logistic (per merit unit)
    people: PeopleSpec | None = None  # students who stay and apply again (None: new each year)

    def generator_kwargs(self) -> dict[str, float]:
        """The keyword arguments of `school_world` (everything but kind, sizes and people)."""
        return self.model_dump(
            exclude={
                "kind",
                "cohort_size",
                "history_size",
                "training_label",
                "people",
                "validity_horizon",
                "honour_recourse",
                "shift_metrics",
            }
        )

    @property
    def feature_names(self) -> tuple[str, ...]:
        from recourse_sim.data import SCHOOL_FEATURES

        return SCHOOL_FEATURES

    @property
    def group_names(self) -> tuple[str, ...]:
        return ("N1", "N2")


class FicoWorld(WorldSpec):
    """Liu et al. (2018) delayed-impact lending on the FICO TransRisk data.

    Persistent applicants keep a credit score (FICO points, 300-850; the data's
    TransRisk score s in 0-100 maps to 300 + 5.5 s). Every round each applicant applies;
    an approved loan is repaid with the group's repayment probability at that score,
    moving the score by +repay_gain, or defaults, moving it by -default_loss (clipped).
    """

    kind: Literal["fico"]
    groups: list[Name] = ["white", "black"]  # FICO groups in the population
    shares: list[Probability] | None = None  # population share per group (default: FICO sizes)
    n_applicants: PositiveInt = 2000  # persistent applicants (people)
    history_size: PositiveInt = 2000  # past applicants with observed outcomes fitting model 0
    repay_gain: NonNegative = 75.0  # score change on repayment (FICO points)
    default_loss: NonNegative = 150.0  # score drop on default (FICO points)

    @field_validator("groups")
    @classmethod
    def _some_groups(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("needs at least one group")
        return v

    @field_validator("shares")
    @classmethod
    def _shares_match(cls, v: list[float] | None, info: ValidationInfo) -> list[float] | None:
        groups = info.data.get("groups")
        if v is not None and groups is not None:
            if len(v) != len(groups):
                raise ValueError(f"{len(v)} shares for {len(groups)} groups")
            if not math.isclose(sum(v), 1.0, abs_tol=1e-6):
                raise ValueError(f"shares must sum to 1, they sum to {sum(v):g}")
        return v

    @property
    def feature_names(self) -> tuple[str, ...]:
        return ("score",)

    @property
    def group_names(self) -> tuple[str, ...]:
        return tuple(self.groups)

    @property
    def cohort(self) -> tuple[int, str]:
        return self.n_applicants, "world.n_applicants"

    @property
    def persistent(self) -> bool:
        return True  # every applicant stays

    def check(self, source: str, base_dir, fail) -> None:
        from recourse_sim.data import FICO_GROUPS

        for i, g in enumerate(self.groups):
            if g not in FICO_GROUPS:
                fail(
                    f"world.groups.{i}",
                    f"unknown FICO group {g!r} (valid: {', '.join(FICO_GROUPS)})",
                )


class DatasetWorld(WorldSpec):
    """Rows of a bundled dataset (`recourse_sim.data.load`), a fresh sample each round."""

    kind: Literal["dataset"]
    name: Literal["adult", "compas", "german", "iris", "digits"]  # bundled dataset
    cohort_size: PositiveInt = 500  # rows drawn (with replacement) each round (people)
    history_size: PositiveInt = 1000  # rows the first model is fit on (people)
    # true outcome: drawn from the oracle at the true features, or the row's own label
    outcome: Literal["oracle", "label"] = "oracle"
    oracle: OracleSpec = OracleSpec()  # the outcome oracle (outcome: oracle)
    favourable: Annotated[int, NotBoolean] = Field(1, ge=0)  # class of the favourable outcome
    people: PeopleSpec | None = None  # people who stay and apply again (None: new rows a round)

    @property
    def feature_names(self) -> tuple[str, ...]:
        from recourse_sim.data import load

        return tuple(load(self.name).feature_names)

    @property
    def group_names(self) -> tuple[str, ...]:
        from recourse_sim.data import load

        ds = load(self.name)
        return tuple(ds.group_labels) if ds.group_labels else ("all",)

    @property
    def n_classes(self) -> int:
        from recourse_sim.data import load

        return load(self.name).n_classes


# numeric: any number; integer: whole numbers; binary: 0/1; ordinal: ordered levels (the
# column's values); categorical: level codes (the column's values, no order)
ColumnType = Literal["numeric", "integer", "binary", "ordinal", "categorical"]


class GroupBins(_Model):
    """Groups from a numeric column cut into bins: ``[bins[i], bins[i+1])`` is group
    ``labels[i]`` (a value outside every bin is a bad cell, see `CsvWorld.missing`)."""

    column: str  # the numeric column to cut
    bins: list[float]  # increasing bin edges (at least two)
    labels: list[Name]  # one name per bin (len(bins) - 1)

    @model_validator(mode="after")
    def _edges(self) -> GroupBins:
        edges = list(zip(self.bins, self.bins[1:], strict=False))
        if len(self.bins) < 2 or any(hi <= lo for lo, hi in edges):
            raise ValueError("bins must be at least two increasing edges")
        if len(self.labels) != len(self.bins) - 1:
            raise ValueError(
                f"{len(self.bins) - 1} bins need as many labels, got {len(self.labels)}"
            )
        if len(set(self.labels)) != len(self.labels):
            raise ValueError("labels must be distinct")
        return self


class CsvWorld(WorldSpec):
    """Any CSV file with a label column: a fresh sample of its rows each round."""

    kind: Literal["csv"]
    path: str  # CSV file, relative to the scenario file
    label: Name  # label column
    # label value meaning the favourable outcome (quote words: "yes")
    favourable: Annotated[str | int | float, NotBoolean] = 1
    # feature columns and their types (None: every column but the label and the group
    # column, typed from its cells: 0/1 binary, whole numbers integer, else numeric)
    columns: dict[Name, ColumnType] | None = None
    # column holding each row's group, or bins of a numeric column (None: one group "all")
    group: Name | GroupBins | None = None
    # a row with an empty, non-numeric or out-of-type cell: an error that counts the bad
    # cells of every column, or drop the row
    missing: Literal["error", "drop"] = "error"
    # winsorise numeric features at these quantiles of the file's rows, e.g. [0.01, 0.99]
    clip_quantiles: tuple[Probability, Probability] | None = None
    cohort_size: PositiveInt = 500  # rows drawn (with replacement) each round (people)
    history_size: PositiveInt = 1000  # rows the first model is fit on (people)
    # true outcome: drawn from the oracle at the true features, or the row's own label
    outcome: Literal["oracle", "label"] = "oracle"
    oracle: OracleSpec = OracleSpec()  # the outcome oracle (outcome: oracle)
    people: PeopleSpec | None = None  # people who stay and apply again (None: new rows a round)
    # sample: rows drawn with replacement (history and each cohort); file: the file's rows
    # are the people, every round, without resampling (the first model is fit on the file;
    # cohort_size and history_size are then unused)
    population: Literal["sample", "file"] = "sample"

    @field_validator("columns")
    @classmethod
    def _some_columns(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is not None and not v:
            raise ValueError("needs at least one feature column")
        return v

    @model_validator(mode="after")
    def _label_is_no_feature(self) -> CsvWorld:
        if self.columns is not None and self.label in self.columns:
            raise ValueError(
                f"columns: the label column {self.label!r} cannot be a feature (the model "
                "would read the outcome it predicts)"
            )
        if self.clip_quantiles is not None and not self.clip_quantiles[0] < self.clip_quantiles[1]:
            raise ValueError("clip_quantiles: the lower quantile must be below the upper")
        if self.population == "file" and self.people is not None:
            raise ValueError(
                "population: 'file' keeps every row of the file every round; it takes no "
                "people block (drop world.people)"
            )
        return self

    def _read(self):
        """The file's table (read and validated once; cached)."""
        from recourse_sim.data.csv_world import read_csv_world

        return read_csv_world(self)

    @property
    def feature_names(self) -> tuple[str, ...]:
        if self.columns is None:  # inferred from the file (read and cached by then)
            return self._read().feature_names
        return tuple(self.columns)

    @property
    def group_names(self) -> tuple[str, ...] | None:
        return None  # known from the file's rows only

    @property
    def n_classes(self) -> int:
        return self._read().n_classes

    @property
    def class_values(self) -> tuple[str, ...]:
        return self._read().class_values

    @property
    def persistent(self) -> bool:
        return self.people is not None or self.population == "file"

    def check(self, source: str, base_dir, fail) -> None:
        from recourse_sim.data.csv_world import read_csv_world

        self.path = str((base_dir / self.path).resolve())
        read_csv_world(self, source)  # validates the file (cached)


class GaussianWorld(WorldSpec):
    """A small synthetic world: Gaussian classes and a query group near the boundary.

    Every round ``class_sizes[c]`` people of class c (group ``data``) are drawn from
    N(means[c], sd² I) and ``query_size`` people (group ``query``, the world's own query
    group, recorded with class ``query_label``) from N(query_mean, query_sd² I). A
    person's class never changes (features do not move true outcomes). Made for the
    coordination problem whose optimal collective action is known in closed form
    (``coordination_toy``: nearest centroid, two classes). With ``people``, newcomers
    are split over the classes and the query group in these proportions.
    """

    kind: Literal["gaussian"]
    means: list[list[float]]  # class means, one row of d features per class (feature units)
    sd: Positive = 1.0  # within-class standard deviation (feature units, every feature)
    class_sizes: list[PositiveInt]  # people of each class per round (group "data")
    history_size: PositiveInt = 200  # rows the first model is fit on (class shares as above)
    query_mean: list[float]  # centre of the query group (feature units)
    query_sd: NonNegative = 0.0  # spread of the query group around its centre (feature units)
    query_size: PositiveInt = 1  # people in the query group per round (group "query")
    query_label: int = Field(0, ge=0)  # the class the query people are recorded with
    people: PeopleSpec | None = None  # people who stay and apply again (None: new each round)

    @model_validator(mode="after")
    def _shapes_agree(self) -> GaussianWorld:
        if len(self.means) < 2:
            raise ValueError(f"means needs at least two classes, got {len(self.means)}")
        if len(self.means) > MAX_CLASSES:
            raise ValueError(
                f"means: {len(self.means):,} classes; a world may have at most "
                f"{MAX_CLASSES:,} (each class is a row of model parameters)"
            )
        d = len(self.means[0])
        if d == 0 or any(len(m) != d for m in self.means):
            raise ValueError("every row of means needs the same number (>= 1) of features")
        if len(self.class_sizes) != len(self.means):
            raise ValueError(
                f"{len(self.class_sizes)} class_sizes for {len(self.means)} classes (means)"
            )
        if len(self.query_mean) != d:
            raise ValueError(f"query_mean has {len(self.query_mean)} features, means have {d}")
        if self.query_label >= len(self.means):
            raise ValueError(
                f"query_label {self.query_label} is not a class 0..{len(self.means) - 1}"
            )
        return self

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(f"x{j + 1}" for j in range(len(self.means[0])))

    @property
    def group_names(self) -> tuple[str, ...]:
        return ("data", "query")

    @property
    def n_classes(self) -> int:
        return len(self.means)

    @property
    def cohort(self) -> tuple[int, str]:
        return sum(self.class_sizes) + self.query_size, "world.class_sizes + world.query_size"


# nodes a model may have, the label included: the label's median threshold alone is
# taken over 100,000 people x every node (0.16 GB at 200 nodes), each a column of floats
MAX_NODES = 200
# nodes on the longest chain of causes: each link of a chain can scale the values and
# their rounding errors again, and a counterfactual replays the whole chain
MAX_DEPTH = 100


def _parent_graph(graph: dict[str, list[str]]) -> nx.DiGraph:
    """`graph` (node -> parents) as a networkx graph with an edge node -> parent."""
    out = nx.DiGraph()
    out.add_nodes_from(graph)
    out.add_edges_from((node, parent) for node, ps in graph.items() for parent in ps)
    return out


def find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """A cycle of `graph` (node -> parents) as a list of names, each followed by one of
    its parents and ending where it began, or None if it is a DAG. Iterative: a chain
    of any length is searched without recursion."""
    try:
        edges = nx.find_cycle(_parent_graph(graph))
    except nx.NetworkXNoCycle:
        return None
    return [edges[0][0], *(parent for _, parent in edges)]


def longest_chain(graph: dict[str, list[str]]) -> list[str]:
    """The longest chain of causes of a DAG `graph` (node -> parents), cause first."""
    return list(reversed(nx.dag_longest_path(_parent_graph(graph))))


class ScmNoise(_Model):
    """A node's exogenous noise, ``mean + scale · Z`` (`recourse_sim.env.scm.Noise`)."""

    # Z: standard normal, uniform on [-1, 1], standard Laplace, or B(trials, p) - trials·p
    dist: Literal["normal", "uniform", "laplace", "binomial"] = "normal"
    scale: NonNegative = 1.0  # multiplies Z (the node's units)
    mean: float = 0.0  # added to scale · Z (the node's units)
    # binomial only: number of trials (at most 10^9, as every count a scenario gives)
    trials: Annotated[int, Field(ge=1, le=int(MAX_MAGNITUDE))] = 1
    p: Probability = 0.5  # binomial only: success probability of a trial


class ScmNode(_Model):
    """One node's structural equation (`recourse_sim.env.scm`): z combines the parents,
    g is the link, the noise N enters by `noise_enters`."""

    parents: list[str] = []  # the node's direct causes (other nodes' names)
    coef: list[float] = []  # one coefficient per parent (combine: sum or product)
    intercept: float = 0.0  # added to the combination of the parents
    # z = intercept + Σ coef·parent (sum) or intercept + Π coef·parent (product)
    combine: Literal["sum", "product"] = "sum"
    # g: a fixed nonlinearity from a named list (identity, square, cube, tanh, ...)
    link: Literal["identity", "square", "cube", "tanh", "sigmoid", "exp", "softplus"] = "identity"
    # X = g(z) + N (add), g(z) · N (multiply) or g(z + N) (inside: g must be invertible)
    noise_enters: Literal["add", "multiply", "inside"] = "add"
    noise: ScmNoise = ScmNoise()  # the node's exogenous noise
    immutable: bool = False  # no one can intervene on it (age, group membership)
    integer: bool = False  # its values are whole numbers (the recourse search steps by 1)

    @model_validator(mode="after")
    def _coef_per_parent(self) -> ScmNode:
        if len(self.coef) != len(self.parents):
            raise ValueError(f"{len(self.coef)} coef for {len(self.parents)} parents")
        if len(set(self.parents)) != len(self.parents):
            raise ValueError("a parent is listed twice")
        if self.noise_enters == "inside" and self.link == "square":
            raise ValueError("noise_enters: inside needs an invertible link (not square)")
        return self


class ScmWorld(WorldSpec):
    """A structural causal model: a DAG over the features and the label, each node's
    equation given here. Every person keeps their exogenous noise from round to round;
    an intervention on a node moves its descendants through the equations with the
    person's noise (`recourse_sim.env.scm`). The true outcome is favourable when the
    label node reaches `label_threshold`."""

    kind: Literal["scm"]
    # node name -> structural equation, the features in this order (the label excluded)
    nodes: dict[str, ScmNode]
    label: str = "y"  # the node whose value is the true outcome (not a feature)
    # favourable outcome: label >= this (median: the label's median in the population)
    label_threshold: float | Literal["median"] = "median"
    cohort_size: PositiveInt = 1000  # people drawn each round (or arriving first, with people)
    history_size: PositiveInt = 2000  # people the first model is fit on
    # T of recourse_valid_after_T: rounds after a recourse succeeded at which its validity
    # is measured again (rounds)
    validity_horizon: PositiveInt = 2
    people: PeopleSpec | None = None  # people who stay and apply again (None: new each round)
    # how a change people make to their features directly (recourse: ce, and every method
    # other than cr and icr) acts on the world. set: the changed features take their new
    # values, every other feature keeps its own (the label follows its parents);
    # intervene: do(X_I = x'_I) on the changed features I, their descendants follow
    # through the equations with the person's noise (as Koenig et al.'s code applies a CE)
    direct_changes: Literal["set", "intervene"] = "set"

    @model_validator(mode="after")
    def _a_dag(self) -> ScmWorld:
        # sizes first, before anything walks the graph
        if len(self.nodes) > MAX_NODES:
            raise ValueError(
                f"nodes: {len(self.nodes):,} nodes; a causal model may have at most "
                f"{MAX_NODES} (the label included)"
            )
        if self.label not in self.nodes:
            raise ValueError(f"label {self.label!r}: the node has no equation in nodes")
        if len(self.nodes) < 2:
            raise ValueError("nodes needs the label and at least one feature")
        for name, node in self.nodes.items():
            for parent in node.parents:
                if parent not in self.nodes:
                    raise ValueError(
                        f"node {name!r}: unknown parent {parent!r} (a node without an "
                        f"equation; nodes: {', '.join(self.nodes)})"
                    )
        cycle = find_cycle({k: v.parents for k, v in self.nodes.items()})
        if cycle:
            raise ValueError(f"node {cycle[0]!r} is on a cycle: {' <- '.join(cycle)}")
        chain = longest_chain({k: v.parents for k, v in self.nodes.items()})
        if len(chain) > MAX_DEPTH:
            raise ValueError(
                f"nodes: a chain of {len(chain):,} causes ({chain[0]!r} -> ... -> "
                f"{chain[-1]!r}); a causal model's longest chain may have at most "
                f"{MAX_DEPTH} nodes"
            )
        if self.nodes[self.label].immutable:
            raise ValueError(f"node {self.label!r}: the label cannot be immutable (not a feature)")
        return self

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(k for k in self.nodes if k != self.label)

    @property
    def causal(self) -> bool:
        return True


World = Annotated[
    Union[SchoolWorld, FicoWorld, DatasetWorld, CsvWorld, GaussianWorld, ScmWorld],  # noqa: UP007
    Field(discriminator="kind"),
]
