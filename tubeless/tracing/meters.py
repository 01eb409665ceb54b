"""Budget meters as people read them: ``$0.42 of $2.00``, ``31k of 100k tokens``.

One formatter for every place that shows a budget (the live view, ``trace show``,
``checkpoints show``), so they all say the same thing the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["BUDGETS", "budget_meters", "dollars", "meter", "tokens"]

#: The budgets a meter can show, in the order they are shown.
BUDGETS = ("max_cost_usd", "max_total_tokens", "max_input_tokens", "max_output_tokens")


def tokens(count: Any) -> str:
    """A token count, short: ``950``, ``31k``, ``1.2M``."""
    value = int(count)
    if value < 1000:
        return str(value)
    if value < 1_000_000:
        shown = f"{value / 1000:.1f}".rstrip("0").rstrip(".")
        return f"{shown}k"
    shown = f"{value / 1_000_000:.1f}".rstrip("0").rstrip(".")
    return f"{shown}M"


def dollars(amount: Any) -> str:
    """US dollars to the cent (``$0.42``), or to four places under a cent (``$0.0031``)."""
    value = float(amount)
    if value != 0 and abs(value) < 0.01:
        return f"${value:.4f}"
    return f"${value:.2f}"


def meter(name: str, consumed: Any, bound: Any) -> str:
    """``$0.42 of $2.00`` for ``max_cost_usd``, ``31k of 100k tokens`` for the token budgets."""
    if name == "max_cost_usd":
        return f"{dollars(consumed)} of {dollars(bound)}"
    return f"{tokens(consumed)} of {tokens(bound)} tokens"


def budget_meters(limits: Mapping[str, Any], usage: Mapping[str, Any] | None) -> str:
    """``$0.42 of $2.00, 31k of 100k tokens`` for the budgets set in ``limits`` (snake_case),
    from ``usage`` (``input_tokens``, ``output_tokens``, ``cost_usd``); empty without budgets."""
    spent = usage or {}
    tokens_in = int(spent.get("input_tokens") or 0)
    tokens_out = int(spent.get("output_tokens") or 0)
    consumed = {
        "max_cost_usd": spent.get("cost_usd") or 0,
        "max_total_tokens": tokens_in + tokens_out,
        "max_input_tokens": tokens_in,
        "max_output_tokens": tokens_out,
    }
    parts = []
    for name in BUDGETS:
        bound = limits.get(name)
        if bound is None:
            continue
        shown = meter(name, consumed[name], bound)
        if name == "max_input_tokens":
            shown = shown.replace(" tokens", " input tokens")
        elif name == "max_output_tokens":
            shown = shown.replace(" tokens", " output tokens")
        parts.append(shown)
    return ", ".join(parts)
