"""How the deployed learner changes what a collective of fixed size achieves.

Ben-Dov, Fawkes, Samadi & Sanyal (ICML 2024, "The Role of Learning Algorithms in
Collective Action") ask whether a collective's success depends on the learning algorithm, not only
on its size: learners that up-weight rows the model gets wrong (DRO, JTT) or re-weight
by group change the collective's *effective* size. Here the collective is
``signal_planting``'s (Hardt et al. 2023's feature-label strategy in a crowd-labelled
Gaussian world: a share α of each round's 1,000 labelled rows reports x3 + --offset and
label 1; the model is refit on each round's rows), and the deployed model is one of

* ``logistic_regression`` — plain L2 logistic regression (ERM), the reference;
* ``reweighted`` — class-balancing importance weights;
* ``jtt`` — Just Train Twice (the plain fit's errors up-weighted by --upweight);
* ``chi2_dro`` — χ²-DRO of radius --rho (the robust risk minimised exactly),

all with C = 1 and the same window (`recourse_sim.learners.robust`). Success S(α): the
share of the next round's base rows that, carrying the signal, the refit model labels 1
(Hardt et al.'s success; mean over the rounds after --burn-in). Each learner runs with
the collective (α = --alpha) and without it (α = 0) on the same seeds, which see the
same people: the collective's gain S(α) − S(0) is paired per seed, and each learner's
gain is compared with ERM's, paired again (mean ± 95 % Student-t CI over the seeds).

Outputs in --out: ``learner_dependence.csv`` (learner, alpha, seed, success, accuracy,
cpu_seconds) and ``learner_dependence.md``.

    python analyses/learner_dependence.py            # the committed run
    python analyses/learner_dependence.py --quick    # a smoke test, to a temp dir
"""

from __future__ import annotations

import itertools
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the analyses' own helpers
from _args import parse_args as parse_dataclass_args

from recourse_sim.agents.signal import signal_success
from recourse_sim.env import RecourseEnv
from recourse_sim.stats import mean_ci, paired_difference

RESULTS = Path(__file__).resolve().parent / "results"
LEARNERS = ("logistic_regression", "reweighted", "jtt", "chi2_dro")


@dataclass
class Args:
    """Command-line arguments (each field's docstring is its --help)."""

    alpha: float = 0.01
    """the collective's share of each round's labelled rows (fixed)"""
    offset: float = 6.0
    """the planted signal: x3 raised by this much (feature units)"""
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """seeds (paired across learners and α)"""
    rounds: int = 10
    """rounds per run"""
    burn_in: int = 2
    """first rounds left out of the mean"""
    upweight: float = 5.0
    """jtt: weight of the plain fit's errors"""
    rho: float = 0.1
    """chi2_dro: radius of the χ² ball"""
    out: Path = RESULTS
    """output folder"""
    quick: bool = False
    """smoke test: two seeds, three rounds, to a temp dir"""


def parse_args(argv: list[str] | None = None) -> Args:
    args = parse_dataclass_args(Args, __doc__.splitlines()[0], argv)
    if args.quick:
        args = replace(
            args, seeds=args.seeds[:2], rounds=3, burn_in=1, out=Path(tempfile.mkdtemp())
        )
    return args


def learner_params(args: Args, learner: str) -> dict:
    """The learner's own hyperparameters besides C."""
    return {"jtt": {"upweight": args.upweight}, "chi2_dro": {"rho": args.rho}}.get(learner, {})


def run(args: Args, learner: str, alpha: float, seed: int) -> dict[str, float]:
    """One episode: the mean success and base-row accuracy after the burn-in, and the
    episode's CPU time."""
    start = time.process_time()
    env = RecourseEnv(
        "signal_planting",
        rounds=args.rounds,
        learner__type=learner,
        learner__params={"C": 1.0, **learner_params(args, learner)},
        populations__labellers__participation=alpha,
        populations__labellers__signal={"x3": args.offset},
        populations__labellers__epsilon=args.offset,
    )
    env.reset(seed=seed)
    offsets = env.strategies[0].offsets
    success, accuracy = [], []
    for r in range(args.rounds):
        c = env.state.cohort  # the next round's applicants: the refit model's test rows
        env.step(None)
        if r < args.burn_in:
            continue
        data = c.group == env.group_labels.index("data")
        success.append(signal_success(env.learner, c.X[data], offsets, 1))
        accuracy.append(float((env.learner.predict(c.X[data]) == c.y0[data]).mean()))
    env.close()
    return {
        "success": float(np.mean(success)),
        "accuracy": float(np.mean(accuracy)),
        "cpu_seconds": time.process_time() - start,
    }


def main(args: Args) -> None:
    wall, cpu = time.perf_counter(), time.process_time()
    rows = []
    for learner, alpha, seed in itertools.product(LEARNERS, (0.0, args.alpha), args.seeds):
        rows.append(
            {"learner": learner, "alpha": alpha, "seed": seed, **run(args, learner, alpha, seed)}
        )
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "learner_dependence.csv", index=False, float_format="%.6g")
    seconds = (time.perf_counter() - wall, time.process_time() - cpu)
    (args.out / "learner_dependence.md").write_text(
        _markdown(table, args, seconds), encoding="utf-8"
    )
    print(
        f"wrote {args.out}/learner_dependence.md ({seconds[0]:.0f} s wall, {seconds[1]:.0f} s CPU)"
    )


def _gain(table: pd.DataFrame, learner: str) -> np.ndarray:
    """S(α) − S(0) per seed (in seed order)."""
    t = table[table.learner == learner].set_index(["alpha", "seed"])["success"]
    with_ = t.xs(table.alpha.max(), level="alpha").sort_index()
    without = t.xs(0.0, level="alpha").sort_index()
    return (with_ - without).to_numpy()


def _markdown(table: pd.DataFrame, args: Args, seconds: tuple[float, float]) -> str:
    def ci(m) -> str:
        return f"{m.mean:.3f} ± {m.half_width:.3f}"

    lines = [
        "# Learner dependence of collective action",
        "",
        f"`signal_planting` (crowd-labelled Gaussian world; the model refit on each round's "
        f"1,000 labelled rows and 100 query people, C = 1): a collective of α = {args.alpha:g} "
        f"of the labelled rows reports x3 + {args.offset:g} and label 1. S: the share of the "
        "next round's base rows that, carrying the signal, the refit model labels 1 (mean over "
        f"rounds {args.burn_in + 1}–{args.rounds}). Mean ± 95 % Student-t CI over seeds "
        f"{list(args.seeds)}; every learner and α sees the same people per seed (paired). "
        f"jtt: upweight {args.upweight:g}; chi2_dro: ρ = {args.rho:g}, the robust risk "
        "minimised by L-BFGS. "
        "Produced by `python analyses/learner_dependence.py`.",
        "",
        "| learner | S(0) | S(α) | gain S(α) − S(0) | gain − ERM's gain (paired) | p | "
        "accuracy at α | CPU s per run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    erm = _gain(table, "logistic_regression")
    for learner in LEARNERS:
        t = table[table.learner == learner]
        gain = _gain(table, learner)
        versus = paired_difference(gain, erm)
        lines.append(
            f"| {learner} | {ci(mean_ci(t[t.alpha == 0].success))} | "
            f"{ci(mean_ci(t[t.alpha > 0].success))} | {ci(mean_ci(gain))} | "
            + (
                "(reference) | |"
                if learner == "logistic_regression"
                else f"{versus.mean:+.3f} ± {versus.half_width:.3f} | {versus.p_value:.3g} |"
            )
            + f" {ci(mean_ci(t[t.alpha > 0].accuracy))} | {t.cpu_seconds.mean():.2f} |"
        )
    verdicts = []
    for learner in LEARNERS[1:]:
        d = paired_difference(_gain(table, learner), erm)
        if d.mean - d.half_width > 0:
            word = "larger than ERM's"
        elif d.mean + d.half_width < 0:
            word = "smaller than ERM's"
        else:
            word = "not distinguishable from ERM's"
        verdicts.append(f"{learner}: {word} ({d.mean:+.3f} ± {d.half_width:.3f})")
    lines += [
        "",
        "**Reading.** A positive paired difference in the fifth column means the learner "
        "hands the same collective more success than ERM does: its effective collective "
        "size is larger. The collective's gain at this α, learner by learner (95 % CI "
        "beyond 0 or not): " + "; ".join(verdicts) + ". Ben-Dov, Fawkes, Samadi & Sanyal "
        "report that DRO-type learners, which up-weight the rows the model gets wrong (JTT, "
        "χ²-DRO here), strengthen small collectives and weaken large ones; the planted rows, "
        "labelled 1 on class 0's side, are such rows, and this collective is small "
        f"(α = {args.alpha:g}).",
        "",
        f"Run time: {seconds[0]:.0f} s wall, {seconds[1]:.0f} s CPU (one process).",
        "",
        "## Deviations from the paper",
        "",
        "The paper is not shipped with the project, and its experiments could not be "
        "checked line by line here: the rows below compare with its set-up as its abstract "
        "and summaries describe it (planting a signal; DRO-type re-weighting such as JTT "
        "and CVaR-DRO, and SGD; the effective collective size), not with a checked quote.",
        "",
        "| the paper's setting | here | why |",
        "|---|---|---|",
        "| models trained once on a dataset with a planted collective | the model refit "
        "every round on that round's rows (window 1), success measured on the next round's "
        "rows | the simulator's online loop; rounds are i.i.d. here, so each round is a "
        "repetition |",
        "| neural networks / real data | L2 logistic regression on a 3-feature Gaussian "
        "world | the signal_planting world, where the signal sits on a feature that "
        "carries nothing |",
        "| JTT's identification model: ERM stopped early | a full plain refit identifies "
        "the error set | one model family and solver for every learner |",
        "| DRO solved by stochastic gradient | χ²-DRO minimised by L-BFGS on its Danskin "
        "gradient, then the weighted Newton refit at the worst-case weights | one exact "
        "solution per refit; at ρ = 0.5 the robust optimum on these overlapping classes is "
        "the constant model (θ = 0), so the radius is 0.1 |",
        "| re-weighting by group | re-weighting by class (labels) | the learner sees "
        "features and labels only |",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main(parse_args())
