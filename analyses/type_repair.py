"""What respecting feature types costs: each recourse method on German credit's rejected
rows, with the dataset's types (integer and binary features) against the same action set
with every feature continuous (the relaxation the method solves first).

Every method solves the relaxation and repairs its answer onto the typed set
(`recourse_sim.recourse.individual.repair_types`). Per model, action set, norm, method and
objective this reports:

* ``relaxed_breaks_types``: the share of relaxed answers that move a whole-number or
  yes/no feature by a fraction (what every number was before feature types);
* ``success_relaxed`` / ``success_typed``: the share of rows whose answer gets the
  favourable decision;
* for ``min_cost``, over the rows both succeed on: ``extra_cost_mean`` and
  ``extra_cost_max``, the relative extra cost of the typed answer over the relaxed one
  (cost_typed / cost_relaxed − 1);
* for ``budget``: ``extra_loss_mean``, the mean increase of the goal loss.

The relaxed answer is a lower bound on the cheapest typed one, so part of the extra
cost is the price of whole numbers itself. For the logistic regression at p = 1 the
cheapest typed answer is also computed exactly, as a mixed-integer program of this
script's own (`scipy.optimize.milp`, HiGHS): ``success_exact`` and, over the rows both
succeed on, ``repair_vs_exact_mean`` / ``repair_vs_exact_max`` (cost_typed /
cost_exact − 1) separate the repair's own loss from that price.

Models: L2 logistic regression (C = 1) on every row, and a one-hidden-layer MLP (16
units) for seeds 0..4 (mean ± 95 % Student-t interval over the seeds). Action sets:
``ross`` (Ross et al.'s: credit amount, and age up) and ``wide`` (every feature but sex,
foreign worker and telephone; age up), cost weight 1 / SD, budget ε = 3.

Outputs in --out: ``type_repair.csv`` (one row per model seed × action set × p × method
× objective) and ``type_repair.md`` (the summary table), with wall and CPU time.

    python analyses/type_repair.py [--out DIR] [--seeds N]
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy.optimize import Bounds, LinearConstraint, milp

from recourse_sim.data import load
from recourse_sim.learners import LogisticRegression, MLPClassifier
from recourse_sim.recourse import ActionSet, individual_recourse
from recourse_sim.stats import t_half_width

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("linear", "pgd", "wachter")
OBJECTIVES = ("min_cost", "budget")


@dataclass
class Args:
    """Settings of the run."""

    out: Path = RESULTS  # where the CSV and the table go
    seeds: int = 5  # MLP seeds (the logistic regression has no seed)
    epsilon: float = 3.0  # budget (cost units: standard deviations)
    steps: int = 100  # steps of pgd and wachter


def action_sets(ds, epsilon: float, p: float) -> dict[str, tuple[ActionSet, ActionSet]]:
    """{name: (typed, relaxed)}: the same rules, with and without the dataset's types."""
    names = list(ds.feature_names)
    wide_immutable = ["sex_male", "foreign_worker_yes", "telephone_yes"]
    immutable = {
        "ross": [f for f, imm in zip(names, ds.immutable, strict=True) if imm],
        "wide": wide_immutable,
    }
    out = {}
    for name, frozen in immutable.items():
        common = dict(
            n_features=len(names),
            feature_names=names,
            immutable=frozen,
            increase_only=["age"],
            cost_weights=1.0 / ds.X.std(0),
            p=p,
            epsilon=epsilon,
        )
        out[name] = (ActionSet(**common, feature_types=ds.feature_types), ActionSet(**common))
    return out


def models(ds, seeds: int):
    """(model name, seed, fitted learner)."""
    yield "logistic", 0, LogisticRegression(C=1.0).fit(ds.X, ds.y)
    mean, sd = ds.X.mean(0), ds.X.std(0)
    for seed in range(seeds):
        torch.manual_seed(seed)
        # the MLP reads standardised features: its first layer absorbs the scaling
        mlp = MLPClassifier(hidden=(16,), fit_epochs=300, random_state=seed)
        mlp.fit((ds.X - mean) / sd, ds.y)
        yield "mlp", seed, _Standardised(mlp, mean, sd)


class _Standardised(MLPClassifier):
    """An MLP fitted on standardised rows, read on raw ones (a fixed first layer)."""

    def __init__(self, fitted: MLPClassifier, mean: np.ndarray, sd: np.ndarray):
        self.__dict__.update(fitted.__dict__)
        self._mean, self._sd = torch.from_numpy(mean), torch.from_numpy(sd)

    def proba_fn(self, state, X):
        return super().proba_fn(state, (X - self._mean) / self._sd)


def exact_min_cost(coef: np.ndarray, boundary: np.ndarray, X: np.ndarray, aset: ActionSet):
    """The cheapest typed δ per row for a linear decision c·δ ≥ boundary at p = 1 (integer
    and binary features; NaN rows where none costs ε or less), one MILP per row.

    Variables: v (d) with δ = a ⊙ v + b (integer: a = step, b = 0, v whole; binary: a = 1,
    b = −x, v ∈ {0, 1} the new value; continuous: a = 1, b = 0) and t (d) ≥ |w ⊙ δ|;
    minimise Σ t subject to c·δ ≥ boundary, Σ t ≤ ε and the box."""
    n, d = X.shape
    w = aset.weights_
    integer, binary = aset.types_ == "integer", aset.types_ == "binary"
    a = np.where(integer, aset.step_, 1.0)
    lo, hi = aset.box(X)
    out = np.full((n, d), np.nan)
    eye = np.eye(d)
    for i in range(n):
        b = np.where(binary, -X[i], 0.0)
        v_lo, v_hi = (lo[i] - b) / a, (hi[i] - b) / a
        v_lo = np.where(integer | binary, np.ceil(v_lo - 1e-9), v_lo)
        v_hi = np.where(integer | binary, np.floor(v_hi + 1e-9), v_hi)
        wa = np.diag(w * a)
        constraints = [
            # t − w(a v + b) ≥ 0 and t + w(a v + b) ≥ 0
            LinearConstraint(np.hstack([-wa, eye]), w * b, np.inf),
            LinearConstraint(np.hstack([wa, eye]), -w * b, np.inf),
            LinearConstraint(
                np.r_[coef[i] * a, np.zeros(d)][None], boundary[i] - coef[i] @ b, np.inf
            ),
            LinearConstraint(np.r_[np.zeros(d), np.ones(d)][None], -np.inf, aset.epsilon),
        ]
        res = milp(
            np.r_[np.zeros(d), np.ones(d)],
            integrality=np.r_[(integer | binary).astype(int), np.zeros(d, int)],
            bounds=Bounds(np.r_[v_lo, np.zeros(d)], np.r_[v_hi, np.full(d, np.inf)]),
            constraints=constraints,
        )
        if res.status == 0:
            out[i] = a * res.x[:d] + b
    return out


def measure(learner, X: np.ndarray, typed: ActionSet, relaxed: ActionSet, args: Args) -> list:
    rows = []
    exact = None
    if isinstance(learner, LogisticRegression) and typed.p == 1:
        state = learner.state_
        goal = np.ones(len(X), np.int64)
        coef = learner.goal_margin_coef(state, goal)
        # the decision p ≥ 0.5 is a log-odds ≥ 0, aimed a hair past as the solvers do
        value = learner.goal_margin(state, X, goal)
        exact = exact_min_cost(coef, -value + 1e-9 * (1 + np.abs(value)), X, typed)
    for method in METHODS:
        for objective in OBJECTIVES:
            kw = dict(method=method, objective=objective, steps=args.steps)
            res_t = individual_recourse(learner, X, 1, typed, **kw)
            res_r = individual_recourse(learner, X, 1, relaxed, **kw)
            assert typed.contains(X, res_t.delta).all()
            both = res_t.success & res_r.success & (res_r.cost > 0)
            row = {
                "method": method,
                "objective": objective,
                "rows": len(X),
                "relaxed_breaks_types": float((~typed.respects_types(X, res_r.delta)).mean()),
                "success_relaxed": float(res_r.success.mean()),
                "success_typed": float(res_t.success.mean()),
            }
            if objective == "min_cost":
                extra = res_t.cost[both] / res_r.cost[both] - 1.0
                row["extra_cost_mean"] = float(extra.mean()) if both.any() else np.nan
                row["extra_cost_max"] = float(extra.max()) if both.any() else np.nan
                if exact is not None:
                    solved = ~np.isnan(exact).any(1)
                    cost_exact = np.asarray(typed.cost(np.nan_to_num(exact)))
                    pair = solved & res_t.success & (cost_exact > 0)
                    gap = res_t.cost[pair] / cost_exact[pair] - 1.0
                    row["success_exact"] = float(solved.mean())
                    row["repair_vs_exact_mean"] = float(gap.mean())
                    row["repair_vs_exact_max"] = float(gap.max())
            else:
                row["extra_loss_mean"] = float((res_t.loss - res_r.loss).mean())
            rows.append(row)
    return rows


MEASURES = (
    "relaxed_breaks_types",
    "success_relaxed",
    "success_typed",
    "extra_cost_mean",
    "extra_cost_max",
    "extra_loss_mean",
    "success_exact",
    "repair_vs_exact_mean",
    "repair_vs_exact_max",
)
"""The measured columns, in the report's order."""


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds and, for the MLP, the 95 % interval's half-width."""
    keys = ["model", "action_set", "p", "method", "objective"]
    grouped = df.groupby(keys, sort=False)[list(MEASURES)]
    mean = grouped.mean()
    n = grouped.count().max(axis=1)
    half = t_half_width(grouped.std(), n)
    return mean.join(half.add_suffix("_ci")).reset_index()


def markdown(table: pd.DataFrame, wall: float, cpu: float, args: Args) -> str:
    def cell(row, col):
        value, ci = row[col], row.get(f"{col}_ci", np.nan)
        if pd.isna(value):
            return ""
        return f"{value:.3f}" if pd.isna(ci) else f"{value:.3f} ± {ci:.3f}"

    lines = [
        "# What respecting feature types costs (German credit)",
        "",
        "Produced by `analyses/type_repair.py` (see its docstring for the set-up); "
        f"ε = {args.epsilon}, cost weight 1 / SD, {args.steps} steps for pgd and wachter; "
        f"MLP: mean ± 95 % interval over {args.seeds} seeds. Took {wall:.0f} s wall, "
        f"{cpu:.0f} s CPU.",
        "",
        "| model | action set | p | method | objective | relaxed breaks types | success "
        "relaxed | success typed | extra cost mean | extra cost max | extra loss mean | "
        "success exact | repair vs exact mean | repair vs exact max |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, row in table.iterrows():
        lines.append(
            f"| {row['model']} | {row['action_set']} | {row['p']:g} | {row['method']} | "
            f"{row['objective']} | " + " | ".join(cell(row, c) for c in MEASURES) + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--seeds", type=int, default=5)
    ns = parser.parse_args(argv)
    args = Args(out=ns.out, seeds=ns.seeds)
    torch.set_num_threads(1)
    started, cpu0 = time.perf_counter(), time.process_time()
    ds = load("german")
    records = []
    for model, seed, learner in models(ds, args.seeds):
        rejected = ds.X[learner.predict(ds.X) == 0]
        for p in (1, 2):
            for name, (typed, relaxed) in action_sets(ds, args.epsilon, p).items():
                for row in measure(learner, rejected, typed, relaxed, args):
                    records.append({"model": model, "seed": seed, "action_set": name, "p": p} | row)
    df = pd.DataFrame.from_records(records)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu0
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / "type_repair.csv", index=False, float_format="%.6g")
    text = markdown(summary(df), wall, cpu, args)
    (args.out / "type_repair.md").write_text(text)
    print(text)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
