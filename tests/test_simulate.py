"""`simulate`: the tidy table, determinism, durable outputs, checkpoints and resume.

Most tests here run against `FakeEnv`, a test double with the interface of
`recourse_sim.env.RecourseEnv` (metrics rows, get_state/set_state), so they exercise the
runner's bookkeeping in milliseconds; the end-to-end tests on real scenarios are at the
bottom and in tests/test_cli.py.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import shutil
from dataclasses import dataclass

import gymnasium
import numpy as np
import pandas as pd
import pytest

from recourse_sim.errors import CheckpointError, ConfigError
from recourse_sim.simulate import LEADING_COLUMNS, read_metrics, read_people, simulate

# `recourse_sim.simulate` the attribute is the function; the module is needed to patch it.
simulate_module = importlib.import_module("recourse_sim.simulate")


# --------------------------------------------------------------------------- test double


@dataclass
class FakeScenario:
    """Test double of `recourse_sim.scenarios.Scenario` (only what the runner reads)."""

    name: str = "fake"
    rounds: int = 6
    size: int = 40  # individuals per round
    crash_at: int | None = None  # raise during this round (1-based), to emulate a kill
    extra_metric_at: int | None = None  # report an unexpected metric in this round

    def to_yaml(self) -> str:
        return f"name: {self.name}\nrounds: {self.rounds}\nsize: {self.size}\n"

    def model_copy(self, update: dict) -> FakeScenario:
        return dataclasses.replace(self, **update)


class Crash(Exception):
    """Raised by FakeEnv to stop a run mid-way, as a kill would."""


class FakeEnv(gymnasium.Env):
    """Test double of `RecourseEnv`: a drifting threshold model with groups A and B.

    Its state mixes every kind a real env state may hold (arrays, numpy scalars, the
    generator state with 128-bit ints, nested lists/dicts), so resume is exact only if
    the checkpoint round-trips all of them.
    """

    single_controlled = True  # (as `RecourseEnv`)

    def __init__(self, scenario: FakeScenario) -> None:
        self.scenario = scenario
        self.action_space = gymnasium.spaces.Box(-1, 1, (2, 3), dtype=np.float32)
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (3,), dtype=np.float64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.theta = np.zeros(3)
        self.log = {"shifts": [], "scale": np.float64(1.0)}
        return self.theta.copy(), {}

    def step(self, action):
        assert action.shape == (2, 3) and not action.any()
        if self.t >= self.scenario.rounds:  # as RecourseEnv: the horizon is the scenario's
            raise RuntimeError("step() after the episode ended")
        self.t += 1
        if self.scenario.crash_at == self.t:
            raise Crash(f"crash in round {self.t}")
        rng = self.np_random
        x = rng.normal(size=(self.scenario.size, 3))
        group = rng.integers(0, 2, size=self.scenario.size)
        accepted = x @ (1 + self.theta) > 0.2
        shift = 0.05 * x[accepted].mean(axis=0) if accepted.any() else np.zeros(3)
        self.theta = self.theta + shift
        self.log["shifts"].append(float(np.abs(shift).sum()))
        rows = []
        for name, members in (("A", group == 0), ("B", group == 1), ("all", group >= 0)):
            seekers = members & ~accepted
            row = {
                "round": self.t,
                "group": name,
                "acceptance_rate": float(accepted[members].mean()),
                # No seekers: no rate (NaN), as a real env reports it.
                "recourse_success_rate": float(rng.random()) if seekers.sum() > 2 else np.nan,
                "mean_cost": (
                    float(np.abs(x[seekers]).sum(axis=1).mean()) if seekers.any() else np.nan
                ),
                "n_seekers": int(seekers.sum()),
            }
            if name == "all":
                row["model_accuracy"] = float(rng.random())
                row["model_shift"] = np.float64(np.abs(self.theta).sum())
            if self.scenario.extra_metric_at == self.t:
                row["surprise"] = 1.0
            rows.append(row)
        obs = self.theta.copy()
        return obs, 0.0, False, False, {"metrics": rows}

    def people(self, features: bool = False) -> dict:
        """The last round's people: a few columns of the real env's people.csv."""
        n = self.scenario.size
        columns = {
            "round": np.full(n, self.t),
            "person": np.arange(n) + n * (self.t - 1),
            "group": np.where(np.arange(n) % 2, "B", "A").astype(object),
            "favourable": np.arange(n) % 3 == 0,
            "cost": np.linspace(-1.0, 1.0, n) * self.theta[0],
        }
        if features:
            columns["feature_x"] = np.full(n, self.theta[1])
        return columns

    def get_state(self) -> dict:
        return {
            "t": self.t,
            "theta": self.theta.copy(),
            "rng": self.np_random.bit_generator.state,
            "log": {"shifts": list(self.log["shifts"]), "scale": self.log["scale"]},
        }

    def set_state(self, state: dict) -> None:
        self.t = state["t"]
        self.theta = state["theta"].copy()
        self.np_random.bit_generator.state = state["rng"]
        self.log = {"shifts": list(state["log"]["shifts"]), "scale": state["log"]["scale"]}


@pytest.fixture(autouse=True)
def fake_env(monkeypatch):
    monkeypatch.setattr(simulate_module, "_make_env", FakeEnv)


def _run(tmp_path, name, **kwargs):
    out = tmp_path / name
    scenario = kwargs.pop("scenario", FakeScenario())
    return simulate(scenario, out=out, **kwargs), out


def _crash(tmp_path, name, crash_at, rounds=6, **kwargs):
    """A run that dies in round `crash_at`, as a killed process would."""
    with pytest.raises(Crash):
        _run(tmp_path, name, scenario=FakeScenario(crash_at=crash_at), rounds=rounds, **kwargs)
    return tmp_path / name


# --------------------------------------------------------------------------- the table


def test_table_columns_and_rows():
    frame = simulate(FakeScenario(), rounds=4, seed=1)
    assert tuple(frame.columns[: len(LEADING_COLUMNS)]) == LEADING_COLUMNS
    assert list(frame.columns[len(LEADING_COLUMNS) :]) == ["n_seekers", "model_shift"]
    assert len(frame) == 4 * 3
    assert frame["round"].tolist() == [r for r in range(1, 5) for _ in range(3)]
    assert frame["group"].tolist() == ["A", "B", "all"] * 4
    # model_accuracy only on "all" rows; floats stay floats even when whole (mean_cost 0).
    assert frame.loc[frame["group"] != "all", "model_accuracy"].isna().all()
    assert frame.loc[frame["group"] == "all", "model_accuracy"].notna().all()
    for column in ("acceptance_rate", "recourse_success_rate", "mean_cost", "model_accuracy"):
        assert frame[column].dtype == np.float64, column
    assert frame["round"].dtype == np.int64 and frame["n_seekers"].dtype == np.int64


def test_same_seed_same_table_and_file(tmp_path):
    a, out_a = _run(tmp_path, "a", seed=3)
    b, out_b = _run(tmp_path, "b", seed=3)
    c, _ = _run(tmp_path, "c", seed=4)
    pd.testing.assert_frame_equal(a, b)
    for name in ("metrics.csv", "people.csv"):
        assert (out_a / name).read_bytes() == (out_b / name).read_bytes()
    assert not a.equals(c)
    # The in-memory run (no out) returns the same table.
    pd.testing.assert_frame_equal(a, simulate(FakeScenario(), seed=3))


def test_output_files(tmp_path):
    frame, out = _run(tmp_path, "run", seed=2, rounds=3)
    assert sorted(p.name for p in out.iterdir()) == [  # (the lock file is removed at the end)
        "checkpoint",
        "metrics.csv",
        "people.csv",
        "scenario.yaml",
        "summary.json",
    ]
    people = (out / "people.csv").read_text().splitlines()
    assert people[0] == "round,person,group,favourable,cost"
    assert len(people) == 1 + 3 * FakeScenario().size and "nan" not in people[1]
    # The resolved scenario carries the horizon of this run.
    assert (out / "scenario.yaml").read_text() == FakeScenario(rounds=3).to_yaml()
    text = (out / "metrics.csv").read_text()
    assert text.splitlines()[0] == ",".join(frame.columns)
    assert text.count("\n") == 1 + 3 * 3 and "nan" not in text
    pd.testing.assert_frame_equal(read_metrics(out), frame, check_dtype=False)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenario"] == "fake" and summary["seed"] == 2 and summary["rounds"] == 3
    assert set(summary["final"]) == {"A", "B", "all"}
    last_all = frame[(frame["round"] == 3) & (frame["group"] == "all")].iloc[0]
    assert summary["final"]["all"]["acceptance_rate"] == last_all["acceptance_rate"]
    assert "model_accuracy" not in summary["final"]["A"]  # a metric group A never has
    assert summary["wall_time_seconds"] >= 0


def test_rerun_without_resume_replaces_the_old_run_only_with_overwrite(tmp_path):
    _, out = _run(tmp_path, "run", seed=1, rounds=5)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(ConfigError, match=r"holds a finished run \(scenario 'fake', seed 1\)"):
        _run(tmp_path, "run", seed=2, rounds=2)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    _, out = _run(tmp_path, "run", seed=2, rounds=2, overwrite=True)
    assert read_metrics(out)["round"].max() == 2
    _, fresh_out = _run(tmp_path, "fresh", seed=2, rounds=2)
    assert (out / "metrics.csv").read_bytes() == (fresh_out / "metrics.csv").read_bytes()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rounds": 0}, "rounds must be a positive integer, got 0"),
        ({"rounds": 2.5}, "rounds must be a positive integer"),
        ({"rounds": True}, "rounds must be a positive integer"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        ({"seed": "1"}, "seed must be an integer >= 0"),
        ({"resume": True}, "resume=True needs out="),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        simulate(FakeScenario(), **kwargs)


def test_a_metric_appearing_later_is_a_bug_not_a_new_column():
    with pytest.raises(RuntimeError, match=r"\['surprise'\] in round 3"):
        simulate(FakeScenario(extra_metric_at=3), rounds=4)


# --------------------------------------------------------------------------- resume


@pytest.mark.parametrize("crash_at", [1, 2, 4, 6])
def test_resume_after_crash_equals_uninterrupted(tmp_path, crash_at):
    (reference, ref_people), ref_out = _run(tmp_path, "ref", seed=5, people=True)
    out = _crash(tmp_path, "run", crash_at, seed=5)
    assert not (out / "summary.json").exists()
    (resumed, people), _ = _run(tmp_path, "run", seed=5, resume=True, people=True)
    for name in ("metrics.csv", "people.csv"):
        assert (out / name).read_bytes() == (ref_out / name).read_bytes()
    pd.testing.assert_frame_equal(resumed, reference)
    pd.testing.assert_frame_equal(people, ref_people)
    pd.testing.assert_frame_equal(read_people(out), ref_people)
    assert json.loads((out / "summary.json").read_text())["resumed"] is True


def test_resume_drops_a_torn_line_and_an_uncheckpointed_round(tmp_path):
    reference, ref_out = _run(tmp_path, "ref", seed=5)
    # Three rounds done, then a fourth whose checkpoint never got written, then half a line.
    _, out = _run(tmp_path, "run", seed=5, rounds=3)
    saved = tmp_path / "checkpoint-after-3"
    shutil.copytree(out / "checkpoint", saved)
    _run(tmp_path, "run", seed=5, rounds=4, resume=True)
    shutil.rmtree(out / "checkpoint")
    shutil.copytree(saved, out / "checkpoint")
    with open(out / "metrics.csv", "ab") as f:
        f.write(b"5,A,0.51")
    with open(out / "people.csv", "ab") as f:
        f.write(b"5,201,B,Fal")
    resumed, _ = _run(tmp_path, "run", seed=5, resume=True)
    for name in ("metrics.csv", "people.csv"):
        assert (out / name).read_bytes() == (ref_out / name).read_bytes()
    pd.testing.assert_frame_equal(resumed, reference)


def test_resume_extends_a_finished_run(tmp_path):
    reference, ref_out = _run(tmp_path, "ref", seed=1, rounds=6)
    _run(tmp_path, "run", seed=1, rounds=2)
    resumed, out = _run(tmp_path, "run", seed=1, rounds=6, resume=True)
    assert (out / "metrics.csv").read_bytes() == (ref_out / "metrics.csv").read_bytes()
    pd.testing.assert_frame_equal(resumed, reference)


def test_resume_of_a_finished_run_only_rewrites_the_summary(tmp_path):
    reference, out = _run(tmp_path, "run", seed=1)
    before = (out / "metrics.csv").read_bytes()
    (out / "summary.json").unlink()  # killed between the last checkpoint and the summary
    resumed, _ = _run(tmp_path, "run", seed=1, resume=True)
    pd.testing.assert_frame_equal(resumed, reference)
    assert (out / "metrics.csv").read_bytes() == before
    assert (out / "summary.json").exists()


def test_resume_without_a_checkpoint_starts_from_the_beginning(tmp_path):
    reference, ref_out = _run(tmp_path, "ref", seed=2)
    resumed, out = _run(tmp_path, "new", seed=2, resume=True)
    pd.testing.assert_frame_equal(resumed, reference)
    assert (out / "metrics.csv").read_bytes() == (ref_out / "metrics.csv").read_bytes()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seed": 9}, "holds a run of scenario 'fake' seed 5; cannot resume it as .* seed 9"),
        ({"scenario": FakeScenario(name="other")}, "cannot resume it as scenario 'other'"),
        ({"scenario": FakeScenario(size=41)}, "with different settings"),
        ({"rounds": 1}, "already holds 2 rounds; cannot resume it to 1"),
    ],
)
def test_resume_of_a_different_run_is_refused(tmp_path, kwargs, message):
    out = _crash(tmp_path, "run", crash_at=3, seed=5)
    before = (out / "metrics.csv").read_bytes()
    kwargs = {"seed": 5, **kwargs}
    with pytest.raises(ConfigError, match=message):
        _run(tmp_path, "run", resume=True, **kwargs)
    assert (out / "metrics.csv").read_bytes() == before  # nothing touched


def test_resume_refuses_a_corrupt_checkpoint(tmp_path):
    out = _crash(tmp_path, "run", crash_at=3)
    record = out / "checkpoint" / "checkpoint.json"
    record.write_bytes(record.read_bytes()[:-30])
    with pytest.raises(CheckpointError, match=r"checkpoint\.json is corrupt"):
        _run(tmp_path, "run", resume=True)


@pytest.mark.parametrize("name", ["metrics.csv", "people.csv"])
def test_resume_refuses_run_files_that_lost_checkpointed_rows(tmp_path, name):
    out = _crash(tmp_path, "run", crash_at=4)
    path = out / name
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(CheckpointError, match=rf"{name} does not hold the rows"):
        _run(tmp_path, "run", resume=True)


def test_people_table_with_features_and_a_resume_that_changes_the_flag(tmp_path):
    (_, people), out = _run(tmp_path, "run", seed=1, rounds=2, people=True, people_features=True)
    assert list(people.columns) == ["round", "person", "group", "favourable", "cost", "feature_x"]
    assert pd.api.types.is_string_dtype(people["group"]) and people["favourable"].dtype == bool
    assert people["cost"].dtype == np.float64 and people["feature_x"].dtype == np.float64
    pd.testing.assert_frame_equal(read_people(out), people)
    with pytest.raises(ConfigError, match="with different settings"):
        _run(tmp_path, "run", seed=1, rounds=3, resume=True)  # without the features


def test_progress_bar_only_when_asked(capsys):
    simulate(FakeScenario(), rounds=3)
    assert capsys.readouterr().err == ""
    simulate(FakeScenario(), rounds=3, progress=True)
    err = capsys.readouterr().err
    assert "fake" in err and "3/3" in err


def test_progress_lines_for_logs(capsys, monkeypatch):
    """Where stderr is no terminal, a long run prints a plain line every few seconds."""
    sim = importlib.import_module("recourse_sim.simulate")
    monkeypatch.setattr(sim, "PROGRESS_LINE_SECONDS", 0.0)
    simulate(FakeScenario(), rounds=3, progress="lines")
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["fake: round 1/3 (0 s)", "fake: round 2/3 (0 s)", "fake: round 3/3 (0 s)"]


def test_progress_lines_of_a_quick_run_say_its_first_and_last_round(capsys):
    simulate(FakeScenario(), rounds=4, progress="lines")
    lines = [line.rsplit(" (", 1)[0] for line in capsys.readouterr().err.splitlines()]
    assert lines == ["fake: round 1/4", "fake: round 4/4"]  # (no 5 s passed in between)


def test_a_cli_run_logged_to_a_file_prints_progress_lines(tmp_path, monkeypatch, capsys):
    """stderr is not a terminal (a batch job's log): plain progress lines, no bar."""
    from recourse_sim.cli import main

    monkeypatch.setattr(simulate_module, "_make_env", FakeEnv)
    monkeypatch.setattr("recourse_sim.scenarios.load_scenario", lambda *a, **k: FakeScenario())
    # (the output budget reads a real world's cohort size, which the double has not)
    monkeypatch.setattr("recourse_sim.cli._check_outputs", lambda *a, **k: None)
    assert main(["run", "fake", "--rounds", "8", "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("fake: round 1/8 (") and "round 8/8" in err
    assert "\r" not in err  # no bar


def test_a_run_that_fails_to_build_leaves_the_previous_run_as_it_was(tmp_path, monkeypatch):
    """Acceptance: a run that fails validation leaves the previous run's files
    byte-identical (everything is built before the directory is touched)."""
    sim = importlib.import_module("recourse_sim.simulate")  # (the module, not the function)
    _, out = _run(tmp_path, "run", seed=1, rounds=3)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def broken(scenario):
        raise ConfigError("learner.params: C must be > 0")

    monkeypatch.setattr(sim, "_make_env", broken)
    with pytest.raises(ConfigError, match="C must be"):
        _run(tmp_path, "run", seed=2, rounds=3, overwrite=True)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_directory_in_use_is_refused_naming_the_process(tmp_path):
    """Acceptance: a second run on a directory in use exits with the holder's PID; once
    the holder is gone its lock is taken over."""
    import os

    from recourse_sim.runs.directory import claim

    out = tmp_path / "run"
    held = claim(out)  # as another run would hold it
    try:
        with pytest.raises(ConfigError, match=rf"{out} is in use by process {os.getpid()}"):
            _run(tmp_path, "run", seed=1, rounds=2)
    finally:
        os.close(held)
    _run(tmp_path, "run", seed=1, rounds=2)  # the lock is free again
