"""The bad-input corpus (tests/bad_inputs/): every case exits 2 with its one-line error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from recourse_sim.cli import main
from recourse_sim.errors import RecourseSimError
from recourse_sim.scenarios import load_scenario

CORPUS = Path(__file__).parent / "bad_inputs"
CASES = sorted(CORPUS.glob("*.yaml"))


def _header(path: Path, field: str) -> str | None:
    match = re.search(rf"^# {field}: (.*)$", path.read_text(encoding="utf-8"), re.MULTILINE)
    return None if match is None else match.group(1).strip()


def _argv(path: Path, out: Path) -> list[str]:
    command = _header(path, "command") or "validate"
    extra = ["--rounds", "1", "--out", str(out), "-q"] if command == "run" else []
    return [command, str(path), *extra]


def test_the_corpus_is_complete():
    assert len(CASES) >= 40
    for path in CASES:
        assert _header(path, "expect"), f"{path.name} has no '# expect:' line"
    assert all(_header(p, "command") in (None, "run", "validate") for p in CASES)
    assert all(_header(p, "stage") in (None, "build") for p in CASES)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case(path, tmp_path, capsys):
    expect = _header(path, "expect")
    status = main(_argv(path, tmp_path / "run"))
    err = capsys.readouterr().err
    if expect == "ok":
        assert status == 0, err
        assert err == ""
        return
    assert status == 2, f"{path.name}: exit {status}, stderr {err!r}"
    lines = err.splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("error: ") and "Traceback" not in err, err
    assert expect in line, f"{path.name}: expected {expect!r} in {line!r}"
    csv_file = (CORPUS / "csv" / f"{path.stem}.csv").name
    assert path.name in line or csv_file in line or "no_such_file.csv" in line, line
    assert not (tmp_path / "run" / "metrics.csv").exists()


@pytest.mark.parametrize(
    "path",
    [p for p in CASES if _header(p, "expect") != "ok" and _header(p, "stage") != "build"],
    ids=lambda p: p.stem,
)
def test_load_scenario_raises_a_typed_error(path):
    with pytest.raises(RecourseSimError) as info:
        load_scenario(path)
    assert _header(path, "expect") in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_validate_reports_every_bad_file(capsys):
    bad = [p for p in CASES if _header(p, "expect") != "ok" and not _header(p, "command")]
    status = main(["validate", *map(str, bad)])
    err = capsys.readouterr().err.splitlines()
    assert status == 2
    assert len(err) == len(bad) and all(line.startswith("error: ") for line in err)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"scenario": "nope"}, "unknown scenario 'nope'"),
        ({"scenario": "school_assignment", "bogus": 3}, "bogus: unknown key; did you mean"),
        ({"scenario": "school_assignment", "world__cohort_size": -5}, "world.cohort_size"),
        (
            {"scenario": "school_assignment", "populations__students__participation": 1.5},
            "populations.students.participation",
        ),
    ],
)
def test_gymnasium_make_kwargs_get_typed_one_line_errors(kwargs, expected):
    import gymnasium as gym

    import recourse_sim.env  # noqa: F401  (registers the IDs)

    with pytest.raises(RecourseSimError, match=re.escape(expected)) as info:
        gym.make("recourse_sim/Recourse-v0", **kwargs)
    assert "\n" not in str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["yaml_alias_bomb", "yaml_deep_nesting", "huge_history", "huge_cohort"]
)
def test_hostile_files_exit_fast_under_a_memory_limit(name, tmp_path):
    """Acceptance: an alias bomb, 5,000-deep nesting and a 10^12-row history each exit 2
    within 10 s of CPU under a 4 GB address-space limit, with one error line."""
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))

    path = CORPUS / f"{name}.yaml"
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "recourse_sim.cli", "run", str(path), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,  # a guard against a hang only: the bound is the CPU time below
        preexec_fn=limit,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
    assert cpu < 10  # CPU seconds (wall time varies with the machine's load)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert _header(path, "expect") in lines[0]
