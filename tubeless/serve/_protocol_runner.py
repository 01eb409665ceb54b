"""``ServedRunner``: the protocols' :class:`ProjectRunner` over ``tubeless serve``'s run manager.

AG-UI, A2A and MCP runs are ordinary served runs: recorded in the run registry (so they are
listed by ``GET /v1/runs``), checkpointed in the server's store, resumed after a restart,
cancelled and answered like any other. What the runner adds:

* **Owners.** The registry keeps each protocol run's caller (a hash of its bearer token, or
  ``anonymous`` without one); a run, thread or task is visible only to its caller, and a key
  another caller started is refused (409).
* **Events.** A run's agent turns are followed by the event feed (``protocols._feed``) that
  the manager installs in the run's own task; the events of a run live in this worker's
  memory. A run resumed elsewhere (another worker, or this server after a restart) is
  followed by its status in the registry: its stream then carries the statuses, not the
  turns that happened out of sight.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tubeless.agent._spi import OBSERVER
from tubeless.errors import OPTIONS_VALIDATION_FAILED, SERVE_CONFLICT, SERVE_NOT_FOUND
from tubeless.serve._config import MAX_JSON_DEPTH
from tubeless.serve._entries import RequestError
from tubeless.serve._registry import RunRow
from tubeless.serve._routes import depth_ok
from tubeless.serve.protocols import (
    Caller,
    PendingApproval,
    ProjectInfo,
    RunEvent,
    RunnerError,
    RunView,
)
from tubeless.serve.protocols._feed import Feed
from tubeless.serve.protocols._local import project_info

if TYPE_CHECKING:
    from tubeless.serve._manager import RunManager

__all__ = ["ServedRunner"]

#: The owner recorded for a protocol request that carried no bearer token (``--no-auth``).
ANONYMOUS = "anonymous"
#: How often a follower looks at the registry for a run this worker does not run.
POLL_S = 0.05
#: How long ``cancel`` waits for a running run to settle (a hang guard: a synchronous tool
#: cannot be interrupted, and the run ends when it returns).
CANCEL_WAIT_S = 30.0
#: How long the events of a run that ended stay in memory for late followers.
KEEP_S = 60.0
_RUNNING = ("queued", "running")


@dataclass
class _Log:
    """One run's events in this worker, numbered from 1."""

    events: list[RunEvent] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def emit(self, kind: Any, **fields: Any) -> None:
        self.events.append(RunEvent(seq=len(self.events) + 1, kind=kind, **fields))
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


def _owner(caller: Caller) -> str:
    return caller or ANONYMOUS


def _status(row: RunRow) -> Any:
    return "running" if row.status in _RUNNING else row.status


def _refused(exc: RequestError) -> RunnerError:
    if exc.status == 404:
        return RunnerError(SERVE_NOT_FOUND, exc.message)
    if exc.status == 422 and exc.code == OPTIONS_VALIDATION_FAILED:
        return RunnerError(OPTIONS_VALIDATION_FAILED, exc.message)
    if exc.status == 409:
        return RunnerError(SERVE_CONFLICT, exc.message)
    return RunnerError(exc.code, exc.message)


class ServedRunner:
    """The :class:`~tubeless.serve.protocols.ProjectRunner` of one served app (see above)."""

    def __init__(self, manager: RunManager) -> None:
        self.manager = manager
        self._info = project_info(manager.entries.project)
        self._logs: dict[str, _Log] = {}
        manager.on_launch.append(self._launched)
        manager.on_end.append(self._ended)

    # -- the manager's hooks (in the run's own task) -----------------------------------------
    def _launched(self, row: RunRow) -> None:
        if row.caller is None:
            return  # a run of the HTTP API: nobody follows its turns here
        log = self._logs.setdefault(row.run_id, _Log())
        log.emit("status", status="running")
        OBSERVER.set(Feed(log.emit))  # this run's task only

    def _ended(self, row: RunRow) -> None:
        log = self._logs.get(row.run_id)
        now = self.manager.registry.get(row.run_id)
        if log is None or now is None or now.status in _RUNNING:
            return  # a stopping worker: the run resumes later, and its stream goes on then
        log.emit("status", status=now.status)
        if now.status != "waiting":
            self._forget_later(row.run_id)

    def _forget_later(self, run_id: str) -> None:
        """Drop a finished run's events (arguments, outcomes, state) after ``KEEP_S``: those
        following it hold them until they are done."""
        asyncio.get_running_loop().call_later(KEEP_S, self._logs.pop, run_id, None)

    # -- ProjectRunner -----------------------------------------------------------------------
    @property
    def info(self) -> ProjectInfo:
        return self._info

    def validate(self, entry: str, raw_input: Any) -> None:
        if not depth_ok(raw_input):  # the bound the HTTP API puts on its bodies
            raise RunnerError(
                OPTIONS_VALIDATION_FAILED,
                f"The input of entry {entry!r} nests deeper than {MAX_JSON_DEPTH} levels",
            )
        try:
            self.manager.entries.validate_input(self.manager.entries.get(entry), raw_input)
        except RequestError as exc:
            raise _refused(exc) from None

    async def start(
        self,
        entry: str,
        raw_input: Any,
        *,
        key: str | None = None,
        caller: Caller = None,
        restart: bool = False,
    ) -> RunView:
        self.validate(entry, raw_input)
        key = key or f"{entry}:{uuid.uuid4().hex}"
        earlier = self.manager.registry.latest_on_key(key)
        if earlier is not None and earlier.caller != _owner(caller):
            raise RunnerError(SERVE_CONFLICT, f"Key {key!r} belongs to another caller")
        try:
            row, _ = self.manager.submit(
                entry,
                raw_input,
                key=key,
                limits=None,
                idempotency_key=None,
                caller=_owner(caller),
                restart=restart,
            )
        except RequestError as exc:
            raise _refused(exc) from None
        return self._view(row)

    def _own(self, run_id: str, caller: Caller) -> RunRow:
        row = self.manager.registry.get(run_id)
        if row is None or row.caller != _owner(caller):
            raise RunnerError(SERVE_NOT_FOUND, f"No run {run_id!r}")
        return row

    def _view(self, row: RunRow) -> RunView:
        pending = self.manager.registry.pending(row.run_id) if row.status == "waiting" else []
        log = self._logs.get(row.run_id)
        return RunView(
            run_id=row.run_id,
            entry=row.entry,
            key=row.key,
            status=_status(row),
            result=row.result if row.status == "completed" else None,
            error=row.error if row.status in ("failed", "cancelled") else None,
            pending=tuple(_pending(p) for p in pending),
            created_at_ms=row.created_at_ms,
            updated_at_ms=row.updated_at_ms,
            input=row.input,
            events=len(log.events) if log is not None else 0,
        )

    def get(self, run_id: str, *, caller: Caller = None) -> RunView:
        return self._view(self._own(run_id, caller))

    def find(self, key: str, *, caller: Caller = None) -> RunView | None:
        row = self.manager.registry.latest_on_key(key)
        if row is None or row.caller != _owner(caller):
            return None
        return self._view(row)

    def list(self, *, caller: Caller = None) -> list[RunView]:
        return [self._view(row) for row in self.manager.registry.owned_by(_owner(caller))]

    async def events(self, run_id: str, *, since: int = 0) -> AsyncIterator[RunEvent]:
        if self.manager.registry.get(run_id) is None:
            raise RunnerError(SERVE_NOT_FOUND, f"No run {run_id!r}")
        seen = since
        log = self._logs.setdefault(run_id, _Log())
        while True:
            changed = log.changed
            while seen < len(log.events):
                event = log.events[seen]
                seen += 1
                yield event
                if event.kind == "status" and event.status != "running":
                    return
            row = self.manager.registry.get(run_id)
            if row is None or row.status not in _RUNNING:
                # Stopped out of this worker's sight (or its end hook is about to say so):
                # the status is the last event either way.
                if len(log.events) == seen:
                    log.emit("status", status=_status(row) if row else "failed")
                    if row is None or row.status != "waiting":
                        self._forget_later(run_id)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout=POLL_S)

    async def wait(self, run_id: str) -> RunView:
        while True:
            row = self.manager.registry.get(run_id)
            if row is None:
                raise RunnerError(SERVE_NOT_FOUND, f"No run {run_id!r}")
            if row.status not in _RUNNING:
                return self._view(row)
            row = await self.manager.wait(run_id, 1.0)

    async def answer(
        self,
        run_id: str,
        call_id: str,
        *,
        digest: str,
        approve: bool,
        reason: str | None = None,
        caller: Caller = None,
    ) -> RunView:
        self._own(run_id, caller)
        try:
            # On the loop itself: answering the last call launches the run as a task here.
            row = self.manager.answer(
                run_id,
                call_id,
                approve=approve,
                digest=digest,
                reason=None if approve else reason,
            )
        except RequestError as exc:
            raise _refused(exc) from None
        return self._view(row)

    async def cancel(self, run_id: str, *, caller: Caller = None) -> RunView:
        self._own(run_id, caller)
        row = self.manager.cancel(run_id)
        deadline = time.monotonic() + CANCEL_WAIT_S
        while row.status in _RUNNING and time.monotonic() < deadline:
            row = await self.manager.wait(run_id, min(1.0, deadline - time.monotonic()))
        return self._view(row)


def _pending(request: dict[str, Any]) -> PendingApproval:
    return PendingApproval(
        call_id=str(request.get("call_id")),
        tool=str(request.get("tool")),
        input=request.get("input"),
        digest=str(request.get("digest")),
        route=str(request.get("route")),
        turn=int(request.get("turn") or 0),
    )
