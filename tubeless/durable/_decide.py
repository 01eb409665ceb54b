"""``tubeless approve|deny``: a decision for one pending request, recorded in its checkpoint.

A waiting document holds ``approvals: {pending: [...], decisions: [...]}`` (``_document``). A
decision binds to the pending request's exact route, turn, call id and digest: the next run of
the key applies it to that call only, and a call re-requested with other arguments waits again.
"""

from __future__ import annotations

from typing import Any

from tubeless.durable._document import CheckpointDocument

__all__ = ["record_decision"]


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
    document = CheckpointDocument.from_json(text, key)
    pending = document.pending()
    found = [p for p in pending if p["call_id"] == call_id and route in (None, p["route"])]
    if len(found) != 1:
        listed = ", ".join(
            repr(p["call_id"]) + (f" (--route {p['route']})" if len(found) > 1 else "")
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
        "route": request["route"],
        "turn": request["turn"],
        "call_id": call_id,
        "digest": request.get("digest"),
        "approved": approved,
    }
    if reason is not None:
        decision["reason"] = reason
    assert document.approvals is not None  # a request is pending
    document.approvals.decide(decision)
    if document.status == "waiting" and not document.approvals.pending:
        document.status = "running"  # resumable: the next run of the key goes on
    document.touched()
    return document.to_json()
