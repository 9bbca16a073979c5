"""A small structural causal model, vectorised over people.

A causal model is a graph (a DAG over the world's features and its label) and one
causal mechanism per node, X_j = f_j(PA_j, N_j), as in DoWhy's ``gcm``. Every
mechanism here is built from a short, fixed vocabulary (nothing is evaluated from
text): a combination of the parents

    z = intercept + Σ_k coef_k · pa_k            (combine: sum)
    z = intercept + Π_k coef_k · pa_k            (combine: product)

a named link g (`LINKS`) and the way the noise N enters:

    X = g(z) + N      (noise: add)
    X = g(z) · N      (noise: multiply)
    X = g(z + N)      (noise: inside; g must be invertible)

The three operations are separate pieces:

* `StructuralCausalModel.sample`: people drawn afresh: their noise, then every node in
  topological order;
* `StructuralCausalModel.intervene`: do(X_I = θ) for each person, everything
  downstream recomputed from the person's own noise (a counterfactual when the noise
  is a person's abducted noise, the interventional distribution with fresh noise);
* `StructuralCausalModel.abduct`: the noise that explains a person's values (exact:
  every mechanism is invertible in its noise).

Values and noise are (n, k) arrays with one column per node, in the model's node
order (the order the scenario declares them).

Limits: a model has at most `MAX_NODES` nodes and its longest chain of causes at most
`MAX_DEPTH` nodes (checked when a scenario is loaded, before anything is drawn), and
every value a person is drawn with lies within ±`recourse_sim.budget.MAX_MAGNITUDE`
(`StructuralCausalModel.sample` names the first node beyond it).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from recourse_sim.budget import MAX_MAGNITUDE
from recourse_sim.errors import ConfigError
from recourse_sim.scenarios.world import MAX_DEPTH, MAX_NODES

__all__ = [
    "LINKS",
    "MAX_DEPTH",
    "MAX_NODES",
    "NOISE_DISTRIBUTIONS",
    "Mechanism",
    "Noise",
    "StructuralCausalModel",
]


def _cube_root(x: np.ndarray) -> np.ndarray:
    return np.cbrt(x)


def _logit(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(x) - np.log1p(-x)


# name -> (g, g⁻¹ or None); g⁻¹ is needed only where the noise enters inside g
LINKS: dict[str, tuple] = {
    "identity": (lambda z: z, lambda x: x),
    "square": (np.square, None),
    "cube": (lambda z: z**3, _cube_root),
    "tanh": (np.tanh, np.arctanh),
    "sigmoid": (lambda z: 1.0 / (1.0 + np.exp(-z)), _logit),
    "exp": (np.exp, np.log),
    "softplus": (lambda z: np.logaddexp(0.0, z), lambda x: x + np.log(-np.expm1(-x))),
}

NOISE_DISTRIBUTIONS = ("normal", "uniform", "laplace", "binomial")


@dataclass(frozen=True)
class Noise:
    """A node's exogenous noise: ``mean + scale · Z``.

    Z is standard normal, uniform on [-1, 1], standard Laplace, or a centred binomial
    ``B(trials, p) - trials·p`` (integer steps, as König et al.'s shifted binomials).
    """

    dist: str = "normal"
    scale: float = 1.0
    mean: float = 0.0
    trials: int = 1
    p: float = 0.5

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.dist == "normal":
            z = rng.standard_normal(n)
        elif self.dist == "uniform":
            z = rng.uniform(-1.0, 1.0, n)
        elif self.dist == "laplace":
            z = rng.laplace(0.0, 1.0, n)
        else:
            z = rng.binomial(self.trials, self.p, n) - self.trials * self.p
        return self.mean + self.scale * z


@dataclass(frozen=True)
class Mechanism:
    """One node's structural equation (see the module docstring)."""

    parents: tuple[int, ...]  # columns of the parents
    coef: np.ndarray  # (len(parents),)
    intercept: float
    combine: str  # "sum" | "product"
    link: str  # a key of LINKS
    noise_enters: str  # "add" | "multiply" | "inside"
    noise: Noise

    def _z(self, values: np.ndarray) -> np.ndarray:
        if not self.parents:
            return np.full(len(values), self.intercept)
        terms = values[:, list(self.parents)] * self.coef
        if self.combine == "product":
            return self.intercept + terms.prod(1)
        return self.intercept + terms.sum(1)

    def evaluate(self, values: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """The node's value given its parents' columns of `values` and its noise."""
        g = LINKS[self.link][0]
        z = self._z(values)
        if self.noise_enters == "inside":
            return g(z + noise)
        if self.noise_enters == "multiply":
            return g(z) * noise
        return g(z) + noise

    def abduct(self, values: np.ndarray, own: np.ndarray) -> np.ndarray:
        """The noise under which the node takes value `own` given its parents' values."""
        z = self._z(values)
        if self.noise_enters == "inside":
            return LINKS[self.link][1](own) - z
        gz = LINKS[self.link][0](z)
        if self.noise_enters == "multiply":
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(gz != 0, own / np.where(gz != 0, gz, 1.0), self.noise.mean)
        return own - gz


class StructuralCausalModel:
    """A DAG of mechanisms over named nodes (see the module docstring)."""

    def __init__(
        self,
        names: tuple[str, ...],
        mechanisms: tuple[Mechanism, ...],
        source: str | None = None,
    ):
        """`source`: the scenario file the model comes from (named in its errors)."""
        self.source = source
        self.names = tuple(names)
        self.mechanisms = tuple(mechanisms)
        self.order = _topological_order([m.parents for m in self.mechanisms])

    @property
    def graph(self) -> dict[str, tuple[str, ...]]:
        """Each node's parents, by name."""
        return {
            name: tuple(self.names[p] for p in m.parents)
            for name, m in zip(self.names, self.mechanisms, strict=True)
        }

    def descendants(self, node: int) -> np.ndarray:
        """Mask of the nodes downstream of `node` (itself excluded)."""
        below = np.zeros(len(self.names), bool)
        for j in self.order:
            below[j] = any(p == node or below[p] for p in self.mechanisms[j].parents)
        return below

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """n people: (values, noise), each (n, k); the noise is drawn node by node in
        node order, one block per node.

        Raises ConfigError naming the first node (in topological order) with a value
        beyond ±MAX_MAGNITUDE or not finite: its squares and sums would overflow in the
        learner and the metrics (e.g. ``exp(150·x)`` reaches 1e195 at x = 3)."""
        noise = np.column_stack([m.noise.draw(n, rng) for m in self.mechanisms])
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below
            values = self.intervene(noise)
        self._check_magnitudes(values)
        return values, noise

    def _check_magnitudes(self, values: np.ndarray) -> None:
        for j in self.order:
            column = values[:, j]
            bad = ~(np.abs(column) <= MAX_MAGNITUDE)  # NaN included
            if bad.any():
                finite = column[np.isfinite(column)]
                largest = f"{np.abs(finite).max():.3g}" if finite.size else "none"
                where = f"{self.source}: " if self.source else ""
                raise ConfigError(
                    f"{where}world.nodes.{self.names[j]}: its values overflow: {int(bad.sum()):,} "
                    f"of {len(column):,} people drawn are beyond ±{MAX_MAGNITUDE:g} or not "
                    f"finite (largest finite magnitude {largest}); scale its coef, "
                    "intercept or noise down"
                )

    def intervene(
        self,
        noise: np.ndarray,
        fixed: np.ndarray | None = None,
        values: np.ndarray | None = None,
    ) -> np.ndarray:
        """Every node's value for people with exogenous `noise` (n, k) under the
        interventions do(X_j = values[i, j]) wherever ``fixed[i, j]`` (per person);
        nodes not fixed follow their mechanisms, in topological order."""
        out = np.zeros(noise.shape)
        for j in self.order:
            own = self.mechanisms[j].evaluate(out, noise[:, j])
            out[:, j] = own if fixed is None else np.where(fixed[:, j], values[:, j], own)
        return out

    def abduct(self, values: np.ndarray) -> np.ndarray:
        """The noise (n, k) that reproduces `values` (n, k) node by node."""
        return np.column_stack(
            [m.abduct(values, values[:, j]) for j, m in enumerate(self.mechanisms)]
        )

    def counterfactual(
        self, observed: np.ndarray, fixed: np.ndarray, values: np.ndarray
    ) -> np.ndarray:
        """What each observed person's nodes would have been under do(X_fixed = values):
        abduction, then the intervention with their own noise."""
        return self.intervene(self.abduct(observed), fixed, values)


def _topological_order(parents: list[tuple[int, ...]]) -> list[int]:
    """Nodes ordered so that parents come first, generation by generation (ties:
    declaration order); raises ValueError naming a node on a cycle. Iterative
    (networkx), linear in nodes plus edges."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(parents)))
    graph.add_edges_from((p, j) for j, ps in enumerate(parents) for p in ps)
    try:
        return [j for layer in nx.topological_generations(graph) for j in sorted(layer)]
    except nx.NetworkXUnfeasible:
        stuck = nx.find_cycle(graph)[0][0]
        raise ValueError(f"cycle through node {stuck}") from None
