"""``LocalRunner``: a :class:`ProjectRunner` that runs a project's entries in this process.

Each run is an asyncio task of ``entry.run(input, checkpoints=store, checkpoint_key=key)``
with the event feed (``_feed``) watching its turns. A run that stops waiting for approvals keeps
its pending requests; answering them records each decision in the key's checkpoint (as
``tubeless approve|deny`` does) and, once none is left, runs the key again: the run resumes
from its checkpoint, with the same run id, and its events go on numbering where they stopped.
Without a store a call that needs approval fails the run with ``TUBELESS_APPROVAL_REQUIRED``.

Runs live in memory for the life of the runner (``tubeless serve``'s run manager keeps them in
its stores instead).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from pydantic_core import to_jsonable_python

from tubeless.agent import ApprovalWaiting
from tubeless.agent._spi import OBSERVER
from tubeless.errors import (
    OPTIONS_VALIDATION_FAILED,
    RUN_CANCELLED,
    RUN_FAILED,
    SERVE_CONFLICT,
    SERVE_NOT_FOUND,
    UNKNOWN_ERROR,
)
from tubeless.pipeline import CancelToken
from tubeless.pipeline._spi import original_exception
from tubeless.schema import SchemaValidationError
from tubeless.serve.protocols._feed import Feed
from tubeless.serve.protocols._runner import (
    Caller,
    EntryInfo,
    PendingApproval,
    ProjectInfo,
    RunEvent,
    RunnerError,
    RunStatus,
    RunView,
)

if TYPE_CHECKING:
    from tubeless.durable import CheckpointStore
    from tubeless.pipeline import Pipeline, PipelineRun
    from tubeless.project import Project
    from tubeless.tracing import TraceSink

__all__ = ["LocalRunner", "project_info"]


def _now_ms() -> int:
    return int(time.time() * 1000)


def project_info(project: Project) -> ProjectInfo:
    """The project and its entries, as the protocols describe them."""
    entries: dict[str, EntryInfo] = {}
    for kind, group in (("agent", project.agents), ("pipeline", project.pipelines)):
        for entry_id, pipeline in group.items():
            entries[entry_id] = _entry_info(entry_id, kind, pipeline)
    first = project.default if project.default in entries else next(iter(entries), None)
    version = entries[first].implementation_version if first is not None else None
    return ProjectInfo(
        id=project.id,
        name=project.name,
        description=project.description,
        default=project.default,
        version=version or "0",
        entries=entries,
    )


def _entry_info(entry_id: str, kind: str, pipeline: Pipeline) -> EntryInfo:
    schema = pipeline.options_schema
    inputs: Any = to_jsonable_python(schema.json_schema()) if schema is not None else {}
    result: Any = None
    if pipeline.result_schema is not None:
        result = to_jsonable_python(pipeline.result_schema.json_schema())
    elif kind == "agent":
        metadata = getattr(pipeline.steps[0], "agent", None) or {}
        result = to_jsonable_python(metadata.get("resultJsonSchema")) or None
    return EntryInfo(
        id=entry_id,
        kind="agent" if kind == "agent" else "pipeline",
        name=pipeline.name,
        description=pipeline.description,
        input_json_schema=inputs,
        result_json_schema=result,
        implementation_version=pipeline.implementation_version,
    )


class _Run:
    """One run's mutable record (the runner's own; callers get :class:`RunView` copies)."""

    def __init__(self, entry: str, key: str, caller: Caller, raw_input: Any) -> None:
        self.run_id = f"{entry}:{uuid.uuid4()}"
        self.entry = entry
        self.key = key
        self.caller = caller
        self.input = raw_input
        self.status: RunStatus = "running"
        self.result: Any = None
        self.error: dict[str, str] | None = None
        self.pending: list[PendingApproval] = []
        self.decided: set[str] = set()
        self.events: list[RunEvent] = []
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.token = CancelToken()
        self.created_at_ms = self.updated_at_ms = _now_ms()

    def emit(self, kind: Any, **fields: Any) -> None:
        self.events.append(RunEvent(seq=len(self.events) + 1, kind=kind, **fields))
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    def become(self, status: RunStatus) -> None:
        self.status = status
        self.updated_at_ms = _now_ms()
        self.emit("status", status=status)

    def view(self) -> RunView:
        return RunView(
            run_id=self.run_id,
            entry=self.entry,
            key=self.key,
            status=self.status,
            result=self.result,
            error=self.error,
            pending=tuple(p for p in self.pending if p.call_id not in self.decided),
            created_at_ms=self.created_at_ms,
            updated_at_ms=self.updated_at_ms,
            input=self.input,
            events=len(self.events),
        )


class LocalRunner:
    """Runs ``project``'s entries in this process (see the module docstring).

    Args:
        project: The loaded project (``tubeless.load_project``).
        checkpoints: The store every run commits to (approvals wait only with one).
        trace: Sinks the runs' traces go to (flushed, never closed, by each run).
    """

    def __init__(
        self,
        project: Project,
        *,
        checkpoints: CheckpointStore | None = None,
        trace: TraceSink | list[TraceSink] | None = None,
    ) -> None:
        self._project = project
        self._info = project_info(project)
        self._store = checkpoints
        self._trace = trace
        self._runs: dict[str, _Run] = {}

    @property
    def info(self) -> ProjectInfo:
        return self._info

    def _entry(self, entry: str) -> Pipeline:
        if entry not in self._info.entries:
            known = ", ".join(repr(e) for e in self._info.entries)
            raise RunnerError(SERVE_NOT_FOUND, f"No entry {entry!r}; the entries are {known}")
        return self._project.get(entry)

    def validate(self, entry: str, raw_input: Any) -> None:
        schema = self._entry(entry).options_schema
        if schema is None:
            return
        try:
            schema.validate(raw_input)
        except SchemaValidationError as exc:
            issues = tuple(issue.format() for issue in exc.issues)
            raise RunnerError(
                OPTIONS_VALIDATION_FAILED,
                f"The input of entry {entry!r} was rejected: {'; '.join(issues)}",
                issues,
            ) from None

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
        for other in self._runs.values():
            if other.key != key:
                continue
            if other.caller != caller:  # a key is its first caller's: no one else resumes it
                raise RunnerError(SERVE_CONFLICT, f"Key {key!r} belongs to another caller")
            if other.status == "running":
                raise RunnerError(SERVE_CONFLICT, f"A run of key {key!r} is running")
        run = _Run(entry, key, caller, raw_input)
        self._runs[run.run_id] = run
        self._launch(run, restart=restart)
        return run.view()

    def _launch(self, run: _Run, *, restart: bool = False) -> None:
        run.token = CancelToken()
        run.become("running")
        task = asyncio.get_running_loop().create_task(self._execute(run, restart))
        task.add_done_callback(lambda done: _ended(run, done))
        run.task = task

    async def _execute(self, run: _Run, restart: bool) -> None:
        pipeline = self._project.get(run.entry)
        OBSERVER.set(Feed(run.emit))  # this task's context only
        options: dict[str, Any] = {"signal": run.token, "trace": self._trace}
        if self._store is not None:
            options.update(checkpoints=self._store, checkpoint_key=run.key, restart=restart)
        try:
            record = await pipeline.run(run.input, **options)
        except asyncio.CancelledError:
            run.error = {"code": RUN_CANCELLED, "message": "The run was cancelled."}
            run.become("cancelled")
            raise
        except Exception as exc:  # a failure the run record could not hold
            run.error = {"code": getattr(exc, "code", UNKNOWN_ERROR), "message": str(exc)}
            run.become("failed")
            return
        self._settle(run, record)

    def _settle(self, run: _Run, record: PipelineRun) -> None:
        if record.status == "completed":
            run.result = to_jsonable_python(record.value)
            run.error = None
            run.become("completed")
            return
        first = record.errors[0] if record.errors else None
        waits = [original_exception(error.exception) for error in record.errors]
        if record.status == "failed" and waits and isinstance(waits[0], ApprovalWaiting):
            run.pending = [
                _pending(request)
                for waiting in waits
                if isinstance(waiting, ApprovalWaiting)
                for request in waiting.pending
            ]
            run.decided = set()
            run.become("waiting")
            return
        if first is None:
            run.error = {"code": RUN_FAILED, "message": "The run failed."}
        else:
            run.error = {"code": first.source_code or first.code, "message": first.format()}
        run.become("cancelled" if record.status == "cancelled" else "failed")

    def _own(self, run_id: str, caller: Caller) -> _Run:
        run = self._runs.get(run_id)
        if run is None or run.caller != caller:
            raise RunnerError(SERVE_NOT_FOUND, f"No run {run_id!r}")
        return run

    def get(self, run_id: str, *, caller: Caller = None) -> RunView:
        return self._own(run_id, caller).view()

    def find(self, key: str, *, caller: Caller = None) -> RunView | None:
        found = [r for r in self._runs.values() if r.key == key and r.caller == caller]
        return found[-1].view() if found else None

    def list(self, *, caller: Caller = None) -> list[RunView]:
        return [run.view() for run in self._runs.values() if run.caller == caller]

    async def events(self, run_id: str, *, since: int = 0) -> AsyncIterator[RunEvent]:
        run = self._runs.get(run_id)
        if run is None:
            raise RunnerError(SERVE_NOT_FOUND, f"No run {run_id!r}")
        seen = since
        while True:
            changed = run.changed
            while seen < len(run.events):
                event = run.events[seen]
                seen += 1
                yield event
                if event.kind == "status" and event.status != "running":
                    return
            if run.status != "running":
                return
            await changed.wait()

    async def wait(self, run_id: str) -> RunView:
        run = self._runs.get(run_id)
        if run is None:
            raise RunnerError(SERVE_NOT_FOUND, f"No run {run_id!r}")
        while run.status == "running":
            await run.changed.wait()
        return run.view()

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
        run = self._own(run_id, caller)
        if run.status != "waiting":
            raise RunnerError(SERVE_CONFLICT, f"Run {run_id!r} is {run.status}, not waiting")
        found = [p for p in run.pending if p.call_id == call_id and p.call_id not in run.decided]
        if not found:
            raise RunnerError(SERVE_NOT_FOUND, f"Run {run_id!r} waits for no call {call_id!r}")
        request = found[0]
        if request.digest != digest:
            raise RunnerError(
                SERVE_CONFLICT,
                f"Digest {digest!r} is not the digest of pending call {call_id!r}",
            )
        assert self._store is not None  # only a checkpointed run waits
        await asyncio.to_thread(_record, self._store, run.key, request, approve, reason)
        run.decided.add(call_id)
        if all(p.call_id in run.decided for p in run.pending):
            run.pending = []
            run.decided = set()
            self._launch(run)
        return run.view()

    async def cancel(self, run_id: str, *, caller: Caller = None) -> RunView:
        run = self._own(run_id, caller)
        if run.status == "waiting":
            run.pending, run.decided = [], set()
            run.error = {"code": RUN_CANCELLED, "message": "The run was cancelled."}
            run.become("cancelled")
        elif run.status == "running":
            # The token asks cooperative handlers to stop; cancelling the task also cancels the
            # handlers in flight (the run settles them and records the cancellation).
            run.token.cancel("cancelled by the client")
            if run.task is not None:
                run.task.cancel()
            await self.wait(run_id)
        return run.view()

    async def close(self) -> None:
        """Cancel the runs still running and wait for them (a server shutting down)."""
        tasks = [r.task for r in self._runs.values() if r.task is not None and not r.task.done()]
        for run in self._runs.values():
            run.token.cancel("the server is stopping")
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _ended(run: _Run, task: asyncio.Task[None]) -> None:
    """A run task that ended without settling its run (cancelled before it started, say)."""
    if run.task is not task or run.status != "running":
        return
    run.error = {"code": RUN_CANCELLED, "message": "The run was cancelled."}
    run.become("cancelled")


def _pending(request: Any) -> PendingApproval:
    return PendingApproval(
        call_id=str(request["call_id"]),
        tool=str(request["tool"]),
        input=to_jsonable_python(request.get("input")),
        digest=str(request["digest"]),
        route=str(request["route"]),
        turn=int(request["turn"]),
    )


def _record(
    store: CheckpointStore, key: str, request: PendingApproval, approve: bool, reason: str | None
) -> None:
    """Record the decision in the key's checkpoint, as ``tubeless approve|deny`` does."""
    from tubeless.durable._spi import record_decision

    with store.acquire(key) as lease:
        text = lease.read()
        assert text is not None  # a waiting run committed its batch first
        lease.write(
            record_decision(
                text,
                key,
                request.call_id,
                approved=approve,
                reason=reason if not approve else None,
                route=request.route,
            )
        )
