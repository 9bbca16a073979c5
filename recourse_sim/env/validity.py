"""The validity of recourse some rounds later (``recourse_valid_after_T``), on any world."""

from __future__ import annotations

from typing import Any

__all__ = ["valid_after_T"]


def valid_after_T(env: Any, cut: float | None) -> dict[str, Any]:
    """`RoundRecord`'s ``validity_horizon`` and, once T rounds have been played, the
    groups, query membership and whether this round's decision rule favours the reports
    that the recourse of the people whose recourse succeeded T rounds ago left them
    (capacity: at this round's cut-off score `cut`; whether they apply now or not).
    `env`: a `RecourseEnv` with ``validity_horizon`` T set."""
    out: dict[str, Any] = {"validity_horizon": env._horizon}
    if len(env._past_holders) == env._horizon:
        past = env._past_holders[0]
        out["past_holder_group"] = past["group"]
        out["past_holder_query"] = past["query"]
        out["past_holder_favoured"] = env._favoured(past, cut)
    return out
