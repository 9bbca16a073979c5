"""Reproduce Tables 1 and 2 (and the λ sweep of Figure 1) of Ross, Lakkaraju & Bastani.

Protocol (the paper's §4.1 and Appendix A, on Adult, COMPAS and German credit; Bail is
not available):

* features: the paper's Appendix A.2 subsets, as near as our loaders allow (``--features
  all`` uses every feature of `recourse_sim.data.load`); continuous features standardised
  with the training split's mean and standard deviation, binary ones left 0/1;
* splits: 80 % train / 20 % validation, then 500 (Adult, COMPAS) or 100 (German)
  validation rows held out as the test set; 5 random splits (the paper: 3; 20 for German, see
  ``SPLITS``);
* Δ: the actionable features of Appendix A.3 (monotone where it says so), |δⱼ| ≤ δ_max =
  0.75 on the standardised scale: ``ActionSet(max_change=0.75, p=inf, epsilon=0.75)``;
* model: `MLPClassifier` with 3 hidden layers of 100 tanh units, dropout 0.3, Adam at
  lr 0.002, trained with the recourse loss weight λ (``recourse_loss_weight``);
* decision threshold θ₀: the F1-maximising one on the validation rows (Table 1);
* recourse for every test row: "gd" = projected gradient descent on the goal loss over Δ
  (the paper's gradient-descent / Wachter method without the distance term) and
  "linear" = Ross's LP δ* (the paper's "adversarial training" recourse; *not* its
  LIME-based "linear approximation"); "recourse neg" = share of test rows with
  g(x) < θ₀ whose recourse reaches θ₀, "recourse all" = share with g(x) ≥ θ₀ or a
  recourse that reaches it;
* Table 2: θ₀ by F1-max vs PARE (ε = α = 0.05, calibration = the validation rows, the
  F1-best of 10 thresholds in [0, τ̂]), recourse by the "linear" method.

Budget: epochs and batch sizes per dataset are below (the paper's on COMPAS and German,
fewer Adam steps on Adult, so the whole grid fits in ~25 minutes on one core), the λ sweep
is λ ∈ {0, 0.2, 0.4, 0.8, 1.2, 2.0} (6 of the paper's 11 values, denser where the curves
move), and the last epoch is evaluated (the paper picks the best-validation-F1 epoch).

Outputs in --out: ``ross_table1_splits.csv`` (dataset, lambda, split, f1, accuracy,
precision, recall, recourse_neg_gd, recourse_neg_linear, recourse_all_gd,
recourse_all_linear), ``ross_table1.csv`` (per dataset and λ: n_splits and each
metric's mean over splits with its 95 % Student-t half-width, ``<metric>_ci95``),
``ross_table2.csv`` (dataset, model, threshold_rule, n_splits, f1, recourse and their
``_ci95``), ``ross_table2_splits.csv`` (per split, with thresholds and the PARE
certificate), ``ross_lambda_sweep.png``, ``ross_summary.json`` (arguments, timings,
load) and ``ross_tables.md`` (our numbers next to the paper's, with paired tests and,
if ``ross_ablations.csv`` is in --out, the ablations of ``ross_ablations.py``).

    python analyses/ross_table1.py [--quick] [--out DIR] [--datasets adult compas german]
    python analyses/ross_table1.py --report-only [--out DIR]   # figure + Markdown only
    python analyses/ross_table1.py --datasets adult --first-split 3 --splits 2 --out DIR
    python analyses/ross_table1.py --merge DIR1 DIR2 ... [--out DIR]   # runs over other splits
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, astuple, dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score

from recourse_sim.data import load
from recourse_sim.learners import MLPClassifier
from recourse_sim.recourse import ActionSet
from recourse_sim.recourse.ross import (
    max_f1_threshold,
    pare_threshold,
    recourse_rates,
    recourse_scores,
)
from recourse_sim.stats import mean_ci, paired_difference

RESULTS = Path(__file__).resolve().parent / "results"
DATASETS = ("adult", "compas", "german")

# Appendix A.2's features in our loaders' names. COMPAS lacks days_b_screening_arrest
# (our loader leaves it out on purpose); everything else is there.
PAPER_FEATURES = {
    "adult": (
        "age", "education_num", "capital_gain", "capital_loss", "hours_per_week",
        "race_white", "native_country_us", "marital_status_married", "sex_male",
    ),
    "compas": (
        "age", "priors_count", "length_of_stay", "sex_male", "race_white",
        "c_charge_degree_felony",
    ),
    "german": ("sex_male", "age", "duration", "credit_amount"),
}  # fmt: skip
TEST_ROWS = {"adult": 500, "compas": 500, "german": 100}
# (epochs, batch size): ~1,250-2,300 Adam steps per model (the paper: 15 epochs of
# batches of 15 for Adult/COMPAS, 50 epochs of 30 for German; its released code: 10).
# Longer Adult runs (15 epochs of 32 or 128) gave the same λ = 0.8 trade-off on a probe
# split. COMPAS trains with the paper's epochs and the released code's batch, German
# with the paper's budget; Adult with 4 epochs of 64 (~2,300 steps) instead of the
# paper's 15 epochs of 15 (~36,000 steps, ~30 minutes per λ sweep).
TRAINING = {"adult": (4, 64), "compas": (15, 10), "german": (50, 30)}
# Random splits per dataset: 5 (the paper's 3 give no usable interval: a 95 % Student-t
# half-width over 3 splits is 2.5 standard errors), except German. Its 100-row test set
# leaves 0-25 rejected rows at the F1-max threshold, so "recourse neg" of one split rests
# on a handful of people; 20 splits, as the paper's own German experiment (its Figure 3).
SPLITS = {"adult": 5, "compas": 5, "german": 20}
TABLE_LAMBDAS = (0.0, 0.8)

# The paper's Table 1 (means over 3 splits): (baseline λ = 0, ours λ = 0.8). Its
# "Adversarial train." recourse is our "linear" column.
PAPER_TABLE1 = {
    "adult": {
        "f1": (0.697, 0.636), "accuracy": (0.830, 0.787), "precision": (0.621, 0.555),
        "recall": (0.799, 0.752), "recourse_neg_gd": (0.210, 0.496),
        "recourse_neg_linear": (0.007, 0.498), "recourse_all_gd": (0.461, 0.661),
        "recourse_all_linear": (0.321, 0.659),
    },
    "compas": {
        "f1": (0.739, 0.717), "accuracy": (0.667, 0.565), "precision": (0.655, 0.561),
        "recall": (0.850, 0.991), "recourse_neg_gd": (0.579, 1.000),
        "recourse_neg_linear": (0.000, 0.967), "recourse_all_gd": (0.883, 1.000),
        "recourse_all_linear": (0.722, 0.999),
    },
    "german": {
        "f1": (0.447, 0.419), "accuracy": (0.600, 0.527), "precision": (0.364, 0.317),
        "recall": (0.583, 0.638), "recourse_neg_gd": (0.804, 0.864),
        "recourse_neg_linear": (0.127, 0.968), "recourse_all_gd": (0.890, 0.920),
        "recourse_all_linear": (0.517, 0.980),
    },
}  # fmt: skip
# Table 2: (F1, recourse) per (model, threshold rule).
PAPER_TABLE2 = {
    "adult": {
        ("baseline", "f1_max"): (0.697, 0.321), ("baseline", "pare"): (0.400, 0.981),
        ("ours", "f1_max"): (0.636, 0.659), ("ours", "pare"): (0.526, 0.974),
    },
    "compas": {
        ("baseline", "f1_max"): (0.739, 0.722), ("baseline", "pare"): (0.722, 0.972),
        ("ours", "f1_max"): (0.717, 0.999), ("ours", "pare"): (0.721, 0.999),
    },
    "german": {
        ("baseline", "f1_max"): (0.447, 0.517), ("baseline", "pare"): (0.442, 0.997),
        ("ours", "f1_max"): (0.419, 0.980), ("ours", "pare"): (0.457, 1.000),
    },
}  # fmt: skip
METRICS = (
    "f1", "accuracy", "precision", "recall", "recourse_neg_gd", "recourse_neg_linear",
    "recourse_all_gd", "recourse_all_linear",
)  # fmt: skip


@dataclass
class Args:
    """Command-line arguments."""

    datasets: tuple[str, ...] = DATASETS  # which datasets to run
    out: Path = RESULTS  # folder the CSV, PNG, JSON and Markdown files go to
    quick: bool = False  # one split, λ ∈ {0, 0.8}, a tenth of the epochs (smoke test)
    seed: int = 0  # seeds the splits and the MLP initialisations
    splits: dict[str, int] = field(default_factory=lambda: dict(SPLITS))  # random splits
    first_split: int = 0  # index of the first split run (split s is seeded by (seed, s))
    merge: list[Path] | None = None  # output dirs of runs to merge into `out` (no training)
    lambdas: tuple[float, ...] = (0.0, 0.2, 0.4, 0.8, 1.2, 2.0)  # λ sweep (Figure 1)
    delta_max: float = 0.75  # largest change of an actionable feature (standard deviations)
    epsilon: float = 0.05  # PARE: at most this share of people without recourse ...
    alpha: float = 0.05  # ... except with this probability over the calibration draw
    gd_steps: int = 100  # projected-gradient steps of the "gd" recourse
    features: str = "paper"  # "paper" (Appendix A.2 subsets) or "all"
    report_only: bool = False  # only rebuild the figure and Markdown from files in out
    training: dict[str, tuple[int, int]] = field(default_factory=lambda: dict(TRAINING))


@dataclass
class Split:
    """One standardised train / validation (= calibration) / test split."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def prepare(name: str, args: Args) -> tuple[np.ndarray, np.ndarray, np.ndarray, ActionSet]:
    """Features (paper subset), labels, continuous-feature mask and Ross's Δ."""
    data = load(name)
    names = list(data.feature_names)
    keep = [names.index(f) for f in PAPER_FEATURES[name]] if args.features == "paper" else None
    cols = keep if keep is not None else list(range(len(names)))
    X = np.array(data.X[:, cols])
    kept = [names[j] for j in cols]
    immutable = data.immutable[cols]
    action_set = ActionSet(
        len(cols),
        immutable=np.flatnonzero(immutable).tolist(),
        increase_only=np.flatnonzero(data.increase_only[cols]).tolist(),
        decrease_only=np.flatnonzero(data.decrease_only[cols]).tolist(),
        max_change=args.delta_max,
        p=np.inf,
        epsilon=args.delta_max,  # with p = ∞ and unit weights: the same box
        feature_names=kept,
    )
    return X, np.array(data.y), ~data.categorical[cols], action_set


def make_split(X, y, continuous, name: str, split: int, seed: int) -> Split:
    rng = np.random.default_rng([seed, split])
    order = rng.permutation(len(X))
    n_train = round(0.8 * len(X))
    train, rest = order[:n_train], order[n_train:]
    test, val = rest[: TEST_ROWS[name]], rest[TEST_ROWS[name] :]
    mean = np.where(continuous, X[train].mean(0), 0.0)
    std = np.where(continuous, X[train].std(0), 1.0)
    Z = (X - mean) / np.where(std > 0, std, 1.0)
    return Split(Z[train], y[train], Z[val], y[val], Z[test], y[test])


def make_model(lam: float, action_set: ActionSet, epochs: int, batch: int, seed: int):
    return MLPClassifier(
        hidden=(100, 100, 100),
        activation="tanh",
        dropout=0.3,
        fit_lr=0.002,
        fit_epochs=epochs,
        batch_size=batch,
        random_state=seed,
        recourse_loss_weight=lam,
        action_set=action_set,
    )


def performance(y, g, threshold: float) -> dict[str, float]:
    pred = (g >= threshold).astype(np.int64)
    return {
        "f1": f1_score(y, pred, zero_division=0),
        "accuracy": accuracy_score(y, pred),
        "precision": precision_score(y, pred, zero_division=0),
        "recall": recall_score(y, pred, zero_division=0),
    }


def evaluate(model, s: Split, action_set: ActionSet, args: Args, with_pare: bool):
    """Table 1 metrics at the F1-max threshold, and (with_pare) Table 2 rows."""
    g_val = model.predict_proba(s.X_val)[:, 1]
    g_test = model.predict_proba(s.X_test)[:, 1]
    theta = max_f1_threshold(g_val, s.y_val)
    best = {
        "gd": recourse_scores(model, s.X_test, action_set, method="pgd", steps=args.gd_steps),
        "linear": recourse_scores(model, s.X_test, action_set, method="linear"),
    }
    row = performance(s.y_test, g_test, theta) | {"threshold": theta}
    for method, scores in best.items():
        neg, every = recourse_rates(g_test, scores, theta)
        row[f"recourse_neg_{method}"], row[f"recourse_all_{method}"] = neg, every
    table2 = []
    if with_pare:
        pare = pare_threshold(
            model, s.X_val, action_set, epsilon=args.epsilon, alpha=args.alpha, y_cal=s.y_val
        )
        for rule, t in (("f1_max", theta), ("pare", pare.threshold)):
            perf = performance(s.y_test, g_test, t)
            table2.append(
                {
                    "threshold_rule": rule,
                    "f1": perf["f1"],
                    "recourse": recourse_rates(g_test, best["linear"], t)[1],
                    "recourse_gd": recourse_rates(g_test, best["gd"], t)[1],
                    "accuracy": perf["accuracy"],
                    "threshold": t,
                    "pare_upper": pare.upper,
                    "pare_max_errors": pare.max_errors,
                    "n_calibration": pare.n_calibration,
                }
            )
    return row, table2


def run(args: Args) -> dict:
    args.out.mkdir(parents=True, exist_ok=True)
    rows, rows2, timings = [], [], {}
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    load_start = os.getloadavg()[0]
    for name in args.datasets:
        X, y, continuous, action_set = prepare(name, args)
        epochs, batch = args.training[name]
        t_wall, t_cpu = time.perf_counter(), time.process_time()
        for split in range(args.first_split, args.first_split + args.splits[name]):
            s = make_split(X, y, continuous, name, split, args.seed)
            for lam in args.lambdas:
                t0 = time.perf_counter()
                model = make_model(lam, action_set, epochs, batch, 1000 * args.seed + split)
                model.fit(s.X_train, s.y_train)
                fit_s = time.perf_counter() - t0
                row, table2 = evaluate(model, s, action_set, args, lam in TABLE_LAMBDAS)
                rows.append({"dataset": name, "lambda": lam, "split": split} | row)
                model_name = "baseline" if lam == 0 else "ours"
                rows2 += [
                    {"dataset": name, "model": model_name, "split": split} | r for r in table2
                ]
                print(
                    f"{name} split {split} λ={lam:.1f}: fit {fit_s:.1f}s, "
                    f"eval {time.perf_counter() - t0 - fit_s:.1f}s, f1 {row['f1']:.3f}, "
                    f"acc {row['accuracy']:.3f}, neg gd {row['recourse_neg_gd']:.3f}, "
                    f"neg linear {row['recourse_neg_linear']:.3f}",
                    flush=True,
                )
        timings[name] = {
            "wall_s": time.perf_counter() - t_wall,
            "cpu_s": time.process_time() - t_cpu,
            "n_train": len(s.X_train),
            "epochs": epochs,
            "batch_size": batch,
        }
    timings["total"] = {
        "wall_s": time.perf_counter() - start_wall,
        "cpu_s": time.process_time() - start_cpu,
        # 1-minute load average at the start and the end (2 cores, shared)
        "load": [load_start, os.getloadavg()[0]],
    }
    table1 = pd.DataFrame(rows)
    table1[["dataset", "lambda", "split", *METRICS]].to_csv(
        args.out / "ross_table1_splits.csv", index=False, float_format="%.4f"
    )
    splits2 = pd.DataFrame(rows2)
    splits2.to_csv(args.out / "ross_table2_splits.csv", index=False, float_format="%.4f")
    summary = {"args": {k: str(v) for k, v in asdict(args).items()}, "timings": timings}
    (args.out / "ross_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    report(table1, splits2, args, timings)
    print(f"total {timings['total']['wall_s']:.0f} s wall, {timings['total']['cpu_s']:.0f} s CPU")
    return summary


def report(table1: pd.DataFrame, splits2: pd.DataFrame, args: Args, timings: dict) -> None:
    """Table 2 means, the λ-sweep figure and the Markdown comparison."""
    table2 = summarise(splits2, ["dataset", "model", "threshold_rule"], ["f1", "recourse"])
    table2.to_csv(args.out / "ross_table2.csv", index=False, float_format="%.4f")
    summarise(table1, ["dataset", "lambda"], METRICS).to_csv(
        args.out / "ross_table1.csv", index=False, float_format="%.4f"
    )
    plot_sweep(table1, args.out / "ross_lambda_sweep.png")
    (args.out / "ross_tables.md").write_text(markdown(table1, table2, splits2, args, timings))


def summarise(per_split: pd.DataFrame, keys: list[str], metrics) -> pd.DataFrame:
    """One row per cell (`keys`): ``n_splits`` and, per metric, the mean over splits
    (under the metric's name) and the 95 % Student-t half-width (``<metric>_ci95``;
    splits where a metric is undefined, e.g. no rejected test row, are left out)."""
    rows = []
    for cell, g in per_split.groupby(keys, sort=False):
        row = dict(zip(keys, cell, strict=True)) | {"n_splits": g["split"].nunique()}
        for m in metrics:
            row[m], row[f"{m}_ci95"], _ = astuple(mean_ci(g[m]))
        rows.append(row)
    return pd.DataFrame(rows)


def merge(args: Args) -> None:
    """Merge the per-split outputs of several runs (each dir: ``ross_table1_splits.csv``
    — or an older run's per-split ``ross_table1.csv`` —, ``ross_table2_splits.csv`` and
    ``ross_summary.json``) into args.out and report on the union. Splits are independent
    (split s is drawn and seeded by (seed, s)), so runs over disjoint splits add up; a
    (dataset, split) found in two runs is taken from the first."""
    tables1, tables2, timings = [], [], {}
    seen: set[tuple[str, int]] = set()
    for d in args.merge:
        path = d / "ross_table1_splits.csv"
        t1 = pd.read_csv(path if path.exists() else d / "ross_table1.csv")
        t2 = pd.read_csv(d / "ross_table2_splits.csv")
        info = json.loads((d / "ross_summary.json").read_text())
        keys1 = list(zip(t1["dataset"], t1["split"], strict=True))
        new = [k not in seen for k in keys1]
        keep = set(k for k, n in zip(keys1, new, strict=True) if n)
        t1 = t1[new]
        t2 = t2[[k in keep for k in zip(t2["dataset"], t2["split"], strict=True)]]
        if not len(t1):
            continue
        seen |= keep
        tables1.append(t1)
        tables2.append(t2)
        for name, t in info["timings"].items():
            if name == "total" or name in set(t1["dataset"]):
                label = (
                    f"{name} ({d.name}: splits {_span(t1, name)})"
                    if name != "total"
                    else (f"total of {d.name}")
                )
                timings[label] = t
    table1 = pd.concat(tables1, ignore_index=True).sort_values(
        ["dataset", "split", "lambda"],
        key=lambda c: c.map(DATASETS.index) if c.name == "dataset" else c,
    )
    splits2 = pd.concat(tables2, ignore_index=True).sort_values(
        ["dataset", "model", "split"],
        key=lambda c: c.map(DATASETS.index) if c.name == "dataset" else c,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    table1[["dataset", "lambda", "split", *METRICS]].to_csv(
        args.out / "ross_table1_splits.csv", index=False, float_format="%.4f"
    )
    splits2.to_csv(args.out / "ross_table2_splits.csv", index=False, float_format="%.4f")
    args.datasets = tuple(n for n in DATASETS if n in set(table1["dataset"]))
    args.splits = table1.groupby("dataset")["split"].nunique().to_dict()
    args.lambdas = tuple(sorted(table1["lambda"].unique()))
    summary = {
        "args": {k: str(v) for k, v in asdict(args).items()},
        "timings": timings,
        "merged": [str(d) for d in args.merge],
    }
    (args.out / "ross_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    report(table1, splits2, args, timings)


def _span(table: pd.DataFrame, name: str) -> str:
    s = sorted(table.loc[table["dataset"] == name, "split"].unique())
    return f"{s[0]}–{s[-1]}" if len(s) > 1 else str(s[0])


def report_only(args: Args) -> None:
    """Rebuild the figure and the Markdown from the CSV and JSON files in args.out."""
    table1 = pd.read_csv(args.out / "ross_table1_splits.csv")
    splits2 = pd.read_csv(args.out / "ross_table2_splits.csv")
    summary = json.loads((args.out / "ross_summary.json").read_text())
    args.splits = table1.groupby("dataset")["split"].nunique().to_dict()
    args.lambdas = tuple(sorted(table1["lambda"].unique()))
    args.quick = summary["args"]["quick"] == "True"
    args.gd_steps = int(summary["args"]["gd_steps"])
    report(table1, splits2, args, summary["timings"])


def plot_sweep(table1: pd.DataFrame, path: Path) -> None:
    """Figure 1: performance and recourse vs λ, mean ± standard error over splits."""
    names = list(dict.fromkeys(table1["dataset"]))
    methods = (("gd", "gradient descent"), ("linear", "LP δ*"))
    panels = (
        ("performance", (("f1", "F1"), ("accuracy", "accuracy"))),
        ("recourse neg", tuple((f"recourse_neg_{m}", label) for m, label in methods)),
        ("recourse all", tuple((f"recourse_all_{m}", label) for m, label in methods)),
    )
    fig, axes = plt.subplots(3, len(names), figsize=(4 * len(names), 9), squeeze=False)
    for j, name in enumerate(names):
        grouped = table1[table1["dataset"] == name].groupby("lambda")
        # NaN "recourse neg" (no negative row in a split) is left out of both
        mean, count = grouped.mean(numeric_only=True), grouped.count()
        se = (grouped.std(numeric_only=True) / np.sqrt(count)).fillna(0.0)
        for i, (title, series) in enumerate(panels):
            ax = axes[i, j]
            for col, label in series:
                ax.errorbar(mean.index, mean[col], yerr=se[col], marker="o", capsize=3, label=label)
            ax.set_ylim(-0.02, 1.02)
            ax.set_title(f"{name}: {title}")
            ax.set_xlabel("λ (recourse_loss_weight)")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def observations(table1: pd.DataFrame) -> list[str]:
    """Sentences about the λ sweep that hold for whatever the run produced."""
    lines = []
    means = table1.groupby(["dataset", "lambda"]).mean(numeric_only=True)
    for name in dict.fromkeys(table1["dataset"]):
        m = means.loc[name]
        base = m.loc[0.0]
        lifted = m[m["recourse_neg_gd"] >= base["recourse_neg_gd"] + 0.2]
        paper = {k: v[1] for k, v in PAPER_TABLE1[name].items()}
        if len(lifted):
            lam = lifted.index.min()
            r = m.loc[lam]
            lines.append(
                f"- {name}: the smallest swept λ lifting recourse neg (gd) by ≥ 0.2 is "
                f"{lam:g}: recourse neg {base['recourse_neg_gd']:.3f} → "
                f"{r['recourse_neg_gd']:.3f}, F1 {base['f1']:.3f} → {r['f1']:.3f}, "
                f"accuracy {base['accuracy']:.3f} → {r['accuracy']:.3f}, recall "
                f"{r['recall']:.3f} (paper at λ = 0.8: recourse neg "
                f"{paper['recourse_neg_gd']:.3f}, F1 {paper['f1']:.3f}, accuracy "
                f"{paper['accuracy']:.3f}, recall {paper['recall']:.3f})."
            )
        else:
            lines.append(f"- {name}: no swept λ lifts recourse neg (gd) by ≥ 0.2.")
    at0 = table1[table1["lambda"] == 0.0]
    gap = (at0["recourse_neg_gd"] - at0["recourse_neg_linear"]).abs().mean()
    lines.append(
        f"- At λ = 0 the LP δ* and gradient descent give recourse to nearly the same "
        f"negatives (mean |difference| of recourse neg {gap:.3f}); the paper reports "
        "0.210 vs 0.007, 0.579 vs 0.000 and 0.804 vs 0.127 (see *Direction of δ** below)."
    )
    return lines


def _splits(args: Args) -> str:
    return ", ".join(f"{name} {args.splits[name]}" for name in args.datasets if name in args.splits)


def _fmt(values) -> str:
    """'mean ± 95 % half-width' over splits (the mean alone below two values)."""
    mean, half, n = astuple(mean_ci(values))
    if n == 0:
        return "—"
    return f"{mean:.3f}" if n < 2 else f"{mean:.3f} ± {half:.3f}"


def _paired(base: pd.DataFrame, ours: pd.DataFrame, metric: str) -> str:
    """λ = 0.8 − λ = 0 paired by split: mean ± 95 % half-width and the paired t-test."""
    both = pd.merge(base[["split", metric]], ours[["split", metric]], on="split").dropna()
    mean, half, p, n = astuple(paired_difference(both[f"{metric}_y"], both[f"{metric}_x"]))
    if n < 2:
        return f"{mean:+.3f} (n = {n})"
    return f"{mean:+.3f} ± {half:.3f} (paired t-test p = {p:.2g}, n = {n})"


def _ablations(out_dir: Path) -> list[str]:
    """The body of ross_ablations.md (made by ross_ablations.py) one heading level down,
    if it is in out_dir."""
    path = out_dir / "ross_ablations.md"
    if not path.exists():
        return []
    body = path.read_text().splitlines()[1:]  # without its title
    lines = ["## Ablations of the released code's choices (`ross_ablations.py`)"]
    lines += [f"#{line}" if line.startswith("## ") else line for line in body]
    return lines


def markdown(table1, table2, splits2, args: Args, timings) -> str:
    """Our Table 1 and Table 2 next to the paper's, with the checks of issue 6."""
    out = ["# Ross et al. (2021), Tables 1 and 2: our reproduction\n"]
    out.append(
        f"Generated by `analyses/ross_table1.py{' --quick' if args.quick else ''}`: "
        f"splits {_splits(args)}, λ ∈ {{{', '.join(f'{v:g}' for v in args.lambdas)}}}, "
        f"δ_max = {args.delta_max}, PARE ε = {args.epsilon}, α = {args.alpha}, "
        f"{args.gd_steps} gradient-descent steps. Our numbers: mean ± 95 % Student-t "
        "half-width over splits (German's recourse neg leaves out splits with no rejected "
        "test row). "
        "Paper: means over 3 splits. Our *linear* recourse is Ross's LP δ* — the paper's "
        "“adversarial training” rows, not its LIME “linear approximation”.\n"
    )
    out.append("## Table 1 (θ₀ maximises validation F1)\n")
    for name in dict.fromkeys(table1["dataset"]):
        out.append(f"### {name}\n")
        out.append("| metric | paper BL (λ=0) | ours BL | paper Ours (λ=0.8) | ours (λ=0.8) |")
        out.append("|---|---|---|---|---|")
        sub = table1[table1["dataset"] == name]
        for m in METRICS:
            cells = []
            for k, lam in enumerate(TABLE_LAMBDAS):
                ours = _fmt(sub.loc[np.isclose(sub["lambda"], lam), m])
                cells += [f"{PAPER_TABLE1[name][m][k]:.3f}", ours]
            out.append(f"| {m} | " + " | ".join(cells) + " |")
        out.append("")
    out.append("## Table 2 (F1 and “recourse all” with the LP δ*, test set)\n")
    out.append("| dataset | model + rule | paper F1 | ours F1 | paper recourse | ours recourse |")
    out.append("|---|---|---|---|---|---|")
    keys = ["dataset", "model", "threshold_rule"]
    for cell, g in splits2.groupby(keys, sort=False):
        r = dict(zip(keys, cell, strict=True))
        paper = PAPER_TABLE2[r["dataset"]][(r["model"], r["threshold_rule"])]
        label = f"{'BL' if r['model'] == 'baseline' else 'Ours'} + {r['threshold_rule']}"
        out.append(
            f"| {r['dataset']} | {label} | {paper[0]:.3f} | {_fmt(g['f1'])} | "
            f"{paper[1]:.3f} | {_fmt(g['recourse'])} |"
        )
    out.append("")
    pare = splits2[splits2["threshold_rule"] == "pare"]
    if len(pare):
        worst = pare["recourse"].min()
        out.append(
            f"PARE rows, every split: test recourse ≥ 1 − ε = {1 - args.epsilon:.2f} in "
            f"{int((pare['recourse'] >= 1 - args.epsilon).sum())} of {len(pare)} "
            f"(lowest {worst:.3f}); calibration rows n = "
            f"{', '.join(str(n) for n in sorted(set(pare['n_calibration'])))}, "
            f"error budgets k* = {', '.join(str(k) for k in sorted(set(pare['pare_max_errors'])))}"
            ". A test set of 100–500 rows measures the rate to about ±0.01–0.02.\n"
        )
    out.append("## Checks (issue 6 acceptance)\n")
    for name in dict.fromkeys(table1["dataset"]):
        sub = table1[table1["dataset"] == name]
        base, ours = (sub[np.isclose(sub["lambda"], lam)] for lam in TABLE_LAMBDAS)
        if not (len(base) and len(ours)):
            continue
        gain = ours["recourse_neg_gd"].mean() - base["recourse_neg_gd"].mean()
        drop = base["accuracy"].mean() - ours["accuracy"].mean()
        need = 0.2 if name in ("adult", "compas") else 0.0
        verdict = "yes" if gain > need and drop <= 0.1 else "NO"
        out.append(
            f"- {name}: recourse neg (gd) {base['recourse_neg_gd'].mean():.3f} → "
            f"{ours['recourse_neg_gd'].mean():.3f} ({gain:+.3f}, needs > {need:g}); accuracy "
            f"{base['accuracy'].mean():.3f} → {ours['accuracy'].mean():.3f} (drop "
            f"{drop:.3f}, needs ≤ 0.1): {verdict}. Paired by split, λ = 0.8 − λ = 0: "
            f"recourse neg (gd) {_paired(base, ours, 'recourse_neg_gd')}; accuracy "
            f"{_paired(base, ours, 'accuracy')}"
        )
    out.append("")
    ablations = _ablations(args.out)
    if ablations:
        out += ablations
        out.append("")
    out.append("## Observations (computed from the files above)\n")
    out += observations(table1)
    out.append("")
    out.append("## Timing\n")
    for name, t in timings.items():
        extra = (
            f", {t['n_train']} training rows, {t['epochs']} epochs × batch {t['batch_size']}"
            if "epochs" in t
            else ""
        )
        if "load" in t:
            extra += (
                f"; 1-minute load average {t['load'][0]:.1f} at the start, "
                f"{t['load'][1]:.1f} at the end (2 cores shared with other jobs; nice 10, "
                "torch at 1 thread)"
            )
        out.append(f"- {name}: {t['wall_s']:.0f} s wall, {t['cpu_s']:.0f} s CPU{extra}")
    out.append("")
    out.append(NOTES)
    return "\n".join(out) + "\n"


NOTES = """## Deviations from the paper

- **Data.** Adult has 45,222 rows here (adult.data + adult.test, rows with a missing
  value dropped; the paper: ≈ 32.5K). COMPAS lacks `days_b_screening_arrest` (our loader
  drops it on purpose). The label of COMPAS is 1 = no recidivism within two years, as in
  the paper's code. German: label 1 = good credit (70 % of rows). The paper's German
  F1 0.447 with precision 0.364 points to a positive class of about 30 %, so its German
  performance numbers are not comparable with ours (F1 of the majority class is high);
  the ablations above train and score German with the paper's convention as a variant.
- **Training budget.** COMPAS: the paper's 15 epochs with its released code's batch
  of 10 (the paper's text says 15); German: the paper's 50 epochs of 30; Adult: 4 epochs
  of 64 (about 2,300 Adam steps instead of 36,000). With
  20 epochs of 64 on COMPAS, λ = 0.8 lifted recourse neg by only 0.03: the recourse
  term needs the longer run to pull the model to the near-accept-all solution the
  paper reports. The last epoch is evaluated instead of the best-validation-F1 one; no
  class re-weighting (the paper's code up-weights the minority class; the paper does
  not mention it, and θ₀ is tuned for F1 anyway).
- **Recourse methods.** "gd" is projected gradient descent on ℓ(g(x + δ), 1) inside Δ
  (sign steps, best iterate; no ‖δ‖ penalty) rather than alibi's Wachter search, which
  adjusts λ' and can leave Δ; it is a stronger search, so our "recourse neg (gd)" is an
  upper-end estimate. The paper's LIME + Ustun "linear approximation" is not reproduced.
- **Direction of δ*.** In the released code (`utils/train_utils.py`, `calc_delta_opt`)
  the LP is `linprog(c = −∇ₓℓ(g(x), 1), …)`, i.e. it *maximises* ∇ₓℓᵀδ: the corner
  that raises the loss towards label 1 and so lowers g to first order — the opposite
  of Eq. 2. Ours follows Eq. 2 (a test checks that δ* raises the positive score).
  That reading would explain the paper's near-zero baseline "adversarial training"
  recourse (0.007, 0.000, 0.127) and why, for us, LP δ* recourse is as good as
  gradient descent already at λ = 0: in a box, a score monotone in the actionable
  features is maximised at the very corner the LP picks. The ablations above run the
  released sign on the same baseline models; their last column is the share of each
  gap it closes.
- **λ is not on the paper's scale.** The same λ weighs differently here: our δ* takes
  Eq. 2's direction (below), and the paper's code re-weights the data term by class
  (up to ≈ 3 on Adult's positives), which makes the data term heavier and the same λ
  lighter. Compare trade-offs along the sweep rather than at λ = 0.8 alone (see
  Observations). Note the paper's COMPAS λ = 0.8 row: accuracy 0.565 and recall 0.991
  on data with 55 % positives — the model gives nearly everyone the favourable decision,
  which is what makes its recourse 1.000.
- **Small test sets.** German's test set has 100 rows and the F1-max threshold leaves
  0–25 negatives (a split with none gives NaN "recourse neg", left out of the means), so
  its "recourse neg" swings between splits: with the first 3 splits alone λ = 0.8 looked
  worse than λ = 0 (0.72 → 0.67, on 51 and 15 rejected rows). Hence 20 German splits,
  as in the paper's Figure 3; "recourse all" is the stabler number.
- **PARE.** τ̂ uses α = 0.05 as the failure probability of the binomial tail bound, as
  in §3.3. The paper's released code passes 0.95 in that slot (`compute_t(probs, 0.05,
  0.95)` with the budget k = max{k : P[Bin(n, 0.05) ≤ k] ≤ 0.95}), a less conservative
  threshold than the one §3.3 describes; ours is the stated guarantee (the ablations
  above run both). The calibration
  score is max(g(x), g(x + δ*)) (the better of δ = 0 and δ*), which is exactly "has
  recourse at θ₀".
- **Bail** is not available.
"""


def parse(argv=None) -> Args:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(Args.datasets))
    p.add_argument("--out", type=Path, default=Args.out)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=Args.seed)
    p.add_argument("--splits", type=int, help="splits of every dataset (default: SPLITS)")
    p.add_argument(
        "--first-split", type=int, default=0, help="index of the first split to run (default 0)"
    )
    p.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="DIR",
        help="merge the per-split outputs of runs in DIR... into --out and report (no training)",
    )
    p.add_argument("--lambdas", type=float, nargs="+", default=list(Args().lambdas))
    p.add_argument("--gd-steps", type=int, default=Args.gd_steps)
    p.add_argument("--features", choices=("paper", "all"), default=Args.features)
    p.add_argument(
        "--report-only",
        action="store_true",
        help="rebuild the PNG and Markdown from the CSV/JSON already in --out",
    )
    ns = p.parse_args(argv)
    args = Args(
        datasets=tuple(ns.datasets),
        out=ns.out,
        quick=ns.quick,
        seed=ns.seed,
        splits={k: ns.splits or v for k, v in SPLITS.items()},
        lambdas=tuple(ns.lambdas),
        gd_steps=ns.gd_steps,
        features=ns.features,
        report_only=ns.report_only,
        first_split=ns.first_split,
        merge=ns.merge,
    )
    if not set(TABLE_LAMBDAS) <= set(args.lambdas):
        p.error(f"--lambdas must include {TABLE_LAMBDAS} (Tables 1 and 2)")
    if args.quick:
        args.splits = dict.fromkeys(SPLITS, 1)
        args.lambdas = TABLE_LAMBDAS
        args.gd_steps = min(args.gd_steps, 30)
        args.training = {k: (max(1, e // 10), b) for k, (e, b) in TRAINING.items()}
    return args


def main(argv=None) -> None:
    torch.set_num_threads(1)  # a loaded machine makes torch's thread pool ~100x slower
    args = parse(argv)
    if args.merge:
        merge(args)
    elif args.report_only:
        report_only(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
