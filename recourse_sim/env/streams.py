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

Because no stream feeds another, two runs with one seed that differ only in
strategies, budgets, decision rule or learner settings draw the same world: the same
history and the same newcomers in every round whatever happens, and the same people
in every round as long as their decisions agree (in a world where people stay, who
stays depends on the decisions). Removing or adding a population leaves the other
streams untouched (a stream is found by its name, not by its position).

Derivation, exactly (a batched environment reproduces it per sub-environment): at
reset, one call ``np_random.integers(0, 2**32, size=4)`` gives four 32-bit words w;
stream ``name`` is ``Generator(PCG64(SeedSequence(w, spawn_key=tuple(name.encode()))))``.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["DECISION", "LEARNER", "WORLD", "derive_streams", "population_stream", "stream"]

WORLD = "world"
LEARNER = "learner"
DECISION = "decision"

ENTROPY_WORDS = 4
"""32-bit words of entropy drawn from ``np_random`` at reset (128 bits)."""


def population_stream(population: str) -> str:
    """The stream name of a scenario population."""
    return f"population/{population}"


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
