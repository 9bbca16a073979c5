"""Social graphs: the block model, the cascade and recruitment."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from recourse_sim.agents.social import (
    SocialGraph,
    independent_cascade,
    reach,
    recruit,
    stochastic_block_model,
)
from recourse_sim.errors import ConfigError
from recourse_sim.scenarios import SocialGraphSpec


def _blocks(n: int = 4000) -> np.ndarray:
    return np.repeat([0, 1], n // 2)


@pytest.mark.parametrize("homophily", [0.5, 0.9])
def test_sbm_has_the_declared_degree_and_homophily(homophily):
    block = _blocks()
    g = stochastic_block_model(
        block, mean_degree=8, homophily=homophily, rng=np.random.default_rng(0)
    )
    assert g.degree().mean() == pytest.approx(8, rel=0.05)
    rows = np.repeat(np.arange(g.n), g.degree())
    within = (block[rows] == block[g.indices]).mean()
    assert within == pytest.approx(homophily, abs=0.02)


def test_sbm_is_seeded_and_simple():
    block = _blocks(500)
    a = stochastic_block_model(block, 6, 0.8, np.random.default_rng(1))
    b = stochastic_block_model(block, 6, 0.8, np.random.default_rng(1))
    assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
    nxg = a.to_networkx()
    assert nx.number_of_selfloops(nxg) == 0 and nxg.number_of_edges() == a.n_edges


def test_from_edges_is_the_sorted_simple_adjacency():
    """CSR rows list each node's distinct neighbours in increasing order, checked against
    sets built edge by edge; self-loops and repeated or reversed edges collapse."""
    rng = np.random.default_rng(3)
    n = 60
    a, b = rng.integers(n, size=400), rng.integers(n, size=400)
    g = SocialGraph.from_edges(n, a, b)
    expected = [set() for _ in range(n)]
    for u, v in zip(a.tolist(), b.tolist(), strict=True):
        if u != v:
            expected[u].add(v)
            expected[v].add(u)
    for node in range(n):
        row = g.indices[g.indptr[node] : g.indptr[node + 1]]
        assert row.tolist() == sorted(expected[node])
    empty = SocialGraph.from_edges(3, np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert empty.indptr.tolist() == [0, 0, 0, 0] and empty.indices.size == 0


def test_networkx_round_trip():
    g = nx.karate_club_graph()
    ours = SocialGraph.from_networkx(g)
    assert ours.n == g.number_of_nodes() and ours.n_edges == g.number_of_edges()
    assert nx.utils.graphs_equal(ours.to_networkx(), nx.Graph(g.edges()))


def test_cascade_without_spread_reaches_only_the_seeds():
    g = SocialGraph.from_networkx(nx.path_graph(10))
    seeds = np.zeros(10, bool)
    seeds[3] = True
    assert np.array_equal(independent_cascade(g, seeds, 0.0, np.random.default_rng(0)), seeds)


def test_cascade_with_certain_spread_reaches_the_component():
    g = SocialGraph.from_networkx(nx.disjoint_union(nx.path_graph(5), nx.path_graph(4)))
    seeds = np.zeros(9, bool)
    seeds[2] = True
    reached = independent_cascade(g, seeds, 1.0, np.random.default_rng(0))
    assert reached.tolist() == [True] * 5 + [False] * 4


def test_cascade_matches_its_expected_reach_on_a_star():
    # A star: the centre seeded, each leaf hears with probability `spread`.
    g = SocialGraph.from_networkx(nx.star_graph(2000))
    seeds = np.zeros(2001, bool)
    seeds[0] = True
    reached = independent_cascade(g, seeds, 0.3, np.random.default_rng(0))
    assert reached[1:].mean() == pytest.approx(0.3, abs=0.03)


def test_complete_graph_reaches_every_eligible_person():
    eligible = np.array([True, False, True, True])
    spec = SocialGraphSpec(kind="complete")
    out = reach(spec, eligible, np.zeros(4, int), (), np.random.default_rng(0))
    assert np.array_equal(out, eligible)


def test_recruit_applies_participation():
    eligible = np.ones(10000, bool)
    spec = SocialGraphSpec(kind="complete")
    rng = np.random.default_rng(0)
    assert not recruit(spec, 0.0, eligible, np.zeros(10000, int), (), rng).any()
    joined = recruit(spec, 0.3, eligible, np.zeros(10000, int), (), rng)
    assert joined.mean() == pytest.approx(0.3, abs=0.02)


def test_homophily_keeps_a_plan_in_its_group():
    group = _blocks(4000)
    eligible = np.ones(4000, bool)
    spec = SocialGraphSpec(
        kind="sbm", mean_degree=6, homophily=1.0, seed_fraction=0.01, seed_groups=["B"], spread=0.5
    )
    heard = reach(spec, eligible, group, ("A", "B"), np.random.default_rng(0))
    assert heard[group == 1].mean() > 0.5 and not heard[group == 0].any()


def test_networkx_generator_kind():
    spec = SocialGraphSpec(
        kind="networkx", generator="watts_strogatz_graph", params={"k": 4, "p": 0.1}, spread=1.0
    )
    heard = reach(spec, np.ones(300, bool), np.zeros(300, int), (), np.random.default_rng(0))
    assert heard.all()  # a connected small world, certain spread, at least one seed (5% of 300)


def test_bad_networkx_generator():
    spec = SocialGraphSpec(kind="networkx", generator="no_such_graph")
    with pytest.raises(ConfigError, match="no_such_graph"):
        reach(spec, np.ones(10, bool), np.zeros(10, int), (), np.random.default_rng(0))


def _cascade_by_unique(graph, seeds, spread, rng):
    """The cascade written plainly: each wave's reached nodes by np.unique."""
    active = seeds.copy()
    frontier = np.flatnonzero(active)
    while frontier.size:
        starts = graph.indptr[frontier]
        counts = graph.indptr[frontier + 1] - starts
        total = int(counts.sum())
        if total == 0:
            break
        offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(total)
        told = np.unique(graph.indices[offsets][rng.random(total) < spread])
        frontier = told[~active[told]]
        active[frontier] = True
    return active


@pytest.mark.parametrize("n", [2, 30, 2000])
@pytest.mark.parametrize("spread", [0.0, 0.3, 1.0])
def test_cascade_draws_and_reaches_as_the_plain_one(n, spread):
    graph = stochastic_block_model(_blocks(n), 8, 0.7, np.random.default_rng(n))
    seeds = np.random.default_rng(1).random(n) < 0.05
    fast_rng, plain_rng = np.random.default_rng(2), np.random.default_rng(2)
    fast = independent_cascade(graph, seeds, spread, fast_rng)
    plain = _cascade_by_unique(graph, seeds, spread, plain_rng)
    np.testing.assert_array_equal(fast, plain)
    assert fast_rng.random() == plain_rng.random()  # the same draws were made


@pytest.mark.parametrize("n", [1, 7, 3000])
def test_from_edges_rows_and_columns_are_the_keys_divmod(n):
    rng = np.random.default_rng(n)
    a, b = rng.integers(n, size=5 * n), rng.integers(n, size=5 * n)
    g = SocialGraph.from_edges(n, a, b)
    keep = a != b
    key = np.unique(np.concatenate([a[keep] * n + b[keep], b[keep] * n + a[keep]]))
    np.testing.assert_array_equal(g.indices, key % n)
    np.testing.assert_array_equal(np.repeat(np.arange(n), g.degree()), key // n)
    assert g.indptr.dtype == np.int64 and g.indices.dtype == np.int64
