"""Learning to coordinate: PPO for a controlled collective vs the analytic baselines.

For each controlled scenario (``school_assignment_controlled``: current H1 students shift
their reported extracurriculars for the high-achieving N2 students S;
``lending_fico_controlled``: observed borrowers under-report their scores for
creditworthy black applicants) we train PPO (stable-baselines3) from several seeds, then
evaluate on held-out seeds, one episode each, with the same evaluation loop:

* ``none`` — the collective stays idle;
* ``individual`` — members move their reports the way individual recourse (OAR Eq. 2)
  would move a query subject, uncoordinated;
* ``oar`` — collective OAR (Eq. 3, horizon H) on the round's real training rows and
  members, expressed as a shared move per class (privileged: it sees the learner and
  the rows, see `recourse_sim.agents.policies`);
* ``ppo`` — each trained policy, deterministic (the Gaussian's mean).

With ``--action oar`` every policy plays the scenario with its controlled population's
``action: oar`` (the v2 action, `recourse_sim.agents.OAR_ACTION`: OAR's own settings,
centred so that the zero action is collective OAR): PPO learns when to act, how many
members act, how much they spend and at what goal, starting near OAR (one world per
run, rollouts of 500 rounds, a small initial SD: --oar-log-std-init). ``oar`` is then
the constant zero action, which is the ``collective_oar`` population exactly (each
member's own OAR solution, not the class means of the shift action); ``none`` the
constant action with ``act`` = -1 (nobody moves); ``individual`` keeps its meaning, a
shared shift, so it plays the same scenario with the shift action (the same worlds and
draws: only the controlled collective's action differs). The outputs then carry the
suffix ``_oar`` (``coordinator_oar.md``, ``coordinator_oar_comparison.csv``, ...).

Outputs in --out: ``coordinator_comparison.csv`` (scenario, policy, seed, query_success,
reward, train_seed: the PPO model's training seed, -1 for the baselines; query_success
and reward are means per round of one held-out episode), ``coordinator_curves.csv``
(one row per training episode), ``coordinator_curves.png`` (learning curves with the
baselines' held-out means), ``coordinator_summary.json`` (settings, timings, means) and
``coordinator.md`` (the table and what it says).

    python analyses/train_coordinator.py            # the committed run (minutes, 2 CPUs)
    python analyses/train_coordinator.py --quick    # a smoke test (< 2 min), to a temp dir
    python analyses/train_coordinator.py --action oar --timesteps 30000 30000
    python analyses/train_coordinator.py --action oar --timesteps 30000 30000 --cost-weight 0

``--cost-weight`` sets λ of the reward for every policy (0: the query success alone, the
acceptance metric; OAR itself ignores cost); the outputs then carry ``_lambda<λ>``.
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from multiprocessing import get_context
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the analyses' own helpers
from _args import parse_args as parse_dataclass_args

from recourse_sim.agents import OAR_ACTION
from recourse_sim.agents.policies import AnalyticPolicy, evaluate, make_baseline
from recourse_sim.agents.training import PPOConfig, train_ppo
from recourse_sim.env import RecourseEnv
from recourse_sim.env.batched import native_reason
from recourse_sim.errors import ConfigError
from recourse_sim.scenarios import load_scenario
from recourse_sim.stats import mean_ci

RESULTS = Path(__file__).resolve().parent / "results"
BASELINES = ("none", "individual", "oar")
POLICIES = (*BASELINES, "ppo")


@dataclass
class Args:
    """Command-line arguments (each field's docstring is its --help)."""

    scenarios: tuple[str, ...] = ("school_assignment_controlled", "lending_fico_controlled")
    """controlled scenarios to train and compare on"""
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """training seeds, one PPO run (and learning curve) each"""
    eval_seeds: tuple[int, ...] = tuple(range(1000, 1010))
    """held-out seeds, one evaluation episode each, shared by every policy"""
    timesteps: tuple[int, ...] = (30000, 60000)
    """PPO training rounds per run, one number per scenario (20 rounds = one episode)"""
    n_steps: int = 500
    """rounds collected between PPO updates (summed over the worlds of a run)"""
    n_envs: int = 10
    """worlds of the native batched env each PPO run steps together"""
    learning_rate: float = 1e-3
    """PPO's Adam step size"""
    gamma: float = 0.7
    """discount per round (a round's action acts mostly on the next model)"""
    log_std_init: float = 0.0
    """initial log SD of PPO's Gaussian policy (0: SD 1 action unit, broad exploration)"""
    action: str = "shift"
    """the controlled collective's action: shift (one shared move per training label, the
    v1 IDs) or oar (OAR's own settings, the v2 IDs; zero is collective OAR)"""
    oar_log_std_init: float = -1.0
    """with --action oar: initial log SD of PPO's Gaussian (-1: SD 0.37, so the first
    policy stays near its mean, OAR, and keeps OAR's act and goal in 91 % of draws)"""
    oar_n_steps: int = 500
    """with --action oar: rounds per rollout of the one world each PPO run steps (the
    v2 action has no native batched env, so --n-envs is not used)"""
    cost_weight: float | None = None
    """λ of the reward (query success − λ · mean cost) for every policy (None: the
    scenario's, 0.1); 0 makes the reward the query success alone. Outputs then carry
    the suffix _lambda<λ>"""
    oar_horizon: int = 1
    """look-ahead H of the collective OAR baseline (model updates)"""
    oar_steps: int = 10
    """projected-gradient steps of each OAR solve"""
    jobs: int = 2
    """training runs and evaluations in parallel (processes, one CPU thread each)"""
    tensorboard: Path | None = None
    """folder for SB3's TensorBoard logs, one run per scenario and seed (optional)"""
    quick: bool = False
    """smoke test: one seed, a few hundred rounds, small worlds, short episodes"""
    out: Path | None = None
    """output folder (default: analyses/results, or a temp folder with --quick)"""


# Small worlds and short episodes for --quick (the scenarios' own sizes otherwise).
QUICK_OVERRIDES = {
    "school_assignment_controlled": {
        "world__cohort_size": 300,
        "world__history_size": 600,
        "rounds": 5,
    },
    "lending_fico_controlled": {
        "world__n_applicants": 300,
        "world__history_size": 400,
        "rounds": 5,
    },
}


def parse_args() -> Args:
    """`Args` from the command line; --help shows each field's docstring."""
    return parse_dataclass_args(Args, __doc__.split("\n\n")[0])


def main(args: Args) -> None:
    # -- seeding and settings ------------------------------------------------------------
    # One torch thread: on a shared 2-core machine torch's pool slows small nets ~20-100x,
    # and one thread keeps float reductions (hence the learning curves) reproducible.
    # Every environment draws from its own np_random, seeded by reset(seed=...);
    # PPO(seed=s) seeds stable-baselines3's generators; no global RNG is used here.
    torch.set_num_threads(1)
    if args.quick:
        args = replace(
            args,
            seeds=args.seeds[:1],
            eval_seeds=args.eval_seeds[:2],
            timesteps=(200,) * len(args.scenarios),
            n_steps=min(args.n_steps, 100),  # a rollout no longer than the smoke run
            oar_n_steps=min(args.oar_n_steps, 100),
        )
    if args.action not in ("shift", "oar"):
        raise SystemExit(f"error: --action is shift or oar, got {args.action!r}")
    oar = args.action == "oar"
    if len(args.timesteps) != len(args.scenarios):
        raise SystemExit(
            f"error: --timesteps needs one number per scenario ({len(args.scenarios)}), "
            f"got {list(args.timesteps)}"
        )
    for scenario in args.scenarios:  # each one known and controlled, before any training
        controlled_population(scenario)
    out = args.out or (
        Path(tempfile.gettempdir()) / "recourse_sim_coordinator_quick" if args.quick else RESULTS
    )
    out.mkdir(parents=True, exist_ok=True)
    if oar:  # one world per run (the v2 action is solved per world), near OAR at first
        base = PPOConfig(
            n_envs=1,
            n_steps=args.oar_n_steps,
            batch_size=min(100, args.oar_n_steps),
            learning_rate=args.learning_rate,
            gamma=args.gamma,
            log_std_init=args.oar_log_std_init,
        )
    else:
        base = PPOConfig(
            n_envs=args.n_envs,
            n_steps=max(args.n_steps // args.n_envs, 1),  # the rollout spread over the worlds
            batch_size=min(100, args.n_steps),
            learning_rate=args.learning_rate,
            gamma=args.gamma,
            log_std_init=args.log_std_init,
        )
    suffix = _suffix(args)
    budgets = dict(zip(args.scenarios, args.timesteps, strict=True))
    print(f"writing to {out}; PPO training rounds {budgets}; {base}")

    # One job per PPO run (trained, then evaluated on the held-out seeds) and per
    # baseline evaluation; each job builds its own environments, so jobs are independent
    # and run in any order or process with the same results.
    tensorboard = str(args.tensorboard) if args.tensorboard else None
    jobs = []
    for scenario, timesteps in zip(args.scenarios, args.timesteps, strict=True):
        overrides = dict(QUICK_OVERRIDES.get(scenario, {})) if args.quick else {}
        if oar:
            overrides[f"populations__{controlled_population(scenario)}__action"] = "oar"
        if args.cost_weight is not None:
            overrides["reward__cost_weight"] = args.cost_weight
        config = replace(base, timesteps=timesteps)
        jobs += [Job(scenario, name, -1, config, overrides, args, None) for name in BASELINES]
        jobs += [
            Job(scenario, "ppo", seed, config, overrides, args, tensorboard) for seed in args.seeds
        ]
    started = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool:
            done = list(pool.map(_run_job, jobs))
    else:
        done = [_run_job(job) for job in jobs]

    comparison, curves, seconds = [], [], {}
    actions: dict[tuple[str, str], np.ndarray] = {}
    for job, result in zip(jobs, done, strict=True):
        seconds[job.run_name] = result["seconds"]
        comparison += result["rows"]
        if result["curve"] is not None:
            curves.append(result["curve"])
            tail = result["curve"]["reward"].tail(10).mean()
            print(f"{job.run_name}: {result['seconds']:.0f} s, last 10 episodes' reward {tail:.3f}")
        if result["actions"] is not None:
            actions[(job.scenario, job.policy)] = result["actions"]

    seconds["total"] = round(time.perf_counter() - started, 1)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the pool's finished workers
    seconds["cpu"] = round(time.process_time() + children.ru_utime + children.ru_stime, 1)

    # -- results to files ----------------------------------------------------------------------
    table = pd.DataFrame(comparison)[
        ["scenario", "policy", "seed", "query_success", "reward", "train_seed"]
    ]
    table.to_csv(out / f"coordinator{suffix}_comparison.csv", index=False, float_format="%.6g")
    curve_table = pd.concat(curves, ignore_index=True)[
        ["scenario", "seed", "timestep", "episode", "reward", "query_success"]
    ]
    curve_table.to_csv(out / f"coordinator{suffix}_curves.csv", index=False, float_format="%.6g")
    summary = _summary(table)
    _plot(curve_table, summary, out / f"coordinator{suffix}_curves.png")
    report = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(args).items()},
        "ppo": base.as_dict()
        | {"timesteps": dict(zip(args.scenarios, args.timesteps, strict=True))},
        "seconds": seconds,
        "summary": summary.reset_index().to_dict(orient="records"),
    }
    (out / f"coordinator{suffix}_summary.json").write_text(
        json.dumps(report, indent=2, default=list)
    )
    (out / f"coordinator{suffix}.md").write_text(
        _markdown(table, summary, args, base, seconds, actions)
    )
    print(summary.round(3).to_string())
    print(f"total {seconds['total']:.0f} s")


@dataclass(frozen=True)
class Job:
    """One PPO training run (then its held-out evaluation) or one baseline's evaluation."""

    scenario: str
    policy: str  # "ppo" or a baseline's name
    seed: int  # PPO's training seed (-1 for a baseline)
    config: PPOConfig
    overrides: dict
    args: Args
    tensorboard: str | None

    @property
    def run_name(self) -> str:
        if self.policy == "ppo":
            return f"{self.scenario}__ppo__seed{self.seed}"
        return f"{self.scenario}__{self.policy}__eval"


def controlled_population(scenario: str) -> str:
    """The name of the scenario's controlled population (the one the action drives)."""
    try:
        spec = load_scenario(scenario)
    except ConfigError as exc:
        raise SystemExit(f"error: --scenarios: {exc}") from None
    names = [name for name, p in spec.populations.items() if p.strategy == "controlled"]
    if not names:
        raise SystemExit(f"error: scenario {scenario!r} has no controlled population")
    return names[0]


class ConstantAction:
    """A policy that plays one action every round (`evaluate`'s ``predict`` interface)."""

    def __init__(self, action: np.ndarray) -> None:
        self.value = np.asarray(action, dtype=np.float32)

    def predict(self, observation, state=None, episode_start=None, deterministic=True):
        obs = np.asarray(observation)
        return (self.value[None] if obs.ndim == 2 else self.value), state


def _oar_constant(policy: str) -> ConstantAction:
    """Under the v2 action: ``oar`` is the zero action (the collective_oar population),
    ``none`` the zero action with ``act`` = -1 (the collective does not act)."""
    action = np.zeros(len(OAR_ACTION), np.float32)
    if policy == "none":
        action[OAR_ACTION.index("act")] = -1.0
    return ConstantAction(action)


def _run_job(job: Job) -> dict:
    """Train (PPO) and evaluate one policy; plain data back (rows, curve, actions)."""
    torch.set_num_threads(1)
    args = job.args
    oar = args.action == "oar"
    start = time.perf_counter()
    overrides = job.overrides
    if oar and job.policy == "individual":  # a shared shift: the same worlds, the v1 action
        overrides = {k: v for k, v in overrides.items() if not k.endswith("__action")}
    env = RecourseEnv(job.scenario, **overrides)
    curve = None
    if job.policy == "ppo":
        policy, curve = train_ppo(
            job.scenario,
            job.seed,
            job.config,
            tensorboard=job.tensorboard,
            # the native batched env where it can run the scenario (not the v2 action)
            batched=not oar and native_reason(env) is None,
            **job.overrides,
        )
        curve = curve.assign(scenario=job.scenario, seed=job.seed)
    elif oar and job.policy in ("oar", "none"):
        policy = _oar_constant(job.policy)
    elif job.policy == "oar":
        policy = make_baseline("oar", horizon=args.oar_horizon, steps=args.oar_steps)
    else:
        policy = make_baseline(job.policy)
    rows = evaluate(policy, env, args.eval_seeds)
    rows = [dict(scenario=job.scenario, policy=job.policy, train_seed=job.seed, **r) for r in rows]
    # what the policies do, on the first held-out episode (PPO: its first training seed)
    shown = job.policy == "oar" or (job.policy == "ppo" and job.seed == args.seeds[0])
    actions = _actions(policy, env, args.eval_seeds[0]) if shown else None
    seconds = round(time.perf_counter() - start, 1)
    return {"rows": rows, "curve": curve, "actions": actions, "seconds": seconds}


def _ci95(values) -> float:
    """Half-width of the 95 % Student-t interval of the mean (nan for fewer than 2)."""
    return mean_ci(values).half_width


def _units(table: pd.DataFrame) -> pd.DataFrame:
    """One row per independent unit: a baseline's held-out episode, or a PPO training
    run (its mean over the held-out episodes), which is what varies between trainings."""
    ppo = table.policy == "ppo"
    runs = (
        table[ppo]
        .groupby(["scenario", "policy", "train_seed"], sort=False)[["query_success", "reward"]]
        .mean()
        .reset_index()
    )
    return pd.concat([table[~ppo], runs], ignore_index=True)


def _summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per policy: mean and 95 % interval half-width over held-out episodes (baselines)
    or over training runs (PPO), and how many units."""
    g = _units(table).groupby(["scenario", "policy"], sort=False)
    summary = g[["query_success", "reward"]].agg(["mean", _ci95])
    summary.columns = [f"{a}_{'ci95' if b == '_ci95' else b}" for a, b in summary.columns]
    summary["n"] = g.size().astype(int)
    order = [(sc, p) for sc in dict.fromkeys(table["scenario"]) for p in POLICIES]
    return summary.reindex([key for key in order if key in summary.index])


def _plot(curves: pd.DataFrame, summary: pd.DataFrame, path: Path) -> None:
    scenarios = list(dict.fromkeys(curves["scenario"]))
    fig, axes = plt.subplots(1, len(scenarios), figsize=(5.5 * len(scenarios), 4), squeeze=False)
    styles = {
        "none": ("0.35", "--"),
        "individual": ("tab:red", ":"),
        "oar": ("tab:green", "-."),
        "ppo": ("black", "-"),
    }
    seed_colours = plt.get_cmap("Blues")(np.linspace(0.45, 0.9, curves["seed"].nunique()))
    for ax, scenario in zip(axes[0], scenarios, strict=True):
        groups = curves[curves["scenario"] == scenario].groupby("seed")
        for colour, (seed, c) in zip(seed_colours, groups, strict=False):
            smooth = c["reward"].rolling(10, min_periods=1).mean()
            ax.plot(c["timestep"], smooth, color=colour, lw=1.1, label=f"PPO training, seed {seed}")
        levels = []
        for policy in POLICIES:
            if (scenario, policy) in summary.index:
                level = summary.loc[(scenario, policy), "reward_mean"]
                colour, style = styles[policy]
                ax.axhline(level, color=colour, ls=style, lw=1.6, label=f"{policy}, held out")
                levels.append(level)
        low, high = ax.get_ylim()
        pad = 0.02 * (high - low)
        ax.set_ylim(min(low, min(levels) - pad), max(high, max(levels) + pad))
        ax.set(
            title=scenario, xlabel="training rounds", ylabel="reward per round (10-episode mean)"
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _actions(policy, env: RecourseEnv, seed: int) -> np.ndarray:
    """The deterministic actions of one episode, (rounds, k, m)."""
    if isinstance(policy, AnalyticPolicy):
        policy.bind(env)
    obs, _ = env.reset(seed=seed)
    actions, done = [], False
    while not done:
        action, _ = policy.predict(obs, deterministic=True)
        actions.append(np.asarray(action, dtype=np.float64).reshape(env.action_space.shape))
        obs, _, terminated, truncated, _ = env.step(action)
        done = terminated or truncated
    return np.array(actions)


def _paired(
    table: pd.DataFrame, scenario: str, baseline: str, metric: str = "reward"
) -> tuple[float, float]:
    """PPO minus `baseline` on the same held-out seeds (PPO's value per seed averaged
    over its training runs): mean and 95 % interval half-width over the seeds."""
    t = table[table.scenario == scenario]
    ppo = t[t.policy == "ppo"].groupby("seed")[metric].mean()
    other = t[t.policy == baseline].set_index("seed")[metric]
    diff = (ppo - other).dropna()
    return float(diff.mean()), _ci95(diff)


PREVIOUS = (
    "5 training seeds of 30,000 (school) and 60,000 (lending) rounds, each run on one "
    "world at a time (SB3's DummyVecEnv), rollouts of 500 rounds, minibatches of 100, "
    "learning rate 0.001. Mean query success / reward over held-out episodes: school oar "
    "0.486 / 0.451, ppo 0.584 / 0.488; lending oar 0.864 / 0.821, ppo 0.813 / 0.808 "
    "(PPO 0.051 ± 0.012 below OAR's query success)"
)
"""The previous committed results, for the report."""


def _suffix(args: Args) -> str:
    """The output files' suffix: the action (``_oar``) and a set λ (``_lambda0``)."""
    lam = f"_lambda{args.cost_weight:g}" if args.cost_weight is not None else ""
    return ("_oar" if args.action == "oar" else "") + lam


def _markdown(
    table: pd.DataFrame,
    summary: pd.DataFrame,
    args: Args,
    config: PPOConfig,
    seconds: dict,
    actions: dict[tuple[str, str], np.ndarray],
) -> str:
    budgets = dict(zip(args.scenarios, args.timesteps, strict=True))
    oar = args.action == "oar"
    lines = (
        [
            "# Learning to coordinate a collective (PPO vs analytic baselines)"
            + (": OAR's settings as the action" if oar else ""),
            "",
            "Written by `analyses/train_coordinator.py`"
            + (" (--quick: a smoke test, not a result)" if args.quick else "")
            + f". PPO (stable-baselines3): {budgets} training rounds per run, "
            f"training seeds {list(args.seeds)}, γ = {config.gamma}, learning rate "
            f"{config.learning_rate}, initial log SD {config.log_std_init}. Evaluation: one "
            f"episode on each held-out seed {list(args.eval_seeds)}, deterministic actions, the "
            "same loop for every policy. Reward per round = the query group's success under the "
            "updated model − λ · the collective's mean cost per participant"
            + (
                f" (λ = {args.cost_weight:g} here, set by --cost-weight). "
                if args.cost_weight is not None
                else " (λ: the scenario's). "
            )
            + "Mean ± 95 % Student-t half-width: for the baselines over the held-out episodes, "
            "for PPO over its training runs (each run's mean over the held-out episodes).",
            "",
        ]
        + (
            [
                "Policies (the action: OAR's own settings for the round, `OAR_ACTION` = "
                "(act, alpha, budget, goal) in [-1, 1], centred on OAR: α = participation · "
                "min(1, 1 + alpha), ε = epsilon · min(1, 1 + budget), act and aim at the query's "
                "goal when those entries are ≥ -1/2; OAR computes each member's perturbation): "
                "**none** — the constant action with act = -1 (nobody moves); **individual** — "
                "members move their reports as individual recourse (OAR Eq. 2) would move a query "
                "subject, uncoordinated: a shared shift, so played with the scenario's shift "
                "action (the same worlds and draws); **oar** — the constant zero action, "
                "which is the "
                "`collective_oar` population exactly (the population's own horizon and solver "
                "steps, 1 and 10, each member's own solution; tested in "
                "`tests/rl/test_oar_action.py`; "
                "`make_baseline('oar')` returns a shift action and does not apply here); "
                "**ppo** — the trained policy over the four settings, which sees only the "
                f"observation, one world per run, rollouts of {config.n_steps} rounds, initial "
                f"log SD {config.log_std_init} around a mean that starts near zero, i.e. near OAR.",
                "",
            ]
            if oar
            else [
                "Policies (the action: one shift of the reported feature per training label, in "
                "budget units; see `agents/policies.py`): **none** — the collective stays idle; "
                "**individual** — members move their reports as individual recourse (OAR Eq. 2) "
                "would move a query subject, uncoordinated; **oar** — collective OAR (Eq. 3, "
                f"horizon {args.oar_horizon}) solved on the round's real training rows and "
                "members, as each class's mean move (privileged: it reads the learner and the "
                "rows); "
                "**ppo** — the trained policy, which sees only the observation.",
                "",
            ]
        )
        + [
            "| scenario | policy | n | query success | reward |",
            "|---|---|---|---|---|",
        ]
    )
    for (scenario, policy), row in summary.iterrows():
        lines.append(
            f"| {scenario} | {policy} | {int(row.n)} "
            f"| {row.query_success_mean:.3f} ± {row.query_success_ci95:.3f}"
            f" | {row.reward_mean:.3f} ± {row.reward_ci95:.3f} |"
        )
    lines += ["", "## What it says", ""]
    for scenario in dict.fromkeys(table["scenario"]):
        s = summary.loc[scenario]
        t = table[table.scenario == scenario]
        per_run = t[t.policy == "ppo"].groupby("train_seed")["reward"].mean()
        parts = []
        for b in BASELINES:
            diff, ci = _paired(table, scenario, b)
            runs = int((per_run > s.loc[b, "reward_mean"]).sum())
            parts.append(
                f"{'beats' if diff > 0 else 'does not beat'} {b} "
                f"({s.loc[b, 'reward_mean']:.3f}; paired difference {diff:+.3f} ± {ci:.3f}, "
                f"{runs}/{len(per_run)} runs above it)"
            )
        gap, ci = _paired(table, scenario, "oar", "query_success")
        per_run_success = t[t.policy == "ppo"].groupby("train_seed")["query_success"].mean()
        runs = int((per_run_success >= s.loc["oar", "query_success_mean"]).sum())
        above = int((per_run_success > s.loc["oar", "query_success_mean"]).sum())
        lines.append(
            f"- **{scenario}**: PPO's mean reward {s.loc['ppo', 'reward_mean']:.3f} "
            + "; ".join(parts)
            + f". Query success: PPO {s.loc['ppo', 'query_success_mean']:.3f}, OAR "
            f"{s.loc['oar', 'query_success_mean']:.3f}, paired difference {gap:+.3f} ± "
            f"{ci:.3f} ({runs}/{len(per_run_success)} runs at or above OAR's mean)."
        )
        if oar:  # each run against OAR on the same held-out seeds
            oar_success = t[t.policy == "oar"].set_index("seed")["query_success"]
            ppo_t = t[t.policy == "ppo"]
            diffs = {
                seed: (g.set_index("seed")["query_success"] - oar_success).dropna()
                for seed, g in ppo_t.groupby("train_seed")
            }
            run_means = pd.Series({seed: d.mean() for seed, d in diffs.items()})
            per_seed = ", ".join(
                f"seed {seed} {d.mean():+.3f} ± {_ci95(d):.3f}" for seed, d in diffs.items()
            )
            lines.append(
                f"  PPO − OAR in query success per training run (paired over the held-out "
                f"seeds): {per_seed}; {above}/{len(run_means)} runs above OAR, "
                f"{int(sum(d.mean() - _ci95(d) > 0 for d in diffs.values()))} with the "
                f"interval above 0. Over the runs: {run_means.mean():+.3f} ± "
                f"{_ci95(run_means):.3f} (95 % interval over training runs)."
            )
        none = t[t.policy == "none"].set_index("seed")["reward"]
        individual = t[t.policy == "individual"].set_index("seed")["reward"]
        if np.allclose(none, individual):
            lines.append(
                "  Here individual equals none: the direction individual recourse takes "
                "is outside this collective's action set, so uncoordinated members do nothing."
            )
        for policy in ("ppo",) if oar else ("ppo", "oar"):
            a = actions.get((scenario, policy))
            if a is None:
                continue
            mean, sd = a.mean(0), a.std(0)
            if oar:
                per_entry = ", ".join(
                    f"{name} {mean[i]:+.2f} (SD {sd[i]:.2f})" for i, name in enumerate(OAR_ACTION)
                )
                lines.append(
                    f"  {policy} (training seed {args.seeds[0]}), actions over held-out episode "
                    f"{args.eval_seeds[0]}: {per_entry}."
                )
                continue
            per_class = ", ".join(
                f"class {c} {np.round(mean[c], 2).tolist()} (SD {np.round(sd[c], 2).tolist()})"
                for c in range(len(mean))
            )
            who = f" (training seed {args.seeds[0]})" if policy == "ppo" else ""
            lines.append(
                f"  {policy}{who}, actions over held-out episode {args.eval_seeds[0]}: {per_class}."
            )
    if oar:
        lines += [
            "",
            "Caveats: PPO optimises the reward, cost included (λ per unit of the members' "
            "mean cost), not query success: where OAR's full budget buys query success at "
            "less than λ per unit of cost, PPO gains reward by spending less and may stop "
            "short of OAR's query success. OAR itself is myopic (the next model's "
            "log-likelihood of the goal, one update, no cost, no decision threshold or "
            "capacity); PPO can only choose among its settings (act, α, ε, goal), not the "
            "members' moves. Results with the shift action: coordinator.md.",
            "",
        ]
    else:
        lines += [
            "",
            "Caveats: OAR here is privileged (it reads the learner, the round's training rows and",
            "who joined) and myopic (it maximises the next model's log-likelihood of the goal for",
            "one update, ignoring cost, the decision rule's threshold or capacity and later",
            "rounds); PPO sees only the observation and optimises the reward itself, cost",
            "included, so where acting harder buys query success at more than λ per unit of",
            "cost PPO should stop short of OAR's query success. PPO acts through",
            "`FeasibleActions`: its [-1, 1] is spread over the part of each entry the",
            "collective can use ([-1, 0] for lending's under-reported score).",
            "",
            "## What moved since the previous results, and why",
            "",
            f"Previous results: {PREVIOUS}. Now: each PPO run steps {args.n_envs} worlds of "
            "the native batched environment together (`train_ppo(batched=True)`; lending is "
            "native now too), the same 500 rounds per rollout spread over them, the same "
            "budgets, seeds and settings otherwise. The scenarios moved since: "
            "school_assignment's seekers aim a per-person margin above the cut-off, ties go "
            "by lottery and activities are whole; every policy's school rows move with them "
            "(the baselines too). Lending's baselines are unchanged.",
            "",
        ]
    lines += [
        f"Time: {seconds['total']:.0f} s wall clock, {seconds['cpu']:.0f} s CPU, "
        f"{args.jobs} process(es) of one CPU thread each (per run: "
        f"coordinator{_suffix(args)}_summary.json).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main(parse_args())
