"""Hostile and unlucky use, process by process: bounded inputs under a memory limit, a
full disk, signals, a second writer, failing runs that destroy nothing, hand-edited
checkpoints, and the async vector env after torch."""

from __future__ import annotations

import itertools
import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from recourse_sim.checkpoint import _digest, load_checkpoint
from recourse_sim.cli import _slug as slug
from recourse_sim.cli import main

ADDRESS_SPACE = 4 * 2**30
SCENARIO = "ok_gaussian_run.yaml"
CORPUS = Path(__file__).parent / "bad_inputs"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _cli(*argv: str, cwd: Path | None = None, limit: bool = False, timeout: float = 60):
    return subprocess.run(
        [sys.executable, "-m", "recourse_sim.cli", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        preexec_fn=_limit_memory if limit else None,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _one_error_line(proc: subprocess.CompletedProcess, status: int = 2) -> str:
    assert proc.returncode == status, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def _gaussian(tmp_path: Path, extra: str = "", name: str = "g") -> Path:
    text = (
        (CORPUS / SCENARIO)
        .read_text(encoding="utf-8")
        .replace("name: ok_gaussian_run", f"name: {json.dumps(name)}")
    )
    path = tmp_path / "g.yaml"
    path.write_text(text + extra, encoding="utf-8")
    return path


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _alias_bomb() -> str:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\ndescription: *a9\n"


@pytest.mark.slow
@pytest.mark.parametrize("case", ["alias_bomb", "deep_nesting", "huge_history"])
def test_unbounded_inputs_exit_2_fast_under_4_gb(tmp_path, case):
    if case == "alias_bomb":
        path = tmp_path / "bomb.yaml"
        path.write_text(_alias_bomb(), encoding="utf-8")
    elif case == "deep_nesting":
        path = tmp_path / "deep.yaml"
        path.write_text("description: " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    else:
        path = _gaussian(tmp_path, "")
        text = path.read_text(encoding="utf-8").replace(
            "  query_size: 5", "  query_size: 5\n  history_size: 1000000000000"
        )
        path.write_text(text, encoding="utf-8")
    started = _children_cpu()
    proc = _cli("run", str(path), "--out", str(tmp_path / "run"), limit=True)
    assert _children_cpu() - started < 10  # CPU seconds (wall time varies with the load)
    line = _one_error_line(proc)
    assert path.name in line
    assert not (tmp_path / "run" / "metrics.csv").exists()


def test_set_value_nesting_and_aliases_are_bounded(capsys):
    deep = "[" * 5000 + "]" * 5000
    assert main(["validate", "school_assignment", "--set", f"description={deep}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "deeper than" in err
    assert len(err) < 500


def test_checkpoint_json_nesting_is_refused_before_parsing(tmp_path):
    from recourse_sim.errors import CheckpointError

    (tmp_path / "checkpoint.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match="nested deeper"):
        load_checkpoint(tmp_path)


def test_a_fifo_is_refused_not_waited_on(tmp_path, capsys):
    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)
    assert main(["validate", str(fifo)]) == 2
    assert "s.yaml" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "school_assignment", "--threads", "1000000000"],
        ["sweep", "school_assignment", "--seeds", "0-1", "--workers", "100000"],
    ],
)
def test_thread_and_worker_counts_are_bounded_by_the_machine(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "per CPU" in err


def test_the_default_folder_is_a_slug_inside_runs(tmp_path, monkeypatch):
    assert slug("../../x") == "x"
    assert slug("/etc/passwd") == "etc_passwd"
    assert slug("..") == "scenario"
    assert slug("a\udcffb") == "a_b"
    path = _gaussian(tmp_path, name="../../escaped")
    work = tmp_path / "work" / "deeper"
    work.mkdir(parents=True)
    before = set(tmp_path.rglob("*"))
    monkeypatch.chdir(work)
    assert main(["run", str(path), "--rounds", "1", "-q"]) == 0
    created = set(tmp_path.rglob("*")) - before
    assert created and all((work / "runs") in p.parents or p == work / "runs" for p in created)


def test_a_failing_run_leaves_the_previous_run_untouched(tmp_path, capsys):
    path, out = _gaussian(tmp_path), tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "-q"]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # without --overwrite: refused, naming the run that is there
    assert main(["run", str(path), "--out", str(out), "-q"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    # with --overwrite but a value only fitting refuses
    bad = [
        "--set",
        "learner.type=logistic_regression",
        "--set",
        "learner.params.C=-1",
        "--overwrite",
    ]
    assert main(["run", str(path), "--out", str(out), "-q", *bad]) == 2
    capsys.readouterr()
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_a_second_writer_is_refused_naming_the_first(tmp_path):
    from recourse_sim.runs.directory import claim

    out = tmp_path / "run"
    lock = claim(out)
    try:
        proc = _cli("run", str(_gaussian(tmp_path)), "--out", str(out), "-q")
        line = _one_error_line(proc)
        assert f"is in use by process {os.getpid()}" in line
    finally:
        os.close(lock)
    # a lock left by a dead process (its file still there) is taken over
    assert (out / ".lock").exists()
    proc = _cli("run", str(_gaussian(tmp_path)), "--out", str(out), "-q")
    assert proc.returncode == 0, proc.stderr


def _edit_checkpoint(out: Path, edit) -> None:
    """Change the saved state with `edit(state_arrays, record)` and recompute both digests,
    as a careful vandal would."""
    import hashlib
    import io

    directory = out / "checkpoint"
    record = json.loads((directory / "checkpoint.json").read_text())
    npz = directory / record["arrays"]
    with np.load(npz) as f:
        arrays = {k: f[k] for k in f.files}
    edit(arrays, record)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    npz.write_bytes(buffer.getvalue())
    record["arrays_sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    record["sha256"] = _digest(record)
    (directory / "checkpoint.json").write_text(json.dumps(record))


def _array_named(record: dict, path: tuple[str, ...]) -> str:
    node = record["state"]
    for part in path:
        node = node[part]
    return node["__ndarray__"]


@pytest.mark.parametrize("damage", ["wrong_shape", "nan_parameter", "negative_round"])
def test_an_edited_checkpoint_with_a_recomputed_digest_is_refused(tmp_path, capsys, damage):
    path, out = _gaussian(tmp_path), tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--rounds", "1", "-q"]) == 0

    def edit(arrays, record):
        if damage == "negative_round":
            record["round"] = -5
            return
        key = _array_named(record, ("theta0",))
        if damage == "wrong_shape":
            arrays[key] = np.concatenate([arrays[key], [1.0]])
        else:
            arrays[key] = np.full_like(arrays[key], np.nan)

    _edit_checkpoint(out, edit)
    status = main(["run", str(path), "--out", str(out), "--rounds", "2", "--resume", "-q"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith("error: checkpoint"), err


@pytest.mark.slow
def test_an_oserror_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch):
    simulate_module = sys.modules["recourse_sim.simulate"]
    path, out = _gaussian(tmp_path), tmp_path / "run"
    real = simulate_module.AppendFile.append
    calls = {"n": 0}

    def full(self, text):
        calls["n"] += 1
        if calls["n"] == 3:  # round 2's metrics
            raise OSError(28, "No space left on device", str(self.path))
        real(self, text)

    monkeypatch.setattr(simulate_module.AppendFile, "append", full)
    assert main(["run", str(path), "--out", str(out), "--rounds", "4", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "cannot write" in err and "metrics.csv" in err and "--resume" in err
    # space freed: the resumed run writes exactly what an uninterrupted one does
    monkeypatch.setattr(simulate_module.AppendFile, "append", real)
    argv = ["run", str(path), "--rounds", "4", "-q"]
    assert main([*argv, "--out", str(out), "--resume"]) == 0
    assert main([*argv, "--out", str(tmp_path / "reference")]) == 0
    for name in ("metrics.csv", "people.csv"):
        assert (out / name).read_bytes() == (tmp_path / "reference" / name).read_bytes()


def test_an_unexpected_error_is_one_line_and_exit_1(monkeypatch, capsys):
    import recourse_sim.cli as cli

    def boom(args):
        raise ZeroDivisionError("x" * 100_000)

    monkeypatch.setattr(cli, "_cmd_validate", boom)
    monkeypatch.setattr(
        cli, "build_parser", _with_handler(cli.build_parser, "validate", boom), raising=True
    )
    assert main(["validate", "x"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ZeroDivisionError" in err and len(err) <= 420
    with pytest.raises(ZeroDivisionError):
        main(["--debug", "validate", "x"])


def _with_handler(build, command, handler):
    def build_parser():
        parser = build()
        parser._subparsers._group_actions[0].choices[command].set_defaults(handler=handler)
        return parser

    return build_parser


def _run_until(out: Path, argv: list[str], rounds_on_disk: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "recourse_sim.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        checkpoint = out / "checkpoint" / "checkpoint.json"
        try:
            if json.loads(checkpoint.read_text())["round"] >= rounds_on_disk:
                return proc
        except (OSError, ValueError, KeyError):
            pass
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read())
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the run never got going")


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_is_one_line_and_resume_is_byte_identical(tmp_path, signum):
    path = _gaussian(tmp_path)
    # rounds long enough (about 0.15 s) that the signal lands mid-run
    text = path.read_text().replace("class_sizes: [20, 20]", "class_sizes: [100, 100]")
    path.write_text(text)
    reference = tmp_path / "reference"
    argv = ["run", str(path), "--rounds", "40", "-q"]
    assert _cli(*argv, "--out", str(reference), timeout=600).returncode == 0
    out = tmp_path / "run"
    proc = _run_until(out, [*argv, "--out", str(out)], 3)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    assert err.count("\n") == 1 and signal.Signals(signum).name in err, err
    assert _cli(*argv, "--out", str(out), "--resume", timeout=600).returncode == 0
    for name in ("metrics.csv", "people.csv"):
        assert (out / name).read_bytes() == (reference / name).read_bytes()


@pytest.mark.slow
def test_async_vector_env_steps_after_a_torch_matmul(tmp_path):
    script = textwrap.dedent(
        """
        import gymnasium as gym
        import torch

        import recourse_sim  # noqa: F401

        a = torch.randn(300, 300)
        (a @ a).sum()
        envs = gym.make_vec(
            "recourse_sim/SchoolAssignment-v1", num_envs=2, vectorization_mode="async"
        )
        envs.reset(seed=0)
        envs.step(envs.action_space.sample())
        envs.close()
        print("stepped")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0 and "stepped" in proc.stdout, proc.stderr


@pytest.mark.slow  # (a fresh interpreter)
def test_a_forked_child_runs_torch_on_one_thread():
    """The fork hook behind the test above: a child forked after a threaded matmul gets
    one torch thread (GNU OpenMP's pool is not the child's), the parent keeps its own."""
    script = textwrap.dedent(
        """
        import os
        import torch

        import recourse_sim  # noqa: F401

        torch.set_num_threads(2)
        a = torch.randn(300, 300)
        (a @ a).sum()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(write, str(torch.get_num_threads()).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        print(os.read(read, 16).decode(), torch.get_num_threads())
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "2"]


def _children(pid: int) -> set[int]:
    """PIDs whose parent is `pid` (from /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_stopped_sweep_leaves_no_worker_and_writes_its_finished_cells(tmp_path):
    path, out = _gaussian(tmp_path), tmp_path / "sweep"
    argv = ["sweep", str(path), "--seeds", "0-7", "--workers", "1", "--rounds", "200"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "recourse_sim.cli", *argv, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.stdout.readline().startswith("done"), proc.stderr.read()
    workers = {  # the pool's workers (not multiprocessing's resource tracker)
        pid
        for pid in _children(proc.pid)
        if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    }
    assert workers
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert errors == ["error: stopped by SIGTERM (running the same sweep again continues it)"]
    assert "leaked" not in err  # the workers' locks are not multiprocessing semaphores
    time.sleep(1)
    alive = [pid for pid in workers if Path(f"/proc/{pid}").exists()]
    assert not alive
    table = (out / "sweep.csv").read_text().splitlines()
    assert len(table) > 1 and table[0].startswith("seed,")


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (links not followed) by relative path, with its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and not p.is_symlink()
    }


@pytest.mark.parametrize(
    "planted",
    [
        "lock",
        "out_dir",
        "checkpoint_dir",
        pytest.param("plot", marks=pytest.mark.slow),  # (a run, then its plot)
        "resume_people",
        pytest.param("cell", marks=pytest.mark.slow),  # (a sweep)
    ],
)
def test_a_planted_symlink_is_refused_and_the_victim_is_untouched(tmp_path, capsys, planted):
    path, out = _gaussian(tmp_path), tmp_path / "o"
    victims = tmp_path / "victims"
    victims.mkdir()
    (victims / "secret.txt").write_text("the user's own file\n")
    if planted == "lock":
        out.mkdir()
        (out / ".lock").symlink_to(victims / "secret.txt")
        argv, named = ["run", str(path), "--out", str(out)], ".lock"
    elif planted == "out_dir":
        out.symlink_to(victims, target_is_directory=True)
        argv, named = ["run", str(path), "--out", str(out)], str(out)
    elif planted == "checkpoint_dir":
        for name in ("state-000001.npz", ".x.tmp", "checkpoint.json"):
            (victims / name).write_text(f"keep {name}\n")
        out.mkdir()
        (out / "checkpoint").symlink_to(victims, target_is_directory=True)
        argv, named = ["run", str(path), "--out", str(out)], "checkpoint"
    elif planted == "plot":
        assert main(["run", str(path), "--out", str(out), "-q"]) == 0
        (out / "dynamics.png").symlink_to(victims / "secret.txt")
        argv, named = ["plot", str(out)], "dynamics.png"
    elif planted == "resume_people":
        assert main(["run", str(path), "--out", str(out), "-q"]) == 0
        # a user file that begins with the run's rows, in place of people.csv
        (victims / "secret.txt").write_bytes((out / "people.csv").read_bytes() + b"notes\n")
        (out / "people.csv").unlink()
        (out / "people.csv").symlink_to(victims / "secret.txt")
        argv = ["run", str(path), "--out", str(out), "--resume", "--rounds", "3"]
        named = "people.csv"
    else:
        sweep = ["sweep", str(path), "--seeds", "0", "--out", str(out)]
        assert main(sweep) == 0
        (cell,) = [p for p in out.iterdir() if p.is_dir()]
        cell.rename(victims / "cell")
        cell.symlink_to(victims / "cell", target_is_directory=True)
        argv, named = [*sweep, "--rounds", "3"], cell.name
    capsys.readouterr()
    before = _snapshot(victims)
    assert main([*argv, "-q"] if planted != "plot" else argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert named in err and "symbolic link" in err
    assert _snapshot(victims) == before


def test_a_lock_file_opened_before_its_run_ended_is_not_taken_for_the_lock(tmp_path):
    from recourse_sim.runs.directory import claim, is_lock_file, release

    out = tmp_path / "run"
    lock = claim(out)
    stale = os.open(out / ".lock", os.O_RDWR)  # another process opened it meanwhile
    release(out, lock)
    assert not (out / ".lock").exists()
    assert not is_lock_file(out, stale)  # so claim would not stop at it
    fresh = claim(out)
    assert is_lock_file(out, fresh)
    os.close(stale)
    release(out, fresh)


def test_the_lock_file_is_removed_when_a_run_ends(tmp_path):
    path, out = _gaussian(tmp_path), tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--rounds", "1", "-q"]) == 0
    assert not (out / ".lock").exists()
    bad = ["--set", "learner.type=logistic_regression", "--set", "learner.params.C=-1"]
    assert main(["run", str(path), "--out", str(out), "-q", "--overwrite", *bad]) == 2
    assert not (out / ".lock").exists()


# ------------------------------------------------------------------ the oracle cache


def _csv_world(tmp_path: Path) -> Path:
    """A 120-row CSV world whose outcomes come from a small calibrated-forest oracle."""
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 10, 120), rng.normal(size=120).round(3)
    y = (a + 3 * b + rng.normal(size=120) > 5).astype(int)
    rows = "".join(f"{i},{j},{k}\n" for i, j, k in zip(a, b, y, strict=True))
    (tmp_path / "d.csv").write_text("a,b,y\n" + rows)
    path = tmp_path / "c.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            name: tiny_csv
            rounds: 3
            world:
              kind: csv
              path: d.csv
              label: y
              favourable: 1
              columns: {a: integer, b: numeric}
              cohort_size: 30
              history_size: 60
              outcome: oracle
              oracle: {trees: 4, seed: 0}
            features:
              actionable: [a, b]
            learner:
              type: logistic_regression
            decision:
              rule: threshold
              threshold: 0.5
            populations:
              applicants:
                strategy: individual
                epsilon: 1.0
                participation: 0.5
            """
        )
    )
    return path


def _cache_arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as stored:
        return {name: stored[name] for name in stored.files}


def _save_cache(path: Path, arrays: dict[str, np.ndarray], sign: bool) -> None:
    """Write `arrays` as the cache file; with `sign`, recompute its digest (a careful
    vandal)."""
    from recourse_sim.env.oracle import _arrays_sha256

    arrays = dict(arrays)
    if sign:
        arrays.pop("sha256")
        arrays["sha256"] = np.array(_arrays_sha256(arrays))
    with path.open("wb") as f:
        np.savez(f, **arrays)


def _tamper(arrays: dict[str, np.ndarray], damage: str) -> bool:
    """Edit the cached oracle's arrays in place as `damage` says; whether the edit also
    recomputes the digest."""
    inner = np.flatnonzero(arrays["m0_f0_left"] >= 0)
    leaves = np.flatnonzero(arrays["m0_f0_left"] < 0)
    if damage == "nan_threshold":
        arrays["m0_f0_threshold"][inner[0]] = np.nan
    elif damage == "far_threshold":
        arrays["m0_f0_threshold"][inner[0]] = 1e300
    elif damage == "nan_leaf":
        arrays["m0_f0_value"][leaves[0]] = np.nan
    elif damage == "negative_leaf":
        arrays["m0_f0_value"][leaves[0]] = [-1.0, 2.0]
    elif damage == "flipped_leaves":  # plausible values: only the digest tells
        arrays["m0_f0_value"] = arrays["m0_f0_value"][:, ::-1].copy()
        return False
    elif damage in ("slope_1e300", "slope_nan"):
        arrays["m0_a"][0, 0] = 1e300 if damage == "slope_1e300" else np.nan
    elif damage == "swapped_fold":  # each row scored by the model that saw it
        arrays["fold"] = 1 - arrays["fold"]
    elif damage == "huge_forest":  # more nodes than a tree fit on these rows can have
        extra = 2 * 120
        arrays["m0_f0_left"] = np.concatenate([arrays["m0_f0_left"], np.full(extra, -1)])
        arrays["m0_f0_right"] = np.concatenate([arrays["m0_f0_right"], np.full(extra, -1)])
        arrays["m0_f0_feature"] = np.concatenate([arrays["m0_f0_feature"], np.full(extra, -2)])
        arrays["m0_f0_threshold"] = np.concatenate(
            [arrays["m0_f0_threshold"], -2.0 * np.ones(extra)]
        )
        value = np.tile([[1.0, 0.0]], (extra, 1))
        arrays["m0_f0_value"] = np.concatenate([arrays["m0_f0_value"], value])
    else:
        raise AssertionError(damage)
    return True


DAMAGES = [
    "nan_threshold",
    "far_threshold",
    "nan_leaf",
    "negative_leaf",
    "flipped_leaves",
    "slope_1e300",
    "slope_nan",
    "swapped_fold",
    "huge_forest",
]


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_tampered_oracle_cache_is_rebuilt_and_the_run_unchanged(
    tmp_path, monkeypatch, capsys, damage
):
    from recourse_sim.env import oracle as oracle_module

    monkeypatch.setenv("RECOURSE_SIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(oracle_module, "_MEMORY", {})
    path = _csv_world(tmp_path)
    assert main(["run", str(path), "--out", str(tmp_path / "reference"), "-q"]) == 0
    (cache,) = (tmp_path / "cache" / "oracles").iterdir()
    untampered = cache.read_bytes()
    arrays = _cache_arrays(cache)
    sign = _tamper(arrays, damage)
    _save_cache(cache, arrays, sign)
    oracle_module._MEMORY.clear()
    with pytest.warns(UserWarning, match="oracle cache .* failed its check") as caught:
        assert main(["run", str(path), "--out", str(tmp_path / "run"), "-q"]) == 0
    assert len([w for w in caught if "oracle cache" in str(w.message)]) == 1
    for name in ("metrics.csv", "people.csv"):
        assert (tmp_path / "run" / name).read_bytes() == (
            tmp_path / "reference" / name
        ).read_bytes()
    assert cache.read_bytes() == untampered  # rebuilt and stored again


def test_an_oracle_cache_over_the_memory_budget_is_not_loaded(tmp_path, monkeypatch):
    from recourse_sim import budget
    from recourse_sim.env import oracle as oracle_module
    from recourse_sim.scenarios import OracleSpec

    monkeypatch.setenv("RECOURSE_SIM_CACHE", str(tmp_path))
    monkeypatch.setattr(oracle_module, "_MEMORY", {})
    X, y = _oracle_data()
    spec = OracleSpec(trees=3)
    fitted = oracle_module.fit_oracle(X, y, spec)
    oracle_module._MEMORY.clear()
    (cache,) = (tmp_path / "oracles").iterdir()
    monkeypatch.setattr(budget, "memory_limit", lambda: 4 * cache.stat().st_size - 4)
    with pytest.warns(UserWarning, match="more than the"):
        again = oracle_module.fit_oracle(X, y, spec)
    rows = np.arange(len(y))
    assert np.array_equal(again.predict_proba(rows, X), fitted.predict_proba(rows, X))


def _oracle_data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((100, 3))
    y = (X[:, 0] + rng.standard_normal(100) > 0).astype(np.int64)
    return X, y


@pytest.mark.slow
def test_fuzzed_oracle_caches_are_used_unchanged_or_rebuilt(tmp_path, monkeypatch):
    """Random truncations, byte flips and value edits (with or without a recomputed
    digest) of a cached oracle: the oracle obtained always predicts exactly as the
    untampered one."""
    import warnings

    from recourse_sim.env import oracle as oracle_module
    from recourse_sim.scenarios import OracleSpec

    monkeypatch.setenv("RECOURSE_SIM_CACHE", str(tmp_path))
    monkeypatch.setattr(oracle_module, "_MEMORY", {})
    X, y = _oracle_data()
    rows = np.arange(len(y))
    Z = np.vstack([X, np.random.default_rng(1).standard_normal((100, 3)) * 3])
    zrows = np.concatenate([rows, rows])
    for fit in ("cross", "all"):
        spec = OracleSpec(trees=3, fit=fit)
        reference = oracle_module.fit_oracle(X, y, spec)
        expected = reference.predict_proba(zrows, Z)
        cache = max((tmp_path / "oracles").iterdir(), key=lambda p: p.stat().st_mtime_ns)
        good = cache.read_bytes()
        arrays = _cache_arrays(cache)
        names = [n for n in arrays if n != "sha256"]
        # a rebuild refits the same forests (fixed seeds); reuse them to keep this fast
        monkeypatch.setattr(oracle_module, "_fit", lambda *a, r=reference: r)
        rng = np.random.default_rng(7)
        outcomes = {"used": 0, "rebuilt": 0}
        for trial in range(60):
            kind = trial % 4
            if kind == 0:  # truncated
                cache.write_bytes(good[: rng.integers(0, len(good))])
            elif kind == 1:  # a byte flipped
                data = bytearray(good)
                data[rng.integers(0, len(data))] ^= 1 << int(rng.integers(0, 8))
                cache.write_bytes(bytes(data))
            else:  # a value edited; kind 3 recomputes the digest with an impossible value
                edited = {k: v.copy() for k, v in arrays.items()}
                name = names[rng.integers(0, len(names))]
                flat = edited[name].reshape(-1)
                if flat.size == 0 or edited[name].dtype.kind not in "fiu":
                    continue
                at = rng.integers(0, flat.size)
                if kind == 2:
                    flat[at] = flat[at] + 1 if flat.dtype.kind in "iu" else flat[at] * 1.5 + 0.1
                elif flat.dtype.kind == "f":
                    flat[at] = rng.choice([np.nan, np.inf, -np.inf, 1e300, -1e300])
                else:
                    flat[at] = rng.choice([-5, 2**40])
                _save_cache(cache, edited, sign=kind == 3)
            oracle_module._MEMORY.clear()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = oracle_module.fit_oracle(X, y, spec)
            assert np.array_equal(got.predict_proba(zrows, Z), expected), (trial, kind)
            outcomes["rebuilt" if caught else "used"] += 1
            if caught:
                messages = [str(w.message) for w in caught]
                assert len(caught) == 1 and "failed its check" in messages[0], messages
            cache.write_bytes(good)
        assert outcomes["rebuilt"] > 30


# ------------------------------------------------------- inputs that were "unexpected"


def _csv_scenario(tmp_path: Path, csv_name: str, text: str | bytes) -> Path:
    """The tiny CSV world of `_csv_world`, reading `csv_name` (holding `text`)."""
    path = _csv_world(tmp_path)
    target = tmp_path / csv_name
    target.write_bytes(text if isinstance(text, bytes) else text.encode())
    path.write_text(path.read_text().replace("path: d.csv", f"path: {csv_name}"))
    return path


@pytest.mark.parametrize("command", ["validate", "sweep"])
def test_an_override_through_a_number_names_it(tmp_path, capsys, command):
    path = _gaussian(tmp_path)
    if command == "validate":
        argv = ["validate", str(path), "--set", "world.class_sizes.0.x=1"]
    else:
        argv = ["sweep", str(path), "--grid", "world.class_sizes.0.x=1,2", "--seeds", "0"]
        argv += ["--out", str(tmp_path / "sw")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "world.class_sizes.0 is 20, not a mapping" in err, err


def test_a_gzip_bomb_csv_is_refused_within_the_memory_budget(tmp_path, capsys, monkeypatch):
    import gzip

    from recourse_sim import budget

    monkeypatch.setattr(budget, "memory_limit", lambda: 2**30)  # reads at most ~27 MB
    bomb = gzip.compress(b"a,b,y\n" + b"1,0.5,1\n" * 4_000_000, compresslevel=1)
    assert len(bomb) < 1_000_000  # 32 MB of text
    path = _csv_scenario(tmp_path, "bomb.csv.gz", bomb)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "world.path" in err and "decompressed" in err, err
    # a small compressed file is read as before
    small = gzip.compress((tmp_path / "d.csv").read_bytes())
    path = _csv_scenario(tmp_path, "small.csv.gz", small)
    assert main(["validate", str(path), "-q"]) == 0


def test_plot_of_a_device_is_one_line(capsys):
    assert main(["plot", "/dev/zero"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "/dev/zero" in err and "not a regular file" in err


@pytest.mark.parametrize(
    "columns", ["x", [["round"]], [[1, 2]], [["round", "int"], ["group", "str"]], None, 5]
)
@pytest.mark.parametrize("key", ["columns", pytest.param("people_columns", marks=pytest.mark.slow)])
def test_a_re_signed_checkpoint_with_other_columns_is_refused(tmp_path, capsys, key, columns):
    path, out = _gaussian(tmp_path), tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--rounds", "1", "-q"]) == 0

    def edit(arrays, record):
        record["meta"][key] = columns

    _edit_checkpoint(out, edit)
    status = main(["run", str(path), "--out", str(out), "--rounds", "2", "--resume", "-q"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and err.startswith("error: checkpoint"), err
    assert "columns" in err


PEOPLE_SCENARIO = Path(__file__).parents[1] / "scenarios" / "recourse_over_time.yaml"


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_pool_of_people_beyond_the_memory_budget_is_refused(tmp_path, capsys, command):
    argv = [command, str(PEOPLE_SCENARIO), "--set", "world.people.newcomers=10000000"]
    if command == "run":
        argv += ["--out", str(tmp_path / "run"), "-q"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "world.people.newcomers" in err and "lower it" in err


@pytest.mark.parametrize("value", ["1.0e+30", "1000000000000"])
def test_return_after_is_bounded(tmp_path, capsys, value):
    text = PEOPLE_SCENARIO.read_text().replace(
        "    newcomers: 10 ", f"    return_after: {value}\n    newcomers: 10 "
    )
    assert f"return_after: {value}" in text
    path = tmp_path / "r.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "world.people.return_after" in err


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """Outcome-model plugins that fail: a missing module, a module whose import raises,
    a factory that raises."""
    from importlib.metadata import EntryPoint

    from recourse_sim.env import oracle as oracle_module

    (tmp_path / "broken_plugin.py").write_text("raise ImportError('needs libfoo')\n")
    (tmp_path / "raising_plugin.py").write_text(
        "def factory(X, y):\n    raise RuntimeError('cannot fit')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    group = oracle_module.ENTRY_POINT_GROUP
    points = [
        EntryPoint("missing", "no_such_module_for_sure:factory", group),
        EntryPoint("broken", "broken_plugin:factory", group),
        EntryPoint("raising", "raising_plugin:factory", group),
    ]
    monkeypatch.setattr(
        "importlib.metadata.entry_points",
        lambda group=None: [p for p in points if p.group == group],
    )


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("missing", "no_such_module_for_sure:factory"),
        ("broken", "broken_plugin:factory"),
        ("raising", "raising_plugin:factory"),
    ],
)
def test_a_failing_plugin_is_named_with_its_entry_point(tmp_path, capsys, plugins, name, where):
    path = _csv_world(tmp_path)
    argv = ["run", str(path), "--out", str(tmp_path / "run"), "-q"]
    assert main([*argv, "--set", f"world.oracle.model={name}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert "world.oracle.model" in err and repr(name) in err and where in err, err


@pytest.mark.slow
def test_num_envs_beyond_the_memory_budget_is_refused_not_a_crash():
    script = textwrap.dedent(
        """
        import gymnasium as gym
        import recourse_sim  # noqa: F401
        from recourse_sim.errors import ConfigError

        try:
            gym.make_vec(
                "recourse_sim/SchoolAssignment-v1",
                num_envs=10_000,
                vectorization_mode="vector_entry_point",
            ).reset(seed=0)
        except ConfigError as e:
            print(e)
        """
    )
    three_gb = 3 * 2**30
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=240,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (three_gb, three_gb)),
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("num_envs: ") and "lower it" in proc.stdout


def test_a_csv_header_of_a_million_columns_is_refused_at_once(tmp_path, capsys):
    header = ",".join(f"c{i}" for i in range(1_000_000)) + ",a,b,y\n"
    path = _csv_scenario(tmp_path, "wide.csv", header + "0," * 1_000_000 + "1,2,1\n")
    started = time.process_time()
    assert main(["validate", str(path)]) == 2
    assert time.process_time() - started < 10  # CPU seconds
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1,000,003 columns" in err


@pytest.mark.parametrize("cell", ["1e308", "-1e308", "2e9"])
def test_csv_cells_are_bounded_like_scenario_numbers(tmp_path, capsys, cell):
    _csv_world(tmp_path)
    rows = (tmp_path / "d.csv").read_text().splitlines()
    a, _, y = rows[6].split(",")
    rows[6] = f"{a},{cell},{y}"
    path = _csv_scenario(tmp_path, "big.csv", "\n".join(rows) + "\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "column 'b'" in err and "outside ±1e+09" in err, err
    assert "data row 6" in err


def test_an_error_never_shows_a_foreign_files_contents(tmp_path, capsys):
    secret = "root:$6$a-password-hash:20228:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\n"
    path = _csv_scenario(tmp_path, "shadow", secret)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is it a CSV file" in err
    assert "password-hash" not in err and "20228" not in err and "daemon" not in err


@pytest.mark.slow
def test_a_failing_oracle_cache_is_one_warning_line_on_the_command_line(tmp_path):
    path = _csv_world(tmp_path)
    env = {**os.environ, "RECOURSE_SIM_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}

    def run(out: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "recourse_sim.cli", "run", str(path), "--out", out, "-q"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=240, env=env)

    assert run(str(tmp_path / "reference")).returncode == 0
    (cache,) = (tmp_path / "cache" / "oracles").iterdir()
    data = bytearray(cache.read_bytes())
    data[len(data) // 2] ^= 1
    cache.write_bytes(bytes(data))
    proc = run(str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: oracle cache "), proc.stderr
    assert lines[0].endswith("refitting the oracle")


# ------------------------------------------------- sizes, magnitudes and budgets of worlds


def _scm_file(tmp_path: Path, nodes: dict, name: str = "scm.yaml") -> Path:
    """A causal world with these nodes (flow style, one line a node)."""
    lines = ["world:", "  kind: scm", "  cohort_size: 50", "  history_size: 100", "  nodes:"]
    for node, spec in nodes.items():
        lines.append(f"    {node}: {json.dumps(spec)}")
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _chain(k: int, leaf_first: bool = False) -> dict:
    nodes = {"x0": {}} | {f"x{i}": {"parents": [f"x{i - 1}"], "coef": [0.5]} for i in range(1, k)}
    nodes["y"] = {"parents": [f"x{k - 1}"], "coef": [1.0]}
    return dict(reversed(nodes.items())) if leaf_first else nodes


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        pytest.param("chain_5000", "5,001 nodes", marks=pytest.mark.slow),
        ("nodes_5000", "5,001 nodes"),
        pytest.param("label_with_3000_parents", "3,001 nodes", marks=pytest.mark.slow),
        ("chain_1500_leaf_first", "1,501 nodes"),
        ("chain_150", "a chain of 151 causes"),
    ],
)
def test_causal_worlds_beyond_their_size_or_depth_are_one_line(tmp_path, capsys, case, expected):
    """Refused when the scenario loads, before the graph is walked (the 5,000-node
    worlds crashed `validate`: recursion, and O(k^2) work)."""
    if case == "chain_5000":
        nodes = _chain(5000)
    elif case == "nodes_5000":
        nodes = {f"x{i}": {} for i in range(5000)} | {"y": {"parents": ["x0"], "coef": [1.0]}}
    elif case == "label_with_3000_parents":
        parents = [f"x{i}" for i in range(3000)]
        nodes = {p: {} for p in parents} | {"y": {"parents": parents, "coef": [0.01] * 3000}}
    elif case == "chain_1500_leaf_first":
        nodes = _chain(1500, leaf_first=True)
    else:
        nodes = _chain(150, leaf_first=True)
    path = _scm_file(tmp_path, nodes)
    started = time.process_time()
    assert main(["validate", str(path)]) == 2
    assert time.process_time() - started < 30  # CPU seconds (pydantic reads the nodes)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and expected in err, err
    assert "scm.yaml" in err and "world: nodes: " in err


@pytest.mark.slow
def test_cycle_search_and_order_need_no_recursion():
    """A 20,000-node chain declared leaf first, with and without a cycle closing it:
    found iteratively (far past Python's recursion limit), the order parents first."""
    from recourse_sim.env.scm import _topological_order
    from recourse_sim.scenarios.world import find_cycle, longest_chain

    k = 20_000
    graph = {f"x{i}": ([f"x{i - 1}"] if i else []) for i in reversed(range(k))}
    assert find_cycle(graph) is None
    assert longest_chain(graph) == [f"x{i}" for i in range(k)]
    parents = [(i + 1,) if i < k - 1 else () for i in range(k)]  # node i's parent: i + 1
    order = _topological_order(parents)
    assert order == list(reversed(range(k)))
    graph["x0"] = [f"x{k - 1}"]  # closes the chain into a cycle
    cycle = find_cycle(graph)
    assert cycle is not None and len(cycle) == k + 1 and cycle[0] == cycle[-1]
    assert all(b in graph[a] for a, b in itertools.pairwise(cycle))
    with pytest.raises(ValueError, match="cycle through node"):
        _topological_order([*parents[:-1], (0,)])  # node k - 1's parent: node 0


def test_a_causal_order_is_parents_first_by_generation():
    """The order is Kahn's, generation by generation, declaration order within one
    (as before the networkx version): checked against a brute-force layering."""
    from recourse_sim.env.scm import _topological_order

    rng = np.random.default_rng(3)
    for _ in range(50):
        k = int(rng.integers(2, 30))
        rank = rng.permutation(k)  # a hidden order: parents rank lower
        parents = [
            tuple(int(p) for p in np.flatnonzero((rank < rank[j]) & (rng.random(k) < 0.3)))
            for j in range(k)
        ]
        depth = [0] * k
        for j in np.argsort(rank):
            depth[j] = 1 + max((depth[p] for p in parents[j]), default=-1)
        expected = sorted(range(k), key=lambda j: (depth[j], j))
        assert _topological_order(parents) == expected


@pytest.mark.parametrize("k", [10_000, 100_000])
def test_a_label_with_too_many_classes_is_refused_before_any_model(tmp_path, capsys, k):
    """10^4 and 10^5 classes of one feature crashed (a 3.2 GB / 320 GB Hessian)."""
    rows = "".join(f"{i % 7},{i % k}\n" for i in range(2 * k))
    path = _csv_scenario(tmp_path, "classes.csv", "a,b,y\n" + rows.replace(",", ",0.5,", 1))
    path.write_text(
        path.read_text().replace("columns: {a: integer, b: numeric}", "columns: {a: integer}")
    )
    (tmp_path / "classes.csv").write_text(
        "a,y\n" + "".join(f"{i % 7},{i % k}\n" for i in range(2 * k))
    )
    path.write_text(path.read_text().replace("actionable: [a, b]", "actionable: [a]"))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"column 'y': {k:,} classes" in err, err
    assert "classes.csv" in err and "at most 1,000" in err


def test_a_file_population_beyond_the_memory_budget_is_refused_before_parsing(
    tmp_path, capsys, monkeypatch
):
    """The rows of `population: file` are the people of every round: counted in the
    file's bytes and held against the budget (a 10^7-row file ran out of memory after
    200 s); here 20,000 rows against a limit lowered to 64 MiB."""
    from recourse_sim import budget

    path = _csv_world(tmp_path)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 10, 20_000), rng.normal(size=20_000).round(3)
    y = (a + 3 * b > 5).astype(int)
    (tmp_path / "big.csv").write_text(
        "a,b,y\n" + "".join(f"{i},{j},{k}\n" for i, j, k in zip(a, b, y, strict=True))
    )
    text = path.read_text().replace("path: d.csv", "path: big.csv")
    text = text.replace("  outcome: oracle\n", "  population: file\n  outcome: label\n")
    path.write_text(text)
    monkeypatch.setattr(budget, "memory_limit", lambda: 2**26)
    import pandas as pd

    def no_parsing(*args, **kwargs):
        raise AssertionError("parsed before the budget was checked")

    monkeypatch.setattr(pd, "read_csv", no_parsing)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "big.csv: world.population: file: 20,000 people" in err, err
    assert "lower it" in err


@pytest.mark.parametrize("rounds", [3, 1_000_000])
def test_outputs_beyond_the_free_disk_are_refused_before_the_first_round(
    tmp_path, capsys, monkeypatch, rounds
):
    """10^6 rounds of a 2,000 cohort (a 119 GiB people.csv) ran on and on; the budget is
    the disk's free space (here as if 62 GB, or 1 KiB for 3 rounds of 45 people)."""
    from recourse_sim import budget

    free = 1024 if rounds == 3 else 62 * 10**9
    monkeypatch.setattr(budget, "free_disk", lambda path: free)
    if rounds == 3:
        argv, field = [str(_gaussian(tmp_path))], "world.class_sizes + world.query_size"
    else:
        argv, field = ["school_assignment"], "world.cohort_size"
    out = tmp_path / "run"
    assert main(["run", *argv, "--rounds", str(rounds), "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: --rounds x {field}: "), err
    assert f"{rounds:,} rounds" in err and "people.csv" in err
    assert not (out / "metrics.csv").exists()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_at_any_time_is_one_line_and_no_traceback(tmp_path, signum):
    """From the first import on (the console script installs its handler before
    torch, gymnasium and pandas load) to the run itself: one ``error:`` line, exit
    128 + signal, never a traceback. Several delays, so that a busy machine still
    lands some during the imports and some in the run."""
    exe = Path(sys.executable).parent / "recourse-sim"
    path = _gaussian(tmp_path)
    seen = set()
    for delay in (0.15, 0.4, 0.8, 1.5, 3.0):
        out = tmp_path / f"run{delay}"
        proc = subprocess.Popen(
            [str(exe), "run", str(path), "--rounds", "200", "--out", str(out), "-q"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        time.sleep(delay)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
        assert "Traceback" not in err and "Exception ignored" not in err, err
        assert proc.returncode == 128 + signum, (delay, proc.returncode, err)
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (delay, err)
        seen.add("starting" if "while starting" in lines[0] else "running")
    assert "starting" in seen  # (at least the first delay lands during the imports)


def test_gymnasium_envs_reject_what_gymnasium_rejects():
    """Non-integer seeds (a bool is not a seed), unknown reset options, a state with
    zero feature scales, and a step after close()."""
    import gymnasium as gym
    from gymnasium.error import ClosedEnvironmentError

    from recourse_sim.errors import CheckpointError, ConfigError

    env = gym.make("recourse_sim/SchoolAssignment-v1", disable_env_checker=True).unwrapped
    for kwargs in ({"seed": True}, {"seed": np.True_}, {"seed": 1.5}, {"seed": -1}):
        with pytest.raises(ConfigError, match="seed must be None or a non-negative int"):
            env.reset(**kwargs)
    with pytest.raises(ConfigError, match=r"unknown option.*'bogus'"):
        env.reset(seed=0, options={"bogus": 1})
    env.reset(seed=0, options={})
    state = env.get_state()
    for bad in (0.0, -1.0, np.nan, np.inf):
        broken = {**state, "feature_scale": np.full_like(state["feature_scale"], bad)}
        with pytest.raises(CheckpointError, match="feature_scale must be finite and > 0"):
            env.set_state(broken)
    with pytest.raises(CheckpointError, match="feature_mean must be finite"):
        env.set_state({**state, "feature_mean": np.full_like(state["feature_mean"], np.nan)})
    env.set_state(state)
    env.step(env.action_space.sample())
    env.close()
    with pytest.raises(ClosedEnvironmentError, match="after close"):
        env.step(env.action_space.sample())
    env.reset(seed=1)  # a new episode after close
    env.step(env.action_space.sample())

    venv = gym.make_vec(
        "recourse_sim/SchoolAssignment-v1", num_envs=2, vectorization_mode="vector_entry_point"
    )
    for seed in (True, [True, False], [0, np.True_], [0, 1.5]):
        with pytest.raises(ConfigError, match=r"seed.* must be None or a non-negative int"):
            venv.reset(seed=seed)
    with pytest.raises(ConfigError, match="3 seeds for 2"):
        venv.reset(seed=[0, 1, 2])
    with pytest.raises(ConfigError, match=r"unknown option.*'bogus'.*known: reset_mask"):
        venv.reset(seed=0, options={"bogus": 1})
    venv.reset(seed=[0, None])
    venv.step(venv.action_space.sample())
    venv.close()
    with pytest.raises(ClosedEnvironmentError, match="after close"):
        venv.step(venv.action_space.sample())


def test_a_diverging_sgd_update_is_warned_about_with_its_numbers():
    """lr 1e9 took |θ| from 2 to 1e36 in one update without a word; now one warning
    (once per fit), and none at the default rate."""
    from recourse_sim.learners import LogisticRegression
    from recourse_sim.learners.base import DivergenceWarning

    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 2))
    y = (X[:, 0] + 0.5 * rng.standard_normal(200) > 0).astype(np.int64)
    calm = LogisticRegression(update_rule="sgd").fit(X, y)
    for _ in range(5):
        calm.update(X, y)  # (warnings are errors in this suite)
    wild = LogisticRegression(update_rule="sgd", lr=1e9).fit(X, y)
    before = float(np.linalg.norm(wild.param_vector()))
    with pytest.warns(DivergenceWarning, match=r"diverges: one update took \|theta\| from") as w:
        for _ in range(5):
            wild.update(X, y)
    assert len(w) == 1
    message = str(w[0].message)
    assert f"{before:.3g}" in message and "lr 1e+09" in message
    after = np.abs(wild.param_vector()).max()
    assert not np.isfinite(after) or after > 100 * before
