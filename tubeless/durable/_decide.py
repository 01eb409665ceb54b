"""``tubeless approve|deny``: a decision for one pending request, recorded in its checkpoint.

A waiting document holds ``approvals: {pending: [...], decisions: [...]}`` (written by the agent
harness, ``agent/_durable_approvals``). A decision binds to the pending request's exact route,
turn, call id and digest: the next run of the key applies it to that call only, and a call
re-requested with other arguments waits again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from tubeless.durable._session import decode, encode

__all__ = ["pending_of", "record_decision"]


def pending_of(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The requests of ``document`` waiting for a decision (none when it holds no approvals)."""
    approvals = document.get("approvals")
    pending = approvals.get("pending") if isinstance(approvals, Mapping) else None
    if not isinstance(pending, list):
        return []
    return [p for p in pending if isinstance(p, Mapping)]


def _slot(request: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return request.get("route"), request.get("turn"), request.get("call_id")


def record_decision(
    text: str,
    key: str,
    call_id: str,
    *,
    approved: bool,
    reason: str | None,
    route: str | None = None,
) -> str:
    """The document ``text`` with a decision for its pending call ``call_id``.

    Raises:
        LookupError: No pending call has that id (or several do and ``route`` tells none apart);
            the message lists the pending ones.
        CheckpointError: ``TUBELESS_CHECKPOINT_INVALID`` for an unreadable document.
    """
    document = decode(text, f"checkpoint {key!r}")
    pending = pending_of(document)
    found = [p for p in pending if p.get("call_id") == call_id and route in (None, p.get("route"))]
    if len(found) != 1:
        listed = ", ".join(
            repr(p.get("call_id")) + (f" (--route {p.get('route')})" if len(found) > 1 else "")
            for p in (found if found else pending)
        )
        if not found:
            raise LookupError(
                f"checkpoint {key!r} has no call {call_id!r} waiting for approval"
                + (f" (waiting: {listed})" if listed else " (nothing is waiting)")
            )
        raise LookupError(
            f"checkpoint {key!r} has {len(found)} calls {call_id!r} waiting; give --route: {listed}"
        )
    request = found[0]
    decision: dict[str, Any] = {
        "route": request.get("route"),
        "turn": request.get("turn"),
        "call_id": call_id,
        "digest": request.get("digest"),
        "approved": approved,
    }
    if reason is not None:
        decision["reason"] = reason
    approvals = document["approvals"]
    slot = _slot(request)
    decisions = [d for d in approvals.get("decisions") or () if _slot(d) != slot]
    approvals["decisions"] = [*decisions, decision]
    approvals["pending"] = [p for p in pending if _slot(p) != slot]
    if document.get("status") == "waiting" and not approvals["pending"]:
        document["status"] = "running"  # resumable: the next run of the key goes on
    document["updated_at_ms"] = time.time_ns() // 1_000_000
    return encode(document)
