"""Plots show what matters: panels by column, blanks where nobody sought recourse, runs
overlaid, and sweep cells as a mean with a 95 % band (the figures are inspected)."""

from __future__ import annotations

import os
import stat
import warnings

import matplotlib.figure
import numpy as np
import pandas as pd
import pytest

from recourse_sim.cli import main
from recourse_sim.plotting import PANELS, plot_dynamics, plot_runs, run_labels

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
    assert legend == [  # each setting by the end of its path that tells it apart
        "participation=0.1, seed 0",
        "participation=0.5, seed 0",
        "participation=0.5, seed 1",
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


# --------------------------------------------------------------- panels chosen by task

SMALL_SCHOOL = ["world.cohort_size=300", "world.history_size=600"]


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    """A few three-round runs (small cohorts): school with its collective, without it,
    the README's pile-up settings, and a performative best-response run."""
    from recourse_sim.scenarios import load_scenario
    from recourse_sim.simulate import simulate

    folder = tmp_path_factory.mktemp("runs")
    runs = {
        "school": ("school_assignment", SMALL_SCHOOL),
        "no_collective": ("school_assignment", [*SMALL_SCHOOL, "populations.h1_students=null"]),
        "pile": (
            "school_assignment",
            [
                *SMALL_SCHOOL,
                "features.types.extracurriculars=continuous",
                "populations.students.margin=0",
            ],
        ),
        "performative": ("performative_credit", []),
    }
    with warnings.catch_warnings():  # (the pile-up run warns of its pile)
        warnings.simplefilter("ignore")
        for name, (scenario, overrides) in runs.items():
            simulate(load_scenario(scenario, overrides=overrides), 3, 0, folder / name)
    return {name: folder / name for name in runs}


def _columns(fig) -> set:
    by_label = {panel.label: panel.column for panel in PANELS}
    return {by_label[label] for label in _panels(fig)}


def test_panels_follow_what_the_run_measured(real_runs, figures, tmp_path, capsys):
    """School with a collective shows the query group's outcome and the collective; a
    performative run shows convergence and not the empty recourse panels."""
    assert main(["plot", str(real_runs["school"]), "--out", str(tmp_path / "s.png")]) == 0
    school = _columns(figures[-1])
    assert {"query_success_next", "collective_participants", "theta_step"} <= school
    assert main(["plot", str(real_runs["no_collective"]), "--out", str(tmp_path / "n.png")]) == 0
    alone = _columns(figures[-1])  # no collective: its panels (all zero or empty) go
    assert not {"query_success_next", "collective_participants"} & alone
    assert main(["plot", str(real_runs["performative"]), "--out", str(tmp_path / "p.png")]) == 0
    performative = _columns(figures[-1])
    assert {"theta_step", "performative_risk"} <= performative
    # nobody seeks recourse there (everyone best-responds): no seekers' panels
    assert not {"n_seekers", "recourse_success_rate", "mean_cost"} & performative


def test_every_panel_shows_its_rounds_and_keeps_its_lines_colour(real_runs, figures, tmp_path):
    plot_dynamics(real_runs["school"], tmp_path / "s.png")
    fig = figures[-1]
    fig.canvas.draw()
    panels = _panels(fig)
    for ax in panels.values():  # tick labels under every panel, at whole rounds
        ticks = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
        assert ticks and all(float(t.get_text()) == int(float(t.get_text())) for t in ticks)
    legend = {
        t.get_text(): h.get_color()
        for t, h in zip(fig.legends[0].get_texts(), fig.legends[0].legend_handles, strict=True)
    }
    # a panel drawn only for "all" uses the colour of "all", not of the first group
    (step,) = panels["θ step ‖θ₊ − θ‖"].lines
    assert step.get_color() == legend["all"] != legend["N1"]


def test_panels_option_selects_panels_by_name(real_runs, figures, tmp_path, capsys):
    run, out = str(real_runs["school"]), str(tmp_path / "s.png")
    assert main(["plot", run, "--out", out, "--panels", "theta_step,query_success_next"]) == 0
    assert list(_panels(figures[-1])) == ["θ step ‖θ₊ − θ‖", "query group's success, next model"]
    capsys.readouterr()
    assert main(["plot", run, "--out", out, "--panels", "acceptance_rate,bogus"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: unknown panel 'bogus'"), err
    assert "query_success_next" in err and "theta_step" in err  # the valid names


def test_always_zero_panels_are_dropped(tmp_path, figures):
    m = _metrics()
    m["collective_participants"] = 0.0  # a run without a collective
    m["theta_step"] = np.where(m["group"] == "all", 0.0, np.nan)  # a frozen model
    plot_dynamics(m, tmp_path / "a.png")
    panels = _panels(figures[-1])
    assert "collective participants" not in panels and "θ step ‖θ₊ − θ‖" not in panels
    assert "model shift ‖θ − θ₀‖" in panels  # no convergence panel: the shift instead


# --------------------------------------------------------------------- legends that fit


def _inside(fig, artist) -> bool:
    renderer = fig.canvas.get_renderer()
    box, frame = artist.get_window_extent(renderer), fig.bbox
    return (
        box.x0 >= frame.x0 - 0.5
        and box.y0 >= frame.y0 - 0.5
        and box.x1 <= frame.x1 + 0.5
        and box.y1 <= frame.y1 + 0.5
    )


@pytest.mark.parametrize(
    ("other", "expected"),
    [
        ("no_collective", ["h1_students=collective_oar", "h1_students=none"]),
        (
            "pile",
            ["extracurriculars=unset, margin=lognormal", "extracurriculars=continuous, margin=0"],
        ),
    ],
)
def test_the_readme_comparisons_have_legends_that_fit(
    real_runs, figures, tmp_path, other, expected
):
    """The README's comparisons (school with and without its collective; the pile-up
    settings) are named by what differs, briefly, in a legend inside the figure."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no layout warning either)
        plot_runs([real_runs["school"], real_runs[other]], tmp_path / "o.png")
    fig = figures[-1]
    fig.canvas.draw()
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == expected
    assert _inside(fig, legend)


def test_long_labels_become_a_key_table_below_the_figure(tmp_path, figures):
    """Runs that differ in many settings: numbered in the legend, their settings in a
    table below the panels; both inside the figure."""
    settings = [
        ("0.1", "lognormal", "pgd", "refit"),
        ("0.5", "constant", "wachter", "window"),
    ]
    runs = []
    for i, (alpha, margin, method, rule) in enumerate(settings):
        folder = tmp_path / f"r{i}"
        folder.mkdir()
        _metrics(0.1 * i).to_csv(folder / "metrics.csv", index=False)
        (folder / "scenario.yaml").write_text(
            f"name: toy\nlearner: {{update_rule: {rule}, params: {{C: {i + 1}}}}}\n"
            f"populations:\n  students:\n    participation: {alpha}\n    method: {method}\n"
            f"    margin: {{kind: {margin}, median: 0.0{i + 1}}}\n"
        )
        runs.append(folder)
    plot_runs(runs, tmp_path / "o.png")
    fig = figures[-1]
    fig.canvas.draw()
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["run 1", "run 2"]
    assert _inside(fig, legend)
    (table,) = [t for ax in fig.axes for t in ax.tables]
    assert _inside(fig, table)
    cells = {(r, c): cell.get_text().get_text() for (r, c), cell in table.get_celld().items()}
    assert [cells[0, c] for c in range(7)] == [
        "run",
        "learner.update_rule",
        "learner.params.C",
        "populations.students.participation",
        "populations.students.method",
        "populations.students.margin.kind",
        "populations.students.margin.median",
    ]
    assert [cells[2, c] for c in range(7)] == [
        "run 2",
        "window",
        "2",
        "0.5",
        "wachter",
        "constant",
        "0.02",
    ]
    labels, shared = run_labels(runs)
    assert shared == "toy" and labels[0].startswith("update_rule=refit, params.C=1")


def test_a_block_one_run_lacks_is_one_setting(tmp_path):
    """Removing a population is one difference, not one per field of it."""
    for name, body in (
        ("a", "  coll:\n    strategy: collective_oar\n    epsilon: 1.0\n"),
        ("b", ""),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "scenario.yaml").write_text(
            f"name: toy\npopulations:\n  students: {{strategy: individual}}\n{body}"
        )
    labels, _ = run_labels([tmp_path / "a", tmp_path / "b"])
    assert labels == ["coll=collective_oar", "coll=none"]


def test_rate_bands_stay_within_zero_and_one(tmp_path, figures, capsys):
    frames = []
    for seed in range(3):  # success 0, 0, 0.3: the t band would reach below 0
        m = _metrics()
        m["recourse_success_rate"] = 0.3 if seed == 2 else 0.0
        frames.append(m.assign(seed=seed)[["seed", *m.columns]])
    sweep = tmp_path / "sw"
    sweep.mkdir()
    pd.concat(frames).to_csv(sweep / "sweep.csv", index=False)
    assert main(["plot", str(sweep)]) == 0
    (band,) = _panels(figures[-1])["recourse success rate"].collections
    low = min(path.vertices[:, 1].min() for path in band.get_paths())
    assert low >= 0.0


def test_plot_help_prints_percent_signs_once(capsys):
    assert main(["plot", "--help"]) == 0
    out = capsys.readouterr().out
    assert "95 %" in out and "%%" not in out


# ----------------------------------------------------------------- hostile input cases


def test_infinite_values_are_left_out_with_a_warning(tmp_path, figures, capsys):
    run = tmp_path / "run"
    run.mkdir()
    m = _metrics()
    m.loc[m["round"] == 2, "model_shift"] = np.inf
    m.loc[m["round"] == 3, "mean_cost"] = -np.inf
    m.loc[m["round"] == 4, "mean_cost"] = 1.7e308  # finite, but overflows an axis
    m.to_csv(run / "metrics.csv", index=False)
    with pytest.warns(UserWarning, match="infinite values") as caught:
        assert main(["plot", str(run)]) == 0
    (warning,) = caught
    assert "metrics.csv" in str(warning.message)
    assert "model_shift: 4" in str(warning.message) and "mean_cost: 8" in str(warning.message)
    for ax in _panels(figures[-1]).values():
        for line in ax.lines:
            assert not np.isinf(line.get_ydata()).any()
    shift = _panels(figures[-1])["model shift ‖θ − θ₀‖"].lines[0].get_ydata()
    assert np.isnan(shift[1]) and shift[2] == pytest.approx(0.3)  # the finite ones drawn


def test_a_label_starting_with_an_underscore_stays_in_the_legend(tmp_path, figures, capsys):
    _run(tmp_path / "a", 0.0, 0)
    _run(tmp_path / "b", 0.2, 1)
    out = str(tmp_path / "o.png")
    argv = ["plot", str(tmp_path / "a"), str(tmp_path / "b"), "--out", out]
    assert main([*argv, "--label", "_hidden", "--label", "$5 cap"]) == 0
    assert [t.get_text() for t in figures[-1].legends[0].get_texts()] == ["_hidden", "$5 cap"]


@pytest.mark.parametrize("kind", ["fifo", "character device"])
def test_plot_out_refuses_a_fifo_or_a_device(tmp_path, capsys, kind):
    _run(tmp_path / "a", 0.0, 0)
    target = tmp_path / "target"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        try:  # /dev/null's numbers, made here (never the real one)
            os.mknod(target, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("creating a device needs privileges")
    before = os.lstat(target)
    assert main(["plot", str(tmp_path / "a"), "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and str(target) in err, err
    assert ("a FIFO" if kind == "fifo" else "a character device") in err
    after = os.lstat(target)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)  # untouched


def test_the_plots_page_names_every_panel():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "plots.md").read_text("utf-8")
    assert [p.column for p in PANELS if f"`{p.column}`" not in page] == []


@pytest.mark.parametrize(("column", "value"), [("n_seekers", "x"), ("round", "1e308")])
def test_text_or_an_impossible_round_is_one_error_line(tmp_path, capsys, column, value):
    run = tmp_path / "run"
    run.mkdir()
    m = _metrics().astype({column: object})
    m.loc[m["round"] == 2, column] = value
    m.to_csv(run / "metrics.csv", index=False)
    assert main(["plot", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and f"column {column}" in err, err


def test_causal_validity_comes_from_people_csv_where_metrics_lack_it(tmp_path, figures):
    """An older causal run (metrics.csv without the rates): people.csv's flags, averaged
    per round and group, and over everyone for ``all``."""
    run = tmp_path / "run"
    run.mkdir()
    _metrics().to_csv(run / "metrics.csv", index=False)
    people = pd.DataFrame(
        {
            "round": [1, 1, 1, 2, 2, 2],
            "person": [0, 1, 2, 0, 1, 2],
            "group": ["A", "A", "B", "A", "A", "B"],
            "improved": ["True", "False", "", "True", "True", "False"],
        }
    )
    people.to_csv(run / "people.csv", index=False)
    plot_dynamics(run, tmp_path / "a.png")
    ax = _panels(figures[-1])["seekers whose true outcome improved"]
    lines = {line.get_label(): line.get_ydata() for line in ax.lines}
    assert list(lines["A"][:2]) == [0.5, 1.0]
    assert np.isnan(lines["B"][0]) and lines["B"][1] == 0.0
    assert list(lines["all"][:2]) == [0.5, pytest.approx(2 / 3)]
