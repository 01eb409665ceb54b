"""Connections to MCP servers, built on the official SDK (imported only here, only to connect).

One :func:`open_session` per server per agent invocation: the SDK's ``Client`` over
``stdio_client`` (a subprocess in its own session, stopped when the context closes, even on
cancellation) or ``streamable_http_client``. The handshake and the tool listing happen on
entry; each request may take ``timeout_s``.

How failures map:

- the result's ``isError`` → ``ToolError(MCP_TOOL_ERROR, <its text>)`` (an outcome);
- a JSON-RPC error answer, or a result that is not valid MCP → ``ToolError(MCP_PROTOCOL_ERROR)``;
- a request past ``timeout_s`` → :class:`McpError` ``TUBELESS_MCP_TIMEOUT`` (fatal);
- a closed connection, a server that died or cannot start, any transport failure →
  ``TUBELESS_MCP_CONNECTION_FAILED`` (fatal).

Cancellation (the run's token, or the task) abandons the request; the SDK then sends
``notifications/cancelled`` for it before the error propagates.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TextIO

from tubeless._version import __version__
from tubeless.agent import ToolContext, ToolError
from tubeless.frozen import thaw
from tubeless.mcp._errors import (
    MCP_CONNECTION_FAILED,
    MCP_PROTOCOL_ERROR,
    MCP_TIMEOUT,
    MCP_TOOL_ERROR,
    MCP_TOOL_MISSING,
    MCP_UNAVAILABLE,
    McpError,
)
from tubeless.pipeline import RunCancelledError

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult, Tool

    from tubeless.mcp._server import McpServer

__all__ = ["McpSession", "open_session"]

_MAX_MESSAGE = 4096
_MAX_PAGES = 100
#: JSON-RPC codes the SDK uses for its own failures (mcp_types.jsonrpc).
_CONNECTION_CLOSED = -32000
_REQUEST_TIMEOUT = -32001


def _require_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise McpError(
            MCP_UNAVAILABLE,
            "MCP servers need the optional mcp SDK: pip install 'tubeless[mcp]'",
        ) from exc


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: ours when it is a real file, else the process's."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__ or open(os.devnull, "w")
    return sys.stderr


def _transport(server: McpServer) -> Any:
    if server.command is not None:
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(
            command=server.command[0],
            args=list(server.command[1:]),
            env=dict(server.env) or None,
            cwd=server.cwd,
        )
        return stdio_client(params, errlog=_errlog())
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers: dict[str, str] = {}
    for header, variable in server.headers_env:
        value = os.environ.get(variable)
        if not value:
            raise McpError(
                MCP_CONNECTION_FAILED,
                f"MCP server {server.name!r}: header {header!r} needs the environment variable "
                f"{variable}, which is not set.",
                server=server.name,
            )
        headers[header] = value
    timeout = httpx2.Timeout(server.timeout_s, read=max(server.timeout_s, 300.0))
    http = httpx2.AsyncClient(headers=headers, timeout=timeout)
    assert server.url is not None
    return _HttpTransport(streamable_http_client(server.url, http_client=http), http)


class _HttpTransport:
    """``streamable_http_client`` with the HTTP client it was given, closed after it."""

    def __init__(self, inner: Any, http: Any) -> None:
        self._inner = inner
        self._http = http

    async def __aenter__(self) -> Any:
        await self._http.__aenter__()
        try:
            return await self._inner.__aenter__()
        except BaseException:
            await self._http.__aexit__(None, None, None)
            raise

    async def __aexit__(self, *exc: Any) -> bool | None:
        try:
            return bool(await self._inner.__aexit__(*exc))
        finally:
            await self._http.__aexit__(None, None, None)


def _failure(server: McpServer, exc: BaseException, during: str) -> McpError:
    """A fatal error for a transport failure or a timeout."""
    from mcp import MCPError

    if isinstance(exc, McpError):
        return exc
    if isinstance(exc, MCPError) and exc.code == _REQUEST_TIMEOUT:
        return McpError(
            MCP_TIMEOUT,
            f"MCP server {server.name!r} did not answer {during} within {server.timeout_s:g} s.",
            server=server.name,
        )
    if isinstance(exc, MCPError) and exc.code == _CONNECTION_CLOSED:
        detail = "closed the connection"
    elif isinstance(exc, MCPError):
        detail = f"answered with JSON-RPC error {exc.code}"
    elif isinstance(exc, OSError) and server.command is not None:
        detail = f"could not be started ({type(exc).__name__}: {exc.strerror or exc})"
    else:
        detail = f"failed ({type(exc).__name__})"
    return McpError(
        MCP_CONNECTION_FAILED,
        f"MCP server {server.name!r} {detail} during {during}.",
        server=server.name,
    )


async def _list_tools(client: Client) -> dict[str, Tool]:
    tools: dict[str, Tool] = {}
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        for tool in page.tools:
            tools.setdefault(tool.name, tool)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _text(result: CallToolResult) -> str:
    from mcp.types import TextContent

    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


class McpSession:
    """One open connection: the server's tools by name, and calls to them."""

    def __init__(self, server: McpServer, client: Client, tools: Mapping[str, Tool]) -> None:
        self.server = server
        self.tools = dict(tools)
        self._client = client

    def describe(self, name: str) -> tuple[str, Mapping[str, Any]]:
        """The server's description and input schema of tool ``name``."""
        tool = self.tools.get(name)
        if tool is None:
            offered = ", ".join(sorted(self.tools)) or "none"
            raise McpError(
                MCP_TOOL_MISSING,
                f"MCP server {self.server.name!r} offers no tool {name!r} (it offers: {offered}).",
                server=self.server.name,
            )
        return tool.description or "", tool.input_schema

    async def call(self, name: str, arguments: Any, ctx: ToolContext) -> Any:
        """Call tool ``name``: the structured content when present, else the text content."""
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
            if exc.code in (_CONNECTION_CLOSED, _REQUEST_TIMEOUT):
                raise _failure(self.server, exc, f"tool {name!r}") from None
            message = f"{exc.message} (JSON-RPC error {exc.code})"
            raise ToolError(MCP_PROTOCOL_ERROR, message[:_MAX_MESSAGE]) from None
        except ValidationError:
            raise ToolError(
                MCP_PROTOCOL_ERROR, f"The answer to tool {name!r} is not a valid MCP result."
            ) from None
        except Exception as exc:
            raise _failure(self.server, exc, f"tool {name!r}") from exc
        if result.is_error:
            text = _text(result) or f"Tool {name!r} reported an error."
            raise ToolError(MCP_TOOL_ERROR, text[:_MAX_MESSAGE])
        if result.structured_content is not None:
            return result.structured_content
        return _text(result)


async def _own(server: McpServer, ready: asyncio.Future[McpSession], close: asyncio.Event) -> None:
    """Hold the connection open until ``close`` is set (in a task of its own, see below)."""
    from mcp import Client
    from mcp.types import Implementation

    try:
        async with Client(
            _transport(server),
            read_timeout_seconds=server.timeout_s,
            client_info=Implementation(name="tubeless", version=__version__),
        ) as client:
            tools = await _list_tools(client)
            ready.set_result(McpSession(server, client, tools))
            await close.wait()
    except BaseException as exc:
        during = "the run" if ready.done() else "connect and list tools"
        leaf = _first(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if not ready.done():
            ready.set_exception(_failure(server, leaf, during))
            return
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise _failure(server, leaf, during) from exc


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
