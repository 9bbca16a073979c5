"""The strategic model against repeated retraining on strategic-ml's Gaussian blobs.

Two bundled scenarios, one world: two Gaussian classes 3 apart on x1 (sd 1.5 in both
features; 5,000 truthful rows train the first model, then 1,000 applicants a round),
and everyone the model rejects moves to its boundary when that costs at most 2
(Euclidean distance). ``strategic_blobs`` deploys the model trained with the strategic
hinge loss against exactly that response (``learner.strategic: s_hinge``) and keeps it;
``strategic_blobs_rrm`` refits a logistic regression every round on the round's
responded reports (repeated risk minimisation, RRM). Two more arms are that scenario
with one YAML change each: ``decision.threshold: σ(1/2) = 0.6225``, the rule
strategic-ml's blob tests train with (their loss is the cross-entropy of (s + 1)/2, so
their decision sign(s) accepts where the fitted probability is σ(1/2)), and
``learner.update_rule: refit`` (accumulated data).

Per round we record the columns ``acc_under_response`` and ``social_burden`` and the
deployed θ, and compute the *population* accuracy under response of θ exactly: a
person is accepted after responding when s(x) + 2‖g‖ ≥ 0 (s the score, g its weights),
and s(x) is Gaussian within each class, so the accuracy is ½[Φ(a₁) + 1 − Φ(a₀)] with
a_c = (g·μ_c + b + 2‖g‖) / (1.5 ‖g‖). The performative optimum over linear models is
found by brute force over a grid of directions and offsets (and equals Φ(1), the
accuracy of the best linear rule without any response, moved out by the reach); the
gap of each deployed θ to it is the stable-versus-optimal gap.

On each seed's first test set (round 1's applicants) we also score the optimum's rule
and the best linear rule for that very set in hindsight (brute force over directions,
every threshold): an upper bound on what any linear model, trained on anything, gets
there. With --reference (strategic-ml's own code on the same people,
``analyses/strategic_blobs_reference.sh``), the report sets its numbers beside ours.

Outputs in --out: ``strategic_blobs.csv`` (scenario, seed, round, acc_under_response,
social_burden, population_accuracy, gap, coef_1, coef_2, intercept, theta_step) and
``strategic_blobs.md``.

    python analyses/strategic_blobs.py            # the committed run
    python analyses/strategic_blobs.py --quick    # a smoke test, to a temp dir
    python analyses/strategic_blobs.py --export people.csv   # for the reference run
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
from recourse_sim.scenarios import load_scenario
from recourse_sim.stats import mean_ci, paired_difference

RESULTS = Path(__file__).resolve().parent / "results"
SCENARIOS = ("strategic_blobs", "strategic_blobs_rrm")
PLUS_ONE_THRESHOLD = float(1.0 / (1.0 + np.exp(-0.5)))  # σ(1/2)
THRESHOLD_ARM = "strategic_blobs_rrm, decision.threshold 0.6225"
REFIT_ARM = "strategic_blobs_rrm, update_rule refit"
# each arm: its scenario, decision threshold and overrides (one YAML change each; the
# same world and seeds: the same people)
ARMS = {
    SCENARIOS[0]: (SCENARIOS[0], 0.5, ()),
    SCENARIOS[1]: (SCENARIOS[1], 0.5, ()),
    THRESHOLD_ARM: (SCENARIOS[1], PLUS_ONE_THRESHOLD, ()),
    REFIT_ARM: (SCENARIOS[1], 0.5, ("learner.update_rule=refit", "learner.window=null")),
}
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
    reference: Path = RESULTS / "strategic_blobs_their_code.csv"
    """strategic-ml's own code on the same people (strategic_blobs_reference.sh); its
    section of the report is left out when the file is missing"""
    export: Path | None = None
    """only write the seeds' people (training rows, each round's applicants and the
    strategic model's decisions) to this CSV, for analyses/strategic_blobs_reference.py"""


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


def best_linear_accuracy(X: np.ndarray, y: np.ndarray, grid: int) -> float:
    """The largest accuracy under response of any linear rule on the people (X, y), in
    hindsight: brute force over `grid` directions u and every threshold. Moving out by
    the reach maps a rule without response onto one with it (accepted after responding
    iff u·x ≥ c − 2), so this is the best threshold accuracy of u·x over u."""
    positive = y.astype(bool)
    best = 0.0
    for angle in np.linspace(0.0, 2 * np.pi, grid, endpoint=False):
        order = np.argsort(X @ np.array([np.cos(angle), np.sin(angle)]))
        # accept the rows from k on (k = 0..n): negatives below k and positives from k
        neg_below = np.concatenate([[0], np.cumsum(~positive[order])])
        pos_from = np.concatenate([np.cumsum(positive[order][::-1])[::-1], [0]])
        best = max(best, float((neg_below + pos_from).max()) / len(y))
    return best


def run(label: str, seed: int, rounds: int, optimum: float) -> tuple[list[dict], tuple]:
    """One arm's rounds, and its first test set (round 1's applicants: X, y)."""
    scenario, threshold, changes = ARMS[label]
    overrides = [*changes] + ([] if threshold == 0.5 else [f"decision.threshold={threshold!r}"])
    env = RecourseEnv(load_scenario(scenario, overrides), rounds=rounds)
    env.reset(seed=seed)
    rows, first = [], None
    for r in range(rounds):
        g, b = env.learner.coef_[0], float(env.learner.intercept_[0])  # deployed this round
        _, _, _, _, info = env.step(None)
        if r == 0:
            people = env.people(features=True)
            first = (
                np.column_stack([people["feature_x1"], people["feature_x2"]]),
                people["true_favourable"],
            )
        everyone = info["metrics"][-1]
        # favourable when P ≥ threshold: when the score is at least logit(threshold)
        acc = float(population_accuracy(g, b - np.log(threshold / (1 - threshold))))
        rows.append(
            {
                "scenario": label,
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
    return rows, first


def export_people(seeds: tuple[int, ...], rounds: int, path: Path) -> None:
    """Each seed's people as one CSV (seed, part, x1, x2, y; part ``train``: the 5,000
    truthful rows the first model is trained on; part r: round r's applicants before
    they respond), with what `strategic_blobs` did to them (``ours_favourable``: its
    decision after the response; ``ours_x1``, ``ours_x2``: the reports they applied
    with; ``ours_coef_1``, ``ours_coef_2``, ``ours_intercept``: its θ), so that another
    implementation sees exactly the same people."""
    frames = []
    for seed in seeds:
        env = RecourseEnv(SCENARIOS[0], rounds=rounds)
        X, y = env.reset_until_fit(seed)
        frames.append(
            pd.DataFrame({"seed": seed, "part": "train", "x1": X[:, 0], "x2": X[:, 1], "y": y})
        )
        env.reset(seed=seed)  # the same streams again: the same history, then the rounds
        for r in range(rounds):
            g, b = env.learner.coef_[0], float(env.learner.intercept_[0])  # deployed
            env.step(None)
            people = env.people(features=True)
            frames.append(
                pd.DataFrame(
                    {
                        "seed": seed,
                        "part": str(r + 1),
                        "x1": people["feature_x1"],
                        "x2": people["feature_x2"],
                        "y": people["true_favourable"].astype(int),
                        "ours_favourable": people["favourable"].astype(int),
                        "ours_x1": people["reported_x1"],
                        "ours_x2": people["reported_x2"],
                        "ours_coef_1": g[0],
                        "ours_coef_2": g[1],
                        "ours_intercept": b,
                    }
                )
            )
        env.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.concat(frames).to_csv(path, index=False, float_format="%.17g")


def main(args: Args) -> None:
    if args.export is not None:
        export_people(args.seeds, args.rounds, args.export)
        print(f"wrote {args.export}")
        return
    wall, cpu = time.perf_counter(), time.process_time()
    optimum, g_opt, b_opt = performative_optimum(args.grid)
    rows, test_sets = [], []
    for label in ARMS:
        for seed in args.seeds:
            arm_rows, first = run(label, seed, args.rounds, optimum)
            rows += arm_rows
            if label == SCENARIOS[0]:
                X, y = first
                accepted = X @ g_opt + b_opt + REACH * np.linalg.norm(g_opt) >= 0
                test_sets.append(
                    {
                        "seed": seed,
                        "optimum_rule": float(np.mean(accepted == y)),
                        "hindsight": best_linear_accuracy(X, y, args.grid),
                    }
                )
    table = pd.DataFrame(rows)
    test_sets = pd.DataFrame(test_sets).set_index("seed")
    reference = pd.read_csv(args.reference) if args.reference.exists() else None
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "strategic_blobs.csv", index=False, float_format="%.6g")
    seconds = (time.perf_counter() - wall, time.process_time() - cpu)
    section = _side_by_side(table, test_sets, reference)
    text = _markdown(table, args, (optimum, g_opt, b_opt), seconds, section)
    (args.out / "strategic_blobs.md").write_text(text, encoding="utf-8")
    print(f"wrote {args.out}/strategic_blobs.md ({seconds[0]:.0f} s wall, {seconds[1]:.0f} s CPU)")


def ci(values) -> str:
    m = mean_ci(values)
    return f"{m.mean:.3f} ± {m.half_width:.3f}"


def diff_ci(a, b) -> str:
    d = paired_difference(a, b)
    return f"{d.mean:+.3f} ± {d.half_width:.3f}"


def _markdown(table: pd.DataFrame, args: Args, best, seconds, section: list[str]) -> str:
    optimum, g_opt, b_opt = best

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
        "refit each round on the round's responded reports (RRM). Two more arms, each one "
        "YAML change of `strategic_blobs_rrm`: `decision.threshold: 0.6225` (σ(1/2): the "
        "rule strategic-ml's blob tests train, below) and `learner.update_rule: refit` "
        "(every row so far, the 5,000 truthful ones included). Mean ± 95 % Student-t "
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
    for scenario in ARMS:
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
        *section,
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
        "| accuracy 0.844 quoted for its model, repeated retraining quoted as climbing from "
        "0.667 to 0.819 in 15 rounds | their own code re-run on the same people (section "
        "above; without the reference file: not re-run) | the quoted runs' data, test sets "
        "and loops are not known; the exact optimum is Φ(1) = 0.841, and a single 1,000-row "
        "test set is within ± 0.023 of it (95 %) |",
        "| their blob test: blobs 11 apart (on CPU), its own generator, which reseeds torch "
        "on every call, so its validation set is its test set | blobs 3 apart (the quoted "
        "set-up), this world's people on both sides, validation: round 2's applicants | the "
        "same people for both codes; the test set kept out of early stopping |",
        "| `ModelSuit` trained by a Lightning `Trainer` | the same `ModelSuit` code per "
        "batch in a plain loop | checked equal to a `Trainer` run (3 epochs) each run |",
        "| no repeated retraining in the library | a loop of their parts: respond by their "
        "delta, retrain on the responded rows (10 epochs warm, or to convergence) | the "
        "retraining the quoted numbers describe |",
        "",
    ]
    return "\n".join(lines)


def decision_boundary(t: pd.DataFrame, threshold: float = 0.5) -> pd.Series:
    """Where each row's rule accepts from on the x1 axis (x2 = 0): score = logit(threshold)."""
    return (np.log(threshold / (1 - threshold)) - t.intercept) / t.coef_1


def _side_by_side(table: pd.DataFrame, test_sets: pd.DataFrame, reference) -> list[str]:
    """Each seed's first test set: ours, strategic-ml's own code (when `reference` is a
    table of analyses/strategic_blobs_reference.py), the optimum's rule and the best
    rule in hindsight; then repeated retraining both ways."""
    target = 0.834
    rounds = table.pivot_table(
        index=["scenario", "seed"], columns="round", values="acc_under_response"
    )
    ours = rounds.loc[SCENARIOS[0]][1]
    columns = {"ours (exact s-hinge, our response)": ours}
    if reference is not None:
        first = reference[reference["round"] == 1].pivot(
            index="seed", columns="arm", values="acc_under_response"
        )
        epochs = reference[reference.arm == "s_hinge_early_stop"].set_index("seed").epochs
        columns |= {
            "ours under their response": first.ours_under_their_response,
            "theirs: their blob test's loop, early stop": first.s_hinge_early_stop,
            "theirs: the same loop, 100 epochs": first.s_hinge_100_epochs,
            "theirs: their s-hinge risk minimised (L-BFGS)": first.s_hinge_lbfgs,
        }
    columns |= {
        "the optimum's rule (boundary x1 = 12)": test_sets.optimum_rule,
        "best linear rule for this set, in hindsight": test_sets.hindsight,
    }
    seeds = list(ours.index)
    frame = pd.DataFrame({k: pd.Series(v).reindex(seeds) for k, v in columns.items()})
    title = (
        "strategic-ml's own code on the same people"
        if reference is not None
        else ("Each seed's first test set")
    )
    lines = ["", f"## {title}", ""]
    if reference is not None:
        check = float(reference.trainer_check.max())
        lines += [
            "strategic-ml 0.1.0 (PyPI), run by `analyses/strategic_blobs_reference.sh` on "
            "exactly these seeds' people (`--export` writes the 5,000 training rows and "
            "each round's 1,001 applicants before they respond): their `LinearModel`, "
            "their response (`LinearStrategicDelta`, L2 cost: the rejected move to the "
            "boundary plus 0.01 along w when that costs less than 2), their strategic "
            "hinge loss and L2 regularisation (0.0003), their `ModelSuit`'s loss and "
            "optimiser, in their blob test's loop (Adam lr 0.005, batches of 32, start "
            "w = (1, 0), b = −10, early stopping with patience 16 on the validation "
            "zero-one loss; validation: round 2's applicants). The loop is written out "
            "plainly (their `ModelSuit` code per batch); after 3 epochs it equals a "
            "Lightning `Trainer` on the same `ModelSuit` "
            + ("exactly (the same θ)" if check == 0 else f"to {check:.1g} in θ")
            + ". Accuracy "
            "under response is measured with their response on round 1's applicants; "
            "their `ModelSuit` reports the s-hinge model's zero-one loss on the unmoved "
            f"rows instead. Their run took {reference.run_wall_s.iloc[0]:.0f} s wall, "
            f"{reference.run_cpu_s.iloc[0]:.0f} s CPU (one process, shared machine).",
            "",
        ]
    lines += [
        "| seed | " + " | ".join(frame.columns) + " |",
        "|---" * (len(frame.columns) + 1) + "|",
    ]
    for seed, row in frame.iterrows():
        cells = [f"{v:.3f}" for v in row]
        if reference is not None and seed in epochs.index:
            k = list(frame.columns).index("theirs: their blob test's loop, early stop")
            cells[k] += f" (epoch {int(epochs[seed])})"
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    lines.append("| mean ± 95 % CI | " + " | ".join(ci(frame[c]) for c in frame) + " |")
    lines.append(
        f"| sets ≥ {target} | "
        + " | ".join(f"{int((frame[c] >= target).sum())} of {len(frame)}" for c in frame)
        + " |"
    )
    lines.append(
        "| minus ours, paired | "
        + " | ".join(diff_ci(frame[c], frame.iloc[:, 0]) for c in frame)
        + " |"
    )
    below = frame.iloc[:, -2] < target
    optimum = norm.cdf(1.0)
    each = float(norm.cdf((optimum - target) / np.sqrt(optimum * (1 - optimum) / 1000)))
    hindsight = frame.iloc[:, -1]
    unreachable = hindsight < target
    lines += [
        "",
        f"The optimum's own rule (population accuracy Φ(1) = {norm.cdf(1.0):.4f}) scores "
        f"below {target} on {int(below.sum())} of the {len(frame)} sets"
        + (f" (seeds {', '.join(str(s) for s in frame.index[below])})" if below.any() else "")
        + f": the quoted 0.844 and the target {target} are single 1,000-row test sets, "
        "whose accuracy scatters about ± 0.023 (95 %) around the population's: the "
        f"optimum itself scores ≥ {target} on one with probability ≈ {each:.2f}, on all "
        f"{len(frame)} with ≈ {each ** len(frame):.2f} (binomial, n = 1,000). The best "
        "linear rule for each set in hindsight, an upper bound for any linear model "
        f"trained on anything, reaches {hindsight.min():.3f} to {hindsight.max():.3f}"
        + (
            f"; on seeds {', '.join(str(s) for s in frame.index[unreachable])} no linear "
            f"model at all reaches {target}."
            if unreachable.any()
            else f": where the optimum's rule is below {target}, a model reaches it only "
            "by departing from the optimum in the direction that set happens to favour."
        ),
    ]
    if reference is None:
        return lines
    theirs = reference.set_index(["arm", "seed"])
    lbfgs = theirs.loc["s_hinge_lbfgs"]
    ours_theta = table[(table.scenario == SCENARIOS[0]) & (table["round"] == 1)].set_index("seed")
    scale = np.hypot(lbfgs.coef_1, lbfgs.coef_2) / np.hypot(ours_theta.coef_1, ours_theta.coef_2)
    lines += [
        "",
        "Why the Stackelberg numbers differ, measured:",
        "",
        f"- **Their loss is ours.** Minimised (L-BFGS), their s-hinge risk puts the "
        f"boundary at x1 = {ci(decision_boundary(lbfgs))} (ours: "
        f"{ci(decision_boundary(ours_theta))}; the optimum's: 12); their θ is ours "
        f"scaled by {ci(scale)} (their regularisation λ(‖w‖ + |b|) against our "
        "‖w‖²/2C), the same rule.",
        f"- **Their loop does not reach it.** From w = (1, 0), b = −10, Adam at lr 0.005 "
        "moves w1 and b together while their ratio, the boundary, barely moves (x1 ≈ 10 "
        "makes the two nearly collinear; after 100 epochs w1 = "
        f"{ci(theirs.loc['s_hinge_100_epochs'].coef_1)}, b = "
        f"{ci(theirs.loc['s_hinge_100_epochs'].intercept)}): after "
        f"{', '.join(str(int(e)) for e in epochs)} epochs (early stop; seeds "
        f"{', '.join(str(s) for s in epochs.index)}) the boundary is at x1 = "
        f"{ci(decision_boundary(theirs.loc['s_hinge_early_stop']))}, after 100 at "
        f"{ci(decision_boundary(theirs.loc['s_hinge_100_epochs']))}.",
        "- **Their margin of 0.01 changes nothing here**: our model under their response "
        "minus under ours, paired: "
        f"{diff_ci(frame['ours under their response'], frame.iloc[:, 0])}.",
    ]
    return lines + _retraining(table, reference)


def _retraining(table: pd.DataFrame, reference: pd.DataFrame) -> list[str]:
    """Repeated retraining: our arms and strategic-ml's components, round by round."""
    shown = [r for r in (1, 2, 3, 5, 10, 15) if r <= table["round"].max()]
    arms = {
        "ours: `strategic_blobs_rrm` (logistic, C = 1)": (table, SCENARIOS[1]),
        f"ours: {THRESHOLD_ARM}": (table, THRESHOLD_ARM),
        f"ours: {REFIT_ARM} (all rows so far)": (table, REFIT_ARM),
        "theirs, logistic loss, fit to convergence": (reference, "rrm_logistic_exact"),
        "theirs, their tests' loss, fit to convergence": (reference, "rrm_exact"),
        "theirs, logistic loss, their loop (10 epochs a round)": (reference, "rrm_logistic_warm"),
        "theirs, their tests' loss, their loop (10 epochs a round)": (reference, "rrm_warm"),
    }
    last = max(shown)
    seeds = sorted(table.seed.unique())
    per_seed, boundary = {}, {}
    for name, (source, arm) in arms.items():
        key = "scenario" if source is table else "arm"
        rows = source[source[key] == arm]
        acc = rows.pivot(index="seed", columns="round", values="acc_under_response")
        per_seed[name] = acc.reindex(seeds)  # the same seeds on every side (pairs)
        threshold = ARMS[arm][1] if source is table else 0.5
        at_last = rows[rows["round"] == last].set_index("seed")
        boundary[name] = decision_boundary(at_last, threshold).reindex(seeds)
    lines = [
        "",
        "Repeated retraining (their library has no retraining loop; the reference builds "
        "one from its parts): each round the deployed model meets the round's applicants "
        "(the same people as ours), who respond, and is retrained on their responded rows "
        "alone. Their blob tests train the plain model on the cross-entropy of (s + 1)/2: "
        "the decision sign(s) then accepts where the fitted probability is σ(1/2) = "
        f"{PLUS_ONE_THRESHOLD:.4f}, which is our logistic regression with "
        "`decision.threshold: 0.6225`. Accuracy under response on each round's applicants:",
        "",
        "| arm | "
        + " | ".join(f"round {r}" for r in shown)
        + f" | mean of rounds 1–{last} | decision boundary x1, round {last} |",
        "|---" * (len(shown) + 3) + "|",
    ]
    for name, acc in per_seed.items():
        lines.append(
            f"| {name} | "
            + " | ".join(ci(acc[r]) for r in shown)
            + f" | {ci(acc.mean(axis=1))} | {ci(boundary[name])} |"
        )
    rrm_rounds, _, refit_rounds, *_ = per_seed.values()
    ours_rrm, ours_threshold, _, logistic, plus_one, logistic_warm, plus_one_warm = (
        acc.mean(axis=1) for acc in per_seed.values()
    )
    plain = reference[reference.arm.isin(["plain", "plain_logistic"])]
    plain_exact = reference[reference.arm.isin(["plain_exact", "plain_logistic_exact"])]
    top = max(per_seed, key=lambda name: per_seed[name][last].mean())
    lines += [
        "",
        f"Why the retraining numbers differ, measured (paired by seed, mean of rounds 1–{last}):",
        "",
        f"- **Fit to convergence, their parts give our numbers**: their logistic fit minus "
        f"our RRM {diff_ci(logistic, ours_rrm)}; their tests' loss minus our threshold "
        f"arm {diff_ci(plus_one, ours_threshold)}.",
        f"- **The loss moves the stable point**: their tests' loss minus the logistic "
        f"{diff_ci(plus_one, logistic)}; our threshold arm minus our RRM "
        f"{diff_ci(ours_threshold, ours_rrm)}. Accepting from a fitted probability of "
        "σ(1/2) instead of 1/2 settles the boundary further out, toward the optimum's 12 "
        "(decision boundaries in the table).",
        f"- **Their loop lags**: from torch's default start, their plain model ends (after "
        f"100 epochs, or at early stopping: {int((plain.epochs < 100).sum())} of "
        f"{len(plain)} runs) with its boundary at x1 = {ci(decision_boundary(plain))} "
        f"(the exact fits': {ci(decision_boundary(plain_exact))}), and 10 epochs a round "
        f"follow the exact fit from below: their loop minus their exact fit, their tests' "
        f"loss {diff_ci(plus_one_warm, plus_one)}, logistic "
        f"{diff_ci(logistic_warm, logistic)}.",
        f"- **Accumulated data** (`update_rule: refit`, every row so far, the 5,000 "
        f"truthful ones included) climbs slowly toward the same stable point: round {last} "
        f"{ci(refit_rounds[last])} against fresh data's {ci(rrm_rounds[last])}.",
        f"- The highest round-{last} accuracy of any retraining arm here is "
        f"{ci(per_seed[top][last])} ({top})"
        + (
            ": the quoted climb from 0.667 to 0.819 is reproduced by none of them, theirs "
            "or ours, on these people."
            if per_seed[top][last].mean() < 0.819
            else "."
        ),
    ]
    return lines


if __name__ == "__main__":
    main(parse_args())
