"""The engine interface and the ``local`` engine (where an entry comes from: ``_entry_source``).

An engine runs one row at a time per slot; the batch runner keeps ``concurrency`` rows in
flight and awaits :meth:`Engine.run` for each. An engine never raises for a row's own failure:
a row whose worker died runs again on another worker, ``row_retries`` more times at most
(:func:`with_row_retries`), and then comes back as a failed row (``TUBELESS_BATCH_WORKER_DIED``);
the engine replaces the worker where it can. Workers of other processes ship a row's trace
records to the driver as they are made (``on_records``), so an attempt that died is traced too.
"""

from __future__ import annotations

from collections.abc import Coroutine
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal, Protocol

from tubeless.batch._entry_source import EntrySource, OnRecord
from tubeless.batch._inputs import InputRow
from tubeless.batch._retries import DEFAULT_ROW_RETRIES, lease_wait, with_row_retries
from tubeless.batch._row import NO_PLAN, RowOutcome, RowPlan, run_row
from tubeless.errors import BATCH_ENGINE_UNAVAILABLE, BatchError
from tubeless.mcp import SharedConnections

if TYPE_CHECKING:
    from tubeless.agent._spi import Ledger
    from tubeless.durable import CheckpointStore
    from tubeless.pipeline import CancelToken, Pipeline

__all__ = [
    "DEFAULT_ROW_RETRIES",
    "ENGINES",
    "Engine",
    "EngineName",
    "EntrySource",
    "LocalEngine",
    "OnRecord",
    "make_engine",
    "with_row_retries",
]

EngineName = Literal["local", "process", "ray"]
ENGINES: tuple[EngineName, ...] = ("local", "process", "ray")


class Engine(Protocol):
    """Runs rows; one implementation per ``--engine`` value."""

    async def start(self) -> None:
        """Start the workers (before the first row)."""

    async def run(
        self, item: InputRow, key: str, *, retry: bool = False, plan: RowPlan = NO_PLAN
    ) -> RowOutcome:
        """Run one row; ``retry=True`` asks for another worker than the one that failed it;
        ``plan`` names its checkpoint key and cassette."""

    def cancel(self, reason: str) -> None:
        """Cancel the rows in flight (cooperatively: they come back ``cancelled``)."""

    async def close(self) -> None:
        """Stop the workers."""


class LocalEngine:
    """Rows as asyncio tasks in this process, sharing its event loop (and, being one worker,
    one connection per MCP server for the whole batch: ``tubeless.mcp.SharedConnections``)."""

    def __init__(
        self,
        entry: Pipeline,
        *,
        traced: bool,
        tools: bool,
        signal: CancelToken,
        store: CheckpointStore | None = None,
    ) -> None:
        self._entry = entry
        self._traced = traced
        self._tools = tools
        self._signal = signal
        self._store = store
        self._connections = SharedConnections()

    async def start(self) -> None:
        pass

    def scope(self) -> AbstractContextManager[None]:
        """The context the batch's slots are made in (each task keeps a copy of it): the
        batch's MCP connections, made current once for every row rather than once a row."""
        return self._connections.active()

    def run(
        self, item: InputRow, key: str, *, retry: bool = False, plan: RowPlan = NO_PLAN
    ) -> Coroutine[Any, Any, RowOutcome]:
        # Not a coroutine of its own: the row's coroutine is awaited by the slot directly
        # (a frame less on every step of the row). The slot runs in :meth:`scope`.
        return run_row(  # (by position: see run_row)
            self._entry, item, key, self._traced, self._tools, self._signal, self._store, plan
        )

    def cancel(self, reason: str) -> None:
        self._signal.cancel(reason)

    async def close(self) -> None:
        await self._connections.close()


def make_engine(
    name: EngineName,
    entry: Pipeline | EntrySource,
    *,
    concurrency: int,
    traced: bool,
    signal: CancelToken,
    tools: bool = False,
    ray_address: str | None = None,
    store: CheckpointStore | None = None,
    store_path: str | None = None,
    row_retries: int = DEFAULT_ROW_RETRIES,
    on_records: OnRecord | None = None,
    budget: Ledger | None = None,
) -> Engine:
    """The engine called ``name`` for ``entry``.

    ``store`` is the batch's checkpoint store (the ``local`` engine uses it); ``store_path``
    is its file, which the workers of ``process`` and ``ray`` open for themselves. With
    ``on_records`` (and ``traced``), those workers ship each row's records as they are made;
    ``row_retries`` bounds how often a row whose worker died runs again; its rerun waits for
    the dead worker's lease on the row's key to expire (``store.lease_ttl_s``). ``budget`` is
    the batch-wide budget's ledger: the ``process`` and ``ray`` workers' rows reserve against
    it through :mod:`tubeless.batch._budget_broker` (the ``local`` engine's rows charge it
    directly; the runner puts it in their chains).

    Raises:
        BatchError: ``TUBELESS_BATCH_ENGINE_UNAVAILABLE`` when ``process`` or ``ray`` is given a
            pipeline object (workers load entries from project files), or Ray is not installed.
    """
    if name == "local":
        pipeline = entry.load() if isinstance(entry, EntrySource) else entry
        return LocalEngine(pipeline, traced=traced, tools=tools, signal=signal, store=store)
    if not isinstance(entry, EntrySource):
        raise BatchError(
            BATCH_ENGINE_UNAVAILABLE,
            f"the {name} engine loads the entry from its project file in each worker: pass "
            "the project's path (or an EntrySource), not a pipeline object",
        )
    if store is not None and store_path is None:
        raise BatchError(
            BATCH_ENGINE_UNAVAILABLE,
            f"the {name} engine's workers open the checkpoint file themselves: pass its path "
            "as checkpoints=, not a store object",
        )
    if name == "process":
        from tubeless.batch._process import ProcessEngine

        return ProcessEngine(
            entry,
            workers=concurrency,
            traced=traced,
            tools=tools,
            signal=signal,
            store_path=store_path,
            row_retries=row_retries,
            lease_wait_s=lease_wait(store),
            on_records=on_records,
            budget=budget,
        )
    if name == "ray":
        from tubeless.batch._ray import RayEngine

        return RayEngine(
            entry,
            actors=concurrency,
            traced=traced,
            tools=tools,
            signal=signal,
            address=ray_address,
            store_path=store_path,
            row_retries=row_retries,
            lease_wait_s=lease_wait(store),
            on_records=on_records,
            budget=budget,
        )
    raise BatchError(
        BATCH_ENGINE_UNAVAILABLE, f"unknown engine {name!r}; choose one of " + ", ".join(ENGINES)
    )
