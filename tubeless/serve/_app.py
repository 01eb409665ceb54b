"""``create_app``: the Starlette application of ``tubeless serve``, wrapped in its guards."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tubeless.errors import (
    SERVE_INTERNAL,
    SERVE_METHOD_NOT_ALLOWED,
    SERVE_NOT_FOUND,
    SERVE_TOO_LARGE,
)
from tubeless.serve._config import MAX_BODY_BYTES, ServeConfig
from tubeless.serve._entries import RequestError
from tubeless.serve._events import stream_events
from tubeless.serve._manager import RunManager
from tubeless.serve._openapi import openapi_document
from tubeless.serve._routes import Endpoints
from tubeless.serve._security import EVENTS_PATH, BodyTooLarge, Guard

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from tubeless.serve.protocols import ProtocolRoutes

__all__ = ["create_app"]

#: Seconds a 429 asks the client to wait.
RETRY_AFTER_S = 1


def _error(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    headers = {"retry-after": str(RETRY_AFTER_S)} if status == 429 else None
    return JSONResponse(
        {"error": {"code": code, "message": message, **extra}}, status_code=status, headers=headers
    )


async def _on_request_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestError)
    return _error(exc.status, exc.code, exc.message, **exc.extra)


async def _on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return _error(405, SERVE_METHOD_NOT_ALLOWED, "this route does not take that method")
    return _error(404 if exc.status_code == 404 else exc.status_code, SERVE_NOT_FOUND, "not found")


async def _on_too_large(request: Request, exc: Exception) -> Response:
    return _error(413, SERVE_TOO_LARGE, f"request bodies are limited to {MAX_BODY_BYTES} bytes")


async def _on_anything(request: Request, exc: Exception) -> Response:
    return _error(500, SERVE_INTERNAL, "the server failed to answer; see its log")


def _protocols(manager: RunManager, config: ServeConfig) -> ProtocolRoutes:
    """AG-UI, A2A and MCP over the manager (``POST /ag-ui/{entry}``, the agent card, ``/a2a``,
    ``/mcp``): their runs are served runs, owned by the bearer token that started them. The
    card is made per request for the address the client used (a Host the guard allowed)."""
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict

    from tubeless.serve._a2a_tasks import DurableTaskStore
    from tubeless.serve._protocol_runner import ServedRunner
    from tubeless.serve.protocols import ProtocolRoutes, agent_card, protocol_routes

    runner = ServedRunner(manager)
    tasks = DurableTaskStore(config.registry, runner)
    shown = f"[{config.host}]" if ":" in config.host else config.host
    mounted = protocol_routes(runner, base_url=f"http://{shown}:{config.port}", task_store=tasks)
    enter = mounted.lifespan

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        try:
            async with enter():
                yield
        finally:
            tasks.close()

    async def card(request: Request) -> Response:
        return JSONResponse(agent_card_to_dict(agent_card(runner.info, str(request.base_url))))

    card_route = Route("/.well-known/agent-card.json", card, methods=["GET"])
    return ProtocolRoutes(routes=[card_route, *mounted.routes], lifespan=lifespan)


def create_app(
    project: str,
    *,
    config: ServeConfig | None = None,
    token: str | None = None,
    ui: Callable[[RunManager], ASGIApp] | bool = True,
    **options: Any,
) -> ASGIApp:
    """The ASGI app serving ``project`` (a YAML path).

    Args:
        project: The project file.
        config: The whole configuration (``project`` and the options below are then ignored).
        token: The bearer token required (``None``: no auth; the CLI only allows that on a
            loopback address).
        ui: The web pages mounted at ``/ui``: ``True`` for those of ``tubeless ui`` over this
            server's stores, token and project, acting through its run manager; ``False`` for
            none; or a factory of another ASGI app, given the run manager, which must
            authenticate its own requests (the bearer guard passes ``/ui`` through).
        options: ``ServeConfig`` fields: ``checkpoints``, ``trace``, ``allow_hosts``,
            ``cors_origins``, ``max_runs``, ...
    """
    if config is None:
        config = ServeConfig.for_project(project, token=token, **options)
    manager = RunManager(config)
    endpoints = Endpoints(manager, openapi_document(manager.entries.project.id))

    async def events(request: Request) -> Response:
        return await stream_events(request, manager)

    routes: list[BaseRoute] = [
        Route("/healthz", endpoints.healthz, methods=["GET"]),
        Route("/openapi.json", endpoints.openapi_json, methods=["GET"]),
        Route("/metrics", endpoints.metrics, methods=["GET"]),
        Route("/v1/entries", endpoints.entries, methods=["GET"]),
        Route("/v1/entries/{entry}/runs", endpoints.start_run, methods=["POST"]),
        Route("/v1/runs", endpoints.list_runs, methods=["GET"]),
        Route("/v1/runs/{run_id}", endpoints.get_run, methods=["GET"]),
        Route("/v1/runs/{run_id}/cancel", endpoints.cancel_run, methods=["POST"]),
        Route("/v1/runs/{run_id}/events", events, methods=["GET"]),
        Route("/v1/runs/{run_id}/approvals/{call_id}", endpoints.approve, methods=["POST"]),
        Route("/v1/approvals", endpoints.approvals, methods=["GET"]),
    ]
    protocols = _protocols(manager, config)
    routes.extend(protocols.routes)
    if ui is not False:  # the web pages of ``tubeless ui``, over the same manager and stores
        from starlette.routing import Mount

        from tubeless.serve._ui_actions import ui_pages

        routes.append(Mount("/ui", app=(ui_pages if ui is True else ui)(manager)))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await manager.start()
        try:
            async with protocols.lifespan():  # the MCP session manager
                yield
        finally:
            await manager.stop()

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            RequestError: _on_request_error,
            HTTPException: _on_http,
            BodyTooLarge: _on_too_large,
            Exception: _on_anything,
        },
    )
    app.state.manager = manager
    return Guard(
        app,
        token=config.token,
        hosts=config.hosts(),
        cors_origins=config.cors_origins,
        self_authenticated=("/ui",) if ui is not False else (),
        session_paths=EVENTS_PATH,
    )
