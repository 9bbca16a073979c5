"""Your own CSV without surprises: missing cells, heavy tails, binned groups, the label
kept out of the features, class numbers that mean what they say, cost in SDs, and a
warning when nobody can change anything."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import yaml

from recourse_sim.env import RecourseEnv
from recourse_sim.errors import ConfigError
from recourse_sim.scenarios import load_scenario


def _raw_csv(path, n=300, seed=0):
    """Loans with empty cells, a heavy-tailed income, an age and no group column."""
    rng = np.random.default_rng(seed)
    income = rng.lognormal(3.5, 1.0, n)  # a few extreme rows
    debt = rng.gamma(2.0, 5.0, n)
    age = rng.integers(18, 80, n)
    repaid = (rng.random(n) < 1 / (1 + np.exp(-(0.02 * income - 0.1 * debt + 1)))).astype(int)
    rows = ["income,debt,age,repaid"]
    for i in range(n):
        cells = [f"{income[i]:.2f}", f"{debt[i]:.2f}", str(age[i]), str(repaid[i])]
        if i % 37 == 5:
            cells[1] = ""  # missing debt
        if i % 53 == 7:
            cells[0] = "n/a"  # a non-numeric income
        rows.append(",".join(cells))
    path.write_text("\n".join(rows) + "\n")
    return income


def _scenario(tmp_path, world=None, **more):
    _raw_csv(tmp_path / "loans.csv")
    doc = {
        "name": "raw_loans",
        "rounds": 2,
        "world": {
            "kind": "csv",
            "path": "loans.csv",
            "label": "repaid",
            "columns": {"income": "numeric", "debt": "numeric", "age": "integer"},
            "cohort_size": 80,
            "history_size": 150,
            "oracle": {"trees": 10},
            **(world or {}),
        },
        "features": {"actionable": ["income", "debt"], "decrease_only": ["debt"]},
        "learner": {"type": "logistic_regression", "update_rule": "window", "window": 1},
        "populations": {"applicants": {"strategy": "individual", "epsilon": 1.0}},
        **more,
    }
    path = tmp_path / "raw_loans.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


RAW = {
    "missing": "drop",
    "clip_quantiles": [0.01, 0.99],
    "group": {"column": "age", "bins": [0, 30, 200], "labels": ["young", "older"]},
}


def test_a_raw_csv_runs_with_drop_clip_and_binned_groups(tmp_path):
    """Acceptance: missing cells, heavy tails and no group column run with `missing:
    drop`, `clip_quantiles` and a binned group."""
    env = RecourseEnv(_scenario(tmp_path, RAW))
    data = env.world.data
    assert data.group_labels == ("young", "older")
    assert len(data.X) == 300 - len(range(5, 300, 37)) - len(range(7, 300, 53))
    raw = np.sort(_raw_csv(tmp_path / "again.csv"))
    assert data.X[:, 0].max() < raw[-1] and data.X[:, 0].max() <= np.quantile(raw, 0.99) + 1e-9
    env.reset(seed=0)
    metrics = env.step(np.zeros(env.action_space.shape, np.float32))[4]["metrics"]
    assert {m["group"] for m in metrics} >= {"young", "older", "all"}


def test_missing_cells_are_counted_per_column(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_scenario(_scenario(tmp_path))
    message = str(err.value)
    assert "rows have bad cells" in message and "\n" not in message
    assert "column 'debt': 8 missing (NaN) (first in data row 6" in message
    assert "column 'income': 6 non-numeric (first in data row 8: 'n/a')" in message
    assert "world.missing: drop" in message


def test_the_label_is_never_a_feature(tmp_path):
    world = {**RAW, "columns": {"income": "numeric", "repaid": "binary"}}
    with pytest.raises(ConfigError, match="label column 'repaid' cannot be a feature"):
        load_scenario(_scenario(tmp_path, world))


def test_labels_name_label_values_whatever_is_favourable(tmp_path):
    """`favourable: 0` codes label value 0 as class 1: `labels: [0]` names the people
    whose label in the file is 0 (class 1), and `[1]` those whose label is 1."""
    world = {**RAW, "favourable": 0}
    for value, cls in ((0, 1), (1, 0), ("0", 1)):
        scenario = load_scenario(_scenario(tmp_path, world, query={"labels": [value]}))
        assert scenario.query.classes == [cls]
        pops = {"applicants": {"strategy": "individual", "labels": [value]}}
        env = RecourseEnv(_scenario(tmp_path, world, populations=pops))
        env.reset(seed=0)
        cohort = env.state.cohort
        selected = env.strategies[0].select(cohort.group, cohort.y0, env.group_labels)
        file_label = np.where(cohort.y0 == 1, 0, 1)  # class 1 is the file's 0
        assert selected.any() and (file_label[selected] == int(value)).all()
    with pytest.raises(ConfigError, match=r"query\.labels\.0: 2 is neither a label value"):
        load_scenario(_scenario(tmp_path, world, query={"labels": [2]}))


def _yes_no_csv(path, n=120):
    rng = np.random.default_rng(1)
    rows = ["priors,employed,rearrested"]
    for _ in range(n):
        priors, employed = rng.integers(0, 6), rng.integers(0, 2)
        rearrested = "yes" if rng.random() < 0.2 + 0.1 * priors - 0.2 * employed else "no"
        rows.append(f"{priors},{employed},{rearrested}")
    path.write_text("\n".join(rows) + "\n")


def _yes_no_scenario(tmp_path, favourable_line: str, labels_line: str = "") -> str:
    _yes_no_csv(tmp_path / "people.csv")
    text = f"""name: yes_no
rounds: 2
world:
  kind: csv
  path: people.csv
  label: rearrested
  {favourable_line}
  cohort_size: 60
  history_size: 100
  outcome: label
features:
  actionable: [employed]
learner: {{type: logistic_regression, update_rule: refit}}
populations:
  applicants:
    strategy: individual
    epsilon: 2.0
    {labels_line}
"""
    path = tmp_path / "yes_no.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("favourable", "labels", "field"),
    [
        ("favourable: no", "", "world.favourable"),
        ("favourable: 'no'", "labels: [yes]", "populations.applicants.labels.0"),
        ("favourable: 'no'", "labels: [off]", "populations.applicants.labels.0"),
    ],
)
def test_yaml_booleans_where_a_label_is_meant_are_refused(
    tmp_path, capsys, favourable, labels, field
):
    """Unquoted yes/no are YAML booleans: one line naming the field and how to quote."""
    from recourse_sim.cli import main

    path = _yes_no_scenario(tmp_path, favourable, labels)
    assert main(["validate", path]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and field in line
    assert "YAML boolean" in line and "quote a label value or name" in line


def test_quoted_label_words_and_their_classes(tmp_path):
    path = _yes_no_scenario(tmp_path, 'favourable: "no"', 'labels: ["no", 0]')
    scenario = load_scenario(path)
    # "no" is favourable (class 1); 0 is a class number (the values are words)
    assert scenario.populations["applicants"].classes == [1, 0]
    assert scenario.to_yaml().count("- 'no'") + scenario.to_yaml().count('- "no"') >= 1


def test_cost_in_standard_deviations(tmp_path):
    path = _scenario(tmp_path, RAW)
    env = RecourseEnv(load_scenario(path, overrides=["features.cost=std"]))
    sd = env.world.data.X.std(0)
    np.testing.assert_allclose(env.action_set.weights_, 1.0 / sd)
    one = RecourseEnv(load_scenario(path, overrides=["features.cost={income: std, debt: 2}"]))
    np.testing.assert_allclose(one.action_set.weights_, [1 / sd[0], 2.0, 1.0])


def test_a_population_that_can_change_nothing_is_warned_about(tmp_path):
    path = _scenario(tmp_path, RAW, features={})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RecourseEnv(path)
    messages = [str(w.message) for w in caught]
    assert any(
        "populations.applicants can change nothing" in m and "features.actionable" in m
        for m in messages
    ), messages


def test_resume_refuses_a_changed_data_file(tmp_path, capsys):
    """The data file's digest is part of a run's identity: --resume on a changed CSV is
    refused with one line."""
    from recourse_sim.cli import main

    path = _scenario(tmp_path, RAW)
    out = tmp_path / "run"
    assert main(["run", str(path), "--rounds", "1", "--out", str(out), "-q"]) == 0
    with open(tmp_path / "loans.csv", "a") as f:
        f.write("10.0,1.0,40,1\n")
    status = main(["run", str(path), "--rounds", "2", "--out", str(out), "--resume", "-q"])
    err = capsys.readouterr().err
    assert status == 2 and "on a changed data file" in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_the_bundled_csv_example_runs_from_its_raw_file(tmp_path):
    """csv_example: 307 rows with an empty cell dropped, the heavy-tailed column clipped
    at its 1st/99th percentiles, groups from age bins, then five rounds."""
    from recourse_sim.simulate import simulate

    scenario = load_scenario("csv_example")
    env = RecourseEnv(scenario)
    data = env.world.data
    assert len(data.y) == 7214 - 307 and np.isfinite(data.X).all()
    days = data.X[:, data.feature_names.index("days_b_screening_arrest")]
    assert -414 < days.min() and days.max() < 1057  # the file's extremes are clipped
    assert env.world.group_labels == ("under_25", "25_to_44", "45_and_over")
    metrics = simulate(scenario, rounds=5, seed=0, out=tmp_path / "run")
    assert sorted(metrics["round"].unique()) == [1, 2, 3, 4, 5]
    assert (metrics.loc[metrics["group"] == "all", "n_seekers"] > 0).all()


def test_column_types_are_inferred_when_columns_is_omitted(tmp_path):
    rows = ["y,flag,count,share,city,note"]
    for i in range(40):
        rows.append(f"{i % 2},{(i // 2) % 2},{i % 7},{i / 13:.3f},c{i % 3},{i if i % 9 else 'x'}")
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "d2.csv").write_text("\n".join(r.rsplit(",", 1)[0] for r in rows) + "\n")
    doc = {
        "name": "inferred",
        "world": {
            "kind": "csv",
            "path": "d2.csv",
            "label": "y",
            "outcome": "label",
            "cohort_size": 20,
            "history_size": 40,
        },
        "learner": {"type": "logistic_regression", "update_rule": "refit"},
        "populations": {},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.warns(UserWarning, match="text columns left out of the features: city"):
        env = RecourseEnv(load_scenario(path))
    assert env.world.data.feature_names == ("flag", "count", "share")
    # flag 0/1: binary; count whole numbers: integer; share: numeric
    import pandas as pd

    from recourse_sim.data.csv_world import infer_columns

    df = pd.read_csv(tmp_path / "d2.csv", dtype=str, keep_default_na=False)
    with pytest.warns(UserWarning):
        kinds = infer_columns(df, ["y"], "d2.csv")
    assert kinds == {"flag": "binary", "count": "integer", "share": "numeric"}
    # a column mixing numbers and text is the author's to type
    doc["world"]["path"] = "d.csv"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(
        ConfigError, match=r"column 'note': 5 of 40 filled cells are not numbers \(first: 'x'\)"
    ):
        load_scenario(path)
