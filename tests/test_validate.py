"""`recourse-sim validate` on a researcher's own small CSV: every feature listed with its
type and action, and one warning each for settings that are legal but likely mistakes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from recourse_sim.cli import main
from recourse_sim.scenarios import load_scenario
from recourse_sim.simulate import preflight, unit_costs

ROWS = 240


def _csv(path, favourable_share=0.5, seed=0):
    """Yes/no outcome, a count, a 0/1 feature, and `leak`, the outcome plus a little noise."""
    rng = np.random.default_rng(seed)
    priors = rng.integers(0, 8, ROWS)
    employed = rng.integers(0, 2, ROWS)
    good = rng.random(ROWS) < favourable_share
    leak = good + rng.normal(0, 0.3, ROWS)
    rows = ["priors,employed,leak,outcome"]
    rows += [
        f"{priors[i]},{employed[i]},{leak[i]:.3f},{'no' if good[i] else 'yes'}" for i in range(ROWS)
    ]
    path.write_text("\n".join(rows) + "\n")


def _scenario(tmp_path, *, cohort=100, history=100, epsilon=3.0, columns=None, share=0.5):
    _csv(tmp_path / "people.csv", share)
    columns = columns or "{priors: integer, employed: binary, leak: numeric}"
    path = tmp_path / "mine.yaml"
    path.write_text(
        f"""name: mine
rounds: 3
world:
  kind: csv
  path: people.csv
  label: outcome
  favourable: "no"
  columns: {columns}
  cohort_size: {cohort}
  history_size: {history}
  outcome: label
features:
  actionable: [priors, employed]
  decrease_only: [priors]
  cost: {{priors: 1.5, employed: 2}}
learner: {{type: logistic_regression, update_rule: refit}}
populations:
  applicants: {{strategy: individual, epsilon: {epsilon}}}
"""
    )
    return str(path)


def _validate(capsys, path) -> list[str]:
    assert main(["validate", path]) == 0
    return capsys.readouterr().out.splitlines()


def test_validate_lists_each_feature_with_its_type_and_action(tmp_path, capsys):
    lines = _validate(capsys, _scenario(tmp_path, columns="{priors: integer, employed: binary}"))
    start = next(i for i, line in enumerate(lines) if line.startswith("  features ("))
    assert lines[start].startswith("  features (2 of 2 actionable; cost norm p = 2;")
    header, *rows = (line.split() for line in lines[start + 1 : start + 3 + 1])
    assert header == ["name", "type", "action", "range", "weight", "unit"]
    assert rows[0] == [
        "priors",
        "integer",
        "actionable,",
        "down",
        "only",
        "[0,",
        "7]",
        "1.5",
        "1.5",
    ]
    assert rows[1] == ["employed", "binary", "actionable", "[0,", "1]", "2", "2"]
    assert not [line for line in lines if line.startswith("  warning:")]


def test_validate_warns_once_for_each_likely_mistake(tmp_path, capsys):
    path = _scenario(tmp_path, cohort=1000, history=500, epsilon=1.0)
    warnings = [line for line in _validate(capsys, path) if line.startswith("  warning: ")]
    assert len(warnings) == 4, warnings
    cohort, history, leak, budget = warnings
    assert "world.cohort_size 1,000 is larger than the data's 240 rows" in cohort
    assert "drawn with replacement" in cohort
    assert "world.history_size 500 is larger" in history
    import pandas as pd
    from sklearn.metrics import roc_auc_score

    rows = pd.read_csv(tmp_path / "people.csv")
    auc = roc_auc_score(rows["outcome"] == "no", rows["leak"])  # an independent AUC
    assert 0.95 <= auc < 1
    assert f"leak (AUC {auc:.3f})" in leak and "does it leak the outcome" in leak
    assert "priors" not in leak and "employed" not in leak
    # the cheapest unit: one step of priors (integer, weight 1.5); ε = 1 buys none
    assert "populations.applicants.epsilon 1 is below" in budget
    assert "(cheapest: priors, integer, 1.5)" in budget


def test_validate_warns_when_the_first_model_approves_nearly_everyone(tmp_path, capsys):
    path = _scenario(tmp_path, share=0.98, columns="{priors: integer, employed: binary}")
    warnings = [line for line in _validate(capsys, path) if line.startswith("  warning: ")]
    assert len(warnings) == 1 and "approves 100.0% of the history" in warnings[0]
    assert "world.favourable" in warnings[0]


def test_unit_costs_of_each_feature_type():
    """One step of an integer feature, one of a binary one, 1 % of a continuous range."""
    from recourse_sim.recourse.action_set import ActionSet

    actions = ActionSet(
        n_features=3, lower=[0, 0, -5], upper=[10, 1, 5], cost_weights=[1.5, 2.0, 0.5]
    )
    costs = unit_costs(actions, ["integer", "binary", "continuous"])
    np.testing.assert_allclose(costs, [1.5, 2.0, 0.5 * 0.01 * 10])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["csv_example", "oar_iris", "lending_fico"])
def test_bundled_scenarios_draw_no_warning(name):
    assert not [line for line in preflight(load_scenario(name)) if line.startswith("warning:")]


def _fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)


def _validate_fresh(path) -> subprocess.CompletedProcess:
    """`recourse-sim validate PATH` in a fresh interpreter; prints its status and whether
    torch was loaded."""
    return _fresh(
        "import sys\n"
        "from recourse_sim.cli import main\n"
        f"status = main(['validate', {str(path)!r}])\n"
        "print(status, 'torch' in sys.modules)\n"
    )


@pytest.mark.slow  # (a fresh interpreter)
def test_checking_a_scenario_imports_no_torch():
    """Loading a scenario runs every check of its fields (the learner's hyperparameters
    too, by building it) without torch: the learners import it on first use."""
    code = (
        "import sys\n"
        "from recourse_sim.scenarios import list_scenarios, load_scenario\n"
        "for name in ('school_assignment', 'lending_german', 'oar_iris', 'oar_digits'):\n"
        "    load_scenario(name)\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    proc = _fresh(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[]\n", proc.stdout


@pytest.mark.slow  # (a fresh interpreter)
def test_building_a_scenario_up_to_its_first_fit_imports_no_torch():
    """Everything `validate` checks before it fits the first model (the world, its data
    and history, the action sets, every population's strategy, the learner built from its
    hyperparameters) runs without torch (and `validate` fits that model on numpy: below)."""
    code = (
        "import sys\n"
        "import numpy as np\n"
        "from recourse_sim.env.engine import RoundEngine\n"
        "from recourse_sim.scenarios import load_scenario\n"
        "for name in ('school_assignment', 'lending_german', 'lending_german_genre',\n"
        "             'oar_iris', 'strategic_blobs', 'performative_linear_additive'):\n"
        "    engine = RoundEngine(load_scenario(name))\n"
        "    engine.world.reset(np.random.default_rng(0))\n"
        "    engine.world.history(np.random.default_rng(0))\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    proc = _fresh(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[]\n", proc.stdout


@pytest.mark.slow  # (a fresh interpreter)
def test_validate_refuses_a_bad_file_without_importing_torch(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        load_scenario("school_assignment")
        .to_yaml()
        .replace("type: logistic_regression", "type: mpl"),
        encoding="utf-8",
    )
    proc = _validate_fresh(path)
    assert proc.stdout == "2 False\n", (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("error: ") and "did you mean 'mlp'" in proc.stderr


# bundled scenarios whose start needs no torch, one per learner and world kind with a
# numpy fit (logistic regression as is, standardised, strategic; nearest centroid;
# tabular, generated, random-forest-oracle and causal worlds)
TORCH_FREE = (
    "school_assignment",
    "lending_fico",
    "lending_german",
    "strategic_blobs",
    "oar_iris",
    "performative_linear_additive",
)


def _cpu_free(text: str) -> str:
    """`text` without the causal search's measured CPU estimate (it varies run to run)."""
    import re

    return re.sub(r"about \S+ s CPU", "about … s CPU", text)


@pytest.mark.slow  # (a fresh interpreter)
def test_validate_imports_no_torch_and_prints_what_a_run_would_fit():
    """`validate` fits the first model on numpy (`Learner.fit_numpy`): torch is never
    imported, and its screen is the one the environment gives after the reset a run
    makes (the first model fitted by torch)."""
    from recourse_sim.env import RecourseEnv
    from recourse_sim.scenarios import belief_notes
    from recourse_sim.simulate import world_summary

    code = (
        "import sys\n"
        "from recourse_sim.cli import main\n"
        f"status = main(['validate', *{list(TORCH_FREE)!r}])\n"
        "print('status', status, 'torch' in sys.modules)\n"
    )
    proc = _fresh(code)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    *screens, last = proc.stdout.splitlines()
    assert last == "status 0 False", proc.stdout
    expected = []
    for name in TORCH_FREE:
        scenario = load_scenario(name)
        env = RecourseEnv(scenario)
        env.reset(seed=0)
        expected += [f"ok: {name}", *(f"note: {line}" for line in belief_notes(scenario))]
        expected += [f"  {line}" for line in world_summary(env)]
    assert _cpu_free("\n".join(screens)) == _cpu_free("\n".join(expected))
    assert "289 candidate actions per person" in proc.stdout  # (the causal world's count)


@pytest.mark.slow  # (a fresh interpreter)
def test_validate_checks_the_learner_values_without_importing_torch(tmp_path):
    """A learner value only a fit rejects (C < 0) is refused by the numpy fit."""
    path = tmp_path / "bad.yaml"
    text = load_scenario("school_assignment").to_yaml()
    bad = text.replace("  params:\n    C: 1.0", "  params:\n    C: -1.0")
    path.write_text(bad, encoding="utf-8")
    assert "C: -1.0" in path.read_text(encoding="utf-8")
    proc = _validate_fresh(path)
    assert proc.stdout == "2 False\n", (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("error: ") and "learner: C=-1.0 must be a positive" in proc.stderr
