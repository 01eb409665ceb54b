"""The ``ray`` engine: one Ray actor per slot, each loading the project from its files.

The project is shipped with Ray's runtime environment (:mod:`tubeless.batch._ray_setup`): its
``working_dir`` is the folder that holds the project file and every ``python_path`` folder it
names (caches, virtual environments, version control, SQLite files and traces left out), and
actors load the project by its path inside it. The driver connects to ``address`` (or
``RAY_ADDRESS``), else starts a local Ray for the batch, and disconnects (a local Ray stops)
afterwards. A Ray the caller already initialised in this process is used as it is, with its own
runtime environment: actors then load the project by its absolute path.

A row's records stream back as the row makes them (an actor's ``run`` is a generator). The pool
never waits for room the cluster does not have: an actor that is not placed within
:data:`PLACEMENT_WAIT_S` is given up, and an actor that dies is replaced only while the cluster
(as it is now: a node may be gone) has room for it; otherwise the pool shrinks, said on stderr.
The row of an actor that died runs again on another actor (``row_retries`` times at most);
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
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tubeless.batch._budget_broker import BudgetActor, bounds_to_wire, metered, ray_budget, refresh
from tubeless.batch._entry_source import EntrySource, OnRecord
from tubeless.batch._inputs import InputRow
from tubeless.batch._ray_setup import EXCLUDES, file_identity, init_ray, not_the_drivers
from tubeless.batch._retries import DEFAULT_ROW_RETRIES, with_row_retries
from tubeless.batch._row import (
    NO_PLAN,
    RowMessage,
    RowOutcome,
    RowPlan,
    failed_row,
    row_messages,
    run_row,
)
from tubeless.durable import is_database_url
from tubeless.errors import (
    BATCH_ENGINE_UNAVAILABLE,
    BATCH_WORKER_DIED,
    CASSETTE_INVALID,
    RUN_CANCELLED,
    BatchError,
)
from tubeless.mcp import SharedConnections

if TYPE_CHECKING:
    from tubeless.agent._spi import Ledger
    from tubeless.pipeline import CancelToken

__all__ = ["EXCLUDES", "PLACEMENT_WAIT_S", "RayEngine"]

#: Seconds an actor may take to be placed on a node and load the project.
PLACEMENT_WAIT_S = 60.0
#: Seconds the idle actors have, at the end, to close their MCP connections before the kill.
ACTOR_CLOSE_WAIT_S = 5.0


class _Actor:
    """Loads the entry once, then runs the rows it is sent (an async actor: cancellable)."""

    def __init__(
        self,
        path: str,
        entry_id: str | None,
        traced: bool,
        tools: bool,
        checkpoints: str | None = None,
        checkpoints_identity: list[int] | None = None,
        stream: bool = False,
        budget: tuple[Any, dict[str, Any]] | None = None,
    ) -> None:
        self._budget = ray_budget(budget)  # the batch-wide budget's actor, if any
        self._entry = EntrySource(path=str(Path(path).resolve()), entry_id=entry_id).load()
        self._traced = traced
        self._tools = tools
        self._stream = stream
        self._store = None
        # One connection per MCP server for all the rows this actor runs, as a process worker.
        self._connections = SharedConnections()
        self.problem: str | None = None
        # An absolute path, which must be the driver's own file; or a database URL (no identity)
        if checkpoints is not None:
            self.problem = not_the_drivers(checkpoints, checkpoints_identity, "checkpoint file")
            if self.problem is None:
                from tubeless.durable import open_checkpoints

                self._store = open_checkpoints(checkpoints)

    async def ready(self) -> str | None:
        """``None`` once the actor can run rows; else why it cannot."""
        return self.problem

    async def close(self) -> None:
        """Close the MCP connections this actor's rows shared (before the actor is killed)."""
        await self._connections.close()

    async def run(
        self,
        index: int,
        line: int,
        raw: Any,
        problem: str | None,
        text: str,
        key: str,
        plan: dict[str, Any] | None = None,
        files: dict[str, list[int] | None] | None = None,
    ) -> AsyncIterator[RowMessage]:
        item = InputRow(index=index, line=line, raw=raw, problem=problem, text=text)
        for path, identity in (files or {}).items():
            unseen = not_the_drivers(path, identity, "cassette path")
            if unseen is not None:
                yield ("done", failed_row(item, key, CASSETTE_INVALID, unseen).to_wire())
                return
        row_plan = RowPlan.from_wire(plan)

        async def attempt(forward: Any) -> Any:
            # The row's MCP servers: this actor's connections; its budget: the batch's.
            with self._connections.active(), metered(self._budget):
                return await run_row(
                    self._entry,
                    item,
                    key,
                    traced=self._traced,
                    tools=self._tools,
                    store=self._store,
                    plan=row_plan,
                    forward=forward,
                )

        async for message in row_messages(attempt, stream=self._stream):
            yield message


class RayEngine:
    """``actors`` Ray actors, one row in flight each."""

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
        self._idle: asyncio.Queue[Any] = asyncio.Queue()  # ``None``: no actor is left
        self._running: dict[Any, Any] = {}
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
        await asyncio.wait(waits)
        problems = [str(task.result()) for task in waits if task.result() is not None]
        placed = [actor for task, actor in waits.items() if task.result() is None]
        unusable = [p for p in problems if not p.startswith("was not placed")]
        if unusable or not placed:
            for actor in actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
            await self.close()
            raise BatchError(BATCH_ENGINE_UNAVAILABLE, f"a Ray actor {(unusable or problems)[0]}")
        if len(placed) < self._size:
            _notice(
                f"only {_actors(len(placed))} of {self._size} could be placed within "
                f"{PLACEMENT_WAIT_S:g} s (the cluster has {cpus:g} CPU): the pool shrinks to "
                f"{_actors(len(placed))}"
            )
            for task, actor in waits.items():
                if task.result() is not None:
                    with contextlib.suppress(Exception):
                        ray.kill(actor)
        self._live = len(placed)
        for actor in placed:
            self._idle.put_nowait(actor)
        self._remove_callback = self._signal.add_callback(lambda: self.cancel("cancelled"))

    def _cpus(self) -> float:
        """The CPUs of the cluster's nodes alive now."""
        return float(self._ray.cluster_resources().get("CPU", 0.0))

    def _spawn(self) -> Any:
        actor_class = self._ray.remote(_Actor)
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
        problem = await self._placed(actor)
        if problem is None:
            self._idle.put_nowait(actor)
            return
        self._live -= 1
        with contextlib.suppress(Exception):
            self._ray.kill(actor)
        _notice(
            f"a replacement Ray actor {problem}: the pool shrinks to {_actors(self._live)} "
            f"(was {self._live + 1})"
        )
        self._if_empty()

    def _if_empty(self) -> None:
        if self._live == 0:
            self._idle.put_nowait(None)  # wakes whoever waits for an actor: none will come

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
        ray = self._ray
        actor = await self._idle.get()
        if actor is None:
            self._idle.put_nowait(None)
            return failed_row(
                item,
                key,
                BATCH_ENGINE_UNAVAILABLE,
                "no Ray actor is left to run the row: the cluster has no room for one",
            )
        stream = actor.run.remote(
            item.index,
            item.line,
            item.raw,
            item.problem,
            item.text,
            key,
            plan.to_wire(),
            self._files(plan),
        )
        self._running[stream] = actor
        wire: Any = None
        try:
            async for ref in stream:
                kind, body = await ref
                if kind == "done":
                    wire = body
                elif self._on_records is not None:  # records, as the row made them
                    for line in body:
                        self._on_records(json.loads(line))
        except ray.exceptions.TaskCancelledError:
            self._idle.put_nowait(actor)
            outcome = failed_row(item, key, RUN_CANCELLED, "the row was cancelled")
            outcome.row["status"] = "cancelled"
            return outcome
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
            self._lost(actor)
            reason = type(exc).__name__
            return failed_row(
                item, key, BATCH_WORKER_DIED, f"the Ray actor running the row died ({reason})"
            )
        finally:
            self._running.pop(stream, None)
        self._idle.put_nowait(actor)
        if self._budget is not None:  # what the runner sees before it starts another row
            await refresh(self._budget, self._broker)
        return RowOutcome.from_wire(wire)

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
        idle = []
        while not self._idle.empty():
            actor = self._idle.get_nowait()
            if actor is not None:
                idle.append(actor)
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
