"""Scenario files: bundled set, schema, overrides, round trip and one-line errors."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import yaml

from recourse_sim.errors import ConfigError
from recourse_sim.scenarios import (
    STRATEGIES,
    Scenario,
    SchoolWorld,
    list_scenarios,
    load_scenario,
    scenario_path,
)

CONTRACT = {
    "school_assignment",
    "lending_fico",
    "lending_german",
    "lending_adult",
    "oar_iris",
    "oar_digits",
}
# bundled beyond the contract names, held to the same standard
EXTRA = {
    "lending_german_pare",
    "lending_german_genre",
    "recourse_over_time",
    "csv_example",
    "performative_credit",
    "performative_credit_bounded",
}


def _write(tmp_path: Path, data: dict | str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def _base() -> dict:
    """A small valid scenario (school world) as a mapping."""
    return {
        "name": "tiny",
        "rounds": 3,
        "world": {"kind": "school", "cohort_size": 50, "history_size": 100},
        "populations": {
            "h1": {"strategy": "collective_oar", "decisions": "favourable", "epsilon": 0.5}
        },
    }


def _error(tmp_path: Path, data: dict | str, overrides=None) -> str:
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_scenario(path, overrides)
    message = str(info.value)
    assert "\n" not in message, message
    assert str(path) in message, message
    return message


# -- the bundled scenarios ---------------------------------------------------------------------


def test_bundled_scenarios_include_the_contract_names():
    assert CONTRACT <= set(list_scenarios())


@pytest.mark.parametrize("name", sorted(CONTRACT | EXTRA))
def test_bundled_scenario_loads_and_round_trips(name, tmp_path):
    scenario = load_scenario(name)
    assert scenario.name == name and scenario.rounds >= 1
    again = load_scenario(_write(tmp_path, scenario.to_yaml(), f"{name}.yaml"))
    assert again.model_dump() == scenario.model_dump()
    assert again.to_yaml() == scenario.to_yaml()


@pytest.mark.parametrize("name", sorted(CONTRACT | EXTRA))
def test_every_bundled_parameter_has_a_comment(name):
    """Each `key: value` line says what the value means (and its unit) in a comment."""
    lines = scenario_path(name).read_text(encoding="utf-8").splitlines()
    in_block = False
    for number, line in enumerate(lines, 1):
        if in_block:  # the folded description block
            if line.startswith("  ") or not line.strip():
                continue
            in_block = False
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith(">") or stripped.endswith("|"):
            in_block = True
            continue
        _, _, value = stripped.partition(":")
        if value.strip() and not value.strip().startswith("#"):
            assert "#" in value, f"{name}.yaml line {number} has no comment: {line!r}"


def test_school_world_defaults_match_the_generator():
    from recourse_sim.data import school_world

    signature = inspect.signature(school_world)
    defaults = {k: p.default for k, p in signature.parameters.items() if p.kind is p.KEYWORD_ONLY}
    ours = SchoolWorld(kind="school").generator_kwargs()
    assert ours == defaults


def test_scenario_names_resolve_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_scenario("oar_iris").name == "oar_iris"


# -- overrides --------------------------------------------------------------------------------


def test_overrides_as_strings_are_parsed_as_yaml():
    s = load_scenario(
        "school_assignment",
        ["rounds=7", "learner.update_rule=refit", "populations.h1_students.participation=0.25"],
    )
    assert s.rounds == 7
    assert s.learner.update_rule == "refit" and s.learner.window is None
    assert s.populations["h1_students"].participation == 0.25


def test_overrides_as_a_mapping_and_new_nested_keys():
    s = load_scenario(
        "oar_iris",
        {"decision.rule": "threshold", "populations.extra.strategy": "truthful"},
    )
    assert s.decision.rule == "threshold"
    assert s.populations["extra"].strategy == "truthful"


def test_override_can_replace_a_population_by_a_controlled_one():
    s = load_scenario(
        "school_assignment",
        ["populations.h1_students={strategy: controlled, decisions: favourable, epsilon: 1}"],
    )
    assert s.controlled == "h1_students"


def test_switching_strategy_drops_the_old_strategys_keys_and_says_so(tmp_path):
    # OAR-only keys do not silently survive a switch to another strategy: they go, loudly
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_base()))
    with pytest.warns(UserWarning, match="dropped decisions"):
        s = load_scenario(path, ["populations.h1.strategy=individual"])
    assert s.populations["h1"].strategy == "individual"


def test_bad_override_syntax_is_a_config_error():
    with pytest.raises(ConfigError, match=re.escape("key.path=value")):
        load_scenario("oar_iris", ["rounds"])


def test_to_yaml_reflects_overrides(tmp_path):
    s = load_scenario("oar_iris", ["rounds=4"])
    assert load_scenario(_write(tmp_path, s.to_yaml())).rounds == 4


# -- errors name the file, the field and the value ------------------------------------------


def test_unknown_key_suggests_the_closest(tmp_path):
    data = _base()
    data["world"]["cohort_sise"] = 10
    message = _error(tmp_path, data)
    assert "world.cohort_sise" in message and "did you mean 'cohort_size'" in message


def test_unknown_top_level_key(tmp_path):
    data = _base()
    data["popluations"] = {}
    message = _error(tmp_path, data)
    assert "popluations" in message and "did you mean 'populations'" in message


def test_unknown_key_in_a_population(tmp_path):
    data = _base()
    data["populations"]["h1"]["partcipation"] = 0.5
    message = _error(tmp_path, data)
    assert "populations.h1.partcipation" in message and "'participation'" in message


def test_wrong_type(tmp_path):
    data = _base()
    data["rounds"] = "many"
    message = _error(tmp_path, data)
    assert "rounds" in message and "'many'" in message


@pytest.mark.parametrize("alpha", [1.5, -0.1])
def test_participation_outside_unit_interval(tmp_path, alpha):
    data = _base()
    data["populations"]["h1"]["participation"] = alpha
    message = _error(tmp_path, data)
    assert "populations.h1.participation" in message and repr(alpha) in message


def test_negative_epsilon(tmp_path):
    data = _base()
    data["populations"]["h1"]["epsilon"] = -1.0
    message = _error(tmp_path, data)
    assert "populations.h1.epsilon" in message and "-1.0" in message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("retrain_every", 0),
        ("memory", 0),
        ("epochs", 1.5),
        ("samples", "ten"),
        ("lam", -1.0),
        ("gamma", 1.0),
    ],
)
def test_bad_genre_field_is_named(tmp_path, field, value):
    data = _base()
    data["populations"] = {"seekers": {"strategy": "genre", field: value}}
    message = _error(tmp_path, data)
    assert f"populations.seekers.{field}" in message and repr(value) in message


def test_genre_defaults_are_documented_and_valid():
    from recourse_sim.scenarios import GenrePopulation

    spec = GenrePopulation(strategy="genre")
    assert (spec.retrain_every, spec.memory, spec.epochs, spec.layers) == (5, 2000, 30, 1)
    assert (spec.samples, spec.temperature, spec.lam, spec.gamma) == (10, 10.0, 5.0, 0.7)
    source = inspect.getsource(GenrePopulation)
    for name in GenrePopulation.model_fields:
        if name not in ("strategy",) and name in source:
            line = next(ln for ln in source.splitlines() if ln.strip().startswith(f"{name}:"))
            assert "#" in line, name


def test_zero_rounds(tmp_path):
    data = _base()
    data["rounds"] = 0
    message = _error(tmp_path, data)
    assert "rounds" in message and "(got 0)" in message


def test_zero_rounds_by_override(tmp_path):
    message = _error(tmp_path, _base(), ["rounds=0"])
    assert "rounds" in message and "(got 0)" in message


def test_feature_both_immutable_and_actionable(tmp_path):
    data = _base()
    data["features"] = {"actionable": ["gpa", "test_score"], "immutable": ["gpa"]}
    message = _error(tmp_path, data)
    assert "features" in message and "'gpa'" in message
    assert "immutable" in message and "actionable" in message


def test_unknown_feature_name_suggests_the_closest(tmp_path):
    data = _base()
    data["features"] = {"proxy": ["extracurricular"]}
    message = _error(tmp_path, data)
    assert "features.proxy.0" in message and "did you mean 'extracurriculars'" in message


def test_unknown_group_name(tmp_path):
    data = _base()
    data["query"] = {"groups": ["N3"]}
    message = _error(tmp_path, data)
    assert "query.groups.0" in message and "'N3'" in message


def test_unknown_strategy_lists_the_valid_ones(tmp_path):
    data = _base()
    data["populations"]["h1"] = {"strategy": "telepathy"}
    message = _error(tmp_path, data)
    assert "populations.h1.strategy" in message and "'telepathy'" in message
    for name in STRATEGIES:
        assert name in message


def test_unknown_world_kind(tmp_path):
    data = _base()
    data["world"]["kind"] = "schol"
    message = _error(tmp_path, data)
    assert "world.kind" in message and "did you mean 'school'" in message


def test_unknown_learner(tmp_path):
    data = _base()
    data["learner"] = {"type": "logreg"}
    message = _error(tmp_path, data)
    assert "learner.type" in message and "'logreg'" in message and "logistic_regression" in message


def test_bad_learner_parameter(tmp_path):
    data = _base()
    data["learner"] = {"type": "logistic_regression", "params": {"Cee": 1.0}}
    message = _error(tmp_path, data)
    assert "learner" in message and "'Cee'" in message


def test_update_rule_the_learner_does_not_support(tmp_path):
    from recourse_sim.env import RecourseEnv

    data = _base()
    data["learner"] = {"type": "nearest_centroid", "update_rule": "sgd"}
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as info:  # values are checked when the learner is built
        RecourseEnv(str(path))
    message = str(info.value)
    assert str(path) in message and "learner" in message and "'sgd'" in message


def test_missing_required_field(tmp_path):
    data = _base()
    del data["world"]
    message = _error(tmp_path, data)
    assert "world" in message and "missing" in message


def test_python_tags_are_rejected(tmp_path):
    text = "name: evil\nworld: !!python/object/apply:os.system ['echo pwned']\n"
    message = _error(tmp_path, text)
    assert "invalid YAML" in message and "line 2" in message


def test_invalid_yaml(tmp_path):
    message = _error(tmp_path, "name: [unclosed\n")
    assert "invalid YAML" in message


def test_a_scenario_must_be_a_mapping(tmp_path):
    message = _error(tmp_path, "- just\n- a list\n")
    assert "mapping" in message


def test_two_controlled_populations_are_rejected(tmp_path):
    data = _base()
    data["populations"] = {"a": {"strategy": "controlled"}, "b": {"strategy": "controlled"}}
    message = _error(tmp_path, data)
    assert "controlled" in message


def test_unknown_scenario_name_suggests_the_closest():
    with pytest.raises(ConfigError, match="did you mean 'oar_iris'"):
        load_scenario("oar_irs")


def test_missing_file():
    with pytest.raises(ConfigError, match="does not exist"):
        load_scenario("no/such/file.yaml")


def test_a_mapping_validates_without_a_file():
    s = load_scenario(_base())
    assert isinstance(s, Scenario) and s.source == "<dict>"


# -- CSV worlds ---------------------------------------------------------------------------------


def _csv_scenario(tmp_path: Path, csv_text: str, **world) -> Path:
    (tmp_path / "people.csv").write_text(csv_text, encoding="utf-8")
    spec = {
        "kind": "csv",
        "path": "people.csv",
        "label": "repaid",
        "columns": {"income": "numeric", "debt": "numeric", "owner": "binary"},
        "group": "region",
        **world,
    }
    return _write(tmp_path, {"name": "mine", "world": spec})


GOOD_CSV = "income,debt,owner,region,repaid\n3,1,0,north,1\n1,2,1,south,0\n2,2,0,north,1\n"


def test_csv_world_paths_resolve_relative_to_the_scenario(tmp_path, monkeypatch):
    path = _csv_scenario(tmp_path, GOOD_CSV)
    monkeypatch.chdir(Path(path.anchor))
    s = load_scenario(path)
    assert Path(s.world.path) == (tmp_path / "people.csv").resolve()


@pytest.mark.parametrize(
    ("csv_text", "column", "fragment"),
    [
        ("income,debt,region,repaid\n1,2,north,1\n2,1,south,0\n", "owner", "missing"),
        ("income,debt,owner,region,repaid\n1,,0,north,1\n2,1,1,south,0\n", "debt", "NaN"),
        ("income,debt,owner,region,repaid\n1,lots,0,north,1\n2,1,1,south,0\n", "debt", "'lots'"),
        ("income,debt,owner,region,repaid\n1,2,0,north,1\n2,1,1,south,1\n", "repaid", "single"),
        ("income,debt,owner,region,repaid\n1,2,3,north,1\n2,1,1,south,0\n", "owner", "binary"),
    ],
)
def test_csv_problems_name_the_file_and_column(tmp_path, csv_text, column, fragment):
    path = _csv_scenario(tmp_path, csv_text)
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    message = str(info.value)
    assert "people.csv" in message and repr(column) in message and fragment in message
    assert "\n" not in message


def test_csv_missing_file(tmp_path):
    path = _write(
        tmp_path,
        {"world": {"kind": "csv", "path": "nope.csv", "label": "y", "columns": {"a": "numeric"}}},
    )
    with pytest.raises(ConfigError, match=re.escape("nope.csv")):
        load_scenario(path)


def test_csv_favourable_value_must_occur(tmp_path):
    path = _csv_scenario(tmp_path, GOOD_CSV, favourable="yes")
    with pytest.raises(ConfigError, match=re.escape("world.favourable")):
        load_scenario(path)


def test_set_null_removes_a_population_and_strategy_switches_drop_foreign_settings():
    """`--set populations.NAME=null` removes a population; `--set
    populations.NAME.strategy=...` switches it, dropping what the new strategy does not
    take (with a warning naming it)."""
    s = load_scenario("lending_german", ["populations.women_borrowers=null"])
    assert list(s.populations) == ["applicants"]
    with pytest.warns(UserWarning, match="dropped method \\(not settings of genre\\)"):
        s = load_scenario("lending_german", ["populations.applicants.strategy=genre"])
    assert s.populations["applicants"].strategy == "genre"
    assert s.populations["applicants"].epsilon == 1.0  # a shared setting is kept
