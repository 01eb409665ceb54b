"""The MCP error; its codes live in ``tubeless.errors`` (outcome codes are the agent's, fatal ones
are ``McpError``) and are re-exported here."""

from __future__ import annotations

from tubeless.errors import (
    MCP_CONNECTION_FAILED,
    MCP_PROTOCOL_ERROR,
    MCP_TIMEOUT,
    MCP_TOOL_ERROR,
    MCP_TOOL_MISSING,
    MCP_TOOL_UNUSABLE,
    MCP_UNAVAILABLE,
    TubelessError,
)

__all__ = [
    "MCP_CONNECTION_FAILED",
    "MCP_PROTOCOL_ERROR",
    "MCP_TIMEOUT",
    "MCP_TOOL_ERROR",
    "MCP_TOOL_MISSING",
    "MCP_TOOL_UNUSABLE",
    "MCP_UNAVAILABLE",
    "McpError",
]


class McpError(TubelessError):
    """An MCP server cannot be used: the SDK is missing, the transport failed, a request timed
    out, or an included tool is not offered. Always fatal to the run.

    Attributes:
        server: The server's name (``None`` when no server is concerned yet).
    """

    server: str | None

    def __init__(self, code: str, message: str, *, server: str | None = None) -> None:
        super().__init__(code, message)
        self.server = server
