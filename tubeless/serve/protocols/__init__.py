"""The protocols other tools speak, on their official packages: AG-UI, A2A and MCP.

Each adapter translates between its package's models and one run interface,
:class:`~tubeless.serve.protocols.ProjectRunner` (``_runner``): start a run of an entry, follow
its events, answer its approvals, cancel it. :class:`LocalRunner` (``_local``) runs the project
in this process with a checkpoint store; ``tubeless serve`` may back the interface with its own
run manager. The adapters::

    ag_ui_routes(runner)        POST /ag-ui/{entry}: RunAgentInput in, AG-UI events out (SSE)
    a2a_routes(runner, ...)     the agent card and JSON-RPC at /a2a (a2a-sdk)
    mcp_server(runner)          each entry an MCP tool (stdio: ``tubeless mcp-serve``)
    mcp_http_app(runner)        the same over streamable HTTP, for ``/mcp``
    protocol_routes(runner, base_url=...)   all three: the routes and the lifespan to mount

The packages are imported only by the adapter that uses them (extra ``tubeless[serve]``).
"""

from __future__ import annotations

from tubeless.serve.protocols._a2a import a2a_routes, agent_card
from tubeless.serve.protocols._ag_ui import ag_ui_routes
from tubeless.serve.protocols._identity import bearer_identity
from tubeless.serve.protocols._local import LocalRunner
from tubeless.serve.protocols._mcp import mcp_http_app, mcp_server, serve_stdio
from tubeless.serve.protocols._mount import ProtocolRoutes, protocol_routes
from tubeless.serve.protocols._runner import (
    Caller,
    EntryInfo,
    PendingApproval,
    ProjectInfo,
    ProjectRunner,
    RunEvent,
    RunnerError,
    RunView,
)

__all__ = [
    "Caller",
    "EntryInfo",
    "LocalRunner",
    "PendingApproval",
    "ProjectInfo",
    "ProjectRunner",
    "ProtocolRoutes",
    "RunEvent",
    "RunView",
    "RunnerError",
    "a2a_routes",
    "ag_ui_routes",
    "agent_card",
    "bearer_identity",
    "mcp_http_app",
    "mcp_server",
    "protocol_routes",
    "serve_stdio",
]
