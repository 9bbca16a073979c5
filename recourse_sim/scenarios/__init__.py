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
                 people follow a GenRe sample), ``collective_oar``, ``controlled``
                 (driven by the environment's action) or ``best_response`` (everyone
                 responds to the deployed model, as in performative prediction);
``reward``       the weights of cost (and of trimmed reports) in the environment's reward;
``hidden``       settings drawn afresh for each episode from train or test ranges and
                 not observed (a task's hidden dynamics; ``recourse_sim.scenarios.hidden``);
``rounds``       the default number of rounds;
``multi_agent``  several ``controlled`` populations, each its own agent (only in the
                 PettingZoo ``recourse_sim.env.multi.RecourseParallelEnv``).

The schema lives in one module per section (``world``, ``features``, ``learner``,
``decision``, ``query``, ``populations``; ``scenario`` joins them), reading files in
``loading``, one-line error messages in ``messages`` and the checks that need the world
in ``checks``; everything public is importable from ``recourse_sim.scenarios``.

`load_scenario` takes a bundled name (``school_assignment``, see `list_scenarios`) or a
path, plus overrides as dotted keys (``["learner.update_rule=refit"]``, values parsed as
YAML) applied before validation.
"""

from __future__ import annotations

from recourse_sim.scenarios.base import (
    DATASETS,
    MAX_MAGNITUDE,
    GenreGamma,
    NonNegative,
    NonNegativeInt,
    Positive,
    PositiveInt,
    Probability,
)
from recourse_sim.scenarios.checks import (
    belief_notes,
    check_classes,
    cohort_size,
    world_feature_names,
    world_group_names,
)
from recourse_sim.scenarios.decision import (
    DecisionRule,
    LabelRule,
    PareSpec,
    pare_min_calibration,
)
from recourse_sim.scenarios.features import (
    FeatureRules,
)
from recourse_sim.scenarios.learner import (
    DefenseSpec,
    LearnerSpec,
)
from recourse_sim.scenarios.loading import (
    MAX_OVERRIDE_CHARS,
    MAX_SCENARIO_BYTES,
    MAX_YAML_ALIASES,
    MAX_YAML_DEPTH,
    list_scenarios,
    load_scenario,
    scenario_description,
    scenario_path,
)
from recourse_sim.scenarios.populations import (
    STRATEGIES,
    BestResponsePopulation,
    CollectiveBlackboxPopulation,
    CollectiveOarPopulation,
    CollectiveSignalPopulation,
    ControlledPopulation,
    GenrePopulation,
    IndividualPopulation,
    LimitSpec,
    LognormalMargin,
    LognormalTolerance,
    Margin,
    MarginSpread,
    Population,
    SocialGraphSpec,
    Tolerance,
    TruthfulPopulation,
    UniformMargin,
    UniformTolerance,
)
from recourse_sim.scenarios.query import (
    QuerySpec,
    RewardSpec,
)
from recourse_sim.scenarios.scenario import (
    Scenario,
)
from recourse_sim.scenarios.world import (
    ColumnType,
    CsvWorld,
    DatasetWorld,
    FicoWorld,
    GaussianWorld,
    GroupBins,
    OracleSpec,
    PeopleSpec,
    SchoolWorld,
    ScmNode,
    ScmNoise,
    ScmWorld,
    World,
)

__all__ = [
    "DATASETS",
    "MAX_MAGNITUDE",
    "MAX_OVERRIDE_CHARS",
    "MAX_SCENARIO_BYTES",
    "MAX_YAML_ALIASES",
    "MAX_YAML_DEPTH",
    "STRATEGIES",
    "BestResponsePopulation",
    "CollectiveBlackboxPopulation",
    "CollectiveOarPopulation",
    "CollectiveSignalPopulation",
    "ColumnType",
    "ControlledPopulation",
    "CsvWorld",
    "DatasetWorld",
    "DecisionRule",
    "DefenseSpec",
    "FeatureRules",
    "FicoWorld",
    "GaussianWorld",
    "GenreGamma",
    "GenrePopulation",
    "GroupBins",
    "IndividualPopulation",
    "LabelRule",
    "LearnerSpec",
    "LimitSpec",
    "LognormalMargin",
    "LognormalTolerance",
    "Margin",
    "MarginSpread",
    "NonNegative",
    "NonNegativeInt",
    "OracleSpec",
    "PareSpec",
    "PeopleSpec",
    "Population",
    "Positive",
    "PositiveInt",
    "Probability",
    "QuerySpec",
    "RewardSpec",
    "Scenario",
    "SchoolWorld",
    "ScmNode",
    "ScmNoise",
    "ScmWorld",
    "SocialGraphSpec",
    "Tolerance",
    "TruthfulPopulation",
    "UniformMargin",
    "UniformTolerance",
    "World",
    "belief_notes",
    "check_classes",
    "cohort_size",
    "list_scenarios",
    "load_scenario",
    "pare_min_calibration",
    "scenario_description",
    "scenario_path",
    "world_feature_names",
    "world_group_names",
]
