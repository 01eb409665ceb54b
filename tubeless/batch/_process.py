"""The ``process`` engine: a pool of worker processes, each with the project loaded.

Where it is safe (:mod:`tubeless.batch._fork`), a worker is a fork of the driver made once the
driver has loaded the project, ready in milliseconds; elsewhere it is a fresh interpreter
(``python -m tubeless.batch._process_worker``, never a re-import of the caller's ``__main__``)
that loads the entry itself. Either way a worker runs one row at a time
(:mod:`tubeless.batch._process_worker`), and holds the next one, sent ahead so that it never
waits for the driver between rows (without a batch-wide budget: the batch hands the engine two
rows per worker, :attr:`ProcessEngine.slots`). The row's trace records come back as JSON text
as they are made, then the row; the event loop reads each worker's pipe.

Workers ignore SIGINT (a terminal sends it to the whole process group): the driver cancels
their rows by message instead; a row queued at a worker when the cancellation reaches it comes
back cancelled without starting. A worker whose pipe closes (it died) is replaced: the row it
was running (the first one sent to it without a ``done`` back) runs again on another worker
(``row_retries`` times at most) before it fails, with a database URL store once the dead
worker's lease on the row's key expired; the rows queued behind it never started and simply go
to another worker, without using a retry. A worker whose driver went away (its pipe closed)
exits at once. With a batch-wide budget, a worker's model requests are granted by the driver
over the same pipe before they are sent (:mod:`tubeless.batch._budget_broker`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from tubeless.batch._budget_broker import answer, bounds_to_wire
from tubeless.batch._entry_source import EntrySource, OnRecord
from tubeless.batch._fork import can_fork
from tubeless.batch._frames import send
from tubeless.batch._inputs import InputRow
from tubeless.batch._process_start import Worker, forked, ready, reap, spawned
from tubeless.batch._retries import DEFAULT_ROW_RETRIES, with_row_retries
from tubeless.batch._row import NO_PLAN, RowOutcome, RowPlan, failed_row
from tubeless.errors import (
    BATCH_ENGINE_UNAVAILABLE,
    BATCH_WORKER_DIED,
    RUN_CANCELLED,
    BatchError,
)

if TYPE_CHECKING:
    from tubeless.agent._spi import Ledger
    from tubeless.pipeline import CancelToken, Pipeline

__all__ = ["ProcessEngine"]


#: Rows a worker holds at once: the one it runs and the next, sent ahead so that the worker
#: starts it as soon as the first one ends instead of waiting for the driver to send it.
ROWS_PER_WORKER = 2
#: Rows are sent ahead only while they take less than this on a worker (a running average, by
#: the driver's clock; none before the first row ends): sending ahead saves a round trip
#: through the driver per row, nothing next to a slow row, and a row queued behind a slow one
#: would wait for it even while another worker is idle at the end of the batch.
AHEAD_UNDER_S = 0.25


class _NotStarted:
    """What a row queued at a worker that died gets: it never started, so it is sent to
    another worker as it was (no retry used, no lease to wait for)."""


_NOT_STARTED = _NotStarted()


class _Died:
    """What the row a worker was running when it died gets: how the process ended."""

    __slots__ = ("how",)

    def __init__(self, how: str) -> None:
        self.how = how


class ProcessEngine:
    """``workers`` processes, each running one row with the next one queued behind it."""

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
        # A batch-wide budget is checked by the driver before it hands a row over (a row that
        # finds it spent is skipped, not started): with one, no row waits at a worker.
        self._depth = 1 if budget is not None else ROWS_PER_WORKER
        self.slots = workers * self._depth
        """Rows the batch may hand over at once (its slots: ``_runner``)."""
        self._row_s: float | None = None
        """A row's time on a worker, a running average (``AHEAD_UNDER_S``)."""
        self._workers: list[Worker] = []
        """Workers ready, their pipes read by the event loop."""
        self._waiting: deque[asyncio.Future[None]] = deque()
        """Rows waiting for room at a worker, first come first (rows were slow, or a worker
        died and its replacement is not ready)."""
        self._handing = 0
        """Rows woken for room that did not look yet (no row just read goes before them)."""
        self._cancelled = False
        """The batch was cancelled (its token, or fail-fast): a row handed over from now on
        comes back cancelled without being sent, as the ``local`` engine's rows do."""
        self._broken: BaseException | None = None
        """Why no worker can be started any more (rows fail with it)."""
        self._tasks: set[asyncio.Task[None]] = set()
        """Dead workers being reaped and replaced."""
        self._serial = 0
        # Threads wait for a worker to be ready or to end (rows' messages: the event loop).
        self._threads = ThreadPoolExecutor(
            max_workers=workers + 1, thread_name_prefix="tubeless-batch-pipe"
        )
        self._remove_callback: Any = None
        self._launched: list[Worker] = []
        """Workers started and not yet ready."""
        self._live: set[Worker] = set()
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
        if self._loaded is not None and not can_fork(self._store_path):  # loading made a thread
            self._loaded = None
        self._launched = [self._new_worker() for _ in range(self._size)]
        return self._loaded

    async def start(self) -> None:
        self.launch()
        while self._launched:
            try:
                await ready(self._launched[0], self._threads)
            except BatchError:
                await self.close()
                raise
            self._serve(self._launched.pop(0))
        loop = asyncio.get_running_loop()

        def cancelled() -> None:  # the token may be cancelled from any thread
            if _running_loop() is loop:
                self.cancel("cancelled")
            else:
                with contextlib.suppress(RuntimeError):  # (the loop is closed: nothing runs)
                    loop.call_soon_threadsafe(self.cancel, "cancelled")

        self._remove_callback = self._signal.add_callback(cancelled)

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

    def _new_worker(self) -> Worker:
        """A worker: forked when the driver loaded the entry and may still fork."""
        self._serial += 1
        if self._loaded is not None and can_fork(self._store_path):
            others = [worker.fd for worker in self._live]
            worker = forked(self._loaded, self._settings(), self._serial, others)
        else:
            worker = spawned(self._settings(), self._serial)
        self._live.add(worker)
        return worker

    def _serve(self, worker: Worker) -> None:
        """A ready worker takes rows; the event loop reads what it sends (no thread per
        message: at two workers on two cores, each thread woken would take a core from a
        worker)."""
        self._workers.append(worker)
        asyncio.get_running_loop().add_reader(worker.fd, self._readable, worker)
        self._wake()

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
        message = (
            "row",
            item.index,
            item.line,
            item.raw,
            item.problem,
            item.text,
            key,
            plan.to_wire(),
        )
        loop = asyncio.get_running_loop()
        while True:
            worker = await self._room()
            if worker is None:
                return _cancelled(item, key)
            done = loop.create_future()
            if not worker.sent:
                worker.since = time.monotonic()
            worker.sent.append(done)
            if self._waiting and self._pick() is not None:
                self._wake()  # room for the next row waiting too
            with contextlib.suppress(OSError):  # it died: its pipe's end says so (_lost)
                send(worker.fd, message)
            result = await done
            if result is _NOT_STARTED:
                continue
            if isinstance(result, _Died):
                return failed_row(
                    item,
                    key,
                    BATCH_WORKER_DIED,
                    f"the worker process running the row died ({result.how})",
                )
            return RowOutcome.from_wire(result)

    async def _room(self) -> Worker | None:
        """The worker with the fewest rows, once one holds fewer than it may, for the rows in
        the order they asked (so that rows start in input order); ``None``: the batch was
        cancelled meanwhile."""
        woken = False
        if self._waiting or self._handing:  # rows ahead of this one: it waits its turn first
            await self._turn(first=False)
            woken = True
        while True:
            if self._cancelled:
                return None
            if self._broken is not None:
                raise self._broken
            worker = self._pick()
            if worker is not None:
                return worker
            await self._turn(first=woken)  # a row woken before is still first in line
            woken = True

    async def _turn(self, *, first: bool) -> None:
        """Wait in line until a worker has room (:meth:`_wake`); ``first``: at the front."""
        waiter = asyncio.get_running_loop().create_future()
        if first:
            self._waiting.appendleft(waiter)
        else:
            self._waiting.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # woken, then cancelled
                self._handing -= 1
                self._wake()  # the room it was woken for goes to the next row
            raise
        self._handing -= 1

    def _pick(self) -> Worker | None:
        """The worker with the fewest rows, if it may hold one more."""
        workers = self._workers
        if not workers:
            return None
        worker = min(workers, key=_load) if len(workers) > 1 else workers[0]
        return worker if len(worker.sent) < self._room_at_each() else None

    def _room_at_each(self) -> int:
        """Rows a worker may hold now: the next one too while rows are quick."""
        row_s = self._row_s
        return self._depth if row_s is not None and row_s < AHEAD_UNDER_S else 1

    def _wake(self) -> None:
        """Room at a worker: the row waiting longest for some looks again."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._handing += 1
                return

    def _wake_all(self) -> None:
        for waiter in self._waiting:
            if not waiter.done():
                waiter.set_result(None)
                self._handing += 1
        self._waiting.clear()

    def _readable(self, worker: Worker) -> None:
        """A worker's pipe is readable: the messages it completes, or its end (it died)."""
        messages = worker.frames.read()
        if messages is None:
            self._lost(worker)
            return
        for kind, body in messages:
            if kind == "done":
                now = time.monotonic()
                took, worker.since = now - worker.since, now  # (the next one starts now)
                row_s = self._row_s
                self._row_s = took if row_s is None else row_s + (took - row_s) / 8
                done = worker.sent.popleft()
                if not done.done():
                    done.set_result(body)
                if self._waiting:
                    self._wake()
            elif kind == "budget":  # granted before it is sent
                if self._budget is not None:
                    with contextlib.suppress(OSError):
                        send(worker.fd, ("budget", answer(self._budget, body)))
            elif self._on_records is not None:  # ("records", lines): as the row made them
                for line in body:
                    self._on_records(json.loads(line))

    def _lost(self, worker: Worker) -> None:
        """A worker's pipe closed: it died. The rows queued there go to other workers; the
        one it ran fails once the process is reaped; a replacement is started."""
        asyncio.get_running_loop().remove_reader(worker.fd)
        self._workers.remove(worker)
        self._live.discard(worker)
        sent, worker.sent = worker.sent, deque()
        running = sent.popleft() if sent else None
        for queued in sent:
            if not queued.done():
                queued.set_result(_NOT_STARTED)
        task = asyncio.ensure_future(self._bury(worker, running))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _bury(self, worker: Worker, running: asyncio.Future[Any] | None) -> None:
        loop = asyncio.get_running_loop()
        how = await loop.run_in_executor(self._threads, reap, worker)
        worker.conn.close()
        if running is not None and not running.done():
            running.set_result(_Died(how))
        try:
            replacement = self._new_worker()
            await ready(replacement, self._threads)
        except Exception as exc:  # the rows waiting for a worker, and those to come, fail
            self._broken = exc
            await self.close()
            return
        self._serve(replacement)
        for _ in range(self._room_at_each() - 1):
            self._wake()

    def cancel(self, reason: str) -> None:
        self._cancelled = True
        self._wake_all()
        for worker in self._workers:
            if worker.sent:
                with contextlib.suppress(OSError):
                    send(worker.fd, ("cancel", reason))

    async def close(self) -> None:
        if self._remove_callback is not None:
            self._remove_callback()
            self._remove_callback = None
        for task in list(self._tasks):
            if task is not asyncio.current_task():  # a replacement that could not load closes
                task.cancel()
        loop = asyncio.get_running_loop()
        if self._broken is None:
            self._broken = BatchError(BATCH_ENGINE_UNAVAILABLE, "the process engine was closed")
        for worker in self._workers:
            loop.remove_reader(worker.fd)
            for done in worker.sent:
                if not done.done():  # (the rows of a finished batch were cancelled before)
                    done.set_exception(self._broken)
        self._wake_all()
        self._workers, self._launched = [], []
        workers = list(self._live)
        for worker in workers:
            with contextlib.suppress(OSError):
                worker.conn.send(("stop",))
            worker.conn.close()
        for worker in workers:
            await loop.run_in_executor(self._threads, reap, worker)
            self._live.discard(worker)
        self._threads.shutdown(wait=False)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _load(worker: Worker) -> int:
    return len(worker.sent)


def _cancelled(item: InputRow, key: str) -> RowOutcome:
    """A row the batch's cancellation reached before it started."""
    outcome = failed_row(item, key, RUN_CANCELLED, "the row was cancelled")
    outcome.row["status"] = "cancelled"
    return outcome
