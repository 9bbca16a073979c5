"""Plots show what matters: panels by column, blanks where nobody sought recourse, runs
overlaid, and sweep cells as a mean with a 95 % band (the figures are inspected)."""

from __future__ import annotations

import matplotlib.figure
import numpy as np
import pandas as pd
import pytest

from recourse_sim.cli import main
from recourse_sim.plotting import plot_dynamics

ROWS = 4


def _metrics(shift: float = 0.0) -> pd.DataFrame:
    rows = []
    for r in range(1, ROWS + 1):
        for group in ("A", "B", "query", "all"):
            rows.append(
                {
                    "round": r,
                    "group": group,
                    "n": 10,
                    "acceptance_rate": 0.1 * r + shift,
                    "n_seekers": 0 if r == 2 else 3,
                    "recourse_success_rate": 0.0 if r == 2 else 0.5,
                    "mean_cost": 0.0 if r == 2 else 0.3,
                    "true_outcome_rate": 0.6,
                    "model_accuracy": 0.7 if group == "all" else np.nan,
                    "model_shift": 0.1 * r if group == "all" else np.nan,
                }
            )
    return pd.DataFrame(rows)


@pytest.fixture
def figures(monkeypatch):
    """The figures the plots save (inspected instead of the PNG)."""
    saved = []
    real = matplotlib.figure.Figure.savefig

    def keep(self, *args, **kwargs):
        saved.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    return saved


def _panels(fig) -> dict:
    return {ax.get_ylabel(): ax for ax in fig.axes if ax.get_visible() and ax.get_ylabel()}


@pytest.mark.slow
def test_a_run_plot_blanks_rounds_without_seekers(tmp_path, figures):
    plot_dynamics(_metrics(), tmp_path / "a.png")
    (fig,) = figures
    panels = _panels(fig)
    assert {"acceptance rate", "seekers", "model shift ‖θ − θ₀‖", "model accuracy"} <= set(panels)
    assert "collective participants" not in panels  # no such column: no panel
    cost = panels["mean recourse cost"].lines[0].get_ydata()
    assert np.isnan(cost[1]) and cost[0] == pytest.approx(0.3)  # round 2 had no seekers
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["A", "B", "query", "all"]


def _run(folder, shift, seed):
    folder.mkdir()
    _metrics(shift).to_csv(folder / "metrics.csv", index=False)
    (folder / "summary.json").write_text(f'{{"scenario": "toy", "seed": {seed}}}')


@pytest.mark.slow
def test_two_runs_overlay(tmp_path, figures, capsys):
    _run(tmp_path / "a", 0.0, 0)
    _run(tmp_path / "b", 0.2, 1)
    out = tmp_path / "both.png"
    assert main(["plot", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    assert out.is_file()
    (fig,) = figures
    # what differs (the seed) names the lines; what they share is in the title
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["seed 0", "seed 1"]
    assert fig._suptitle.get_text() == "2 runs, group all (toy)"
    accept = _panels(fig)["acceptance rate"].lines
    assert accept[1].get_ydata()[0] - accept[0].get_ydata()[0] == pytest.approx(0.2)


@pytest.mark.slow
def test_a_sweep_draws_each_cell_as_a_mean_and_band(tmp_path, figures, capsys):
    frames = []
    for alpha in (0.1, 0.5):
        for seed in range(3):
            m = _metrics(shift=alpha + 0.01 * seed)
            frames.append(m.assign(alpha=alpha, seed=seed)[["alpha", "seed", *m.columns]])
    sweep = tmp_path / "sw"
    sweep.mkdir()
    pd.concat(frames).to_csv(sweep / "sweep.csv", index=False)
    assert main(["plot", str(sweep)]) == 0
    assert (sweep / "dynamics.png").is_file()
    (fig,) = figures
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["alpha=0.1", "alpha=0.5"]
    ax = _panels(fig)["acceptance rate"]
    assert len(ax.lines) == 2 and len(ax.collections) == 2  # a mean line and a band each
    assert ax.lines[0].get_ydata()[0] == pytest.approx(0.1 + 0.1 + 0.01)  # mean over seeds
    assert "95 % CI over 3 seeds" in fig._suptitle.get_text()


@pytest.mark.slow
def test_a_point_between_empty_rounds_is_drawn_as_a_marker(tmp_path, figures):
    m = _metrics()
    m.loc[m["round"] != 3, "n_seekers"] = 0  # seekers in round 3 only
    m.loc[m["n_seekers"] == 0, ["recourse_success_rate", "mean_cost"]] = np.nan
    plot_dynamics(m, tmp_path / "a.png")
    (line, *_) = _panels(figures[0])["recourse success rate"].lines
    assert line.get_marker() == "o"
    assert np.isfinite(line.get_ydata()).sum() == 1
    assert _panels(figures[0])["acceptance rate"].lines[0].get_marker() == "None"


def _scenario_run(folder, seed, participation, epsilon=0.5):
    folder.mkdir()
    _metrics(participation).to_csv(folder / "metrics.csv", index=False)
    (folder / "summary.json").write_text(f'{{"scenario": "toy", "seed": {seed}}}')
    (folder / "scenario.yaml").write_text(
        "name: toy\nrounds: 4\npopulations:\n  seekers:\n"
        f"    participation: {participation}\n    epsilon: {epsilon}\n"
    )


@pytest.mark.slow
def test_overlaid_runs_are_named_by_the_settings_that_differ(tmp_path, figures, capsys):
    _scenario_run(tmp_path / "a", 0, 0.1)
    _scenario_run(tmp_path / "b", 0, 0.5)
    _scenario_run(tmp_path / "c", 1, 0.5)
    assert (
        main(["plot", *(str(tmp_path / r) for r in "abc"), "--out", str(tmp_path / "o.png")]) == 0
    )
    legend = [t.get_text() for t in figures[-1].legends[0].get_texts()]
    assert legend == [
        "populations.seekers.participation=0.1, seed 0",
        "populations.seekers.participation=0.5, seed 0",
        "populations.seekers.participation=0.5, seed 1",
    ]
    assert figures[-1]._suptitle.get_text() == "3 runs, group all (toy)"


@pytest.mark.slow
def test_plot_label_names_the_lines(tmp_path, figures, capsys):
    _scenario_run(tmp_path / "a", 0, 0.1)
    _scenario_run(tmp_path / "b", 0, 0.5)
    runs = [str(tmp_path / "a"), str(tmp_path / "b")]
    out = str(tmp_path / "o.png")
    assert main(["plot", *runs, "--out", out, "--label", "few", "--label", "many"]) == 0
    assert [t.get_text() for t in figures[-1].legends[0].get_texts()] == ["few", "many"]
    capsys.readouterr()
    assert main(["plot", *runs, "--out", out, "--label", "few"]) == 2
    assert capsys.readouterr().err.strip() == "error: 1 --label for 2 runs; give one per run"
    assert main(["plot", runs[0], "--label", "one run"]) == 0
    assert figures[-1]._suptitle.get_text() == "one run"


@pytest.mark.slow
def test_a_sweep_mean_leaves_out_rounds_without_seekers(tmp_path, figures, capsys):
    """Seed 0 has no seekers in round 1 (a table written with 0 there, as older runs did):
    the mean is that of the other seeds, and a panel says how many runs it averages."""
    frames = []
    for seed in range(3):
        m = _metrics()
        m["recourse_success_rate"] = 1.0
        if seed == 0:
            m.loc[m["round"] == 1, ["n_seekers", "recourse_success_rate", "mean_cost"]] = 0
        frames.append(m.assign(seed=seed)[["seed", *m.columns]])
    sweep = tmp_path / "sw"
    sweep.mkdir()
    pd.concat(frames).to_csv(sweep / "sweep.csv", index=False)
    assert main(["plot", str(sweep)]) == 0
    panels = _panels(figures[-1])
    assert panels["recourse success rate"].lines[0].get_ydata()[0] == pytest.approx(1.0)
    runs = panels["runs averaged (recourse success)"].lines[0].get_ydata()
    assert list(runs) == [2, 0, 3, 3]  # round 2: nobody sought recourse in any run
    assert "over the runs with seekers" in figures[-1]._suptitle.get_text()
