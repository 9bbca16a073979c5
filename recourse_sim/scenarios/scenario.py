"""The scenario itself: every section in one validated model."""

from __future__ import annotations

import copy

import yaml
from pydantic import (
    PrivateAttr,
    model_validator,
)

from recourse_sim.scenarios.base import PositiveInt, _Model
from recourse_sim.scenarios.decision import DecisionRule, LabelRule
from recourse_sim.scenarios.features import FeatureRules
from recourse_sim.scenarios.hidden import HiddenRange, hidden_field_problem, set_dotted_field
from recourse_sim.scenarios.learner import LearnerSpec
from recourse_sim.scenarios.populations import Population
from recourse_sim.scenarios.query import QuerySpec, RewardSpec
from recourse_sim.scenarios.world import World


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
    # settings drawn afresh each episode, unseen by the agent: dotted field -> ranges
    # (recourse_sim.scenarios.hidden; the environment's hidden_split picks train or test)
    hidden: dict[str, HiddenRange] = {}

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

    @model_validator(mode="after")
    def _strategic_anticipates_one_response(self) -> Scenario:
        if self.learner.strategic == "none":
            return self
        responders = self.responding_populations
        if len(responders) != 1:
            raise ValueError(
                f"learner.strategic: {self.learner.strategic} anticipates exactly one "
                "responding population (individual with objective min_cost, or "
                f"best_response); found {', '.join(responders) or 'none'}"
            )
        rule = self.decision
        if rule.rule != "threshold" or rule.group_thresholds:
            raise ValueError(
                f"learner.strategic: {self.learner.strategic} anticipates one threshold for "
                f"everyone (decision.rule: threshold, no group_thresholds), not rule {rule.rule!r}"
            )
        return self

    @model_validator(mode="after")
    def _response_jacobian_has_its_response(self) -> Scenario:
        jacobian = self.learner.params.get("jacobian", "estimated")
        if jacobian not in ("estimated", "response"):
            raise ValueError(
                f"learner.params.jacobian: {jacobian!r} is not one of estimated, response"
            )
        if jacobian == "estimated":
            return self
        where = "learner.params.jacobian: response"
        if self.learner.update_rule != "perfgd":
            raise ValueError(f"{where} is an option of update_rule perfgd")
        acting = {k: p for k, p in self.populations.items() if p.strategy != "truthful"}
        if [p.strategy for p in acting.values()] != ["best_response"]:
            raise ValueError(
                f"{where} differentiates the response of exactly one best_response "
                "population, everyone else truthful; found "
                f"{', '.join(f'{k} ({p.strategy})' for k, p in acting.items()) or 'none'}"
            )
        ((name, pop),) = acting.items()
        if pop.participation != 1 or pop.groups is not None:
            raise ValueError(
                f"{where} needs every member of populations.{name} to respond "
                "(participation 1, no groups): the learner cannot tell who responded"
            )
        return self

    @model_validator(mode="after")
    def _optimum_gap_has_one_response(self) -> Scenario:
        asking = [k for k, p in self.populations.items() if getattr(p, "optimum_gap", False)]
        others = [k for k, p in self.populations.items() if p.strategy != "truthful"]
        if asking and others != asking[:1]:
            raise ValueError(
                f"populations.{asking[0]}.optimum_gap: the performative optimum is computed "
                "for one best_response population with everyone else truthful; found "
                f"{', '.join(f'{k} ({self.populations[k].strategy})' for k in others)}"
            )
        return self

    @model_validator(mode="after")
    def _hidden_fields_take_their_ranges(self) -> Scenario:
        if not self.hidden:
            return self
        data = self.model_dump(mode="python")
        data["hidden"] = {}
        for key, spec in self.hidden.items():
            problem = hidden_field_problem(data, key)
            if problem:
                raise ValueError(f"hidden: {key!r}: {problem}")
            for split in ("train", "test"):
                for end in spec.bounds(split):
                    value = int(end) if spec.integer else end
                    changed = copy.deepcopy(data)
                    set_dotted_field(changed, key, value)
                    try:
                        Scenario.model_validate(changed)
                    except ValueError as exc:
                        first = exc.errors()[0]["msg"] if hasattr(exc, "errors") else exc
                        raise ValueError(
                            f"hidden: {key} = {value:g} (an end of its {split} range) is "
                            f"not a valid setting: {first}"
                        ) from None
        return self

    @property
    def responding_populations(self) -> list[str]:
        """Names of the populations whose people respond to the deployed model's score
        (``best_response``, and ``individual`` seekers of the cheapest recourse), in
        scenario order: what ``learner.strategic`` anticipates."""
        return [
            k
            for k, p in self.populations.items()
            if p.strategy == "best_response"
            or (p.strategy == "individual" and p.objective == "min_cost")
        ]

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
