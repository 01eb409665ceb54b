"""A ``process`` engine worker: the process that runs rows sent by the driver over its pipe.

A worker runs one row at a time. The driver sends the next row ahead, while the current one
runs, so that the worker never waits for the driver between rows: rows wait in the worker's
queue, in the order sent, and each starts only when the one before it ended (its ``done``
sent). So the driver knows which row a dead worker was running (the first one it sent without
a ``done`` back) and that the rows behind it never started.

A ``cancel`` message cancels the row running and every row queued before it arrived: a queued
row whose cancellation came first comes back ``cancelled`` without running. Rows sent after the
cancel run (with a fresh token). ``stop`` ends the worker once its running row ends (queued
rows are dropped: the driver no longer waits for them); a pipe closed by the driver (it went
away) ends it at once. With a batch-wide budget, the worker's model requests are granted by the
driver over the same pipe (:mod:`tubeless.batch._budget_broker`); the pipe's reader thread
hands the answers over while the worker's loop waits for them.

Run as ``python -m tubeless.batch._process_worker <settings>`` (a spawned worker, which loads
the entry itself) or called by a forked one (:func:`run_worker`, with the driver's entry).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal as signals
import sys
import threading
from collections import deque
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from tubeless.batch._budget_broker import PipeBudget, metered
from tubeless.batch._entry_source import EntrySource
from tubeless.batch._inputs import InputRow
from tubeless.batch._row import RowPlan, failed_row, run_row
from tubeless.errors import RUN_CANCELLED
from tubeless.mcp import SharedConnections

if TYPE_CHECKING:
    from tubeless.pipeline import CancelToken

__all__ = ["run_worker", "worker_main"]


def worker_main(spec: str) -> None:
    """A spawned worker: load the entry named in ``spec`` (JSON), then serve rows."""
    signals.signal(signals.SIGINT, signals.SIG_IGN)
    settings = json.loads(spec)
    conn = Connection(settings["fd"])
    source = EntrySource(path=settings["path"], entry_id=settings["entry_id"])
    try:
        entry = source.load()
    except BaseException as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    run_worker(conn, entry, settings)


def run_worker(conn: Connection, entry: Any, settings: dict[str, Any]) -> None:
    """Open the worker's own checkpoint store, say it is ready, and run rows until told to
    stop (a spawned worker, after loading the entry; a forked one, with the driver's)."""
    store = None
    try:
        if settings.get("checkpoints") is not None:
            from tubeless.durable import open_checkpoints

            store = open_checkpoints(settings["checkpoints"])
    except BaseException as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready",))
    try:
        asyncio.run(_Worker(conn, entry, settings, store).serve())
    finally:
        if store is not None:
            store.close()


class _Worker:
    """The worker's loop: messages from the driver in, rows run one after another."""

    def __init__(self, conn: Connection, entry: Any, settings: dict[str, Any], store: Any) -> None:
        from tubeless.pipeline import CancelToken

        self.conn, self.entry, self.store = conn, entry, store
        self.traced, self.tools = bool(settings["traced"]), bool(settings["tools"])
        self.stream = bool(settings.get("stream"))
        budget = settings.get("budget")
        self.sending = threading.Lock()
        self.budget = PipeBudget(budget, self.send) if budget is not None else None
        self.token = CancelToken()
        """The token of the rows received since the last ``cancel``."""
        self.queued: deque[tuple[tuple[Any, ...], CancelToken]] = deque()
        self.more = asyncio.Event()
        self.stopping = False
        self.connections = SharedConnections()  # one per MCP server for this worker's rows

    def send(self, message: tuple[Any, ...]) -> None:
        with self.sending:  # a sync handler's thread may make records too
            self.conn.send(message)

    def ship(self, record: Any) -> None:
        # Sent at once, before the work the record announces: what reached the socket before
        # this process died still reaches the driver.
        from tubeless.tracing.records import record_json

        self.send(("records", [record_json(record)]))

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[tuple[Any, ...] | None] = asyncio.Queue()
        threading.Thread(
            target=self._read, args=(loop, inbox), name="tubeless-batch-inbox", daemon=True
        ).start()
        rows = asyncio.create_task(self._run_rows())
        while True:
            message = await inbox.get()
            if message is None:
                os._exit(0)  # the driver is gone: nobody is left to receive a row
            kind = message[0]
            if kind == "row":
                self.queued.append((message, self.token))
                self.more.set()
            elif kind == "cancel":
                from tubeless.pipeline import CancelToken

                self.token.cancel(str(message[1]))
                self.token = CancelToken()
            else:  # stop
                break
        self.stopping = True
        self.queued.clear()
        self.more.set()
        with contextlib.suppress(BaseException):
            await rows
        await self.connections.close()

    def _read(self, loop: asyncio.AbstractEventLoop, inbox: asyncio.Queue[Any]) -> None:
        """The pipe's reader thread: budget answers go straight to the waiting request (the
        loop is blocked on it), everything else to the loop."""
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                if self.budget is not None:
                    self.budget.deliver(None)
                loop.call_soon_threadsafe(inbox.put_nowait, None)
                return
            if message[0] == "budget" and self.budget is not None:
                self.budget.deliver(message[1])
                continue
            loop.call_soon_threadsafe(inbox.put_nowait, message)

    async def _run_rows(self) -> None:
        while not self.stopping:
            if not self.queued:
                self.more.clear()
                await self.more.wait()
                continue
            message, token = self.queued.popleft()
            await self._one(message, token)

    async def _one(self, message: tuple[Any, ...], token: CancelToken) -> None:
        _, index, line, raw, problem, text, key, plan = message
        item = InputRow(index=index, line=line, raw=raw, problem=problem, text=text)
        if token.cancelled:  # cancelled while it waited here: it never starts
            outcome = failed_row(item, key, RUN_CANCELLED, "the row was cancelled")
            outcome.row["status"] = "cancelled"
            self.send(("done", outcome.to_wire()))
            return
        ledger = None if self.budget is None else self.budget.ledger
        with self.connections.active(), metered(ledger):
            outcome = await run_row(
                self.entry,
                item,
                key,
                traced=self.traced,
                tools=self.tools,
                signal=token,
                store=self.store,
                plan=RowPlan.from_wire(plan),
                forward=self.ship if self.stream else None,
            )
        self.send(("done", outcome.to_wire()))


if __name__ == "__main__":
    worker_main(sys.argv[1])
