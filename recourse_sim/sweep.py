"""Sweeps: one scenario run over a grid of settings × seeds, in processes or on Ray.

A sweep is a set of *cells*, one per combination of grid values and seed. Each cell is
an ordinary `simulate` run with its own output directory ``DIR/<cell>/`` (the grid
values are applied as ``--set`` overrides), so a cell is inspected, plotted or resumed
like any run. Its ``summary.json`` (written atomically when the run ends) marks it
finished: running the same sweep again skips finished cells and resumes the others from
their checkpoints.

A cell that fails is retried once (from scratch if its checkpoint was the problem) and,
if it fails again, reported in ``DIR/failures.json``; the other cells go on. When the
cells are done, ``DIR/sweep.csv`` combines every finished cell's ``metrics.csv``: the
grid keys and ``seed`` first, then the metric columns, rows in grid order (keys as
given, seeds innermost) whatever order the cells finished in — so every backend gives
the same file.

Backends:

``local`` (default)
    A `concurrent.futures.ProcessPoolExecutor` with the ``spawn`` start method.
``ray``
    Ray tasks (the ``ray`` extra): ``ray.init()`` on this machine, or ``address`` to
    join a cluster (the scenario and its data files must be readable on every node).
``serial``
    Every cell in this process, one after the other (debugging, tests).

Every worker runs torch with one intra-op thread: cells are the unit of parallelism.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import re
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recourse_sim.checkpoint import atomic_write_text, make_dir, refuse_link
from recourse_sim.errors import ConfigError, DependencyNotInstalled, RecourseSimError

if TYPE_CHECKING:
    from recourse_sim.scenarios import Scenario

__all__ = [
    "BACKENDS",
    "FAILURES_FILE",
    "SWEEP_FILE",
    "Cell",
    "SweepResult",
    "parse_grid",
    "parse_seeds",
    "sweep",
]

BACKENDS = ("local", "ray", "serial")
SWEEP_FILE = "sweep.csv"
FAILURES_FILE = "failures.json"
ATTEMPTS = 2
"""Tries per cell: the first, and one retry."""

MAX_CELL_NAME = 120
"""Longest cell directory name before it is shortened (and given a hash)."""

_SAFE = re.compile(r"[^A-Za-z0-9._=+-]")


# --------------------------------------------------------------------------- parsing


def _split_values(text: str) -> list[str]:
    """Split ``v1,v2`` on commas outside brackets and quotes (so ``[1, 2],[3, 4]`` works)."""
    values, depth, quote, current = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            values.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    values.append("".join(current).strip())
    return values


def parse_grid(items: Iterable[str] | Mapping[str, Sequence[Any]]) -> dict[str, list[str]]:
    """``["key=v1,v2", ...]`` (or a mapping key -> values) as an ordered key -> values dict.

    Values stay text; each is parsed as YAML when applied as an override, like ``--set``.
    """
    grid: dict[str, list[str]] = {}
    pairs: Iterable[tuple[str, Any]]
    if isinstance(items, Mapping):
        pairs = [(str(k), v) for k, v in items.items()]
    else:
        pairs = []
        for item in items:
            key, sep, text = str(item).partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--grid {item!r} must look like key.path=value1,value2")
            pairs.append((key.strip(), _split_values(text)))
    for key, values in pairs:
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            values = [values]
        values = [v if isinstance(v, str) else json.dumps(v) for v in values]
        if key in grid:
            raise ConfigError(f"--grid {key}: key given twice")
        if key in ("seed", "round", "group"):
            raise ConfigError(f"--grid {key}: {key!r} is a column of the sweep table; use --seeds")
        if not values or any(v == "" for v in values):
            raise ConfigError(f"--grid {key}: empty value in {values!r}")
        if len(set(values)) != len(values):
            raise ConfigError(f"--grid {key}: repeated value in {values!r}")
        grid[key] = list(values)
    return grid


MAX_CELLS = 100_000
"""Most seeds (and cells) a sweep accepts; each cell is a run with its own folder."""


def parse_seeds(text: str | Iterable[int]) -> list[int]:
    """Seeds from ``"0-9"``, ``"3"``, ``"0,2,5-7"`` (or a list of ints), in order."""
    if not isinstance(text, str):
        seeds = list(text)
    else:
        seeds = []
        for part in text.split(","):
            part = part.strip()
            m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
            if m is None:
                raise ConfigError(f"--seeds {text!r}: {part!r} is not a seed or range like 0-9")
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if hi < lo:
                raise ConfigError(f"--seeds {text!r}: empty range {part!r}")
            if hi - lo + 1 + len(seeds) > MAX_CELLS:
                raise ConfigError(f"--seeds {text:.80}: more than {MAX_CELLS} seeds")
            seeds.extend(range(lo, hi + 1))
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ConfigError(f"seeds must be non-negative integers, got {s!r}")
    if not seeds:
        raise ConfigError("no seeds given")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {text!r}: a seed is repeated")
    return seeds


# --------------------------------------------------------------------------- cells


@dataclass(frozen=True)
class Cell:
    """One run of the sweep: grid values (key, value text) and a seed."""

    values: tuple[tuple[str, str], ...]
    seed: int

    @property
    def overrides(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.values]

    @property
    def name(self) -> str:
        """The cell's directory name: ``key=value__...__seed=S``, made file-name safe."""
        raw = "__".join([*(f"{k}={v}" for k, v in self.values), f"seed={self.seed}"])
        safe = _SAFE.sub("_", raw)
        if safe != raw or len(safe) > MAX_CELL_NAME:
            digest = hashlib.sha256(raw.encode("utf-8")).hexdigest()[:10]
            safe = f"{safe[: MAX_CELL_NAME - 11]}-{digest}"
        return safe

    def label(self) -> str:
        return " ".join([*(f"{k}={v}" for k, v in self.values), f"seed={self.seed}"])


@dataclass(frozen=True)
class _Task:
    """What a worker needs to run one cell (picklable)."""

    scenario: Scenario
    rounds: int
    seed: int
    out: str
    resume: bool  # continue a killed cell (the first attempt)
    # the sweep owns its cells' folders: a retry replaces whatever run is there
    overwrite: bool


@dataclass
class SweepResult:
    """What a sweep did: cells run, skipped and failed (with their last error)."""

    out: Path
    cells: list[Cell]
    ran: list[Cell] = field(default_factory=list)
    skipped: list[Cell] = field(default_factory=list)
    retried: list[Cell] = field(default_factory=list)
    failed: dict[Cell, str] = field(default_factory=dict)
    table: Path | None = None
    wall_time_seconds: float = 0.0


def _run_cell(task: _Task) -> float:
    """Run one cell (in a worker); return its wall time. Exceptions propagate."""
    import torch
    from tqdm import tqdm

    from recourse_sim.simulate import simulate

    torch.set_num_threads(1)
    # tqdm's default lock is a named multiprocessing semaphore, which a worker stopped by
    # SIGTERM would leak (and Python warn about); a worker draws no bar.
    tqdm.set_lock(threading.RLock())
    started = time.perf_counter()
    simulate(
        task.scenario,
        task.rounds,
        task.seed,
        task.out,
        resume=task.resume,
        overwrite=task.overwrite,
    )
    return time.perf_counter() - started


def _describe(error: BaseException) -> str:
    """One line naming an error (the traceback's last line for bugs)."""
    if isinstance(error, RecourseSimError):
        return f"{type(error).__name__}: {' '.join(str(error).split())}"
    cause = getattr(error, "cause", None)  # ray.exceptions.RayTaskError wraps the original
    if isinstance(cause, BaseException):
        return _describe(cause)
    last = traceback.format_exception_only(type(error), error)[-1]
    return " ".join(last.split())


def _is_finished(cell_dir: Path, scenario: Scenario, seed: int) -> bool:
    """The run in `cell_dir` ended (summary.json) and was this cell's scenario and seed."""
    from recourse_sim.simulate import SCENARIO_FILE, SUMMARY_FILE

    try:
        summary = json.loads((cell_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
        written = (cell_dir / SCENARIO_FILE).read_text(encoding="utf-8")
    except (OSError, ValueError):
        return False
    # scenario.yaml holds the resolved scenario, horizon included (a run the world ended
    # early still finished: its summary has fewer rounds)
    return (
        isinstance(summary, dict) and summary.get("seed") == seed and written == scenario.to_yaml()
    )


# --------------------------------------------------------------------------- backends

# Each backend runs a list of tasks on `workers` workers and yields (index, error or
# None) as each task ends; a task's exception is yielded, never raised.


def _serial(tasks: list[_Task], workers: int, address: str | None):
    for i, task in enumerate(tasks):
        try:
            _run_cell(task)
        except Exception as e:  # a cell's failure is reported, the others go on
            yield i, e
        else:
            yield i, None


def _local(tasks: list[_Task], workers: int, address: str | None):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {pool.submit(_run_cell, task): i for i, task in enumerate(tasks)}
        try:
            for future in as_completed(futures):
                # A worker that dies (killed, out of memory) breaks the pool: every cell
                # still in it fails this attempt with BrokenProcessPool and is retried.
                error = future.exception()
                yield futures[future], error
        except BaseException:  # a stop signal (or a bug): stop the workers, leave none
            # (no Future.cancel(): the pool marks the rest broken once its workers are gone)
            workers_left = list(getattr(pool, "_processes", {}).values())
            for process in workers_left:
                process.terminate()  # SIGTERM; a cell's files stay resumable
            for process in workers_left:
                process.join(timeout=30)
            raise


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise DependencyNotInstalled(
            "--backend ray needs Ray: pip install 'recourse-sim[ray]' (or pip install ray)"
        ) from e
    return ray


def _ray(tasks: list[_Task], workers: int, address: str | None):
    ray = _import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        kwargs: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": logging.WARNING,
        }
        if address is not None:
            kwargs["address"] = address
        else:
            kwargs["num_cpus"] = workers
        ray.init(**kwargs)
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_run_cell)
        refs = {remote.remote(task): i for i, task in enumerate(tasks)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    ray.get(ref)
                except Exception as e:  # RayTaskError, WorkerCrashedError, ...
                    yield refs[ref], e
                else:
                    yield refs[ref], None
    finally:
        if started_here:
            ray.shutdown()


_BACKENDS = {"local": _local, "ray": _ray, "serial": _serial}


# --------------------------------------------------------------------------- sweep


def sweep(
    scenario: str | os.PathLike[str],
    grid: Iterable[str] | Mapping[str, Sequence[Any]],
    seeds: str | Iterable[int],
    out: str | os.PathLike[str],
    *,
    overrides: Sequence[str] = (),
    rounds: int | None = None,
    backend: str = "local",
    workers: int | None = None,
    address: str | None = None,
    log: Callable[[str], None] | None = None,
) -> SweepResult:
    """Run `scenario` for every grid combination × seed; write ``out/sweep.csv``.

    Args:
        scenario: a bundled scenario name or a YAML file.
        grid: ``["key=v1,v2", ...]`` or ``{key: [v1, v2]}``; keys are dotted scenario
            paths as for ``--set``, values parsed as YAML.
        seeds: ``"0-9"``, ``"0,3,5-7"`` or a list of non-negative ints.
        out: sweep directory; each cell runs in ``out/<cell name>/``.
        overrides: ``key=value`` overrides applied to every cell (before the grid's).
        rounds: rounds per run (default the scenario's).
        backend: ``local`` (processes), ``ray`` or ``serial``.
        workers: parallel cells (default: the CPU count; Ray started here gets this many
            CPUs).
        address: Ray cluster address (``ray`` backend only; default: start Ray locally).
        log: called with one line per finished, skipped or failed cell.

    Every cell's scenario is loaded and validated before any runs, so a bad key or
    value fails at once (`ConfigError`). Cells that fail twice are listed in
    `SweepResult.failed` and ``out/failures.json``; the rest of the sweep completes.
    """
    from recourse_sim.scenarios import load_scenario
    from recourse_sim.simulate import _with_rounds

    started = time.perf_counter()
    if backend not in _BACKENDS:
        raise ConfigError(f"unknown backend {backend!r} (valid: {', '.join(BACKENDS)})")
    if backend == "ray":
        _import_ray()
    if address is not None and backend != "ray":
        raise ConfigError("--address is for --backend ray")
    if workers is None:
        workers = os.cpu_count() or 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be a positive integer, got {workers!r}")
    if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int)):
        raise ConfigError(f"rounds must be a positive integer, got {rounds!r}")
    if rounds is not None and rounds < 1:
        raise ConfigError(f"rounds must be a positive integer, got {rounds!r}")
    grid = parse_grid(grid)
    seeds = parse_seeds(seeds)
    if isinstance(scenario, (str, os.PathLike)) and Path(scenario).is_file():
        scenario = str(Path(scenario).resolve())  # workers may run elsewhere
    out = Path(out)
    say = log or (lambda line: None)

    cells: list[Cell] = []
    scenarios: dict[Cell, Scenario] = {}
    for combo in itertools.product(*grid.values()):
        values = tuple(zip(grid, combo, strict=True))
        loaded = load_scenario(scenario, overrides=[*overrides, *(f"{k}={v}" for k, v in values)])
        loaded = _with_rounds(loaded, loaded.rounds if rounds is None else rounds)
        for seed in seeds:
            cell = Cell(values, seed)
            cells.append(cell)
            scenarios[cell] = loaded
        if len(cells) > MAX_CELLS:
            raise ConfigError(f"the grid and seeds give more than {MAX_CELLS} cells")
    names = [c.name for c in cells]
    if len(set(names)) != len(names):
        raise ConfigError("two grid values give the same cell directory name; rename them")
    # every check a cell's run would make, once per distinct setting, before any runs
    from recourse_sim.simulate import preflight

    checked: set[str] = set()
    for cell, loaded in scenarios.items():
        key = loaded.to_yaml()
        if key not in checked:
            checked.add(key)
            try:
                preflight(loaded)
            except ConfigError as e:
                raise ConfigError(f"grid cell {cell.label()}: {e}") from None
    make_dir(out)
    for name in (SWEEP_FILE, FAILURES_FILE, *(cell.name for cell in cells)):
        refuse_link(out / name)  # a cell's folder linked elsewhere would be written there

    result = SweepResult(out=out, cells=cells)
    todo = []
    for cell in cells:
        if _is_finished(out / cell.name, scenarios[cell], cell.seed):
            result.skipped.append(cell)
            say(f"skip   {cell.label()} (finished)")
        else:
            todo.append(cell)

    errors: dict[Cell, str] = {}
    try:
        for attempt in range(1, ATTEMPTS + 1):
            if not todo:
                break
            tasks = [
                _Task(
                    scenario=scenarios[c],
                    rounds=scenarios[c].rounds,
                    seed=c.seed,
                    out=str(out / c.name),
                    resume=attempt == 1,  # continue a killed cell; a retry starts afresh
                    overwrite=attempt > 1,
                )
                for c in todo
            ]
            failed = []
            for i, error in _BACKENDS[backend](tasks, min(workers, len(tasks)), address):
                cell = todo[i]
                if error is None:
                    result.ran.append(cell)
                    errors.pop(cell, None)
                    say(f"done   {cell.label()}" + (" (on retry)" if attempt > 1 else ""))
                else:
                    failed.append(cell)
                    errors[cell] = _describe(error)
                    verb = "retry " if attempt < ATTEMPTS else "FAILED"
                    say(f"{verb} {cell.label()}: {errors[cell]}")
            if attempt < ATTEMPTS:
                result.retried.extend(failed)
            todo = [c for c in cells if c in set(failed)]  # grid order
    except BaseException:  # stopped: keep what finished, so running again continues
        finished = set(result.ran) | set(result.skipped)
        result.table = _combine(out, [c for c in cells if c in finished], grid)
        say(
            f"stopped: wrote {result.table} ({len(finished)} finished cells); run the sweep "
            "again to continue"
        )
        raise
    result.failed = {c: errors[c] for c in todo}

    failures_path = out / FAILURES_FILE
    if result.failed:
        record = [
            {"cell": c.name, "values": dict(c.values), "seed": c.seed, "error": e}
            for c, e in result.failed.items()
        ]
        atomic_write_text(failures_path, json.dumps(record, indent=2) + "\n")
    else:
        failures_path.unlink(missing_ok=True)
    result.table = _combine(out, [c for c in cells if c not in result.failed], grid)
    result.wall_time_seconds = time.perf_counter() - started
    return result


def _combine(out: Path, cells: list[Cell], grid: Mapping[str, list[str]]) -> Path:
    """Write ``out/sweep.csv``: every cell's metrics with its grid values and seed."""
    import pandas as pd

    from recourse_sim.simulate import FLOAT_FORMAT, read_metrics

    frames = []
    for cell in cells:
        frame = read_metrics(out / cell.name)
        for key in grid:
            if key in frame.columns:
                raise ConfigError(f"--grid {key}: {key!r} is also a metric column")
        front = pd.DataFrame(
            {**{k: [v] * len(frame) for k, v in cell.values}, "seed": [cell.seed] * len(frame)},
            dtype=object,
        )
        frames.append(pd.concat([front, frame], axis=1))
    path = out / SWEEP_FILE
    if frames:
        table = pd.concat(frames, ignore_index=True, sort=False)
        text = table.to_csv(index=False, float_format=f"%{FLOAT_FORMAT}", lineterminator="\n")
    else:
        text = ",".join([*grid, "seed"]) + "\n"
    atomic_write_text(path, text)
    return path
