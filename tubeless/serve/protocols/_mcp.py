"""MCP server: each entry of the project is a tool, on the official SDK's low-level server.

* ``tools/list``: one tool per entry; its name is the entry id, its description the entry's,
  its input schema the entry's input JSON Schema. MCP requires an object schema for tool
  arguments: an entry whose input is not an object takes ``{"input": <value>}`` instead.
* ``tools/call``: validates the arguments (a rejected input is a tool error with
  ``TUBELESS_OPTIONS_VALIDATION_FAILED``, not a protocol failure), runs the entry through the
  :class:`ProjectRunner` (limits and budgets of the file apply), sends the run's progress as
  ``notifications/progress`` when the client gave a progress token, and answers the result as
  structured content: the result itself when it is an object, else ``{"result": <value>}``.
  A failed run is a tool error whose text starts with the run's code.
* A call that waits for approval asks the person through MCP elicitation when the client
  declared it (``{approve: boolean, reason?: string}``; anything but an accepted yes denies);
  otherwise the tool call fails with ``TUBELESS_APPROVAL_REQUIRED`` and the run is cancelled.
* A cancelled request cancels its run.

``mcp_server(runner)`` is the SDK ``Server``; ``serve_stdio`` runs it on stdin/stdout
(``tubeless mcp-serve``); ``mcp_http_app`` is the streamable-HTTP app ``tubeless serve`` mounts
at ``/mcp``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tubeless._version import __version__
from tubeless.errors import APPROVAL_REQUIRED, RUN_CANCELLED, SERVE_NOT_FOUND
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
    import mcp_types as types
    from mcp.server import Server
    from starlette.applications import Starlette

__all__ = ["mcp_http_app", "mcp_server", "progress_message", "serve_stdio", "tool_input_schema"]

#: Where a non-object input goes among the tool's arguments.
WRAPPED = "input"

#: Reads the caller's identity from a request's headers (``None`` on stdio).
CallerOf = Callable[[Mapping[str, str] | None], Caller]


def tool_input_schema(entry: EntryInfo) -> dict[str, Any]:
    """The tool's input schema: the entry's when it is an object schema, else one wrapping it
    under ``input`` (MCP tool arguments are always an object)."""
    schema = dict(entry.input_json_schema)
    if schema.get("type") == "object":
        return schema
    return {"type": "object", "properties": {WRAPPED: schema}, "required": [WRAPPED]}


def _raw_input(entry: EntryInfo, arguments: Mapping[str, Any] | None) -> Any:
    if entry.input_json_schema.get("type") == "object":
        return dict(arguments or {})
    return (arguments or {}).get(WRAPPED)


def progress_message(event: RunEvent) -> str | None:
    """One progress line for an event (names and ids only, never values), or ``None``."""
    if event.kind in ("step_started", "step_finished"):
        verb = "started" if event.kind == "step_started" else "finished"
        return f"turn {event.turn}: {event.step} {verb}"
    if event.kind == "call":
        return f"turn {event.turn}: call {event.call_id!r} to tool {event.tool!r}"
    if event.kind == "outcome":
        ok = isinstance(event.data, Mapping) and event.data.get("ok") is True
        return f"turn {event.turn}: call {event.call_id!r} {'ok' if ok else 'failed'}"
    if event.kind == "status":
        return f"run {event.status}"
    return None


def mcp_server(runner: ProjectRunner, *, caller_of: CallerOf | None = None) -> Server[Any]:
    """The SDK server exposing ``runner``'s entries as tools (see the module docstring)."""
    import mcp_types as types
    from mcp.server import Server

    info = runner.info

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=entry.id,
                    title=entry.name,
                    description=entry.description or entry.name or entry.id,
                    input_schema=tool_input_schema(entry),
                )
                for entry in info.entries.values()
            ]
        )

    async def call_tool(
        ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        caller = caller_of(_headers(ctx)) if caller_of else None
        entry = info.entries.get(params.name)
        if entry is None:
            return _error(SERVE_NOT_FOUND, f"No tool {params.name!r}")
        try:
            if params.request_state:  # the client's answers to the approvals we asked for
                view = runner.get(params.request_state, caller=caller)
                await _apply(runner, view, params.input_responses or {}, caller)
            else:
                raw = _raw_input(entry, params.arguments)
                view = await runner.start(entry.id, raw, caller=caller)
        except RunnerError as exc:
            return _error(exc.code, exc.message)
        try:
            followed = await _follow(runner, view, ctx, caller)
        except asyncio.CancelledError:
            await asyncio.shield(runner.cancel(view.run_id, caller=caller))
            raise
        if isinstance(followed, RunView):
            return _answer(followed)
        assert isinstance(followed, types.InputRequiredResult)
        return followed

    return Server(
        info.id,
        version=__version__,
        title=info.name,
        description=info.description,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _headers(ctx: Any) -> Mapping[str, str] | None:
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    return dict(headers) if headers is not None else None


async def _follow(runner: ProjectRunner, view: RunView, ctx: Any, caller: Caller) -> Any:
    """Report the run's progress until it ends, asking for the approvals it waits for on the
    way: the run's final view, or the ``InputRequiredResult`` that asks the client."""
    sent = 0
    since = 0
    while True:
        async for event in runner.events(view.run_id, since=since):
            since = event.seq
            message = progress_message(event)
            if message is not None:
                sent += 1
                await ctx.session.report_progress(sent, None, message)
        view = runner.get(view.run_id, caller=caller)
        if view.status == "running":  # resumed between two reads: follow on
            continue
        if view.status != "waiting":
            return view
        asked = await _elicit(runner, view, ctx, caller)
        if asked is False:
            await runner.cancel(view.run_id, caller=caller)
            return view
        if asked is not True:
            return asked


def _approval_form(pending: PendingApproval) -> tuple[str, Any]:
    arguments = json.dumps(pending.input, ensure_ascii=False)[:2000]
    message = (
        f"The agent wants to call tool {pending.tool!r} (call {pending.call_id!r}) with "
        f"{arguments}. Approve it?"
    )
    schema = {
        "type": "object",
        "properties": {
            "approve": {"type": "boolean", "title": "Approve this call"},
            "reason": {"type": "string", "title": "Why (shown to the agent when denied)"},
        },
        "required": ["approve"],
    }
    return message, schema


async def _elicit(runner: ProjectRunner, view: RunView, ctx: Any, caller: Caller) -> Any:
    """Ask the person for each pending call through elicitation: ``True`` once answered,
    ``False`` when the client cannot be asked (the call then fails with the approval code), or
    an ``InputRequiredResult`` asking a client that speaks the request-state round trip."""
    import mcp_types as types

    wanted = types.ClientCapabilities(elicitation=types.ElicitationCapability())
    if not ctx.session.check_client_capability(wanted):
        return False
    for pending in view.pending:
        message, schema = _approval_form(pending)
        try:
            answer = await ctx.session.elicit_form(message, schema)
        except Exception:  # no back channel (2026-07-28+): ask in the result instead
            return types.InputRequiredResult(
                input_requests={
                    p.call_id: types.ElicitRequest(
                        params=types.ElicitRequestFormParams(
                            message=_approval_form(p)[0], requested_schema=_approval_form(p)[1]
                        )
                    )
                    for p in view.pending
                },
                request_state=view.run_id,
            )
        await _decide(runner, view, pending, answer, caller)
    return True


async def _apply(
    runner: ProjectRunner, view: RunView, responses: Mapping[str, Any], caller: Caller
) -> None:
    """Decide every pending call from the client's input responses (no answer denies)."""
    if view.status != "waiting":
        return
    for pending in view.pending:
        await _decide(runner, view, pending, responses.get(pending.call_id), caller)


async def _decide(
    runner: ProjectRunner, view: RunView, pending: PendingApproval, answer: Any, caller: Caller
) -> None:
    """Only an accepted form whose ``approve`` is true approves; anything else denies."""
    action = getattr(answer, "action", None)
    content = getattr(answer, "content", None) or {}
    approve = action == "accept" and content.get("approve") is True
    reason = content.get("reason")
    await runner.answer(
        view.run_id,
        pending.call_id,
        digest=pending.digest,
        approve=approve,
        reason=reason if isinstance(reason, str) and reason else None,
        caller=caller,
    )


def _error(code: str, message: str) -> types.CallToolResult:
    import mcp_types as types

    return types.CallToolResult(
        content=[types.TextContent(text=f"{code}: {message}")],
        structured_content={"error": {"code": code, "message": message}},
        is_error=True,
    )


def _answer(view: RunView) -> types.CallToolResult:
    import mcp_types as types

    if view.status == "completed":
        result = view.result
        structured = result if isinstance(result, dict) else {"result": result}
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(result, ensure_ascii=False))],
            structured_content=structured,
        )
    if view.status == "waiting" or (view.pending and view.status == "cancelled"):
        calls = ", ".join(f"{p.call_id!r} (tool {p.tool!r})" for p in view.pending)
        return _error(
            APPROVAL_REQUIRED,
            f"The run needs approval of call {calls} and this client cannot be asked "
            "(no MCP elicitation); nothing that needed approval ran",
        )
    error = view.error or {"code": RUN_CANCELLED, "message": "The run was cancelled."}
    return _error(error["code"], error["message"])


async def serve_stdio(runner: ProjectRunner) -> None:
    """Serve ``runner``'s entries over stdin/stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    server = mcp_server(runner)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def mcp_http_app(
    runner: ProjectRunner,
    *,
    caller_of: CallerOf | None = bearer_identity,
    path: str = "/mcp",
    allowed_hosts: list[str] | None = None,
) -> Starlette:
    """The streamable-HTTP app (stateless, answers as SSE) serving ``runner`` at ``path``.
    Authentication is the mounting app's middleware; ``caller_of`` reads the caller from each
    request's headers so that runs stay with their token; ``allowed_hosts`` turns on the SDK's
    own Host check (``None``: the mounting app checks Host)."""
    from mcp.server.transport_security import TransportSecuritySettings

    server = mcp_server(runner, caller_of=caller_of)
    # Without a list, Host checks are the mounting app's (serve has its own allowlist); the
    # SDK would otherwise allow only loopback names.
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=allowed_hosts is not None,
        allowed_hosts=allowed_hosts or [],
    )
    return server.streamable_http_app(
        streamable_http_path=path, stateless_http=True, transport_security=security
    )
