"""Connections to MCP servers, built on the official SDK (imported only here, only to connect).

A :class:`Connection` is the SDK's ``Client`` over ``stdio_client`` (a subprocess in its own
session, stopped when the connection closes, even on cancellation; its stderr goes to the
``tubeless.run`` logger) or ``streamable_http_client``, with a
:class:`~tubeless.mcp._screen.Screen` between transport and SDK that keeps the listing as sent
and refuses results past the server's bounds before the SDK parses them. The handshake and the
tool listing happen first, within ``timeout_s`` in all (the SDK's own protocol probe
included); then each request may take ``timeout_s``.

:func:`open_session` is one connection for one agent invocation; a worker scope
(``tubeless.mcp._pool``) keeps connections that several runs share.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from tubeless._version import __version__
from tubeless.mcp._client import McpSession, list_tools
from tubeless.mcp._errors import MCP_TIMEOUT, MCP_UNAVAILABLE, McpError
from tubeless.mcp._notices import LOG_LEVEL, ServerNotes
from tubeless.mcp._screen import Screen
from tubeless.mcp._transport import Wire, failure, transport

if TYPE_CHECKING:
    from tubeless.mcp._server import McpServer

__all__ = ["Connection", "open_session"]


def _require_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise McpError(
            MCP_UNAVAILABLE,
            "MCP servers need the optional mcp SDK: pip install 'tubeless[mcp]'",
        ) from exc


class Connection:
    """One connection, held open by a task of its own from creation until :meth:`close`.

    The SDK's client lives in that task: its task groups cancel the task that entered them when
    a transport task fails, and that must never be a run's own task. Create it on the running
    loop (it starts connecting at once).
    """

    def __init__(self, server: McpServer) -> None:
        _require_sdk()
        self.server = server
        loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[McpSession] = loop.create_future()
        self._close = asyncio.Event()
        self._owner = asyncio.ensure_future(_own(server, self._ready, self._close))
        self._timer = loop.call_later(server.timeout_s, self._expire)
        self._ready.add_done_callback(lambda _: self._timer.cancel())

    def _expire(self) -> None:
        """Connecting took ``timeout_s``: whatever the SDK was waiting for, it ends now."""
        if not self._ready.done():
            self._ready.set_exception(
                McpError(
                    MCP_TIMEOUT,
                    f"MCP server {self.server.name!r} did not answer connect and list tools "
                    f"within {self.server.timeout_s:g} s.",
                    server=self.server.name,
                )
            )
            self._owner.cancel()

    async def session(self) -> McpSession:
        """The session once connected; raises why the connection could not be made."""
        return await asyncio.shield(self._ready)

    @property
    def ended(self) -> bool:
        """Whether the connection ended (closed, failed, or never made)."""
        return self._owner.done()

    @property
    def usable(self) -> bool:
        """Whether new runs may use it: open, and no call found it broken."""
        if self._owner.done():
            return False
        ready = self._ready
        if not ready.done() or ready.cancelled() or ready.exception() is not None:
            return not ready.done()  # still connecting: wait for it
        return not ready.result().broken

    @property
    def failure(self) -> BaseException | None:
        """Why an open connection ended on its own (``None`` while open or once closed cleanly)."""
        if not self._owner.done() or self._owner.cancelled():
            return None
        return self._owner.exception()

    async def close(self) -> None:
        """Close the connection and wait until it has (stopping a stdio server), even when the
        waiter is cancelled meanwhile (the cancellation is passed on once it has)."""
        self._close.set()
        self._timer.cancel()
        await _settle(self._owner)
        if self._ready.done() and not self._ready.cancelled():
            self._ready.exception()  # retrieved: its waiters have seen it


async def _own(server: McpServer, ready: asyncio.Future[McpSession], close: asyncio.Event) -> None:
    """Hold the connection open until ``close`` is set."""
    from mcp import Client
    from mcp.types import Implementation

    wire = Wire(screen=Screen(server.max_result_blocks, server.max_result_bytes))
    notes = ServerNotes(server)
    session: McpSession | None = None
    try:
        async with Client(
            transport(server, wire),
            read_timeout_seconds=server.timeout_s,
            client_info=Implementation(name="tubeless", version=__version__),
            logging_callback=notes.log_message,
            log_level=LOG_LEVEL,
            message_handler=notes.message,
        ) as client:
            if wire.stderr is not None:
                wire.stderr.release()  # the server has its own end now
            tools = await list_tools(client, wire.screen)
            session = McpSession(server, client, tools)
            if not ready.done():
                ready.set_result(session)
            await close.wait()
    except BaseException as exc:
        during = "the run" if ready.done() else "connect and list tools"
        leaf = _first(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if not ready.done():
            ready.set_exception(failure(server, leaf, during, wire))
            return
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise failure(server, leaf, during, wire) from exc
    finally:
        if session is not None:
            session.ended = True
        if wire.stderr is not None:
            wire.stderr.release()
        notes.close()


@asynccontextmanager
async def open_session(server: McpServer) -> AsyncIterator[McpSession]:
    """Connect to ``server`` and list its tools; leaving the context closes the connection.

    Closing always waits for the connection to end (stopping a stdio server), even under
    cancellation. A connection that failed after the last call still fails the run.
    """
    connection = Connection(server)
    try:
        session = await connection.session()
    except BaseException:
        await connection.close()
        raise
    failed = True
    try:
        yield session
        failed = False
    finally:
        await connection.close()
        found = connection.failure
        if not failed and found is not None:
            raise found


async def _settle(owner: asyncio.Future[None]) -> None:
    """Wait for ``owner`` to end; a cancellation of the waiter is passed on once it has."""
    cancelled = False
    while not owner.done():
        try:
            await asyncio.wait({owner})
        except asyncio.CancelledError:
            cancelled = True
    if not owner.cancelled():
        owner.exception()  # retrieved: a failure after the run's own error is not logged
    if cancelled:
        raise asyncio.CancelledError


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf of ``group`` that is not a cancellation."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group
