"""analyses/strategic_blobs.py: the best linear rule in hindsight and the exported people."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest


@pytest.fixture(scope="module")
def blobs(analysis_script):
    return analysis_script("strategic_blobs")


def test_best_linear_accuracy_on_a_line_equals_every_threshold_tried(blobs) -> None:
    # people on the x1 axis: the best direction, ±(1, 0), is on the grid, so the answer
    # is the best threshold rule, found here by trying every cut between two people
    rng = np.random.default_rng(3)
    x1 = np.concatenate([rng.normal(0, 1, 40), rng.normal(1.5, 1, 40)])
    y = np.repeat([0, 1], 40)
    X = np.column_stack([x1, np.zeros_like(x1)])
    cuts = np.concatenate([[-np.inf], np.sort(x1) + 1e-9])
    best = max(max(np.mean((x1 > c) == y), np.mean((x1 <= c) == y)) for c in cuts)
    assert blobs.best_linear_accuracy(X, y, grid=8) == pytest.approx(best, abs=1e-12)


def test_best_linear_accuracy_bounds_any_rule(blobs) -> None:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 2)) + np.repeat([[0.0, 0.0], [1.0, 0.5]], 100, axis=0)
    y = np.repeat([0, 1], 100)
    bound = blobs.best_linear_accuracy(X, y, grid=360)
    for _ in range(50):  # random rules g·x + b ≥ 0 never beat it
        g, b = rng.normal(size=2), rng.normal()
        assert np.mean((X @ g + b >= 0) == y) <= bound + 1e-12


def test_exported_people_are_the_scenarios(blobs, tmp_path: Path) -> None:
    path = tmp_path / "people.csv"
    blobs.export_people((0,), 2, path)
    people = pd.read_csv(path, dtype={"part": str})
    assert (people.part == "train").sum() == 5000
    first = people[people.part == "1"]
    assert len(first) == 1001 and set(people.part) == {"train", "1", "2"}
    # the strategic model's decisions give the run's acc_under_response
    rows, (X, y) = blobs.run(blobs.SCENARIOS[0], 0, 1, optimum=0.0)
    accuracy = np.mean(first.ours_favourable == first.y)
    assert accuracy == pytest.approx(rows[0]["acc_under_response"], abs=1e-12)
    np.testing.assert_array_equal(first[["x1", "x2"]].to_numpy(), X)
    np.testing.assert_array_equal(first.y.to_numpy(), y)
