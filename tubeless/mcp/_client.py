"""An open MCP connection's tools and calls (:class:`McpSession`; ``_connection`` opens it).

Each call may take ``timeout_s``; with ``max_concurrency`` it first waits for a free slot among
the calls to that server (over everything sharing the connection). It sends a progress token:
the server's progress becomes the call's (``tubeless.mcp._notices``).

How failures map:

- the result's ``isError`` → ``ToolError(MCP_TOOL_ERROR, <its text>)`` (an outcome);
- a JSON-RPC error answer, a result that is not valid MCP, structured content that breaks the
  tool's output schema, or a result past ``max_result_blocks`` or ``max_result_bytes`` →
  ``ToolError(MCP_PROTOCOL_ERROR)``;
- a request past ``timeout_s`` → :class:`McpError` ``TUBELESS_MCP_TIMEOUT`` (fatal);
- a closed connection (also one that ended before the call), a server that died or cannot
  start, any transport failure → ``TUBELESS_MCP_CONNECTION_FAILED`` (fatal).

Cancellation (the run's token, or the task) abandons the request; the SDK then sends
``notifications/cancelled`` for it before the error propagates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tubeless.agent import ToolContext, ToolError
from tubeless.frozen import thaw
from tubeless.mcp._content import result_text, result_value
from tubeless.mcp._errors import (
    MCP_CONNECTION_FAILED,
    MCP_PROTOCOL_ERROR,
    MCP_TOOL_ERROR,
    MCP_TOOL_MISSING,
    MCP_TOOL_UNUSABLE,
    McpError,
)
from tubeless.mcp._notices import Progress
from tubeless.mcp._schemas import input_validator, output_problem, output_validator
from tubeless.mcp._screen import Screen, refused
from tubeless.mcp._transport import CONNECTION_CLOSED, REQUEST_TIMEOUT, failure
from tubeless.pipeline._spi import RunCancelledError
from tubeless.schema import Schema

if TYPE_CHECKING:
    from mcp import Client

    from tubeless.mcp._server import McpServer

__all__ = ["McpSession", "list_tools"]

_MAX_MESSAGE = 4096
_MAX_PAGES = 100


async def list_tools(client: Client, screen: Screen) -> dict[str, dict[str, Any]]:
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
        bound = server.max_concurrency
        self._slots = asyncio.Semaphore(bound) if bound is not None else None
        self.ended = False
        """Set once the connection closed (a call then fails at once)."""
        self.broken = False
        """Set once a call met a transport failure (the connection is not lent again)."""

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
        if self.ended or self.broken:
            raise McpError(
                MCP_CONNECTION_FAILED,
                f"MCP server {self.server.name!r} closed the connection before tool {name!r} "
                "was called.",
                server=self.server.name,
            )
        request = asyncio.ensure_future(self._request(name, thaw(arguments), Progress(ctx)))
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
                self.broken = exc.code == CONNECTION_CLOSED
                raise failure(self.server, exc, f"tool {name!r}") from None
            if refused(exc):  # the screen refused a result past a bound, before it was parsed
                raise ToolError(MCP_PROTOCOL_ERROR, exc.message) from None
            message = f"{exc.message} (JSON-RPC error {exc.code})"
            raise ToolError(MCP_PROTOCOL_ERROR, message[:_MAX_MESSAGE]) from None
        except ValidationError:
            raise ToolError(
                MCP_PROTOCOL_ERROR, f"The answer to tool {name!r} is not a valid MCP result."
            ) from None
        except Exception as exc:
            self.broken = True
            raise failure(self.server, exc, f"tool {name!r}") from exc
        if result.is_error:
            text = result_text(result) or f"Tool {name!r} reported an error."
            raise ToolError(MCP_TOOL_ERROR, text[:_MAX_MESSAGE])
        problem = self._output_problem(name, result.structured_content)
        if problem is not None:
            raise ToolError(MCP_PROTOCOL_ERROR, problem[:_MAX_MESSAGE])
        return result_value(name, result, self.server.max_result_bytes)

    async def _request(self, name: str, arguments: Any, progress: Progress) -> Any:
        if self._slots is None:
            return await self._client.call_tool(name, arguments, progress_callback=progress)
        async with self._slots:
            return await self._client.call_tool(name, arguments, progress_callback=progress)
