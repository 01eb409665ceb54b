"""The transports under an MCP connection, and the words for their failures.

A stdio server runs with its stderr on a pipe to the ``tubeless.run`` logger; a streamable
HTTP server is reached with an HTTP client that remembers the last error status (the SDK turns
a 404 into JSON-RPC error -32601, which says nothing of what happened). Both are wrapped in a
:class:`~tubeless.mcp._screen.Screen`. Messages name an HTTP server's URL without its user
info, query or fragment (where credentials would be).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tubeless.mcp._errors import MCP_CONNECTION_FAILED, MCP_TIMEOUT, McpError
from tubeless.mcp._screen import Screen
from tubeless.mcp._stderr import StderrLog

if TYPE_CHECKING:
    from tubeless.mcp._server import McpServer

__all__ = ["CONNECTION_CLOSED", "REQUEST_TIMEOUT", "Wire", "failure", "shown_url", "transport"]

#: JSON-RPC codes the SDK uses for its own failures (mcp_types.jsonrpc).
CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001


@dataclass
class Wire:
    """What one connection learns below MCP: the listing as sent, the last HTTP error status."""

    screen: Screen = field(default_factory=Screen)
    stderr: StderrLog | None = None
    http_error: tuple[int, str] | None = None


def shown_url(url: str) -> str:
    """``url`` without user info, query or fragment (where credentials would be)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


def transport(server: McpServer, wire: Wire) -> Any:
    if server.command is not None:
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(
            command=server.command[0],
            args=list(server.command[1:]),
            env=dict(server.env) or None,
            cwd=server.cwd,
        )
        wire.stderr = StderrLog(server.name)
        return wire.screen.wrap(stdio_client(params, errlog=wire.stderr.file))
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

    async def seen(response: Any) -> None:
        # The SDK turns an HTTP error status into a JSON-RPC error (a 404 into -32601): keep
        # the status to say what really happened.
        if response.status_code >= 400:
            wire.http_error = (response.status_code, response.reason_phrase or "")

    timeout = httpx2.Timeout(server.timeout_s, read=max(server.timeout_s, 300.0))
    http = httpx2.AsyncClient(headers=headers, timeout=timeout, event_hooks={"response": [seen]})
    assert server.url is not None
    return wire.screen.wrap(
        _HttpTransport(streamable_http_client(server.url, http_client=http), http)
    )


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


def failure(
    server: McpServer, exc: BaseException, during: str, wire: Wire | None = None
) -> McpError:
    """A fatal error for a transport failure or a timeout."""
    from mcp import MCPError
    from pydantic import ValidationError

    if isinstance(exc, McpError):
        return exc
    if isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT:
        return McpError(
            MCP_TIMEOUT,
            f"MCP server {server.name!r} did not answer {during} within {server.timeout_s:g} s.",
            server=server.name,
        )
    where = "" if server.url is None else f" at {shown_url(server.url)}"
    if wire is not None and wire.http_error is not None and isinstance(exc, MCPError):
        status, reason = wire.http_error
        hint = ": is that its MCP endpoint?" if status == 404 else "."
        reason = f" ({reason})" if reason else ""
        return McpError(
            MCP_CONNECTION_FAILED,
            f"MCP server {server.name!r} answered HTTP {status}{reason}{where} during {during}"
            + hint,
            server=server.name,
        )
    if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
        detail = "closed the connection"
    elif isinstance(exc, MCPError):
        detail = f"answered with JSON-RPC error {exc.code}"
    elif isinstance(exc, OSError) and server.command is not None:
        detail = f"could not be started ({type(exc).__name__}: {exc.strerror or exc})"
    elif isinstance(exc, ValidationError):
        detail = "sent an answer that is not valid MCP"
    elif server.url is not None and _unreachable(exc):
        text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return McpError(
            MCP_CONNECTION_FAILED,
            f"MCP server {server.name!r} could not be reached{where} during {during} "
            f"({type(exc).__name__}{': ' + text if text else ''}).",
            server=server.name,
        )
    else:
        detail = f"failed ({type(exc).__name__})"
    return McpError(
        MCP_CONNECTION_FAILED,
        f"MCP server {server.name!r}{where} {detail} during {during}.",
        server=server.name,
    )


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` is an HTTP transport failure (nothing listens, DNS, TLS, a reset)."""
    import httpx2

    return isinstance(exc, httpx2.TransportError | OSError)
