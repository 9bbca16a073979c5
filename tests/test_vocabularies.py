"""One source per vocabulary: each set of names that the scenario schema spells as a
``Literal`` and the implementation spells as a tuple (or a table's keys) is the same
set, so a name added to one side alone fails here. (The implementation layers do not
import the schema, which sits above them; this test binds the two.)"""

from __future__ import annotations

import typing

import pytest

from recourse_sim.env.scm import LINKS, NOISE_DISTRIBUTIONS
from recourse_sim.learners import LEARNERS
from recourse_sim.learners.base import UPDATE_RULES
from recourse_sim.learners.performative import PERFORMATIVE_RULES
from recourse_sim.recourse import collective, individual
from recourse_sim.recourse.action_set import FEATURE_TYPES
from recourse_sim.recourse.causal import RECOURSE_TYPES
from recourse_sim.recourse.mitigations import MITIGATIONS
from recourse_sim.recourse.robust import ROBUST_METHODS
from recourse_sim.scenarios import features, learner, populations, world


def _literal(model, field: str) -> tuple:
    """The names a schema field's Literal allows (None left out)."""
    annotation = model.model_fields[field].annotation
    names: list = []

    def collect(t):
        if typing.get_origin(t) is typing.Literal:
            names.extend(typing.get_args(t))
        for arg in typing.get_args(t) if typing.get_origin(t) is not typing.Literal else ():
            collect(arg)

    collect(annotation)
    return tuple(names)


@pytest.mark.parametrize(
    ("schema", "implementation"),
    [
        # the deployed learner may also descend the performative risk (learners.performative)
        (_literal(learner.LearnerSpec, "update_rule"), UPDATE_RULES + PERFORMATIVE_RULES),
        (_literal(populations.CollectiveBlackboxPopulation, "assumed_update_rule"), UPDATE_RULES),
        (_literal(world.ScmNode, "link"), tuple(LINKS)),
        (_literal(world.ScmNoise, "dist"), NOISE_DISTRIBUTIONS),
        (
            _literal(populations.IndividualPopulation, "method"),
            individual.METHODS + ROBUST_METHODS + MITIGATIONS,
        ),
        (_literal(populations.IndividualPopulation, "objective"), individual.OBJECTIVES),
        (_literal(populations.IndividualPopulation, "recourse"), RECOURSE_TYPES),
        (_literal(populations.CollectiveOarPopulation, "solver"), collective.METHODS),
        (_literal(populations.ControlledPopulation, "solver"), collective.METHODS),
        (typing.get_args(features.FeatureType), FEATURE_TYPES),
    ],
    ids=[
        "update_rule",
        "assumed_update_rule",
        "scm_link",
        "scm_noise",
        "individual_method",
        "objective",
        "recourse_type",
        "oar_solver",
        "controlled_solver",
        "feature_type",
    ],
)
def test_the_schema_and_the_implementation_name_the_same_things(schema, implementation):
    assert schema, "the schema field lost its Literal"
    assert sorted(schema) == sorted(implementation)


def test_every_learner_type_the_schema_allows_is_registered():
    schema = _literal(learner.LearnerSpec, "type")
    if schema:  # a Literal (else the registry itself validates the name)
        assert sorted(schema) == sorted(LEARNERS)
