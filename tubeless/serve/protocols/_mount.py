"""All three protocols at once: the routes and the lifespan a server adds to its app.

``tubeless serve`` (or any Starlette app) mounts the protocols with::

    protocols = protocol_routes(runner, base_url="https://agents.example.com")
    app = Starlette(routes=[*own_routes, *protocols.routes], lifespan=...)
    # and, inside the app's lifespan:  async with protocols.lifespan(): ...

The routes are ``POST /ag-ui/{entry}``, ``GET /.well-known/agent-card.json``, ``POST /a2a``
and ``/mcp``; the lifespan runs the MCP session manager. Authentication stays the app's own
middleware (the agent card needs no token); ``caller_of`` names each request's caller so that
runs, threads and tasks stay with the token that started them.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tubeless.serve.protocols._a2a import a2a_routes
from tubeless.serve.protocols._ag_ui import ag_ui_routes
from tubeless.serve.protocols._identity import bearer_identity
from tubeless.serve.protocols._mcp import mcp_http_app
from tubeless.serve.protocols._runner import Caller, ProjectRunner

if TYPE_CHECKING:
    from a2a.server.tasks import TaskStore
    from starlette.routing import BaseRoute

__all__ = ["ProtocolRoutes", "protocol_routes"]


@dataclass(frozen=True, slots=True)
class ProtocolRoutes:
    """What a server adds: ``routes``, and ``lifespan()`` to enter in its own lifespan."""

    routes: list[BaseRoute]
    lifespan: Callable[[], AbstractAsyncContextManager[Any]]


def protocol_routes(
    runner: ProjectRunner,
    *,
    base_url: str,
    caller_of: Callable[[Any], Caller] | None = bearer_identity,
    allowed_hosts: list[str] | None = None,
    task_store: TaskStore | None = None,
) -> ProtocolRoutes:
    """The AG-UI, A2A and MCP routes over ``runner``. ``base_url`` is where clients reach the
    server (the agent card names ``{base_url}/a2a``); ``allowed_hosts`` is the MCP transport's
    own Host allowlist (``None``: leave Host checks to the app's middleware); ``task_store``
    keeps the A2A tasks (default: in memory)."""
    mcp = mcp_http_app(runner, caller_of=caller_of, allowed_hosts=allowed_hosts)

    def lifespan() -> AbstractAsyncContextManager[Any]:
        return mcp.router.lifespan_context(mcp)

    routes = [
        *ag_ui_routes(runner, caller_of=caller_of),
        *a2a_routes(runner, base_url=base_url, caller_of=caller_of, task_store=task_store),
        *mcp.routes,
    ]
    return ProtocolRoutes(routes=routes, lifespan=lifespan)
