"""Measurements behind the coordination tasks (docs/rl.md, "Coordination tasks").

Each part plays fixed policies of OAR's settings (the ``-v2`` action: ``act`` 0 is OAR,
-1 is idle) on one task's scenario, with paired seeds (every arm of a part plays the
same seeds, so the same worlds and, with ``hidden``, the same draws), and reports each
arm's mean per-round success (the episode's return / rounds: the reward is the query
group's success) with a 95 % interval over seeds, and paired differences:

``hidden``
    LendingHidden-v0: fixed schedules of its 5 acting rounds (first-K, evenly spread,
    last-K, every other round from the first, every third, from round 3), on episodes
    drawn from the train and the test ranges and at fixed hidden settings: which
    schedule is best where, and by how much it beats the schedule best on the train
    draws (the question: does the best fixed schedule change with the hidden
    dynamics?). ``hidden_confirm``: the train draws' best schedule against the test
    windows' on more seeds; ``hidden_first_design``: the same table for the task's first
    design (coordination_lending_budget's world, `FIRST_DESIGN`), rejected.
``rivals``
    RivalCollectives-v0: A (the agent's collective) idle or OAR every round x B (the
    rival, OAR every round) idle (participation 0) or acting; each side's success, each
    side's efficacy (OAR minus idle) and the interference (A's efficacy when B is idle
    minus when B acts, as in Karan et al. 2025).
``budgets``
    SchoolSGDBudget-v0 without its limit (idle vs OAR every round: what OAR would
    spend against the budget C) and with it (OAR until the budget is spent);
    SchoolDefended-v0: idle vs OAR every round, train and test draws of the defence's
    strength (success, trimmed share, reward); LendingBudget20/40-v0: idle, first-K,
    evenly spread and OAR every round (the limit clips it to its first K).
``speed``
    CPU time of a single-env step on every task (20 steps after one, OAR every round).

Usage: ``python analyses/coordination_tasks.py --parts hidden rivals budgets speed
--seeds 10``; writes ``analyses/results/coordination_tasks.json`` (each part's numbers,
merged with the parts run before) and ``coordination_tasks.md`` (the tables), and
prints the wall and CPU time of each part.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # (one thread per process: CPU times comparable)

import numpy as np

from recourse_sim.env import RecourseEnv

RESULTS = Path(__file__).parent / "results"
T, K = 20, 5


@dataclass
class Args:
    parts: tuple[str, ...] = ("hidden", "rivals", "budgets", "speed")
    """Parts to run (hidden, hidden_confirm, hidden_first_design, rivals, budgets, speed;
    tables: only rewrite the Markdown from the JSON)."""
    seeds: int = 10
    """Paired seeds per arm: first_seed, first_seed + 1, ..."""
    first_seed: int = 0
    """The first seed (held-out checks use 1000 on)."""
    out: Path = RESULTS / "coordination_tasks.json"
    """The JSON of numbers (the Markdown tables are written next to it)."""


def schedules(rounds: int, k: int) -> dict[str, list[bool]]:
    """Fixed schedules of `k` acting rounds out of `rounds` (True: act by OAR)."""
    even = set(np.round(np.linspace(0, rounds - 1, k)).astype(int).tolist())
    return {
        "first": [t < k for t in range(rounds)],
        "even": [t in even for t in range(rounds)],
        "last": [t >= rounds - k for t in range(rounds)],
        "every_2nd": [t % 2 == 0 and t < 2 * k for t in range(rounds)],
        "every_3rd": [t % 3 == 0 and t < 3 * k for t in range(rounds)],
        "from_3": [2 <= t < 2 + k for t in range(rounds)],
    }


def play(env: RecourseEnv, acting: list[bool], seed: int) -> dict[str, float]:
    """One episode acting by OAR in the rounds `acting` marks, idle otherwise: the mean
    per-round success and reward, the rival's success (if any), total cost and mean
    trimmed share."""
    env.reset(seed=seed)
    oar = np.zeros(env.action_space.shape, np.float32)
    idle = oar.copy()
    idle[0] = -1.0
    success, rewards, rival, cost, trimmed = [], [], [], 0.0, []
    for act in acting:
        _, reward, terminated, truncated, info = env.step(oar if act else idle)
        parts = info["rewards"]
        success.append(parts["query_success"])
        rewards.append(reward)
        cost += parts["cost"]
        trimmed.append(parts.get("trimmed", 0.0))
        others = [v for k, v in info["collectives"].items() if k != env.controlled.population]
        if others:
            rival.append(others[0]["query_success"])
        if terminated or truncated:
            break
    return {
        "success": float(np.mean(success)),
        "reward": float(np.mean(rewards)),
        "rival_success": float(np.mean(rival)) if rival else float("nan"),
        "cost": cost,
        "trimmed": float(np.mean(trimmed)),
    }


def interval(x) -> list[float]:
    """[mean, half-width of the 95 % interval] (normal approximation, paired seeds)."""
    x = np.asarray(x, float)
    return [float(x.mean()), float(1.96 * x.std(ddof=1) / np.sqrt(len(x)))]


def arms(env: RecourseEnv, plans: dict[str, list[bool]], seeds: range) -> dict[str, dict]:
    """Every plan on `seeds`: per plan, each measure's per-seed values."""
    out = {}
    for name, acting in plans.items():
        runs = [play(env, acting, s) for s in seeds]
        out[name] = {key: [r[key] for r in runs] for key in runs[0]}
    return out


FIRST_DESIGN = {
    "world__repay_gain": 75.0,
    "populations__applicants": {  # coordination_lending_budget's seekers
        "strategy": "individual",
        "method": "pgd",
        "objective": "min_cost",
        "steps": 10,
        "increase_only": ["score"],
        "epsilon": 0.2,
        "participation": 0.1,
    },
    "hidden": {
        "learner.window": {"train": [2, 4], "test": [5, 7], "integer": True},
        "populations.borrowers.participation": {"train": [0.3, 0.6], "test": [0.6, 0.9]},
        "world.default_loss": {"train": [100.0, 200.0], "test": [200.0, 300.0]},
    },
}
"""The first design of LendingHidden-v0: coordination_lending_budget's world (score gains
on repayment, applicants' own recourse) with the hidden block; measured and rejected
(the first K rounds are best everywhere)."""


CONFIRMED = ("first", "every_2nd", "every_3rd")
"""The schedules `hidden_confirm` compares on more seeds: the train draws' best and the
test windows' best."""


def part_hidden(seeds: range, design: dict | None = None, confirm: bool = False) -> dict:
    plans = {"idle": [False] * T, **schedules(T, K)}
    design = design or {}
    fixed = {**{k: v for k, v in design.items() if k != "hidden"}, "hidden": {}}
    windows = (2, 3, 4, 5, 7) if design else (1, 2, 3, 4, 6, 7)
    corner = {  # the test ranges' far corner
        "populations__borrowers__participation": 0.9,
        "world__default_loss": 300.0,
    }
    settings = {
        "train draws": {"hidden_split": "train", **design},
        "test draws": {"hidden_split": "test", **design},
        **{
            f"window {w}": {**fixed, "learner__window": w}
            for w in windows  # participation 0.5, default loss 150 (the file's)
        },
        f"window {windows[-1]}, participation 0.9, default loss 300": {
            **fixed,
            "learner__window": windows[-1],
            **corner,
        },
    }
    if confirm:  # the test windows on more seeds, the train draws' best against theirs
        plans = {k: plans[k] for k in CONFIRMED}
        settings = {
            "test draws": {"hidden_split": "test"},
            **{f"window {w}": {"hidden": {}, "learner__window": w} for w in (1, 2, 3)},
            "window 3, participation 0.9, default loss 300": {
                "hidden": {},
                "learner__window": 3,
                **corner,
            },
        }
    out = {}
    for label, kwargs in settings.items():
        env = RecourseEnv("coordination_lending_hidden", **kwargs)
        out[label] = {k: v["success"] for k, v in arms(env, plans, seeds).items()}
    return out


def part_rivals(seeds: range) -> dict:
    out = {}
    for b in ("idle", "oar"):
        off = {} if b == "oar" else {"populations__n1_h1_students__participation": 0.0}
        env = RecourseEnv("coordination_rivals", **off)
        for a, acting in (("idle", [False] * T), ("oar", [True] * T)):
            runs = arms(env, {"x": acting}, seeds)["x"]
            out[f"A {a}, B {b}"] = {"A": runs["success"], "B": runs["rival_success"]}
    return out


def part_budgets(seeds: range) -> dict:
    out = {}
    always, never = [True] * T, [False] * T
    free = RecourseEnv("coordination_school_sgd", populations__h1_students__limit=None)
    limited = RecourseEnv("coordination_school_sgd")
    out["school_sgd"] = {
        "limit total_cost": limited.scenario.populations["h1_students"].limit.total_cost,
        "no limit": arms(free, {"idle": never, "oar": always}, seeds),
        "limit": arms(limited, {"oar": always}, seeds),
    }
    for split in ("train", "test"):
        env = RecourseEnv("coordination_school_defended", hidden_split=split)
        out[f"school_defended {split}"] = arms(env, {"idle": never, "oar": always}, seeds)
    for rounds, k in ((20, 5), (40, 10)):
        env = RecourseEnv(
            "coordination_lending_budget",
            rounds=rounds,
            populations__borrowers__limit__acting_rounds=k,
        )
        plans = {"idle": [False] * rounds, "oar (clipped to first K)": [True] * rounds}
        plans |= {k_: v for k_, v in schedules(rounds, k).items() if k_ in ("first", "even")}
        out[f"lending_budget T={rounds} K={k}"] = arms(env, plans, seeds)
    return out


def part_speed(seeds: range) -> dict:
    import gymnasium as gym

    from recourse_sim.registration import COORDINATION_TASKS

    out = {}
    for task, env_id in COORDINATION_TASKS.items():
        env = gym.make(env_id).unwrapped
        env.reset(seed=0)
        action = np.zeros(env.action_space.shape, np.float32)
        env.step(action)
        start = time.process_time()
        for _ in range(19):
            env.step(action)
        out[task] = 1000 * (time.process_time() - start) / 19
    return out


PARTS = {
    "hidden": part_hidden,
    "hidden_confirm": lambda seeds: part_hidden(seeds, confirm=True),
    "hidden_first_design": lambda seeds: part_hidden(seeds, FIRST_DESIGN),
    "rivals": part_rivals,
    "budgets": part_budgets,
    "speed": part_speed,
}


def _row(label: str, values: dict[str, list], ref: str) -> str:
    cells = []
    for name, v in values.items():
        m, h = interval(v)
        d, dh = interval(np.subtract(v, values[ref]))
        cells.append(f"{m:.3f} ± {h:.3f}" + ("" if name == ref else f" ({d:+.3f} ± {dh:.3f})"))
    best = max(values, key=lambda k: np.mean(values[k]))
    return f"| {label} | " + " | ".join(cells) + f" | {best} |"


def markdown(results: dict) -> str:
    lines = [
        "# Coordination tasks: measurements",
        "",
        "Written by `analyses/coordination_tasks.py`; paired seeds per part: "
        + ", ".join(f"{k} {v}" for k, v in results.get("seeds", {}).items())
        + ".",
        "Mean per-round success of the query group ± 95 % interval over seeds; in",
        "brackets the paired difference from the reference column.",
        "",
    ]
    titles = {
        "hidden": "LendingHidden-v0: is the best fixed schedule the same everywhere?",
        "hidden_confirm": (
            "LendingHidden-v0: the test windows on more seeds (`--parts hidden_confirm`)"
        ),
        "hidden_first_design": (
            "LendingHidden-v0's first design (rejected): coordination_lending_budget's "
            "world with the hidden block (`--parts hidden_first_design`)"
        ),
    }
    for part, title in titles.items():
        if part not in results:
            continue
        h = results[part]
        first_row = h.get("train draws", next(iter(h.values())))
        train_best = (
            "first"
            if part == "hidden_confirm"
            else max(first_row, key=lambda k: np.mean(first_row[k]))
        )
        names = list(first_row)
        lines += [
            f"## {title}",
            "",
            f"K = {K} acting rounds of T = {T}; reference: `{train_best}`, the best on "
            "the train draws.",
            "",
            "| setting | " + " | ".join(names) + " | best |",
            "|---" * (len(names) + 2) + "|",
        ]
        for label, values in h.items():
            lines.append(_row(label, {n: values[n] for n in names}, train_best))
        lines.append("")
    if "rivals" in results:
        r = results["rivals"]

        def diff(x, y, who):
            return interval(np.subtract(r[x][who], r[y][who]))

        a_eff_b_idle = np.subtract(r["A oar, B idle"]["A"], r["A idle, B idle"]["A"])
        a_eff_b_oar = np.subtract(r["A oar, B oar"]["A"], r["A idle, B oar"]["A"])
        lines += [
            "## RivalCollectives-v0: A (the agent) and B (OAR every round)",
            "",
            "| arm | A's success (S) | B's success (N1) |",
            "|---|---|---|",
        ]
        for arm, v in r.items():
            a, b = interval(v["A"]), interval(v["B"])
            lines.append(f"| {arm} | {a[0]:.3f} ± {a[1]:.3f} | {b[0]:.3f} ± {b[1]:.3f} |")
        rows = [
            ("A's efficacy, B idle", interval(a_eff_b_idle)),
            ("A's efficacy, B acting", interval(a_eff_b_oar)),
            ("interference (efficacy drop when B acts)", interval(a_eff_b_idle - a_eff_b_oar)),
            ("B's efficacy, A idle", diff("A idle, B oar", "A idle, B idle", "B")),
            ("B's efficacy, A acting", diff("A oar, B oar", "A oar, B idle", "B")),
            ("A's OAR on B's success (B idle)", diff("A oar, B idle", "A idle, B idle", "B")),
            ("B's OAR on A's success (A idle)", diff("A idle, B oar", "A idle, B idle", "A")),
        ]
        lines += ["", "| paired difference | mean ± 95 % |", "|---|---|"]
        lines += [f"| {name} | {m:+.4f} ± {h:.4f} |" for name, (m, h) in rows]
        lines.append("")
    if "budgets" in results:
        lines += ["## Budgets and the defence", ""]
        for task, arms_ in results["budgets"].items():
            if task == "school_sgd":
                lines.append(f"school_sgd: limit total_cost = {arms_['limit total_cost']:g}")
                arms_ = {
                    **{f"no limit: {k}": v for k, v in arms_["no limit"].items()},
                    **{f"limit: {k}": v for k, v in arms_["limit"].items()},
                }
                lines.append("")
            ref = next(iter(arms_))
            lines += [f"### {task}", ""]
            lines += [f"| arm | success | reward | reward − {ref}'s | total cost | trimmed share |"]
            lines.append("|---|---|---|---|---|---|")
            for arm, v in arms_.items():
                s, r = interval(v["success"]), interval(v["reward"])
                d = interval(np.subtract(v["reward"], arms_[ref]["reward"]))
                c, t = interval(v["cost"]), interval(v["trimmed"])
                lines.append(
                    f"| {arm} | {s[0]:.3f} ± {s[1]:.3f} | {r[0]:.3f} ± {r[1]:.3f} | "
                    f"{d[0]:+.3f} ± {d[1]:.3f} | {c[0]:.2f} ± {c[1]:.2f} | "
                    f"{t[0]:.3f} ± {t[1]:.3f} |"
                )
            lines.append("")
    if "speed" in results:
        lines += ["## CPU time of a single-env step (ms, OAR every round)", ""]
        lines += ["| task | ms |", "|---|---|"]
        lines += [f"| {k} | {v:.1f} |" for k, v in results["speed"].items()]
        lines.append("")
    if "timing" in results:
        lines += ["## Run time of each part (the machine shared)", ""]
        lines += ["| part | wall s | CPU s |", "|---|---|---|"]
        lines += [f"| {k} | {w:.0f} | {c:.0f} |" for k, (w, c) in results["timing"].items()]
        lines.append("")
    return "\n".join(lines)


def main(args: Args) -> None:
    warnings.simplefilter("ignore")  # (single-class refits in saturated lending rounds)
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results.setdefault("timing", {})
    results.setdefault("seeds", {})
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for part in args.parts:
        if part == "tables":  # only rewrite the Markdown from the JSON
            args.out.with_suffix(".md").write_text(markdown(results))
            continue
        wall, cpu = time.time(), time.process_time()
        results[part] = PARTS[part](seeds)
        results["timing"][part] = [time.time() - wall, time.process_time() - cpu]
        results["seeds"][part] = f"{seeds.start}-{seeds.stop - 1}"
        print(f"{part}: {time.time() - wall:.0f} s wall, {time.process_time() - cpu:.0f} s CPU")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))
        args.out.with_suffix(".md").write_text(markdown(results))


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from _args import parse_args

    main(parse_args(Args, __doc__.splitlines()[0]))
