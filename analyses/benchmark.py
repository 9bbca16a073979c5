"""Performance benchmark (issue 8): our simulator side by side with what users would
pick instead, and the speeds the targets ask for.

    python analyses/benchmark.py [--quick] --out DIR

writes ``DIR/benchmark.json``. Timings are medians over repeats; every ratio is
measured within one run (numerator and denominator interleaved) so that a shared,
loaded machine slows both alike. Peak memory is measured in a fresh subprocess per
population size (``resource.getrusage`` in the child), so earlier allocations of this
process do not count. The load average at start and end is recorded with the results.
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
    "oar_step_s_30k": ("<=", 0.1),
    "hypergrad_rel_err": ("<=", 1e-4),
    "env_steps_per_s": (">=", 500.0),
    "genre_recourses_per_s": (">=", 2000.0),
    "individual_speedup_vs_dice": (">=", 300.0),
}

KEYS = (
    "round_over_refit",
    "scaling_exponent",
    "peak_rss_mb_100k",
    "oar_step_s_30k",
    "hypergrad_rel_err",
    "env_steps_per_s",
    "genre_recourses_per_s",
    "individual_speedup_vs_dice",
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


def bench_scaling(sizes=(1_000, 10_000, 100_000), repeats: int = 3) -> dict[str, Any]:
    """Round time per cohort size, each in its own subprocess (honest peak RSS)."""
    rows = []
    for n in sizes:
        out = subprocess.run(
            [sys.executable, __file__, "--child-round", str(n), "--repeats", str(repeats)],
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
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
    """OAR at scale. ``oar_step_s_30k``: one whole projected-gradient step of
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

    def solve(steps: int) -> float:
        t0 = time.perf_counter()
        collective_recourse(learner, X, y, queries, 1, aset, steps=steps)
        return time.perf_counter() - t0

    # collective_recourse also evaluates the honest and final losses: the per-step time
    # is the difference of 6 and 1 steps over 5, so that fixed overhead cancels; the
    # two are interleaved so that load changes hit both alike
    solve(1)  # warm-up
    many, one = [], []
    for _ in range(repeats):
        many.append(solve(6))
        one.append(solve(1))
    pgd_step_s = max((statistics.median(many) - statistics.median(one)) / 5, 0.0)

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
        "oar_step_s_30k": pgd_step_s,
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


# -- 1. individual recourse against DiCE ----------------------------------------------------


class _ProbaModel:
    """The same trained learner, seen by DiCE's scikit-learn backend."""

    def __init__(self, learner):
        self.learner = learner
        self.classes_ = np.array([0, 1])

    def predict_proba(self, X):
        return np.asarray(self.learner.predict_proba(np.asarray(X, dtype=float)))

    def predict(self, X):
        return self.predict_proba(X).argmax(1)


def bench_dice(n_rows: int = 200, repeats: int = 3, seed: int = 0) -> dict[str, Any]:
    """Time per counterfactual and validity: DiCE's random method vs ours (pgd, linear),
    same model, same rejected Adult rows, same actionable features."""
    from recourse_sim.recourse import individual_recourse

    ds, learner, Xtr, ytr, rejected, aset = _adult(n_rejected=n_rows, seed=seed)
    out: dict[str, Any] = {"dice_rows": len(rejected)}
    for method in ("pgd", "linear"):
        res = {}

        def run(method=method, res=res):
            res["r"] = individual_recourse(learner, rejected, 1, aset, method=method)

        t = _median_time(run, repeats)
        out[f"ours_{method}_s_per_cf"] = t / len(rejected)
        out[f"ours_{method}_validity"] = float(np.mean(res["r"].success))
    try:
        import dice_ml
        import pandas as pd
    except ImportError as exc:
        out.update(
            individual_speedup_vs_dice=None,
            individual_speedup_vs_dice_reason=f"dice-ml not installed ({exc}); "
            "pip install recourse-sim[bench]",
        )
        return out
    names = list(ds.feature_names)
    frame = pd.DataFrame(Xtr, columns=names)
    frame["income"] = ytr
    data = dice_ml.Data(dataframe=frame, continuous_features=names, outcome_name="income")
    model = dice_ml.Model(model=_ProbaModel(learner), backend="sklearn")
    explainer = dice_ml.Dice(data, model, method="random")
    vary = [n for n, imm in zip(names, ds.immutable, strict=True) if not imm]
    query = pd.DataFrame(rejected, columns=names)
    holder: dict[str, Any] = {}

    def run_dice():
        sink = io.StringIO()  # DiCE prints a progress bar and a line per failed row
        with warnings.catch_warnings(), redirect_stdout(sink), redirect_stderr(sink):
            warnings.simplefilter("ignore")
            holder["e"] = explainer.generate_counterfactuals(
                query,
                total_CFs=1,
                desired_class="opposite",
                features_to_vary=vary,
                random_seed=seed,
                verbose=False,
            )

    t_dice = _median_time(run_dice, max(1, repeats - 2))
    valid = []
    for ex in holder["e"].cf_examples_list:
        cf = ex.final_cfs_df
        if cf is None or len(cf) == 0:
            valid.append(False)
            continue
        Xcf = cf[names].to_numpy(float)
        valid.append(bool((learner.predict(Xcf) == 1).any()))
    dice_s = t_dice / len(rejected)
    dice_validity = float(np.mean(valid))
    best = "pgd" if out["ours_pgd_validity"] >= out["ours_linear_validity"] else "linear"
    out.update(
        dice_random_s_per_cf=dice_s,
        dice_random_validity=dice_validity,
        individual_speedup_vs_dice=dice_s / out[f"ours_{best}_s_per_cf"],
        individual_speedup_method=best,
        individual_speedup_vs_dice_pgd=dice_s / out["ours_pgd_s_per_cf"],
        individual_speedup_vs_dice_linear=dice_s / out["ours_linear_s_per_cf"],
        dice_version=importlib.metadata.version("dice-ml"),
    )
    return out


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
    if result.get("individual_speedup_vs_dice") is not None:
        ours = result[f"ours_{result['individual_speedup_method']}_validity"]
        out["individual_speedup_vs_dice"] = bool(
            out["individual_speedup_vs_dice"] and ours >= result["dice_random_validity"]
        )
    return out


def _sections(quick: bool, tiny: bool) -> dict[str, Any]:
    if tiny:  # the smoke test: every code path at toy sizes, timings meaningless
        return {
            "round": lambda: bench_round(n=200, repeats=1),
            "scaling": lambda: bench_scaling(sizes=(100, 200), repeats=1),
            "oar": lambda: bench_oar(n=300, d=5, repeats=1),
            "env": lambda: bench_env(n=50, steps=4, n_envs=2),
            "genre": lambda: bench_genre(n_fit=1_000, n_query=20, repeats=1),
            "dice": lambda: bench_dice(n_rows=3, repeats=1),
        }
    return {
        "round": lambda: bench_round(repeats=3 if quick else 15),
        "scaling": lambda: bench_scaling(repeats=1 if quick else 3),
        "oar": lambda: bench_oar(repeats=2 if quick else 5),
        "env": lambda: bench_env(steps=60 if quick else 400),
        "genre": lambda: bench_genre(n_fit=1_000 if quick else 4_000, repeats=2 if quick else 5),
        "dice": lambda: bench_dice(n_rows=20 if quick else 200, repeats=3 if quick else 5),
    }


def run(quick: bool = False, only: list[str] | None = None, tiny: bool = False) -> dict[str, Any]:
    """All sections (or `only` those named), as one JSON-ready dict, targeted keys first."""
    sections = _sections(quick, tiny)
    result: dict[str, Any] = {"load_avg_start": list(os.getloadavg())}
    times = {}
    for name, fn in sections.items():
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        result.update(fn())
        times[name] = time.perf_counter() - t0
    result["load_avg_end"] = list(os.getloadavg())
    result["section_s"] = times
    result["quick"] = quick
    result["tiny"] = tiny
    result["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "numpy": np.__version__,
    }
    result["targets"] = {k: f"{op} {t:g}" for k, (op, t) in TARGETS.items()}
    result["pass"] = verdicts(result)
    # the keys first, in its order
    ordered = {k: result.get(k) for k in KEYS}
    ordered.update({k: v for k, v in result.items() if k not in ordered})
    return ordered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small repeats, < 2 minutes")
    parser.add_argument("--out", type=Path, help="directory for benchmark.json")
    parser.add_argument("--only", nargs="*", help="run only these sections")
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-round", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_round:
        print(json.dumps(_child_round(args.child_round, args.repeats)))
        return 0
    if args.out is None:
        parser.error("--out DIR is required")
    t0 = time.perf_counter()
    result = run(quick=args.quick, only=args.only, tiny=args.tiny)
    result["total_s"] = time.perf_counter() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "benchmark.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in (*KEYS, "pass", "total_s")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
