"""Pending approvals read from a checkpoint store, and answers written back into it.

This is what ``tubeless approve`` / ``deny`` do, for a page: the answer is recorded in the key's
checkpoint document under the key's lease (a run holding the key refuses it with
``TUBELESS_CHECKPOINT_LOCKED``), bound to the digest the person saw. The next run of the key
resumes. Arguments come from the checkpoint (a data file), never from a trace.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

from tubeless.durable import CheckpointStore
from tubeless.durable._spi import CheckpointDocument, record_decision
from tubeless.errors import TubelessError

if TYPE_CHECKING:
    from tubeless.ui._traces import Snapshot

__all__ = ["MAX_ARGUMENT_CHARS", "MAX_PENDING", "CheckpointApprovals", "open_store", "waiting_run"]

#: Characters of a call's arguments shown on the page (the digest covers all of them).
MAX_ARGUMENT_CHARS: Final = 4000
#: Pending calls listed on one page.
MAX_PENDING: Final = 200


def open_store(target: str) -> CheckpointStore:
    """The checkpoint store at a path (SQLite) or a ``postgresql://`` URL."""
    from tubeless.durable import open_checkpoints

    return open_checkpoints(target)


class CheckpointApprovals:
    """The approvals of one checkpoint store (opened per request, closed after it)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def pending(self) -> list[dict[str, Any]]:
        """``{key, route, turn, call_id, tool, digest, arguments, requested_at}`` of every call
        waiting for approval, oldest checkpoint first; ``arguments`` as indented JSON text."""
        store = open_store(self.target)
        try:
            stored = sorted(store.list(), key=lambda s: s.updated_at_ms)
        finally:
            store.close()
        found: list[dict[str, Any]] = []
        for checkpoint in stored:
            try:
                document = CheckpointDocument.from_json(checkpoint.document, checkpoint.key)
            except TubelessError:
                continue
            for request in document.pending():
                found.append(_shown(checkpoint.key, request, checkpoint.updated_at_ms))
                if len(found) >= MAX_PENDING:
                    return found
        return found

    def answer(
        self,
        *,
        key: str,
        call_id: str,
        route: str | None,
        digest: str,
        approve: bool,
        reason: str | None,
    ) -> None:
        """Record the answer for the pending call (``digest`` must be the pending one's).

        Raises:
            LookupError: No such pending call, or it waits with another digest.
            TubelessError: ``TUBELESS_CHECKPOINT_LOCKED`` while a run holds the key.
        """
        store = open_store(self.target)
        try:
            with store.acquire(key) as lease:
                text = lease.read()
                if text is None:
                    raise LookupError(f"no checkpoint {key!r}")
                document = CheckpointDocument.from_json(text, key)
                match = [
                    p
                    for p in document.pending()
                    if p["call_id"] == call_id and route in (None, p["route"])
                ]
                if len(match) != 1 or match[0].get("digest") != digest:
                    raise LookupError(
                        f"call {call_id!r} of {key!r} is not waiting with these arguments "
                        "any more; reload the page"
                    )
                try:
                    updated = record_decision(
                        text, key, call_id, approved=approve, reason=reason, route=route
                    )
                except LookupError as exc:
                    raise LookupError(str(exc.args[0])) from None
                lease.write(updated)
        finally:
            store.close()


def _shown(key: str, request: Any, updated_at_ms: int) -> dict[str, Any]:
    try:
        text = json.dumps(request.get("input"), ensure_ascii=False, indent=2, sort_keys=True)
    except (TypeError, ValueError):
        text = "(arguments not shown)"
    if len(text) > MAX_ARGUMENT_CHARS:
        text = text[:MAX_ARGUMENT_CHARS] + f"\n… ({len(text) - MAX_ARGUMENT_CHARS} more characters)"
    return {
        "run_id": None,
        "key": key,
        "route": str(request.get("route", "")),
        "turn": request.get("turn"),
        "call_id": str(request.get("call_id", "")),
        "tool": str(request.get("tool", "")),
        "digest": str(request.get("digest", "")),
        "arguments": text,
        "requested_at": updated_at_ms,
    }


def waiting_run(snapshot: Snapshot, request: dict[str, Any]) -> str | None:
    """The run of the traces that waits for ``request``: the one waiting root run of the
    request's entry (its route's first part) with that call waiting at that turn; ``None``
    when no run, or more than one, fits (the trace does not record checkpoint keys)."""
    entry = str(request.get("route", "")).split("/")[0]
    found = []
    for row in snapshot.rows:
        if row.status != "waiting" or row.entry != entry:
            continue
        tree = snapshot.trees[row.run_id]
        for run in tree.walk():
            turns = () if run.agent is None else run.agent.turns
            if any(
                turn.index == request.get("turn")
                and any(
                    c.call_id == request.get("call_id") and c.status == "waiting"
                    for c in turn.calls
                )
                for turn in turns
            ):
                found.append(row.run_id)
                break
    return found[0] if len(found) == 1 else None
