"""Four update rules against the performative optimum on `performative_credit_bounded`.

German credit (standardised) as a fixed population that best-responds to the deployed
logistic regression (ε = 3) within floors on loan duration and amount (−0.3 SD): a floor
stops some people's moves and not others', so the performatively stable point, where
repeated risk minimisation (RRM) stops, is not the performative optimum. Four rules from
the same first model: RRM (``update_rule: refit``), PerfGD with the Jacobian estimated
from past rounds (``perfgd``), PerfGD with the response's exact Jacobian (``perfgd``,
``jacobian: response``: the scenario) and the two-point derivative-free rule (``dfo``).
Every run records ``optimum_gap`` each round: PR(θₜ) − min PR on the round's people under
their exact response (`recourse_sim.env.optimum`).

Each seed's population is a random 80 % of the file's rows (the same for every rule:
paired). Outputs in --out: ``performative_optimum.csv`` (rule, seed, round, optimum_gap,
performative_risk, acc_under_response, theta_step) and ``performative_optimum.md``.

    python analyses/performative_optimum.py            # the committed run
    python analyses/performative_optimum.py --quick    # a smoke test, to a temp dir
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the analyses' own helpers
from _args import parse_args as parse_dataclass_args
from performative import population_file

from recourse_sim import load_scenario, simulate
from recourse_sim.stats import mean_ci, paired_difference

RESULTS = Path(__file__).resolve().parent / "results"
SCENARIO = "performative_credit_bounded"
RULES = {  # rule -> overrides of the scenario
    "RRM": ["learner.update_rule=refit", "learner.params={C: 1.0}"],
    "PerfGD, estimated": ["learner.params={C: 1.0, lr: 2.0}"],
    "PerfGD, response": [],
    "DFO": ["learner.update_rule=dfo", "learner.params={C: 1.0, lr: 0.5, perturbation: 0.05}"],
}


@dataclass
class Args:
    """Command-line arguments (each field's docstring is its --help)."""

    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """seeds: each draws its population (the same for every rule)"""
    rounds: int = 40
    """rounds per run"""
    share: float = 0.8
    """share of the file's rows in a seed's population"""
    out: Path = RESULTS
    """output folder"""
    quick: bool = False
    """smoke test: two seeds, three rounds, to a temp dir"""


def parse_args(argv: list[str] | None = None) -> Args:
    args = parse_dataclass_args(Args, __doc__.splitlines()[0], argv)
    if args.quick:
        args = replace(args, seeds=args.seeds[:2], rounds=3, out=Path(tempfile.mkdtemp()))
    return args


def run(rule: str, path: Path, seed: int, rounds: int) -> pd.DataFrame:
    scenario = load_scenario(SCENARIO, [f"world.path={path}", *RULES[rule]])
    metrics = simulate(scenario, rounds=rounds, seed=seed)
    everyone = metrics[metrics.group == "all"]
    columns = ["round", "optimum_gap", "performative_risk", "acc_under_response", "theta_step"]
    table = everyone[columns].reset_index(drop=True)
    table.insert(0, "seed", seed)
    table.insert(0, "rule", rule)
    return table


def main(args: Args) -> None:
    torch.set_num_threads(1)  # (small tensors: threads only contend)
    wall, cpu = time.perf_counter(), time.process_time()
    table = pd.read_csv(load_scenario(SCENARIO).world.path)
    folder = Path(tempfile.mkdtemp())
    runs = []
    for seed in args.seeds:
        path = population_file(table, args.share, seed, folder)
        runs += [run(rule, path, seed, args.rounds) for rule in RULES]
    results = pd.concat(runs, ignore_index=True)
    args.out.mkdir(parents=True, exist_ok=True)
    results.to_csv(args.out / "performative_optimum.csv", index=False, float_format="%.6g")
    seconds = (time.perf_counter() - wall, time.process_time() - cpu)
    text = report(results, args, seconds)
    (args.out / "performative_optimum.md").write_text(text, encoding="utf-8")
    wall_s, cpu_s = seconds
    print(f"wrote {args.out}/performative_optimum.md ({wall_s:.0f} s wall, {cpu_s:.0f} s CPU)")


def _ci(values, digits: str = ".2e") -> str:
    m = mean_ci(values)
    return f"{m.mean:{digits}} ± {m.half_width:{digits}}"


def report(results: pd.DataFrame, args: Args, seconds: tuple[float, float]) -> str:
    last = int(results["round"].max())
    shown = [r for r in (1, 5, 10, 20, last) if r <= last]
    shown = sorted(set(shown))
    header = " | ".join(f"round {r}" for r in shown)
    lines = [
        "# PerfGD, derivative-free descent and RRM against the performative optimum",
        "",
        f"`{SCENARIO}` (German credit, standardised; everyone best-responds with ε = 3 "
        "within floors of −0.3 SD on loan duration and amount), each seed's population a "
        f"random {args.share:.0%} of the file's rows, the same for every rule (paired). "
        "`optimum_gap` = PR(θₜ) − min PR on the round's people under their exact response "
        "(PR: mean cross-entropy + ‖W‖²/(2Cn); the minimum L-BFGS-B's, from last round's "
        f"minimiser and θₜ). Mean ± 95 % Student-t CI over seeds {list(args.seeds)}. "
        "Produced by `python analyses/performative_optimum.py`.",
        "",
        "## optimum_gap by round",
        "",
        f"| rule | {header} |",
        "|---|" + "---|" * len(shown),
    ]
    for rule in RULES:
        t = results[results.rule == rule]
        cells = " | ".join(_ci(t[t["round"] == r].optimum_gap) for r in shown)
        lines.append(f"| {rule} | {cells} |")
    final = results[results["round"] == last].set_index(["rule", "seed"])
    exact = final.loc["PerfGD, response"]
    lines += [
        "",
        f"## Round {last}: the exact Jacobian against each other rule (paired by seed)",
        "",
        "| rule | optimum_gap | acc_under_response | PerfGD, response minus it: optimum_gap (p) |",
        "|---|---|---|---|",
    ]
    for rule in RULES:
        other = final.loc[rule]
        cell = "—"
        if rule != "PerfGD, response":
            diff = paired_difference(exact.optimum_gap, other.optimum_gap)
            cell = f"{diff.mean:+.2e} ± {diff.half_width:.2e} (p = {diff.p_value:.2g})"
        lines.append(
            f"| {rule} | {_ci(other.optimum_gap)} | {_ci(other.acc_under_response, '.3f')} "
            f"| {cell} |"
        )
    per_seed = [
        f"{rule}: {', '.join(f'{v:.1e}' for v in final.loc[rule].optimum_gap)}" for rule in RULES
    ]
    steps = ", ".join(f"{v:.1e}" for v in exact.theta_step)
    lines += [
        "",
        f"optimum_gap at round {last}, seeds {list(args.seeds)} in order: "
        + "; ".join(per_seed)
        + f". PerfGD with the response's `theta_step` at round {last}: {steps} (PR is not "
        "convex: a seed whose gap stays up while its steps shrink is descending to a local "
        "minimum of PR, not the lowest one the gap's search found).",
    ]
    rrm = results[results.rule == "RRM"]
    late = rrm[rrm["round"] > last - 5].groupby("seed").theta_step.max()
    lines += [
        "",
        f"RRM's largest `theta_step` over its last 5 rounds, per seed: "
        f"{', '.join(f'{v:.1e}' for v in late)} (0 to the refit's tolerance: it has stopped "
        "at its stable point; a larger value is a cycle).",
        "",
        f"Run time: {seconds[0]:.0f} s wall, {seconds[1]:.0f} s CPU (one process, one torch "
        "thread), most of it the per-round minimisation behind `optimum_gap`.",
        "",
        "## Deviations from the papers",
        "",
        "| paper | here | why |",
        "|---|---|---|",
        "| PerfGD (Izzo, Ying & Zou 2021) estimates ∂μ/∂θ of a parametric distribution "
        "map by finite differences of the deployed θ's and the observed means | `perfgd`: "
        "each class's mean report against θ over the last 5 rounds, ridge least squares; "
        "`jacobian: response`: the exact derivative of the known response, not in the "
        "paper | the simulator knows its response; the exact variant shows what the "
        "estimate misses (the floors stop some rows and not others) |",
        "| PerfGD's step sizes and sample sizes grow with the round | a fixed step "
        "(`lr: 2.0`), one step a round on the round's whole population | a fixed "
        "population (`population: file`) has no sampling noise to average |",
        "| two-point derivative-free descent (Flaxman, Kalai & McMahan 2005; Miller, "
        "Perdomo & Zrnic 2021) with decaying step and perturbation | fixed `lr: 0.5` and "
        "δ = 0.05, one step per two rounds, the gap of the deployed (perturbed) model | "
        "the best of three settings ((lr, δ) = (0.1, 0.05), (0.5, 0.05), (1.0, 0.1)) on "
        f"the whole file, seed 0, by the gap at round 40; {last} rounds are {last // 2} "
        "steps in 14 dimensions |",
        "| Perdomo et al.'s credit data (Kaggle GiveMeSomeCredit), unbounded responses | "
        "UCI German credit (bundled), floors on two strategic features | not bundled; "
        "without bounds the uniform shift is absorbed by the intercept and the stable "
        "point is the optimum (docs: Performative prediction) |",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main(parse_args())
