"""The torch modules of `recourse_sim.learners.mlp.MLPClassifier`: its network and the
implicit hypergradient's autograd function. Apart so that the learner's module, and
checking a scenario that names it, import no torch until a network is built."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

import torch
from torch import nn

__all__ = ["ImplicitCorrection", "Net", "shared_net"]


class Net(nn.Module):
    """Linear layers with an activation between them; logits out.

    Built on the meta device: it holds no parameters of its own (so building it never
    touches a random generator); `functional_call` supplies them from the state.
    """

    def __init__(self, sizes: list[int], activation: str):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Linear(i, o, device="meta", dtype=torch.float64)
            for i, o in itertools.pairwise(sizes)
        )
        self.activation = getattr(torch, activation)

    def forward(self, x: torch.Tensor, masks: list[torch.Tensor] | None = None) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = self.activation(x)
                if masks is not None:  # inverted dropout, masks drawn by the caller
                    x = x * masks[i]
        return x


@functools.lru_cache(maxsize=64)
def shared_net(sizes: tuple[int, ...], activation: str) -> Net:
    """One parameterless `Net` per architecture: building the meta-device layers costs
    about a millisecond, which recourse-aware training would otherwise pay several times
    per minibatch. Safe to share: `functional_call` only swaps parameters in for a call."""
    return Net(list(sizes), activation)


class ImplicitCorrection(torch.autograd.Function):
    """Zero in value; its backward maps an incoming gradient v to −(H + λI)⁻¹ v.

    Applied to g = ∇_θ R(θ*, X) (with its graph to X), it makes
    ``θ* + correction(g)`` carry the implicit-function hypergradient
    dθ*/dX = −H⁻¹ ∂²R/∂θ∂X to X while leaving the value θ*.
    """

    @staticmethod
    def forward(ctx, g: torch.Tensor, solve: Callable[[torch.Tensor], torch.Tensor]):
        ctx.solve = solve
        return torch.zeros_like(g)

    @staticmethod
    def backward(ctx, v: torch.Tensor):
        return -ctx.solve(v), None
