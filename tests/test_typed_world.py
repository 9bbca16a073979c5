"""Feature types in a world: CSV columns and the features block declare them, and no
report of a yes/no or whole-number feature is ever a fraction, whoever makes it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from recourse_sim.env import RecourseEnv
from recourse_sim.scenarios import load_scenario
from recourse_sim.simulate import simulate


def _typed_world(tmp_path, populations, features=None):
    """Applicants with a numeric income, a whole number of courses (0..5) and a yes/no
    mentor, all three actionable; the label follows all three."""
    rng = np.random.default_rng(0)
    n = 400
    income = rng.normal(3, 1, n)
    courses = rng.integers(0, 6, n)
    mentor = (rng.random(n) < 0.4).astype(int)
    logit = 0.8 * (income - 3) + 0.5 * (courses - 2.5) + 1.2 * mentor - 0.5
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    rows = ["income,courses,mentor,y"]
    rows += [f"{income[i]:.3f},{courses[i]},{mentor[i]},{y[i]}" for i in range(n)]
    (tmp_path / "people.csv").write_text("\n".join(rows) + "\n")
    doc = {
        "name": "typed",
        "rounds": 3,
        "world": {
            "kind": "csv",
            "path": "people.csv",
            "label": "y",
            "columns": {"income": "numeric", "courses": "integer", "mentor": "binary"},
            "cohort_size": 120,
            "history_size": 200,
            "outcome": "label",
        },
        "features": {"actionable": ["income", "courses", "mentor"], "cost": "std"}
        | (features or {}),
        "learner": {"type": "logistic_regression", "update_rule": "refit"},
        "populations": populations,
    }
    path = tmp_path / "typed.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


INDIVIDUAL = {
    f"{method}_{objective}": {
        "strategy": "individual",
        "method": method,
        "objective": objective,
        "epsilon": 3.0,
        "participation": 1.0,
    }
    for method, objective in (("linear", "min_cost"), ("pgd", "budget"), ("wachter", "min_cost"))
}
# a share of the way, and just enough of it
PARTIAL = {"strategy": "individual", "epsilon": 3.0, "participation": 1.0, "move": 0.6}
ENOUGH = {"strategy": "individual", "objective": "budget", "epsilon": 3.0, "just_enough": True}
COLLECTIVE = {
    "oar": {"strategy": "collective_oar", "epsilon": 2.0, "participation": 0.5, "steps": 5},
    "signal": {
        "strategy": "collective_signal",
        "epsilon": 2.0,
        "participation": 0.5,
        "signal": {"courses": 1.6, "mentor": 0.7},
    },
}


def _whole(values: np.ndarray) -> bool:
    return bool((values == np.round(values)).all())


@pytest.mark.parametrize(
    "populations",
    [{name: pop} for name, pop in INDIVIDUAL.items()]
    + [{"partial": PARTIAL}, {"enough": ENOUGH}, COLLECTIVE | {"seekers": ENOUGH}],
    ids=[*INDIVIDUAL, "partial", "just_enough", "collective"],
)
def test_people_csv_reports_whole_values_of_integer_and_binary_columns(tmp_path, populations):
    """Acceptance: with --people-features every reported value of an integer column is
    whole and of a binary column 0 or 1, for individual and collective populations."""
    path = _typed_world(tmp_path, populations)
    simulate(path, rounds=3, seed=0, out=tmp_path / "run", people_features=True)
    people = pd.read_csv(tmp_path / "run" / "people.csv")
    moved = people["reported_courses"] != people["feature_courses"]
    assert moved.any()  # recourse did move the whole-number column
    assert _whole(people["reported_courses"].to_numpy())
    assert set(people["reported_mentor"].unique()) <= {0, 1}
    # (a share of a yes/no move is no move; and the exact cheapest move of the logistic
    # model, min_cost, buys its gain more cheaply with income and courses than with a
    # whole step of the yes/no column)
    cheapest = any(pop.get("objective") == "min_cost" for pop in populations.values())
    if "partial" not in populations and not cheapest:
        assert (people["reported_mentor"] != people["feature_mentor"]).any()


def test_collective_training_reports_are_typed(tmp_path):
    """The reports a collective makes train the next model, not a decision: read them
    where the learner receives them."""
    env = RecourseEnv(_typed_world(tmp_path, COLLECTIVE))
    env.reset(seed=0)
    seen = []
    update = env.learner.update

    def spy(X, y, **kw):
        seen.append(np.array(X))
        return update(X, y, **kw)

    env.learner.update = spy
    for _ in range(3):
        env.step(np.zeros(env.action_space.shape, np.float32))
    X = np.concatenate(seen)
    names = env.world.features.names
    courses, mentor = X[:, names.index("courses")], X[:, names.index("mentor")]
    assert _whole(courses) and set(np.unique(mentor)) <= {0.0, 1.0}


def test_the_features_block_declares_types_steps_levels_and_onehot(tmp_path):
    path = _typed_world(
        tmp_path,
        {"seekers": PARTIAL},
        features={
            "types": {"courses": "integer", "income": "ordinal"},
            "steps": {"courses": 2},
            "levels": {"income": [1, 2, 3, 4, 5]},
        },
    )
    aset = RecourseEnv(load_scenario(path)).action_set
    assert aset.types_.tolist() == ["ordinal", "integer", "binary"]
    assert aset.step_.tolist() == [0, 2, 0]
    assert aset.levels_[0].tolist() == [1, 2, 3, 4, 5]
    # an ordinal feature without levels takes the values it has in the rows
    path = _typed_world(tmp_path, {"seekers": PARTIAL}, features={"types": {"courses": "ordinal"}})
    aset = RecourseEnv(load_scenario(path)).action_set
    assert aset.levels_[1].tolist() == [0, 1, 2, 3, 4, 5]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "types"),
    [
        ("lending_german", {"age": "integer", "credit_amount": "integer", "sex_male": "binary"}),
        ("lending_adult", {"education_num": "integer", "hours_per_week": "integer"}),
        ("school_assignment", {"gpa": "continuous", "extracurriculars": "integer"}),
        ("lending_fico", {"score": "continuous"}),
    ],
)
def test_bundled_scenarios_use_their_datasets_types(name, types):
    aset = RecourseEnv(load_scenario(name)).action_set
    declared = dict(zip(aset.feature_names, aset.types_, strict=True))
    assert {f: declared[f] for f in types} == types
