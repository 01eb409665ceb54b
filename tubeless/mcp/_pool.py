"""A worker scope: MCP connections that the runs inside it share.

A batch engine opens one :class:`SharedConnections` per worker (the ``local`` engine: per
batch; ``process``: per worker process) and runs each row inside :meth:`~SharedConnections.active`.
There, :meth:`McpServer.connect <tubeless.mcp.McpServer.connect>` borrows the scope's
connection to that server (made by the first run that needs it) instead of starting a server
per run; a server declared ``per_run`` still gets one connection per run. The scope closes its
connections (stopping stdio servers) when :meth:`~SharedConnections.close` is awaited.

Each run still asks the borrowed connection for the tools it includes and records their
descriptors in its own checkpoint; calls keep their own idempotency keys. A shared connection
that dies fails the runs whose calls meet it (the call in flight, and any later call of a run
that holds it: ``TUBELESS_MCP_CONNECTION_FAILED``) and is replaced for the runs that start
later; one that could not be made fails the runs waiting for it, and the next run tries again.
A run that held it without calling it since is not failed by another run's crash.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from tubeless.mcp._errors import McpError

if TYPE_CHECKING:
    from tubeless.mcp._client import McpSession
    from tubeless.mcp._connection import Connection
    from tubeless.mcp._server import McpServer

__all__ = ["SharedConnections", "current_pool"]

_CURRENT: ContextVar[SharedConnections | None] = ContextVar("tubeless_mcp_pool", default=None)


def current_pool() -> SharedConnections | None:
    """The worker scope the current task runs in, if any."""
    return _CURRENT.get()


def _again(exc: BaseException) -> BaseException:
    """A fresh copy of ``exc`` for another waiter (one exception object, raised in one place)."""
    if isinstance(exc, McpError):
        return McpError(exc.code, exc.message, server=exc.server)
    return exc


class SharedConnections:
    """MCP connections shared by the runs of one worker (one event loop).

    ::

        pool = SharedConnections()
        try:
            with pool.active():
                await entry.run(...)      # its MCP servers are connected once, here
            with pool.active():
                await entry.run(...)      # and reused
        finally:
            await pool.close()
    """

    def __init__(self) -> None:
        self._held: dict[McpServer, Connection] = {}
        self._ended: list[Connection] = []
        self._closed = False

    @contextmanager
    def active(self) -> Iterator[None]:
        """Make this scope the one that runs started in the block (and their tasks) use."""
        token = _CURRENT.set(self)
        try:
            yield
        finally:
            _CURRENT.reset(token)

    @asynccontextmanager
    async def borrow(self, server: McpServer) -> AsyncIterator[McpSession]:
        """The shared session to ``server``, connected first if need be."""
        from tubeless.mcp._connection import Connection, open_session

        if self._closed:  # a run that outlived its worker's scope connects on its own
            async with open_session(server) as own:
                yield own
            return
        connection = self._held.get(server)
        if connection is None or not connection.usable:
            if connection is not None:
                self._ended.append(connection)
            connection = self._held[server] = Connection(server)
        try:
            session = await connection.session()
        except McpError as exc:
            if self._held.get(server) is connection:  # the next run tries again
                self._ended.append(self._held.pop(server))
            raise _again(exc) from None
        yield session

    async def close(self) -> None:
        """Close every connection of this scope (stopping stdio servers)."""
        self._closed = True
        connections = [*self._ended, *self._held.values()]
        self._ended.clear()
        self._held.clear()
        for connection in connections:
            await connection.close()
