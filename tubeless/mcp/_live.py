"""What ``inspect --connect`` shows: the servers' own descriptors of an entry's MCP tools."""

from __future__ import annotations

import asyncio
from typing import Any

from tubeless.agent._spi import Remote, remotes
from tubeless.mcp._server import McpServer
from tubeless.pipeline import Pipeline

__all__ = ["describe_servers"]


async def _describe(pipeline: Pipeline) -> dict[str, dict[str, Any]]:
    grouped: dict[McpServer, list[tuple[str, Remote]]] = {}
    for s in pipeline.order:
        for name, remote in remotes(s).items():
            if isinstance(remote.source, McpServer):
                grouped.setdefault(remote.source, []).append((name, remote))
    described: dict[str, dict[str, Any]] = {}
    for server, tools in grouped.items():
        async with server.connect() as session:
            for name, remote in tools:
                description, schema = session.describe(remote.name)
                described[name] = {
                    "server": server.name,
                    "tool": remote.name,
                    "description": description,
                    "input_json_schema": schema,
                }
    return described


def describe_servers(pipeline: Pipeline) -> dict[str, dict[str, Any]]:
    """Connect to every MCP server ``pipeline``'s agent steps use; their tools' live descriptors.

    Returns ``{registered name: {server, tool, description, input_json_schema}}``; raises
    :class:`~tubeless.mcp.McpError` when a server cannot be reached or lacks an included tool.
    Each server is connected once and closed before this returns.
    """
    return asyncio.run(_describe(pipeline))
