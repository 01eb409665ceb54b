"""What ``tubeless checkpoints list`` and ``show`` say about a stored document.

The document is read leniently, as stored, and never written: ``show`` is how a person looks
at a document that a run refuses (``_document_parse``). Only its outline is read (status, the
entry agent's turn and budget, each agent's phase); values (state, call inputs, outcomes,
results) are shown only on request, since a checkpoint file holds them in full and must stay
private.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tubeless.durable._session import decode
from tubeless.durable._store import StoredCheckpoint, holder_of

__all__ = ["describe", "summary"]


def _root(document: Mapping[str, Any]) -> Mapping[str, Any]:
    agents = document.get("agents")
    if not isinstance(agents, Mapping):
        return {}
    entry = agents.get(document.get("entry"))
    if isinstance(entry, Mapping):
        return entry
    tops = [e for route, e in agents.items() if "/" not in route and isinstance(e, Mapping)]
    return tops[0] if tops else {}


def _pending(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The requests of ``document`` waiting for a decision (none when it holds no approvals)."""
    approvals = document.get("approvals")
    pending = approvals.get("pending") if isinstance(approvals, Mapping) else None
    if not isinstance(pending, list):
        return []
    return [p for p in pending if isinstance(p, Mapping)]


def _calls(entry: Mapping[str, Any]) -> int:
    budget = entry.get("budget")
    calls = budget.get("calls") if isinstance(budget, Mapping) else None
    return calls if isinstance(calls, int) else 0


def summary(stored: StoredCheckpoint, store: object = None) -> dict[str, Any]:
    """``{key, entry, status, turn, calls, pending, updated_at_ms, held_by, interrupted}`` of
    one stored checkpoint.

    ``pending``: the call ids waiting for approval. ``held_by``: ``{pid, host}`` of the run
    that holds the key now, or ``None``. ``interrupted``: the document says ``running`` but no
    run holds the key (its run died: the same command resumes it); only known when ``store``
    can say who holds a key.
    """
    document = decode(stored.document, f"checkpoint {stored.key!r}")
    root = _root(document)
    status = document.get("status", "running")
    known, holder = holder_of(store, stored.key) if store is not None else (False, None)
    return {
        "key": stored.key,
        "entry": document.get("entry"),
        "status": status,
        "turn": root.get("turn", 0),
        "calls": _calls(root),
        "pending": [str(p.get("call_id")) for p in _pending(document)],
        "updated_at_ms": stored.updated_at_ms,
        "held_by": None if holder is None else holder.to_dict(),
        "interrupted": known and holder is None and status == "running",
    }


def describe(
    stored: StoredCheckpoint, *, values: bool = False, store: object = None
) -> dict[str, Any]:
    """The summary, every agent's entry and the requests waiting for approval (``pending``);
    with ``values``, state, inputs and outcomes too."""
    document = decode(stored.document, f"checkpoint {stored.key!r}")
    agents: list[dict[str, Any]] = []
    for route, entry in sorted((document.get("agents") or {}).items()):
        if not isinstance(entry, Mapping):
            continue
        saved_budget = entry.get("budget")
        budget: Mapping[str, Any] = saved_budget if isinstance(saved_budget, Mapping) else {}
        shown: dict[str, Any] = {
            "route": route,
            "agent": entry.get("agent"),
            "phase": entry.get("phase"),
            "turn": entry.get("turn"),
            "state_version": entry.get("state_version"),
            "budget": {k: budget.get(k) for k in ("calls", "decisions", "depth")},
        }
        if isinstance(budget.get("usage"), Mapping):  # token and cost budgets (``_budget``)
            shown["budget"]["usage"] = budget["usage"]
        decision = entry.get("decision")
        if isinstance(decision, Mapping):
            calls = []
            for call in decision.get("calls") or ():
                row = {k: call.get(k) for k in ("id", "tool", "replay", "status")}
                outcome = call.get("outcome")
                if isinstance(outcome, Mapping):
                    row["ok"] = outcome.get("ok")
                if values:
                    row["input"] = call.get("input")
                    if outcome is not None:
                        row["outcome"] = outcome
                calls.append(row)
            shown["decision"] = {"admitted": decision.get("admitted"), "calls": calls}
        if "failure" in entry:
            shown["failure"] = entry["failure"]
        if values:
            shown["state"] = entry.get("state")
            if "result" in entry:
                shown["result"] = entry["result"]
        agents.append(shown)
    fields = ("route", "turn", "call_id", "tool", "digest") + (("input",) if values else ())
    pending = [{k: p.get(k) for k in fields} for p in _pending(document)]
    return {**summary(stored, store), "agents": agents, "pending": pending}
