"""Performance benchmark (issue 8): our simulator side by side with what users would
pick instead, and the speeds the targets ask for.

    python analyses/benchmark.py [--quick] --out DIR
    python analyses/benchmark.py --sections dice mixed --out DIR

writes ``DIR/benchmark.json``. With ``--sections`` only the named sections run (round,
scaling, oar, env, batched, v2_batched, ppo, oar_level, genre, dice, mixed, mlp, startup) and only
their keys are replaced in an existing ``DIR/benchmark.json``, every other key kept from
the full run; ``sections_updated`` records which sections were re-run, their wall and
CPU seconds and the load average then (so that a section can be re-run on a busy
machine without re-timing the others, whose timings need a quiet one).

Timings are medians over repeats; every ratio is measured within one run (numerator and
denominator interleaved) so that a shared, loaded machine slows both alike. Peak memory
is measured in a fresh subprocess per population size (``resource.getrusage`` in the
child), so earlier allocations of this process do not count; the OAR step is timed in a
fresh subprocess too, so that the heap the sections before it left does not slow its
large arrays. The load average at start and end is recorded with the results.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

# one thread everywhere (set before numpy/torch load their BLAS): on 2 shared cores a
# thread pool is far slower under load, and both sides of every ratio get the same
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

torch.set_num_threads(1)
threadpool_limits(1)

TARGETS: dict[str, tuple[str, float]] = {
    "round_over_refit": ("<=", 3.0),
    "scaling_exponent": ("<=", 1.15),
    "peak_rss_mb_100k": ("<=", 2000.0),
    "oar_pgd_step_s_30k": ("<=", 0.1),
    "hypergrad_rel_err": ("<=", 1e-4),
    "env_steps_per_s": (">=", 500.0),
    "batched_vs_single_speedup": (">=", 30.0),
    "v2_batched_steps_per_s_school": (">=", 500.0),
    "v2_batched_steps_per_s_lending": (">=", 500.0),
    "genre_recourses_per_s": (">=", 2000.0),
    "individual_speedup_vs_dice": (">=", 300.0),
    "individual_speedup_vs_dice_per_row": (">=", 50.0),
    "individual_cost_vs_dice": ("<=", 1.0),
    "first_round_s_csv_oracle": ("<=", 3.0),
    "ppo_env_share": ("<=", 0.5),
    "mixed_min_cost_gap_vs_milp": ("<=", 1e-6),
}

KEYS = (
    "round_over_refit",
    "scaling_exponent",
    "peak_rss_mb_100k",
    "oar_pgd_step_s_30k",
    "hypergrad_rel_err",
    "env_steps_per_s",
    "batched_env_steps_per_s",
    "batched_vs_single_speedup",
    "v2_batched_steps_per_s_school",
    "v2_batched_steps_per_s_lending",
    "genre_recourses_per_s",
    "individual_speedup_vs_dice",
    "individual_speedup_vs_dice_per_row",
    "individual_cost_vs_dice",
    "first_round_s_csv_oracle",
    "ppo_train_steps_per_s",
    "sb3_ppo_ceiling_steps_per_s",
    "ppo_env_share",
    "mixed_min_cost_gap_vs_milp",
    "mixed_min_cost_rows_per_s",
    "minutes_to_oar_level",
)


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _school_env(n: int, rounds: int = 10_000, scenario: str = "school_assignment"):
    from recourse_sim.env import RecourseEnv

    return RecourseEnv(scenario, world__cohort_size=n, rounds=rounds)


# -- 2. a simulation round against the bare retrain -------------------------------------


def bench_round(n: int = 10_000, repeats: int = 5, seed: int = 0) -> dict[str, Any]:
    """One full school_assignment round (decision, individual recourse, collective OAR,
    update) against scikit-learn's ``LogisticRegression.fit`` on the same batch,
    interleaved round by round."""
    from sklearn.linear_model import LogisticRegression as SkLogReg

    env = _school_env(n)
    env.reset(seed=seed)
    action = np.zeros(env.action_space.shape, np.float32)
    env.step(action)  # warm-up
    rounds, fits = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        env.step(action)
        rounds.append(time.perf_counter() - t0)
        state = env.learner.state_
        X, y = state["X_mem"].numpy(), state["y_mem"].numpy()  # the batch it refit on
        t0 = time.perf_counter()
        SkLogReg(C=1.0).fit(X, y)
        fits.append(time.perf_counter() - t0)
    round_s, fit_s = statistics.median(rounds), statistics.median(fits)
    return {
        "round_over_refit": round_s / fit_s,
        "round_s_10k": round_s,
        "sklearn_fit_s_10k": fit_s,
        "round_n": n,
        "round_d": int(env.n_features),
        "round_batch_rows": len(y),
    }


def _child_round(n: int, repeats: int) -> dict[str, Any]:
    """Run in a fresh interpreter: median round time at cohort size n and peak RSS."""
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    env = _school_env(n)
    env.reset(seed=0)
    action = np.zeros(env.action_space.shape, np.float32)
    env.step(action)  # warm-up
    step_s = _median_time(lambda: env.step(action), repeats)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"n": n, "round_s": step_s, "peak_rss_mb": rss / 1024, "import_rss_mb": rss0 / 1024}


def _in_child(*flags: str) -> dict[str, Any]:
    """This script's JSON answer to `flags`, from a fresh interpreter: nothing an earlier
    section allocated or cached (heap, page cache of large arrays) affects the timing."""
    out = subprocess.run(
        [sys.executable, __file__, *flags], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_scaling(sizes=(1_000, 10_000, 100_000), repeats: int = 3) -> dict[str, Any]:
    """Round time per cohort size, each in its own subprocess (honest peak RSS)."""
    rows = [_in_child("--child-round", str(n), "--repeats", str(repeats)) for n in sizes]
    logn = np.log([r["n"] for r in rows])
    logt = np.log([r["round_s"] for r in rows])
    slope = float(np.polyfit(logn, logt, 1)[0])
    big = [r for r in rows if r["n"] == 100_000]
    top = float((logt[-1] - logt[-2]) / (logn[-1] - logn[-2]))
    return {
        "scaling_exponent": slope,
        "scaling_exponent_top_two": top,  # the two largest sizes only: no fixed overhead
        "peak_rss_mb_100k": big[0]["peak_rss_mb"] if big else None,
        "scaling_rows": rows,
    }


# -- 4. the OAR hypergradient -------------------------------------------------------------


def _oar_problem(n: int, d: int, n_queries: int = 50, seed: int = 0):
    from recourse_sim.learners import LogisticRegression

    rng = np.random.default_rng(seed)
    w = rng.normal(size=d) / math.sqrt(d)
    X0 = rng.normal(size=(n, d))
    y0 = (X0 @ w + 0.5 * rng.normal(size=n) > 0).astype(np.int64)
    X = rng.normal(size=(n, d))
    y = (X @ w + 0.5 * rng.normal(size=n) > 0).astype(np.int64)
    learner = LogisticRegression(C=1.0, update_rule="window", window=1).fit(X0, y0)
    with torch.no_grad():
        p = learner.predict_proba(X)[:, 1]
    queries = X[np.argsort(p)[:n_queries]]  # the most rejected rows want the goal 1
    return learner, X, y, queries


def bench_oar(n: int = 30_000, d: int = 100, repeats: int = 5, seed: int = 0) -> dict[str, Any]:
    """OAR at scale. ``oar_pgd_step_s_30k``: one whole projected-gradient step of
    `collective_recourse` (the refit at the trial point with the query loss and its
    hypergradient, the descent direction, the projection and the step-size test);
    ``oar_hypergrad_s_30k``: one evaluation of the query loss and its hypergradient on
    its own (from a cold refit); and the hypergradient's relative error against central
    finite differences of the retrained model's query loss."""
    from recourse_sim.recourse import ActionSet, collective_recourse
    from recourse_sim.recourse.collective import collective_hypergradient

    learner, X, y, queries = _oar_problem(n, d, seed=seed)
    delta0 = np.zeros_like(X)
    grad_s = _median_time(
        lambda: collective_hypergradient(learner, X, y, queries, 1, delta0), repeats
    )
    aset = ActionSet(d, p=2, epsilon=0.5)

    trials = {}

    def solve(steps: int) -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        res = collective_recourse(learner, X, y, queries, 1, aset, steps=steps)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        trials[steps] = len(res.loss_history) - 1  # trial steps taken (a stall stops early)
        return wall, cpu

    # collective_recourse also evaluates the honest and final losses: the per-step time
    # is the difference of 6 and 1 steps over 5, so that fixed overhead cancels; the
    # two are interleaved so that load changes hit both alike. The process's CPU time
    # is reported next to the wall time (one thread: on an idle machine they agree;
    # under load the wall time also counts the waits for a core).
    solve(1)  # warm-up
    many, one = [], []
    for _ in range(repeats):
        many.append(solve(6))
        one.append(solve(1))

    def per_step(k: int) -> float:
        diff = statistics.median(m[k] for m in many) - statistics.median(o[k] for o in one)
        return max(diff / 5, 0.0)

    pgd_step_s, pgd_step_cpu_s = per_step(0), per_step(1)

    # relative error of the directional derivative along the gradient and two random
    # directions (central differences, h chosen for float64 and the Newton tolerance)
    loss0, g = collective_hypergradient(learner, X, y, queries, 1, delta0)
    rng = np.random.default_rng(seed + 1)
    dirs = [g / np.linalg.norm(g)] + [
        (v := rng.normal(size=X.shape)) / np.linalg.norm(v) for _ in range(2)
    ]
    errs = []
    h = 1e-3
    for v in dirs:
        lp, _ = collective_hypergradient(learner, X, y, queries, 1, delta0 + h * v)
        lm, _ = collective_hypergradient(learner, X, y, queries, 1, delta0 - h * v)
        fd = (lp - lm) / (2 * h)
        an = float(np.sum(g * v))
        errs.append(abs(fd - an) / max(abs(fd), abs(an), 1e-300))
    return {
        "oar_pgd_step_s_30k": pgd_step_s,
        "oar_pgd_step_cpu_s_30k": pgd_step_cpu_s,
        "oar_pgd_trial_steps": trials,  # must be {6: 6, 1: 1} for the difference to hold
        "oar_hypergrad_s_30k": grad_s,
        "hypergrad_rel_err": max(errs),
        "hypergrad_rel_err_per_direction": errs,
        "hypergrad_fd_step": h,
        "oar_n": n,
        "oar_d": d,
        "oar_query_loss": loss0,
    }


# -- 5. RL throughput --------------------------------------------------------------------


RL_SCENARIO = "school_assignment_controlled"  # the action drives the H1 collective


def _env_rate(n: int, steps: int, n_envs: int, scenario: str, seed: int) -> tuple[float, float]:
    """Steps per second of one env and of a synchronous vector env of n_envs (counting
    every sub-env step): the median over 5 blocks of about steps / 5 steps each."""
    import gymnasium as gym

    def median_rate(step, n_steps: int, per_step: int) -> float:
        block = max(n_steps // 5, 1)
        rates = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(block):
                step()
            rates.append(block * per_step / (time.perf_counter() - t0))
        return statistics.median(rates)

    env = _school_env(n, scenario=scenario)
    env.reset(seed=seed)
    action = np.zeros(env.action_space.shape, np.float32)
    for _ in range(3):
        env.step(action)
    single = median_rate(lambda: env.step(action), steps, 1)

    venv = gym.vector.SyncVectorEnv(
        [lambda: _school_env(n, scenario=scenario) for _ in range(n_envs)]
    )
    venv.reset(seed=seed)
    actions = np.zeros(venv.action_space.shape, np.float32)
    venv.step(actions)
    vec = median_rate(lambda: venv.step(actions), max(steps // n_envs, 5), n_envs)
    venv.close()
    return single, vec


def bench_env(n: int = 200, steps: int = 200, n_envs: int = 8, seed: int = 0) -> dict[str, Any]:
    """Env steps per second at cohort size n, single and as a synchronous vector env of
    n_envs (counting every sub-env step). The headline is the RL scenario (the agent's
    action replaces the OAR solver); school_assignment (OAR collective) is reported too."""
    rl, rl_vec = _env_rate(n, steps, n_envs, RL_SCENARIO, seed)
    oar, oar_vec = _env_rate(n, max(steps // 2, 4), n_envs, "school_assignment", seed)
    return {
        "env_steps_per_s": rl,
        "vec_env_steps_per_s": rl_vec,
        "env_scenario": RL_SCENARIO,
        "env_steps_per_s_oar_scenario": oar,
        "vec_env_steps_per_s_oar_scenario": oar_vec,
        "vec_env_n": n_envs,
        "env_n": n,
    }


def batched_beside_single(env_id: str, n_envs: int, seed: int, **settings):
    """The native batched env of `n_envs` worlds and one single env of `env_id`, both reset
    with `seed` and stepped twice with the zero action (warm-up); returns them with the
    zero actions (batched, single)."""
    import gymnasium as gym

    import recourse_sim  # noqa: F401 - registers the IDs

    venv = gym.make_vec(
        env_id, num_envs=n_envs, vectorization_mode="vector_entry_point", **settings
    )
    env = gym.make(env_id, **settings).unwrapped
    venv.reset(seed=seed)
    env.reset(seed=seed)
    actions = np.zeros(venv.action_space.shape, np.float32)
    action = actions[0]
    for _ in range(2):  # warm-up
        venv.step(actions)
        env.step(action)
    return venv, env, actions, action


def bench_batched(
    n_envs: int = 64, n: int = 200, pairs: int = 7, batched_steps: int = 5, seed: int = 0
) -> dict[str, Any]:
    """Env steps per second of the native batched vector env (``gym.make_vec(...,
    vectorization_mode="vector_entry_point")``, `n_envs` worlds of cohort size n,
    SchoolAssignment-v1, counting every world's step) and its speed-up over one
    `RecourseEnv` with the same settings, measured in this run: `pairs` interleaved
    blocks (`batched_steps` batched steps, then single steps for about as long), each
    rate the median over its blocks. Both run without episode ends (rounds = 10,000,
    as `bench_env`); the batched rate with the scenario's 20-round episodes, whose
    autoresets refit every world's first model, is reported too."""
    import gymnasium as gym

    import recourse_sim  # noqa: F401 - registers the IDs

    env_id = "recourse_sim/SchoolAssignment-v1"
    settings = {"world__cohort_size": n, "rounds": 10_000}
    venv, env, actions, action = batched_beside_single(env_id, n_envs, seed, **settings)
    single_steps = max(batched_steps * n_envs // 30, 2)
    batched_rates, single_rates = [], []
    for _ in range(pairs):
        t0 = time.perf_counter()
        for _ in range(batched_steps):
            venv.step(actions)
        batched_rates.append(batched_steps * n_envs / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for _ in range(single_steps):
            env.step(action)
        single_rates.append(single_steps / (time.perf_counter() - t0))
    batched, single = statistics.median(batched_rates), statistics.median(single_rates)
    venv.close()

    episodes = gym.make_vec(
        env_id, num_envs=n_envs, vectorization_mode="vector_entry_point", world__cohort_size=n
    )
    episodes.reset(seed=seed)
    steps = max(episodes.unwrapped._rounds, 2)  # one episode and the resets after it
    t0 = time.perf_counter()
    for _ in range(steps + 1):
        episodes.step(actions)
    with_resets = (steps + 1) * n_envs / (time.perf_counter() - t0)
    episodes.close()
    return {
        "batched_env_steps_per_s": batched,
        "batched_vs_single_speedup": batched / single,
        "batched_single_env_steps_per_s": single,
        "batched_env_steps_per_s_with_resets": with_resets,
        "batched_n_envs": n_envs,
        "batched_env_n": n,
        "batched_env_class": type(venv.unwrapped).__name__,
    }


def bench_v2_batched(
    n_envs: int = 64, pairs: int = 3, batched_steps: int = 3, seed: int = 0
) -> dict[str, Any]:
    """World-steps per CPU second (one thread: per core) of the native batched ``-v2``
    env (``SchoolAssignment-v2``, ``Lending-v2`` at their scenarios' sizes, `n_envs`
    worlds, OAR solved for all of them at once) and of one single ``-v2`` env, measured
    in this run: `pairs` interleaved blocks (`batched_steps` batched steps, then single
    steps for about as long), each rate the median over its blocks, wall-clock rates
    beside them. The action is zero, OAR's own settings, so every world solves OAR
    every round (the dearest action); episodes do not end (rounds = 10,000).

    Then, after them, `batched_steps` more batched steps with their CPU time split
    (`_v2_split`), in milliseconds a world-step: ``v2_batched_ms_refit_passes_*`` (the
    refits' passes over every row: P, the risk, the gradient and the Hessian),
    ``..._rest_of_oar_*`` and ``..._rest_of_round_*``, and
    ``v2_batched_steps_per_s_without_refit_passes_*``, the rate if those passes cost
    nothing."""

    import recourse_sim  # noqa: F401 - registers the IDs

    out: dict[str, Any] = {"v2_batched_n_envs": n_envs}
    for name, env_id in (
        ("school", "recourse_sim/SchoolAssignment-v2"),
        ("lending", "recourse_sim/Lending-v2"),
    ):
        venv, env, actions, action = batched_beside_single(env_id, n_envs, seed, rounds=10_000)
        single_steps = max(batched_steps * n_envs // 8, 2)
        rates: dict[str, list[float]] = {k: [] for k in ("cpu", "wall", "single_cpu", "single")}
        for _ in range(pairs):
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(batched_steps):
                venv.step(actions)
            rates["wall"].append(batched_steps * n_envs / (time.perf_counter() - t0))
            rates["cpu"].append(batched_steps * n_envs / (time.process_time() - c0))
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(single_steps):
                env.step(action)
            rates["single"].append(single_steps / (time.perf_counter() - t0))
            rates["single_cpu"].append(single_steps / (time.process_time() - c0))
        med = {k: statistics.median(v) for k, v in rates.items()}
        out.update(
            {
                f"v2_batched_steps_per_s_{name}": med["cpu"],
                f"v2_batched_wall_steps_per_s_{name}": med["wall"],
                f"v2_single_steps_per_s_{name}": med["single_cpu"],
                f"v2_single_wall_steps_per_s_{name}": med["single"],
                f"v2_batched_vs_single_{name}": med["cpu"] / med["single_cpu"],
                f"v2_batched_env_class_{name}": type(venv.unwrapped).__name__,
            }
        )
        total, passes, rest_of_oar = _v2_split(venv, actions, batched_steps)
        world_steps = batched_steps * n_envs
        rest_of_round = total - passes - rest_of_oar
        out.update(
            {
                f"v2_batched_ms_refit_passes_{name}": 1000 * passes / world_steps,
                f"v2_batched_ms_rest_of_oar_{name}": 1000 * rest_of_oar / world_steps,
                f"v2_batched_ms_rest_of_round_{name}": 1000 * rest_of_round / world_steps,
                f"v2_batched_steps_per_s_without_refit_passes_{name}": world_steps
                / (total - passes),
            }
        )
        venv.close()
    return out


def _v2_split(venv, actions, steps: int) -> tuple[float, float, float]:
    """CPU seconds of `steps` batched steps: in all, in the refits' passes over the rows
    (`batched_oar._at` and `_hessian`: OAR's refits and the update's) and in OAR apart
    from its passes (`BatchedRecourseEnv._oar`: the worlds' refits set up, OAR solved),
    each function timed by a wrapper while these steps run."""
    from recourse_sim.env import batched, batched_oar

    spent = {"passes": 0.0, "oar": 0.0, "oar_passes": 0.0}
    in_oar = False

    def timed(fn, is_oar: bool):
        def call(*args, **kwargs):
            nonlocal in_oar
            in_oar |= is_oar
            c0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                took = time.process_time() - c0
                if is_oar:
                    spent["oar"] += took
                    in_oar = False
                else:
                    spent["passes"] += took
                    spent["oar_passes"] += took if in_oar else 0.0

        return call

    originals = [
        (batched_oar, "_at"),
        (batched_oar, "_hessian"),
        (batched.BatchedRecourseEnv, "_oar"),
    ]
    saved = [getattr(owner, attr) for owner, attr in originals]
    for (owner, attr), fn in zip(originals, saved, strict=True):
        setattr(owner, attr, timed(fn, is_oar=attr == "_oar"))
    try:
        c0 = time.process_time()
        for _ in range(steps):
            venv.step(actions)
        total = time.process_time() - c0
    finally:
        for (owner, attr), fn in zip(originals, saved, strict=True):
            setattr(owner, attr, fn)
    return total, spent["passes"], spent["oar"] - spent["oar_passes"]


def bench_ppo(
    n_envs: int = 64, n: int = 200, timesteps: int = 8192, pairs: int = 2, seed: int = 0
) -> dict[str, Any]:
    """PPO's training speed where users feel it: stable-baselines3's PPO (one thread) on
    the native batched SchoolAssignment-v1 env (`n_envs` worlds of cohort size n,
    through `BatchedVecEnv`), beside the same PPO on a zero-cost env of the same spaces
    (the most SB3 itself can consume: its rollout bookkeeping and updates alone), in
    `pairs` interleaved runs of `timesteps` steps each (medians). ``ppo_env_share`` is
    the share of the batched run's wall time spent inside the env (reset and step)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

    from recourse_sim.agents.sb3 import BatchedVecEnv
    from recourse_sim.env.batched import BatchedRecourseEnv

    class Timed(VecEnvWrapper):
        """Adds up the wall time spent in the wrapped env."""

        def __init__(self, venv: VecEnv):
            super().__init__(venv)
            self.env_s = 0.0

        def reset(self):
            t0 = time.perf_counter()
            obs = self.venv.reset()
            self.env_s += time.perf_counter() - t0
            return obs

        def step_async(self, actions):
            t0 = time.perf_counter()
            self.venv.step_async(actions)
            self.env_s += time.perf_counter() - t0

        def step_wait(self):
            t0 = time.perf_counter()
            out = self.venv.step_wait()
            self.env_s += time.perf_counter() - t0
            return out

    class ZeroCost(VecEnv):
        """The spaces of `like`, zero observations and rewards, its episode length."""

        def __init__(self, like: VecEnv, rounds: int):
            super().__init__(like.num_envs, like.observation_space, like.action_space)
            self.rounds, self.t = rounds, 0
            self.obs = np.zeros((like.num_envs, *like.observation_space.shape), np.float32)

        def reset(self):
            self.t = 0
            return self.obs.copy()

        def step_async(self, actions):
            self.t += 1

        def step_wait(self):
            done = np.full(self.num_envs, self.t % self.rounds == 0)
            infos = [
                {"terminal_observation": self.obs[i], "TimeLimit.truncated": True} if d else {}
                for i, d in enumerate(done)
            ]
            return self.obs.copy(), np.zeros(self.num_envs, np.float32), done, infos

        def close(self):
            pass

        def get_attr(self, name, indices=None):
            return [None] * self.num_envs

        def set_attr(self, name, value, indices=None):
            pass

        def env_method(self, name, *args, indices=None, **kwargs):
            return [None] * self.num_envs

        def env_is_wrapped(self, wrapper_class, indices=None):
            return [False] * self.num_envs

    def rate(venv: VecEnv) -> tuple[float, float, float]:
        timed = Timed(venv)
        timed.seed(seed)
        model = PPO("MlpPolicy", timed, n_steps=max(2048 // n_envs, 1), seed=seed, device="cpu")
        t0, c0 = time.perf_counter(), time.process_time()
        model.learn(total_timesteps=timesteps)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        return model.num_timesteps / wall, cpu / model.num_timesteps, timed.env_s / wall

    worlds = BatchedRecourseEnv(n_envs, "school_assignment_controlled", world__cohort_size=n)
    real = BatchedVecEnv(worlds)
    zero = ZeroCost(real, worlds.envs[0].scenario.rounds)
    runs: dict[str, list[tuple[float, float, float]]] = {"real": [], "zero": []}
    for _ in range(pairs):
        runs["real"].append(rate(real))
        runs["zero"].append(rate(zero))
    real.close()

    def median(name: str, i: int) -> float:
        return statistics.median(r[i] for r in runs[name])

    return {
        "ppo_train_steps_per_s": median("real", 0),
        "sb3_ppo_ceiling_steps_per_s": median("zero", 0),
        "ppo_env_share": median("real", 2),
        "ppo_train_cpu_s_per_1k_steps": 1000 * median("real", 1),
        "sb3_ppo_ceiling_cpu_s_per_1k_steps": 1000 * median("zero", 1),
        "ppo_n_envs": n_envs,
        "ppo_env_n": n,
        "ppo_timesteps": timesteps,
    }


# -- 5b. PPO's time to OAR's level ---------------------------------------------------------

# the two controlled scenarios, by the short names of ``minutes_to_oar_level``
OAR_LEVEL_SCENARIOS = {
    "school": "school_assignment_controlled",
    "lending": "lending_fico_controlled",
}
# toy worlds for the smoke test (as analyses/train_coordinator.py --quick)
_TINY_WORLDS = {
    "school_assignment_controlled": {
        "world__cohort_size": 100, "world__history_size": 200, "rounds": 3,
    },
    "lending_fico_controlled": {
        "world__n_applicants": 100, "world__history_size": 200, "rounds": 3,
    },
}  # fmt: skip


def _oar_level_run(
    scenario: str,
    cap_s: float,
    eval_seeds: tuple[int, ...],
    eval_every: int,
    n_envs: int,
    overrides: dict[str, Any],
    rollout: int = 500,
    seed: int = 0,
) -> dict[str, Any]:
    """One scenario of `bench_oar_level`: OAR's held-out query success, then PPO trained
    until its deterministic policy's held-out query success first reaches it (or the
    training clock reaches `cap_s`)."""
    from stable_baselines3.common.callbacks import BaseCallback

    from recourse_sim.agents.policies import evaluate, make_baseline
    from recourse_sim.agents.training import PPOConfig, TrainedPolicy, train_ppo
    from recourse_sim.env import RecourseEnv

    held_out = RecourseEnv(scenario, **overrides)
    t0 = time.perf_counter()
    oar = make_baseline("oar", horizon=1, steps=10)  # analyses/train_coordinator.py's OAR
    oar_level = float(np.mean([r["query_success"] for r in evaluate(oar, held_out, eval_seeds)]))
    oar_eval_s = time.perf_counter() - t0

    # analyses/train_coordinator.py's PPO settings (a 500-round rollout, minibatches of
    # 100), its rollout spread over `n_envs` worlds of the native batched env
    config = PPOConfig(
        timesteps=10**9,  # stopped by the callback
        n_envs=n_envs,
        n_steps=max(rollout // n_envs, 1),
        batch_size=min(100, rollout),
        learning_rate=1e-3,
        gamma=0.7,
        log_std_init=0.0,
    )

    class UntilOARLevel(BaseCallback):
        """Every `eval_every` steps (at the start of a rollout, so after an update) the
        deterministic policy on the held-out seeds, its time off the training clock;
        stops at OAR's level or at the cap."""

        def __init__(self) -> None:
            super().__init__()
            self.wall0, self.cpu0 = time.perf_counter(), time.process_time()
            self.eval_wall = self.eval_cpu = 0.0
            self.next_eval, self.evals = 0, []
            self.reached: dict[str, float] | None = None
            self.stop = False

        def clock(self) -> tuple[float, float]:
            """Training wall and CPU seconds so far (evaluations excluded)."""
            wall = time.perf_counter() - self.wall0 - self.eval_wall
            return wall, time.process_time() - self.cpu0 - self.eval_cpu

        def _on_rollout_start(self) -> None:
            if self.num_timesteps >= self.next_eval and not self.stop:
                self.evaluate()
                self.next_eval = self.num_timesteps + eval_every

        def evaluate(self) -> None:
            wall, cpu = self.clock()
            w0, c0 = time.perf_counter(), time.process_time()
            low, high = self.training_env.get_attr("low")[0], self.training_env.get_attr("high")[0]
            rows = evaluate(TrainedPolicy(self.model, low, high), held_out, eval_seeds)
            success = float(np.mean([r["query_success"] for r in rows]))
            self.eval_wall += time.perf_counter() - w0
            self.eval_cpu += time.process_time() - c0
            self.evals.append(
                {"steps": int(self.num_timesteps), "train_s": wall, "query_success": success}
            )
            print(
                f"oar_level {scenario}: {self.num_timesteps} steps, {wall:.0f} s training, "
                f"held-out query success {success:.4f} (OAR {oar_level:.4f})",
                file=sys.stderr,
                flush=True,
            )
            if success >= oar_level and self.reached is None:
                self.reached = {"steps": int(self.num_timesteps), "wall_s": wall, "cpu_s": cpu}
                self.stop = True

        def _on_step(self) -> bool:
            if self.clock()[0] >= cap_s:
                self.stop = True
            return not self.stop

    watch = UntilOARLevel()
    train_ppo(scenario, seed, config, batched=n_envs > 1, callback=watch, **overrides)
    if watch.reached is None and (
        not watch.evals or watch.evals[-1]["steps"] < watch.num_timesteps
    ):
        watch.evaluate()  # the policy the cap stopped at
    wall, cpu = watch.clock()
    best = max(watch.evals, key=lambda e: e["query_success"])
    reached = watch.reached
    return {
        "minutes": None if reached is None else reached["wall_s"] / 60,
        "cpu_minutes": None if reached is None else reached["cpu_s"] / 60,
        "steps": None if reached is None else reached["steps"],
        "oar_query_success": oar_level,
        "ppo_best_query_success": best["query_success"],
        "ppo_best_steps": best["steps"],
        "steps_trained": int(watch.num_timesteps),
        "train_minutes": wall / 60,
        "train_cpu_minutes": cpu / 60,
        "eval_minutes": watch.eval_wall / 60,
        "eval_cpu_minutes": watch.eval_cpu / 60,
        "oar_eval_s": oar_eval_s,
        "evals": len(watch.evals),
        "curve": [
            [e["steps"], round(e["train_s"], 2), round(e["query_success"], 4)] for e in watch.evals
        ],
    }


def bench_oar_level(
    cap_minutes: float = 8.0,
    eval_seeds: tuple[int, ...] = tuple(range(1000, 1010)),
    eval_every: int = 2500,
    n_envs: int = 10,
    rollout: int = 500,
    tiny: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """``minutes_to_oar_level``: per controlled scenario (school, lending), the training
    wall time (minutes, evaluations excluded) until stable-baselines3's PPO, trained as
    analyses/train_coordinator.py trains it (its settings, one seed, one torch thread) on
    the native batched env of `n_envs` worlds, first reaches collective OAR's held-out
    query success (the ``oar`` baseline, H = 1, on the same held-out seeds), its
    deterministic policy evaluated every `eval_every` steps; None if not within
    `cap_minutes` of training (then ``oar_level_ppo_best`` says how near it got). The
    clock includes building the env and the model. Nothing is extrapolated."""
    out: dict[str, dict[str, Any]] = {}
    for short, scenario in OAR_LEVEL_SCENARIOS.items():
        overrides = _TINY_WORLDS[scenario] if tiny else {}
        out[short] = _oar_level_run(
            scenario, 60 * cap_minutes, eval_seeds, eval_every, n_envs, overrides, rollout, seed
        )

    def per(key: str) -> dict[str, Any]:
        return {short: r[key] for short, r in out.items()}

    return {
        "minutes_to_oar_level": per("minutes"),
        "oar_level_cap_minutes": cap_minutes,
        "oar_level_cpu_minutes": per("cpu_minutes"),
        "oar_level_steps": per("steps"),
        "oar_level_oar_query_success": per("oar_query_success"),
        "oar_level_ppo_best": per("ppo_best_query_success"),
        "oar_level_ppo_best_steps": per("ppo_best_steps"),
        "oar_level_steps_trained": per("steps_trained"),
        "oar_level_train_minutes": per("train_minutes"),
        "oar_level_train_cpu_minutes": per("train_cpu_minutes"),
        "oar_level_eval_minutes": per("eval_minutes"),
        "oar_level_eval_cpu_minutes": per("eval_cpu_minutes"),
        "oar_level_oar_eval_s": per("oar_eval_s"),
        "oar_level_evals": per("evals"),
        "oar_level_curve": per("curve"),  # [steps, training seconds, held-out success]
        "oar_level_eval_seeds": len(eval_seeds),
        "oar_level_eval_every_steps": eval_every,
        "oar_level_n_envs": n_envs,
        "oar_level_rollout_steps": rollout,
        "oar_level_scenarios": dict(OAR_LEVEL_SCENARIOS),
    }


# -- shared Adult set-up for 1 and 6 -----------------------------------------------------


def _adult(n_train: int = 10_000, n_rejected: int = 200, seed: int = 0):
    from recourse_sim.data import load
    from recourse_sim.learners import LogisticRegression
    from recourse_sim.recourse import ActionSet

    ds = load("adult")
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(ds.X))
    tr, rest = idx[:n_train], idx[n_train:]
    X, y = np.asarray(ds.X, float), np.asarray(ds.y, np.int64)
    learner = LogisticRegression(C=1.0, standardize=True).fit(X[tr], y[tr])
    pred = learner.predict(X[rest])
    rejected = X[rest[pred == 0][:n_rejected]]
    sd = X[tr].std(0)
    aset = ActionSet(
        X.shape[1],
        immutable=np.flatnonzero(ds.immutable),
        increase_only=np.flatnonzero(ds.increase_only),
        decrease_only=np.flatnonzero(ds.decrease_only),
        lower=X[tr].min(0),
        upper=X[tr].max(0),
        cost_weights=1.0 / np.where(sd > 0, sd, 1.0),
        p=2,
        epsilon=10.0,  # 10 SDs: any change within the data's range, as DiCE may make
        feature_names=ds.feature_names,
    )
    return ds, learner, X[tr], y[tr], rejected, aset


# -- 6. GenRe ------------------------------------------------------------------------------


def bench_genre(
    n_fit: int = 4_000, n_query: int = 1_000, epochs: int = 1, repeats: int = 3, seed: int = 0
) -> dict[str, Any]:
    """Batched GenRe recourse (best of k = 10 samples, projected on the action set) per
    second; R_θ is trained briefly: the sampling cost does not depend on its quality."""
    from recourse_sim.recourse import GenRe

    ds, learner, Xtr, ytr, _, aset = _adult(n_rejected=0, seed=seed)
    genre = GenRe(
        epochs=epochs,
        immutable=np.flatnonzero(ds.immutable),
        categorical=np.flatnonzero(ds.categorical),
        random_state=seed,
    )
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        genre.fit(Xtr[:n_fit], ytr[:n_fit], learner)
    fit_s = time.perf_counter() - t0
    neg = Xtr[learner.predict(Xtr) == 0]
    Xq = neg[np.arange(n_query) % len(neg)]
    res = {}

    def run():
        res["r"] = genre.recourse(Xq, learner, k=10, action_set=aset, random_state=seed)

    t = _median_time(run, repeats)
    return {
        "genre_recourses_per_s": n_query / t,
        "genre_batch": n_query,
        "genre_k": 10,
        "genre_fit_s": fit_s,
        "genre_validity": float(np.mean(res["r"].success)),
    }


# -- 1. individual recourse against DiCE, and 8. exact mixed-type min-cost ----------------

# the checking account as a one-hot group of three levels: the data's two 0/1 columns
# and the third level's ('some balance'), added here
GERMAN_GROUP = ("checking_account_negative", "checking_account_none", "checking_account_some")
GERMAN_IMMUTABLE = ("sex_male", "foreign_worker_yes", "number_of_people_liable_for")
GERMAN_ORDINAL = ("installment_rate", "present_residence_since")  # codes 1..4


def _german_typed(p: float = 1, epsilon: float = 1e6):
    """German credit with its feature types: whole numbers integer (step 1), the two
    1..4 codes ordinal, the 0/1 features binary, the checking account a one-hot group.
    Everything may change but sex, foreign worker and people liable; age only up;
    within the data's range; cost weights 1 / SD. Returns (names, X, y, learner (logistic
    regression), rejected rows, typed action set, spec: the declaration as plain data)."""
    from recourse_sim.data import load
    from recourse_sim.learners import LogisticRegression
    from recourse_sim.recourse import ActionSet

    ds = load("german")
    names = [*ds.feature_names, GERMAN_GROUP[2]]
    X = np.asarray(ds.X, dtype=float)
    X = np.c_[X, 1.0 - X[:, names.index(GERMAN_GROUP[0])] - X[:, names.index(GERMAN_GROUP[1])]]
    y = np.asarray(ds.y, np.int64)
    types = dict(zip(ds.feature_names, ds.feature_types, strict=True))
    types |= dict.fromkeys(GERMAN_ORDINAL, "ordinal") | dict.fromkeys(GERMAN_GROUP, "categorical")
    learner = LogisticRegression(C=1.0, standardize=True).fit(X, y)
    rejected = X[learner.predict(X) == 0]
    spec = {
        "lower": X.min(0),
        "upper": X.max(0),
        "immutable": np.isin(names, GERMAN_IMMUTABLE),
        "increase_only": np.array([n == "age" for n in names]),
        "decrease_only": np.zeros(len(names), bool),
        "types": [types[n] for n in names],
        "levels": {names.index(n): np.arange(1.0, 5.0) for n in GERMAN_ORDINAL},
        "group": [names.index(n) for n in GERMAN_GROUP],
        "weights": 1.0 / X.std(0),
    }
    aset = ActionSet(
        len(names),
        feature_names=names,
        immutable=list(GERMAN_IMMUTABLE),
        increase_only=["age"],
        lower=spec["lower"],
        upper=spec["upper"],
        cost_weights=spec["weights"],
        p=p,
        epsilon=epsilon,
        feature_types=spec["types"],
        levels={n: [1, 2, 3, 4] for n in GERMAN_ORDINAL},
        onehot_groups=[list(GERMAN_GROUP)],
    )
    return names, X, y, learner, rejected, aset, spec


def _linear_problem(learner, X: np.ndarray, spec: dict, hair: float = 1e-9):
    """Each row's min-cost problem for a binary logistic model, derived here from the
    learner's state and the constraint spec (not from our solver's helpers): the logit's
    gradient c in the units of x, the gap −logit(x) (plus a hair, so that the reference
    lands on the favourable side) and the box lo ≤ δ ≤ hi of each row."""
    state = learner.state_
    coef = state["coef"].numpy()[0]
    scale = state["x_scale"].numpy() if "x_scale" in state else np.ones_like(coef)
    shift = state["x_shift"].numpy() if "x_shift" in state else np.zeros_like(coef)
    c = coef / scale
    logit = ((X - shift) / scale) @ coef + float(state["intercept"].numpy()[0])
    gap = -logit + hair * (1.0 + np.abs(logit))
    lo, hi = spec["lower"] - X, spec["upper"] - X
    lo = np.where(spec["increase_only"], 0.0, lo)
    hi = np.where(spec["decrease_only"], 0.0, hi)
    lo, hi = np.where(spec["immutable"], 0.0, lo), np.where(spec["immutable"], 0.0, hi)
    # a row already outside the data's range may stay where it is
    return c, gap, np.minimum(lo, 0.0), np.maximum(hi, 0.0)


def typed_milp_min_cost(x, c, gap, lo, hi, spec: dict):
    """The reference: min ‖w ⊙ δ‖₁ s.t. c·δ ≥ gap, lo ≤ δ ≤ hi and the feature types of
    `spec`, as one mixed-integer program solved by HiGHS (`scipy.optimize.milp`),
    formulated here from the declaration alone (independently of
    `recourse_sim.recourse.mixed`). Variables per feature: integer k⁺, k⁻ ≥ 0 (δ = k⁺ −
    k⁻, step 1) or continuous δ⁺, δ⁻ ≥ 0; a 0/1 indicator per level of an ordinal or
    binary feature and per column of the one-hot group (exactly one on). Returns the
    optimal δ, or None where infeasible."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    d, w, types = len(x), spec["weights"], spec["types"]
    levels = dict(spec["levels"])
    levels |= {j: np.array([0.0, 1.0]) for j in range(d) if types[j] == "binary"}
    group = list(spec["group"])
    cols = []  # (kind, feature, value)
    for j in range(d):
        if j in group:
            continue
        if j in levels:
            cols += [("level", j, v) for v in levels[j]]
        else:
            cols += [("up", j, None), ("down", j, None)]
    cols += [("group", j, None) for j in group]
    nv = len(cols)
    D, const = np.zeros((d, nv)), np.zeros(d)  # δ = D·v + const
    upper, integrality, price = np.zeros(nv), np.zeros(nv), np.zeros(nv)
    for i, (kind, j, v) in enumerate(cols):
        if kind in ("up", "down"):
            D[j, i] = 1.0 if kind == "up" else -1.0
            integrality[i] = types[j] == "integer"
            room = hi[j] if kind == "up" else -lo[j]
            upper[i] = np.floor(room + 1e-9) if integrality[i] else room
            price[i] = w[j]
        else:  # an indicator: the feature takes value v (a level) or 1 (a group column)
            value = 1.0 if kind == "group" else v
            D[j, i], const[j] = value, -x[j]
            integrality[i] = 1
            upper[i] = 1.0 if lo[j] - 1e-9 <= value - x[j] <= hi[j] + 1e-9 else 0.0
            price[i] = w[j] * abs(value - x[j]) if kind == "level" else 0.0
    rows, lbs, ubs = [c @ D], [gap - c @ const], [np.inf]
    for j in [*levels, None]:  # exactly one level of each feature / of the group
        a = np.array(
            [(k == "level" and f == j) or (j is None and k == "group") for k, f, _ in cols]
        )
        rows.append(a.astype(float))
        lbs.append(1.0)
        ubs.append(1.0)
    # a group column's |δ| = v if it was 0, 1 − v if it was 1: price v by ±w, constant aside
    for i, (kind, j, _) in enumerate(cols):
        if kind == "group":
            price[i] = w[j] * (1.0 if x[j] == 0 else -1.0)
    res = milp(
        price * 1e6,  # (HiGHS stops within an absolute gap of 1e-6: make that 1e-12)
        constraints=LinearConstraint(np.array(rows), lbs, ubs),
        integrality=integrality,
        bounds=Bounds(0.0, upper),
        options={"mip_rel_gap": 0.0, "presolve": False},
    )
    if res.status == 2:
        return None
    v = np.where(integrality > 0, np.round(res.x), res.x)
    return D @ v + const


def bench_mixed(repeats: int = 3, n_rows: int | None = None) -> dict[str, Any]:
    """Exact min-cost recourse over mixed types (``recourse_sim.recourse.mixed``, through
    ``individual_recourse(method="linear", objective="min_cost")``) on German credit's
    rejected rows with integer, ordinal, binary and one-hot features, p = 1 (and the
    speed of p = 2 and ∞): ``mixed_min_cost_gap_vs_milp`` is the largest relative cost
    gap to `typed_milp_min_cost` (an independent mixed-integer program, HiGHS) over the
    rows both solve, and success must agree row by row; ``mixed_min_cost_rows_per_s`` is
    rows per second of wall time in one batched call (median of `repeats`)."""
    from recourse_sim.recourse import individual_recourse

    out: dict[str, Any] = {}
    for p in (1, 2, np.inf):
        _, _, _, learner, rejected, aset, spec = _german_typed(p=p)
        rejected = rejected[:n_rows]
        holder = {}

        def run(aset=aset, learner=learner, rejected=rejected, holder=holder):
            t0 = time.process_time()
            holder["r"] = individual_recourse(
                learner, rejected, 1, aset, method="linear", objective="min_cost"
            )
            holder.setdefault("cpu", []).append(time.process_time() - t0)

        wall = _median_time(run, repeats)
        tag = {1: "", 2: "_p2", np.inf: "_pinf"}[p]
        out[f"mixed_min_cost_rows_per_s{tag}"] = len(rejected) / wall
        out[f"mixed_min_cost_cpu_s_per_row{tag}"] = statistics.median(holder["cpu"]) / len(rejected)
        if p != 1:
            continue
        r = holder["r"]
        c, gap, lo, hi = _linear_problem(learner, rejected, spec, hair=1e-12)
        t0 = time.perf_counter()
        ref = [typed_milp_min_cost(x, c, g, lo_i, hi_i, spec)
               for x, g, lo_i, hi_i in zip(rejected, gap, lo, hi, strict=True)]  # fmt: skip
        milp_s = time.perf_counter() - t0
        solvable = np.array([d is not None for d in ref])
        ref_cost = np.array([np.abs(spec["weights"] * d).sum() if d is not None else np.inf
                             for d in ref])  # fmt: skip
        both = solvable & r.success
        relative = np.abs(r.cost[both] - ref_cost[both]) / ref_cost[both]
        relaxed = individual_recourse(
            learner, rejected, 1, aset.replace(feature_types=None, levels=None, onehot_groups=()),
            method="linear", objective="min_cost",
        )  # fmt: skip
        out.update(
            mixed_min_cost_gap_vs_milp=float(relative.max()),
            mixed_rows=len(rejected),
            mixed_success_mismatch=int((solvable != r.success).sum()),
            mixed_typed_respected=bool(aset.contains(rejected, r.delta).all()),
            mixed_cost_over_relaxed_median=float(np.median(r.cost[both] / relaxed.cost[both])),
            mixed_cost_over_relaxed_max=float(np.max(r.cost[both] / relaxed.cost[both])),
            mixed_milp_rows_per_s=len(rejected) / milp_s,
        )
    return out


def bench_mlp_min_cost(
    directions: int = 3000, budgets: int = 30, n_rows: int | None = None, local: int = 40
) -> dict[str, Any]:
    """Nonlinear ``min_cost`` (PGD) on an MLP against a dense reference search: German
    credit standardised, an MLP (20, 20) fit on it, five actionable features (age only
    up), p = 2, ε = 1.5. The reference, per rejected row, is the cheapest point that
    gets the decision among `directions` random directions to the action set's edge and
    PGD's budget answers (200 steps) under `budgets` budgets from 0.02 to ε, each pulled
    back to the decision boundary (`least_share`), then a local search around each row's
    best move (`local` random turns at each of 20 shrinking scales). Reported: rows the
    reference reaches and ours misses, ours' cost over the reference's (median, 95th
    percentile, max over rows both reach; rows paying over 10 % more), rows where ours
    misses but the budget objective succeeds (must be 0), and the same for the
    path-crossing search that ``min_cost`` used before (the first PGD iterate that gets
    the decision, pulled back)."""
    from recourse_sim.data import load
    from recourse_sim.learners import MLPClassifier
    from recourse_sim.recourse import ActionSet, individual_recourse
    from recourse_sim.recourse.individual import _crossing, _decided, least_share

    ds = load("german")
    X = np.asarray(ds.X, dtype=float)
    Z = (X - X.mean(0)) / X.std(0)
    model = MLPClassifier(hidden=(20, 20), random_state=0, fit_epochs=300).fit(Z, ds.y)
    rejected = Z[model.predict(Z) == 0][:n_rows]
    names = list(ds.feature_names)
    actionable = [
        "duration",
        "credit_amount",
        "installment_rate",
        "age",
        "number_of_existing_credits",
    ]
    aset = ActionSet(
        len(names),
        feature_names=names,
        immutable=[n for n in names if n not in actionable],
        increase_only=["age"],
        p=2,
        epsilon=1.5,
    )
    goal = np.ones(len(rejected), np.int64)

    def decided(Xd):
        return _decided(model, model.state_, Xd, goal, None, 0.0)

    t0 = time.process_time()
    ours = individual_recourse(model, rejected, 1, aset, method="pgd", objective="min_cost")
    ours_cpu = time.process_time() - t0
    budget = individual_recourse(model, rejected, 1, aset, method="pgd")
    start, step, crossed = _crossing(
        model, model.state_, rejected, goal, aset, "pgd", 100, None, 0.1, decided
    )
    path = np.where(
        crossed[:, None], start + least_share(decided, rejected + start, step)[:, None] * step, 0.0
    )
    path_cost = np.where(crossed, np.asarray(aset.cost(path)), np.inf)

    t0 = time.process_time()
    rng = np.random.default_rng(0)
    best = np.full(len(rejected), np.inf)
    best_move = np.zeros_like(rejected)

    def keep(delta):
        ok = decided(rejected + delta)
        back = least_share(decided, rejected, delta)[:, None] * delta
        cost = np.asarray(aset.cost(back))
        better = ok & (cost < best)
        best[:] = np.where(better, cost, best)
        best_move[:] = np.where(better[:, None], back, best_move)

    for _ in range(directions):
        keep(aset.project(rejected, rng.standard_normal(rejected.shape) * aset.actionable * 10))
    for e in np.geomspace(0.02, aset.epsilon, budgets):
        keep(individual_recourse(model, rejected, 1, aset.replace(epsilon=e), steps=200).delta)
    # local search: turn each row's best move a little (a cheaper boundary point nearby)
    for scale in np.geomspace(0.5, 0.005, 20):
        for _ in range(local):
            size = np.linalg.norm(best_move, axis=1, keepdims=True) + 1e-3
            turn = rng.standard_normal(rejected.shape) * aset.actionable * scale * size
            keep(aset.project(rejected, 1.2 * best_move + turn))
    dense_cpu = time.process_time() - t0
    reached = np.isfinite(best)

    def gap(cost: np.ndarray, success: np.ndarray, name: str) -> dict[str, Any]:
        both = reached & success
        ratio = cost[both] / best[both]
        return {
            f"{name}_missed": int((reached & ~success).sum()),
            f"{name}_cost_over_dense_median": float(np.median(ratio)),
            f"{name}_cost_over_dense_p95": float(np.quantile(ratio, 0.95)),
            f"{name}_cost_over_dense_max": float(ratio.max()),
            f"{name}_over_10pct": int((ratio > 1.1).sum()),
        }

    return {
        "mlp_min_cost_rows": len(rejected),
        "mlp_dense_reached": int(reached.sum()),
        **gap(ours.cost, ours.success, "mlp_min_cost"),
        **gap(path_cost, crossed, "mlp_path_min_cost"),
        "mlp_min_cost_missed_where_budget_succeeds": int((budget.success & ~ours.success).sum()),
        "mlp_min_cost_cpu_s": ours_cpu,
        "mlp_dense_cpu_s": dense_cpu,
    }


class _ProbaModel:
    """The same trained learner, seen by DiCE's scikit-learn backend: DiCE hands it a
    frame with the checking account as one categorical column, which it one-hot
    encodes back into the learner's columns."""

    def __init__(self, learner, names: list[str]):
        self.learner, self.names = learner, names
        self.classes_ = np.array([0, 1])

    def predict_proba(self, frame):
        X = _from_dice(frame, self.names)
        return np.asarray(self.learner.predict_proba(X))

    def predict(self, X):
        return self.predict_proba(X).argmax(1)


def _to_dice(X: np.ndarray, names: list[str]):
    """Our rows as DiCE's frame: the one-hot group as one categorical column."""
    import pandas as pd

    idx = [names.index(n) for n in GERMAN_GROUP]
    frame = pd.DataFrame(np.delete(X, idx, axis=1), columns=_dice_numeric(names))
    frame["checking_account"] = np.array(GERMAN_GROUP)[X[:, idx].argmax(1)]
    return frame


def _from_dice(frame, names: list[str]) -> np.ndarray:
    X = np.zeros((len(frame), len(names)))
    for n in _dice_numeric(names):
        X[:, names.index(n)] = frame[n].to_numpy(float)
    level = frame["checking_account"].astype(str).to_numpy()
    for n in GERMAN_GROUP:
        X[:, names.index(n)] = level == n
    return X


def _dice_numeric(names: list[str]) -> list[str]:
    return [n for n in names if n not in GERMAN_GROUP]


def bench_dice(n_rows: int = 200, repeats: int = 3, seed: int = 0) -> dict[str, Any]:
    """Our min-cost individual recourse against DiCE (random method), like with like,
    on German credit's rejected rows with their feature types (`_german_typed`, p = 1).

    Ours is the exact typed optimum (``method="linear", objective="min_cost"``). DiCE
    gets every rule ours gets: the same features to vary, each row's own permitted range
    (the data's bounds and age only up), the whole-number features (integer, ordinal
    codes, binary) as integers (precision 0) within their ranges, and the checking
    account as one categorical feature of three levels. Time per counterfactual per row
    (each method called on one row at a time: each tool's loop over the rows, in
    alternating blocks; and, reported beside, the two interleaved row by row) and
    batched (ours on all rows in one call; DiCE's call on all rows, which can only take
    one permitted range for all, so its time only). Validity is reported among the rows
    that *can* get the decision within the rules (the exact typed reference,
    `typed_milp_min_cost`, solves them), and cost, ‖w ⊙ δ‖₁ (w = 1 / SD), as a ratio to
    that reference; ``individual_cost_vs_dice`` is the median over rows both solve of
    our cost over DiCE's."""
    from recourse_sim.recourse import individual_recourse

    names, X, y, learner, rejected, aset, spec = _german_typed(p=1)
    rejected = rejected[:n_rows]
    n = len(rejected)

    def ours(rows: np.ndarray):
        return individual_recourse(learner, rows, 1, aset, method="linear", objective="min_cost")

    out: dict[str, Any] = {"dice_rows": n, "dice_cost_p": 1, "dice_data": "german (typed)"}
    holder: dict[str, Any] = {}

    def run_batched():
        holder["ours"] = ours(rejected)

    out["ours_batched_s_per_cf"] = _median_time(run_batched, repeats) / n
    r = holder["ours"]
    c, gap, lo, hi = _linear_problem(learner, rejected, spec)
    ref = [typed_milp_min_cost(x, c, g, lo_i, hi_i, spec)
           for x, g, lo_i, hi_i in zip(rejected, gap, lo, hi, strict=True)]  # fmt: skip
    solvable = np.array([d is not None for d in ref])
    ref_cost = np.array([np.abs(spec["weights"] * d).sum() if d is not None else np.nan
                         for d in ref])  # fmt: skip
    out["dice_solvable_share"] = float(solvable.mean())

    def summary(name: str, delta: np.ndarray, valid: np.ndarray) -> None:
        cost = np.asarray(aset.cost(delta))
        ok = valid & solvable
        out[f"{name}_validity_solvable"] = float(ok.sum() / max(solvable.sum(), 1))
        out[f"{name}_cost_over_exact_median"] = (
            float(np.median(cost[ok] / ref_cost[ok])) if ok.any() else None
        )
        holder[f"{name}_cost"], holder[f"{name}_ok"] = cost, ok

    summary("ours", r.delta, r.success & aset.contains(rejected, r.delta))
    try:
        import dice_ml
        from raiutils.exceptions import UserConfigValidationException
    except ImportError as exc:
        reason = f"dice-ml not installed ({exc}); pip install recourse-sim[bench]"
        out.update(
            individual_speedup_vs_dice=None,
            individual_speedup_vs_dice_per_row=None,
            individual_cost_vs_dice=None,
            individual_speedup_vs_dice_reason=reason,
        )
        return out
    numeric = _dice_numeric(names)
    frame = _to_dice(X, names)
    frame["good_credit"] = y
    whole = [n for n in numeric if spec["types"][names.index(n)] != "continuous"]
    data = dice_ml.Data(
        dataframe=frame,
        continuous_features=numeric,
        outcome_name="good_credit",
        continuous_features_precision=dict.fromkeys(whole, 0),
    )
    model = dice_ml.Model(model=_ProbaModel(learner, names), backend="sklearn")
    explainer = dice_ml.Dice(data, model, method="random")
    vary = [n for n in numeric if n not in GERMAN_IMMUTABLE] + ["checking_account"]

    def dice(rows: np.ndarray, permitted: dict | None):
        """DiCE's counterfactuals of the rows, or None where it finds none for any (it
        raises then)."""
        sink = io.StringIO()  # DiCE prints a progress bar and a line per failed row
        with warnings.catch_warnings(), redirect_stdout(sink), redirect_stderr(sink):
            warnings.simplefilter("ignore")
            try:
                return explainer.generate_counterfactuals(
                    _to_dice(rows, names),
                    total_CFs=1,
                    desired_class="opposite",
                    features_to_vary=vary,
                    permitted_range=permitted,
                    random_seed=seed,
                    verbose=False,
                )
            except UserConfigValidationException:
                return None

    def permitted_range(i: int) -> dict:
        x = rejected[i]
        ranges = {}
        for n in vary[:-1]:
            j = names.index(n)
            ranges[n] = [float(x[j] + lo[i, j]), float(x[j] + hi[i, j])]
        ranges["checking_account"] = list(GERMAN_GROUP)
        return ranges

    # per row, as a user's loop over rows: each tool on every row, one call per row, in
    # alternating blocks (ours, DiCE, ours, ...; medians), so both meet the same drift
    # of the machine's speed. Also interleaved row by row, where each call finds the
    # other tool's data in the caches: a cold call, dearer for both (by a similar time,
    # so a larger share of ours).
    ours_row_s, dice_row_s, dice_cf = [], [], np.full_like(rejected, np.nan)
    mixed_ours, mixed_dice = [], []
    for rep in range(repeats):
        t0 = time.perf_counter()
        for i in range(n):
            ours(rejected[i : i + 1])
        ours_row_s.append((time.perf_counter() - t0) / n)
        t0 = time.perf_counter()
        for i in range(n):
            e = dice(rejected[i : i + 1], permitted_range(i))
            if rep == 0 and e is not None:
                cf = e.cf_examples_list[0].final_cfs_df
                if cf is not None and len(cf):
                    dice_cf[i] = _from_dice(cf, names)[0]
        dice_row_s.append((time.perf_counter() - t0) / n)
    for i in range(n):
        t0 = time.perf_counter()
        ours(rejected[i : i + 1])
        t1 = time.perf_counter()
        dice(rejected[i : i + 1], permitted_range(i))
        mixed_ours.append(t1 - t0)
        mixed_dice.append(time.perf_counter() - t1)
    dice_s = statistics.median(dice_row_s)
    ours_s = statistics.median(ours_row_s)

    # DiCE batched (one permitted range for all rows: the data's, so timing only)
    def run_dice_batched():
        holder["dice_batched"] = dice(rejected, None)

    dice_batched_s = _median_time(run_dice_batched, max(1, repeats - 2)) / n

    found = ~np.isnan(dice_cf).any(1)
    dice_delta = np.where(found[:, None], dice_cf - rejected, 0.0)
    dice_feasible = np.asarray(aset.contains(rejected, dice_delta, tol=1e-6))
    dice_valid = found & dice_feasible & (learner.predict(rejected + dice_delta) == 1)
    summary("dice", dice_delta, dice_valid)
    both = holder["ours_ok"] & holder["dice_ok"]
    out.update(
        individual_speedup_vs_dice_per_row=dice_s / ours_s,
        individual_speedup_vs_dice=dice_batched_s / out["ours_batched_s_per_cf"],
        individual_cost_vs_dice=(
            float(np.median(holder["ours_cost"][both] / holder["dice_cost"][both]))
            if both.any()
            else None
        ),
        individual_cost_vs_dice_rows=int(both.sum()),
        individual_speedup_vs_dice_per_row_interleaved=sum(mixed_dice) / sum(mixed_ours),
        ours_per_row_s_per_cf=ours_s,
        dice_per_row_s_per_cf=dice_s,
        ours_per_row_interleaved_s_per_cf=sum(mixed_ours) / n,
        dice_per_row_interleaved_s_per_cf=sum(mixed_dice) / n,
        dice_batched_s_per_cf=dice_batched_s,
        dice_found_share=float(found.mean()),
        dice_infeasible_rows=int((found & ~dice_feasible).sum()),
        individual_speedup_method="linear, min_cost (exact over the feature types)",
        dice_version=importlib.metadata.version("dice-ml"),
    )
    return out


# -- 7. start-up of a run over a CSV world with an oracle ---------------------------------------

STARTUP_SCENARIO = "csv_example"  # a raw CSV world whose outcomes come from a forest oracle
# what `recourse-sim run` does before its first round (the CLI's imports, the scenario,
# the environment and its reset), then the wall-clock time
_STARTUP = """
import time
import recourse_sim.cli
from recourse_sim.scenarios import load_scenario
from recourse_sim.simulate import simulate
from recourse_sim.env.recourse_env import RecourseEnv
env = RecourseEnv(load_scenario({scenario!r}, {overrides!r}))
env.reset(seed=0)
print(time.time())
"""


def bench_startup(
    repeats: int = 3, scenario: str = STARTUP_SCENARIO, overrides: dict | None = None
) -> dict[str, Any]:
    """Seconds from launching a fresh interpreter to the start of the first round of
    `scenario`, the oracle cache warm (``first_round_s_csv_oracle``): the median of
    `repeats` runs after one that warms the cache (fitting the oracle if none is
    cached)."""
    code = _STARTUP.format(scenario=scenario, overrides=overrides)

    def once() -> float:
        start = time.time()
        done = subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        )
        return float(done.stdout.split()[-1]) - start

    once()
    runs = [once() for _ in range(repeats)]
    return {"first_round_s_csv_oracle": statistics.median(runs), "first_round_s_runs": runs}


# -- driver ------------------------------------------------------------------------------------


def verdicts(result: dict[str, Any]) -> dict[str, Any]:
    """Pass/miss of each targeted key present (None when the key is null)."""
    out = {}
    for key, (op, target) in TARGETS.items():
        v = result.get(key)
        if v is None:
            out[key] = None
        else:
            out[key] = bool(v <= target) if op == "<=" else bool(v >= target)
    # a speed-up counts only if ours is at least as valid on the rows that can flip
    ours, dice = result.get("ours_validity_solvable"), result.get("dice_validity_solvable")
    if ours is not None and dice is not None:
        for key in ("individual_speedup_vs_dice", "individual_speedup_vs_dice_per_row"):
            if out.get(key) is not None:
                out[key] = bool(out[key] and ours >= dice)
    return out


def _sections(quick: bool, tiny: bool) -> dict[str, Any]:
    if tiny:  # the smoke test: every code path at toy sizes, timings meaningless
        return {
            "round": lambda: bench_round(n=200, repeats=1),
            "scaling": lambda: bench_scaling(sizes=(100, 200), repeats=1),
            "oar": lambda: _in_child("--child-oar", "300", "5", "--repeats", "1"),
            "env": lambda: bench_env(n=50, steps=4, n_envs=2),
            "batched": lambda: bench_batched(n_envs=2, n=50, pairs=1, batched_steps=2),
            "v2_batched": lambda: bench_v2_batched(n_envs=2, pairs=1, batched_steps=1),
            "genre": lambda: bench_genre(n_fit=1_000, n_query=20, repeats=1),
            "dice": lambda: bench_dice(n_rows=3, repeats=1),
            "mixed": lambda: bench_mixed(repeats=1, n_rows=5),
            "mlp": lambda: bench_mlp_min_cost(directions=20, budgets=3, n_rows=10),
            "startup": lambda: bench_startup(repeats=1, overrides={"world.oracle.trees": 3}),
            "ppo": lambda: bench_ppo(n_envs=2, n=50, timesteps=64, pairs=1),
            "oar_level": lambda: bench_oar_level(
                cap_minutes=0.05, eval_seeds=(1000,), eval_every=40, n_envs=2, rollout=20, tiny=True
            ),
        }
    return {
        "round": lambda: bench_round(repeats=3 if quick else 15),
        "scaling": lambda: bench_scaling(repeats=1 if quick else 3),
        "oar": lambda: _in_child("--child-oar", "30000", "100", "--repeats", "2" if quick else "5"),
        "env": lambda: bench_env(steps=60 if quick else 400),
        "batched": lambda: bench_batched(pairs=3 if quick else 7),
        "v2_batched": lambda: bench_v2_batched(pairs=2 if quick else 3),
        "genre": lambda: bench_genre(n_fit=1_000 if quick else 4_000, repeats=2 if quick else 5),
        "dice": lambda: bench_dice(n_rows=20 if quick else 200, repeats=3 if quick else 5),
        "mixed": lambda: bench_mixed(repeats=3 if quick else 5),
        "mlp": lambda: bench_mlp_min_cost(directions=300 if quick else 3000),
        "startup": lambda: bench_startup(repeats=3 if quick else 5),
        "ppo": lambda: bench_ppo(timesteps=4096 if quick else 8192, pairs=1 if quick else 2),
        "oar_level": lambda: bench_oar_level(
            cap_minutes=2.0 if quick else 8.0,
            eval_seeds=tuple(range(1000, 1005 if quick else 1010)),
        ),
    }


def run(quick: bool = False, only: list[str] | None = None, tiny: bool = False) -> dict[str, Any]:
    """All sections (or `only` those named), as one JSON-ready dict, targeted keys first."""
    sections = _sections(quick, tiny)
    result: dict[str, Any] = {"load_avg_start": list(os.getloadavg())}
    times, cpu, keys = {}, {}, {}
    for name, fn in sections.items():
        if only and name not in only:
            continue
        t0, c0 = time.perf_counter(), _cpu_s()
        found = fn()
        times[name], cpu[name] = time.perf_counter() - t0, _cpu_s() - c0
        result.update(found)
        keys[name] = list(found)
    result["load_avg_end"] = list(os.getloadavg())
    result["section_s"] = times
    result["section_cpu_s"] = cpu
    result["section_keys"] = keys
    result["quick"] = quick
    result["tiny"] = tiny
    result["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "numpy": np.__version__,
    }
    return _finished(result)


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the sections that time a
    fresh interpreter)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _finished(result: dict[str, Any]) -> dict[str, Any]:
    """The targets and verdicts added, the issue's keys first, in its order."""
    result["targets"] = {k: f"{op} {t:g}" for k, (op, t) in TARGETS.items()}
    result["pass"] = verdicts(result)
    ordered = {k: result.get(k) for k in KEYS}
    ordered.update({k: v for k, v in result.items() if k not in ordered})
    return ordered


# the keys each section wrote before results recorded them (`section_keys`)
_EARLIER_SECTION_KEYS = {
    "dice": (
        "dice_integer_features", "individual_cost_vs_dice_integer",
        "ours_integer_validity_solvable", "ours_integer_cost_over_exact_median",
        "ours_integer_cost_over_exact_integer_median",
    ),
}  # fmt: skip


def update_sections(path: Path, names: list[str], quick: bool = False) -> dict[str, Any]:
    """Run only the sections `names` and write their keys into the existing results at
    `path`, every other section's keys kept as they were (a re-run section's keys that
    it no longer writes are dropped); ``section_s`` / ``section_cpu_s`` get the new
    sections' wall and CPU seconds, and ``sections_updated`` says which sections were
    re-run and with what load average, apart from the full run's."""
    unknown = sorted(set(names) - set(_sections(quick, False)))
    if unknown:
        raise SystemExit(f"error: --sections: unknown section(s) {', '.join(unknown)}")
    old = json.loads(path.read_text()) if path.exists() else {}
    new = run(quick=quick, only=names)
    earlier = old.get("section_keys", {})
    merged = {k: v for k, v in old.items() if k not in ("targets", "pass")}
    for name in names:
        for key in (*earlier.get(name, ()), *_EARLIER_SECTION_KEYS.get(name, ())):
            merged.pop(key, None)
    for name in names:
        for key in new["section_keys"][name]:
            merged[key] = new[key]
    for key in ("section_s", "section_cpu_s", "section_keys"):
        merged[key] = {**old.get(key, {}), **new[key]}
    merged["sections_updated"] = {
        "sections": names,
        "load_avg_start": new["load_avg_start"],
        "load_avg_end": new["load_avg_end"],
        "wall_s": {k: new["section_s"][k] for k in names},
        "cpu_s": {k: new["section_cpu_s"][k] for k in names},
    }
    return _finished(merged)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small repeats, < 2 minutes")
    parser.add_argument("--out", type=Path, help="directory for benchmark.json")
    parser.add_argument("--only", nargs="*", help="run only these sections")
    parser.add_argument(
        "--sections",
        nargs="+",
        help="run only these sections and update their keys in DIR/benchmark.json",
    )
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-round", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-oar", type=int, nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_round:
        print(json.dumps(_child_round(args.child_round, args.repeats)))
        return 0
    if args.child_oar:
        n, d = args.child_oar
        print(json.dumps(bench_oar(n=n, d=d, repeats=args.repeats)))
        return 0
    if args.out is None:
        parser.error("--out DIR is required")
    path = args.out / "benchmark.json"
    if args.sections:
        result = update_sections(path, args.sections, quick=args.quick)
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps({k: result[k] for k in (*KEYS, "pass", "sections_updated")}, indent=2))
        return 0
    t0 = time.perf_counter()
    result = run(quick=args.quick, only=args.only, tiny=args.tiny)
    result["total_s"] = time.perf_counter() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in (*KEYS, "pass", "total_s")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
