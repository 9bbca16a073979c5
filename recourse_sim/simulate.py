"""Run a scenario for R rounds: a tidy metrics table, durable outputs, checkpoints, resume.

`simulate` steps a `recourse_sim.env.RecourseEnv` round by round and collects
``info["metrics"]`` (one row per group, ``"all"`` included) into a tidy table. With an
output directory it writes, as the run goes:

``scenario.yaml``
    The resolved scenario (overrides applied, ``rounds`` set to the rounds of this run),
    written at the start: ``recourse-sim run DIR/scenario.yaml`` repeats the run.
``metrics.csv``
    One row per round × group, appended, flushed and fsynced as each round completes.
    Columns ``round, group, acceptance_rate, recourse_success_rate, mean_cost,
    model_accuracy`` first (a cell is empty where the environment gives no value, e.g. a
    metric that exists only for ``group == "all"``), then the scenario's other metrics in
    the order the environment first reports them.
    Floats are written with ``%.10g``, missing values as empty cells, so a seed fixes
    the file byte for byte.
``people.csv``
    One row per applicant per round (columns documented in `recourse_sim.env.metrics`:
    ``round, person, group, arrived, favourable_before, favourable, tried, cost,
    true_favourable, score, leaves``, and with ``people_features`` each feature's true
    value and report: ``feature_<f>``, ``reported_<f>``), written exactly like ``metrics.csv``.
``checkpoint/``
    The environment state after the last completed round (see `recourse_sim.checkpoint`),
    with the length and SHA-256 of ``metrics.csv`` and ``people.csv`` at that moment.
``summary.json``
    Written (atomically) when the run ends: scenario, seed, rounds, the final round's
    metrics per group, wall time, and for a scenario with a ``hidden`` block the
    episode's draw of those settings (``hidden``: from the ``train`` ranges). Its presence
    means the run finished.

``resume=True`` continues from the checkpoint: ``metrics.csv`` and ``people.csv`` are cut
back to exactly the rows of the completed rounds (a kill can leave half a line, or a
round whose checkpoint was never written), the environment state is restored, and the run
goes on. Because the returned DataFrames are always parsed from the same CSV text, an
interrupted-and-resumed run returns the same DataFrames and leaves the same files as an
uninterrupted one.

This module is the loop; the rest of a run has rooms of its own in `recourse_sim.runs`:
`~recourse_sim.runs.tables` (the two tables' columns and cells, reading them back),
`~recourse_sim.runs.directory` (lock, append, checkpoint, resume, summary) and
`~recourse_sim.runs.diagnostics` (the world summary and warnings).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from recourse_sim.checkpoint import atomic_write_text
from recourse_sim.errors import ConfigError
from recourse_sim.runs.diagnostics import feature_types, unit_costs, warn_if_piled, world_summary
from recourse_sim.runs.directory import (
    CHECKPOINT_DIR,
    SCENARIO_FILE,
    SUMMARY_FILE,
    AppendFile,
    claim,
    committed_prefixes,
    file_sha256,
    inspect_run_dir,
    recorded_columns,
    release,
    run_summary,
    save_round,
    sha256,
)
from recourse_sim.runs.tables import (
    FLOAT_FORMAT,
    LEADING_COLUMNS,
    METRICS_FILE,
    PEOPLE_FILE,
    RUN_FILES,
    SEEKER_COLUMNS,
    MetricsTable,
    PeopleTable,
    read_metrics,
    read_people,
)

if TYPE_CHECKING:  # imported lazily at run time: pandas and the env are heavy
    import pandas as pd

    from recourse_sim.scenarios import Scenario

__all__ = [
    "CHECKPOINT_DIR",
    "FLOAT_FORMAT",
    "LEADING_COLUMNS",
    "METRICS_FILE",
    "PEOPLE_FILE",
    "SCENARIO_FILE",
    "SEEKER_COLUMNS",
    "SUMMARY_FILE",
    "feature_types",
    "preflight",
    "read_metrics",
    "read_people",
    "simulate",
    "unit_costs",
    "world_summary",
]

PROGRESS_LINE_SECONDS = 5.0  # between progress lines when stderr is not a terminal


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ConfigError(f"{name} must be {what}, got {value!r}")
    return int(value)


def _resolve_scenario(scenario: Scenario | str | os.PathLike[str]) -> Scenario:
    if isinstance(scenario, (str, os.PathLike)):
        from recourse_sim.scenarios import load_scenario

        return load_scenario(scenario)
    return scenario


def _with_rounds(scenario: Scenario, rounds: int) -> Scenario:
    """`scenario` with its horizon set to `rounds` (the scenario itself if it already is)."""
    if scenario.rounds == rounds:
        return scenario
    # model_copy keeps private attributes (the source file that relative paths resolve
    # against); the value needs no revalidation, `rounds` was checked to be positive.
    return scenario.model_copy(update={"rounds": rounds})


def preflight(scenario: Scenario) -> list[str]:
    """Every check a run makes before its first round, without running one: the
    environment is built and reset (classes, goals, learner parameters through the
    learner's own validation, the world's data), then dropped. `recourse-sim validate`
    and a sweep's up-front check use it, so a scenario they accept does not fail at
    round 0. Returns `world_summary`'s lines. The first model is fitted on numpy where
    the learner can (`RecourseEnv.reset_for_checks`), so checking a scenario whose start
    needs no torch does not import it."""
    env = _make_env(scenario)
    try:
        env.reset_for_checks(seed=0)
        return world_summary(env)
    finally:
        env.close()


def _make_env(scenario: Scenario) -> Any:
    """The environment of one run (a seam for tests that substitute a test double); a
    scenario of several collectives runs each on its zero action (`CollectivesEnv`)."""
    if len(scenario.controlled_populations) > 1:
        from recourse_sim.env.multi import CollectivesEnv

        return CollectivesEnv(scenario)
    from recourse_sim.env import RecourseEnv

    return RecourseEnv(scenario)


# --------------------------------------------------------------------------- simulate


def simulate(
    scenario: Scenario | str | os.PathLike[str],
    rounds: int | None = None,
    seed: int = 0,
    out: str | os.PathLike[str] | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool | str = False,
    people: bool = False,
    people_features: bool = False,
    people_collective: bool = False,
) -> pd.DataFrame | tuple[pd.DataFrame, pd.DataFrame]:
    """Run `scenario` for `rounds` rounds and return the tidy metrics table.

    Args:
        scenario: a loaded `Scenario`, a bundled scenario name, or a path to a YAML file.
        rounds: number of rounds (one env step each); default ``scenario.rounds``.
        seed: seeds the environment's single generator; a seed fixes the result.
        out: output directory (created if needed) for ``metrics.csv``, ``people.csv``,
            ``scenario.yaml``, ``summary.json`` and ``checkpoint/``. Without `resume`,
            files of an unfinished earlier run there are replaced; a finished one only
            with `overwrite`. Nothing there changes before the scenario has built, and
            the run holds a lock on `out` (``.lock``, removed when it ends) while it runs;
            a symbolic link in place of `out` or of any file the run writes there is
            refused. None: nothing is
            written.
        resume: continue the run in `out` from its checkpoint (from the start if it has
            none yet). The scenario and seed must be those of the run in `out`; `rounds`
            may be larger than the rounds already done, to extend a finished run.
        overwrite: replace a finished run in `out`.
        progress: show progress on stderr: True or ``"bar"``, a tqdm bar (a terminal);
            ``"lines"``, plain lines (logs, pipes, batch jobs): after the first round, every
            few seconds, and after the last.
        people: also return the people table (the rows of ``people.csv``).
        people_features: people.csv also holds each feature's true value and report
            (``feature_<f>``, ``reported_<f>``); part of the run's identity.
        people_collective: people.csv also holds what the round's collectives changed in
            each person's training report (``collective``, ``collective_cost``,
            ``collective_<f>``); part of the run's identity.

    Returns:
        One row per round × group (``"all"`` included), columns as in `LEADING_COLUMNS`
        then the scenario's other metrics. Values are those written to ``metrics.csv``
        (floats to 10 significant digits), so resumed and uninterrupted runs compare equal.
        With `people`, a pair: that table and the people table (one row per applicant
        per round, as in ``people.csv``).

    Raises:
        ConfigError: bad `rounds`/`seed`, `resume` without `out`, an unusable `out`, or a
            resume of a different scenario or seed than the run in `out`.
        CheckpointError: the checkpoint in `out` (or the rows it vouches for) is corrupt.
    """
    from tqdm import tqdm

    from recourse_sim.env.cycles import warn_if_cycling

    started = time.perf_counter()
    scenario = _resolve_scenario(scenario)
    rounds = _check_int("rounds", scenario.rounds if rounds is None else rounds, minimum=1)
    seed = _check_int("seed", seed, minimum=0)
    if resume and out is None:
        raise ConfigError("resume=True needs out= (the directory of the run to resume)")

    # The horizon is the run's: the env truncates after `scenario.rounds` and shows the
    # round fraction, and scenario.yaml must reproduce this run when run again.
    scenario = _with_rounds(scenario, rounds)
    scenario_yaml = scenario.to_yaml()
    # A run's identity leaves the horizon out, so a finished run can be extended.
    identity = {
        "scenario": scenario.name,
        "seed": seed,
        "scenario_sha256": sha256(_with_rounds(scenario, 1).to_yaml().encode("utf-8")),
        "people_features": bool(people_features),
    }
    people_extra = {}  # (only when asked: runs without it keep their identity and call)
    if people_collective:
        identity["people_collective"] = people_extra["collective"] = True
    world = getattr(scenario, "world", None)
    if getattr(world, "kind", None) == "csv":  # the data is part of the run
        identity["data_sha256"] = file_sha256(Path(world.path))
    out_dir = None if out is None else Path(out)
    # Nothing in an existing run directory changes until everything is checked: first
    # the directory (read only, before building the env, which may fit an oracle: a
    # wrong --resume fails at once), then the env; then the lock, and the same check
    # again under it (another process may have finished a run there meanwhile).
    checkpoint = None if out_dir is None else inspect_run_dir(out_dir, resume, identity, overwrite)
    if checkpoint is not None and checkpoint.round > rounds:
        raise ConfigError(
            f"{out_dir} already holds {checkpoint.round} rounds; cannot resume it to {rounds}"
        )
    env = _make_env(scenario)
    env.reset(seed=seed)
    table = MetricsTable()
    crowd = PeopleTable(keep=people)
    done = 0
    files: dict[str, AppendFile] = {}
    lock = None
    try:
        prefixes = dict.fromkeys(RUN_FILES, b"")
        if out_dir is not None:
            lock = claim(out_dir)
            checkpoint = inspect_run_dir(out_dir, resume, identity, overwrite)
            prefixes = committed_prefixes(out_dir, checkpoint)
        if checkpoint is not None:
            env.set_state(checkpoint.state)
            done = checkpoint.round
            columns, people_columns = recorded_columns(checkpoint, prefixes)
            table = MetricsTable(columns, resumed_from=checkpoint.path)
            table.text = prefixes["metrics"].decode("utf-8").splitlines(keepends=True)
            crowd = PeopleTable(people_columns, keep=people, resumed_from=checkpoint.path)
            if people and prefixes["people"]:
                crowd.text = [prefixes["people"].decode("utf-8")]
        if out_dir is not None:
            if done < rounds:  # a summary.json means "finished"; this run is not, yet
                (out_dir / SUMMARY_FILE).unlink(missing_ok=True)
            atomic_write_text(out_dir / SCENARIO_FILE, scenario_yaml)
            for key, name in RUN_FILES.items():
                files[key] = AppendFile(out_dir / name, prefixes[key])
            if checkpoint is None:  # so that a run killed in round 1 knows what it was
                save_round(out_dir, env, 0, identity, table, crowd, files)

        action = (
            np.zeros(env.action_space.shape, dtype=env.action_space.dtype)
            if env.single_controlled
            else None  # (each collective's zero action)
        )
        lines = _ProgressLines(scenario.name, rounds)
        with tqdm(
            total=rounds,
            initial=done,
            desc=scenario.name,
            unit="round",
            disable=progress not in (True, "bar"),
            file=sys.stderr,
            dynamic_ncols=True,
        ) as bar:
            while done < rounds:
                _, _, terminated, _, info = env.step(action)
                texts = {
                    "metrics": table.add_round(info["metrics"]),
                    "people": crowd.add_round(env.people(features=people_features, **people_extra)),
                }
                done += 1
                if out_dir is not None:
                    for key, text in texts.items():
                        files[key].append(text)
                    save_round(out_dir, env, done, identity, table, crowd, files)
                bar.update(1)
                if progress == "lines":
                    lines.tick(done)
                if terminated:  # the world ended (e.g. nobody left); later steps are invalid
                    rounds = done
                    break
        frame = table.frame()
        warn_if_piled(frame, scenario)
        warn_if_cycling(frame, scenario.name)
        if out_dir is not None:
            summary = run_summary(
                frame,
                scenario,
                seed,
                rounds,
                time.perf_counter() - started,
                resumed=resume,
                hidden=getattr(env, "hidden_values", None),
            )
            atomic_write_text(out_dir / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    finally:
        for file in files.values():
            file.close()
        env.close()
        if lock is not None:
            release(out_dir, lock)
    return (frame, crowd.frame()) if people else frame


class _ProgressLines:
    """Progress for a log: a line on stderr after the first round, then one every
    `PROGRESS_LINE_SECONDS`, and one after the last round (so even a short run says how
    far it got and how long it took)."""

    def __init__(self, name: str, rounds: int):
        self.name, self.rounds, self.every = name, rounds, PROGRESS_LINE_SECONDS
        self.started = self.last = time.monotonic()
        self.printed = False

    def tick(self, done: int) -> None:
        now = time.monotonic()
        if not self.printed or now - self.last >= self.every or done == self.rounds:
            self.last, self.printed = now, True
            print(
                f"{self.name}: round {done}/{self.rounds} ({now - self.started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
