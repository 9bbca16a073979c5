"""Social graphs: who hears a collective's plan.

A collective's plan spreads over a social graph among its eligible members: a few
*seed* members (the organisers) start with it and every member who hears it passes it
on to each contact independently with probability ``spread`` (the independent-cascade
model of Kempe, Kleinberg & Tardos, 2003). Of those reached, a share α takes part.

The default stochastic block model has one block per group and *homophily* h: about a
share h of each member's contacts are in its own group, so a plan organised in one
group can stay there. Graphs are sampled in numpy (block by block, vectorised) because
a fresh graph is drawn every round over up to tens of thousands of members; any
networkx generator can be used instead (``kind: networkx``), and `SocialGraph`
converts to and from `networkx.Graph` for analysis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from recourse_sim.errors import ConfigError
from recourse_sim.scenarios import SocialGraphSpec

if TYPE_CHECKING:  # networkx is imported where a graph is converted (it takes 0.3 s)
    import networkx as nx

__all__ = [
    "SocialGraph",
    "block_pairs",
    "cascade",
    "independent_cascade",
    "reach",
    "recruit",
    "stochastic_block_model",
]


@dataclass(frozen=True, eq=False)
class SocialGraph:
    """An undirected graph on nodes 0..n-1 as a symmetric CSR adjacency."""

    n: int
    indptr: np.ndarray  # (n + 1,) int64
    indices: np.ndarray  # (2 * edges,) int64 neighbours, grouped by node

    @classmethod
    def from_edges(cls, n: int, a: np.ndarray, b: np.ndarray) -> SocialGraph:
        """From the endpoints of undirected edges (self-loops and duplicates removed)."""
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        return cls.from_arcs(n, np.concatenate([a, b]), np.concatenate([b, a]))

    @classmethod
    def from_arcs(cls, n: int, tail: np.ndarray, head: np.ndarray) -> SocialGraph:
        """From arcs tail → head that hold every edge in both directions (self-loops and
        duplicates removed)."""
        kind = np.int32 if n * n < 2**31 else np.int64  # int32 keys: numpy sorts them faster
        tail = np.asarray(tail).astype(kind, copy=False)
        head = np.asarray(head).astype(kind, copy=False)
        # each arc as one key row * n + col: one sort orders the CSR by row then
        # neighbour, and equal arcs (duplicates) end up adjacent
        key = tail * kind(n)
        key += head
        key = key[tail != head]
        key.sort()
        first = np.ones(len(key), bool)
        np.not_equal(key[1:], key[:-1], out=first[1:])
        key = key[first]
        rows = key // kind(n)
        # key % n without a second integer division (slow in numpy)
        cols = np.subtract(key, rows * kind(n), dtype=np.int64)
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        return cls(n=n, indptr=indptr, indices=cols)

    @classmethod
    def from_networkx(cls, graph: nx.Graph) -> SocialGraph:
        """From a networkx graph whose nodes are 0..n-1."""
        n = graph.number_of_nodes()
        edges = np.array(list(graph.edges()), dtype=np.int64).reshape(-1, 2)
        return cls.from_edges(n, edges[:, 0], edges[:, 1])

    def to_networkx(self) -> nx.Graph:
        import networkx as nx

        g = nx.empty_graph(self.n)
        rows = np.repeat(np.arange(self.n), np.diff(self.indptr))
        upper = rows < self.indices
        g.add_edges_from(zip(rows[upper].tolist(), self.indices[upper].tolist(), strict=True))
        return g

    @property
    def n_edges(self) -> int:
        return len(self.indices) // 2

    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)


def stochastic_block_model(
    block: np.ndarray, mean_degree: float, homophily: float, rng: np.random.Generator
) -> SocialGraph:
    """A stochastic block model with one block per value of `block`.

    Within-block edge probability h·D/(n_b − 1) and between-block (1 − h)·D/(n − n_b)
    (averaged over the two blocks to be symmetric), so a member has about D contacts,
    a share h of them in its own block. Edges are drawn block pair by block pair:
    a binomial count, then uniform endpoints (the rare duplicate is dropped).
    """
    block = np.asarray(block)
    n = len(block)
    labels = np.unique(block)
    members = [np.flatnonzero(block == b) for b in labels]
    a_parts, b_parts = [], []
    for i, j, pairs, p in block_pairs([len(m) for m in members], mean_degree, homophily):
        m = rng.binomial(pairs, p)
        a_parts.append(members[i][rng.integers(len(members[i]), size=m)])
        b_parts.append(members[j][rng.integers(len(members[j]), size=m)])
    if not a_parts:
        return SocialGraph.from_edges(n, np.zeros(0, np.int64), np.zeros(0, np.int64))
    return SocialGraph.from_edges(n, np.concatenate(a_parts), np.concatenate(b_parts))


def block_pairs(
    block_sizes: list[int], mean_degree: float, homophily: float
) -> list[tuple[int, int, int, float]]:
    """The block pairs of `stochastic_block_model` that can have edges, in the order
    their edges are drawn: (block i, block j ≥ i, node pairs, edge probability), the
    probability capped at 1. With one block, every contact is within it (h = 1)."""
    sizes = [float(s) for s in block_sizes]  # Python floats: cheaper scalar arithmetic
    n = sum(sizes)
    h = homophily if len(sizes) > 1 else 1.0
    out = []
    for i in range(len(sizes)):
        for j in range(i, len(sizes)):
            if i == j:
                pairs = sizes[i] * (sizes[i] - 1) / 2
                p = h * mean_degree / max(sizes[i] - 1, 1)
            else:
                pairs = sizes[i] * sizes[j]
                p = (1 - h) * mean_degree * 0.5 * (1 / (n - sizes[i]) + 1 / (n - sizes[j]))
            if pairs <= 0 or p <= 0:
                continue
            out.append((i, j, int(pairs), min(p, 1.0)))
    return out


def independent_cascade(
    graph: SocialGraph, seeds: np.ndarray, spread: float, rng: np.random.Generator
) -> np.ndarray:
    """Nodes reached from the `seeds` mask when each newly reached node passes the plan to
    each neighbour once with probability `spread` (one vectorised wave per hop)."""
    return cascade(graph, seeds, lambda frontier, ends: rng.random(int(ends[-1])) < spread)


def cascade(graph: SocialGraph, seeds: np.ndarray, passes) -> np.ndarray:
    """`independent_cascade` with each wave's draws from `passes(frontier, ends)`: whether
    each edge out of the wave's frontier nodes (increasing; `ends`: the running count of
    their edges from 0, node by node) passes the plan on, neighbours in CSR order.
    A batched environment runs its worlds' graphs as one disjoint union and gives each
    world's block of edges its own stream's numbers."""
    inactive = ~np.asarray(seeds, bool)
    frontier = np.flatnonzero(~inactive)
    degree = graph.degree()
    # (array methods in the waves: numpy's function wrappers cost as much as the work)
    while frontier.size:
        counts = degree[frontier]
        ends = np.zeros(len(frontier) + 1, np.int64)
        counts.cumsum(out=ends[1:])
        total = int(ends[-1])
        if total == 0:
            break
        # positions of every frontier node's neighbour list, concatenated
        offsets = (graph.indptr[frontier] - ends[:-1]).repeat(counts)
        offsets += np.arange(total)
        # (compress: faster than a boolean index where the mask is a random one)
        told = graph.indices[offsets.compress(passes(frontier, ends))]
        # the newly reached in increasing order, by a mask over the nodes (cheaper than
        # sorting out the duplicates)
        reached = np.zeros(graph.n, bool)
        reached[told] = True
        reached &= inactive
        frontier = reached.nonzero()[0]
        inactive[frontier] = False
    return ~inactive


def _networkx_graph(spec: SocialGraphSpec, n: int, rng: np.random.Generator) -> SocialGraph:
    import networkx as nx

    generator = getattr(nx, spec.generator or "", None)
    if generator is None or not callable(generator):
        raise ConfigError(f"graph.generator: {spec.generator!r} is not a networkx generator")
    try:
        graph = generator(n, **spec.params, seed=int(rng.integers(2**31 - 1)))
    except (TypeError, ValueError, nx.NetworkXError) as exc:
        raise ConfigError(
            f"graph.params: networkx {spec.generator}(n={n}, **{spec.params!r}) failed: {exc}"
        ) from None
    return SocialGraph.from_networkx(nx.convert_node_labels_to_integers(graph))


def reach(
    spec: SocialGraphSpec,
    eligible: np.ndarray,
    group: np.ndarray,
    group_labels: tuple[str, ...],
    rng: np.random.Generator,
) -> np.ndarray:
    """Which eligible people hear the plan (a mask over everyone)."""
    eligible = np.asarray(eligible, bool)
    if spec.kind == "complete":
        return eligible.copy()
    members = np.flatnonzero(eligible)
    heard = np.zeros(len(eligible), bool)
    if members.size == 0:
        return heard
    if spec.kind == "sbm":
        graph = stochastic_block_model(group[members], spec.mean_degree, spec.homophily, rng)
    else:
        graph = _networkx_graph(spec, len(members), rng)
    organiser = np.ones(len(members), bool)
    if spec.seed_groups is not None:
        codes = [group_labels.index(g) for g in spec.seed_groups]
        organiser = np.isin(group[members], codes)
    seeds = organiser & (rng.random(len(members)) < spec.seed_fraction)
    heard[members] = independent_cascade(graph, seeds, spec.spread, rng)
    return heard


def recruit(
    spec: SocialGraphSpec,
    participation: float,
    eligible: np.ndarray,
    group: np.ndarray,
    group_labels: tuple[str, ...],
    rng: np.random.Generator,
) -> np.ndarray:
    """Who takes part: reached through the graph, then each with probability α."""
    heard = reach(spec, eligible, group, group_labels, rng)
    return heard & (rng.random(len(heard)) < participation)
