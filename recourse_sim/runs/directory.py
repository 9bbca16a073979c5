"""The run directory: its lock, the run files appended round by round, the checkpoint
that vouches for their committed rows, resume (cut back to those rows) and the summary
written when the run ends."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from recourse_sim.checkpoint import (
    CHECKPOINT_FILE,
    Checkpoint,
    load_checkpoint,
    make_dir,
    open_file,
    refuse_link,
    remove_checkpoint_files,
    save_checkpoint,
)
from recourse_sim.errors import CheckpointError, ConfigError
from recourse_sim.runs.tables import (
    METRICS_FILE,
    PEOPLE_FILE,
    RUN_FILES,
    SEEKER_COLUMNS,
    MetricsTable,
    PeopleTable,
    columns_differ,
)

try:
    import fcntl
except ImportError:  # (not on Windows: runs there are not locked)
    fcntl = None

if TYPE_CHECKING:
    import pandas as pd

    from recourse_sim.scenarios import Scenario

SUMMARY_FILE = "summary.json"
SCENARIO_FILE = "scenario.yaml"
CHECKPOINT_DIR = "checkpoint"
LOCK_FILE = ".lock"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise ConfigError(f"cannot read data file {path}: {e.strerror or e}") from None
    return digest.hexdigest()


def _json_value(value: Any) -> Any:
    """A strict-JSON value: numpy scalars unwrapped, NaN as null."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else str(value)
    return value


def run_summary(
    frame: pd.DataFrame,
    scenario: Scenario,
    seed: int,
    rounds: int,
    wall: float,
    resumed: bool,
    hidden: dict[str, float] | None = None,
) -> dict[str, Any]:
    """``summary.json``'s content; `hidden`: the episode's draw of the scenario's
    ``hidden`` settings (from their ``train`` ranges), recorded when it has any."""
    from recourse_sim import __version__

    last = frame[frame["round"] == frame["round"].iloc[-1]]
    final = {}
    for row in last.to_dict("records"):
        # Leave out metrics this group never has (e.g. segregation exists for "all" only);
        # the seekers' rates, undefined in a round with no seekers, stay (as null).
        reported = frame.loc[frame["group"] == row["group"]].notna().any()
        final[str(row["group"])] = {
            k: _json_value(v)
            for k, v in row.items()
            if k not in ("round", "group") and (reported[k] or k in SEEKER_COLUMNS)
        }
    summary = {
        "scenario": scenario.name,
        "seed": seed,
        "rounds": rounds,
        "final_round": _json_value(last["round"].iloc[0]),
        "final": final,
        "files": {"metrics": METRICS_FILE, "people": PEOPLE_FILE, "scenario": SCENARIO_FILE},
        "resumed": resumed,
        "wall_time_seconds": round(wall, 3),
        "recourse_sim_version": __version__,
    }
    if hidden:  # (not observed by anyone in the run: the draw is only known from here)
        summary["hidden"] = {"split": "train", "values": dict(hidden)}
    return summary


# every name a run writes, appends to or deletes in its directory
_RUN_DIR_NAMES = (
    LOCK_FILE,
    CHECKPOINT_DIR,
    f"{CHECKPOINT_DIR}/{CHECKPOINT_FILE}",
    SUMMARY_FILE,
    SCENARIO_FILE,
    *RUN_FILES.values(),
)


class AppendFile:
    """A run file (metrics.csv, people.csv) opened for appending; every append is flushed
    and fsynced."""

    def __init__(self, path: Path, prefix: bytes) -> None:
        self.path = path
        self._hash = hashlib.sha256(prefix)
        self.size = len(prefix)
        fd = open_file(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0))
        self._file: BinaryIO = os.fdopen(fd, "r+b")
        # Cut back to the committed rows: drop a half-written line or an unsaved round.
        self._file.truncate(self.size)
        self._file.seek(self.size)
        self._sync()

    def append(self, text: str) -> None:
        data = text.encode("utf-8")
        self._file.write(data)  # one write per round keeps a torn round at the tail
        self._sync()
        self._hash.update(data)
        self.size += len(data)

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def _sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def _committed(out: Path, key: str, meta: Mapping[str, Any], checkpoint: Path) -> bytes:
    """The bytes of run file `key` the checkpoint vouches for; CheckpointError if they are
    gone."""
    path = out / RUN_FILES[key]
    if f"{key}_bytes" not in meta:
        raise CheckpointError(
            f"checkpoint {checkpoint} records no {RUN_FILES[key]} (written by an older "
            "recourse-sim); rerun without --resume"
        )
    size = int(meta[f"{key}_bytes"])
    try:
        with os.fdopen(open_file(path, os.O_RDONLY | getattr(os, "O_BINARY", 0)), "rb") as f:
            prefix = f.read(size)
    except FileNotFoundError:
        prefix = b""
    if len(prefix) < size or sha256(prefix) != meta[f"{key}sha256"]:
        raise CheckpointError(
            f"{path} does not hold the rows that checkpoint {checkpoint} recorded "
            "(file shortened or edited); rerun without --resume"
        )
    return prefix


_KINDS = (None, "bool", "int", "float", "str")


def recorded_columns(
    checkpoint: Checkpoint, prefixes: Mapping[str, bytes]
) -> tuple[list[tuple[str, str | None]] | None, list[str] | None]:
    """The metrics and people columns `checkpoint` records: each a list of names (with a
    kind, for metrics) that must be the header of the run file the checkpoint vouches
    for (None before the first round); CheckpointError if not."""
    meta = checkpoint.meta
    columns, people_columns = meta.get("columns"), meta.get("people_columns")
    if columns is not None and not (
        isinstance(columns, list)
        and all(
            isinstance(c, list) and len(c) == 2 and isinstance(c[0], str) and c[1] in _KINDS
            for c in columns
        )
    ):
        raise CheckpointError(f"checkpoint {checkpoint.path} records malformed metrics columns")
    if people_columns is not None and not (
        isinstance(people_columns, list) and all(isinstance(c, str) for c in people_columns)
    ):
        raise CheckpointError(f"checkpoint {checkpoint.path} records malformed people columns")
    names = None if columns is None else [name for name, _ in columns]
    for key, recorded in (("metrics", names), ("people", people_columns)):
        first = prefixes[key].split(b"\n", 1)[0].decode("utf-8", "replace")
        header = next(csv.reader([first]), []) if prefixes[key] else None
        if header != recorded:
            raise columns_differ(checkpoint.path, key, None)
    return columns, people_columns


def inspect_run_dir(
    out: Path, resume: bool, identity: Mapping[str, Any], overwrite: bool
) -> Checkpoint | None:
    """Check `out` without changing anything in it: the verified checkpoint to resume (or
    None to start afresh). Refused: a resume of another run, and replacing a finished
    run (one with a ``summary.json``) without `overwrite`."""
    # a link planted in the run directory would make the run change a file elsewhere
    for path in (out, *(out / name for name in _RUN_DIR_NAMES)):
        refuse_link(path)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output directory {out} is a file")
    checkpoint = load_checkpoint(out / CHECKPOINT_DIR) if resume else None
    if checkpoint is not None:
        run = checkpoint.meta.get("run", {})
        if run != identity:
            raise ConfigError(_mismatch(out, run, identity))
        return checkpoint
    if not resume and not overwrite and (out / SUMMARY_FILE).is_file():
        raise ConfigError(
            f"{out} holds a finished run ({_held_run(out)}); pass --overwrite to replace it, "
            "--resume to extend it, or choose another --out"
        )
    return None


def _held_run(out: Path) -> str:
    """'scenario NAME, seed S' of the finished run in `out` (as its summary says)."""
    try:
        summary = json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8")[:100_000])
        return f"scenario {str(summary.get('scenario'))[:80]!r}, seed {summary.get('seed')!r}"
    except (OSError, ValueError, AttributeError):
        return "its summary.json is unreadable"


def claim(out: Path) -> int:
    """Create `out` and take its lock for this process's run (a file descriptor to give
    to `release` when the run ends). ConfigError naming the holder if another process
    runs there; a lock left by a process that died is released by the system, so it is
    taken over."""
    make_dir(out)
    while True:
        try:
            fd = open_file(out / LOCK_FILE, os.O_RDWR | os.O_CREAT)
        except OSError as e:
            raise ConfigError(f"cannot create {out / LOCK_FILE}: {e.strerror}") from e
        if fcntl is None:  # (no advisory locks on this platform)
            return fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(f"{out} is in use by process {holder}") from None
        if is_lock_file(out, fd):
            break
        # the run that held it removed the file as it ended: lock the one there now
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return fd


def is_lock_file(out: Path, fd: int) -> bool:
    """Whether `fd` is the file at ``out/.lock`` (not one removed since it was opened)."""
    try:
        held, there = os.fstat(fd), os.lstat(out / LOCK_FILE)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)


def release(out: Path, fd: int) -> None:
    """Remove the lock file of `out` and release the lock. Removed while still locked, so
    a process that opened the old file meanwhile sees it is no longer the lock file."""
    if is_lock_file(out, fd):
        with contextlib.suppress(OSError):
            os.unlink(out / LOCK_FILE)  # (unlink removes a link itself, never its target)
    os.close(fd)


def committed_prefixes(out: Path, checkpoint: Checkpoint | None) -> dict[str, bytes]:
    """The bytes of each run file the checkpoint owns; with none, an earlier run in
    `out` is cleared for a fresh start (empty prefixes)."""
    if checkpoint is None:
        _start_fresh(out)
        return dict.fromkeys(RUN_FILES, b"")
    return {k: _committed(out, k, checkpoint.meta, checkpoint.path) for k in RUN_FILES}


def _start_fresh(out: Path) -> None:
    """Remove what a previous run left in `out` (checkpoint first, so it cannot pair with
    the new run files if we are killed half-way)."""
    checkpoint = out / CHECKPOINT_DIR
    refuse_link(checkpoint)
    if checkpoint.is_dir():
        remove_checkpoint_files(checkpoint, record=True)
    (out / SUMMARY_FILE).unlink(missing_ok=True)
    for name in RUN_FILES.values():
        (out / name).unlink(missing_ok=True)


def save_round(
    out: Path,
    env: Any,
    done: int,
    identity: dict[str, Any],
    table: MetricsTable,
    crowd: PeopleTable,
    files: Mapping[str, AppendFile],
) -> None:
    """Checkpoint after `done` rounds, recording how much of each run file they own."""
    meta: dict[str, Any] = {
        "run": identity,
        "columns": table.columns,
        "people_columns": crowd.columns,
    }
    for key, file in files.items():
        meta[f"{key}_bytes"] = file.size
        meta[f"{key}sha256"] = file.sha256
    save_checkpoint(out / CHECKPOINT_DIR, round=done, state=env.get_state(), meta=meta)


def _mismatch(out: Path, run: Mapping[str, Any], wanted: Mapping[str, Any]) -> str:
    """One line saying how the run in `out` differs from the one asked to resume."""
    held = f"scenario {run.get('scenario')!r} seed {run.get('seed')!r}"
    asked = f"scenario {wanted['scenario']!r} seed {wanted['seed']!r}"
    if held == asked and run.get("data_sha256") != wanted.get("data_sha256"):
        asked += " on a changed data file (its contents differ from the run's)"
    elif held == asked:
        asked += " with different settings (edited scenario file or other --set overrides)"
    return f"{out} holds a run of {held}; cannot resume it as {asked}"
