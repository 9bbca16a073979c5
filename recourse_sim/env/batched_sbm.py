"""The batched env's social graphs: a collective's recruitment over stochastic block
models in B worlds at once, every world's graph one disjoint union, with the numbers
of each world's own stream exactly as the single environment draws them (numpy's
bounded integers reproduced from raw bits: Lemire's method with its uint32 buffer)."""

from __future__ import annotations

import numpy as np

from recourse_sim.agents.social import SocialGraph, block_pairs, cascade, stochastic_block_model

__all__ = ["recruit_sbm"]

_SHIFT32 = np.uint64(32)


def recruit_sbm(
    s,
    eligible: np.ndarray,
    group: np.ndarray,
    group_labels: tuple[str, ...],
    rngs: list[np.random.Generator],
    pending: list[int | None],
    plans: dict[tuple[int, ...], list],
    alpha: np.ndarray | None = None,
) -> np.ndarray:
    """Who of each world's eligible (B, n) takes part in population `s`'s collective
    over stochastic block models (`reach`: the graph, organisers, the cascade; then α),
    exactly as `RecourseEnv` draws them world by world, every world's graph one
    disjoint union. `rngs`: each world's population stream; `pending`: each one's
    buffered uint32 (updated); `plans`: block pairs by block sizes (a cache, updated);
    `alpha` (B,): each world's α (None: the population's)."""
    B, n = eligible.shape
    spec, G = s.spec.graph, len(group_labels)
    member = np.flatnonzero(eligible)  # the members: world by world, in row order
    world_of = member // n
    members = np.count_nonzero(eligible, axis=1)
    node_start = np.zeros(B + 1, np.int64)
    np.cumsum(members, out=node_start[1:])
    total_nodes = int(node_start[-1])
    block = np.take(group, member)
    world_block = world_of * G + block
    block_size = np.bincount(world_block, minlength=B * G).reshape(B, G)
    # each (world, block)'s members in node order: the SBM's `members[i]` (small keys
    # sort stably by radix)
    by_block = np.argsort(world_block.astype(np.min_scalar_type(B * G)), kind="stable")
    if total_nodes**2 < 2**31:  # the graph's node numbers as `SocialGraph.from_arcs` keys them
        by_block = by_block.astype(np.int32)
    block_start = (block_size.cumsum() - block_size.ravel()).reshape(B, G)
    sizes_list = list(map(tuple, block_size.tolist()))

    # the graphs' draws, world by world: a binomial edge count per block pair, then
    # its two ends' bounded integers, taken as raw uint64s (mapped below, at once)
    raws: list[np.ndarray] = []
    pair_m: list[int] = []  # per block pair: its edge count, world, each end's group
    pair_world, pair_i, pair_j = [], [], []
    # the words' stream (`_stream_words`): each world's halves of its raws, with its
    # buffered word from before inserted ahead and the one it leaves dropped
    kept, insert_at, insert_word, drop, leaves = 0, [], [], [], []
    snapshots: dict[int, tuple[dict, int | None]] = {}
    if len(plans) > 100_000:  # (sizes up to n² / 4 pairs: bounded, but not small)
        plans.clear()
    for b in np.flatnonzero(members).tolist():
        sizes = sizes_list[b]
        plan = plans.get(sizes)
        if plan is None:
            plan = plans[sizes] = _sbm_plan(sizes, spec.mean_degree, spec.homophily)
        draws, ends_i, ends_j = plan
        rng = rngs[b]
        # where to start again if a bounded draw is rejected (about 1e-5 a round)
        snapshots[b] = (rng.bit_generator.state, pending[b])
        halves, used, buffered = _sbm_draws(rng, draws, pending[b] is not None, raws, pair_m)
        pair_world += [b] * len(draws)
        pair_i += ends_i
        pair_j += ends_j
        if used:
            insert_at.append(kept)
            insert_word.append(pending[b])
        if buffered and halves:  # the last half drawn waits for the next round
            drop.append(len(drop) + kept + halves - 1)  # (its place among all halves)
            leaves.append(b)
            kept += halves - 1
        else:
            kept += halves
            if not buffered:
                pending[b] = None
    tail = head = np.zeros(0, np.int64)
    redo: list[int] = []
    if pair_m:
        m = np.array(pair_m)
        ends = np.repeat(m, 2)  # each pair's first ends, then its second ends
        pair_ends = np.column_stack([pair_world, pair_i, pair_world, pair_j])
        end_high = block_size[pair_ends[:, 0::2], pair_ends[:, 1::2]].reshape(-1)
        end_high = end_high.astype(np.uint64)
        high = np.repeat(end_high, ends)
        w, left = _stream_words(raws, insert_at, insert_word, drop)
        for b, word in zip(leaves, left, strict=True):
            pending[b] = word
        if len(w) < len(high):  # a bound of 1 draws nothing: its ends take word 0
            w_all = np.zeros(len(high), np.uint32)
            w_all[high > 1] = w
            w = w_all
        product = w * high  # (uint64)
        # a draw can be rejected only below the largest threshold; where one is, the
        # exact test (per block pair's end, then per draw: modulo is slow)
        threshold = _lemire_threshold(end_high)
        rejected = _lemire_rejects(product, int(threshold.max()))
        if rejected.any():
            rejected &= _lemire_rejects(product, np.repeat(threshold, ends))
        index = (product >> _SHIFT32).view(np.int64)
        first = block_start[pair_ends[:, 0::2], pair_ends[:, 1::2]].reshape(-1)
        index += np.repeat(first, ends)
        tail = by_block[index]
        # the other end of each end's edge: m places on in its pair's second half,
        # m places back in its first
        np.add(np.arange(len(index)), np.repeat(np.column_stack([m, -m]).ravel(), ends), out=index)
        head = tail[index]
        if rejected.any():
            end_world = np.repeat(np.repeat(pair_world, 2), ends)
            redo = np.unique(end_world[rejected]).tolist()
            keep = ~np.isin(end_world, redo)
            tail, head = tail[keep], head[keep]
    for b in redo:  # numpy's own draws from where this world's graph began
        bits, before = snapshots[b]
        rngs[b].bit_generator.state = {
            **bits,
            "has_uint32": int(before is not None),
            "uinteger": before or 0,
        }
        lo, hi = node_start[b], node_start[b + 1]
        graph_b = stochastic_block_model(block[lo:hi], spec.mean_degree, spec.homophily, rngs[b])
        rows = np.repeat(np.arange(graph_b.n), graph_b.degree())
        tail = np.concatenate([tail, lo + rows])
        head = np.concatenate([head, lo + graph_b.indices])
        after = rngs[b].bit_generator.state
        pending[b] = after["uinteger"] if after["has_uint32"] else None
    graph = SocialGraph.from_arcs(total_nodes, tail, head)

    # the round's remaining draws of this stream are doubles: organisers, one per
    # member; at most one per edge end in the waves (a node is a frontier once);
    # participation, one per training row. One call of that bound per world, the
    # unused rest handed back.
    bound = members + np.diff(graph.indptr[node_start]) + n
    start = np.zeros(B + 1, np.int64)
    np.cumsum(bound, out=start[1:])
    uniforms = np.empty(int(start[-1]))
    at = start.tolist()
    for rng, lo, hi in zip(rngs, at[:-1], at[1:], strict=True):  # (straight into place)
        rng.random(out=uniforms[lo:hi])
    start = start[:-1]
    # member i of world w: uniforms[start[w] + i - node_start[w]]
    first_uniform = np.repeat(start - node_start[:-1], members)
    first_uniform += np.arange(total_nodes)
    seeds = uniforms[first_uniform] < spec.seed_fraction
    if spec.seed_groups is not None:  # the organisers
        codes = [group_labels.index(g) for g in spec.seed_groups]
        seeds &= np.isin(block, codes)
    passes = uniforms < spec.spread
    upcoming = start + members  # each world's next uniform for the waves

    def wave_passes(frontier: np.ndarray, ends: np.ndarray) -> np.ndarray:
        # a wave's edges come world by world; world w's take its next numbers
        first_edge = ends[frontier.searchsorted(node_start)]
        per_world = first_edge[1:] - first_edge[:-1]
        at = (upcoming - first_edge[:-1]).repeat(per_world)
        at += np.arange(int(ends[-1]))
        upcoming[:] += per_world
        return passes[at]

    heard_nodes = cascade(graph, seeds, wave_passes)
    heard = np.zeros((B, n), bool)
    heard.reshape(-1)[member] = heard_nodes
    participation = uniforms[upcoming[:, None] + np.arange(n)]
    used = upcoming - start + n
    for b in np.flatnonzero(used < bound).tolist():
        rngs[b].bit_generator.advance(int(used[b] - bound[b]))
    if alpha is None:
        return heard & (participation < s.spec.participation)
    return heard & (participation < alpha[:, None])


def _lemire_threshold(high: np.ndarray) -> np.ndarray:
    """Lemire's rejection threshold of bounds `high` (uint64, ≥ 1): 2^32 mod high."""
    return (np.uint64(2**32) - high) % high


def _lemire_rejects(product: np.ndarray, threshold: np.ndarray | int) -> np.ndarray:
    """Where Lemire's bounded-integer method draws again: the product of a uint32 word and
    the bound has its lower word below the bound's `_lemire_threshold` (about bound / 2^32
    of draws)."""
    return product.view(np.uint32)[::2] < threshold  # (lower words first, as random_raw's)


def _sbm_plan(
    sizes: tuple[int, ...], mean_degree: float, homophily: float
) -> tuple[list[tuple[int, float, int]], list[int], list[int]]:
    """`block_pairs` over one world's block sizes (one per group, zeros included), as
    `_sbm_draws` takes them: per pair (node pairs, edge probability, how many of its two
    ends draw a bounded integer: a block of one draws nothing), then each pair's groups."""
    labels = [g for g, size in enumerate(sizes) if size]
    plan = block_pairs([sizes[g] for g in labels], mean_degree, homophily)
    draws = [(pairs, p, (sizes[labels[i]] > 1) + (sizes[labels[j]] > 1)) for i, j, pairs, p in plan]
    return draws, [labels[i] for i, *_ in plan], [labels[j] for _, j, *_ in plan]


def _sbm_draws(
    rng: np.random.Generator,
    draws: list[tuple[int, float, int]],
    buffered: bool,
    raws: list[np.ndarray],
    edges: list[int],
) -> tuple[int, bool, bool]:
    """One world's `stochastic_block_model` draws, in numpy's order: per block pair of
    `_sbm_plan` a binomial edge count (appended to `edges`), then its ends' bounded
    integers as uint32 words. PCG64 hands out each uint64 as its lower, then its upper
    half, keeping the upper one buffered for the next 32-bit draw (doubles do not touch
    it): the words are the buffered one (if `buffered`) then the halves of the raw
    uint64s appended to `raws`. Returns how many halves were drawn, whether the buffered
    word was used, and whether one is buffered after."""
    binomial, random_raw = rng.binomial, rng.bit_generator.random_raw
    halves, used = 0, False
    for pairs, p, ends in draws:
        m = binomial(pairs, p)
        edges.append(m)
        k = m * ends
        if k:
            if buffered:
                used |= not halves
                k -= 1
            if k:
                raws.append(random_raw((k + 1) // 2))
                halves += k + k % 2
            buffered = k % 2 == 1
    return halves, used, buffered


def _stream_words(
    raws: list[np.ndarray], insert_at: list[int], insert_word: list[int], drop: list[int]
) -> tuple[np.ndarray, list[int]]:
    """The uint32 words of several worlds' `_sbm_draws`: the halves of `raws` (lower
    first) without those at `drop` (each world's last, where it stays buffered: returned
    too), with each world's buffered word from before inserted at `insert_at`."""
    halves = np.concatenate(raws).view(np.uint32) if raws else np.zeros(0, np.uint32)
    left = halves[drop].tolist()
    if drop:
        keep = np.ones(len(halves), bool)
        keep[drop] = False
        halves = halves[keep]
    if insert_at:
        halves = np.insert(halves, insert_at, np.array(insert_word, np.uint32))
    return halves, left
