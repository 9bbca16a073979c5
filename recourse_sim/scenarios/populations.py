"""The ``populations`` section: who acts and how (one strategy per population)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from recourse_sim.scenarios.base import (
    GenreGamma,
    LabelValue,
    Name,
    NonNegative,
    NonNegativeInt,
    Positive,
    PositiveInt,
    Probability,
    _label_classes,
    _Model,
    _nonempty_restriction,
)
from recourse_sim.scenarios.query import QuerySpec

STRATEGIES: tuple[str, ...] = (
    "truthful",
    "individual",
    "collective_oar",
    "controlled",
    "genre",
    "best_response",
    "collective_blackbox",
    "collective_signal",
)
"""Population strategies a scenario may name (`recourse_sim.agents.REGISTRY` implements them)."""


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
    seed_groups: list[Name] | None = None  # organisers come from these groups (None: any)
    spread: Probability = 0.3  # cascade: probability that a contact passes the plan on

    @model_validator(mode="after")
    def _generator_given(self) -> SocialGraphSpec:
        if self.kind == "networkx" and not self.generator:
            raise ValueError("kind 'networkx' needs generator (a networkx generator name)")
        return self


class _Population(_Model):
    groups: list[Name] | None = None  # eligible groups (None: every group)
    # eligible labels (individuals: their true outcome; collectives: their training label),
    # as label values in the data or class numbers
    labels: list[LabelValue] | None = None
    participation: Probability = 1.0  # alpha: share of the eligible (and reached) who act
    epsilon: NonNegative = 1.0  # budget: largest cost of one person's change (cost units)
    actionable: list[str] | None = None  # restrict changes to these features (None: all actionable)
    increase_only: list[str] = []  # extra monotonicity for this population
    decrease_only: list[str] = []  # extra monotonicity for this population

    @field_validator("groups", "labels")
    @classmethod
    def _not_empty(cls, v: list | None, info: ValidationInfo) -> list | None:
        return _nonempty_restriction(v, info)

    _classes: list[int] | None = PrivateAttr(None)  # `labels` as class numbers (on load)

    @property
    def classes(self) -> list[int] | None:
        """`labels` as class numbers (resolved against the world's label values by
        `check_classes`; None: anyone)."""
        return _label_classes(self)


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


class UniformMargin(_Model):
    """Per-person margins spread evenly between `low` and `high` (probability units)."""

    kind: Literal["uniform"]
    low: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0  # smallest margin (probability)
    high: Annotated[float, Field(ge=0.0, lt=1.0)]  # largest margin (probability)

    @model_validator(mode="after")
    def _ordered(self) -> UniformMargin:
        if self.low > self.high:
            raise ValueError(f"low ({self.low:g}) must not exceed high ({self.high:g})")
        return self


class LognormalMargin(_Model):
    """Per-person margins whose logarithm is normal: most near `median`, a long upper
    tail (clipped below 1; a margin that puts the aim at or above 1 cannot be reached:
    that person stays, counted in ``aim_unreachable``)."""

    kind: Literal["lognormal"]
    median: Annotated[float, Field(gt=0.0, lt=1.0)]  # median margin (probability)
    sigma: NonNegative = 0.5  # standard deviation of the log margin


MarginSpread = Annotated[
    Union[UniformMargin, LognormalMargin],  # noqa: UP007 (discriminated)
    Field(discriminator="kind"),
]

# a seeker's margin: one number, or a spread given as a mapping (errors name the branch)
Margin = Annotated[
    Union[  # noqa: UP007 (discriminated)
        Annotated[Annotated[float, Field(ge=0.0, lt=1.0)], Tag("number")],
        Annotated[MarginSpread, Tag("spread")],
    ],
    Discriminator(lambda v: "spread" if isinstance(v, dict | BaseModel) else "number"),
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
    # min_cost: how far above the score the decision needs (threshold or cut-off) a seeker
    # aims, in probability units; a number for everyone (0: exactly at it, the best
    # response of strategic classification), or a spread drawn once per person (kept for
    # their stay, from the named stream `margin/<population>`): seekers are given the
    # exact score needed, and a margin of their own stands in (an assumption) for not
    # knowing it; a spread's values at or above 1 are clipped below 1 (that aim is out
    # of reach: the metric aim_unreachable)
    margin: Margin = 0.0


IndividualMethod = Literal["pgd", "wachter", "linear", "roar", "probe", "claproar", "gravitational"]


class IndividualPopulation(_Seekers):
    """People who got the unfavourable decision change their own features: their cheapest
    recourse, or with `objective: budget` OAR Eq. 2's."""

    strategy: Literal["individual"]
    # individual recourse method; roar and probe are robust (`recourse_sim.recourse.robust`),
    # claproar and gravitational limit the shifts recourse causes (`recourse.mitigations`)
    method: IndividualMethod = "pgd"
    # gradient steps (pgd, wachter, claproar, gravitational; the search of roar and probe)
    steps: PositiveInt = 20
    # roar: radius of the l-inf ball of model-parameter shifts the recourse must survive
    # (the learner's own parameter units: per feature SD under standardize; logit units)
    roar_delta: Annotated[float, Field(ge=0.0, le=100.0)] = 0.1
    # probe: SD of the Gaussian noise on the implemented action (cost units per feature)
    probe_sigma: Annotated[float, Field(ge=0.0, le=1e6)] = 0.1
    # probe: the largest recourse invalidation rate accepted under that noise (probability)
    probe_invalidation: Annotated[float, Field(gt=0.0, le=0.5)] = 0.1
    # claproar, gravitational: weight of the external cost in the search's objective (the
    # classifier's loss at the counterfactual; the cost-norm distance to the goal class's
    # centroid)
    mitigation_weight: Annotated[float, Field(ge=0.0, le=1e6)] = 5.0
    # scm worlds: the recourse type, found by an exact search over a grid of actions
    # (`recourse_sim.recourse.causal`): ce changes features directly, cr intervenes and
    # the descendants follow, icr aims at the true outcome; None: `method` on the reports
    recourse: Literal["ce", "cr", "icr"] | None = None
    # the search's grid: changes of k steps, |k| <= search_steps, per actionable feature
    # (a step is a quarter of the feature's standard deviation; for integer nodes rounded
    # to a whole number, at least 1)
    search_steps: Annotated[int, Field(ge=1, le=50)] = 8

    @model_validator(mode="after")
    def _method_fits_objective(self) -> IndividualPopulation:
        # robust methods find the cheapest robust action; the mitigations' answer is their
        # own search's within epsilon
        only = {"roar": "min_cost", "probe": "min_cost"}
        only |= {"claproar": "budget", "gravitational": "budget"}
        objective = only.get(self.method)
        if objective is None:
            return self
        if self.objective != objective:
            raise ValueError(
                f"method {self.method!r} solves objective {objective!r} only, got "
                f"objective {self.objective!r}"
            )
        if self.recourse is not None:
            raise ValueError(
                f"method {self.method!r} acts on the reports; it cannot be combined "
                f"with recourse {self.recourse!r} (a causal world's search)"
            )
        return self


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
    # the update rule the collective assumes (None: the learner's own, a correct assumption;
    # one that differs is a wrong belief, which `recourse-sim validate` notes)
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


class BestResponsePopulation(_Population):
    """Every member responds each round to the deployed model, as in performative
    prediction and strategic classification: their report maximises the model's log-odds
    of the favourable class minus the cost ‖w ⊙ δ‖²/(2ε) (the scenario's cost weights w
    and norm p; ``epsilon`` is the strength of the response, not a budget). For a linear
    model with unit weights and p = 2 that is x_S + ε·θ_S (θ: the favourable log-odds'
    weights; the population moves towards the favourable class). Only the bounds the
    scenario sets (features.lower, upper, max_change, monotone and immutable features)
    constrain the response; it changes reports, not true features."""

    strategy: Literal["best_response"]
    # respond from last round's report (true: responses accumulate) or from the person's
    # own features (false: each round's response replaces the last)
    memory: bool = False
    # measure the deployed model's gap to the performative optimum under this response
    # (metrics.csv's optimum_gap, recourse_sim.env.optimum; a small optimisation a round)
    optimum_gap: bool = False

    @model_validator(mode="after")
    def _optimum_needs_a_function_of_the_model(self) -> BestResponsePopulation:
        if self.optimum_gap and (self.memory or self.participation != 1 or self.groups):
            raise ValueError(
                "optimum_gap needs a response that is a function of the model alone: "
                "memory false, participation 1 and no groups"
            )
        return self


_OAR_DEFAULTS = {"horizon": 1, "steps": 10, "solver": "pgd"}
_PLAN_DEFAULTS = {"max_horizon": 3, "bank_cap": 2.0}
OAR_ACTIONS = ("oar", "oar_plan")
"""The ``action`` values whose entries are OAR's own settings (`recourse_sim.agents.OAR_ACTION`)."""


class LimitSpec(_Model):
    """A controlled collective's hard constraint over an episode: at most
    `acting_rounds` rounds in which it acts, and a total collective cost of at most
    `total_cost` (the sum over rounds of the mean cost per participant); an action past
    either is clipped (`recourse_sim.env.limits`)."""

    acting_rounds: PositiveInt | None = None  # K: rounds in which the collective may act
    total_cost: Positive | None = None  # C: summed mean cost per participant (cost units)

    @model_validator(mode="after")
    def _one_given(self) -> LimitSpec:
        if self.acting_rounds is None and self.total_cost is None:
            raise ValueError(
                "a limit needs acting_rounds (rounds the collective may act) or total_cost "
                "(its summed cost per participant), or both"
            )
        return self


class ControlledPopulation(_Collective):
    """Training-data subjects applying the environment's action: a shared direction per
    class (``action: shift``), or OAR's own settings for the round (``action: oar``: act
    or not, participation, budget and goal; OAR computes each member's perturbation, so
    a constant action reproduces a ``collective_oar`` population). ``action: oar_plan``
    adds OAR's look-ahead and a bank of unspent budget (`recourse_sim.env.limits`)."""

    strategy: Literal["controlled"]
    # what the action sets: one shift per label class, OAR's settings (act, α, ε, goal),
    # or those and the look-ahead and a draw on the banked budget (oar_plan)
    action: Literal["shift", "oar", "oar_plan"] = "shift"
    horizon: PositiveInt = 1  # action oar: look-ahead rounds of updates OAR optimises over
    steps: PositiveInt = 10  # action oar: projected-gradient steps of the OAR solver
    solver: Literal["pgd", "fgm"] = "pgd"  # action oar: OAR solver (fgm: one-step heuristic)
    # action oar: the budget entry snaps ε to this many whole shares (0: continuous)
    budget_levels: NonNegativeInt = 4
    # action oar_plan: the longest look-ahead the horizon entry may choose (rounds)
    max_horizon: PositiveInt = 3
    # action oar_plan: the most budget banked, in multiples of epsilon (0: no bank)
    bank_cap: NonNegative = 2.0
    # the episode's hard constraint (action oar or oar_plan; None: none)
    limit: LimitSpec | None = None

    @model_validator(mode="after")
    def _oar_settings_need_oar(self) -> ControlledPopulation:
        # (a resolved scenario lists the defaults: only changed settings are refused)
        changed = [
            k for k in ("horizon", "steps", "solver") if getattr(self, k) != _OAR_DEFAULTS[k]
        ]
        if changed and self.action not in OAR_ACTIONS:
            raise ValueError(f"{changed[0]} is a setting of OAR: it needs action: oar")
        planned = [k for k in _PLAN_DEFAULTS if getattr(self, k) != _PLAN_DEFAULTS[k]]
        if planned and self.action != "oar_plan":
            raise ValueError(
                f"{planned[0]} is a setting of the oar_plan action: it needs action: oar_plan"
            )
        if self.action == "oar_plan" and self.max_horizon < self.horizon:
            raise ValueError(
                f"max_horizon ({self.max_horizon}) must be at least horizon ({self.horizon}), "
                "the look-ahead of the zero action"
            )
        if self.limit is not None and self.action not in OAR_ACTIONS:
            raise ValueError(
                "limit counts the rounds and cost of OAR's settings: it needs action: oar "
                "or oar_plan"
            )
        return self


Population = Annotated[
    Union[  # noqa: UP007 (discriminated)
        TruthfulPopulation,
        IndividualPopulation,
        CollectiveOarPopulation,
        ControlledPopulation,
        GenrePopulation,
        CollectiveBlackboxPopulation,
        CollectiveSignalPopulation,
        BestResponsePopulation,
    ],
    Field(discriminator="strategy"),
]
