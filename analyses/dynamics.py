"""Long-term outcome dynamics: no recourse, individual only, collective OAR, both, GenRe.

Two bundled scenarios are run for many rounds and seeds under four *arms*, each an
override of the populations' participation α (the scenario file is not touched):

============  ==========================  ===============================
arm           individual population       collective population
============  ==========================  ===============================
``none``      participation 0             participation 0
``individual`` as in the scenario         participation 0
``collective`` participation 0            as in the scenario
``both``      as in the scenario          as in the scenario
============  ==========================  ===============================

The populations are found by strategy (``individual`` / ``collective_oar``): in
``school_assignment`` they are ``students`` and ``h1_students``, in ``lending_fico``
``applicants`` and ``black_borrowers``. Every arm runs the same seeds, so arm
differences are paired: a seed fixes the world's own random stream (the history, the
first model, every person's features and outcome noise), so two arms see the same
people as long as their decisions agree and the same newcomers always (common random
numbers, `recourse_sim.env.streams`); the strategies draw from streams of their own.
Paired differences are reported with 95 % Student-t confidence intervals over the seeds.

``lending_fico`` has a fifth arm, ``genre``: the ``individual`` arm with the individual
population switched to the ``genre`` strategy (same groups, labels, budget ε,
monotonicity and α): rejected applicants follow a GenRe sample (Garg, Nagalapatti &
Sarawagi) projected into their action set, the GenRe model refit every
``GENRE["retrain_every"]`` rounds on the loans the bank observed, instead of moving
along the model's gradient (PGD).

* ``school_assignment``: the query group S (high-achieving N2 students) is the group
  ``query``; its ``acceptance_rate`` is its H1-assignment rate. The issue's claim:
  collective OAR raises it above the no-collective run within 20 rounds, by at least
  5 percentage points averaged over the last rounds and the seeds. We report the
  averages over rounds 11–20 and over the last 10 rounds, paired per seed, for
  collective − none and both − individual.
* ``lending_fico``: mean credit score per group (Liu et al.'s delayed impact) and
  acceptance per group.
* Decision rules (Liu, Dean, Rolf, Simchowitz & Hardt 2018): ``lending_fico`` with no
  recourse (arm ``none``, as in the paper) under a grid of decision rules — uniform
  thresholds on P(repay) and thresholds for the query group (black applicants) alone,
  the other group keeping the scenario's threshold. For each rule and group: the
  selection rate of round 1 and the one-step change of the mean score Δμ (after round 1
  minus before it: the paper's outcome curve), and the change after all rounds. With
  +75 on repayment and −150 on default, lending to someone whose repayment probability
  is below 2/3 lowers their expected score, so a lenient enough rule causes *active
  harm* (Δμ < 0) to the group with more low scores; a strict one does not.

Outputs in --out (default ``analyses/results``):

``dynamics_<scenario>.csv``         arm, seed, round, group + every metric of `simulate`
``dynamics_<scenario>.png``         key metrics over rounds, mean ± 1 sd over seeds
``dynamics_school_claim.csv``       per seed: query H1 rate per arm and paired differences
``dynamics_lending_rules.csv``      rule, thresholds, seed, group: selection rate, Δμ
``dynamics_lending_rules_rounds.csv`` the rule runs per round (rule, seed, round, group, …)
``dynamics_lending_rules.png``      outcome curve Δμ vs selection rate; scores over rounds
``dynamics.md``                     the key numbers and the wall time

(the lending CSV and PNG include the ``genre`` arm, and ``dynamics.md`` compares it with
``individual``.)

    python analyses/dynamics.py [--quick] [--out DIR] [--scenarios school_assignment
        lending_fico] [--rounds N] [--seeds K] [--workers W]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from recourse_sim import stats as intervals
from recourse_sim.env import RecourseEnv
from recourse_sim.scenarios import Scenario, load_scenario
from recourse_sim.simulate import simulate

torch.set_num_threads(1)  # a loaded 2-core machine makes torch's thread pool far slower

RESULTS = Path(__file__).resolve().parent / "results"
SCENARIOS = ("school_assignment", "lending_fico")
RULES_SCENARIO = "lending_fico"

ARMS: dict[str, tuple[bool, bool]] = {
    # arm: (individual recourse on, collective OAR on)
    "none": (False, False),
    "individual": (True, False),
    "collective": (False, True),
    "both": (True, True),
}
ARM_COLOURS = {
    "none": "0.35",
    "individual": "tab:blue",
    "collective": "tab:red",
    "both": "tab:purple",
    "genre": "tab:green",
}

# The population strategies an arm switches off.
INDIVIDUAL_STRATEGIES = ("individual",)

# The GenRe arm: scenarios that have it and the genre population's settings (small and
# few refits: a run fits GenRe rounds / retrain_every times, ~1 s each). The memory
# keeps every row the refit bank has seen, the history included: the observed loans
# alone (approved at P(repay) >= 0.8) hold no GenRe source (a default the model scores
# <= 0.5), so a buffer of only those could never refit.
GENRE_ARM = "genre"
GENRE_SCENARIOS = ("lending_fico",)
GENRE = {
    "retrain_every": 10,
    "memory": 100_000,
    "epochs": 30,
    "layers": 1,
    "samples": 10,
    "temperature": 10.0,
    # targets: repaid loans the bank scores above 0.85, i.e. clearly above its 0.8 threshold
    "gamma": 0.85,
}
# The fields of an individual population that the genre population keeps.
SHARED_POPULATION_FIELDS = (
    "groups",
    "labels",
    "participation",
    "epsilon",
    "actionable",
    "increase_only",
    "decrease_only",
)
COLLECTIVE_STRATEGIES = ("collective_oar", "controlled")

# Decision rules of the lending comparison: thresholds on the model's P(repay).
UNIFORM_THRESHOLDS = (0.95, 0.9, 0.8, 2 / 3, 0.5, 0.3)
QUERY_GROUP_THRESHOLDS = (0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)
QUICK_UNIFORM_THRESHOLDS = (0.9, 0.3)
QUICK_QUERY_GROUP_THRESHOLDS = (0.5,)


@dataclass
class Args:
    """Command-line arguments of the dynamics analysis."""

    scenarios: tuple[str, ...] = SCENARIOS
    """Bundled scenarios to run the arms on (the rule comparison runs with lending_fico)."""
    rounds: int = 50
    """Rounds per run (school years, loan periods)."""
    seeds: int = 10
    """Number of seeds; run i of every arm and rule uses seed ``seed + i``."""
    seed: int = 0
    """First seed."""
    out: Path = RESULTS
    """Folder the CSV, PNG and Markdown files go to."""
    workers: int = 2
    """Worker processes (1: run in this process)."""
    quick: bool = False
    """Smoke test: 3 rounds, 2 seeds, 3 decision rules (unless --rounds/--seeds given)."""
    early: tuple[int, int] = (11, 20)
    """First and last round (inclusive) of the 'within 20 rounds' average of the school claim."""
    last: int = 10
    """Number of final rounds averaged for the long-run numbers."""
    claim_pp: float = 5.0
    """The school claim's margin: collective minus no-collective, in percentage points."""
    rules: bool = True
    """Run the lending decision-rule comparison (when lending_fico is among the scenarios)."""


@dataclass(frozen=True)
class Job:
    """One simulation run: a scenario with overrides, for one seed."""

    scenario: str  # bundled scenario name
    seed: int  # the environment's seed
    rounds: int  # rounds to run
    overrides: tuple[str, ...]  # dotted key=value overrides of the scenario
    labels: tuple[tuple[str, str | float], ...]  # columns identifying the run (arm or rule)


@dataclass
class Timing:
    """Wall times of the parts of a run, in seconds."""

    parts: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- the runs


def population_names(scenario: Scenario, strategies: Sequence[str]) -> list[str]:
    """Names of the scenario's populations following one of `strategies`."""
    return [name for name, pop in scenario.populations.items() if pop.strategy in strategies]


def arms(name: str) -> list[str]:
    """The arms run on scenario `name`."""
    return [*ARMS, GENRE_ARM] if name in GENRE_SCENARIOS else list(ARMS)


def arm_overrides(scenario: Scenario, arm: str) -> tuple[str, ...]:
    """Overrides switching off the populations `arm` leaves out (participation 0); the
    genre arm also turns the individual populations into genre ones."""
    if arm == GENRE_ARM:
        return (*arm_overrides(scenario, "individual"), *genre_overrides(scenario))
    individual_on, collective_on = ARMS[arm]
    off = []
    if not individual_on:
        off += population_names(scenario, INDIVIDUAL_STRATEGIES)
    if not collective_on:
        off += population_names(scenario, COLLECTIVE_STRATEGIES)
    return tuple(f"populations.{name}.participation=0" for name in off)


def genre_overrides(scenario: Scenario) -> tuple[str, ...]:
    """Overrides replacing each individual population by a genre population with the
    same eligibility, budget, monotonicity and participation."""
    out = []
    for name in population_names(scenario, INDIVIDUAL_STRATEGIES):
        pop = scenario.populations[name].model_dump(mode="json")
        block = {"strategy": "genre", **{k: pop[k] for k in SHARED_POPULATION_FIELDS}, **GENRE}
        out.append(f"populations.{name}={json.dumps(block)}")  # JSON is YAML
    return tuple(out)


def run_job(job: Job) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run one job: its tidy metrics and the world's per-group statistics before round 1."""
    torch.set_num_threads(1)  # also in spawned workers
    scenario = load_scenario(job.scenario, overrides=list(job.overrides))
    frame = simulate(scenario, rounds=job.rounds, seed=job.seed)
    initial = initial_group_stats(scenario, job.rounds, job.seed)
    for df in (frame, initial):
        for pos, (key, value) in enumerate([*job.labels, ("seed", job.seed)]):
            df.insert(pos, key, value)
    return frame, initial


def initial_group_stats(scenario: Scenario, rounds: int, seed: int) -> pd.DataFrame:
    """The world's per-group statistics (lending: mean score) at reset, i.e. round 0.

    `simulate` builds and resets the environment exactly like this, so these are the
    values its round 1 starts from.
    """
    env = RecourseEnv(scenario.model_copy(update={"rounds": rounds}))
    try:
        env.reset(seed=seed)
        stats = env.group_stats()
    finally:
        env.close()
    rows = []
    for g, name in enumerate(env.group_labels):
        rows.append({"round": 0, "group": name, **{k: float(v[g]) for k, (v, _) in stats.items()}})
    rows.append({"round": 0, "group": "all", **{k: float(o) for k, (_, o) in stats.items()}})
    return pd.DataFrame(rows)


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and of its worker processes that ended."""
    own, workers = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def run_all(jobs: list[Job], workers: int) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    """Run `jobs` in order (in `workers` processes if more than one)."""
    if workers <= 1:
        return [run_job(job) for job in jobs]
    # spawn, not fork: forking after torch has used its thread pool can deadlock
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        return list(pool.map(run_job, jobs))


def arm_jobs(name: str, args: Args) -> list[Job]:
    """The arms × seeds of one scenario."""
    scenario = load_scenario(name)
    return [
        Job(name, seed, args.rounds, arm_overrides(scenario, arm), (("arm", arm),))
        for arm in arms(name)
        for seed in range(args.seed, args.seed + args.seeds)
    ]


def rule_jobs(args: Args) -> list[Job]:
    """The lending decision rules × seeds, with no recourse (arm ``none``)."""
    scenario = load_scenario(RULES_SCENARIO)
    groups = scenario.world.groups
    query = query_group(scenario)
    base = scenario.decision.threshold
    uniform = QUICK_UNIFORM_THRESHOLDS if args.quick else UNIFORM_THRESHOLDS
    per_group = QUICK_QUERY_GROUP_THRESHOLDS if args.quick else QUERY_GROUP_THRESHOLDS
    rules: list[tuple[str, str, dict[str, float]]] = []
    for t in sorted({*uniform, base}, reverse=True):
        rules.append((f"all {t:.2f}", "uniform", dict.fromkeys(groups, t)))
    for t in per_group:
        thresholds = {g: (t if g == query else base) for g in groups}
        rules.append((f"{query} {t:.2f}", f"{query} only", thresholds))
    jobs = []
    off = arm_overrides(scenario, "none")
    for rule, kind, thresholds in rules:
        mapping = "{" + ", ".join(f"{g}: {t!r}" for g, t in thresholds.items()) + "}"
        overrides = (*off, f"decision.group_thresholds={mapping}")
        labels = (
            ("rule", rule),
            ("kind", kind),
            *((f"threshold_{g}", float(t)) for g, t in thresholds.items()),
        )
        jobs += [
            Job(RULES_SCENARIO, seed, args.rounds, overrides, labels)
            for seed in range(args.seed, args.seed + args.seeds)
        ]
    return jobs


def query_group(scenario: Scenario) -> str:
    """The one group the lending query (and so the collective) is about: the disadvantaged."""
    groups = scenario.query.groups or []
    assert len(groups) == 1, f"expected one query group, got {groups}"
    return groups[0]


# --------------------------------------------------------------------------- summaries


def per_seed_mean(
    frame: pd.DataFrame, group: str, metric: str, rounds: tuple[int, int], by: str = "arm"
) -> pd.DataFrame:
    """Mean of `metric` for `group` over rounds ``rounds[0]..rounds[1]``: one row per seed,
    one column per value of `by` (NaN when no round falls in the range)."""
    lo, hi = rounds
    sel = frame[(frame["group"] == group) & frame["round"].between(lo, hi)]
    wide = sel.groupby([by, "seed"])[metric].mean().unstack(by)
    seeds = sorted(frame["seed"].unique())
    return wide.reindex(index=seeds, columns=list(dict.fromkeys(frame[by])))


def last_rounds(frame: pd.DataFrame, last: int) -> tuple[int, int]:
    """The (first, last) round of the final `last` rounds of `frame`."""
    final = int(frame["round"].max())
    return max(1, final - last + 1), final


def school_claim(frame: pd.DataFrame, args: Args) -> pd.DataFrame:
    """Per seed: the query group's H1 rate per arm over the early and the last rounds, and
    the paired differences collective − none and both − individual (in rate units)."""
    parts = []
    for window, rounds in (("early", args.early), ("last", last_rounds(frame, args.last))):
        wide = per_seed_mean(frame, "query", "acceptance_rate", rounds)
        wide["collective_minus_none"] = wide["collective"] - wide["none"]
        wide["both_minus_individual"] = wide["both"] - wide["individual"]
        wide.insert(0, "rounds", f"{rounds[0]}-{rounds[1]}")
        wide.insert(0, "window", window)
        parts.append(wide.reset_index())
    out = pd.concat(parts, ignore_index=True)
    out.columns.name = None
    return out


def rule_summary(frames: pd.DataFrame, initial: pd.DataFrame) -> pd.DataFrame:
    """Per rule, seed and group: selection rate and mean-score changes (Liu et al.'s Δμ)."""
    keys = [c for c in frames.columns if c in ("rule", "kind") or c.startswith("threshold_")]
    keys += ["seed", "group"]
    frames = frames[frames["group"] != "query"]
    first = frames[frames["round"] == 1].set_index(keys)
    final = frames[frames["round"] == frames["round"].max()].set_index(keys)
    start = initial.set_index(keys)["mean_score"]
    out = pd.DataFrame(
        {
            "mean_score_initial": start,
            "selection_rate_round1": first["acceptance_rate"],
            "mean_score_round1": first["mean_score"],
            "delta_mu_round1": first["mean_score"] - start,
            "selection_rate_mean": frames.groupby(keys)["acceptance_rate"].mean(),
            "mean_score_final": final["mean_score"],
            "delta_mu_final": final["mean_score"] - start,
            "final_round": final["round"],
        }
    )
    order = list(dict.fromkeys(frames["rule"]))
    out = out.reset_index()
    out["_order"] = out["rule"].map(order.index)
    return out.sort_values(["_order", "seed", "group"]).drop(columns="_order")


def mean_sd(values: pd.Series | np.ndarray, scale: float = 1.0, digits: int = 1) -> str:
    """'mean ± sd' of finite values (scaled), or 'n/a'."""
    v = np.asarray(values, dtype=float) * scale
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return "n/a"
    sd = v.std(ddof=1) if len(v) > 1 else 0.0
    return f"{v.mean():.{digits}f} ± {sd:.{digits}f}"


def mean_ci(values: pd.Series | np.ndarray, scale: float = 1.0, digits: int = 1) -> str:
    """'mean [lo, hi]': the mean of finite values (scaled) and its 95 % Student-t
    confidence interval over them (the seeds), or 'n/a'."""
    ci = intervals.mean_ci(np.asarray(values, dtype=float) * scale)
    if ci.n == 0:
        return "n/a"
    if ci.n == 1:
        return f"{ci.mean:+.{digits}f} [n/a]"
    m, half = ci.mean, ci.half_width
    return f"{m:+.{digits}f} [{m - half:+.{digits}f}, {m + half:+.{digits}f}]"


PAIRED_METRICS = (
    ("query", "acceptance_rate", "query acceptance (pp)", 100, 1),
    ("all", "acceptance_rate", "acceptance (pp)", 100, 1),
    ("all", "model_accuracy", "accuracy (pp)", 100, 1),
    ("all", "auc", "AUC", 1, 3),
    ("all", "approved_favourable_rate", "approved favourable (pp)", 100, 1),
)
"""(group, metric, label, scale, digits) of the paired-difference tables."""


def paired_report(frame: pd.DataFrame, baseline: str, args: Args) -> list[str]:
    """Markdown lines: every arm minus `baseline`, per seed (the same seed: the same
    people as long as the decisions agree, the same newcomers always), averaged over the
    last rounds; mean and 95 % confidence interval over the seeds."""
    lo, hi = last_rounds(frame, args.last)
    arms_run = [a for a in dict.fromkeys(frame["arm"]) if a != baseline]
    n_seeds = frame["seed"].nunique()
    lines = [
        f"Paired differences arm − {baseline} (same seed), rounds {lo}-{hi}: mean "
        f"[95 % CI] over {n_seeds} seeds (Student t).",
        "",
        "| arm | " + " | ".join(m[2] for m in PAIRED_METRICS) + " |",
        "|---|" + "---|" * len(PAIRED_METRICS),
    ]
    for arm in arms_run:
        cells = []
        for group, metric, _, scale, digits in PAIRED_METRICS:
            wide = per_seed_mean(frame, group, metric, (lo, hi))
            cells.append(mean_ci(wide[arm] - wide[baseline], scale, digits))
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return lines


def everyone_approved(frame: pd.DataFrame, run_keys: Sequence[str]) -> str:
    """How often the model gave every applicant the loan: 'k of n rounds, in r of m runs'.

    A retrained model that approves everyone is a degenerate fit (near-separable training
    rows as scores polarise); the long-run numbers include these rounds.
    """
    rows = frame[(frame["group"] == "all") & (frame["round"] > 0)]
    hit = rows[rows["acceptance_rate"] >= 1.0]
    runs = rows.groupby(list(run_keys)).ngroups
    hit_runs = hit.groupby(list(run_keys)).ngroups if len(hit) else 0
    return f"{len(hit)} of {len(rows)} rounds, in {hit_runs} of {runs} runs"


# --------------------------------------------------------------------------- plots


def band(ax: plt.Axes, sub: pd.DataFrame, metric: str, colour: str, label: str) -> None:
    """Mean over seeds with a ±1 sd band, against the round."""
    stats = sub.groupby("round")[metric].agg(["mean", "std"]).fillna({"std": 0.0})
    x = stats.index.to_numpy()
    ax.plot(x, stats["mean"], color=colour, label=label, lw=1.5)
    ax.fill_between(
        x,
        stats["mean"] - stats["std"],
        stats["mean"] + stats["std"],
        color=colour,
        alpha=0.18,
        lw=0,
    )


def plot_arms(
    frame: pd.DataFrame,
    panels: Sequence[tuple[str, str, str]],
    title: str,
    path: Path,
    marks: tuple[int, int] | None = None,
) -> None:
    """One panel per (group, metric, label): every arm's mean ± 1 sd over seeds."""
    ncols = 3 if len(panels) > 4 else 2
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.6 * nrows), squeeze=False)
    for ax, (group, metric, label) in zip(axes.flat, panels, strict=False):
        for arm in dict.fromkeys(frame["arm"].dropna()):
            sub = frame[(frame["arm"] == arm) & (frame["group"] == group)]
            if len(sub) and sub[metric].notna().any():
                band(ax, sub, metric, ARM_COLOURS[arm], arm)
        if marks is not None:
            ax.axvspan(marks[0] - 0.5, marks[1] + 0.5, color="0.9", zorder=0)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8, title="arm", title_fontsize=8)
    n_seeds = frame["seed"].nunique()
    fig.suptitle(f"{title} — mean ± 1 sd over {n_seeds} seeds", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_rules(summary: pd.DataFrame, rounds: pd.DataFrame, query: str, path: Path) -> None:
    """Liu et al.'s outcome curve (Δμ vs selection rate), the long-run change, and the
    query group's mean score over rounds under the uniform rules."""
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    keys = ["rule", "kind", "group"]
    agg = summary.groupby(keys, sort=False).agg(
        sel1=("selection_rate_round1", "mean"),
        d1=("delta_mu_round1", "mean"),
        d1_sd=("delta_mu_round1", "std"),
        sel=("selection_rate_mean", "mean"),
        dT=("delta_mu_final", "mean"),
        dT_sd=("delta_mu_final", "std"),
    )
    agg = agg.reset_index().fillna({"d1_sd": 0.0, "dT_sd": 0.0})
    groups = [g for g in dict.fromkeys(agg["group"]) if g != "all"]
    colours = dict(zip(groups, ("tab:blue", "tab:orange", "tab:green"), strict=False))
    markers = {"uniform": "o"}
    for ax, (x, y, err, xlabel, ylabel) in zip(
        axes[:2],
        (
            ("sel1", "d1", "d1_sd", "selection rate (round 1)", "Δμ after one round (points)"),
            (
                "sel",
                "dT",
                "dT_sd",
                "mean selection rate (all rounds)",
                "Δμ after all rounds (points)",
            ),
        ),
        strict=True,
    ):
        for g in groups:
            for kind, sub in agg[agg["group"] == g].groupby("kind", sort=False):
                sub = sub.sort_values(x)
                ax.errorbar(
                    sub[x],
                    sub[y],
                    yerr=sub[err],
                    color=colours[g],
                    marker=markers.get(kind, "s"),
                    ls="-" if kind == "uniform" else "--",
                    ms=5,
                    capsize=2,
                    label=f"{g}, {kind} rule",
                )
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].set_title("outcome curve (Liu et al. 2018): below 0 = active harm", fontsize=10)
    axes[1].set_title("long run", fontsize=10)
    axes[0].legend(fontsize=7)
    ax = axes[2]
    uniform = rounds[(rounds["kind"] == "uniform") & (rounds["group"] == query)]
    cmap = plt.get_cmap("viridis")
    rules = list(dict.fromkeys(uniform["rule"]))
    for i, rule in enumerate(rules):
        band(
            ax,
            uniform[uniform["rule"] == rule],
            "mean_score",
            cmap(i / max(1, len(rules) - 1)),
            rule,
        )
    ax.set_title(f"{query} applicants' mean score, uniform thresholds", fontsize=10)
    ax.set_xlabel("round (0 = before any loan)")
    ax.set_ylabel("mean score (FICO points)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, title="P(repay) threshold", title_fontsize=7)
    n_seeds = summary["seed"].nunique()
    fig.suptitle(
        f"lending_fico, no recourse: decision rules vs delayed impact "
        f"({n_seeds} seeds, mean ± 1 sd)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- report


def school_report(claim: pd.DataFrame, frame: pd.DataFrame, args: Args) -> list[str]:
    """Markdown lines on the school claim."""
    lines = ["## school_assignment: the query group S's H1-assignment rate", ""]
    lines += [
        "Query group `query` = S (high-achieving N2 students); `acceptance_rate` = share "
        "assigned to H1. Mean ± sd over seeds of each seed's average over the rounds "
        "(percent).",
        "",
        "| window | rounds | " + " | ".join(ARMS) + " |",
        "|---|---|" + "---|" * len(ARMS),
    ]
    for window, sub in claim.groupby("window", sort=False):
        cells = [mean_sd(sub[arm], 100) for arm in ARMS]
        lines.append(f"| {window} | {sub['rounds'].iloc[0]} | " + " | ".join(cells) + " |")
    lines += ["", "Paired differences (same seed), percentage points:", ""]
    lines += [
        "| window | difference | mean ± sd | mean [95 % CI] | min | seeds ≥ claim | per seed "
        "| claim met |"
    ]
    lines += ["|---|---|---|---|---|---|---|---|"]
    for window, sub in claim.groupby("window", sort=False):
        for diff in ("collective_minus_none", "both_minus_individual"):
            v = sub[diff].to_numpy(dtype=float) * 100
            ok = np.isfinite(v)
            if not ok.any():
                lines.append(f"| {window} | {diff} | n/a | | | | | |")
                continue
            per_seed = ", ".join(f"{x:+.1f}" for x in v)
            met = "yes" if v[ok].mean() >= args.claim_pp else "**no**"
            lines.append(
                f"| {window} | {diff} | {mean_sd(v)} | {mean_ci(v)} | {v[ok].min():+.1f} | "
                f"{int((v[ok] >= args.claim_pp).sum())}/{int(ok.sum())} | {per_seed} | {met} |"
            )
    # other school metrics over the last rounds
    lo, hi = last_rounds(frame, args.last)
    lines += ["", f"Other metrics, rounds {lo}-{hi} (mean ± sd over seeds):", ""]
    metrics = [
        ("N1", "acceptance_rate", "N1 H1 rate %", 100),
        ("N2", "acceptance_rate", "N2 H1 rate %", 100),
        ("all", "dissimilarity_index", "dissimilarity index", 1),
        ("all", "model_accuracy", "model accuracy %", 100),
        ("query", "model_accuracy", "accuracy on S %", 100),
        ("all", "collective_participants", "collective participants", 1),
    ]
    lines += ["| arm | " + " | ".join(m[2] for m in metrics) + " |"]
    lines += ["|---|" + "---|" * len(metrics)]
    for arm in ARMS:
        cells = []
        for group, metric, _, scale in metrics:
            wide = per_seed_mean(frame, group, metric, (lo, hi))
            digits = 3 if scale == 1 and metric != "collective_participants" else 1
            cells.append(mean_sd(wide[arm], scale, digits))
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += ["", *paired_report(frame, "none", args)]
    return lines


def lending_report(frame: pd.DataFrame, initial: pd.DataFrame, args: Args) -> list[str]:
    """Markdown lines on the lending arms."""
    lo, hi = last_rounds(frame, args.last)
    final = int(frame["round"].max())
    groups = [g for g in dict.fromkeys(frame["group"]) if g not in ("query", "all")]
    arms_run = list(dict.fromkeys(frame["arm"]))
    lines = [f"## lending_fico: the {len(arms_run)} arms", ""]
    lines += [
        f"Mean score (FICO points) before round 1, after round {final}, and acceptance "
        f"(%, rounds {lo}-{hi}); mean ± sd over seeds.",
        "",
        "| arm | group | mean score before | mean score after | Δμ | acceptance % |",
        "|---|---|---|---|---|---|",
    ]
    start = initial.drop_duplicates(["seed", "group"]).set_index(["seed", "group"])["mean_score"]
    for arm in arms_run:
        for g in [*groups, "query"]:
            sub = frame[(frame["arm"] == arm) & (frame["group"] == g)]
            acc = mean_sd(
                sub[sub["round"].between(lo, hi)].groupby("seed")["acceptance_rate"].mean(), 100
            )
            if g == "query":
                lines.append(f"| {arm} | {g} | | | | {acc} |")
                continue
            end = sub[sub["round"] == final].set_index("seed")["mean_score"]
            s0 = start.xs(g, level="group").reindex(end.index)
            lines.append(
                f"| {arm} | {g} | {mean_sd(s0)} | {mean_sd(end)} | {mean_sd(end - s0)} | {acc} |"
            )
    lines += [
        "",
        "Rounds in which the retrained model approved every applicant: "
        f"{everyone_approved(frame, ['arm', 'seed'])}.",
        "",
        *paired_report(frame, "none", args),
    ]
    if GENRE_ARM in arms_run:
        lines += ["", *genre_report(frame, args)]
    return lines


def genre_report(frame: pd.DataFrame, args: Args) -> list[str]:
    """Markdown lines comparing the genre arm with the individual (PGD) arm."""
    lo, hi = last_rounds(frame, args.last)
    final = int(frame["round"].max())
    groups = [g for g in dict.fromkeys(frame["group"]) if g not in ("query", "all")]
    lines = ["### Rejected applicants following GenRe vs their own gradient step (PGD)", ""]
    lines += [
        f"All rounds 1-{final}, everyone: applicants seeking recourse per round, the share "
        "of them the final reports got approved (recourse success), their mean cost; "
        f"acceptance %, rounds {lo}-{hi}. GenRe settings: "
        + ", ".join(f"{k} {v}" for k, v in GENRE.items())
        + ". Mean ± sd over seeds.",
        "",
        "| arm | seekers / round | recourse success % | mean cost | acceptance % |",
        "|---|---|---|---|---|",
    ]
    everyone = frame[frame["group"] == "all"]
    late = per_seed_mean(frame, "all", "acceptance_rate", (lo, hi))
    for arm in ("individual", GENRE_ARM):
        per_seed = everyone[everyone["arm"] == arm].groupby("seed")
        lines.append(
            f"| {arm} | {mean_sd(per_seed['n_seekers'].mean())} | "
            f"{mean_sd(per_seed['recourse_success_rate'].mean(), 100)} | "
            f"{mean_sd(per_seed['mean_cost'].mean(), 1, 3)} | {mean_sd(late[arm], 100)} |"
        )
    lines += [
        "",
        f"Paired differences genre − individual (same seed): Δμ after {final} rounds "
        f"(FICO points) and acceptance (percentage points, rounds {lo}-{hi}); mean "
        "[95 % CI] over the seeds:",
        "",
        "| group | Δμ difference | acceptance difference |",
        "|---|---|---|",
    ]
    for g in [*groups, "query"]:
        acc = per_seed_mean(frame, g, "acceptance_rate", (lo, hi))
        acc_diff = mean_ci((acc[GENRE_ARM] - acc["individual"]).to_numpy(), 100)
        if g == "query":
            lines.append(f"| {g} | | {acc_diff} |")
            continue
        # same seed, same starting scores: the Δμ difference is that of the final scores
        end = per_seed_mean(frame, g, "mean_score", (final, final))
        mu = end[GENRE_ARM] - end["individual"]
        lines.append(f"| {g} | {mean_ci(mu.to_numpy())} | {acc_diff} |")
    return lines


def rules_report(summary: pd.DataFrame, rounds: pd.DataFrame, query: str) -> list[str]:
    """Markdown lines on the decision-rule comparison, with the Liu et al. checks."""
    final = int(summary["final_round"].max())
    lines = ["## lending_fico: decision rules and delayed impact (no recourse)", ""]
    lines += [
        "Thresholds on the model's P(repay); Δμ = change of the group's mean score "
        f"(FICO points) after round 1 and after round {final}, from before round 1. "
        "Mean ± sd over seeds.",
        "",
        "| rule | group | selection rate round 1 % | Δμ round 1 | mean selection % | "
        f"Δμ after {final} rounds |",
        "|---|---|---|---|---|---|",
    ]
    for (rule, group), sub in summary.groupby(["rule", "group"], sort=False):
        if group == "all":
            continue
        lines.append(
            f"| {rule} | {group} | {mean_sd(sub['selection_rate_round1'], 100)} | "
            f"{mean_sd(sub['delta_mu_round1'])} | {mean_sd(sub['selection_rate_mean'], 100)} | "
            f"{mean_sd(sub['delta_mu_final'])} |"
        )
    q = summary[summary["group"] == query].groupby("rule", sort=False)
    d1 = q["delta_mu_round1"].mean()
    sel = q["selection_rate_round1"].mean()
    order = sel.sort_values().index
    strict, lenient = order[0], order[-1]
    peak = d1.idxmax()
    harmed = list(d1[d1 < 0].index)
    lines += [
        "",
        f"Checks for the {query} group (one-step Δμ, the outcome curve of Liu et al.):",
        "",
        f"- strictest rule ({strict}, selection {100 * sel[strict]:.1f} %): "
        f"Δμ = {d1[strict]:+.1f} → {'no harm' if d1[strict] >= 0 else 'HARM'}",
        f"- most lenient rule ({lenient}, selection {100 * sel[lenient]:.1f} %): "
        f"Δμ = {d1[lenient]:+.1f} → {'active harm' if d1[lenient] < 0 else 'no active harm'}",
        f"- largest improvement: {peak} (selection {100 * sel[peak]:.1f} %, Δμ = {d1[peak]:+.1f})",
        f"- rules with active harm (Δμ < 0): {', '.join(harmed) if harmed else 'none'}",
        f"- Liu et al.'s shape (strict ≥ 0, lenient < 0, an interior maximum): "
        f"{'yes' if d1[strict] >= 0 and d1[lenient] < 0 else 'no'}",
        "",
        "Round 1 is decided by the first model (fit on the history), so the one-step Δμ "
        "measures the rule alone. Later rounds are decided by models retrained on the "
        "approved loans only; rounds in which such a model approved every applicant: "
        f"{everyone_approved(rounds, ['rule', 'seed'])}.",
    ]
    return lines


# --------------------------------------------------------------------------- main


def run(args: Args) -> dict[str, pd.DataFrame]:
    """Run everything `args` asks for; write the files; return the tables by file stem."""
    args.out.mkdir(parents=True, exist_ok=True)
    timing = Timing()
    started = time.perf_counter()
    tables: dict[str, pd.DataFrame] = {}
    report = [
        "# Long-term dynamics: no recourse, individual, collective OAR, both (and GenRe)",
        "",
        f"Command: `python analyses/dynamics.py{' --quick' if args.quick else ''} "
        f"--rounds {args.rounds} --seeds {args.seeds} --scenarios {' '.join(args.scenarios)}`; "
        f"seeds {args.seed}..{args.seed + args.seeds - 1} (the same seeds in every arm and "
        f"rule), {args.workers} worker(s), torch on 1 thread. Arms: participation α of the "
        "individual / collective populations set to 0 where the arm leaves them out.",
        "",
    ]
    for name in args.scenarios:
        t0 = time.perf_counter()
        results = run_all(arm_jobs(name, args), args.workers)
        frame = pd.concat([f for f, _ in results], ignore_index=True)
        initial = pd.concat([i for _, i in results], ignore_index=True)
        frame.to_csv(args.out / f"dynamics_{name}.csv", index=False, float_format="%.6g")
        tables[f"dynamics_{name}"] = frame
        if name == "school_assignment":
            claim = school_claim(frame, args)
            claim.to_csv(args.out / "dynamics_school_claim.csv", index=False, float_format="%.6g")
            tables["dynamics_school_claim"] = claim
            report += [*school_report(claim, frame, args), ""]
            panels = [
                ("query", "acceptance_rate", "query group S: H1-assignment rate"),
                ("N2", "acceptance_rate", "N2: H1-assignment rate"),
                ("all", "dissimilarity_index", "segregation (dissimilarity index, H1/H2)"),
                ("all", "model_accuracy", "model accuracy (all students)"),
            ]
            plot_arms(frame, panels, name, args.out / f"dynamics_{name}.png", marks=args.early)
        else:
            groups = [g for g in dict.fromkeys(frame["group"]) if g not in ("query", "all")]
            if "mean_score" in frame:
                report += [*lending_report(frame, initial, args), ""]
                # round 0: the scores before any loan, so the curves show the delayed impact
                scored = pd.concat([initial, frame], ignore_index=True)
            else:
                scored = frame
            panels = [(g, "mean_score", f"{g}: mean score (delayed impact)") for g in groups]
            panels = [p for p in panels if "mean_score" in frame]
            panels += [(g, "acceptance_rate", f"{g}: acceptance rate") for g in groups]
            panels += [
                ("query", "acceptance_rate", "query group: acceptance rate"),
                ("all", "model_accuracy", "model accuracy"),
            ]
            plot_arms(scored, panels, name, args.out / f"dynamics_{name}.png")
        timing.parts[name] = time.perf_counter() - t0
        print(f"{name}: {len(frame)} rows, {timing.parts[name]:.1f} s", flush=True)

    if args.rules and RULES_SCENARIO in args.scenarios:
        t0 = time.perf_counter()
        results = run_all(rule_jobs(args), args.workers)
        frames = pd.concat([f for f, _ in results], ignore_index=True)
        initial = pd.concat([i for _, i in results], ignore_index=True)
        summary = rule_summary(frames, initial)
        summary.to_csv(args.out / "dynamics_lending_rules.csv", index=False, float_format="%.6g")
        rounds = pd.concat([initial, frames], ignore_index=True)
        keys = [
            c for c in frames.columns if c in ("rule", "kind", "seed") or c.startswith("threshold_")
        ]
        rounds = rounds.sort_values([*keys, "round"], kind="stable", key=_rule_order(frames))
        cols = [
            *keys,
            "round",
            "group",
            "acceptance_rate",
            "mean_score",
            "true_outcome_rate",
            "model_accuracy",
        ]
        rounds = rounds[cols]
        rounds.to_csv(
            args.out / "dynamics_lending_rules_rounds.csv", index=False, float_format="%.6g"
        )
        tables["dynamics_lending_rules"] = summary
        tables["dynamics_lending_rules_rounds"] = rounds
        query = query_group(load_scenario(RULES_SCENARIO))
        plot_rules(summary, rounds, query, args.out / "dynamics_lending_rules.png")
        report += [*rules_report(summary, rounds, query), ""]
        timing.parts["lending rules"] = time.perf_counter() - t0
        seconds = timing.parts["lending rules"]
        print(f"lending rules: {summary['rule'].nunique()} rules, {seconds:.1f} s", flush=True)

    report += [*changes_report(tables, args), ""]
    total = time.perf_counter() - started
    report += ["## Wall time", ""]
    report += [f"- {part}: {seconds:.1f} s" for part, seconds in timing.parts.items()]
    report += [
        f"- total: {total:.1f} s ({args.workers} worker process(es) on a shared 2-core machine)",
        f"- CPU: {cpu_seconds():.1f} s (this process and its finished worker processes)",
        "",
    ]
    (args.out / "dynamics.md").write_text("\n".join(report), encoding="utf-8")
    print(f"total {total:.1f} s; wrote {args.out / 'dynamics.md'}")
    return tables


PREVIOUS = {
    "school: collective − none, rounds 11-20 (pp)": "10.8 ± 0.7",
    "school: both − individual, rounds 11-20 (pp)": "12.6 ± 0.8",
    "school: individual − none, query acceptance, last rounds (pp)": "1.6 ± 0.3",
    "school: mean cost of a seeker, arm individual, last rounds": "0.348 ± 0.005",
    "school: model accuracy, arm none, last rounds (%)": "60.6 ± 0.3",
    "school: recourse success of a seeker, arm individual, last rounds (%)": "0.3 ± 0.0",
    "school: individual − none, N2 H1 rate, last rounds (pp)": "0.3 ± 0.1",
    "lending_fico: mean cost of a seeker, arm individual, last rounds": "0.000 ± 0.000",
    "lending_fico: acceptance, collective − none, black, last rounds (pp)": "-0.0 ± 0.1",
    "lending_fico: Δμ genre − individual, white (points)": "-0.2 ± 1.2",
}
"""Headline numbers of the previous committed results (mean ± sd over the seeds), from
before school_assignment's seekers aimed a per-person margin above the cut-off with
capacity ties by lottery (they aimed exactly at the cut-off, ties going to the earlier
arrival), before its extracurricular activities were whole numbers, and before ``auc``
took scores within 1e-9 of each other as tied."""


def changes_report(tables: dict[str, pd.DataFrame], args: Args) -> list[str]:
    """Markdown lines: the previous results' headline numbers against this run's."""
    now: dict[str, str] = {}
    claim = tables.get("dynamics_school_claim")
    if claim is not None:
        early = claim[claim["window"] == "early"]
        now["school: collective − none, rounds 11-20 (pp)"] = mean_sd(
            early["collective_minus_none"], 100
        )
        now["school: both − individual, rounds 11-20 (pp)"] = mean_sd(
            early["both_minus_individual"], 100
        )
        school = tables["dynamics_school_assignment"]
        wide = per_seed_mean(school, "all", "model_accuracy", last_rounds(school, args.last))
        now["school: model accuracy, arm none, last rounds (%)"] = mean_sd(wide["none"], 100)
        last = last_rounds(school, args.last)
        wide = per_seed_mean(school, "query", "acceptance_rate", last)
        now["school: individual − none, query acceptance, last rounds (pp)"] = mean_sd(
            wide["individual"] - wide["none"], 100
        )
        wide = per_seed_mean(school, "all", "mean_cost", last)
        now["school: mean cost of a seeker, arm individual, last rounds"] = mean_sd(
            wide["individual"], digits=3
        )
        wide = per_seed_mean(school, "all", "recourse_success_rate", last)
        now["school: recourse success of a seeker, arm individual, last rounds (%)"] = mean_sd(
            wide["individual"], 100
        )
        wide = per_seed_mean(school, "N2", "acceptance_rate", last)
        now["school: individual − none, N2 H1 rate, last rounds (pp)"] = mean_sd(
            wide["individual"] - wide["none"], 100
        )
    lending = tables.get("dynamics_lending_fico")
    if lending is not None:
        wide = per_seed_mean(lending, "black", "acceptance_rate", last_rounds(lending, args.last))
        now["lending_fico: acceptance, collective − none, black, last rounds (pp)"] = mean_sd(
            wide["collective"] - wide["none"], 100
        )
        wide = per_seed_mean(lending, "all", "mean_cost", last_rounds(lending, args.last))
        now["lending_fico: mean cost of a seeker, arm individual, last rounds"] = mean_sd(
            wide["individual"], digits=3
        )
        final = int(lending["round"].max())
        end = per_seed_mean(lending, "white", "mean_score", (final, final))
        if GENRE_ARM in end:
            now["lending_fico: Δμ genre − individual, white (points)"] = mean_sd(
                end[GENRE_ARM] - end["individual"]
            )
    collective_note = "lending's collective"
    if lending is not None:
        moves = lending[(lending["arm"] == "collective") & (lending["group"] == "all")]
        cost = moves["collective_mean_cost"].mean()
        # cost units: a FICO point costs 0.01 (lending_fico's cost weight of the score)
        collective_note += f": its members change their reported scores by {100 * cost:.1f} points"
    lines = [
        "## What moved since the previous results, and why",
        "",
        "| number | previous | now |",
        "|---|---|---|",
    ]
    lines += [f"| {key} | {old} | {now.get(key, 'not run')} |" for key, old in PREVIOUS.items()]
    lending_moved = [
        key
        for key, old in PREVIOUS.items()
        if key.startswith("lending_fico") and key in now and now[key] != old
    ]
    lending_note = (
        f"its headline numbers moved ({'; '.join(lending_moved)}): the school's defaults do "
        "not reach it, so other changes to the code since the previous results did"
        if lending_moved
        else "its headline numbers are unchanged: the school's defaults do not reach it"
    )
    lines += [
        "",
        "- School seekers now aim a per-person margin above the cut-off (lognormal, median "
        "0.05 in P(H1)) and capacity ties go by lottery (`decision.ties: random`); before, "
        "every seeker aimed exactly at the cut-off, tied with the last admitted student and "
        "lost the tie to the earlier arrival, so almost none got H1 (recourse success in the "
        "table). Extracurricular activities are also whole numbers now (integer, step 1): a "
        "seeker's cheapest recourse is the exact typed optimum, so a seeker who cannot "
        "afford one more activity does not move and one who can overshoots the aim, and the "
        "collective's reports are whole activities. H1's places are fixed: every seeker who "
        "now overtakes the cut-off takes the place of a student just above it, in S or not, "
        "so S's gain from individual recourse is the balance of the S seekers admitted and "
        "the S students displaced. The none arm has neither seekers nor a collective; the "
        "collective arm can move only through the collective's whole reports.",
        "- `auc` takes scores within 1e-9 of each other (the capacity rule's grid) as tied; "
        "without a pile of seekers on one score this barely changes it.",
        f"- lending_fico: {lending_note}.",
        f"- ({collective_note}.)",
    ]
    return lines


def _rule_order(frames: pd.DataFrame):
    """A sort key keeping the rules in the order they were run."""
    order = {rule: i for i, rule in enumerate(dict.fromkeys(frames["rule"]))}

    def key(column: pd.Series) -> pd.Series:
        return column.map(order) if column.name == "rule" else column

    return key


def parse(argv: Sequence[str] | None = None) -> Args:
    """Args from the command line (``--quick`` shrinks what was not given explicitly)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke test: 3 rounds, 2 seeds")
    p.add_argument("--out", type=Path, default=Args.out)
    p.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(Args.scenarios))
    p.add_argument("--rounds", type=int, default=None, help=f"default {Args.rounds}")
    p.add_argument("--seeds", type=int, default=None, help=f"default {Args.seeds}")
    p.add_argument("--seed", type=int, default=Args.seed, help="first seed")
    p.add_argument("--workers", type=int, default=Args.workers)
    p.add_argument(
        "--no-rules", dest="rules", action="store_false", help="skip the rule comparison"
    )
    ns = p.parse_args(argv)
    args = Args(
        scenarios=tuple(ns.scenarios),
        out=ns.out,
        quick=ns.quick,
        seed=ns.seed,
        workers=ns.workers,
        rules=ns.rules,
    )
    if ns.quick:
        args = replace(args, rounds=3, seeds=2)
    if ns.rounds is not None:
        args = replace(args, rounds=ns.rounds)
    if ns.seeds is not None:
        args = replace(args, seeds=ns.seeds)
    if args.rounds < 1 or args.seeds < 1 or args.workers < 1:
        p.error("--rounds, --seeds and --workers must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, pd.DataFrame]:
    """Parse the arguments and run."""
    return run(parse(argv))


if __name__ == "__main__":
    main()
