"""AG-UI 1.0: ``POST /ag-ui/{entry}`` takes a ``RunAgentInput`` and answers the run as SSE.

Built on ``ag-ui-protocol``'s own models and ``EventEncoder``. One request is one AG-UI run::

    RUN_STARTED
      STEP_STARTED decide ... STEP_FINISHED decide          (metadata {"turn": n})
      TOOL_CALL_START / TOOL_CALL_ARGS / TOOL_CALL_END       each accepted call
      TOOL_CALL_RESULT                                       each outcome (JSON text)
      STEP_STARTED reduce ... STEP_FINISHED reduce
      STATE_SNAPSHOT                                         the committed state
    RUN_FINISHED (outcome success + result | interrupt | cancelled)  or  RUN_ERROR (code)

The input: ``forwardedProps.input`` when given; otherwise, when the entry's input schema is a
string or has exactly one required string property, the text of the last user message. It is
validated before anything is streamed: a malformed body or a refused input is a JSON error
(422, or 404 for an unknown entry), never a started run. ``threadId`` is the checkpoint key: a
new input on a thread whose last run ended starts the thread over (each request is one AG-UI
run), and a thread that waits for answers takes only ``resume[]`` (409 otherwise).

Approvals: a run that waits ends with ``outcome: interrupt``, one interrupt per pending call
whose id is the call's digest. The next request on the thread answers them in ``resume[]``: an
entry whose payload is ``{"approve": true}`` approves; any other payload, a ``cancelled``
entry, or no entry at all denies. The run then continues from its checkpoint and the request
streams what it does next. A client that goes away mid-stream cancels the run (its checkpoint
stays resumable).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from tubeless.errors import (
    OPTIONS_VALIDATION_FAILED,
    RUN_FAILED,
    SERVE_BUSY,
    SERVE_CONFLICT,
    SERVE_NOT_FOUND,
)
from tubeless.serve.protocols._identity import bearer_identity
from tubeless.serve.protocols._runner import (
    Caller,
    EntryInfo,
    PendingApproval,
    ProjectRunner,
    RunEvent,
    RunnerError,
    RunView,
)

if TYPE_CHECKING:
    from ag_ui.core import BaseEvent, RunAgentInput
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

__all__ = ["ag_ui_routes", "entry_input", "translate"]

#: Names the request's caller (default: a hash of its bearer token; ``None``: anonymous).
CallerOf = Callable[["Request"], Caller]

_APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {"approve": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approve"],
}


def ag_ui_routes(
    runner: ProjectRunner,
    *,
    caller_of: CallerOf | None = bearer_identity,
    prefix: str = "/ag-ui",
) -> list[Route]:
    """The ``POST {prefix}/{entry}`` route over ``runner`` (see the module docstring)."""
    from starlette.routing import Route

    async def endpoint(request: Request) -> Response:
        caller = caller_of(request) if caller_of is not None else None
        return await _handle(runner, request, caller)

    return [Route(prefix + "/{entry}", endpoint, methods=["POST"])]


def _refusal(status: int, code: str, message: str) -> Response:
    from starlette.responses import JSONResponse

    headers = {"retry-after": "1"} if status == 429 else None
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def _status_of(error: RunnerError) -> int:
    return {SERVE_NOT_FOUND: 404, SERVE_CONFLICT: 409, SERVE_BUSY: 429}.get(error.code, 422)


async def _handle(runner: ProjectRunner, request: Request, caller: Caller) -> Response:
    from ag_ui.core import RunAgentInput
    from pydantic import ValidationError

    entry_id = request.path_params["entry"]
    entry = runner.info.entries.get(entry_id)
    if entry is None:
        return _refusal(404, SERVE_NOT_FOUND, f"No entry {entry_id!r}")
    try:
        body = await request.json()
        agent_input = RunAgentInput.model_validate(body)
    except RecursionError:
        return _refusal(422, OPTIONS_VALIDATION_FAILED, "The body nests too deeply")
    except (ValueError, ValidationError) as exc:
        where = ""
        if isinstance(exc, ValidationError):
            where = "; ".join(
                ".".join(str(p) for p in e["loc"]) + ": " + e["msg"]
                for e in exc.errors(include_input=False, include_url=False)[:5]
            )
        return _refusal(
            422, OPTIONS_VALIDATION_FAILED, f"The body is not a RunAgentInput: {where or exc}"
        )
    try:
        view, since = await _begin(runner, entry, agent_input, caller)
    except RunnerError as exc:
        return _refusal(_status_of(exc), exc.code, exc.message)
    return _stream(runner, agent_input, view, since, caller)


async def _begin(
    runner: ProjectRunner, entry: EntryInfo, agent_input: RunAgentInput, caller: Caller
) -> tuple[RunView, int]:
    """Resume the thread's waiting run with the answers, or start a run; the run and the
    event after which this request's stream begins."""
    key = agent_input.thread_id
    waiting = runner.find(key, caller=caller)
    if waiting is not None and waiting.status == "running":
        raise RunnerError(SERVE_CONFLICT, f"A run of thread {key!r} is running")
    if agent_input.resume:
        if waiting is None or waiting.status != "waiting" or waiting.entry != entry.id:
            raise RunnerError(
                SERVE_CONFLICT, f"Thread {key!r} has no run of {entry.id!r} waiting for answers"
            )
        since = waiting.events
        answers = _answers(agent_input)
        for pending in waiting.pending:
            approve, reason = answers.get(pending.digest, (False, None))
            await runner.answer(
                waiting.run_id,
                pending.call_id,
                digest=pending.digest,
                approve=approve,
                reason=reason,
                caller=caller,
            )
        return runner.get(waiting.run_id, caller=caller), since
    if waiting is not None and waiting.status == "waiting":
        raise RunnerError(
            SERVE_CONFLICT,
            f"Thread {key!r} waits for answers to its interrupts: send them in resume[]",
        )
    raw = entry_input(entry, agent_input)
    # A new input on a thread whose run ended is a new run of the thread (each request is one
    # AG-UI run); an unknown thread resumes whatever its checkpoint holds.
    view = await runner.start(entry.id, raw, key=key, caller=caller, restart=waiting is not None)
    return view, 0


def _answers(agent_input: RunAgentInput) -> dict[str, tuple[bool, str | None]]:
    """Interrupt id → (approve, reason); a malformed answer denies."""
    answers: dict[str, tuple[bool, str | None]] = {}
    for item in agent_input.resume or ():
        payload = item.payload
        approve = (
            item.status == "resolved"
            and isinstance(payload, Mapping)
            and payload.get("approve") is True
        )
        reason = payload.get("reason") if isinstance(payload, Mapping) else None
        answers[item.interrupt_id] = (approve, reason if isinstance(reason, str) else None)
    return answers


def entry_input(entry: EntryInfo, agent_input: RunAgentInput) -> Any:
    """The entry's raw input: ``forwardedProps.input``, else the last user message's text when
    the input schema is a string or has exactly one required string property, else ``None``."""
    props = agent_input.forwarded_props
    if isinstance(props, Mapping) and "input" in props:
        return props["input"]
    schema = entry.input_json_schema
    text = _last_user_text(agent_input)
    if schema.get("type") == "string":
        return text
    required = [str(name) for name in schema.get("required", ())]
    properties = schema.get("properties") or {}
    if len(required) == 1 and (properties.get(required[0]) or {}).get("type") == "string":
        return None if text is None else {required[0]: text}
    return None


def _last_user_text(agent_input: RunAgentInput) -> str | None:
    for message in reversed(agent_input.messages):
        if getattr(message, "role", None) != "user":
            continue
        content: Any = message.content
        if isinstance(content, str):
            return content
        texts = [str(getattr(part, "text", "")) for part in content or () if _is_text(part)]
        return "".join(texts) if texts else None
    return None


def _is_text(part: Any) -> bool:
    return getattr(part, "type", None) == "text"


def _stream(
    runner: ProjectRunner, agent_input: RunAgentInput, view: RunView, since: int, caller: Caller
) -> Response:
    from ag_ui.core import RunStartedEvent
    from ag_ui.encoder import EventEncoder

    encoder = EventEncoder()
    thread, run = agent_input.thread_id, agent_input.run_id

    async def body() -> AsyncIterator[str]:
        finished = False
        try:
            yield encoder.encode(
                RunStartedEvent(thread_id=thread, run_id=run, protocol_version="1.0")
            )
            async for event in runner.events(view.run_id, since=since):
                for translated in translate(event, runner, view.run_id, thread, run, caller):
                    yield encoder.encode(translated)
                if event.kind == "status" and event.status != "running":
                    finished = True
        finally:
            if not finished:  # the client went away mid-run: stop the run
                _detach(runner.cancel(view.run_id, caller=caller))

    return _stream_response()(
        body(),
        media_type=encoder.get_content_type(),
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


#: Cancellations started by a stream that ended early (kept until done: tasks are weakly held).
_DETACHED: set[asyncio.Task[Any]] = set()


def _detach(work: Coroutine[Any, Any, Any]) -> None:
    task = asyncio.get_running_loop().create_task(work)
    _DETACHED.add(task)
    task.add_done_callback(_DETACHED.discard)


def _stream_response() -> type[Response]:
    """A streaming response that notices a client going away while nothing is being sent
    (Starlette only notices at the next write under ASGI 2.4 servers such as uvicorn)."""
    import anyio
    from starlette.responses import StreamingResponse

    class Stream(StreamingResponse):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            async with anyio.create_task_group() as group:

                async def stream() -> None:
                    await self.stream_response(send)
                    group.cancel_scope.cancel()

                group.start_soon(stream)
                await self.listen_for_disconnect(receive)
                group.cancel_scope.cancel()

    return Stream


def translate(
    event: RunEvent, runner: ProjectRunner, run_id: str, thread: str, run: str, caller: Caller
) -> list[BaseEvent]:
    """The AG-UI events for one run event (none for a run that goes on running)."""
    from ag_ui import core

    meta = {"turn": event.turn} if event.turn is not None else None
    call_id = f"{event.turn}/{event.call_id}"
    if event.kind == "step_started":
        return [core.StepStartedEvent(step_name=str(event.step), metadata=meta)]
    if event.kind == "step_finished":
        return [core.StepFinishedEvent(step_name=str(event.step), metadata=meta)]
    if event.kind == "call":
        return [
            core.ToolCallStartEvent(tool_call_id=call_id, tool_call_name=str(event.tool)),
            core.ToolCallArgsEvent(tool_call_id=call_id, delta=_json(event.data)),
            core.ToolCallEndEvent(tool_call_id=call_id),
        ]
    if event.kind == "outcome":
        return [
            core.ToolCallResultEvent(
                message_id=f"{call_id}/result", tool_call_id=call_id, content=_json(event.data)
            )
        ]
    if event.kind == "state":
        return [core.StateSnapshotEvent(snapshot=event.data, metadata=meta)]
    if event.status is None or event.status == "running":
        return []
    final = runner.get(run_id, caller=caller)
    if final.status == "waiting":
        interrupts = [_interrupt(p) for p in final.pending]
        outcome = core.RunFinishedInterruptOutcome(interrupts=interrupts)
        return [core.RunFinishedEvent(thread_id=thread, run_id=run, outcome=outcome)]
    if final.status == "completed":
        success = core.RunFinishedSuccessOutcome()
        result = final.result
        return [core.RunFinishedEvent(thread_id=thread, run_id=run, result=result, outcome=success)]
    if final.status == "cancelled":
        cancelled = core.RunFinishedCancelledOutcome()
        return [core.RunFinishedEvent(thread_id=thread, run_id=run, outcome=cancelled)]
    error = final.error or {"code": RUN_FAILED, "message": "The run failed."}
    return [core.RunErrorEvent(message=error["message"], code=error["code"])]


def _interrupt(pending: PendingApproval) -> Any:
    from ag_ui.core import Interrupt

    return Interrupt(
        id=pending.digest,
        reason="tool_approval",
        message=f"Approve call {pending.call_id!r} to tool {pending.tool!r}?",
        tool_call_id=f"{pending.turn}/{pending.call_id}",
        response_schema=_APPROVAL_SCHEMA,
        metadata={"call_id": pending.call_id, "tool": pending.tool, "input": pending.input},
    )


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
