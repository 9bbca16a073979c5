"""The strategic model against repeated retraining on strategic-ml's Gaussian blobs.

Two bundled scenarios, one world: two Gaussian classes 3 apart on x1 (sd 1.5 in both
features; 5,000 truthful rows train the first model, then 1,000 applicants a round),
and everyone the model rejects moves to its boundary when that costs at most 2
(Euclidean distance). ``strategic_blobs`` deploys the model trained with the strategic
hinge loss against exactly that response (``learner.strategic: s_hinge``) and keeps it;
``strategic_blobs_rrm`` refits a logistic regression every round on the round's
responded reports (repeated risk minimisation, RRM).

Per round we record the columns ``acc_under_response`` and ``social_burden`` and the
deployed θ, and compute the *population* accuracy under response of θ exactly: a
person is accepted after responding when s(x) + 2‖g‖ ≥ 0 (s the score, g its weights),
and s(x) is Gaussian within each class, so the accuracy is ½[Φ(a₁) + 1 − Φ(a₀)] with
a_c = (g·μ_c + b + 2‖g‖) / (1.5 ‖g‖). The performative optimum over linear models is
found by brute force over a grid of directions and offsets (and equals Φ(1), the
accuracy of the best linear rule without any response, moved out by the reach); the
gap of each deployed θ to it is the stable-versus-optimal gap.

Outputs in --out: ``strategic_blobs.csv`` (scenario, seed, round, acc_under_response,
social_burden, population_accuracy, gap, coef_1, coef_2, intercept, theta_step) and
``strategic_blobs.md``.

    python analyses/strategic_blobs.py            # the committed run
    python analyses/strategic_blobs.py --quick    # a smoke test, to a temp dir
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the analyses' own helpers
from _args import parse_args as parse_dataclass_args

from recourse_sim.env import RecourseEnv
from recourse_sim.stats import mean_ci, paired_difference

RESULTS = Path(__file__).resolve().parent / "results"
SCENARIOS = ("strategic_blobs", "strategic_blobs_rrm")
MEANS = np.array([[8.5, 0.0], [11.5, 0.0]])  # the classes' means (the scenarios' world)
SD, REACH = 1.5, 2.0


@dataclass
class Args:
    """Command-line arguments (each field's docstring is its --help)."""

    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """seeds (paired across the two scenarios: the same people)"""
    rounds: int = 15
    """rounds per run"""
    grid: int = 721
    """brute force: directions (and offsets) on the grid"""
    out: Path = RESULTS
    """output folder"""
    quick: bool = False
    """smoke test: two seeds, three rounds, a coarse grid, to a temp dir"""


def parse_args(argv: list[str] | None = None) -> Args:
    args = parse_dataclass_args(Args, __doc__.splitlines()[0], argv)
    if args.quick:
        args = replace(args, seeds=args.seeds[:2], rounds=3, grid=91, out=Path(tempfile.mkdtemp()))
    return args


def population_accuracy(g: np.ndarray, b):
    """Accuracy under the movers' response of the rule g·x + b ≥ 0 on the two blobs
    (equal shares), exactly; `b` a number or an array of offsets."""
    norm_g = float(np.linalg.norm(g))
    if norm_g == 0.0:
        return 0.5 + 0.0 * np.asarray(b)
    a = (MEANS @ g + np.asarray(b)[..., None] + REACH * norm_g) / (SD * norm_g)
    return 0.5 * (norm.cdf(a[..., 1]) + norm.sf(a[..., 0]))


def performative_optimum(grid: int) -> tuple[float, np.ndarray, float]:
    """Brute force over unit directions g (grid angles) and offsets b: the largest
    population accuracy under response, with its (g, b)."""
    best = (-1.0, np.zeros(2), 0.0)
    centre = MEANS.mean(0)
    for angle in np.linspace(0.0, 2 * np.pi, grid, endpoint=False):
        g = np.array([np.cos(angle), np.sin(angle)])
        # offsets: the boundary anywhere within 4 sd of the blobs' centre, on the grid
        offsets = -(g @ centre) + np.linspace(-4 * SD, 4 * SD, grid)
        acc = population_accuracy(g, offsets)
        k = int(np.argmax(acc))
        if acc[k] > best[0]:
            best = (float(acc[k]), g, float(offsets[k]))
    return best


def run(scenario: str, seed: int, rounds: int, optimum: float) -> list[dict]:
    env = RecourseEnv(scenario, rounds=rounds)
    env.reset(seed=seed)
    rows = []
    for r in range(rounds):
        g, b = env.learner.coef_[0], float(env.learner.intercept_[0])  # deployed this round
        _, _, _, _, info = env.step(None)
        everyone = info["metrics"][-1]
        acc = float(population_accuracy(g, b))
        rows.append(
            {
                "scenario": scenario,
                "seed": seed,
                "round": r + 1,
                "acc_under_response": everyone["acc_under_response"],
                "social_burden": everyone["social_burden"],
                "population_accuracy": acc,
                "gap": optimum - acc,
                "coef_1": g[0],
                "coef_2": g[1],
                "intercept": b,
                "theta_step": everyone["theta_step"],
            }
        )
    env.close()
    return rows


def main(args: Args) -> None:
    wall, cpu = time.perf_counter(), time.process_time()
    optimum, g_opt, b_opt = performative_optimum(args.grid)
    rows = []
    for scenario in SCENARIOS:
        for seed in args.seeds:
            rows += run(scenario, seed, args.rounds, optimum)
    table = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "strategic_blobs.csv", index=False, float_format="%.6g")
    seconds = (time.perf_counter() - wall, time.process_time() - cpu)
    text = _markdown(table, args, (optimum, g_opt, b_opt), seconds)
    (args.out / "strategic_blobs.md").write_text(text, encoding="utf-8")
    print(f"wrote {args.out}/strategic_blobs.md ({seconds[0]:.0f} s wall, {seconds[1]:.0f} s CPU)")


def _markdown(table: pd.DataFrame, args: Args, best, seconds) -> str:
    optimum, g_opt, b_opt = best

    def ci(values) -> str:
        m = mean_ci(values)
        return f"{m.mean:.3f} ± {m.half_width:.3f}"

    last = table["round"].max()
    lines = [
        "# Strategic classification on the Gaussian blobs: the optimum and the stable point",
        "",
        "strategic-ml's blob set-up as two bundled scenarios (the same world and seeds, so "
        "the same people): classes N((8.5, 0), 1.5²I) and N((11.5, 0), 1.5²I), 5,000 "
        "truthful rows to train on, 1,000 applicants a round (and one query person drawn "
        "like the favourable class), everyone rejected moving to the boundary when that "
        "costs at most 2 (Euclidean). `strategic_blobs`: the strategic hinge loss model "
        "(`learner.strategic: s_hinge`), kept. `strategic_blobs_rrm`: logistic regression "
        "refit each round on the round's responded reports (RRM). Mean ± 95 % Student-t "
        f"CI over seeds {list(args.seeds)}. Produced by `python analyses/strategic_blobs.py`.",
        "",
        f"Performative optimum over linear models (brute force, {args.grid} directions × "
        f"{args.grid} offsets): population accuracy under response {optimum:.4f} "
        f"(closed form Φ(1) = {norm.cdf(1.0):.4f}), boundary "
        f"{g_opt[0]:.3f}·x1 + {g_opt[1]:.3f}·x2 + {b_opt:.3f} = 0.",
        "",
        "| scenario | acc_under_response, round 1 (the first 1,000-row test set) | "
        f"acc_under_response, mean of rounds 1–{last} | population accuracy, round {last} | "
        f"gap to the optimum, round {last} | social_burden, mean | theta_step, round {last} |",
        "|---|---|---|---|---|---|---|",
    ]
    for scenario in SCENARIOS:
        t = table[table.scenario == scenario]
        per_seed = t.groupby("seed")
        lines.append(
            f"| {scenario} | {ci(t[t['round'] == 1].acc_under_response)} | "
            f"{ci(per_seed.acc_under_response.mean())} | "
            f"{ci(t[t['round'] == last].population_accuracy)} | "
            f"{ci(t[t['round'] == last].gap)} | {ci(per_seed.social_burden.mean())} | "
            f"{ci(t[t['round'] == last].theta_step)} |"
        )
    first = table[(table.scenario == SCENARIOS[0]) & (table["round"] == 1)]
    per_seed = ", ".join(f"{v:.3f}" for v in first.acc_under_response)
    late = table[(table.scenario == SCENARIOS[1]) & (table["round"] > last - 5)]
    boundary = -late.intercept / late.coef_1
    lines += [
        "",
        f"strategic_blobs, acc_under_response on each seed's first test set: {per_seed} "
        "(a 1,000-row test set's accuracy varies by about ± 0.023 around the population's, "
        "95 %).",
        "",
        f"RRM's stable point: its boundary (where x2 = 0) sits at x1 = "
        f"{ci(boundary.groupby(late.seed).mean())} over the last 5 rounds (the optimum's: "
        f"{-b_opt / g_opt[0]:.2f}; the first model's: ≈ 10). Its θ keeps moving along the "
        "boundary's normal (`theta_step` above: the scale of a logistic fit to a pile of "
        "movers sitting exactly on the last boundary varies with the round's draw) while the "
        "boundary and the accuracy stay put.",
    ]
    strategic = table[table.scenario == SCENARIOS[0]].groupby("seed").acc_under_response.mean()
    rrm = table[table.scenario == SCENARIOS[1]].groupby("seed").acc_under_response.mean()
    diff = paired_difference(strategic, rrm)
    rrm_rounds = table[table.scenario == SCENARIOS[1]].groupby("round").population_accuracy
    trajectory = ", ".join(f"{v:.3f}" for v in rrm_rounds.mean())
    lines += [
        "",
        f"Strategic minus RRM, acc_under_response (mean over rounds, paired by seed): "
        f"{diff.mean:+.3f} ± {diff.half_width:.3f} (p = {diff.p_value:.2g}).",
        "",
        f"RRM's population accuracy under response, round by round (mean over seeds): "
        f"{trajectory}.",
        "",
        f"Run time: {seconds[0]:.0f} s wall, {seconds[1]:.0f} s CPU (one process).",
        "",
        "## Deviations from strategic-ml's set-up",
        "",
        "| strategic-ml | here | why |",
        "|---|---|---|",
        "| movers go to the boundary plus a safety margin of 0.01 along w | movers stop "
        "exactly at the boundary (`margin: 0`; P(favourable) = 0.5 is favourable) | the "
        "simulator's min-cost recourse; the margin moves nobody's decision but those within "
        "0.01 of the reach |",
        "| the s-hinge model trained by Adam on the (non-convex) s-hinge risk | the exact "
        "minimiser: a hinge-loss SVM on the unmoved rows with its intercept lowered by "
        "2‖g‖ (`recourse_sim.learners.strategic`) | with an unpenalised intercept the two "
        "problems are the same |",
        "| one 1,000-row test set | a fresh 1,000-row set every round (round 1 is the "
        "first), 1,001 applicants with the one query person | the world draws a cohort a "
        "round |",
        "| accuracy 0.844 reported for its model, RRM climbing from 0.667 to 0.819 in 15 "
        "rounds (as quoted, not re-run here) | the numbers above | the exact optimum is "
        "Φ(1) = 0.841; a single 1,000-row test set is within ± 0.023 of it (95 %) |",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main(parse_args())
