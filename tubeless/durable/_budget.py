"""The token and cost budget part of a checkpoint: what was consumed, the bounds, and raising
them (``tubeless checkpoints raise``).

An agent entry with token or cost budgets keeps, beside its call and decision counters::

    budget: {..., usage: {bounds: {<budget>: <bound>}, input_tokens, output_tokens,
                          cost_usd: "<decimal>", waiting?: <budget>}}

``bounds`` start as the definition's; ``tubeless checkpoints raise`` raises them for that key
only (never below what was consumed), so a resumed run admits more while its definition, and
so its identity, stay the same. Consumed amounts include every reservation committed before
its request was sent: a request in flight when a run died keeps its whole reservation, and a
resume never refills a budget. ``waiting`` names the budget a checkpointed run with
``on_limit: wait`` stopped at (its status is then ``waiting``).

Plain storage: amounts are JSON numbers and decimal strings, read and written here only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tubeless.durable._document import CheckpointDocument, SavedBudget

if TYPE_CHECKING:
    from decimal import Decimal

__all__ = ["BUDGET_FLAGS", "raise_budgets", "saved_usage", "store_usage", "waiting_budget"]

#: The budgets ``checkpoints raise`` takes, as their command-line flags.
BUDGET_FLAGS = {
    "max_input_tokens": "--max-input-tokens",
    "max_output_tokens": "--max-output-tokens",
    "max_total_tokens": "--max-total-tokens",
    "max_cost_usd": "--max-cost-usd",
}


def saved_usage(budget: SavedBudget) -> Mapping[str, Any] | None:
    """The usage section of an entry's budget, if it has one."""
    usage = (budget.extra or {}).get("usage")
    return usage if isinstance(usage, Mapping) else None


def store_usage(budget: SavedBudget, usage: Mapping[str, Any]) -> None:
    """Replace the usage section of an entry's budget."""
    budget.extra = {**(budget.extra or {}), "usage": dict(usage)}


def waiting_budget(budget: SavedBudget) -> str | None:
    """The budget an entry waits to have raised, if any."""
    usage = saved_usage(budget)
    waiting = None if usage is None else usage.get("waiting")
    return waiting if isinstance(waiting, str) else None


def _consumed(usage: Mapping[str, Any], name: str) -> Decimal:
    from decimal import Decimal  # here: ``import tubeless`` stays without decimals

    tokens_in = Decimal(int(usage.get("input_tokens", 0)))
    tokens_out = Decimal(int(usage.get("output_tokens", 0)))
    if name == "max_input_tokens":
        return tokens_in
    if name == "max_output_tokens":
        return tokens_out
    if name == "max_total_tokens":
        return tokens_in + tokens_out
    return Decimal(str(usage.get("cost_usd", "0")))


def raise_budgets(
    text: str, key: str, raised: Mapping[str, Decimal], route: str | None = None
) -> tuple[str, list[str]]:
    """The document ``text`` with the given budgets raised, and a line per change
    (``agent a: max_cost_usd 2 -> 5 (consumed 1.98)``).

    Without ``route``, every top-level agent that has a budget gets it raised; with one, only
    the agent at that route (a child agent of the delegation tree, as ``checkpoints show`` and
    the waiting message name it).

    Raises:
        LookupError: No agent (at ``route``) has one of the budgets, or a new bound is below
            what was consumed (the message says which and how much, and where a budget is).
        CheckpointError: ``TUBELESS_CHECKPOINT_INVALID`` for an unreadable document.
    """
    document = CheckpointDocument.from_json(text, key)
    changes: list[str] = []
    for name, bound in raised.items():
        having = [
            where
            for where, entry in sorted(document.agents.items())
            if name in ((saved_usage(entry.budget) or {}).get("bounds") or {})
        ]
        chosen = [where for where in having if (where == route if route else "/" not in where)]
        if not chosen:
            raise LookupError(_nothing_to_raise(key, name, route, having))
        for where in chosen:
            entry = document.agents[where]
            usage = saved_usage(entry.budget)
            assert usage is not None  # it has the budget
            consumed = _consumed(usage, name)
            if bound < consumed:
                raise LookupError(
                    f"checkpoint {key!r}: agent {where} consumed {consumed} of {name}; a new "
                    f"bound must be at least that, not {bound}"
                )
            old = usage["bounds"][name]
            bounds = {**usage["bounds"], name: str(bound) if name == "max_cost_usd" else int(bound)}
            updated = {**usage, "bounds": bounds}
            if updated.get("waiting") == name:
                updated.pop("waiting")
            store_usage(entry.budget, updated)
            changes.append(f"agent {where}: {name} {old} -> {bounds[name]} (consumed {consumed})")
    if document.status == "waiting" and not document.pending() and not _still_waiting(document):
        document.status = "running"  # resumable: the next run of the key goes on
    document.touched()
    return document.to_json(), changes


def _nothing_to_raise(key: str, name: str, route: str | None, having: list[str]) -> str:
    """Why no agent's ``name`` budget was raised, and where there is one to raise."""
    flag = BUDGET_FLAGS[name]
    if not having:
        return (
            f"checkpoint {key!r} has no agent with a {name} budget to raise ({flag}); "
            "a budget the definition does not set is unbounded"
        )
    listed = ", ".join(having)
    if route is not None:
        verb = "has" if len(having) == 1 else "have"
        return (
            f"checkpoint {key!r} has no agent at route {route!r} with a {name} budget; "
            f"{listed} {verb} one"
        )
    routes = " or ".join(f"--route {where}" for where in having)
    return (
        f"checkpoint {key!r}: no top-level agent has a {name} budget; a child agent's is "
        f"raised by its route: {routes}"
    )


def _still_waiting(document: CheckpointDocument) -> bool:
    return any(waiting_budget(entry.budget) for entry in document.agents.values())


def parse_amount(name: str, value: str) -> Decimal:
    """A bound given on the command line: an integer for tokens, a decimal for dollars."""
    from decimal import Decimal, InvalidOperation

    try:
        amount = Decimal(value.strip())
    except InvalidOperation:
        raise ValueError(f"{BUDGET_FLAGS[name]} must be a number, not {value!r}") from None
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"{BUDGET_FLAGS[name]} must be a number >= 0, not {value!r}")
    if name != "max_cost_usd" and amount != amount.to_integral_value():
        raise ValueError(f"{BUDGET_FLAGS[name]} must be a whole number of tokens, not {value!r}")
    return amount
