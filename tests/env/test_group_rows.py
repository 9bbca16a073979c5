"""metrics.csv has one row per (round, group): the query group's row is written once, and
a data group may not take the name of a summary row (``all``, ``query``)."""

from pathlib import Path

import numpy as np
import pytest

from recourse_sim import load_scenario, simulate
from recourse_sim.env.construction import metric_row_labels
from recourse_sim.errors import ConfigError
from recourse_sim.scenarios import QuerySpec, list_scenarios

RUNNABLE = list_scenarios()
# a short run of a capacity world says its seekers pile up at the cut-off: not the point here
pytestmark = pytest.mark.filterwarnings("ignore:.*most seekers ended on the round's cut-off")
BAD_INPUTS = Path(__file__).parents[1] / "bad_inputs"
HEAVY = {
    "csv_example",
    "oar_digits",
    "oar_iris",
    "lending_adult",
    "lending_german",
    "lending_german_genre",
    "lending_german_pare",
}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in RUNNABLE],
)
def test_no_duplicate_round_and_group(name):
    metrics = simulate(load_scenario(name), rounds=2, seed=0)
    assert not metrics.duplicated(["round", "group"]).any()
    assert {"query", "all"} <= set(metrics["group"])


def test_gaussian_query_row_once_and_equal_to_the_group():
    metrics = simulate(load_scenario("recourse_over_time"), rounds=3, seed=0)
    assert list(metrics[metrics["round"] == 1]["group"]) == ["data", "query", "all"]
    query = metrics[metrics["group"] == "query"]
    everyone = metrics[metrics["group"] == "all"].set_index("round")["n"]
    data = metrics[metrics["group"] == "data"].set_index("round")["n"]
    np.testing.assert_array_equal(data + query.set_index("round")["n"], everyone)


def test_a_query_group_that_is_not_the_worlds_keeps_the_worlds_row_apart():
    labels = ("data", "query")
    assert metric_row_labels(labels, QuerySpec(world=True)) == (labels, 1)
    assert metric_row_labels(labels, QuerySpec(groups=["query"])) == (labels, 1)
    for other in (QuerySpec(), QuerySpec(world=True, labels=[1]), QuerySpec(groups=["data"])):
        assert metric_row_labels(labels, other) == (("data", "query_group"), None)
    assert metric_row_labels(("N1", "N2"), QuerySpec(world=True)) == (("N1", "N2"), None)
    metrics = simulate(
        load_scenario("signal_planting", ["query.world=false", "query.groups=[data]"]),
        rounds=1,
        seed=0,
    )
    assert list(metrics["group"]) == ["data", "query_group", "query", "all"]


@pytest.mark.parametrize("reserved", ["all", "query"])
def test_a_csv_group_named_like_a_summary_row_is_refused(reserved):
    # the bad-input corpus's cases (its test also checks the CLI's one error line)
    path = BAD_INPUTS / f"csv_group_named_{reserved}.yaml"
    with pytest.raises(ConfigError, match=f"column 'grp': group '{reserved}' is a name"):
        simulate(load_scenario(path), rounds=1)
