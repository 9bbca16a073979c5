"""The ``recourse-sim`` command: ``run``, ``validate``, ``list``, ``plot``, ``sweep``.

Every mistake a user can make (a bad scenario, argument or file) ends the command with
exit status 2 and one line on stderr, ``error: <what is wrong>``, never a traceback.
Anything else is a bug and propagates with its traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import textwrap
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from recourse_sim import __version__
from recourse_sim.errors import RecourseSimError

__all__ = ["build_parser", "main"]

EXIT_USAGE = 2
"""Exit status of a user error (argparse's convention)."""

LIST_WIDTH = 110
"""Characters per line of ``recourse-sim list`` (descriptions are shortened to fit)."""

PROGRESS_MIN_ROUNDS = 6
"""Runs with at least this many rounds to go show a progress bar (on a terminal)."""


class UsageError(Exception):
    """A command-line argument is malformed (what argparse would print usage for)."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors become one line instead of usage text and exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _parallelism(text: str) -> int:
    """A thread or worker count: positive and at most 4 per CPU (libgomp aborts on a
    billion threads; anything past the CPUs only oversubscribes)."""
    value = _positive_int(text)
    cpus = os.cpu_count() or 1
    if value > 4 * cpus:
        raise argparse.ArgumentTypeError(
            f"must be at most {4 * cpus} (4 per CPU on this {cpus}-CPU machine), got {value}"
        )
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``recourse-sim`` (``run, validate, list, plot, sweep``)."""
    parser = _Parser(
        prog="recourse-sim",
        description="Simulate online collective algorithmic recourse.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an unexpected error"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    set_help = (
        "override a scenario field by its dotted path (repeatable), "
        "e.g. --set learner.update_rule=refit"
    )

    run = commands.add_parser(
        "run",
        help="run a scenario; writes metrics.csv, people.csv, summary.json, scenario.yaml, "
        "a checkpoint",
        description="Run a scenario round by round. Each round's metrics are written as it "
        "completes, and a checkpoint after it, so a killed run continues with --resume.",
    )
    run.add_argument("scenario", metavar="SCENARIO", help="bundled scenario name or YAML file")
    run.add_argument(
        "--rounds", type=_positive_int, metavar="N", help="rounds to run (default: the scenario's)"
    )
    run.add_argument("--seed", type=_seed, default=0, metavar="S", help="random seed (default 0)")
    run.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="output directory (default runs/SCENARIO-seedS, the name made safe)",
    )
    run.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides", help=set_help
    )
    run.add_argument(
        "--resume", action="store_true", help="continue the run in DIR from its checkpoint"
    )
    run.add_argument("--overwrite", action="store_true", help="replace a finished run in DIR")
    run.add_argument(
        "--people-features",
        action="store_true",
        help="people.csv also holds each feature's true value and report (feature_<f>, "
        "reported_<f>)",
    )
    run.add_argument(
        "--people-collective",
        action="store_true",
        help="people.csv also holds what the collectives changed in each person's training "
        "report (collective, collective_cost, collective_<f>)",
    )
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no summary")
    run.add_argument(
        "--threads",
        type=_parallelism,
        default=1,
        metavar="N",
        help="torch intra-op threads (default 1: round-sized tensors gain nothing from "
        "more, and a busy machine makes torch's thread pool spin)",
    )
    run.set_defaults(handler=_cmd_run)

    validate = commands.add_parser(
        "validate", help="check scenario files", description="Load and validate scenarios."
    )
    validate.add_argument("scenarios", nargs="+", metavar="SCENARIO", help="names or YAML files")
    validate.add_argument(
        "-q", "--quiet", action="store_true", help="only 'ok' or the error, no world summary"
    )
    validate.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides", help=set_help
    )
    validate.set_defaults(handler=_cmd_validate)

    list_ = commands.add_parser(
        "list", help="list the bundled scenarios", description="List the bundled scenarios."
    )
    list_.set_defaults(handler=_cmd_list)

    schema = commands.add_parser(
        "schema",
        help="print the scenario JSON Schema",
        description="Print the JSON Schema of a scenario file, for editors that complete "
        "and check YAML (e.g. a yaml-language-server `$schema` comment).",
    )
    schema.set_defaults(handler=_cmd_schema)

    plot = commands.add_parser(
        "plot",
        help="plot a run's dynamics, overlay runs, or a sweep's cells",
        description="One DIR: its dynamics over rounds, one line per group, in the panels "
        "the run measured (acceptance, recourse success and cost, seekers; the collective's "
        "outcome for its query group; the model's convergence; causal validity; true "
        "outcomes, accuracy, approvals). Several DIRs: the runs overlaid (group 'all'), "
        "named by the settings that differ. A sweep directory (or sweep.csv): each grid "
        "cell as its mean over seeds with a 95 % band.",
    )
    plot.add_argument(
        "run_dirs", type=Path, nargs="+", metavar="DIR", help="run or sweep directory (or CSV)"
    )
    plot.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="image to write, a new path or a regular file (default DIR/dynamics.png)",
    )
    plot.add_argument(
        "--group", default="all", help="the group an overlay or a sweep plot shows (default all)"
    )
    plot.add_argument(
        "--label",
        action="append",
        dest="labels",
        metavar="TEXT",
        help="legend label of each DIR, in order (repeat once per DIR; default: the "
        "settings that differ between the runs' scenario.yaml, and their seeds); with one "
        "DIR, the title",
    )
    plot.add_argument(
        "--panels",
        action="append",
        metavar="NAMES",
        help="the panels to draw, by column name, comma-separated, in order (e.g. "
        "acceptance_rate,query_success_next,theta_step; default: those the run measured)",
    )
    plot.set_defaults(handler=_cmd_plot)

    sweep = commands.add_parser(
        "sweep",
        help="run a scenario over a grid of settings x seeds (processes or Ray)",
        description="Run SCENARIO once per combination of --grid values and seed, each cell "
        "in DIR/<cell>/ like `run`, then combine their metrics into DIR/sweep.csv (grid keys "
        "and seed as columns). Finished cells are skipped when the sweep is run again; a "
        "failed cell is retried once, then listed in DIR/failures.json (exit status 1).",
    )
    sweep.add_argument("scenario", metavar="SCENARIO", help="bundled scenario name or YAML file")
    sweep.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="a scenario field (dotted path) and its values (repeatable; the grid is the "
        "product), e.g. --grid learner.update_rule=refit,window",
    )
    sweep.add_argument(
        "--seeds", default="0", metavar="SEEDS", help="seeds, e.g. 0-9 or 0,3,5-7 (default 0)"
    )
    sweep.add_argument("--out", type=Path, required=True, metavar="DIR", help="sweep directory")
    sweep.add_argument(
        "--rounds", type=_positive_int, metavar="N", help="rounds per run (default: the scenario's)"
    )
    sweep.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a scenario field in every cell (repeatable)",
    )
    sweep.add_argument(
        "--backend",
        choices=("local", "ray", "serial"),
        default="local",
        help="local: processes on this machine (default); ray: Ray tasks (the ray extra); "
        "serial: one cell after another in this process",
    )
    sweep.add_argument(
        "--workers", type=_parallelism, metavar="K", help="parallel cells (default: CPU count)"
    )
    sweep.add_argument(
        "--address", metavar="ADDR", help="Ray cluster to join (default: start Ray locally)"
    )
    sweep.add_argument("-q", "--quiet", action="store_true", help="no per-cell lines")
    sweep.set_defaults(handler=_cmd_sweep)
    return parser


# --------------------------------------------------------------------------- commands


def _cmd_run(args: argparse.Namespace) -> int:
    from recourse_sim.scenarios import load_scenario
    from recourse_sim.simulate import METRICS_FILE, PEOPLE_FILE, SUMMARY_FILE, simulate

    scenario = load_scenario(args.scenario, overrides=args.overrides or None)
    import torch  # after the scenario: a bad one is refused without loading torch

    torch.set_num_threads(args.threads)
    rounds = args.rounds if args.rounds is not None else scenario.rounds
    out = (
        args.out
        if args.out is not None
        else Path("runs") / f"{_slug(scenario.name)}-seed{args.seed}"
    )
    _check_outputs(scenario, rounds, out, args)
    # a bar on a terminal; elsewhere (a log) a line every few seconds
    progress = False
    if not args.quiet and rounds >= PROGRESS_MIN_ROUNDS:
        progress = "bar" if sys.stderr.isatty() else "lines"
    frame = simulate(
        scenario,
        rounds,
        args.seed,
        out,
        resume=args.resume,
        overwrite=args.overwrite,
        progress=progress,
        people_features=args.people_features,
        people_collective=args.people_collective,
    )
    if not args.quiet:
        last = frame[(frame["round"] == frame["round"].iloc[-1]) & (frame["group"] == "all")]
        print(
            f"wrote {out / METRICS_FILE} and {out / PEOPLE_FILE} "
            f"({frame['round'].nunique()} rounds, seed {args.seed})"
        )
        if not last.empty:
            row = last.iloc[0]
            shown = ("acceptance_rate", "recourse_success_rate", "mean_cost", "model_accuracy")
            print(
                f"round {row['round']}, all: "
                + ", ".join(
                    f"{k} {row[k]:.4g}" if row[k] == row[k] else f"{k} empty (no seekers)"
                    for k in shown
                    if k in row
                )
            )
        if getattr(scenario, "hidden", None):  # drawn at reset, observed by no one: say it
            drawn = json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8"))["hidden"]
            print(
                "hidden settings (drawn from their train ranges, in summary.json): "
                + ", ".join(f"{k} {v:.4g}" for k, v in drawn["values"].items())
            )
    return 0


def _check_outputs(scenario, rounds: int, out: Path, args: argparse.Namespace) -> None:
    """The run's people.csv against the free disk, before the first round."""
    from recourse_sim.budget import check_outputs
    from recourse_sim.scenarios import world_feature_names
    from recourse_sim.scenarios.checks import cohort_size

    people, field = cohort_size(scenario.world)
    d = len(world_feature_names(scenario.world)) if args.people_features else 0
    what = "--rounds" if args.rounds is not None else "rounds"
    check_outputs(rounds, people, d, out, f"{what} x {field}")


def _slug(name: str) -> str:
    """A scenario name as one safe folder name: letters, digits, '-' and '_' only (no
    separators, no '..', never absolute), at most 80 characters."""
    import re

    return re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_-")[:80] or "scenario"


def _cmd_validate(args: argparse.Namespace) -> int:
    from recourse_sim.scenarios import belief_notes, load_scenario
    from recourse_sim.simulate import preflight

    status = 0
    for name in args.scenarios:
        try:
            scenario = load_scenario(name, overrides=args.overrides or None)
            summary = preflight(scenario)
        except RecourseSimError as e:  # report every bad file, not only the first
            _print_error(e)
            status = EXIT_USAGE
        else:
            print(f"ok: {name}")
            for line in belief_notes(scenario):  # legal, but worth knowing
                print(f"note: {line}")
            if not args.quiet:
                print("\n".join(f"  {line}" for line in summary))
    return status


def _cmd_list(args: argparse.Namespace) -> int:
    # descriptions only: `validate` checks the scenarios (which loads data and torch)
    from recourse_sim.scenarios import list_scenarios, scenario_description

    names = list_scenarios()
    width = max((len(n) for n in names), default=0)
    status = 0
    for name in names:
        try:
            description = textwrap.shorten(
                scenario_description(name), LIST_WIDTH - width, placeholder=" ..."
            )
        except RecourseSimError as e:  # list the others; a broken file is still worth naming
            description, status = f"(does not load: {e})", EXIT_USAGE
        print(f"{name:<{width}}  {description}".rstrip())
    return status


def _cmd_schema(args: argparse.Namespace) -> int:
    import json

    from recourse_sim.scenarios import Scenario

    print(json.dumps(Scenario.model_json_schema(), indent=2, ensure_ascii=False))
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from recourse_sim.plotting import panels_named, plot_dynamics, plot_runs, plot_sweep

    first = args.run_dirs[0]
    folder = first if first.is_dir() else first.parent
    sweep = (first / "sweep.csv").is_file() if first.is_dir() else first.name == "sweep.csv"
    out = args.out if args.out is not None else folder / "dynamics.png"
    labels = args.labels
    panels = None
    if args.panels is not None:  # checked before any file is read
        panels = [name.strip() for names in args.panels for name in names.split(",")]
        panels = [panel.column for panel in panels_named([p for p in panels if p])]
    if len(args.run_dirs) > 1:
        written = plot_runs(args.run_dirs, out, group=args.group, labels=labels, panels=panels)
    elif labels is not None and len(labels) > 1:
        raise UsageError(f"{len(labels)} --label for one DIR; give one (the title)")
    elif sweep:
        title = labels and labels[0]
        written = plot_sweep(first, out, group=args.group, title=title, panels=panels)
    else:
        written = plot_dynamics(first, out, title=labels and labels[0], panels=panels)
    print(f"wrote {written}")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from recourse_sim.sweep import FAILURES_FILE, sweep

    def log(line: str) -> None:
        print(line, flush=True)

    result = sweep(
        args.scenario,
        args.grid,
        args.seeds,
        args.out,
        overrides=args.overrides,
        rounds=args.rounds,
        backend=args.backend,
        workers=args.workers,
        address=args.address,
        log=None if args.quiet else log,
    )
    counts = (
        f"{len(result.cells)} cells: {len(result.ran)} ran, {len(result.skipped)} skipped "
        f"(finished before), {len(result.failed)} failed; {result.wall_time_seconds:.1f} s"
    )
    if not args.quiet:
        print(f"wrote {result.table} ({counts})")
    if result.failed:
        print(
            f"{len(result.failed)} of {len(result.cells)} cells failed twice; "
            f"see {args.out / FAILURES_FILE} (run the sweep again to retry them)",
            file=sys.stderr,
        )
        return 1
    return 0


# --------------------------------------------------------------------------- entry point


def _print_error(error: BaseException) -> None:
    """Print `error` as the single line ``error: <message>`` on stderr."""
    message = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    print(f"error: {_clip(message or type(error).__name__, 1000)}", file=sys.stderr)


class _Stopped(BaseException):
    """SIGTERM or SIGHUP arrived (a BaseException, like KeyboardInterrupt, so that only
    `main` handles it and every ``finally`` on the way closes its files)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, frame) -> None:
    # the first signal stops the run cleanly; a second one, while it cleans up, ends the
    # process at once and quietly
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _exit_quietly)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise _Stopped(signum)


def _exit_quietly(signum: int, frame) -> None:
    os._exit(128 + signum)


_STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def _install_signal_handlers() -> dict:
    """`_on_signal` for SIGINT, SIGTERM and SIGHUP; the previous handlers (to restore).
    Only in the main thread (elsewhere Python does not allow it: nothing is changed)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, _on_signal) for sig in _STOP_SIGNALS}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``recourse-sim`` with `argv` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    previous = _install_signal_handlers()
    previous_format = warnings.formatwarning
    warnings.formatwarning = _warning_line
    how_to_continue = "a run continues with --resume"
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help and --version print, then exit
            return e.code if isinstance(e.code, int) else 0
        if args.handler is _cmd_sweep:
            how_to_continue = "running the same sweep again continues it"
        return args.handler(args)
    except (UsageError, RecourseSimError) as e:
        _print_error(e)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"error: interrupted ({how_to_continue})", file=sys.stderr)
        return 130
    except _Stopped as e:
        name = signal.Signals(e.signum).name
        print(f"error: stopped by {name} ({how_to_continue})", file=sys.stderr)
        return 128 + e.signum
    except BrokenPipeError:  # the reader left (`recourse-sim list | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:
        if debug:
            raise
        where = e.filename if e.filename is not None else "a file"
        reason = e.strerror or type(e).__name__
        print(
            f"error: cannot write {_clip(where)}: {reason} (the run can be resumed with "
            "--resume once fixed)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except Exception as e:
        if debug:
            raise
        print(
            f"error: unexpected {type(e).__name__}: {_clip(e)} (rerun with --debug for the "
            "traceback)",
            file=sys.stderr,
        )
        return 1
    finally:
        warnings.formatwarning = previous_format
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _warning_line(message, category, filename, lineno, line=None) -> str:
    """A warning on the command line: one line, ``warning: ...`` (as errors are
    ``error: ...``), without the source line Python shows by default."""
    return f"warning: {message}\n"


def _clip(value, limit: int = 200) -> str:
    """str(value) on one line, at most `limit` characters."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


if __name__ == "__main__":
    raise SystemExit(main())
