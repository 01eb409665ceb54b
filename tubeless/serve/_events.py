"""``GET /v1/runs/{run_id}/events``: the run's trace as Server-Sent Events a client can resume.

The trace store is the buffer: each record is a ``record`` event whose ``id:`` is its sequence
there, so ``Last-Event-ID`` (or ``?since=``) picks up exactly after it, from any worker and
after any restart. ``status`` events (no id) say when the run's status, ``turns`` or ``calls``
change (the counts as the run object shows them, live while it runs); ``end`` is
last, once the run finished and every record it wrote was sent. A comment every
``keepalive_s`` keeps proxies from closing a quiet stream. Only what the trace holds is sent
(never inputs, outputs or state): a client reads the result from the run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from tubeless.errors import SERVE_BAD_REQUEST
from tubeless.serve._entries import RequestError
from tubeless.serve._follow import read_since
from tubeless.serve._registry import TERMINAL

if TYPE_CHECKING:
    from tubeless.serve._manager import RunManager

__all__ = ["stream_events"]

#: How often a quiet stream looks for new records.
POLL_S = 0.1
_BATCH = 500


def _since(request: Request) -> int:
    text = request.headers.get("last-event-id") or request.query_params.get("since") or "0"
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise RequestError(
            400, SERVE_BAD_REQUEST, "Last-Event-ID and since are record sequences (integers)"
        )
    return int(text)


async def stream_events(request: Request, manager: RunManager) -> Response:
    from sse_starlette import EventSourceResponse, ServerSentEvent

    run_id = request.path_params["run_id"]
    manager.get(run_id)  # 404 before the stream opens
    after = _since(request)
    source = manager.config.trace

    async def events() -> AsyncIterator[ServerSentEvent]:
        nonlocal after
        shown: tuple[str, int, int] | None = None
        # A run's records are committed before its status turns terminal, so only a read that
        # began after the terminal status was seen is sure to hold the last of them: the status
        # is read before each read of the records (the previous pass's read serves), never only
        # after it, or a run ending between the two would end the stream without its records.
        row = manager.current(manager.get(run_id))
        while True:
            ended = row.status in TERMINAL
            records = await asyncio.get_running_loop().run_in_executor(
                manager.readers,
                partial(read_since, source, run_id=run_id, after=after, limit=_BATCH),
            )
            for sequence, record in records:
                after = sequence
                yield ServerSentEvent(
                    data=json.dumps(record, separators=(",", ":")), event="record", id=str(sequence)
                )
            row = manager.current(manager.get(run_id))
            now = (row.status, row.turns, row.calls)
            if now != shown:
                shown = now
                status = {**_status(row), "turns": row.turns, "calls": row.calls}
                yield ServerSentEvent(data=json.dumps(status), event="status")
            if len(records) < _BATCH:
                if ended:
                    yield ServerSentEvent(data=json.dumps(_status(row)), event="end")
                    return
                if row.status not in TERMINAL:  # else look again at once: the rest is there
                    await asyncio.sleep(POLL_S)

    return EventSourceResponse(
        events(),
        ping=manager.config.keepalive_s,
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


def _status(row: Any) -> dict[str, Any]:
    return {"run_id": row.run_id, "status": row.status}
