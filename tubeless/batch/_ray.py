"""The ``ray`` engine: one Ray actor per slot, each loading the project from its files.

The project is shipped with Ray's runtime environment (:mod:`tubeless.batch._ray_setup`): its
``working_dir`` is the folder that holds the project file and every ``python_path`` folder it
names (caches, virtual environments, version control, SQLite files and traces left out), and
actors load the project by its path inside it. The driver connects to ``address`` (or
``RAY_ADDRESS``), else starts a local Ray for the batch, and disconnects (a local Ray stops)
afterwards. A Ray the caller already initialised in this process is used as it is, with its own
runtime environment: actors then load the project by its absolute path.

Rows go to actors in batches, up to :data:`ROWS_PER_CALL` in one remote call
(:mod:`tubeless.batch._ray_actor`): the rows waiting when an actor is free, split evenly
between the actors free or about to be, and about :data:`CALL_WORK_S` of work at most by the
rows' average time (slow rows go one per call). Each row's result, and its records as the row
makes them, stream back as it finishes (a call is a generator), so rows still come back one by
one. Rows start with the first actor that is ready; the others join the pool as they become
ready. The pool never waits for room the cluster does not have: an actor that is not placed
within :data:`PLACEMENT_WAIT_S` is given up, and an actor that dies is replaced only while the
cluster (as it is now: a node may be gone) has room for it; otherwise the pool shrinks, said on
stderr.
The row an actor was running when it died runs again on another actor (``row_retries`` times
at most; the rows of its batch after that one had not started and simply wait for an actor);
with a database URL store, its rerun waits for the dead actor's lease on the row's key to
expire, then resumes the row from the checkpoint (:mod:`tubeless.batch._retries`).
An actor whose host does not see the driver's checkpoint file as the driver's own never runs
a row (a fresh, empty store there would make a resume depend on where a row lands).
With a batch-wide budget, a small actor holds it and grants each row's model requests before
they are sent (:mod:`tubeless.batch._budget_broker`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tubeless.batch._budget_broker import BudgetActor, bounds_to_wire, refresh
from tubeless.batch._entry_source import EntrySource, OnRecord
from tubeless.batch._inputs import InputRow
from tubeless.batch._ray_actor import WireRow, _Actor, _Pending
from tubeless.batch._ray_setup import EXCLUDES, file_identity, init_ray
from tubeless.batch._retries import DEFAULT_ROW_RETRIES, with_row_retries
from tubeless.batch._row import NO_PLAN, RowOutcome, RowPlan, failed_row
from tubeless.durable import is_database_url
from tubeless.errors import BATCH_ENGINE_UNAVAILABLE, BATCH_WORKER_DIED, BatchError

if TYPE_CHECKING:
    from tubeless.agent._spi import Ledger
    from tubeless.pipeline import CancelToken

__all__ = ["CALL_WORK_S", "EXCLUDES", "PLACEMENT_WAIT_S", "ROWS_PER_CALL", "RayEngine", "_Actor"]

#: Seconds an actor may take to be placed on a node and load the project.
PLACEMENT_WAIT_S = 60.0
#: Seconds the idle actors have, at the end, to close their MCP connections before the kill.
ACTOR_CLOSE_WAIT_S = 5.0
#: Rows sent to an actor in one remote call at most (Ray's cost is per call).
ROWS_PER_CALL = 16
#: Seconds of rows a call holds, by the rows' running average: slow rows go one by one, so a
#: long batch on one actor never leaves another actor idle at the end.
CALL_WORK_S = 0.05


class RayEngine:
    """``actors`` Ray actors, each running one row at a time from the batches it is sent;
    the driver may hand over :attr:`slots` rows at once."""

    def __init__(
        self,
        source: EntrySource,
        *,
        actors: int,
        traced: bool,
        tools: bool,
        signal: CancelToken,
        address: str | None,
        store_path: str | None = None,
        row_retries: int = DEFAULT_ROW_RETRIES,
        lease_wait_s: float | None = None,
        on_records: OnRecord | None = None,
        budget: Ledger | None = None,
    ) -> None:
        try:
            import ray
        except ImportError:
            raise BatchError(
                BATCH_ENGINE_UNAVAILABLE, "the ray engine needs Ray: pip install 'tubeless[ray]'"
            ) from None
        self._ray: Any = ray
        self._source = source
        self._store_path = store_path
        self._size = actors
        self._traced = traced
        self._tools = tools
        self._signal = signal
        self._row_retries = row_retries
        self._lease_wait_s = lease_wait_s
        self._on_records = on_records if traced else None
        self._address = address or os.environ.get("RAY_ADDRESS") or None
        self._started_ray = False
        self._free: list[Any] = []  # placed actors with no batch to run
        self._queue: deque[_Pending] = deque()  # rows waiting for an actor
        self._none_left = False  # no actor is left: rows fail at once
        self._pumping = False  # a call to _pump is scheduled
        self._running: dict[Any, Any] = {}  # a batch's stream: its actor
        self._sending: set[asyncio.Task[None]] = set()
        self._closing = False
        self._joining: dict[asyncio.Future[str | None], Any] = {}  # made at the start, not ready
        self._row_s: float | None = None  # a row's time on an actor, a running average
        #: Rows the driver may hand over at once: a batch for each actor, and the next.
        # A batch-wide budget is checked by the driver before it hands a row over, so with one
        # the engine holds no rows ahead: each call carries one row, started only once the
        # budget said it may.
        self.slots = actors if budget is not None else actors * ROWS_PER_CALL
        self._live = 0  # actors placed or being placed, running rows or idle
        self._per_actor = 1.0
        self._options: dict[str, Any] = {}
        self._identities: dict[str, list[int] | None] = {}
        self._replacing: set[asyncio.Task[None]] = set()
        self._remove_callback: Any = None
        self._budget = budget
        """The batch-wide budget; an actor holds the real one (``_budget_broker``)."""
        self._broker: Any = None

    # -- the pool ----------------------------------------------------------------------------------
    async def start(self) -> None:
        ray = self._ray
        self._relative = self._source.path
        if not ray.is_initialized():
            self._relative = init_ray(ray, self._source, self._address)
            self._started_ray = True
        cpus = self._cpus()
        self._per_actor = min(1.0, cpus / self._size) if cpus > 0 else 1.0
        self._options = {"num_cpus": self._per_actor, "max_restarts": 0}
        if self._budget is not None:
            self._broker = (
                ray.remote(BudgetActor)
                .options(num_cpus=0, max_restarts=0)
                .remote(bounds_to_wire(self._budget))
            )
        actors = [self._spawn() for _ in range(self._size)]
        waits = {asyncio.ensure_future(self._placed(actor)): actor for actor in actors}
        pending, problems = set(waits), []
        while pending and not self._free:  # rows start with the first actor that is ready
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if (problem := task.result()) is None:
                    self._free.append(waits[task])
                else:
                    problems.append(problem)
                    with contextlib.suppress(Exception):
                        ray.kill(waits[task])
        unusable = [p for p in problems if not p.startswith("was not placed")]
        if unusable or not self._free:
            for task in pending:
                task.cancel()
            for actor in actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
            self._free = []
            await self.close()
            raise BatchError(BATCH_ENGINE_UNAVAILABLE, f"a Ray actor {(unusable or problems)[0]}")
        if problems:
            _notice(
                f"{_actors(len(problems))} of {self._size} could not be placed within "
                f"{PLACEMENT_WAIT_S:g} s (the cluster has {cpus:g} CPU): the pool shrinks to "
                f"{_actors(self._size - len(problems))}"
            )
        self._live = self._size - len(problems)
        for task in pending:  # the others join the pool when they are ready
            self._joining[task] = waits[task]
            task.add_done_callback(self._joined)
        self._remove_callback = self._signal.add_callback(lambda: self.cancel("cancelled"))

    def _joined(self, task: asyncio.Future[str | None]) -> None:
        """An actor made at the start is ready (it takes rows), or it is not (the pool
        shrinks, as when an actor dies and the cluster has no room for another)."""
        actor = self._joining.pop(task, None)
        if actor is None or self._closing:
            return
        self._settle_placed(actor, None if task.cancelled() else task.result(), "a Ray actor")

    def _settle_placed(self, actor: Any, problem: str | None, which: str) -> None:
        """An actor placed and loaded takes rows; one that could not be shrinks the pool."""
        if problem is None:
            self._free.append(actor)
            self._schedule()
            return
        self._live -= 1
        with contextlib.suppress(Exception):
            self._ray.kill(actor)
        _notice(
            f"{which} {problem}: the pool shrinks to {_actors(self._live)} (was {self._live + 1})"
        )
        self._if_empty()

    def _cpus(self) -> float:
        """The CPUs of the cluster's nodes alive now."""
        return float(self._ray.cluster_resources().get("CPU", 0.0))

    def _spawn(self) -> Any:
        actor_class = self._ray.remote(_Actor)  # an async actor: its calls can be cancelled
        identity = None
        if self._store_path is not None and not is_database_url(self._store_path):
            found = file_identity(self._store_path)
            identity = list(found) if found is not None else None
        return actor_class.options(**self._options).remote(
            self._relative,
            self._source.entry_id,
            self._traced,
            self._tools,
            self._store_path,
            identity,
            self._on_records is not None,
            None if self._broker is None else (self._broker, bounds_to_wire(self._budget)),
        )

    async def _placed(self, actor: Any) -> str | None:
        """``None`` once ``actor`` runs and can take rows; else what went wrong."""
        try:
            problem = await asyncio.wait_for(_await(actor.ready.remote()), PLACEMENT_WAIT_S)
        except TimeoutError:
            return f"was not placed within {PLACEMENT_WAIT_S:g} s"
        except self._ray.exceptions.RayError as exc:
            return f"could not load the entry: {_first_line(exc)}"
        return None if problem is None else f"cannot run rows: {problem}"

    def _lost(self, actor: Any) -> None:
        """``actor`` died: replace it if the cluster has room for it now, else shrink."""
        self._live -= 1
        with contextlib.suppress(Exception):
            self._ray.kill(actor)
        if self._closing:
            return None
        if self._signal.cancelled:
            return self._if_empty()
        room = int(self._cpus() / self._per_actor + 1e-9)
        if self._live < min(self._size, room):
            self._live += 1
            task = asyncio.ensure_future(self._replace())
            self._replacing.add(task)
            task.add_done_callback(self._replacing.discard)
            return None
        _notice(
            f"a Ray actor died and the cluster now has room for {_actors(room)} "
            f"({self._cpus():g} CPU): the pool shrinks to {_actors(self._live)} "
            f"(was {self._live + 1})"
        )
        return self._if_empty()

    async def _replace(self) -> None:
        actor = self._spawn()
        self._settle_placed(actor, await self._placed(actor), "a replacement Ray actor")

    def _if_empty(self) -> None:
        if self._live == 0:
            self._none_left = True
            while self._queue:
                self._queue.popleft().unplaced()

    # -- rows --------------------------------------------------------------------------------------
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
        pending = _Pending(item, key, plan, asyncio.get_running_loop().create_future())
        if self._none_left:
            pending.unplaced()
        else:
            self._queue.append(pending)
            self._schedule()
        return await pending.future

    def _schedule(self) -> None:
        """Send the waiting rows once the rows handed over in this turn of the loop are in
        (the driver's slots each hand one over): one batch per free actor."""
        if not self._pumping:
            self._pumping = True
            asyncio.get_running_loop().call_soon(self._pump)

    def _pump(self) -> None:
        self._pumping = False
        while self._free:
            while self._queue and self._queue[0].future.done():
                self._queue.popleft()  # nobody waits for it any more (the batch stopped)
            if not self._queue:
                return
            # The waiting rows split evenly between the actors free or about to be, at most
            # CALL_WORK_S of them (one row until a row's time is known).
            share = -(-len(self._queue) // (len(self._free) + len(self._joining)))
            fits = 1 if self._row_s is None else math.ceil(CALL_WORK_S / self._row_s)
            size = max(1, min(ROWS_PER_CALL, share, fits))
            rows: list[_Pending] = []
            while self._queue and len(rows) < size:
                pending = self._queue.popleft()
                if not pending.future.done():
                    rows.append(pending)
            if rows:
                task = asyncio.ensure_future(self._send(self._free.pop(), rows))
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)

    async def _send(self, actor: Any, rows: list[_Pending]) -> None:
        """Run ``rows`` on ``actor`` in one call; settle each as its result arrives."""
        ray = self._ray
        wire: list[WireRow] = [
            (
                p.item.index,
                p.item.line,
                p.item.raw,
                p.item.problem,
                p.item.text,
                p.key,
                p.plan.to_wire(),
                self._files(p.plan),
            )
            for p in rows
        ]
        # The actor starts a row only once its previous message reached us: the row it runs
        # when it dies is then the first one without a result (a message still on its way
        # would make a finished row look like the one that killed it, and run it again).
        stream = actor.run_batch.options(_generator_backpressure_num_objects=1).remote(wire)
        self._running[stream] = actor
        settled = 0  # rows[:settled] have their outcome (an actor runs its rows in order)
        last = time.monotonic()
        try:
            async for ref in stream:
                n, kind, body = await ref
                if kind == "done":
                    if self._budget is not None:  # what the runner sees before its next row
                        await refresh(self._budget, self._broker)
                    rows[n].settle(RowOutcome.from_wire(body))
                    settled = n + 1
                    now = time.monotonic()
                    took, last = now - last, now
                    self._row_s = took if self._row_s is None else 0.8 * self._row_s + 0.2 * took
                    if settled == len(rows):  # free now, not once the call's end comes back
                        self._free.append(actor)
                        self._schedule()
                elif self._on_records is not None:  # records, as the row made them
                    for line in body:
                        self._on_records(json.loads(line))
        except ray.exceptions.TaskCancelledError:
            if settled < len(rows):
                for pending in rows[settled:]:
                    pending.cancelled()
                self._free.append(actor)  # alive: its call was cancelled, not the actor
            return
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
            if settled == len(rows):  # our rows were done; the actor died after them
                if actor not in self._free:
                    return  # the batch it runs now says so
                self._free.remove(actor)
            else:  # the row it was running; the rows after it never started
                rows[settled].settle(
                    failed_row(
                        rows[settled].item,
                        rows[settled].key,
                        BATCH_WORKER_DIED,
                        f"the Ray actor running the row died ({type(exc).__name__})",
                    )
                )
                self._queue.extendleft(reversed(rows[settled + 1 :]))
            self._lost(actor)
            self._schedule()
            return
        except BaseException:
            for pending in rows[settled:]:
                pending.cancelled()
            raise
        finally:
            self._running.pop(stream, None)
        if settled < len(rows):  # not expected: a batch ends with each row's result
            for pending in rows[settled:]:
                pending.settle(
                    failed_row(
                        pending.item,
                        pending.key,
                        BATCH_WORKER_DIED,
                        "the Ray actor ended its batch without the row's result",
                    )
                )
            self._free.append(actor)
            self._schedule()

    def _files(self, plan: RowPlan) -> dict[str, list[int] | None]:
        """The row's cassette paths (a recording's folder) with their identity on this host."""
        paths = [plan.replay] if plan.replay is not None else []
        if plan.record is not None:
            paths.append(str(Path(plan.record).parent))
        for path in paths:
            if path not in self._identities:
                found = file_identity(path)
                self._identities[path] = list(found) if found is not None else None
        return {path: self._identities[path] for path in paths}

    def cancel(self, reason: str) -> None:
        while self._queue:
            self._queue.popleft().cancelled()
        for stream in list(self._running):
            with contextlib.suppress(Exception):
                self._ray.cancel(stream)

    async def close(self) -> None:
        if self._remove_callback is not None:
            self._remove_callback()
            self._remove_callback = None
        pending = [task for task in self._replacing if not task.done()]
        if pending:
            # Ray's view of the cluster can lag a lost node: say what the pool really ran with.
            _notice(
                f"{_actors(len(pending))} replacing a lost one still had no room on the cluster "
                f"when the batch ended: the pool ran with {_actors(self._live - len(pending))} "
                f"of {self._size}"
            )
        for task in pending:
            task.cancel()
        self._closing = True
        for joining, actor in list(self._joining.items()):
            joining.cancel()
            with contextlib.suppress(Exception):
                self._ray.kill(actor)
        self._joining.clear()
        for task in list(self._sending):
            task.cancel()  # the rows of its batch come back cancelled
        idle, self._free = self._free, []
        while self._queue:
            self._queue.popleft().cancelled()
        if idle:  # their MCP servers are told goodbye; a bounded wait, then the kill
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    asyncio.gather(*(_await(actor.close.remote()) for actor in idle)),
                    ACTOR_CLOSE_WAIT_S,
                )
        for actor in idle:
            with contextlib.suppress(Exception):
                self._ray.kill(actor)
        for actor in list(self._running.values()):
            with contextlib.suppress(Exception):
                self._ray.kill(actor)
        if self._broker is not None:
            with contextlib.suppress(Exception):
                self._ray.kill(self._broker)
            self._broker = None
        if self._started_ray:
            self._ray.shutdown()
            self._started_ray = False


async def _await(ref: Any) -> Any:
    return await ref


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[-1] if text else type(exc).__name__


def _actors(n: int) -> str:
    return f"{n} actor" if n == 1 else f"{n} actors"


def _notice(message: str) -> None:
    """A line for the user on stderr (never stdout: rows may go there)."""
    print(f"warning: {message}", file=sys.stderr, flush=True)
