"""`recourse-sim sweep`: grid × seeds, skipping finished cells, retries, backends agree."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest

from recourse_sim.cli import main
from recourse_sim.errors import ConfigError, DependencyNotInstalled
from recourse_sim.simulate import read_metrics
from recourse_sim.sweep import Cell, parse_grid, parse_seeds, sweep

SCENARIO = "school_assignment"
TINY = [
    "world.cohort_size=200",
    "world.history_size=400",
    "populations.h1_students.steps=1",
]
GRID = ["world.frac_n2=0.4,0.6"]


def _sweep(out, backend="serial", grid=GRID, seeds="0-1", **kwargs):
    return sweep(SCENARIO, grid, seeds, out, overrides=TINY, rounds=1, backend=backend, **kwargs)


def _one_error_line(err: str, *fragments: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


# --------------------------------------------------------------------------- parsing


def test_parse_grid_and_seeds():
    assert parse_grid(["a.b=1,2", "c=[1, 2],[3, 4]", "d='x,y',z"]) == {
        "a.b": ["1", "2"],
        "c": ["[1, 2]", "[3, 4]"],
        "d": ["'x,y'", "z"],
    }
    assert parse_grid({"a": [0.5, 1], "b": "refit"}) == {"a": ["0.5", "1"], "b": ["refit"]}
    assert parse_seeds("0-3") == [0, 1, 2, 3]
    assert parse_seeds("5, 0-1") == [5, 0, 1]
    assert parse_seeds([2, 7]) == [2, 7]


@pytest.mark.parametrize(
    ("grid", "seeds", "fragment"),
    [
        (["novalues"], "0", "key.path=value1,value2"),
        (["a=1,"], "0", "empty value"),
        (["a=1,1"], "0", "repeated"),
        (["seed=1,2"], "0", "--seeds"),
        ([], "3-1", "empty range"),
        ([], "x", "'x'"),
        ([], "1,1", "repeated"),
        ([], [-1], "-1"),
    ],
)
def test_bad_grid_or_seeds(grid, seeds, fragment):
    with pytest.raises(ConfigError) as info:
        parse_seeds(seeds) if not grid else parse_grid(grid)
    assert fragment in str(info.value)


def test_cell_names_are_file_safe_and_distinct():
    plain = Cell((("learner.update_rule", "refit"),), 3)
    assert plain.name == "learner.update_rule=refit__seed=3"
    odd = [Cell((("world.path", v),), 0) for v in ("a/b", "a_b", "x" * 300)]
    names = [c.name for c in odd]
    assert len(set(names)) == 3
    assert all("/" not in n and len(n) <= 120 for n in names)


# --------------------------------------------------------------------------- sweeps


@pytest.mark.slow
def test_sweep_table_skip_and_rerun(tmp_path):
    out = tmp_path / "sw"
    result = _sweep(out)
    assert not result.failed and len(result.ran) == 4 and not result.skipped
    table = pd.read_csv(out / "sweep.csv")
    assert list(table.columns[:4]) == ["world.frac_n2", "seed", "round", "group"]
    # rows in grid order, seeds innermost, each cell's metrics unchanged
    cells = [(0.4, 0), (0.4, 1), (0.6, 0), (0.6, 1)]
    assert list(table[["world.frac_n2", "seed"]].drop_duplicates().itertuples(index=False)) == [
        tuple(c) for c in cells
    ]
    for frac, seed in cells:
        rows = table[(table["world.frac_n2"] == frac) & (table["seed"] == seed)]
        metrics = read_metrics(out / f"world.frac_n2={frac}__seed={seed}")
        pd.testing.assert_frame_equal(
            rows.drop(columns=["world.frac_n2", "seed"]).reset_index(drop=True),
            metrics,
            check_dtype=False,
        )
    first = (out / "sweep.csv").read_bytes()

    again = _sweep(out)  # everything finished: nothing runs, same table
    assert not again.ran and len(again.skipped) == 4
    assert (out / "sweep.csv").read_bytes() == first

    (out / "world.frac_n2=0.6__seed=1" / "summary.json").unlink()  # "killed" before the end
    third = _sweep(out)
    assert third.ran == [Cell((("world.frac_n2", "0.6"),), 1)] and len(third.skipped) == 3
    assert (out / "sweep.csv").read_bytes() == first

    more = _sweep(out, seeds="0-2")  # a larger sweep reuses the finished cells
    assert len(more.ran) == 2 and len(more.skipped) == 4


def test_changed_settings_are_not_skipped(tmp_path):
    out = tmp_path / "sw"
    _sweep(out, seeds="0")
    result = sweep(
        SCENARIO,
        GRID,
        "0",
        out,
        overrides=[*TINY, "world.ability_gap=0.5"],
        rounds=1,
        backend="serial",
    )
    assert len(result.ran) == 2 and not result.skipped


def test_failed_cell_is_retried_reported_and_the_rest_continue(tmp_path, capsys):
    out = tmp_path / "sw"
    out.mkdir()
    (out / "world.frac_n2=0.4__seed=1").write_text("in the way")  # cannot be a run directory
    argv = ["sweep", SCENARIO, "--grid", *GRID, "--seeds", "0-1", "--out", str(out)]
    argv += ["--rounds", "1", "--backend", "serial"]
    for item in TINY:
        argv += ["--set", item]
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 1
    assert "retry  world.frac_n2=0.4 seed=1" in captured.out
    assert "FAILED world.frac_n2=0.4 seed=1: ConfigError" in captured.out
    assert "1 of 4 cells failed" in captured.err
    failures = json.loads((out / "failures.json").read_text())
    assert [f["cell"] for f in failures] == ["world.frac_n2=0.4__seed=1"]
    assert "is a file" in failures[0]["error"]
    table = pd.read_csv(out / "sweep.csv")
    assert len(table[["world.frac_n2", "seed"]].drop_duplicates()) == 3

    (out / "world.frac_n2=0.4__seed=1").unlink()  # fixed: the re-run runs only that cell
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "3 skipped" in captured.out and "1 ran" in captured.out
    assert not (out / "failures.json").exists()
    assert len(pd.read_csv(out / "sweep.csv")[["world.frac_n2", "seed"]].drop_duplicates()) == 4


def test_corrupt_checkpoint_fails_once_then_the_retry_starts_afresh(tmp_path):
    out = tmp_path / "sw"
    _sweep(out, seeds="0")
    reference = (out / "sweep.csv").read_bytes()
    cell = out / "world.frac_n2=0.4__seed=0"
    (cell / "summary.json").unlink()
    (cell / "checkpoint" / "checkpoint.json").write_text("{not json")
    result = _sweep(out, seeds="0")
    assert result.retried == [Cell((("world.frac_n2", "0.4"),), 0)]
    assert not result.failed
    assert (out / "sweep.csv").read_bytes() == reference


@pytest.mark.slow  # spawns worker processes (each imports torch)
def test_local_processes_give_the_serial_table(tmp_path):
    _sweep(tmp_path / "serial")
    result = _sweep(tmp_path / "local", backend="local", workers=2)
    assert not result.failed
    serial = (tmp_path / "serial" / "sweep.csv").read_bytes()
    assert (tmp_path / "local" / "sweep.csv").read_bytes() == serial


@pytest.mark.slow  # starts Ray and spawns worker processes
def test_ray_and_local_give_identical_tables_on_a_2x3_grid(tmp_path):
    pytest.importorskip("ray")
    grid = ["learner.update_rule=refit,window", "world.frac_n2=0.3,0.4,0.6"]
    local = _sweep(tmp_path / "local", backend="local", grid=grid, seeds="0", workers=2)
    ray = _sweep(tmp_path / "ray", backend="ray", grid=grid, seeds="0", workers=2)
    assert not local.failed and not ray.failed and len(ray.ran) == 6
    assert (tmp_path / "ray" / "sweep.csv").read_bytes() == (
        tmp_path / "local" / "sweep.csv"
    ).read_bytes()


# --------------------------------------------------------------------------- errors


def test_ray_backend_without_ray_is_a_typed_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(DependencyNotInstalled, match="recourse-sim\\[ray\\]"):
        _sweep(tmp_path / "sw", backend="ray")
    status = main(["sweep", SCENARIO, "--out", str(tmp_path / "sw"), "--backend", "ray"])
    assert status == 2
    _one_error_line(capsys.readouterr().err, "pip install")
    assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize(
    ("extra", "fragments"),
    [
        (["--grid", "learner.tpye=mlp,logistic"], ["tpye", "did you mean 'type'"]),
        (["--grid", "world.frac_n2=0.5,1.5"], ["world.frac_n2", "1.5"]),
        (["--grid", "world.frac_n2"], ["--grid", "world.frac_n2"]),
        (["--seeds", "0-x"], ["--seeds", "0-x"]),
        (["--workers", "0"], ["--workers", "'0'"]),
        (["--backend", "dask"], ["invalid choice", "dask"]),
        (["--address", "auto"], ["--address", "--backend ray"]),
    ],
)
def test_bad_sweep_arguments_are_one_error_line(tmp_path, capsys, extra, fragments):
    out = tmp_path / "sw"
    status = main(["sweep", SCENARIO, "--out", str(out), *extra])
    assert status == 2
    _one_error_line(capsys.readouterr().err, *fragments)
    assert not out.exists()  # nothing ran


@pytest.mark.slow
def test_rounds_without_seekers_stay_empty_through_the_sweep_table(tmp_path, capsys):
    """participation 0: nobody seeks recourse, so the cells' seekers' rates are empty in
    sweep.csv (not 0) and the sweep plot averages no run there."""
    out = tmp_path / "sw"
    grid = ["populations.students.participation=0,1"]
    assert not _sweep(out, grid=grid, seeds="0").failed
    table = pd.read_csv(out / "sweep.csv")
    none = table[table["populations.students.participation"] == 0]
    some = table[table["populations.students.participation"] == 1]
    assert (none["n_seekers"] == 0).all() and none["recourse_success_rate"].isna().all()
    assert none["mean_cost"].isna().all()
    assert some.loc[some["group"] == "all", "recourse_success_rate"].notna().all()
    assert main(["plot", str(out)]) == 0 and (out / "dynamics.png").is_file()
