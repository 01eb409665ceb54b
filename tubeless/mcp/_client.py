"""Connections to MCP servers, built on the official SDK (imported only here, only to connect).

One :func:`open_session` per server per agent invocation: the SDK's ``Client`` over
``stdio_client`` (a subprocess in its own session, stopped when the context closes, even on
cancellation; its stderr goes to the ``tubeless.run`` logger) or ``streamable_http_client``,
with a :class:`~tubeless.mcp._screen.Screen` between transport and SDK that keeps the listing
as sent. The handshake and the tool listing happen on entry; each request may take
``timeout_s``.

How failures map:

- the result's ``isError`` → ``ToolError(MCP_TOOL_ERROR, <its text>)`` (an outcome);
- a JSON-RPC error answer, a result that is not valid MCP, structured content that breaks the
  tool's output schema, or a value past ``max_result_bytes`` → ``ToolError(MCP_PROTOCOL_ERROR)``;
- a request past ``timeout_s`` → :class:`McpError` ``TUBELESS_MCP_TIMEOUT`` (fatal);
- a closed connection, a server that died or cannot start, any transport failure →
  ``TUBELESS_MCP_CONNECTION_FAILED`` (fatal).

Cancellation (the run's token, or the task) abandons the request; the SDK then sends
``notifications/cancelled`` for it before the error propagates.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from tubeless._version import __version__
from tubeless.agent import ToolContext, ToolError
from tubeless.frozen import thaw
from tubeless.mcp._content import result_text, result_value
from tubeless.mcp._errors import (
    MCP_PROTOCOL_ERROR,
    MCP_TOOL_ERROR,
    MCP_TOOL_MISSING,
    MCP_TOOL_UNUSABLE,
    MCP_UNAVAILABLE,
    McpError,
)
from tubeless.mcp._schemas import input_validator, output_problem, output_validator
from tubeless.mcp._screen import Screen
from tubeless.mcp._transport import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    Wire,
    failure,
    transport,
)
from tubeless.pipeline import RunCancelledError
from tubeless.schema import Schema

if TYPE_CHECKING:
    from mcp import Client

    from tubeless.mcp._server import McpServer

__all__ = ["McpSession", "open_session"]

_MAX_MESSAGE = 4096
_MAX_PAGES = 100


def _require_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise McpError(
            MCP_UNAVAILABLE,
            "MCP servers need the optional mcp SDK: pip install 'tubeless[mcp]'",
        ) from exc


async def _list_tools(client: Client, screen: Screen) -> dict[str, dict[str, Any]]:
    """Every tool the server lists, as it sent them (the SDK's parse is screened)."""
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        cursor = page.next_cursor
        if cursor is None:
            break
    return dict(screen.listed)


class McpSession:
    """One open connection: the server's tools by name (as listed), and calls to them."""

    def __init__(
        self, server: McpServer, client: Client, tools: Mapping[str, Mapping[str, Any]]
    ) -> None:
        self.server = server
        self.tools = dict(tools)
        self._client = client
        self._inputs: dict[str, Schema] = {}
        self._outputs: dict[str, Schema | str] = {}

    def describe(self, name: str) -> tuple[str, Mapping[str, Any]]:
        """The server's description and input schema of tool ``name``.

        Raises:
            McpError: ``TUBELESS_MCP_TOOL_MISSING`` when the server does not list it,
                ``TUBELESS_MCP_TOOL_UNUSABLE`` when it cannot be called (an input schema
                tubeless cannot use, or task-augmented execution required).
        """
        tool = self.tools.get(name)
        if tool is None:
            offered = ", ".join(sorted(self.tools)) or "none"
            raise McpError(
                MCP_TOOL_MISSING,
                f"MCP server {self.server.name!r} offers no tool {name!r} (it offers: {offered}).",
                server=self.server.name,
            )
        if name not in self._inputs:
            self._inputs[name] = self._usable(name, tool)
        description = tool.get("description")
        return description if isinstance(description, str) else "", tool["inputSchema"]

    def validator(self, name: str) -> Schema:
        """How tool ``name``'s arguments are validated: its input schema in its own dialect,
        filling no defaults (the server gets the arguments as chosen)."""
        self.describe(name)
        return self._inputs[name]

    def _usable(self, name: str, tool: Mapping[str, Any]) -> Schema:
        execution = tool.get("execution")
        if isinstance(execution, Mapping) and execution.get("taskSupport") == "required":
            found: Schema | str = (
                "it requires task-augmented execution (execution.taskSupport: required), "
                "which tubeless does not use"
            )
        else:
            found = input_validator(tool.get("inputSchema"))
        if isinstance(found, str):
            raise McpError(
                MCP_TOOL_UNUSABLE,
                f"MCP server {self.server.name!r} offers tool {name!r}, which cannot be called: "
                f"{found}.",
                server=self.server.name,
            )
        return found

    def _output_problem(self, name: str, structured: Any) -> str | None:
        schema = self.tools.get(name, {}).get("outputSchema")
        if schema is None:
            return None
        if name not in self._outputs:
            self._outputs[name] = output_validator(name, schema)
        return output_problem(name, self._outputs[name], structured)

    async def call(self, name: str, arguments: Any, ctx: ToolContext) -> Any:
        """Call tool ``name``: its value as ``tubeless.mcp._content`` makes it."""
        from mcp import MCPError
        from pydantic import ValidationError

        signal = ctx.signal
        signal.raise_if_cancelled()
        request = asyncio.ensure_future(self._client.call_tool(name, thaw(arguments)))
        stop = asyncio.ensure_future(signal.wait())
        try:
            await asyncio.wait({request, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not request.done():
                # Abandoning the request makes the SDK send notifications/cancelled for it.
                request.cancel()
                await asyncio.wait({request})
        if request.cancelled():
            raise RunCancelledError(signal.reason)
        try:
            result = request.result()
        except MCPError as exc:
            if exc.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                raise failure(self.server, exc, f"tool {name!r}") from None
            message = f"{exc.message} (JSON-RPC error {exc.code})"
            raise ToolError(MCP_PROTOCOL_ERROR, message[:_MAX_MESSAGE]) from None
        except ValidationError:
            raise ToolError(
                MCP_PROTOCOL_ERROR, f"The answer to tool {name!r} is not a valid MCP result."
            ) from None
        except Exception as exc:
            raise failure(self.server, exc, f"tool {name!r}") from exc
        if result.is_error:
            text = result_text(result) or f"Tool {name!r} reported an error."
            raise ToolError(MCP_TOOL_ERROR, text[:_MAX_MESSAGE])
        problem = self._output_problem(name, result.structured_content)
        if problem is not None:
            raise ToolError(MCP_PROTOCOL_ERROR, problem[:_MAX_MESSAGE])
        return result_value(name, result, self.server.max_result_bytes)


async def _own(server: McpServer, ready: asyncio.Future[McpSession], close: asyncio.Event) -> None:
    """Hold the connection open until ``close`` is set (in a task of its own, see below)."""
    from mcp import Client
    from mcp.types import Implementation

    wire = Wire()
    try:
        async with Client(
            transport(server, wire),
            read_timeout_seconds=server.timeout_s,
            client_info=Implementation(name="tubeless", version=__version__),
        ) as client:
            if wire.stderr is not None:
                wire.stderr.release()  # the server has its own end now
            tools = await _list_tools(client, wire.screen)
            ready.set_result(McpSession(server, client, tools))
            await close.wait()
    except BaseException as exc:
        during = "the run" if ready.done() else "connect and list tools"
        leaf = _first(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if not ready.done():
            ready.set_exception(failure(server, leaf, during, wire))
            return
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise failure(server, leaf, during, wire) from exc
    finally:
        if wire.stderr is not None:
            wire.stderr.release()


@asynccontextmanager
async def open_session(server: McpServer) -> AsyncIterator[McpSession]:
    """Connect to ``server`` and list its tools; leaving the context closes the connection.

    The SDK's client lives in a task of its own: its task groups cancel the task that entered
    them when a transport task fails, and that must never be the run's own task. Closing
    always waits for that task to end (stopping a stdio server), even under cancellation.
    """
    _require_sdk()
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[McpSession] = loop.create_future()
    close = asyncio.Event()
    owner = asyncio.ensure_future(_own(server, ready, close))
    try:
        session = await asyncio.shield(ready)
    except BaseException:
        close.set()
        await _settle(owner)
        raise
    failed = True
    try:
        yield session
        failed = False
    finally:
        close.set()
        await _settle(owner)
        if not failed and not owner.cancelled() and owner.exception() is not None:
            # The transport failed after the last call: still a failure of the run.
            raise owner.exception()  # type: ignore[misc]  # checked just above


async def _settle(owner: asyncio.Future[None]) -> None:
    """Wait for ``owner`` to end; a cancellation of the waiter is passed on once it has."""
    cancelled = False
    while not owner.done():
        try:
            await asyncio.shield(owner)
        except asyncio.CancelledError:
            cancelled = True
        except BaseException:
            break
    if owner.done() and not owner.cancelled():
        owner.exception()  # retrieved: a failure after the run's own error is not logged
    if cancelled:
        raise asyncio.CancelledError


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf of ``group`` that is not a cancellation."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group
