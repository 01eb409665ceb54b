"""Serving the protocol apps for real: uvicorn in a thread on 127.0.0.1 (a free port)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.routing import BaseRoute

from tubeless.durable import SqliteCheckpoints
from tubeless.project import load_project
from tubeless.serve.protocols import LocalRunner

ROOT = Path(__file__).parents[3]
SCRIPTED = ROOT / "projects" / "scripted-agent.yaml"
APPROVALS = ROOT / "projects" / "approvals.yaml"
HANG_GUARD_S = 30.0  # a hang guard only, never a timing assertion


def make_runner(project: Path, checkpoints: Path) -> LocalRunner:
    """A runner over ``project`` whose runs commit to a SQLite file (closed by ``serving``)."""
    return LocalRunner(load_project(project), checkpoints=SqliteCheckpoints(checkpoints))


@contextlib.contextmanager
def serving(
    runner: LocalRunner,
    routes: list[BaseRoute] | Callable[[str], list[BaseRoute]],
    *,
    lifespans: tuple[Callable[[], Any], ...] = (),
) -> Iterator[str]:
    """``routes`` (or ``routes(base_url)``) served by uvicorn on 127.0.0.1 in a thread; yields
    the base URL. The app's
    lifespan enters each of ``lifespans`` and, at shutdown, cancels the runner's live runs
    (on the server's own loop) and closes its store."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for enter in lifespans:
                await stack.enter_async_context(enter())
            try:
                yield
            finally:
                await runner.close()

    with socket.socket() as probe:  # a free port, so that the routes may know their URL
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    app = Starlette(routes=routes(url) if callable(routes) else routes, lifespan=lifespan)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + HANG_GUARD_S
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(HANG_GUARD_S)
        runner._store.close()  # type: ignore[union-attr]
