"""The `recourse-sim` command: contract outputs, determinism, kill-and-resume, user errors.

Most tests call `main(argv)` in-process (fast); the kill tests run the command in a
subprocess (``python -m recourse_sim.cli``) and SIGKILL it part-way through.
"""

from __future__ import annotations

import json
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from recourse_sim import __version__
from recourse_sim.cli import main
from recourse_sim.simulate import read_people

SCENARIO = "school_assignment"
# A smaller district and a cheaper collective solver keep each round well under a second.
SMALL = ["--set", "world.cohort_size=300", "--set", "world.history_size=600"]
SMALL += ["--set", "populations.h1_students.steps=2"]
ROUNDS = 6  # rounds of the reference run


def _run_argv(out: Path, rounds: int = ROUNDS, *extra: str) -> list[str]:
    return ["run", SCENARIO, "--rounds", str(rounds), "--out", str(out), *SMALL, *extra]


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _assert_same_metrics(run: Path, reference: Path) -> None:
    """metrics.csv and people.csv of `run` equal the reference's byte for byte (else show
    the first diff)."""
    for name in ("metrics.csv", "people.csv"):
        got, want = (run / name).read_bytes(), (reference / name).read_bytes()
        if got != want:
            pairs = zip(got.splitlines(), want.splitlines(), strict=False)
            first = next(((i, a, b) for i, (a, b) in enumerate(pairs) if a != b), None)
            pytest.fail(f"{name} differs ({len(got)} vs {len(want)} bytes); first diff {first}")


def _assert_one_error_line(err: str, *fragments: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted run of the (small) school scenario, seed 0."""
    out = tmp_path_factory.mktemp("reference") / "run"
    assert main([*_run_argv(out), "-q"]) == 0
    return out


def _lines_per_round(reference: Path) -> int:
    return (len((reference / "metrics.csv").read_text().splitlines()) - 1) // ROUNDS


# --------------------------------------------------------------------------- run


def test_run_writes_the_contract_files(reference):
    assert {p.name for p in reference.iterdir()} >= {
        "metrics.csv",
        "people.csv",
        "summary.json",
        "scenario.yaml",
        "checkpoint",
    }
    header = (reference / "metrics.csv").read_text().splitlines()[0].split(",")
    assert header[:6] == [
        "round",
        "group",
        "acceptance_rate",
        "recourse_success_rate",
        "mean_cost",
        "model_accuracy",
    ]
    summary = json.loads((reference / "summary.json").read_text())
    assert summary["scenario"] == SCENARIO and summary["seed"] == 0
    assert summary["rounds"] == ROUNDS and "all" in summary["final"]
    resolved = (reference / "scenario.yaml").read_text()
    assert f"rounds: {ROUNDS}\n" in resolved and "cohort_size: 300\n" in resolved
    # every file has the user's umask: the atomically replaced ones (summary.json,
    # scenario.yaml) the permissions of the appended ones (metrics.csv, people.csv)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in reference.iterdir() if p.is_file()}
    assert len(set(modes.values())) == 1, modes


def test_run_people_collective_adds_each_persons_collective_change(tmp_path, reference):
    out = tmp_path / "collective"
    assert main([*_run_argv(out, 2), "-q", "--people-collective"]) == 0
    header = (out / "people.csv").read_text().splitlines()[0].split(",")
    plain = (reference / "people.csv").read_text().splitlines()[0].split(",")
    features = ["gpa", "test_score", "study_hours", "extracurriculars"]
    assert header == [*plain, "collective", "collective_cost"] + [
        f"collective_{f}" for f in features
    ]
    members = read_people(out)["collective"].dropna()
    assert len(members) and set(members) == {"h1_students"}


def test_same_command_twice_gives_identical_metrics(tmp_path, reference, capsys):
    out = tmp_path / "again"
    status, stdout, stderr = _cli(capsys, *_run_argv(out))
    assert status == 0 and f"{out / 'people.csv'} ({ROUNDS} rounds, seed 0)" in stdout
    # stderr is not a terminal: progress lines (the first and last round), no bar
    lines = [line.rsplit(" (", 1)[0] for line in stderr.splitlines()]  # (less the seconds)
    assert lines == [f"school_assignment: round {r}/{ROUNDS}" for r in (1, ROUNDS)]
    _assert_same_metrics(out, reference)


@pytest.mark.slow
def test_people_features_flag(tmp_path, reference):
    out = tmp_path / "features"
    assert main([*_run_argv(out, 2), "--people-features", "-q"]) == 0
    header = (out / "people.csv").read_text().splitlines()[0].split(",")
    plain = (reference / "people.csv").read_text().splitlines()[0].split(",")
    assert header[: len(plain)] == plain
    assert header[len(plain) :] == [
        *(f"feature_{f}" for f in ("gpa", "test_score", "study_hours", "extracurriculars")),
        *(f"reported_{f}" for f in ("gpa", "test_score", "study_hours", "extracurriculars")),
    ]


def test_default_output_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    status, _, _ = _cli(capsys, "run", SCENARIO, "--rounds", "1", "--seed", "3", *SMALL, "-q")
    assert status == 0
    assert (tmp_path / "runs" / f"{SCENARIO}-seed3" / "metrics.csv").is_file()


def test_resume_after_truncation_by_hand(tmp_path, reference, capsys):
    """Checkpoint after round 2, metrics.csv holding round 3 and half a line of round 4."""
    per_round = _lines_per_round(reference)
    out = tmp_path / "run"
    assert main([*_run_argv(out, 2), "-q"]) == 0
    checkpoint_2 = (out / "checkpoint").rename(tmp_path / "checkpoint-2")
    assert main([*_run_argv(out, 4), "-q", "--overwrite"]) == 0
    shutil.rmtree(out / "checkpoint")
    checkpoint_2.rename(out / "checkpoint")
    lines = (out / "metrics.csv").read_bytes().splitlines(keepends=True)
    torn = b"".join(lines[: 1 + 3 * per_round]) + lines[1 + 3 * per_round][:7]
    (out / "metrics.csv").write_bytes(torn)
    status, _, err = _cli(capsys, *_run_argv(out), "--resume")
    assert status == 0, err
    _assert_same_metrics(out, reference)


def _kill_after(
    out: Path, rounds_done: int, per_round: int, *, resume: bool, sig=signal.SIGKILL
) -> tuple[int, str]:
    """Run the command in a subprocess; send `sig` once `rounds_done` rounds are on
    disk; return its exit status and stderr."""
    argv = [sys.executable, "-m", "recourse_sim.cli", *_run_argv(out), "-q"]
    proc = subprocess.Popen(
        argv + (["--resume"] if resume else []), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    metrics = out / "metrics.csv"
    # Round 0 means "as soon as the run has started writing" (its first checkpoint).
    started = out / "checkpoint" / "checkpoint.json"
    wanted = 1 + rounds_done * per_round
    deadline = time.monotonic() + 120
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if rounds_done == 0 and started.exists():
                break
            if metrics.exists() and metrics.read_bytes().count(b"\n") >= wanted:
                break
            time.sleep(0.002)
        assert proc.poll() is None, f"the run ended before round {rounds_done}: " + (
            proc.stderr.read().decode() if proc.stderr else ""
        )
        proc.send_signal(sig)
        status = proc.wait(timeout=60)
        return status, proc.stderr.read().decode() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stderr:
            proc.stderr.close()


def _kill_and_resume(tmp_path: Path, reference: Path, kill_points: list[int], capsys) -> None:
    """Kill the run at each of `kill_points` (rounds done), resuming in between; then finish."""
    out = tmp_path / "run"
    for i, k in enumerate(kill_points):
        _kill_after(out, k, _lines_per_round(reference), resume=i > 0)
    status, _, err = _cli(capsys, *_run_argv(out), "--resume")
    assert status == 0, err
    _assert_same_metrics(out, reference)
    assert json.loads((out / "summary.json").read_text())["rounds"] == ROUNDS


@pytest.mark.slow  # each subprocess pays the torch import
@pytest.mark.parametrize("kill_points", [[0], [2], [1, 3], [1, 2, 4, 5]], ids=str)
def test_killed_run_resumes_to_the_same_table(tmp_path, reference, kill_points, capsys):
    _kill_and_resume(tmp_path, reference, kill_points, capsys)


@pytest.mark.slow
def test_acceptance_command_full_size(tmp_path, capsys):
    """The acceptance command of issue 4 at full size: twice identical, and resumable."""
    argv = ["run", SCENARIO, "--rounds", "20", "--seed", "0", "-q"]
    first, second, resumed = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert main([*argv, "--out", str(first)]) == 0
    assert main([*argv, "--out", str(second)]) == 0
    _assert_same_metrics(second, first)
    assert main(["run", SCENARIO, "--rounds", "7", "--out", str(resumed), "-q"]) == 0
    assert main([*argv, "--out", str(resumed), "--resume"]) == 0
    _assert_same_metrics(resumed, first)


def test_corrupt_checkpoint_is_one_error_line(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*_run_argv(out, 1), "-q"]) == 0
    npz = next((out / "checkpoint").glob("*.npz"))
    data = bytearray(npz.read_bytes())
    data[len(data) // 2] ^= 0xFF
    npz.write_bytes(bytes(data))
    status, _, err = _cli(capsys, *_run_argv(out, 2), "--resume")
    assert status == 2
    _assert_one_error_line(err, str(npz), "corrupt")


def test_resume_with_another_seed_or_setting_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*_run_argv(out, 1), "-q"]) == 0
    status, _, err = _cli(capsys, *_run_argv(out, 2), "--seed", "1", "--resume")
    assert status == 2
    _assert_one_error_line(err, "seed 0", "seed 1")
    status, _, err = _cli(capsys, *_run_argv(out, 2), "--set", "world.frac_n2=0.6", "--resume")
    assert status == 2
    _assert_one_error_line(err, "different settings")


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        ([], ["required", "COMMAND"]),
        (["frobnicate"], ["invalid choice", "frobnicate"]),
        (["run", "no_such_scenario"], ["unknown scenario", "no_such_scenario"]),
        (["run", "missing/file.yaml"], ["does not exist", "missing/file.yaml"]),
        (["run", SCENARIO, "--set", "learner.tpye=mlp"], ["tpye"]),
        (["run", SCENARIO, "--set", "noequals"], ["noequals"]),
        (["run", SCENARIO, "--rounds", "0"], ["--rounds", "positive integer", "'0'"]),
        (["run", SCENARIO, "--rounds", "abc"], ["--rounds", "positive integer", "'abc'"]),
        (["run", SCENARIO, "--seed", "-3"], ["--seed", "'-3'"]),
        (["run", SCENARIO, "--bogus"], ["unrecognized arguments", "--bogus"]),
        (["plot", "no/such/run"], ["no/such/run"]),
        (["validate"], ["required", "SCENARIO"]),
    ],
)
def test_bad_input_is_one_error_line(tmp_path, monkeypatch, capsys, argv, fragments):
    monkeypatch.chdir(tmp_path)  # a default output directory must not leak into the repo
    status, _, err = _cli(capsys, *argv)
    assert status == 2
    _assert_one_error_line(err, *fragments)
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_bad_input_from_the_console_script_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "recourse_sim.cli", "run", SCENARIO, "--rounds", "abc"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2
    _assert_one_error_line(proc.stderr, "--rounds")


def test_version(capsys):
    status, out, _ = _cli(capsys, "--version")
    assert status == 0 and out.strip() == f"recourse-sim {__version__}"


# --------------------------------------------------------------------------- other commands


def test_list_shows_bundled_scenarios_with_descriptions(capsys):
    status, out, _ = _cli(capsys, "list")
    assert status == 0
    lines = {line.split()[0]: line for line in out.splitlines()}
    for name in ("school_assignment", "lending_fico"):
        assert name in lines
        assert len(lines[name].split()) > 1, f"{name} has no description"


@pytest.mark.slow
def test_list_and_help_do_not_import_torch():
    """`list` and `--help` answer fast: they read descriptions, not data or models."""
    code = (
        "import sys; from recourse_sim.cli import main; "
        "main(['list']); main(['--help']); "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_schema_is_a_json_schema_of_scenarios(capsys):
    import jsonschema

    status, out, _ = _cli(capsys, "schema")
    assert status == 0
    schema = json.loads(out)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert {"world", "populations"} <= set(schema["properties"])


def test_validate(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nrounds: -1\n")
    status, out, _ = _cli(capsys, "validate", "-q", SCENARIO, "lending_fico")
    assert status == 0
    assert out.splitlines() == [f"ok: {SCENARIO}", "ok: lending_fico"]
    status, out, err = _cli(capsys, "validate", "-q", SCENARIO, str(bad))
    assert status == 2
    assert out.splitlines() == [f"ok: {SCENARIO}"]
    _assert_one_error_line(err, "bad.yaml")


@pytest.mark.slow
def test_validate_summarises_the_world(capsys):
    status, out, _ = _cli(capsys, "validate", "csv_example")
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "ok: csv_example"
    # 7,214 rows in the file, 307 with an empty cell dropped; labels renumbered
    assert lines[1] == "  world: csv, 6,907 rows, 6 features"
    assert lines[2].startswith("  labels: class 0 = label '1' (46%), class 1 = label '0' (54%)")
    assert lines[2].endswith("favourable: class 1")
    assert lines[3] == "  groups: under_25 1,492, 25_to_44 3,938, 45_and_over 1,477"
    assert lines[4].startswith("  features (1 of 6 actionable; cost norm p = 2;")
    assert lines[5].split() == ["name", "type", "action", "range", "weight", "unit"]
    assert lines[6].split() == ["age", "integer", "immutable", "[18,", "96]"]
    assert (
        lines[7].split() == ["priors_count", "integer", "actionable", "[0,", "38]"] + ["0.2029"] * 2
    )
    assert len(lines) == 12  # every feature, no warning


@pytest.mark.slow
def test_plot_writes_a_png(tmp_path, reference, capsys):
    target = tmp_path / "dynamics.png"
    status, out, _ = _cli(capsys, "plot", str(reference), "--out", str(target))
    assert status == 0 and str(target) in out
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_default_file_and_bad_table(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text(
        "round,group,acceptance_rate,recourse_success_rate,mean_cost,model_accuracy\n"
        "1,A,0.5,,0,\n1,all,0.5,0.2,0.1,0.9\n2,A,0.6,0.3,0.2,\n2,all,0.55,0.25,0.15,0.8\n"
    )
    status, _, _ = _cli(capsys, "plot", str(run))
    assert status == 0 and (run / "dynamics.png").stat().st_size > 0
    (run / "metrics.csv").write_text("round,group\n1,A\n")
    status, _, err = _cli(capsys, "plot", str(run))
    assert status == 2
    _assert_one_error_line(err, "metrics.csv", "acceptance_rate")


def test_default_output_folder_is_a_safe_name(tmp_path, monkeypatch, capsys):
    """Acceptance: a scenario `name` with '..' writes nothing outside runs/."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evil.yaml").write_text(
        (Path(__file__).resolve().parents[1] / "scenarios" / f"{SCENARIO}.yaml")
        .read_text(encoding="utf-8")
        .replace(f"name: {SCENARIO} ", "name: ../../escaped ")
    )
    status, _, err = _cli(capsys, "run", "evil.yaml", "--rounds", "1", *SMALL, "-q")
    assert status == 0, err
    (made,) = (tmp_path / "runs").iterdir()
    assert made.name == "escaped-seed0" and (made / "metrics.csv").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.yaml", "runs"]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_sigterm_and_sighup_stop_with_one_line_and_resume_identically(
    tmp_path, reference, capsys, sig
):
    """Acceptance: SIGTERM mid-run prints one line (exit 128 + signal); --resume then
    gives byte-identical run files."""
    out = tmp_path / "run"
    status, err = _kill_after(out, 2, _lines_per_round(reference), resume=False, sig=sig)
    assert status == 128 + sig, err
    assert err.splitlines() == [f"error: stopped by {sig.name} (a run continues with --resume)"]
    status, _, err = _cli(capsys, *_run_argv(out), "--resume")
    assert status == 0, err
    _assert_same_metrics(out, reference)


def test_a_full_disk_is_one_line_naming_the_file_and_the_run_resumes(
    tmp_path, reference, capsys, monkeypatch
):
    """Acceptance: a write that fails for want of space exits 2 naming the file; once
    space is back, --resume completes byte-identically. (The file system fills up at
    round 3: the third append raises ENOSPC as a full disk's write would.)"""
    import errno
    import importlib

    sim = importlib.import_module("recourse_sim.simulate")
    real = sim.AppendFile.append
    calls = {"n": 0}

    def append(self, text):
        calls["n"] += 1
        if calls["n"] == 5:  # metrics.csv of round 3 (two files a round)
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        return real(self, text)

    monkeypatch.setattr(sim.AppendFile, "append", append)
    out = tmp_path / "run"
    status, _, err = _cli(capsys, *_run_argv(out), "-q")
    assert status == 2
    assert err.splitlines() == [
        f"error: cannot write {out / 'metrics.csv'}: No space left on device (the run can "
        "be resumed with --resume once fixed)"
    ]
    monkeypatch.setattr(sim.AppendFile, "append", real)  # space is free again
    status, _, err = _cli(capsys, *_run_argv(out), "--resume", "-q")
    assert status == 0, err
    _assert_same_metrics(out, reference)


def test_an_unexpected_error_is_one_line_and_exit_1_unless_debug(monkeypatch, capsys):
    import importlib

    sim = importlib.import_module("recourse_sim.simulate")

    def broken(*args, **kwargs):
        raise ValueError("something nobody foresaw " + "x" * 1000)

    monkeypatch.setattr(sim, "simulate", broken)
    status, _, err = _cli(capsys, "run", SCENARIO, "--rounds", "1", "-q")
    assert status == 1
    (line,) = err.splitlines()
    assert line.startswith("error: unexpected ValueError: something nobody foresaw")
    assert "--debug" in line and len(line) < 400
    with pytest.raises(ValueError, match="nobody foresaw"):
        main(["--debug", "run", SCENARIO, "--rounds", "1", "-q"])


@pytest.mark.parametrize(
    ("corrupt", "expected"),
    [
        (lambda s: s["learner"].update(coef=np.zeros((1, 9))), "learner.coef has shape (1, 9)"),
        (lambda s: s["learner"]["coef"].fill(np.nan), "learner.coef has NaN or infinite"),
        (lambda s: s.update(round=-1), "round '-1' is outside 0.."),
        (
            lambda s: s["pool"]["people"].update(X=np.zeros((5, 2))),
            "pool.people.X has shape (5, 2), expected (n, 4)",
        ),
    ],
    ids=["shape", "nan", "negative_round", "pool_width"],
)
def test_a_restored_state_is_checked_against_the_scenario(tmp_path, capsys, corrupt, expected):
    """Acceptance: a restored state with a wrong shape, NaN parameters or a negative
    round (its digests recomputed, so only the contents are wrong) is refused with exit
    2 and one line."""
    from recourse_sim.checkpoint import load_checkpoint, save_checkpoint

    out = tmp_path / "run"
    assert main([*_run_argv(out, 2), "-q"]) == 0
    checkpoint = load_checkpoint(out / "checkpoint")
    state = checkpoint.state
    corrupt(state)
    save_checkpoint(out / "checkpoint", round=checkpoint.round, state=state, meta=checkpoint.meta)
    status, _, err = _cli(capsys, *_run_argv(out, 3), "--resume")
    assert status == 2
    (line,) = err.splitlines()
    assert line.startswith("error: checkpoint state: ") and expected in line, line
