"""Scenario files: a simulated world described as data, validated on load.

A scenario is a YAML file (read with ``yaml.safe_load`` only: loading never runs code)
validated by the pydantic model `Scenario`. Unknown keys are rejected; every problem is
raised as one `ConfigError` whose single-line message names the file, the dotted path
of the field and the bad value, and suggests the closest valid key for a misspelling.

A scenario declares:

``world``        where people come from: the synthetic school world (``kind: school``),
                 FICO lending with persistent applicants (``fico``), a bundled dataset
                 (``dataset``), any CSV file with a label column (``csv``) or Gaussian
                 classes with a query group (``gaussian``, the coordination toy);
``features``     which features people can change and how (actionable, monotone, bounds,
                 cost weights, norm) and which are proxies (changing one is gaming);
``learner``      the deployed model and its online update rule (optionally recourse-aware:
                 Ross et al.'s recourse loss, ``recourse_loss_weight``);
``decision``     how the model's probabilities become decisions (``pare``: a threshold
                 that guarantees recourse, recomputed each round);
``labels``       which outcomes the learner observes (selective labels);
``query``        the group the collectives act for;
``populations``  who acts and how: ``truthful``, ``individual``, ``genre`` (rejected
                 people follow a GenRe sample), ``collective_oar`` or ``controlled``
                 (driven by the environment's action);
``reward``       the weight of cost in the environment's reward;
``rounds``       the default number of rounds;
``multi_agent``  several ``controlled`` populations, each its own agent (only in the
                 PettingZoo ``recourse_sim.env.multi.RecourseParallelEnv``).

`load_scenario` takes a bundled name (``school_assignment``, see `list_scenarios`) or a
path, plus overrides as dotted keys (``["learner.update_rule=refit"]``, values parsed as
YAML) applied before validation.
"""

from __future__ import annotations

import difflib
import math
import types
import typing
import warnings
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from recourse_sim.errors import ConfigError

__all__ = [
    "STRATEGIES",
    "CollectiveOarPopulation",
    "ControlledPopulation",
    "CsvWorld",
    "DatasetWorld",
    "DecisionRule",
    "FeatureRules",
    "FicoWorld",
    "GaussianWorld",
    "GenrePopulation",
    "IndividualPopulation",
    "LabelRule",
    "LearnerSpec",
    "LognormalTolerance",
    "PareSpec",
    "PeopleSpec",
    "QuerySpec",
    "RewardSpec",
    "Scenario",
    "SchoolWorld",
    "SocialGraphSpec",
    "TruthfulPopulation",
    "UniformTolerance",
    "cohort_size",
    "list_scenarios",
    "load_scenario",
    "pare_min_calibration",
    "scenario_path",
]

STRATEGIES: tuple[str, ...] = (
    "truthful",
    "individual",
    "collective_oar",
    "controlled",
    "genre",
    "collective_blackbox",
    "collective_signal",
)
"""Population strategies a scenario may name (`recourse_sim.agents.REGISTRY` implements them)."""

DATASETS = ("adult", "compas", "german", "iris", "digits")

Probability = Annotated[float, Field(ge=0.0, le=1.0)]
NonNegative = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
GenreGamma = Annotated[float, Field(ge=0.5, lt=1.0)]  # GenRe's gamma: in [0.5, 1)


# Every real-valued setting lies within ±MAX_MAGNITUDE (larger ones overflow the
# round's arithmetic: squares and sums of 10^6 rows); only the fields a model lists in
# `_INFINITE_OK` may be infinite (a norm's p).
MAX_MAGNITUDE = 1e9


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)
    _INFINITE_OK: typing.ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="after")
    @classmethod
    def _finite_reals(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name in cls._INFINITE_OK:
            return value
        for x in _reals(value):
            if not math.isfinite(x):
                raise ValueError(f"must be a finite number, got {x}")
            if abs(x) > MAX_MAGNITUDE:
                raise ValueError(
                    f"{x:g} is outside ±{MAX_MAGNITUDE:g}, the range a real setting may take"
                )
        return value


def _reals(value: Any):
    """The floats directly inside a field's value (nested models check their own)."""
    if isinstance(value, float):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _reals(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _reals(item)


# -- worlds --------------------------------------------------------------------------------


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
    return_after: PositiveInt | None = None
    max_rounds: PositiveInt | None = None  # rounds anyone stays after arriving (None: no cap)


class SchoolWorld(_Model):
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
            exclude={"kind", "cohort_size", "history_size", "training_label", "people"}
        )


class FicoWorld(_Model):
    """Liu et al. (2018) delayed-impact lending on the FICO TransRisk data.

    Persistent applicants keep a credit score (FICO points, 300-850; the data's
    TransRisk score s in 0-100 maps to 300 + 5.5 s). Every round each applicant applies;
    an approved loan is repaid with the group's repayment probability at that score,
    moving the score by +repay_gain, or defaults, moving it by -default_loss (clipped).
    """

    kind: Literal["fico"]
    groups: list[str] = ["white", "black"]  # FICO groups in the population
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


class DatasetWorld(_Model):
    """Rows of a bundled dataset (`recourse_sim.data.load`), a fresh sample each round."""

    kind: Literal["dataset"]
    name: Literal["adult", "compas", "german", "iris", "digits"]  # bundled dataset
    cohort_size: PositiveInt = 500  # rows drawn (with replacement) each round (people)
    history_size: PositiveInt = 1000  # rows the first model is fit on (people)
    # true outcome: drawn from the oracle at the true features, or the row's own label
    outcome: Literal["oracle", "label"] = "oracle"
    oracle: OracleSpec = OracleSpec()  # the outcome oracle (outcome: oracle)
    favourable: int = Field(1, ge=0)  # class index of the favourable outcome
    people: PeopleSpec | None = None  # people who stay and apply again (None: new rows a round)


ColumnType = Literal["numeric", "integer", "binary"]


class GroupBins(_Model):
    """Groups from a numeric column cut into bins: ``[bins[i], bins[i+1])`` is group
    ``labels[i]`` (a value outside every bin is a bad cell, see `CsvWorld.missing`)."""

    column: str  # the numeric column to cut
    bins: list[float]  # increasing bin edges (at least two)
    labels: list[str]  # one name per bin (len(bins) - 1)

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


class CsvWorld(_Model):
    """Any CSV file with a label column: a fresh sample of its rows each round."""

    kind: Literal["csv"]
    path: str  # CSV file, relative to the scenario file
    label: str  # label column
    favourable: str | int | float = 1  # label value meaning the favourable outcome
    # feature columns and their types (None: every column but the label and the group
    # column, typed from its cells: 0/1 binary, whole numbers integer, else numeric)
    columns: dict[str, ColumnType] | None = None
    # column holding each row's group, or bins of a numeric column (None: one group "all")
    group: str | GroupBins | None = None
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
        return self


class GaussianWorld(_Model):
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


World = Annotated[
    Union[SchoolWorld, FicoWorld, DatasetWorld, CsvWorld, GaussianWorld],  # noqa: UP007
    Field(discriminator="kind"),
]


# -- features, learner, decisions -------------------------------------------------------


class FeatureRules(_Model):
    """How people can change their features, on top of the world's own declaration.

    Names are the world's feature names. `actionable` replaces the world's list of
    changeable features; `immutable` removes features from it (a name in both is an
    error). A *proxy* feature's change is gaming: the true outcome ignores it.
    """

    actionable: list[str] | None = None  # features people can change (None: world default)
    immutable: list[str] = []  # features that never change
    increase_only: list[str] = []  # features that can only go up
    decrease_only: list[str] = []  # features that can only go down
    proxy: list[str] | None = None  # features whose changes are gaming (None: world default)
    lower: dict[str, float] = {}  # lower bound on a feature's value after a change (its unit)
    upper: dict[str, float] = {}  # upper bound on a feature's value after a change (its unit)
    max_change: dict[str, NonNegative] = {}  # largest |change| of a feature per round (its unit)
    # cost weight per unit of change (default 1); "std", for all or per feature: one unit
    # is one standard deviation of the feature in the world's data
    cost: dict[str, NonNegative | Literal["std"]] | Literal["std"] = {}
    p: float = 2.0  # norm of the cost, 1, 2 or inf
    _INFINITE_OK = frozenset({"p"})

    @field_validator("p")
    @classmethod
    def _norm(cls, v: float) -> float:
        if v not in (1.0, 2.0, math.inf):
            raise ValueError("p must be 1, 2 or inf")
        return v

    @model_validator(mode="after")
    def _no_contradictions(self) -> FeatureRules:
        _disjoint(self.actionable or [], self.immutable, "actionable", "immutable")
        _disjoint(self.increase_only, self.decrease_only, "increase_only", "decrease_only")
        return self


def _disjoint(a: list[str], b: list[str], name_a: str, name_b: str) -> None:
    both = [f for f in a if f in b]
    if both:
        raise ValueError(f"feature {both[0]!r} is listed both in {name_a} and in {name_b}")


_RECOURSE_TRAINING_KEYS = ("recourse_loss_weight", "action_set", "recourse_goal")
"""Learner parameters the environment sets from `LearnerSpec`'s recourse fields."""


class DefenseSpec(_Model):
    """How the deployed model guards its update against manipulated reports
    (`recourse_sim.learners.defense`); every part is off by default."""

    # trimmed refit: drop this share of the round's rows with the highest loss under the
    # current model before updating
    trim: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    # report-anomaly filter: drop rows whose robust Mahalanobis distance from the recent
    # reports exceeds this chi-square quantile (None: off)
    anomaly_quantile: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None
    history: PositiveInt = 1000  # recent kept rows the anomaly filter compares against (rows)
    # rate limit: largest Euclidean norm of one update's change of the parameters (None: off)
    max_step: Positive | None = None


class LearnerSpec(_Model):
    """The deployed model (`recourse_sim.learners.make_learner`) and its update rule."""

    type: str = "logistic_regression"  # learner name (see recourse_sim.learners.LEARNERS)
    # online update rule (frozen: the first model is never updated)
    update_rule: Literal["refit", "window", "sgd", "frozen"] = "window"
    window: PositiveInt | None = 1  # rounds remembered by the window rule (None otherwise)
    # features standardised once, on the first model's data (None: yes, if the learner can)
    standardize: bool | None = None
    params: dict[str, Any] = {}  # other hyperparameters of the learner (e.g. C, epochs, lr)
    # lambda of Ross et al.'s recourse loss, lambda * loss(g(x + delta*), goal) (0: plain training)
    recourse_loss_weight: NonNegative = 0.0
    # budget of delta* (cost units; None: the individual populations' largest budget, else 1)
    recourse_budget: Positive | None = None
    defense: DefenseSpec = DefenseSpec()  # filters and limits on each update

    def learner_params(self, accepted: typing.Iterable[str]) -> dict[str, Any]:
        """Keyword arguments of `make_learner` besides the update rule: ``params`` plus
        ``standardize`` when the learner takes it (`accepted`: its parameter names).

        Raises ValueError when ``standardize`` is set twice or set true for a learner
        without standardisation.
        """
        params = dict(self.params)
        if "standardize" in params:
            raise ValueError("set learner.standardize, not learner.params.standardize")
        if "standardize" in accepted:
            params["standardize"] = True if self.standardize is None else self.standardize
        elif self.standardize:
            raise ValueError(
                f"learner {self.type!r} has no standardize option (it learns on raw features)"
            )
        return params

    @field_validator("params")
    @classmethod
    def _no_recourse_params(cls, v: dict[str, Any]) -> dict[str, Any]:
        # the environment builds these from the scenario (the action set is not YAML)
        for key in _RECOURSE_TRAINING_KEYS:
            if key in v:
                raise ValueError(
                    f"{key} is set by the environment; use learner.recourse_loss_weight "
                    "(and learner.recourse_budget)"
                )
        return v

    @model_validator(mode="after")
    def _window_only_for_window_rule(self) -> LearnerSpec:
        if self.update_rule != "window":
            self.window = None
        elif self.window is None:
            raise ValueError("update_rule 'window' needs window (rounds)")
        return self


def pare_min_calibration(epsilon: float, alpha: float) -> int:
    """The fewest calibration rows n for which the PARE bound certifies any threshold:
    (1 - epsilon)^n <= alpha, i.e. n >= log(alpha) / log(1 - epsilon)."""
    return math.ceil(math.log(alpha) / math.log1p(-epsilon) - 1e-12)


class PareSpec(_Model):
    """Ross et al.'s PARE threshold (section 3.3), recomputed by the bank every round.

    Each round the bank scores a calibration sample of honest reports (features only, no
    outcomes) by s(x) = max(g(x), g(x + delta*)), delta* the linear recourse within its
    action set and `budget`, and takes Park et al.'s PAC bound tau: with probability
    >= 1 - alpha over the sample, at most a share epsilon of applicants lacks recourse at
    any threshold <= tau. It deploys min(decision.threshold, tau): its usual threshold,
    lowered only as far as the guarantee needs.

    ``calibration``: ``fresh`` - an independent draw of applicants from the world, the
    same size as a cohort (i.i.d. with the cohort and independent of the model's training
    rows: Park et al.'s setting; a world of persistent applicants, lending_fico, draws
    the same people again); ``cohort`` - the applicants about to be decided (the bank
    sees their reports before deciding; at most a share epsilon of *them* lacks recourse,
    deterministically).
    """

    epsilon: float = 0.05  # largest share of applicants allowed to lack recourse, in (0, 1)
    alpha: float = 0.05  # probability that the calibration draw breaks the guarantee, in (0, 1)
    calibration: Literal["fresh", "cohort"] = "fresh"  # whose honest reports calibrate
    # budget of the recourse the bank certifies (cost units; None: as learner.recourse_budget)
    budget: Positive | None = None

    @field_validator("epsilon", "alpha")
    @classmethod
    def _open_unit(cls, v: float) -> float:
        if not (math.isfinite(v) and 0.0 < v < 1.0):
            raise ValueError("must be a number strictly between 0 and 1")
        return v


class DecisionRule(_Model):
    """How the learner's P(favourable) becomes each person's decision."""

    # decision rule (pare: threshold lowered each round to guarantee recourse, see PareSpec)
    rule: Literal["threshold", "capacity", "argmax", "pare"] = "threshold"
    threshold: Probability = 0.5  # threshold rule: favourable when P(favourable) >= this
    group_thresholds: dict[str, Probability] = {}  # per-group thresholds (override threshold)
    capacity: Probability = 0.5  # capacity rule: share of each cohort given the favourable decision
    # capacity rule: favourable decisions per round (people; None: the share `capacity`)
    places: PositiveInt | None = None
    pare: PareSpec = PareSpec()  # pare rule: the guarantee and its calibration

    @model_validator(mode="after")
    def _pare_alone(self) -> DecisionRule:
        if self.rule == "pare" and self.group_thresholds:
            raise ValueError(
                "rule 'pare' certifies one threshold for everyone; remove group_thresholds"
            )
        return self


class LabelRule(_Model):
    """Which outcomes the learner is retrained on."""

    selective: bool = False  # the outcome is observed only after a favourable decision
    unobserved: Literal["drop", "unfavourable"] = "drop"  # the others: no row / unfavourable label


class QuerySpec(_Model):
    """The query group: the people a collective acts for (and the env's reward counts)."""

    world: bool = False  # restrict to the world's own query group (school: S)
    groups: list[str] | None = None  # restrict to these groups (None: every group)
    labels: list[int] | None = None  # restrict to these true outcomes (None: any)
    goal: int = Field(1, ge=0)  # the class the query group wants

    @field_validator("groups", "labels")
    @classmethod
    def _not_empty(cls, v: list | None, info: ValidationInfo) -> list | None:
        return _nonempty_restriction(v, info)


class RewardSpec(_Model):
    """Reward = query group's favourable rate - cost_weight * mean collective cost."""

    cost_weight: NonNegative = 0.1  # lambda: reward per unit of mean perturbation cost


# -- populations ---------------------------------------------------------------------------


class SocialGraphSpec(_Model):
    """Who hears a collective's plan: a social graph over its eligible members.

    ``complete``: everyone eligible hears it. ``sbm``: a stochastic block model over the
    members with blocks = groups, then an independent cascade from seed members.
    ``networkx``: any networkx generator ``generator(n, **params, seed=...)``.
    """

    kind: Literal["complete", "sbm", "networkx"] = "complete"  # graph family
    mean_degree: Positive = 8.0  # sbm: expected contacts per member
    homophily: Probability = 0.8  # sbm: expected share of a member's contacts in its own group
    generator: str | None = None  # networkx: generator name, e.g. watts_strogatz_graph
    params: dict[str, Any] = {}  # networkx: generator arguments besides n and seed
    seed_fraction: Probability = 0.05  # share of eligible members who start with the plan
    seed_groups: list[str] | None = None  # organisers come from these groups (None: any)
    spread: Probability = 0.3  # cascade: probability that a contact passes the plan on

    @model_validator(mode="after")
    def _generator_given(self) -> SocialGraphSpec:
        if self.kind == "networkx" and not self.generator:
            raise ValueError("kind 'networkx' needs generator (a networkx generator name)")
        return self


class _Population(_Model):
    groups: list[str] | None = None  # eligible groups (None: every group)
    # eligible labels (individuals: their true outcome; collectives: their training label)
    labels: list[int] | None = None
    participation: Probability = 1.0  # alpha: share of the eligible (and reached) who act
    epsilon: NonNegative = 1.0  # budget: largest cost of one person's change (cost units)
    actionable: list[str] | None = None  # restrict changes to these features (None: all actionable)
    increase_only: list[str] = []  # extra monotonicity for this population
    decrease_only: list[str] = []  # extra monotonicity for this population

    @field_validator("groups", "labels")
    @classmethod
    def _not_empty(cls, v: list | None, info: ValidationInfo) -> list | None:
        return _nonempty_restriction(v, info)


def _nonempty_restriction(v: list | None, info: ValidationInfo) -> list | None:
    """An empty restriction list selects nobody; None (omitted) selects everyone."""
    if v is not None and not v:
        raise ValueError(
            f"an empty {info.field_name} list selects nobody; "
            f"omit {info.field_name} to include every {info.field_name[:-1]}"
        )
    return v


class UniformTolerance(_Model):
    """Effort tolerances spread evenly between `low` and `high`."""

    kind: Literal["uniform"]
    low: NonNegative = 0.0  # smallest tolerance (cost units)
    high: NonNegative  # largest tolerance (cost units)

    @model_validator(mode="after")
    def _ordered(self) -> UniformTolerance:
        if self.low > self.high:
            raise ValueError(f"low ({self.low:g}) must not exceed high ({self.high:g})")
        return self


class LognormalTolerance(_Model):
    """Effort tolerances whose logarithm is normal: most near `median`, a long upper tail."""

    kind: Literal["lognormal"]
    median: Positive  # median tolerance (cost units)
    sigma: NonNegative = 0.5  # standard deviation of the log tolerance


Tolerance = Annotated[
    Union[UniformTolerance, LognormalTolerance],  # noqa: UP007 (discriminated)
    Field(discriminator="kind"),
]


class TruthfulPopulation(_Population):
    """Reports truthfully and never seeks recourse (the default for everyone)."""

    strategy: Literal["truthful"]


class _Seekers(_Population):
    """How rejected people act on their recourse (recourse-game's adaptation types:
    participation α < 1 is its binary adaptation, `move` < 1 its continuous one).

    A seeker's change is their recourse δ scaled by min(`move`, τ / cost(δ), s*):
    `move` of the way, never more than their own effort tolerance τ (drawn once per
    person from `tolerance`, by the person's effort quantile; cost is a norm, so the
    scaled change costs that share of cost(δ) and stays in the action set), and with
    `just_enough` no further than s*, the least share of δ that gets this round's
    favourable decision (found by bisection; all of δ when δ does not get it).
    """

    # when seekers are decided on their changed reports: again in this round, or when
    # they apply next round (needs people who stay: world.people, or the fico world)
    reapply: Literal["same_round", "next_round"] = "same_round"
    move: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0  # share of the way moved per round
    # stop along the recourse where this round's decision flips (its threshold or cut-off
    # score), as recourse-game's agents move to the threshold
    just_enough: bool = False
    tolerance: Tolerance | None = None  # per-person effort tolerance (None: up to epsilon)
    # min_cost: the least-cost change in the action set that gets this round's favourable
    # decision (none if it costs more than epsilon); budget: the change within epsilon that
    # maximises the favourable probability (OAR Eq. 2), whatever it costs
    objective: Literal["min_cost", "budget"] = "min_cost"
    # min_cost: clear the decision's score by this much probability (robust to small noise)
    margin: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0


class IndividualPopulation(_Seekers):
    """People who got the unfavourable decision change their own features: their cheapest
    recourse, or with `objective: budget` OAR Eq. 2's."""

    strategy: Literal["individual"]
    method: Literal["pgd", "wachter", "linear"] = "pgd"  # individual recourse method
    steps: PositiveInt = 20  # gradient steps (pgd, wachter)


class GenrePopulation(_Seekers):
    """Rejected people follow a recourse sampled from GenRe (Garg, Nagalapatti & Sarawagi),
    a generative model of where similar people ended up favourably, refit every few
    rounds on the rows the deployed model trains on; the sample is projected into the
    population's action set and budget."""

    strategy: Literal["genre"]
    retrain_every: PositiveInt = 5  # rounds between refits of the GenRe model (rounds)
    memory: PositiveInt = 2000  # latest observed training rows kept for refits (rows)
    epochs: PositiveInt = 30  # passes over GenRe's sources per refit (minibatches of 64 pairs)
    layers: PositiveInt = 1  # transformer layers in GenRe's encoder and, separately, decoder
    samples: PositiveInt = 10  # best-of-k: samples drawn per person, the model's favourite kept
    temperature: Positive = 10.0  # tau: multiplies GenRe's logits (larger: nearer the mode)
    lam: NonNegative = 5.0  # lambda of GenRe's pairing, per standard deviation of l1 distance
    gamma: GenreGamma = 0.7  # GenRe's targets: favourable rows the model scores above it


class _Collective(_Population):
    # eligible by this round's decision
    decisions: Literal["any", "favourable", "unfavourable"] = "any"
    graph: SocialGraphSpec = SocialGraphSpec()  # who hears the plan
    query: QuerySpec | None = None  # whom it acts for (None: the scenario's query)


class CollectiveOarPopulation(_Collective):
    """Training-data subjects perturbing their reports by OAR (Eq. 3) for the query group."""

    strategy: Literal["collective_oar"]
    horizon: PositiveInt = 1  # look-ahead: rounds of updates the plan is optimised over
    steps: PositiveInt = 10  # projected-gradient steps of the OAR solver
    solver: Literal["pgd", "fgm"] = "pgd"  # OAR solver (fgm: the paper's one-step heuristic)


class CollectiveBlackboxPopulation(_Collective):
    """Training-data subjects running OAR against a surrogate of the deployed model: a model
    of the assumed family and update rule fitted to the answers the deployed model gives
    to at most `budget` reports a round (decisions or scores), updated like the learner."""

    strategy: Literal["collective_blackbox"]
    access: Literal["decisions", "scores"] = "scores"  # what a submitted report reveals
    budget: PositiveInt | None = 200  # reports answered by the model a round (None: no limit)
    # the update rule the collective assumes (None: the learner's own, a correct assumption)
    assumed_update_rule: Literal["refit", "window", "sgd", "frozen"] | None = None
    # hyperparameters the collective assumes where they differ from the learner's
    # (e.g. {C: 0.1}; {}: the learner's own, a correct assumption)
    assumed_params: dict[str, Any] = {}
    memory: PositiveInt = 2000  # latest answered reports kept for fitting the surrogate
    horizon: PositiveInt = 1  # look-ahead: rounds of updates the plan is optimised over
    steps: PositiveInt = 10  # projected-gradient steps of the OAR solver


class CollectiveSignalPopulation(_Collective):
    """Training-data subjects planting a signal (Hardt et al. 2023): each member reports
    its features moved by `signal` (projected into its action set) and, with
    `set_label`, the label `target`; query subjects then carry the same signal."""

    strategy: Literal["collective_signal"]
    signal: dict[str, float]  # feature -> offset added by each member (feature units)
    target: int = Field(1, ge=0)  # the label members report with set_label, and the goal
    set_label: bool = False  # members report `target` as their label (a crowd-labelling world)

    @field_validator("signal")
    @classmethod
    def _signal_given(cls, v: dict[str, float]) -> dict[str, float]:
        if not v:
            raise ValueError("an empty signal changes nothing; give feature: offset pairs")
        return v


class ControlledPopulation(_Collective):
    """Training-data subjects applying the environment's action (a shared direction per class)."""

    strategy: Literal["controlled"]


Population = Annotated[
    Union[  # noqa: UP007 (discriminated)
        TruthfulPopulation,
        IndividualPopulation,
        CollectiveOarPopulation,
        ControlledPopulation,
        GenrePopulation,
        CollectiveBlackboxPopulation,
        CollectiveSignalPopulation,
    ],
    Field(discriminator="strategy"),
]


# -- the scenario ----------------------------------------------------------------------------


class Scenario(_Model):
    """A validated scenario (see the module docstring for the meaning of each block)."""

    name: str  # scenario name (defaults to the file name)
    description: str = ""  # one paragraph for humans
    rounds: PositiveInt = 50  # default number of rounds of an episode
    world: World  # where people come from
    features: FeatureRules = FeatureRules()  # who can change what
    learner: LearnerSpec = LearnerSpec()  # the deployed model
    decision: DecisionRule = DecisionRule()  # probabilities -> decisions
    labels: LabelRule = LabelRule()  # which outcomes the learner sees
    query: QuerySpec = QuerySpec()  # the group collectives act for
    populations: dict[str, Population] = {}  # who acts, by name
    reward: RewardSpec = RewardSpec()  # the environment's reward
    # several controlled populations, each its own agent (PettingZoo ParallelEnv only)
    multi_agent: bool = False

    _source: str = PrivateAttr(default="<dict>")

    @property
    def source(self) -> str:
        """The file this scenario was loaded from (or ``<dict>``)."""
        return self._source

    @model_validator(mode="after")
    def _one_controlled(self) -> Scenario:
        controlled = self.controlled_populations
        if len(controlled) > 1 and not self.multi_agent:
            raise ValueError(
                f"at most one controlled population per environment, got {controlled} "
                "(set multi_agent: true to make each its own agent in the PettingZoo "
                "ParallelEnv recourse_sim.env.multi.RecourseParallelEnv)"
            )
        return self

    @property
    def controlled(self) -> str | None:
        """Name of the population the environment's action drives (None if there is none).

        A `RecourseEnv` has at most one; with ``multi_agent: true`` the PettingZoo
        `RecourseParallelEnv` drives each of several as its own agent.
        """
        return next((k for k, p in self.populations.items() if p.strategy == "controlled"), None)

    @property
    def controlled_populations(self) -> list[str]:
        """Names of every controlled population, in scenario order."""
        return [k for k, p in self.populations.items() if p.strategy == "controlled"]

    def to_yaml(self) -> str:
        """The resolved scenario as YAML; `load_scenario` reads it back to an equal scenario."""
        return yaml.safe_dump(self.model_dump(mode="python"), sort_keys=False, allow_unicode=True)


# -- loading ---------------------------------------------------------------------------------


def _bundled_dir() -> Path | None:
    """The folder of bundled scenarios: package data when installed, ``scenarios/`` in a
    source checkout (an editable install)."""
    installed = files("recourse_sim") / "_bundled_scenarios"
    if installed.is_dir():
        return Path(str(installed))
    checkout = Path(__file__).resolve().parent.parent / "scenarios"
    if (checkout / "school_assignment.yaml").is_file():
        return checkout
    return None


def list_scenarios() -> list[str]:
    """Names of the bundled scenarios, sorted."""
    folder = _bundled_dir()
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder else []


def scenario_description(path_or_name: str | Path) -> str:
    """A scenario file's ``description``, read without validating the rest (fast: no
    dataset, learner or torch is loaded; `load_scenario` checks everything)."""
    path = scenario_path(path_or_name)
    description = _read_yaml(path).get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{path}: description must be text, got {type(description).__name__}")
    return description


def scenario_path(path_or_name: str | Path) -> Path:
    """The file of a bundled scenario name, or the given path (must exist)."""
    p = Path(path_or_name)
    if p.suffix in (".yaml", ".yml") or p.exists() or len(p.parts) > 1:
        if not p.is_file():
            raise ConfigError(f"scenario file {str(p)!r} does not exist")
        return p
    folder = _bundled_dir()
    if folder is not None and (folder / f"{p.name}.yaml").is_file():
        return folder / f"{p.name}.yaml"
    names = list_scenarios()
    close = difflib.get_close_matches(str(path_or_name), names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(
        f"unknown scenario {str(path_or_name)!r}{hint} (bundled: {', '.join(names)}; "
        "or give a path to a .yaml file)"
    )


def load_scenario(
    path_or_name: str | Path | dict,
    overrides: dict[str, object] | list[str] | None = None,
) -> Scenario:
    """Load, override and validate a scenario.

    Parameters
    ----------
    path_or_name: a bundled scenario name (see `list_scenarios`), a path to a YAML
        file, or an already-parsed mapping (relative CSV paths then resolve against the
        working directory).
    overrides: dotted keys set before validation, as ``{"learner.type": "mlp"}`` or
        ``["learner.type=mlp", "rounds=20"]`` (the value after ``=`` is parsed as YAML).

    Raises ConfigError (one line: file, dotted field, bad value) on any problem.
    """
    try:
        return _load_scenario(path_or_name, overrides)
    except ConfigError as exc:
        message = str(exc)
        if any(c in message for c in "\n\r"):  # a key or file name with a line break
            one_line = message.replace("\r", "\\r").replace("\n", "\\n")
            raise type(exc)(one_line) from None
        raise


def _load_scenario(
    path_or_name: str | Path | dict,
    overrides: dict[str, object] | list[str] | None,
) -> Scenario:
    if isinstance(path_or_name, dict):
        source, base_dir, data = "<dict>", Path.cwd(), _deepcopy(path_or_name)
        default_name = "custom"
    else:
        path = scenario_path(path_or_name)
        source, base_dir, default_name = str(path), path.resolve().parent, path.stem
        data = _read_yaml(path)
    for key, value in _parse_overrides(overrides):
        _set_dotted(data, key, value, source)
    data.setdefault("name", default_name)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc, data, source)) from None
    scenario._source = source
    _check_semantics(scenario, data, source, base_dir)
    return scenario


def _deepcopy(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _deepcopy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_deepcopy(v) for v in obj]
    return obj


MAX_SCENARIO_BYTES = 1_000_000  # a scenario file is a page of settings, never data
MAX_YAML_ALIASES = 10  # aliases (*name) per document: reuse enough, too few to bomb
MAX_YAML_DEPTH = 50  # nesting of mappings and lists


class _StrictSafeLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that also refuses a key given twice in one mapping, and bounds
    what a document can make it do: at most `MAX_YAML_ALIASES` aliases (so "billion
    laughs" documents cannot expand) and `MAX_YAML_DEPTH` levels of nesting."""

    def __init__(self, stream):
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"more than {MAX_YAML_ALIASES} aliases",
                    self.peek_event().start_mark,
                )
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"nested deeper than {MAX_YAML_DEPTH} levels",
                    self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:  # an unhashable key: SafeLoader reports it below
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _safe_load(text: str) -> Any:
    return yaml.load(text, Loader=_StrictSafeLoader)  # a SafeLoader: never constructs objects


MAX_OVERRIDE_CHARS = 10_000


def _clipped(text: str, limit: int = 60) -> str:
    """`text` quoted for an error line, cut to `limit` characters."""
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _short_reason(exc: BaseException) -> str:
    """An exception's reason in at most 120 characters, on one line."""
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    text = " ".join(str(text).split())
    return text if len(text) <= 120 else text[:117] + "..."


def _yaml_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    prefix = "could not determine a constructor for the tag "
    if problem.startswith(prefix):
        tag = problem[len(prefix) :].strip("'").replace("tag:yaml.org,2002:", "!!")
        return f"tag {tag!r} is not allowed (scenario files hold plain data, never objects)"
    return problem


def _read_yaml(path: Path) -> dict:
    try:
        if not path.is_file():
            raise ConfigError(f"{path}: not a regular file")
        with open(path, "rb") as f:
            raw = f.read(MAX_SCENARIO_BYTES + 1)
        if len(raw) > MAX_SCENARIO_BYTES:
            raise ConfigError(
                f"{path}: larger than {MAX_SCENARIO_BYTES:,} bytes; a scenario file holds "
                "settings (data belongs in a CSV file it names)"
            )
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read scenario file ({_short_reason(exc)})") from None
    try:
        data = _safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: invalid YAML{where}: {_yaml_problem(exc)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a scenario must be a mapping, got {type(data).__name__}")
    return data


def _parse_overrides(overrides: dict[str, object] | list[str] | None) -> list[tuple[str, Any]]:
    if overrides is None:
        return []
    if isinstance(overrides, dict):
        return list(overrides.items())
    parsed = []
    for item in overrides:
        key, sep, text = str(item).partition("=")
        shown = _clipped(str(item))
        if not sep or not key.strip():
            raise ConfigError(f"override {shown} must look like key.path=value")
        if len(text) > MAX_OVERRIDE_CHARS:
            raise ConfigError(
                f"override {shown}: value longer than {MAX_OVERRIDE_CHARS} characters"
            )
        try:
            value = _safe_load(text)  # the same bounds as a scenario file
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {shown}: not valid YAML ({_yaml_problem(exc)})") from None
        parsed.append((key.strip(), value))
    return parsed


def _set_dotted(data: dict, key: str, value: Any, source: str) -> None:
    parts = key.split(".")
    if any(not p for p in parts):
        raise ConfigError(f"override key {key!r} has an empty component")
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        where = ".".join(parts[: i + 1])
        if isinstance(node, list):
            node = node[_index(part, node, where)]
            continue
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict | list):
            raise ConfigError(f"{source}: override {key}: {where} is {child!r}, not a mapping")
        node = child
    last = parts[-1]
    if isinstance(node, list):
        node[_index(last, node, key)] = value
    elif value is None and len(parts) == 2 and parts[0] == "populations":
        node.pop(last, None)  # populations.NAME=null: no such population
    else:
        node[last] = value
        if len(parts) == 3 and parts[0] == "populations" and last == "strategy":
            _keep_settings_of(node, value, key)


def _keep_settings_of(population: dict, strategy: Any, key: str) -> None:
    """After ``populations.NAME.strategy=NEW``: drop the settings NEW does not take
    (saying which), so switching a population's strategy is one override."""
    models = {
        typing.get_args(m.model_fields["strategy"].annotation)[0]: m
        for m in typing.get_args(typing.get_args(Population)[0])
    }
    model = models.get(strategy) if isinstance(strategy, str) else None
    if model is None:  # (an unknown strategy, or not a name: validation names it)
        return
    dropped = [k for k in population if k not in model.model_fields]
    for k in dropped:
        del population[k]
    if dropped:
        warnings.warn(
            f"override {key}={strategy}: dropped {', '.join(map(str, dropped))} "
            f"(not settings of {strategy})",
            stacklevel=5,
        )


def _index(part: str, node: list, where: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError(f"override {where}: {part!r} is not an index of a list of {len(node)}")
    return int(part)


# -- error messages --------------------------------------------------------------------------


def _format_error(exc: ValidationError, data: dict, source: str) -> str:
    errors = exc.errors()
    err = errors[0]
    path, value, found = _locate(data, err["loc"])
    dotted = ".".join(_show_part(p) for p in path) or "<top level>"
    more = (
        f" (and {len(errors) - 1} more problem{'s' * (len(errors) > 2)})" if len(errors) > 1 else ""
    )
    kind = err["type"]
    if kind == "extra_forbidden":
        valid = _valid_keys(err["loc"][:-1])
        close = difflib.get_close_matches(str(err["loc"][-1]), valid, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listing = f" (valid keys: {', '.join(valid)})" if valid else ""
        return f"{source}: {dotted}: unknown key{hint}{listing}{more}"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        ctx = err.get("ctx", {})
        tag_name = str(ctx.get("discriminator", "")).strip("'")
        tags = ctx.get("expected_tags") or ", ".join(
            repr(t) for t in _union_tags(err["loc"], tag_name or "kind")
        )
        dotted_tag = f"{dotted}.{tag_name}" if tag_name else dotted
        what = "strategy" if tag_name == "strategy" else tag_name or "kind"
        if kind == "union_tag_not_found":
            return f"{source}: {dotted_tag}: missing; choose a {what}: {tags}{more}"
        bad = ctx.get("tag")
        valid = [t.strip().strip("'") for t in str(tags).split(",")]
        close = difflib.get_close_matches(str(bad), valid, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listing = f" (valid: {', '.join(valid)})"
        return f"{source}: {dotted_tag}: unknown {what} {bad!r}{hint}{listing}{more}"
    if kind == "missing":
        return f"{source}: {dotted}: required field is missing{more}"
    message = err["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    # the bad value, unless it is a whole block (model-level checks name the culprit)
    got = f" (got {value!r})" if found and len(repr(value)) <= 120 else ""
    return f"{source}: {dotted}: {message}{got}{more}"


def _show_part(part: Any) -> str:
    """A path component as text; quoted when it is not a plain word (empty, spaces, dots)."""
    text = str(part)
    plain = text and all(c.isalnum() or c in "_-" for c in text)
    return text if plain else repr(part)


def _locate(data: Any, loc: tuple) -> tuple[list, Any, bool]:
    """Walk the raw input along a pydantic error location; skip union tags."""
    path: list = []
    node, found = data, True
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
            path.append(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
            path.append(part)
        elif isinstance(node, dict) and isinstance(part, str) and _is_tag(node, part):
            continue  # pydantic puts the discriminator's value in the location
        else:
            path.append(part)
            found = False
    return path, node, found


def _is_tag(node: dict, part: str) -> bool:
    return node.get("kind") == part or node.get("strategy") == part


def _valid_keys(loc: tuple) -> list[str]:
    """The field names of the model at a location (pydantic locations, tags included)."""
    model: Any = Scenario
    for part in loc:
        model = _child_type(model, part)
        if model is None:
            return []
    model = _strip(model)  # an optional block (world.people) lists its own keys
    return list(model.model_fields) if _is_model(model) else []


def _union_tags(loc: tuple, tag_field: str) -> list[str]:
    """The values of `tag_field` that the tagged union at `loc` accepts."""
    t: Any = Scenario
    for part in loc:
        t = _child_type(t, part)
        if t is None:
            return []
    tags: list[str] = []
    for member in typing.get_args(_strip(t)):
        field = getattr(_strip(member), "model_fields", {}).get(tag_field)
        if field is not None:
            tags.extend(str(a) for a in typing.get_args(field.annotation))
    return tags


def _is_model(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _child_type(t: Any, part: Any) -> Any:
    t = _strip(t)
    if _is_model(t):
        field = t.model_fields.get(part) if isinstance(part, str) else None
        return None if field is None else field.annotation
    origin = typing.get_origin(t)
    if origin in (Union, types.UnionType):
        for member in typing.get_args(t):
            member = _strip(member)
            if _is_model(member):
                for tag_field in ("kind", "strategy"):
                    f = member.model_fields.get(tag_field)
                    if f is not None and part in typing.get_args(f.annotation):
                        return member
        return None
    if origin is dict:
        return typing.get_args(t)[1]
    if origin is list:
        return typing.get_args(t)[0]
    return None


def _strip(t: Any) -> Any:
    """Remove Annotated and Optional wrappers."""
    while True:
        if typing.get_origin(t) is Annotated:
            t = typing.get_args(t)[0]
            continue
        if typing.get_origin(t) in (Union, types.UnionType):
            args = [a for a in typing.get_args(t) if a is not type(None)]
            if len(args) == 1:
                t = args[0]
                continue
        return t


# -- checks that need the world --------------------------------------------------------------


def world_feature_names(
    world: SchoolWorld | FicoWorld | DatasetWorld | CsvWorld | GaussianWorld,
) -> tuple[str, ...]:
    """The feature names a world produces (loads a bundled dataset if needed; cached)."""
    if isinstance(world, SchoolWorld):
        from recourse_sim.data import SCHOOL_FEATURES

        return SCHOOL_FEATURES
    if isinstance(world, FicoWorld):
        return ("score",)
    if isinstance(world, DatasetWorld):
        from recourse_sim.data import load

        return tuple(load(world.name).feature_names)
    if isinstance(world, GaussianWorld):
        return tuple(f"x{j + 1}" for j in range(len(world.means[0])))
    if world.columns is None:  # inferred from the file (read and cached by then)
        from recourse_sim.data.csv_world import read_csv_world

        return read_csv_world(world).feature_names
    return tuple(world.columns)


def _check_class_numbers(scenario: Scenario, data, fail) -> None:
    """Refuse class numbers (``labels``, ``goal``) that would mean other label values
    than they say: a binary label is coded 1 = favourable, so with numeric values and
    ``favourable: 0`` the number 0 would name the people whose label is 1."""
    from recourse_sim.data.csv_world import renumbered

    if not renumbered(data):
        return
    coding = ", ".join(f"value {v} is class {i}" for i, v in enumerate(data.class_values))
    named = [("query.labels", scenario.query.labels)]
    for pname, pop in scenario.populations.items():
        named.append((f"populations.{pname}.labels", pop.labels))
        query = getattr(pop, "query", None)
        if query is not None:
            named.append((f"populations.{pname}.query.labels", query.labels))
    for path, classes in named:
        if classes:
            fail(
                path,
                f"classes are numbered 1 = favourable, 0 = not (the label's {coding}); "
                f"{list(classes)} would name the label values "
                f"{[data.class_values[c] for c in classes if 0 <= c < len(data.class_values)]}: "
                "write the class numbers, or recode the label column so that 1 is favourable",
            )


def check_classes(scenario: Scenario, n_classes: int) -> None:
    """Goals and label filters must be classes of the world (0..k-1)."""

    def check(path: str, values: list[int] | None) -> None:
        for v in values or []:
            if not 0 <= v < n_classes:
                raise ConfigError(
                    f"{scenario.source}: {path}: class {v} out of range; the world has "
                    f"{n_classes} classes (0..{n_classes - 1})"
                )

    check("query.goal", [scenario.query.goal])
    check("query.labels", scenario.query.labels)
    for name, pop in scenario.populations.items():
        check(f"populations.{name}.labels", pop.labels)
        query = getattr(pop, "query", None)
        if query is not None:
            check(f"populations.{name}.query.goal", [query.goal])
            check(f"populations.{name}.query.labels", query.labels)


def _n_classes(world) -> int:
    """The number of classes of a world's labels."""
    if isinstance(world, GaussianWorld):
        return len(world.means)
    if isinstance(world, DatasetWorld):
        from recourse_sim.data import load

        return load(world.name).n_classes
    if isinstance(world, CsvWorld):
        from recourse_sim.data.csv_world import read_csv_world

        return read_csv_world(world).n_classes
    return 2  # school (H1 or not), FICO (repay or not)


def world_group_names(
    world: SchoolWorld | FicoWorld | DatasetWorld | CsvWorld | GaussianWorld,
) -> tuple[str, ...] | None:
    """The group names of a world (None when they are only known from the CSV's rows)."""
    if isinstance(world, SchoolWorld):
        return ("N1", "N2")
    if isinstance(world, FicoWorld):
        return tuple(world.groups)
    if isinstance(world, DatasetWorld):
        from recourse_sim.data import load

        ds = load(world.name)
        return tuple(ds.group_labels) if ds.group_labels else ("all",)
    if isinstance(world, GaussianWorld):
        return ("data", "query")
    return None


def _check_budgets(scenario: Scenario, d: int, fail) -> None:
    """Every declared count of people against this machine's memory (before anything
    is allocated)."""
    from recourse_sim.budget import rows_over_budget

    world = scenario.world
    n, field = cohort_size(world)
    counts = [(field, n, "people a round")]
    if hasattr(world, "history_size"):
        counts.append(("world.history_size", world.history_size, "history rows"))
    people = getattr(world, "people", None)
    if people is not None and people.initial is not None:
        counts.append(("world.people.initial", people.initial, "people"))
    for field, n, what in counts:
        problem = rows_over_budget(n, d, what)
        if problem:
            fail(field, problem)


def cohort_size(
    world: SchoolWorld | FicoWorld | DatasetWorld | CsvWorld | GaussianWorld,
) -> tuple[int, str]:
    """People in one cohort of a world, and the field that sets it."""
    if isinstance(world, FicoWorld):
        return world.n_applicants, "world.n_applicants"
    if isinstance(world, GaussianWorld):
        return sum(world.class_sizes) + world.query_size, "world.class_sizes + world.query_size"
    return world.cohort_size, "world.cohort_size"


def _check_semantics(scenario: Scenario, data: dict, source: str, base_dir: Path) -> None:
    """Cross-field checks: feature and group names, learner, CSV contents."""

    def fail(path: str, message: str) -> None:
        raise ConfigError(f"{source}: {path}: {message}")

    world = scenario.world
    if isinstance(world, FicoWorld):
        from recourse_sim.data import FICO_GROUPS

        for i, g in enumerate(world.groups):
            if g not in FICO_GROUPS:
                fail(
                    f"world.groups.{i}",
                    f"unknown FICO group {g!r} (valid: {', '.join(FICO_GROUPS)})",
                )
    if isinstance(world, CsvWorld):
        resolved = (base_dir / world.path).resolve()
        world.path = str(resolved)
        from recourse_sim.data.csv_world import read_csv_world

        data = read_csv_world(world, source)  # validates the file (cached)
        _check_class_numbers(scenario, data, fail)
    names = world_feature_names(world)
    _check_budgets(scenario, len(names), fail)
    check_classes(scenario, _n_classes(world))

    def check_names(path: str, values: list[str] | dict | str | None) -> None:
        if isinstance(values, str):  # (features.cost: std)
            return
        for i, f in enumerate(values or []):
            if f not in names:
                close = difflib.get_close_matches(f, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                key = f"{path}.{f}" if isinstance(values, dict) else f"{path}.{i}"
                fail(key, f"unknown feature {f!r}{hint} (features: {', '.join(names)})")

    rules = scenario.features
    for field in ("actionable", "immutable", "increase_only", "decrease_only", "proxy"):
        check_names(f"features.{field}", getattr(rules, field))
    for field in ("lower", "upper", "max_change", "cost"):
        check_names(f"features.{field}", getattr(rules, field))
    for pname, pop in scenario.populations.items():
        for field in ("actionable", "increase_only", "decrease_only"):
            check_names(f"populations.{pname}.{field}", getattr(pop, field))
        if pop.strategy == "collective_signal":
            check_names(f"populations.{pname}.signal", pop.signal)
        both = set(pop.increase_only) & set(pop.decrease_only)
        if both:
            fail(
                f"populations.{pname}",
                f"feature {sorted(both)[0]!r} is both increase_only and decrease_only",
            )

    persistent = isinstance(world, FicoWorld) or world.people is not None
    for pname, pop in scenario.populations.items():
        if getattr(pop, "reapply", None) == "next_round" and not persistent:
            fail(
                f"populations.{pname}.reapply",
                "'next_round' needs people who stay and apply again (set world.people; "
                f"a {world.kind} world without it draws new people every round)",
            )

    groups = world_group_names(world)
    if groups is None:
        from recourse_sim.data.csv_world import read_csv_world

        groups = read_csv_world(world, source).group_labels

    def check_groups(path: str, values: list[str] | dict | None) -> None:
        for i, g in enumerate(values or []):
            if g not in groups:
                close = difflib.get_close_matches(str(g), groups, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                key = f"{path}.{g}" if isinstance(values, dict) else f"{path}.{i}"
                fail(key, f"unknown group {g!r}{hint} (groups: {', '.join(groups)})")

    check_groups("query.groups", scenario.query.groups)
    check_groups("decision.group_thresholds", scenario.decision.group_thresholds)
    for pname, pop in scenario.populations.items():
        check_groups(f"populations.{pname}.groups", pop.groups)
        if pop.strategy in (
            "collective_oar",
            "controlled",
            "collective_blackbox",
            "collective_signal",
        ):
            check_groups(f"populations.{pname}.graph.seed_groups", pop.graph.seed_groups)
            if pop.query is not None:
                check_groups(f"populations.{pname}.query.groups", pop.query.groups)

    from recourse_sim.learners import LEARNERS, learner_class, make_learner

    spec = scenario.learner
    if learner_class(spec.type) is None:
        close = difflib.get_close_matches(spec.type, list(LEARNERS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        fail("learner.type", f"unknown learner {spec.type!r}{hint} (valid: {', '.join(LEARNERS)})")
    if spec.recourse_loss_weight > 0:
        supported = [
            name
            for name, cls in LEARNERS.items()
            if set(_RECOURSE_TRAINING_KEYS) <= set(cls._get_param_names())
        ]
        if spec.type not in supported:
            fail(
                "learner.recourse_loss_weight",
                f"learner {spec.type!r} has no recourse-aware training "
                f"(got {spec.recourse_loss_weight!r}; supported: {', '.join(supported)})",
            )
    rule = scenario.decision
    if rule.rule == "pare":
        n, where = cohort_size(world)
        need = pare_min_calibration(rule.pare.epsilon, rule.pare.alpha)
        if n < need:
            fail(
                "decision.pare",
                f"epsilon={rule.pare.epsilon:g}, alpha={rule.pare.alpha:g} need at least "
                f"{need} calibration rows ((1 - epsilon)^n <= alpha), but a cohort has {n} "
                f"({where}); raise it or loosen epsilon/alpha",
            )
    try:
        params = spec.learner_params(LEARNERS[spec.type]._get_param_names())
    except ValueError as exc:
        fail("learner.standardize", str(exc))
    try:
        # names are checked here; values when the environment fits the learner
        make_learner(spec.type, update_rule=spec.update_rule, window=spec.window, **params)
    except ConfigError as exc:
        fail("learner", str(exc))
    except TypeError as exc:
        fail("learner.params", f"{exc} (got {spec.params!r})")
    for pname, pop in scenario.populations.items():
        if pop.strategy != "collective_blackbox" or not pop.assumed_params:
            continue
        field = f"populations.{pname}.assumed_params"
        fixed = sorted(set(pop.assumed_params) & {"update_rule", "window"})
        if fixed:
            fail(field, f"{fixed[0]!r} is not a hyperparameter here (use assumed_update_rule)")
        fixed = sorted(set(pop.assumed_params) & {"standardize", *_RECOURSE_TRAINING_KEYS})
        if fixed:
            fail(field, f"{fixed[0]!r} is the learner's, set by the environment")
        try:
            assumed = {**params, **pop.assumed_params}
            model = make_learner(spec.type, update_rule="frozen", **assumed)
            # values are checked by a fit, here on two rows (one per class)
            import numpy as np

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(np.repeat([[0.0], [1.0]], len(names), axis=1), np.array([0, 1]))
        except ConfigError as exc:
            fail(field, str(exc))
        except TypeError as exc:
            fail(field, f"{exc} (got {pop.assumed_params!r})")
