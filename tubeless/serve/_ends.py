"""What a run's stop means for the registry, and the run object the API shows.

The checkpoint document is read as plain JSON once the run let its lease go: the entry agent's
turn and budget give ``turns``, ``calls`` and ``usage``; a ``waiting`` document's pending
requests are copied into the registry, so that any worker can show and answer them.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from tubeless.errors import (
    APPROVAL_REQUIRED,
    CHECKPOINT_LOCKED,
    FINAL_RESULT_VALIDATION_FAILED,
    RUN_CANCELLED,
    UNKNOWN_ERROR,
)
from tubeless.serve._registry import RunRegistry, RunRow

if TYPE_CHECKING:
    from tubeless.durable import CheckpointStore
    from tubeless.pipeline import PipelineRun

__all__ = ["iso", "read_document", "record_end", "run_view"]


def iso(ms: int) -> str:
    """Epoch milliseconds as RFC 3339 UTC text."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def read_document(store: CheckpointStore, key: str) -> dict[str, Any] | None:
    """The key's checkpoint document as plain JSON, read once its run let the lease go.

    Only the worker holding the run's claim calls this, so no other run of the key can be
    starting; a lease held anyway (``tubeless approve`` from a terminal) falls back to
    reading every stored document without a lease.
    """
    from tubeless.errors import CheckpointError

    text: str | None = None
    try:
        with store.acquire(key) as lease:
            text = lease.read()
    except CheckpointError:
        text = next((s.document for s in store.list() if s.key == key), None)
    if text is None:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def record_end(
    registry: RunRegistry,
    row: RunRow,
    run: PipelineRun,
    document: dict[str, Any] | None,
    user_cancelled: bool,
) -> None:
    """Record in ``registry`` how ``run`` (one invocation of ``row``) stopped."""
    document = document or {}
    progress = _progress(document, row.entry)
    if run.status == "completed":
        from pydantic_core import to_jsonable_python

        result = to_jsonable_python(run.value)
        try:
            json.dumps(result, allow_nan=False)
        except ValueError:  # NaN, an infinity: no JSON answer can carry it
            registry.update(
                row.run_id,
                status="failed",
                error={
                    "code": FINAL_RESULT_VALIDATION_FAILED,
                    "message": "the result cannot be written as JSON (NaN or an infinity)",
                },
                **progress,
            )
            return
        registry.update(row.run_id, status="completed", result=result, **progress)
        return
    first = run.errors[0] if run.errors else None
    code = (first.source_code or first.code) if first is not None else None
    if run.status == "cancelled":
        if user_cancelled:
            registry.update(
                row.run_id,
                durable=True,
                status="cancelled",
                error={"code": RUN_CANCELLED, "message": "the run was cancelled"},
                **progress,
            )
        return  # otherwise a signal stopped it (shutdown): it resumes later
    if code == CHECKPOINT_LOCKED:
        return  # another worker holds the key; it records the end
    if code == APPROVAL_REQUIRED or document.get("status") == "waiting":
        pending = [_pending(p, row.run_id, document) for p in _requests(document)]
        registry.update(row.run_id, status="waiting", error=None, pending=pending, **progress)
        return
    message = first.message if first is not None else "the run failed"
    registry.update(
        row.run_id,
        status="failed",
        error={"code": code or UNKNOWN_ERROR, "message": message},
        **progress,
    )


def run_view(registry: RunRegistry, row: RunRow) -> dict[str, Any]:
    """The run object of the API."""
    shown: dict[str, Any] = {
        "run_id": row.run_id,
        "entry": row.entry,
        "key": row.key,
        "status": row.status,
    }
    if row.status == "completed":
        shown["result"] = row.result
    if row.error is not None and row.status in ("failed", "cancelled"):
        shown["error"] = row.error
    shown.update(
        turns=row.turns,
        calls=row.calls,
        usage=row.usage or {},
        pending_approvals=registry.pending(row.run_id) if row.status == "waiting" else [],
        created_at=iso(row.created_at_ms),
        updated_at=iso(row.updated_at_ms),
    )
    return shown


def _progress(document: dict[str, Any], entry: str) -> dict[str, Any]:
    """``turns``, ``calls`` and ``usage`` of the entry agent, from its checkpoint document.

    ``usage`` holds the decisions and calls its budget charged and, for a metered agent (one
    with token or cost budgets), the tokens and the cost it consumed, as its budget saved them
    (``cost_usd`` a decimal string: no rounding on the way)."""
    from tubeless.durable._spi import parse, saved_usage

    try:
        saved = parse(document, str(document.get("key", ""))).agents.get(entry)
    except Exception:  # a document no writer produces: nothing to show from it
        saved = None
    if saved is None:
        return {"turns": 0, "calls": 0, "usage": {}}
    usage: dict[str, Any] = {"decisions": saved.budget.decisions, "calls": saved.budget.calls}
    metered = saved_usage(saved.budget)
    if metered is not None:
        tokens = {k: metered.get(k, 0) for k in ("input_tokens", "output_tokens")}
        if all(isinstance(v, int) and not isinstance(v, bool) for v in tokens.values()):
            usage.update(tokens, total_tokens=sum(tokens.values()))
        cost = metered.get("cost_usd")
        if isinstance(cost, (str, int, float)) and not isinstance(cost, bool):
            usage["cost_usd"] = str(cost)
    return {"turns": saved.turn, "calls": saved.budget.calls, "usage": usage}


def _requests(document: dict[str, Any]) -> list[dict[str, Any]]:
    approvals = document.get("approvals")
    pending = approvals.get("pending") if isinstance(approvals, dict) else None
    return [p for p in pending or () if isinstance(p, dict)]


def _pending(request: dict[str, Any], run_id: str, document: dict[str, Any]) -> dict[str, Any]:
    updated = document.get("updated_at_ms")
    return {
        "run_id": run_id,
        "key": request.get("key", document.get("key")),
        "route": request.get("route"),
        "turn": request.get("turn"),
        "call_id": request.get("call_id"),
        "tool": request.get("tool"),
        "input": request.get("input"),
        "digest": request.get("digest"),
        "requested_at": iso(updated if isinstance(updated, int) else int(time.time() * 1000)),
    }
