"""Named random streams: common random numbers across runs that differ in strategies.

Every random number of an episode comes from one of a few independent generators,
each derived from the environment's one ``np_random`` (seeded by ``reset(seed=…)``):

``world``
    The people: the history the first model is fit on, every arrival (true features,
    group, outcome noise ``u``, effort quantile ``v``) and, in worlds whose outcomes are
    new events each round (FICO loans), that round's outcome noise.
``learner``
    The seed of the learner's own randomness (initialisation, minibatches).
``decision``
    The decision rule's own draws (PARE's fresh calibration applicants).
``population/<name>``
    One per scenario population: who of the eligible acts (participation α), how they
    adapt, its social graph and who hears a plan, GenRe's fit and sampling seeds.
``margin/<name>``
    A population whose ``margin`` is drawn per person: the key of each person's margin
    quantile (see keyed numbers below).
``ties``
    A capacity rule with ``ties: random``: the key of each person's lottery number.

Because no stream feeds another, two runs with one seed that differ only in
strategies, budgets, decision rule or learner settings draw the same world: the same
history and the same newcomers in every round whatever happens, and the same people
in every round as long as their decisions agree (in a world where people stay, who
stays depends on the decisions). Removing or adding a population leaves the other
streams untouched (a stream is found by its name, not by its position).

Keyed numbers. A number that belongs to a person (a margin kept for their whole stay,
a lottery number for one round) is not drawn in sequence, since who applies, and in
which order, depends on earlier decisions; it is a counter-based uniform
(`keyed_uniforms`): a hash of the stream's key (`stream_key`, its first 64-bit draw,
taken from a copy so the stream itself never moves) and the person's id (and round).
One person keeps one number whatever the others do, in every run of a seed.

Derivation, exactly (a batched environment reproduces it per sub-environment): at
reset, one call ``np_random.integers(0, 2**32, size=4)`` gives four 32-bit words w;
stream ``name`` is ``Generator(PCG64(SeedSequence(w, spawn_key=tuple(name.encode()))))``.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = [
    "DECISION",
    "LEARNER",
    "TIES",
    "WORLD",
    "derive_streams",
    "keyed_uniforms",
    "margin_stream",
    "population_stream",
    "stream",
    "stream_key",
]

WORLD = "world"
LEARNER = "learner"
DECISION = "decision"
TIES = "ties"

ENTROPY_WORDS = 4
"""32-bit words of entropy drawn from ``np_random`` at reset (128 bits)."""


def population_stream(population: str) -> str:
    """The stream name of a scenario population."""
    return f"population/{population}"


def margin_stream(population: str) -> str:
    """The stream name of a population's per-person margins."""
    return f"margin/{population}"


def stream(entropy: Iterable[int], name: str) -> np.random.Generator:
    """The generator of stream `name` under the reset's `entropy` words."""
    words = [int(w) for w in entropy]
    seed = np.random.SeedSequence(words, spawn_key=tuple(name.encode("utf-8")))
    return np.random.Generator(np.random.PCG64(seed))


def derive_streams(
    np_random: np.random.Generator, names: Iterable[str]
) -> dict[str, np.random.Generator]:
    """The streams `names`, derived from one draw of `np_random` (see the module docstring)."""
    entropy = np_random.integers(0, 2**32, size=ENTROPY_WORDS)
    return {name: stream(entropy, name) for name in names}


def stream_key(generator: np.random.Generator) -> int:
    """The key of a keyed stream: the first 64-bit draw of a copy of `generator` (the
    generator itself does not move, so a restored checkpoint gives the same key)."""
    copy = type(generator.bit_generator)()
    copy.state = generator.bit_generator.state
    return int(np.random.Generator(copy).integers(2**64, dtype=np.uint64))


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function (Steele, Lea & Flood 2014), element-wise on uint64
    arrays (arithmetic modulo 2^64)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def keyed_uniforms(key: int | np.ndarray, *counters: np.ndarray) -> np.ndarray:
    """Uniforms in [0, 1), one per element of the (equal-shaped) integer `counters`
    (e.g. person ids, rounds): a SplitMix64 hash of `key` (or keys broadcast against
    the counters, e.g. one per world of a batch) and the counters, its top 53 bits as a
    double. Equal keys and counters give equal numbers; vectorised, no state."""
    shape = np.shape(counters[0])
    z = np.broadcast_to(np.asarray(key, dtype=np.uint64), shape).copy()
    for c in counters:
        z = _splitmix64(z ^ _splitmix64(np.asarray(c).astype(np.int64).view(np.uint64)))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53
