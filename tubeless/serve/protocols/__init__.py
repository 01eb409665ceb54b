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

The packages are imported only by the adapter that uses them (extra ``tubeless[serve]``).
"""

from __future__ import annotations

from tubeless.serve.protocols._local import LocalRunner
from tubeless.serve.protocols._runner import (
    Caller,
    EntryInfo,
    PendingApproval,
    ProjectRunner,
    RunEvent,
    RunView,
)

__all__ = [
    "Caller",
    "EntryInfo",
    "LocalRunner",
    "PendingApproval",
    "ProjectRunner",
    "RunEvent",
    "RunView",
]
