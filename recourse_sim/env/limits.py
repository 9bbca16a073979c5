"""A controlled collective's hard constraint (``limit``) and its bank of unspent budget
(``action: oar_plan``), kept over an episode.

Each controlled population has an `Allowance` in the episode state (`RoundState`,
saved by checkpoints): the rounds in which it acted, the collective cost it spent and
the budget it banked. Each round, before members act, `limited` holds the round's OAR
settings (`recourse_sim.agents.oar_settings.OarSettings`, as the action chose them) to
the population's ``limit``:

* ``acting_rounds`` K: a round counts as acting when the collective acts (act entry at
  least -1/2, α > 0 and ε > 0); once K rounds have, an acting action is clipped to idle;
* ``total_cost`` C: the round's ε is capped at the cost left, C minus the collective's
  summed cost so far (each member's cost is at most ε, so the round's mean cost per
  participant is too, and the sum stays within C); with none left (below C · 1e-9) the
  action is idle.

After the round `spend` counts it: an acting round, the collective's mean cost per
participant (its ``info["collectives"][name]["cost"]``; with one collective,
``info["rewards"]["cost"]``), and under ``oar_plan`` the bank: the draw leaves it, and
the part of the round's own allowance, the file's ε, that the round did not use goes in
(an idle round banks all of ε), up to ``bank_cap`` · ε.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

from recourse_sim.agents.oar_settings import OarSettings
from recourse_sim.env.round_state import Allowance, RoundState
from recourse_sim.errors import CheckpointError

if TYPE_CHECKING:
    from recourse_sim.agents.strategies import Strategy

__all__ = [
    "EXHAUSTED",
    "Allowance",
    "allowances_from_state",
    "bank_share",
    "limit_info",
    "limit_left",
    "limited",
    "spend",
]

EXHAUSTED = 1e-9
"""A cost budget C with less than C · EXHAUSTED left is spent (the action is idle)."""


def _oar_action(strategy: Strategy) -> bool:
    """Whether `strategy` is a controlled collective whose action is OAR's settings."""
    return strategy.name == "controlled" and strategy.spec.action != "shift"


def cost_left(strategy: Strategy, allowance: Allowance) -> float | None:
    """The cost a collective may still spend (None: no cost limit)."""
    limit = strategy.spec.limit
    if limit is None or limit.total_cost is None:
        return None
    return max(0.0, limit.total_cost - allowance.cost)


def acting_rounds_left(strategy: Strategy, allowance: Allowance) -> int | None:
    """The rounds in which a collective may still act (None: no such limit)."""
    limit = strategy.spec.limit
    if limit is None or limit.acting_rounds is None:
        return None
    return max(0, limit.acting_rounds - allowance.acting_rounds)


def limited(strategy: Strategy, action: Any, state: RoundState) -> tuple[Any, bool]:
    """The action `strategy` plays this round and whether its limit clipped it: for a
    controlled collective with OAR's settings as its action, the settings the action
    chooses (with the bank so far) held to the population's ``limit``; any other
    action unchanged."""
    if action is None or not _oar_action(strategy):
        return action, False
    allowance = state.allowances[strategy.population]
    settings: OarSettings = strategy.oar_settings(action, allowance.bank)
    if not settings.acts or strategy.spec.limit is None:
        return settings, False
    if acting_rounds_left(strategy, allowance) == 0:
        return settings.idle(), True
    left = cost_left(strategy, allowance)
    if left is None or settings.epsilon <= left:
        return settings, False
    if left <= strategy.spec.limit.total_cost * EXHAUSTED:
        return settings.idle(), True
    # the round's own budget first, then the bank
    own = min(settings.epsilon - settings.draw, left)
    return OarSettings(
        True, settings.participation, left, settings.goal, settings.horizon, left - own
    ), True


def spend(strategy: Strategy, settings: Any, cost: float, state: RoundState) -> None:
    """Count a round of `strategy` played with `settings` (`limited`'s) whose
    participants spent `cost` on average (cost units): an acting round, the cost, and
    under ``oar_plan`` the bank."""
    if settings is None or not _oar_action(strategy):
        return
    allowance = state.allowances[strategy.population]
    allowance.acting_rounds += int(settings.acts)
    allowance.cost += float(cost)
    if strategy.spec.action == "oar_plan":
        epsilon = strategy.action_set.epsilon
        used = settings.epsilon if settings.acts else 0.0
        bank = allowance.bank + epsilon - used  # (the draw is part of what was used)
        allowance.bank = min(strategy.spec.bank_cap * epsilon, max(0.0, bank))


def limit_info(strategy: Strategy, clipped: bool, state: RoundState) -> dict[str, Any]:
    """``info["limit"]``: whether the round's action was clipped, and the acting rounds
    and cost left (None where the limit sets none)."""
    allowance = state.allowances[strategy.population]
    return {
        "clipped": bool(clipped),
        "acting_rounds_left": acting_rounds_left(strategy, allowance),
        "cost_left": cost_left(strategy, allowance),
    }


def limit_left(strategy: Strategy | None, state: RoundState) -> tuple[float, float]:
    """(acting rounds left / K, cost left / C) of a controlled collective, each 1.0 where
    its limit sets none (or there is no collective, or no limit)."""
    if strategy is None or not _oar_action(strategy):
        return 1.0, 1.0
    # (before the first reset: nothing used)
    limit, allowance = strategy.spec.limit, state.allowances.get(strategy.population, Allowance())
    rounds = acting_rounds_left(strategy, allowance)
    cost = cost_left(strategy, allowance)
    return (
        1.0 if rounds is None else rounds / limit.acting_rounds,
        1.0 if cost is None else min(1.0, cost / limit.total_cost),
    )


def bank_share(strategy: Strategy | None, state: RoundState) -> float:
    """A collective's bank / (bank_cap · ε), in [0, 1] (0 without a bank: another action,
    bank_cap 0 or ε 0)."""
    if strategy is None or not _oar_action(strategy) or strategy.spec.action != "oar_plan":
        return 0.0
    most = strategy.spec.bank_cap * strategy.action_set.epsilon
    if most <= 0:
        return 0.0
    return min(1.0, state.allowances.get(strategy.population, Allowance()).bank / most)


def allowances_from_state(saved: Any, strategies: list[Strategy]) -> dict[str, Allowance]:
    """The controlled collectives' allowances of a checkpoint's ``allowances`` part
    (absent from checkpoints of before limits: none used). CheckpointError for a
    missing one that a limit or bank needs, or a value that is not a count or a finite
    non-negative number."""
    saved = {} if saved is None else saved
    if not isinstance(saved, dict):
        raise CheckpointError("checkpoint state: allowances is not a mapping")
    out = {}
    for s in strategies:
        if s.name != "controlled":
            continue
        part = saved.get(s.population)
        if part is None:
            if _oar_action(s) and (s.spec.limit is not None or s.spec.action == "oar_plan"):
                raise CheckpointError(
                    f"checkpoint state has no allowance for population {s.population!r} "
                    "(its limit and bank); it cannot be resumed exactly"
                )
            out[s.population] = Allowance()
            continue
        out[s.population] = _allowance(part, f"allowances.{s.population}")
    return out


def _allowance(part: Any, where: str) -> Allowance:
    if not isinstance(part, dict):
        raise CheckpointError(f"checkpoint state: {where} is not a mapping")
    rounds = part.get("acting_rounds")
    if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 0:
        raise CheckpointError(
            f"checkpoint state: {where}.acting_rounds must be a count >= 0, got {rounds!r}"
        )
    values = {}
    for key in ("cost", "bank"):
        v = part.get(key)
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
            raise CheckpointError(
                f"checkpoint state: {where}.{key} must be a finite number >= 0, got {v!r}"
            )
        values[key] = float(v)
    return Allowance(int(rounds), values["cost"], values["bank"])
