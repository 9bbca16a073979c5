"""The coordination benchmark: PPO against the baselines and the privileged oracle on
every coordination task (`recourse_sim.registration.COORDINATION_TASKS`).

Per task, on held-out test seeds (1000 …; tasks with hidden dynamics draw them from
their held-out ranges):

* the simple baselines (`recourse_sim.agents.coordination`): idle, OAR every round,
  the fixed schedules (first-K, evenly spread, last-K) and the best constant setting
  of α and ε (a 4 × 4 grid, chosen on the training seeds);
* the myopic one-step oracle and the privileged oracle (rollouts of the seed's best
  baseline with common random numbers; on the first --oracle-seeds test seeds);
* PPO (stable-baselines3), --runs training runs of --timesteps environment steps
  each, trained on seeds 0–99 (in turn; the training ranges of hidden dynamics),
  evaluated deterministically on the test seeds.

Scores: per task (J(π) − J(idle)) / (J(best simple baseline) − J(idle)) and the share of
the oracle's lead closed; over tasks, the interquartile mean with a stratified
bootstrap interval (runs resampled within tasks); per held-out seed, paired differences
(mean ± 95 % Student-t interval).

    python analyses/coordination_benchmark.py --tasks lending_budget_20   # one task
    python analyses/coordination_benchmark.py --report                    # the tables
    python analyses/coordination_benchmark.py --quick                     # smoke test

Each task writes ``coordination_benchmark_<task>.csv`` (one row per policy × run ×
seed: the mean reward per round of that episode), ``..._<task>_curves.csv`` (PPO's
training episodes) and ``..._<task>.json`` (settings, timings); ``--report`` reads them
all and writes ``coordination_benchmark.md`` and ``coordination_benchmark.png``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the analyses' own helpers
from _args import parse_args as parse_dataclass_args

import recourse_sim  # noqa: F401 - registers the IDs
from recourse_sim.agents.coordination import (
    Constant,
    Myopic,
    TaskPolicy,
    constant_grid,
    episode_return,
    iqm_interval,
    privileged_oracle,
    simple_baselines,
)
from recourse_sim.registration import COORDINATION_TASKS
from recourse_sim.stats import mean_ci, paired_difference

RESULTS = Path(__file__).resolve().parent / "results"
PREFIX = "coordination_benchmark"


@dataclass(frozen=True)
class Args:
    tasks: tuple[str, ...] = tuple(COORDINATION_TASKS)
    """the tasks to run (names of COORDINATION_TASKS)"""
    runs: int = 5
    """PPO training runs per task (training seeds 0 … runs − 1 for PPO's own generators)"""
    timesteps: int = 6000
    """environment steps of each PPO run"""
    test_seeds: int = 100
    """held-out seeds 1000 … 1000 + n − 1"""
    oracle_seeds: int = 20
    """the first n test seeds on which the privileged oracle runs"""
    grid_seeds: int = 10
    """training seeds 0 … n − 1 on which the best constant setting is chosen"""
    gamma: float = 0.95
    """PPO's discount per round (the tasks' constraints reward planning ahead)"""
    report: bool = False
    """only read the per-task files and write the tables and the figure"""
    quick: bool = False
    """a smoke test: few seeds and steps, to a temporary folder"""
    out: Path = RESULTS
    """where the results go"""


def make_task(task: str, split: str) -> gym.Env:
    """The task's environment; hidden dynamics drawn from the `split` ranges."""
    return gym.make(COORDINATION_TASKS[task], hidden_split=split)  # (no hidden: ignored)


def returns(env: gym.Env, policy: TaskPolicy, seeds: list[int]) -> list[float]:
    return [episode_return(env, policy, s)[0] for s in seeds]


class _Trained(TaskPolicy):
    """A trained PPO model as a task policy (deterministic: the Gaussian's mean)."""

    def __init__(self, model, name: str) -> None:
        super().__init__()
        self.model = model
        self.name = name

    def predict(self, observation=None, state=None, episode_start=None, deterministic=True):
        return self.model.predict(observation, deterministic=True)


def run_task(task: str, args: Args) -> None:
    import torch

    from recourse_sim.agents.training import PPOConfig, train_ppo

    torch.set_num_threads(1)
    started, cpu0 = time.time(), time.process_time()
    timings: dict[str, float] = {}
    test = list(range(1000, 1000 + args.test_seeds))
    grid_seeds = list(range(args.grid_seeds))
    env = make_task(task, "test")
    rows: list[dict] = []

    def record(policy: str, values: list[float], seeds: list[int], run: int = -1) -> None:
        rows.extend(
            {"task": task, "policy": policy, "run": run, "seed": s, "value": v}
            for s, v in zip(seeds, values, strict=True)
        )

    def clock(name: str, t0: float, c0: float) -> None:
        timings[f"{name}_wall_s"] = round(time.time() - t0, 1)
        timings[f"{name}_cpu_s"] = round(time.process_time() - c0, 1)

    t0, c0 = time.time(), time.process_time()
    train_env = make_task(task, "train")
    grid = constant_grid()
    grid_means = {p.name: np.mean(returns(train_env, p, grid_seeds)) for p in grid}
    best_constant = max(grid, key=lambda p: grid_means[p.name])
    clock("grid", t0, c0)

    t0, c0 = time.time(), time.process_time()
    baselines = simple_baselines()
    constant = Constant(best_constant.alpha, best_constant.budget)
    constant.name = "best constant"
    values: dict[str, list[float]] = {}
    for policy in [*baselines, constant]:
        values[policy.name] = returns(env, policy, test)
        record(policy.name, values[policy.name], test)
    clock("baselines", t0, c0)

    t0, c0 = time.time(), time.process_time()
    record("myopic oracle", returns(env, Myopic(), test), test)
    clock("myopic", t0, c0)

    t0, c0 = time.time(), time.process_time()
    oracle_seeds = test[: args.oracle_seeds]
    oracle_values, oracle_steps = [], 0
    for i, seed in enumerate(oracle_seeds):
        known = {name: v[i] for name, v in values.items()}
        result = privileged_oracle(env, seed, [*baselines, constant], base_values=known)
        oracle_values.append(result.value)
        oracle_steps += result.steps
    record("privileged oracle", oracle_values, oracle_seeds)
    clock("oracle", t0, c0)

    env_id = COORDINATION_TASKS[task]
    kwargs = dict(gym.spec(env_id).kwargs)
    scenario = kwargs.pop("scenario")
    kwargs = {k: v for k, v in kwargs.items() if k != "warn_passive"}
    kwargs["hidden_split"] = "train"
    config = PPOConfig(timesteps=args.timesteps, gamma=args.gamma)
    curves = []
    t0, c0 = time.time(), time.process_time()
    for run in range(args.runs):
        policy, curve = train_ppo(scenario, run, config, train_seeds=range(100), **kwargs)
        curve.insert(0, "run", run)
        curve.insert(0, "task", task)
        curves.append(curve)
        record("ppo", returns(env, _Trained(policy, "ppo"), test), test, run)
    clock("ppo", t0, c0)

    args.out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(args.out / f"{PREFIX}_{task}.csv", index=False)
    pd.concat(curves).to_csv(args.out / f"{PREFIX}_{task}_curves.csv", index=False)
    summary = {
        "task": task,
        "env_id": env_id,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(args).items()},
        "ppo": config.as_dict(),
        "best_constant": best_constant.name,
        "grid_means": {k: float(v) for k, v in grid_means.items()},
        "oracle_env_steps": oracle_steps,
        "timings": timings,
        "wall_s": round(time.time() - started, 1),
        "cpu_s": round(time.process_time() - cpu0, 1),
    }
    (args.out / f"{PREFIX}_{task}.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{task}: {summary['wall_s']} s wall, {summary['cpu_s']} s CPU", flush=True)


def head(settings: dict) -> str:
    """The page's opening: what was run, with the settings of the run."""
    n_test, n_oracle = settings["test_seeds"], settings["oracle_seeds"]
    return f"""# Coordination benchmark

Produced by `analyses/coordination_benchmark.py`: each task by `--tasks <task>` (several
tasks in parallel processes on two cores shared with other work, so wall time is well
above CPU time), then the page by `--report`; the time each task took is at the end.
Every task's score is the query group's success per round (the reward, λ = 0) under the
task's hard constraint; see `docs/benchmark.md` for the tasks, the baselines, the oracles
and the scores.

* **Held-out seeds**: {n_test} test seeds, 1000 … {999 + n_test}, one episode each, the same
  seeds (the same worlds) for every policy, so every difference is paired. Tasks with hidden
  dynamics draw them from their held-out ranges there.
* **Simple baselines**: idle, OAR every round, first-K, evenly spread, last-K (K: the task's
  acting rounds, else T/4) and the best constant α × ε setting of a 4 × 4 grid, chosen on
  training seeds 0 … {settings["grid_seeds"] - 1}. "Best simple" below is the best of them
  on the test seeds.
* **Oracles** (privileged: they save and restore the env's state): the myopic one-step
  oracle on every test seed; the privileged oracle (rollouts of the seed's best baseline
  over idle, OAR and OAR at half ε, with common random numbers) on the first {n_oracle}
  test seeds, where "oracle − best" is paired.
* **PPO** (stable-baselines3, `recourse_sim.agents.training.train_ppo`): {settings["runs"]}
  runs per task (PPO seeds 0 … {settings["runs"] - 1}), {settings["timesteps"]:,} env steps
  each, training episodes on seeds 0–99 in turn, γ = {settings["gamma"]}, the rest of
  `PPOConfig`'s defaults; evaluated deterministically (the Gaussian's mean).
* **Scores**: normalised (J(π) − J(idle)) / (J(best simple) − J(idle)) per run (mean ± 95 %
  t-interval over runs; undefined where no simple baseline beats idle); "PPO / oracle":
  (J(PPO) − J(idle)) / (J(oracle) − J(idle)) on the oracle's seeds; "gap closed": (J(PPO) −
  J(best)) / (J(oracle) − J(best)) there; the IQM over tasks × runs with a stratified
  bootstrap interval (2,000 replicates, runs resampled within each task).

![learning curves](coordination_benchmark.png)

Learning curves: each PPO run's training episodes (mean reward per round, a rolling
mean of 20 episodes) against env steps, with idle, the best simple baseline and the
privileged oracle on the test seeds. Tasks with hidden settings train on their training
ranges and are tested on the held-out ones, so their curves sit apart from those lines.

## Scores

"""


def deviations(settings: dict) -> str:
    n_test, n_oracle = settings["test_seeds"], settings["oracle_seeds"]
    rows = [
        (
            "rliable for IQM and intervals",
            "`recourse_sim.agents.coordination.iqm_interval`: the same statistic (scipy's "
            "`trim_mean(·, 0.25)`) and the same stratified bootstrap (percentile interval)",
            "rliable 1.2.0 installs but does not import: its `arch` dependency fails against "
            "pandas 3 (arch 7.2: a `deprecate_kwarg` TypeError) and numpy 2 (arch 6.3: "
            "binary incompatible)",
        ),
        *(
            [
                (
                    "test seeds 1000–1099",
                    f"1000–{999 + n_test}",
                    "CPU time: every policy plays every test seed",
                )
            ]
            if n_test != 100
            else []
        ),
        (
            "the oracle on every test seed",
            f"the first {n_oracle}",
            "its rollouts cost about (candidates + 1) · T²/2 env steps a seed",
        ),
        (
            'an "individual" baseline',
            "not in the table",
            "in OAR's action space the collective's one alternative to acting is idling; its "
            "members seek individual recourse in every policy's world",
        ),
        (
            "PPO at scale",
            f"{settings['runs']} runs × {settings['timesteps']:,} steps per task",
            "two cores for the whole benchmark; the curves show where each run stands",
        ),
    ]
    table = [_row(["asked", "here", "why"]), _row(["---"] * 3), *(_row(list(r)) for r in rows)]
    return "\n## Deviations from the protocol\n\n" + "\n".join(table) + "\n"


SIMPLE = ("idle", "oar", "first-K", "evenly spread", "last-K", "best constant")


def task_scores(d: pd.DataFrame) -> dict:
    """One task's numbers from its rows (policy, run, seed, value)."""
    per = {p: g.groupby("seed").value.mean() for p, g in d.groupby("policy")}
    j = {p: float(v.mean()) for p, v in per.items()}
    best = max(SIMPLE, key=lambda p: j[p])
    oracle = per["privileged oracle"]
    seeds = oracle.index
    best_there = per[best].loc[seeds]
    lead = float(oracle.mean() - best_there.mean())
    ppo_runs = d[d.policy == "ppo"].groupby("run").value.mean()
    span = j[best] - j["idle"]
    normalised = (ppo_runs - j["idle"]) / span if span > 0 else ppo_runs * np.nan
    closed = float(per["ppo"].loc[seeds].mean() - best_there.mean()) / lead if lead > 0 else np.nan
    # normalised by the oracle instead (idle 0, oracle 1; on the oracle's seeds): defined
    # where no simple baseline beats idle
    idle_there, top = float(per["idle"].loc[seeds].mean()), float(oracle.mean())
    on_seeds = d[(d.policy == "ppo") & d.seed.isin(seeds)].groupby("run").value.mean()
    by_oracle = (
        (on_seeds - idle_there) / (top - idle_there) if top > idle_there else on_seeds * np.nan
    )
    simple_there = pd.concat([per[p].loc[seeds] for p in SIMPLE], axis=1).max(axis=1)
    return {
        "j": j,
        "best": best,
        "oracle_at_least_all": int((oracle.values >= simple_there.values - 1e-12).sum()),
        "headroom": paired_difference(oracle.values, best_there.values),
        "oracle_n": len(seeds),
        "ppo_vs_best": paired_difference(per["ppo"].values, per[best].loc[per["ppo"].index].values),
        "normalised_runs": normalised.values,
        "normalised": mean_ci(normalised.values),
        "by_oracle_runs": by_oracle.values,
        "by_oracle": mean_ci(by_oracle.values),
        "closed": closed,
    }


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def report(args: Args) -> None:
    frames = [pd.read_csv(p) for p in sorted(args.out.glob(f"{PREFIX}_*.csv")) if _is_main(p)]
    data = pd.concat(frames)
    tasks = [t for t in COORDINATION_TASKS if t in set(data.task)]
    scores = {t: task_scores(data[data.task == t]) for t in tasks}
    summaries = {
        t: json.loads((args.out / f"{PREFIX}_{t}.json").read_text())
        for t in tasks
        if (args.out / f"{PREFIX}_{t}.json").is_file()
    }
    width = min(len(s["normalised_runs"]) for s in scores.values())
    defined = [t for t, s in scores.items() if np.isfinite(s["normalised_runs"]).all()]
    matrix = np.column_stack([scores[t]["normalised_runs"][:width] for t in defined])
    point, low, high = iqm_interval(matrix)
    by_oracle = np.column_stack([s["by_oracle_runs"][:width] for s in scores.values()])
    o_point, o_low, o_high = iqm_interval(by_oracle)
    undefined = [t for t in scores if t not in defined]

    columns = ["task", "idle", "OAR", "best simple", "myopic", "oracle − best (paired)"]
    columns += ["PPO", "PPO − best (paired)", "PPO normalised", "PPO / oracle", "gap closed"]
    lines = [_row(columns), _row(["---"] * len(columns))]
    for t, s in scores.items():
        j = s["j"]
        h, pv = s["headroom"], s["ppo_vs_best"]
        lines.append(
            _row(
                [
                    f"`{t}`",
                    f"{j['idle']:.4f}",
                    f"{j['oar']:.4f}",
                    f"{s['best']} {j[s['best']]:.4f}",
                    f"{j['myopic oracle']:.4f}",
                    f"{h.mean:+.4f} ± {h.half_width:.4f}",
                    f"{j['ppo']:.4f}",
                    f"{pv.mean:+.4f} ± {pv.half_width:.4f}",
                    "— (best is idle)"
                    if np.isnan(s["normalised"].mean)
                    else f"{s['normalised'].mean:.3f} ± {s['normalised'].half_width:.3f}",
                    f"{s['by_oracle'].mean:.3f} ± {s['by_oracle'].half_width:.3f}",
                    "—" if np.isnan(s["closed"]) else f"{s['closed']:.2f}",
                ]
            )
        )
    lines += [
        "",
        f"PPO's normalised score over the {matrix.shape[1]} tasks where it is defined × "
        f"{width} runs: **IQM {point:.3f} [{low:.3f}, {high:.3f}]** (95 % stratified "
        "bootstrap)"
        + (
            f"; it is undefined on {', '.join(f'`{t}`' for t in undefined)}, where no "
            "simple baseline beats idle on the test seeds (the denominator is 0)."
            if undefined
            else "."
        ),
        "",
        "PPO's score normalised by the oracle instead (idle 0, privileged oracle 1, on the "
        f"oracle's seeds), over all {by_oracle.shape[1]} tasks × {width} runs: **IQM "
        f"{o_point:.3f} [{o_low:.3f}, {o_high:.3f}]**.",
        "",
    ]
    roomy = [t for t, s in scores.items() if s["headroom"].mean - s["headroom"].half_width > 0]
    beats = [
        t for t, s in scores.items() if s["ppo_vs_best"].mean - s["ppo_vs_best"].half_width > 0
    ]
    verdicts = [
        f"The privileged oracle is above the best simple baseline, with a paired 95 % interval "
        f"above 0, on {len(roomy)} of the {len(scores)} tasks; PPO beats the best simple "
        f"baseline on {len(beats)} of them"
        + (f" ({', '.join(f'`{t}`' for t in beats)})" if beats else "")
        + " at this training budget.",
        "",
    ]
    for t, s in scores.items():
        h, pv = s["headroom"], s["ppo_vs_best"]
        room = "headroom" if h.mean - h.half_width > 0 else "no headroom shown"
        if pv.mean - pv.half_width > 0:
            ppo = f"PPO beats the best simple baseline by {pv.mean:+.4f} ± {pv.half_width:.4f}"
        elif pv.mean + pv.half_width < 0:
            ppo = f"PPO is below the best simple baseline ({pv.mean:+.4f} ± {pv.half_width:.4f})"
        else:
            ppo = (
                f"PPO is level with the best simple baseline ({pv.mean:+.4f} ± {pv.half_width:.4f})"
            )
        verdicts.append(
            f"- `{t}`: {room} (oracle − {s['best']}: {h.mean:+.4f} ± {h.half_width:.4f} "
            f"over {s['oracle_n']} seeds; the oracle is at least every simple baseline on "
            f"{s['oracle_at_least_all']} of them); {ppo}."
        )
    timing = [_row(["task", "wall s", "CPU s", "PPO CPU s", "oracle CPU s"]), _row(["---"] * 5)]
    for t, m in summaries.items():
        tm = m["timings"]
        timing.append(
            _row(
                [
                    f"`{t}`",
                    f"{m['wall_s']}",
                    f"{m['cpu_s']}",
                    f"{tm['ppo_cpu_s']}",
                    f"{tm['oracle_cpu_s']}",
                ]
            )
        )
    body = [*lines, "## What the numbers say", "", *verdicts, "", "## Time", "", *timing]
    settings = next(iter(summaries.values()))["settings"] if summaries else asdict(args)
    page = head(settings) + "\n".join(body) + "\n" + deviations(settings)
    (args.out / f"{PREFIX}.md").write_text(page)
    _figure(args, tasks, data)
    print("\n".join(body))


def _is_main(path: Path) -> bool:
    return not path.stem.endswith("_curves")


def _figure(args: Args, tasks: list[str], data: pd.DataFrame) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tasks), figsize=(3.2 * len(tasks), 3.0), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        curves = pd.read_csv(args.out / f"{PREFIX}_{task}_curves.csv")
        for _, c in curves.groupby("run"):
            smooth = c.reward.rolling(20, min_periods=1).mean()
            ax.plot(c.timestep, smooth, lw=0.8, color="tab:blue", alpha=0.7)
        d = data[data.task == task]
        j = d.groupby("policy").value.mean()
        best = max(SIMPLE, key=lambda p: j[p])
        for name, style in (("idle", ":"), (best, "--"), ("privileged oracle", "-")):
            ax.axhline(j[name], ls=style, color="k", lw=0.8, label=name)
        ax.set_title(task, fontsize=8)
        ax.set_xlabel("env steps")
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("reward per round (training episodes)")
    fig.tight_layout()
    fig.savefig(args.out / f"{PREFIX}.png", dpi=120)


def main(argv: list[str] | None = None) -> None:
    args = parse_dataclass_args(Args, __doc__.splitlines()[0], argv)
    unknown = [t for t in args.tasks if t not in COORDINATION_TASKS]
    if unknown:
        sys.exit(f"error: unknown task {unknown[0]!r} (tasks: {', '.join(COORDINATION_TASKS)})")
    if args.quick:
        quick_out = Path(tempfile.mkdtemp(prefix="coordination-"))
        args = replace(
            args, runs=2, timesteps=200, test_seeds=2, oracle_seeds=1, grid_seeds=1, out=quick_out
        )
    if not args.report:
        for task in args.tasks:
            run_task(task, args)
    report(args)


if __name__ == "__main__":
    main()
