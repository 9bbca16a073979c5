"""Every constant OAR setting against OAR: can a coordinator over OAR's own settings win?

The ``-v2`` action (`recourse_sim.agents.OAR_ACTION`) lets a policy choose, each round,
whether the collective acts, its participation α and budget ε (as shares of the
population's own, at most the whole) and its goal; the zero action is collective OAR.
This script plays every constant action of a grid of α and ε shares (the collective acts
every round and aims at the query's own goal) on the held-out seeds that
``train_coordinator.py`` evaluates on, one episode each, and reports each cell's query
success and reward beside OAR's (shares 1, 1), paired by seed. It is the measured
answer to whether the class of OAR's settings holds a better constant action than OAR.

Outputs in --out: ``oar_action_grid.csv`` (scenario, alpha_share, budget_share, seed,
query_success, reward, cost: means per round of one episode) and ``oar_action_grid.md``.

    python analyses/oar_action_grid.py            # the committed run (minutes, one CPU)
    python analyses/oar_action_grid.py --quick    # a smoke test, to a temp dir
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the analyses' own helpers
from _args import parse_args as parse_dataclass_args
from train_coordinator import ConstantAction, controlled_population

from recourse_sim.agents import OAR_ACTION
from recourse_sim.agents.policies import evaluate
from recourse_sim.env import RecourseEnv
from recourse_sim.scenarios import load_scenario
from recourse_sim.stats import mean_ci, paired_difference

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Args:
    """Command-line arguments (each field's docstring is its --help)."""

    scenarios: tuple[str, ...] = ("school_assignment_controlled", "lending_fico_controlled")
    """controlled scenarios to play (each with its controlled population's action: oar)"""
    eval_seeds: tuple[int, ...] = tuple(range(1000, 1010))
    """held-out seeds, one episode each (train_coordinator.py's)"""
    shares: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    """the shares of the population's α and of its ε that the grid crosses"""
    horizons: tuple[int, ...] = (2, 3)
    """other look-aheads H (model updates) to play OAR's full α and ε at, beside the
    population's own (a setting of OAR that the -v2 action does not choose)"""
    quick: bool = False
    """smoke test: one seed, two shares, short episodes"""
    out: Path | None = None
    """output folder (default: analyses/results, or a temp folder with --quick)"""


def oar_action(alpha_share: float, budget_share: float) -> np.ndarray:
    """The ``-v2`` action that acts every round at the query's goal with these shares of
    α and ε (a share s is the entry s - 1: the action maps it to min(1, 1 + a))."""
    action = np.zeros(len(OAR_ACTION), np.float32)
    action[OAR_ACTION.index("alpha")] = alpha_share - 1.0
    action[OAR_ACTION.index("budget")] = budget_share - 1.0
    return action


def play_grid(args: Args) -> pd.DataFrame:
    rows = []
    for scenario in args.scenarios:
        population = controlled_population(scenario)
        overrides = {f"populations__{population}__action": "oar"}
        if args.quick:
            overrides["rounds"] = 3
        own = load_scenario(scenario).populations[population].horizon
        cells = [(a, e, own) for a in args.shares for e in args.shares]
        cells += [(1.0, 1.0, h) for h in args.horizons if h != own]
        for alpha_share, budget_share, horizon in cells:
            env = RecourseEnv(
                scenario, **overrides, **{f"populations__{population}__horizon": horizon}
            )
            policy = ConstantAction(oar_action(alpha_share, budget_share))
            for row in evaluate(policy, env, args.eval_seeds):
                rows.append(
                    {
                        "scenario": scenario,
                        "alpha_share": alpha_share,
                        "budget_share": budget_share,
                        "horizon": horizon,
                        "own_horizon": horizon == own,
                        **row,
                    }
                )
    columns = ["scenario", "alpha_share", "budget_share", "horizon", "own_horizon", "seed"]
    return pd.DataFrame(rows)[[*columns, "query_success", "reward", "cost"]]


def _versus_oar(cell: pd.DataFrame, oar: pd.Series):
    """The cell's query success minus OAR's (`oar`: by seed), paired by seed."""
    cell = cell.set_index("seed")
    return paired_difference(cell.query_success, oar.reindex(cell.index))


def _where(diff) -> str:
    if diff.mean - diff.half_width > 0:
        return "above OAR at 95 %"
    if diff.mean + diff.half_width < 0:
        return "below OAR at 95 %"
    return "not distinguishable from OAR at 95 %"


def _holm(p_values: dict) -> dict:
    """Holm's step-down adjustment of the p-values (a dict: key -> p; NaN, every
    difference equal, stays NaN and is not counted as a comparison)."""
    tested = sorted((p, key) for key, p in p_values.items() if np.isfinite(p))
    adjusted, running = {}, 0.0
    for i, (p, key) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - i) * p))
        adjusted[key] = running
    return {key: adjusted.get(key, float("nan")) for key in p_values}


def _p(diff, holm: float, m: int) -> str:
    if not np.isfinite(diff.p_value):
        return ""
    return (
        f"; paired t-test p = {diff.p_value:.2g}, Holm-adjusted over the {m} comparisons "
        f"= {holm:.2g}"
    )


def report(table: pd.DataFrame, seconds: tuple[float, float]) -> str:
    lines = [
        "# Constant OAR settings against OAR (the `-v2` action's grid)",
        "",
        "Written by `analyses/oar_action_grid.py`. Each cell: the constant `-v2` action that "
        "acts every round at the query's own goal with the given shares of the population's "
        "participation α and budget ε, at the population's own look-ahead H (shares 1, 1: "
        "the zero action, collective OAR); below them, OAR's full α and ε at other "
        "look-aheads (H is a setting of OAR that the `-v2` action does not choose: the "
        "scenario's is set instead). One episode on each held-out seed. Mean ± 95 % "
        "Student-t half-width over the seeds; the paired difference with OAR's query "
        "success is over the same seeds (same worlds, same people).",
        "",
        "| scenario | α share | ε share | H | query success | reward | query success − OAR's |",
        "|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for scenario, t in table.groupby("scenario", sort=False):
        own = t[t.own_horizon]
        is_oar = (own.alpha_share == 1.0) & (own.budget_share == 1.0)
        oar = own[is_oar].set_index("seed").query_success
        cells = t.groupby(["alpha_share", "budget_share", "horizon"], sort=False)
        p_values = {
            key: _versus_oar(cell, oar).p_value
            for key, cell in cells
            if key[:2] != (1.0, 1.0) or not bool(cell.own_horizon.iloc[0])
        }
        holm, m = _holm(p_values), sum(np.isfinite(list(p_values.values())))
        best = None
        for (alpha_share, budget_share, horizon), cell in t.groupby(
            ["alpha_share", "budget_share", "horizon"], sort=False
        ):
            success, reward = mean_ci(cell.query_success), mean_ci(cell.reward)
            diff = _versus_oar(cell, oar)
            lines.append(
                f"| {scenario} | {alpha_share:g} | {budget_share:g} | {horizon} "
                f"| {success.mean:.3f} ± {success.half_width:.3f} "
                f"| {reward.mean:.3f} ± {reward.half_width:.3f} "
                f"| {diff.mean:+.3f} ± {diff.half_width:.3f} |"
            )
            in_class = bool(cell.own_horizon.iloc[0]) and (alpha_share, budget_share) != (1, 1)
            if in_class and (best is None or diff.mean > best[2].mean):
                best = (alpha_share, budget_share, diff)
        if best is not None:
            a, e, diff = best
            means = own.groupby(["alpha_share", "budget_share"]).query_success.mean()
            horizon = int(own.horizon.iloc[0])
            verdicts.append(
                f"- **{scenario}**: the best constant `-v2` setting other than OAR (α share "
                f"{a:g}, ε share {e:g}) differs from OAR's query success by {diff.mean:+.3f} "
                f"± {diff.half_width:.3f} ({_where(diff)}"
                f"{_p(diff, holm[(a, e, horizon)], m)}); OAR's "
                + ("is" if means.idxmax() == (1.0, 1.0) else "is not")
                + " the highest mean query success of the grid."
            )
        for horizon, cell in t[~t.own_horizon].groupby("horizon"):
            diff = _versus_oar(cell, oar)
            verdicts.append(
                f"  OAR with look-ahead H = {horizon} instead of the population's "
                f"{int(own.horizon.iloc[0])}: {diff.mean:+.3f} ± {diff.half_width:.3f} "
                f"({_where(diff)}{_p(diff, holm[(1.0, 1.0, horizon)], m)})."
            )
    wall, cpu = seconds
    return "\n".join(
        [
            *lines,
            "",
            "## What it says",
            "",
            *verdicts,
            "",
            '"At 95 %" is each comparison\'s own paired interval; the grid makes many '
            "comparisons with OAR per scenario (every other row), so each verdict also gives "
            "its paired t-test p-value adjusted by Holm's step-down correction over them. "
            "The grid stops at the file's α and ε, as the `-v2` action does (it cannot ask "
            "for more): that OAR is best here is partly built into that cap.",
            "",
            "A smaller α or ε is OAR with fewer members or less effort; the grid measures "
            "what that costs in query success. A policy over these settings can beat OAR "
            "only by choosing them round by round (when to act, how much), which "
            "`train_coordinator.py --action oar` trains PPO to do. The look-ahead rows "
            "ask whether OAR itself, configured otherwise, does better: H successive "
            "updates with the same reports model a learner that keeps them for H rounds "
            "(a window refit), and where a longer H pays, OAR at that H (not the file's) "
            "is the baseline a coordinator that may choose H would have to beat.",
            "",
            f"Time: {wall:.0f} s wall clock, {cpu:.0f} s CPU, one process of one CPU thread.",
            "",
        ]
    )


def main(args: Args) -> None:
    torch.set_num_threads(1)
    if args.quick:
        args.eval_seeds, args.shares = args.eval_seeds[:1], (0.5, 1.0)
    if 1.0 not in args.shares:
        raise SystemExit("error: --shares must include 1 (OAR itself)")
    out = args.out or (Path(tempfile.mkdtemp()) if args.quick else RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    table = play_grid(args)
    c1 = resource.getrusage(resource.RUSAGE_SELF)
    seconds = (time.perf_counter() - t0, c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
    table.to_csv(out / "oar_action_grid.csv", index=False)
    (out / "oar_action_grid.md").write_text(report(table, seconds))
    print(f"wrote {out / 'oar_action_grid.md'} ({seconds[0]:.0f} s wall, {seconds[1]:.0f} s CPU)")


if __name__ == "__main__":
    main(parse_dataclass_args(Args, __doc__.splitlines()[0]))
