"""Markdown tables shared by the analysis scripts."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(rows: Sequence[Sequence[str]]) -> str:
    """`rows` as a Markdown table, the first row its header."""
    head, *body = rows
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])
