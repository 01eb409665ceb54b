"""MCP servers as tool sources, on the official ``mcp`` SDK (``pip install 'tubeless[mcp]'``).

::

    from tubeless.mcp import McpServer, mcp_tools

    notes = McpServer.stdio("notes", ["python", "-m", "examples.notes_server"])
    agent = define_agent(..., tools={**mcp_tools(notes, ["add_note", "find_notes"])})

registers ``notes__add_note`` and ``notes__find_notes``. Defining, planning, inspecting and
graphing contact nothing (the SDK is not even imported); each agent run connects once at its
start, checks every included tool exists and can be called (``TUBELESS_MCP_TOOL_UNUSABLE``
otherwise), takes the server's descriptions and input schemas (read in their own dialect,
filling no defaults), and closes the connection when it ends (stopping a stdio server's
process). A call's value keeps every content block (``tubeless.mcp._content``). ``isError``
results, JSON-RPC errors and output-schema breaks are recoverable outcomes (``MCP_TOOL_ERROR``,
``MCP_PROTOCOL_ERROR``); transport failures and timeouts fail the run (:class:`McpError`).
MCP tools are skipped in dry runs. (They are the tools durable runs will treat as unsafe to
replay: ``Tool.remote`` is set on each.)

Inside a worker scope (:class:`SharedConnections`, which the batch engines open per worker)
runs share one connection per server; ``McpServer(per_run=True)`` opts a stateful server out.
``max_concurrency`` bounds the calls in flight to a server. A server's progress becomes the
call's progress; its log messages go to the ``tubeless.run`` logger (``tubeless.mcp._notices``).
"""

from __future__ import annotations

from tubeless.mcp._errors import (
    MCP_CONNECTION_FAILED,
    MCP_PROTOCOL_ERROR,
    MCP_TIMEOUT,
    MCP_TOOL_ERROR,
    MCP_TOOL_MISSING,
    MCP_TOOL_UNUSABLE,
    MCP_UNAVAILABLE,
    McpError,
)
from tubeless.mcp._live import describe_servers
from tubeless.mcp._pool import SharedConnections
from tubeless.mcp._server import (
    DEFAULT_MAX_RESULT_BLOCKS,
    DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_TIMEOUT_S,
    McpServer,
    mcp_tools,
    registered_name,
)

__all__ = [
    "DEFAULT_MAX_RESULT_BLOCKS",
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_TIMEOUT_S",
    "MCP_CONNECTION_FAILED",
    "MCP_PROTOCOL_ERROR",
    "MCP_TIMEOUT",
    "MCP_TOOL_ERROR",
    "MCP_TOOL_MISSING",
    "MCP_TOOL_UNUSABLE",
    "MCP_UNAVAILABLE",
    "McpError",
    "McpServer",
    "SharedConnections",
    "describe_servers",
    "mcp_tools",
    "registered_name",
]
