"""The ``process`` engine: a pool of worker processes, each with the project loaded.

Where it is safe (:mod:`tubeless.batch._fork`), a worker is a fork of the driver made once the
driver has loaded the project, ready in milliseconds; elsewhere it is a fresh interpreter
(``python -m tubeless.batch._process``, never a re-import of the caller's ``__main__``) that
loads the entry itself. Either way a worker runs one row at a time, sent over a pipe; the row's
trace records come back as JSON text as they are made, then the row. Workers ignore SIGINT (a
terminal sends it to the whole process group): the driver cancels their rows by message
instead. A worker whose pipe closes (it died) is replaced and its row runs again on another
worker (``row_retries`` times at most) before it fails; with a database URL store, once the
dead worker's lease on the row's key expired. A worker whose driver went away (its pipe
closed) exits at once. With a batch-wide budget, a worker's model requests are granted by the
driver over the same pipe before they are sent (:mod:`tubeless.batch._budget_broker`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal as signals
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from tubeless.batch._budget_broker import PipeBudget, answer, bounds_to_wire, metered
from tubeless.batch._entry_source import EntrySource, OnRecord
from tubeless.batch._fork import Forked, can_fork, fork
from tubeless.batch._inputs import InputRow
from tubeless.batch._retries import DEFAULT_ROW_RETRIES, with_row_retries
from tubeless.batch._row import NO_PLAN, RowOutcome, RowPlan, failed_row, run_row
from tubeless.errors import BATCH_ENGINE_UNAVAILABLE, BATCH_WORKER_DIED, BatchError
from tubeless.mcp import SharedConnections

if TYPE_CHECKING:
    from tubeless.agent._spi import Ledger
    from tubeless.pipeline import CancelToken, Pipeline

__all__ = ["ProcessEngine"]


class _Worker:
    __slots__ = ("conn", "process", "serial")

    def __init__(
        self, process: subprocess.Popen[bytes] | Forked, conn: Connection, serial: int
    ) -> None:
        self.process = process
        self.conn = conn
        self.serial = serial


class ProcessEngine:
    """``workers`` processes, one row in flight each."""

    def __init__(
        self,
        source: EntrySource,
        *,
        workers: int,
        traced: bool,
        tools: bool,
        signal: CancelToken,
        store_path: str | None = None,
        row_retries: int = DEFAULT_ROW_RETRIES,
        lease_wait_s: float | None = None,
        on_records: OnRecord | None = None,
        budget: Ledger | None = None,
    ) -> None:
        self._source = source
        self._budget = budget
        """The batch-wide budget: workers' reservations are granted here (_budget_broker)."""
        self._row_retries = row_retries
        self._lease_wait_s = lease_wait_s
        self._on_records = on_records if traced else None
        self._store_path = store_path
        self._size = workers
        self._traced = traced
        self._tools = tools
        self._signal = signal
        self._idle: asyncio.Queue[_Worker] = asyncio.Queue()
        self._busy: set[_Worker] = set()
        self._serial = 0
        # Threads wait for a worker to be ready or to end (rows' messages: the event loop).
        self._threads = ThreadPoolExecutor(
            max_workers=workers + 1, thread_name_prefix="tubeless-batch-pipe"
        )
        self._remove_callback: Any = None
        self._launched: list[_Worker] = []
        """Workers started and not yet ready."""
        self._live: set[_Worker] = set()
        """Every worker started and not yet reaped (a fork closes the driver's ends of their
        pipes in the new worker)."""
        self._loaded: Pipeline | None = None
        """The entry as the driver loaded it, once workers are forked from the driver."""

    def launch(self) -> Pipeline | None:
        """Start every worker process now, all at once; :meth:`start` waits for them.

        Forked workers (where :func:`can_fork` allows) are started after this process loaded
        the project, and that entry is returned for the driver's own use; spawned ones load
        the project in parallel while the driver goes on (``None`` is returned)."""
        if self._launched:
            return self._loaded
        if can_fork(self._store_path):
            try:
                self._loaded = self._source.load()
            except Exception:  # the driver's own load says what is wrong, in its words
                self._loaded = None
        if self._loaded is not None and can_fork(self._store_path):  # loading made no thread
            self._launched = [self._fork() for _ in range(self._size)]
        else:
            self._loaded = None
            self._launched = [self._spawn() for _ in range(self._size)]
        return self._loaded

    async def start(self) -> None:
        self.launch()
        while self._launched:
            await self._ready(self._launched[0])
            self._idle.put_nowait(self._launched.pop(0))
        self._remove_callback = self._signal.add_callback(lambda: self.cancel("cancelled"))

    def _settings(self) -> dict[str, Any]:
        return {
            "path": self._source.path,
            "entry_id": self._source.entry_id,
            "traced": self._traced,
            "tools": self._tools,
            "checkpoints": self._store_path,
            "stream": self._on_records is not None,
            "budget": bounds_to_wire(self._budget),
        }

    def _new_worker(self) -> _Worker:
        """A replacement: forked when the driver loaded the entry and may still fork."""
        if self._loaded is not None and can_fork(self._store_path):
            return self._fork()
        return self._spawn()

    def _fork(self) -> _Worker:
        parent, child = socket.socketpair()
        self._serial += 1
        entry, settings = self._loaded, self._settings()
        drivers = [worker.conn.fileno() for worker in self._live] + [parent.fileno()]
        process = fork(
            lambda: _run_worker(Connection(child.detach()), entry, settings), close=drivers
        )
        child.close()
        worker = _Worker(process, Connection(parent.detach()), self._serial)
        self._live.add(worker)
        return worker

    def _spawn(self) -> _Worker:
        parent, child = socket.socketpair()
        self._serial += 1
        spec = json.dumps({**self._settings(), "fd": child.fileno()})
        process = subprocess.Popen(
            [sys.executable, "-m", "tubeless.batch._process", spec],
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=2,  # what a handler prints must not land among the rows on stdout
        )
        child.close()
        worker = _Worker(process, Connection(parent.detach()), self._serial)
        self._live.add(worker)
        return worker

    async def _ready(self, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        try:
            message = await loop.run_in_executor(self._threads, worker.conn.recv)
        except (EOFError, OSError):
            message = ("failed", "the worker process exited while loading the project")
        if message[0] != "ready":
            await self.close()
            raise BatchError(
                BATCH_ENGINE_UNAVAILABLE, f"a worker could not load the entry: {message[1]}"
            )

    async def run(
        self, item: InputRow, key: str, *, retry: bool = False, plan: RowPlan = NO_PLAN
    ) -> RowOutcome:
        return await with_row_retries(
            lambda _: self._attempt(item, key, plan),
            retries=self._row_retries,
            retry=retry,
            signal=self._signal,
            lease_wait_s=self._lease_wait_s,
        )

    async def _attempt(self, item: InputRow, key: str, plan: RowPlan) -> RowOutcome:
        worker = await self._idle.get()
        self._busy.add(worker)
        loop = asyncio.get_running_loop()
        try:
            worker.conn.send(
                (
                    "row",
                    item.index,
                    item.line,
                    item.raw,
                    item.problem,
                    item.text,
                    key,
                    plan.to_wire(),
                )
            )
            while True:
                kind, body = await _receive(worker.conn)
                if kind == "done":
                    wire = body
                    break
                if kind == "budget" and self._budget is not None:  # granted before it is sent
                    worker.conn.send(("budget", answer(self._budget, body)))
                    continue
                if self._on_records is not None:  # ("records", lines): as the row made them
                    for line in body:
                        self._on_records(json.loads(line))
        except (EOFError, OSError):
            self._busy.discard(worker)
            code = await loop.run_in_executor(self._threads, _reap, worker)
            self._live.discard(worker)
            self._idle.put_nowait(await self._replace())
            return failed_row(
                item, key, BATCH_WORKER_DIED, f"the worker process running the row died ({code})"
            )
        self._busy.discard(worker)
        self._idle.put_nowait(worker)
        return RowOutcome.from_wire(wire)

    async def _replace(self) -> _Worker:
        worker = self._new_worker()
        await self._ready(worker)
        if self._signal.cancelled:
            with contextlib.suppress(OSError):
                worker.conn.send(("cancel", "cancelled"))
        return worker

    def cancel(self, reason: str) -> None:
        for worker in list(self._busy):
            with contextlib.suppress(OSError):
                worker.conn.send(("cancel", reason))

    async def close(self) -> None:
        if self._remove_callback is not None:
            self._remove_callback()
            self._remove_callback = None
        workers: list[_Worker] = list(self._busy) + self._launched
        self._launched = []
        while not self._idle.empty():
            workers.append(self._idle.get_nowait())
        for worker in workers:
            with contextlib.suppress(OSError):
                worker.conn.send(("stop",))
            worker.conn.close()
        loop = asyncio.get_running_loop()
        for worker in workers:
            await loop.run_in_executor(self._threads, _reap, worker)
            self._live.discard(worker)
        self._threads.shutdown(wait=False)


async def _receive(conn: Connection) -> Any:
    """The next message from a worker, waited for by the event loop (no thread per message:
    at two workers on two cores, each thread woken would take a core from a worker). A message
    is written whole, so once its first bytes are there the rest follows at once; a worker that
    died makes the pipe readable too, and ``recv`` raises ``EOFError``."""
    if not conn.poll():
        loop = asyncio.get_running_loop()
        readable = loop.create_future()
        fd = conn.fileno()

        def wake() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(fd, wake)
        try:
            await readable
        finally:
            loop.remove_reader(fd)
    return conn.recv()


def _reap(worker: _Worker) -> str:
    """Wait briefly for the process to end (killing it if it does not) and say how it ended."""
    try:
        code = worker.process.wait(5)
    except (subprocess.TimeoutExpired, TimeoutError):
        worker.process.kill()
        code = worker.process.wait()
    if code < 0:
        return f"killed by {signals.Signals(-code).name}"
    return f"exit status {code}"


# -- the worker process ---------------------------------------------------------------------------
def _worker_main(spec: str) -> None:
    signals.signal(signals.SIGINT, signals.SIG_IGN)
    settings = json.loads(spec)
    conn = Connection(settings["fd"])
    source = EntrySource(path=settings["path"], entry_id=settings["entry_id"])
    try:
        entry = source.load()
    except BaseException as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    _run_worker(conn, entry, settings)


def _run_worker(conn: Connection, entry: Any, settings: dict[str, Any]) -> None:
    """Open the worker's own checkpoint store, say it is ready, and run rows until told to
    stop (a spawned worker, after loading the entry; a forked one, with the driver's)."""
    traced, tools = bool(settings["traced"]), bool(settings["tools"])
    stream = bool(settings.get("stream"))
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
        asyncio.run(_serve(conn, entry, traced, tools, store, stream, settings.get("budget")))
    finally:
        if store is not None:
            store.close()


async def _serve(
    conn: Connection,
    entry: Any,
    traced: bool,
    tools: bool,
    store: Any,
    stream: bool,
    budget: dict[str, Any] | None = None,
) -> None:
    from tubeless.pipeline import CancelToken

    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[Any, ...] | None] = asyncio.Queue()
    sending = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with sending:  # a sync handler's thread may make records too
            conn.send(message)

    batch_budget = PipeBudget(budget, send) if budget is not None else None

    def read() -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                if batch_budget is not None:
                    batch_budget.deliver(None)
                loop.call_soon_threadsafe(inbox.put_nowait, None)
                return
            if message[0] == "budget" and batch_budget is not None:
                batch_budget.deliver(message[1])  # while the loop waits for it
                continue
            loop.call_soon_threadsafe(inbox.put_nowait, message)

    threading.Thread(target=read, name="tubeless-batch-inbox", daemon=True).start()

    def ship(record: Any) -> None:
        # Sent at once, before the work the record announces: what reached the socket before
        # this process died still reaches the driver.
        from tubeless.tracing.records import record_json

        send(("records", [record_json(record)]))

    token = CancelToken()
    running: set[asyncio.Task[None]] = set()
    connections = SharedConnections()  # one connection per MCP server for this worker's rows

    async def one(message: tuple[Any, ...]) -> None:
        _, index, line, raw, problem, text, key, plan = message
        item = InputRow(index=index, line=line, raw=raw, problem=problem, text=text)
        with connections.active(), metered(None if batch_budget is None else batch_budget.ledger):
            outcome = await run_row(
                entry,
                item,
                key,
                traced=traced,
                tools=tools,
                signal=token,
                store=store,
                plan=RowPlan.from_wire(plan),
                forward=ship if stream else None,
            )
        send(("done", outcome.to_wire()))

    while True:
        message = await inbox.get()
        if message is None:
            os._exit(0)  # the driver is gone: nobody is left to receive a row
        if message[0] == "row":
            if token.cancelled:
                token = CancelToken()
            task = asyncio.create_task(one(message))
            running.add(task)
            task.add_done_callback(running.discard)
        elif message[0] == "cancel":
            token.cancel(str(message[1]))
        else:  # stop
            break
    for task in list(running):
        with contextlib.suppress(BaseException):
            await task
    await connections.close()


if __name__ == "__main__":
    _worker_main(sys.argv[1])
