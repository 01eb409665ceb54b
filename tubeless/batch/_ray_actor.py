"""The ``ray`` engine's actor: the project loaded once, then rows run one at a time, in the
batches the driver sends (:mod:`tubeless.batch._ray`).

A batch is one remote call: a list of rows, run in order, each row's messages streamed back
as it makes them (``(n, "records", lines)`` while streaming records, then ``(n, "done",
wire)``, ``n`` the row's place in the batch). One call for many rows is what makes the
engine's cost per row small: Ray's cost is per call, several milliseconds each. The actor
runs one batch at a time; a call cancelled by the driver cancels the row it is running, and
the rows after it never start.

The driver's side of a row sent to an actor is a :class:`_Pending`: the row and the future its
caller awaits. Ray is not imported here: the engine makes :class:`_Actor` an actor with
``ray.remote``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tubeless.batch._budget_broker import metered, ray_budget
from tubeless.batch._entry_source import EntrySource
from tubeless.batch._inputs import InputRow
from tubeless.batch._ray_setup import not_the_drivers
from tubeless.batch._row import RowOutcome, RowPlan, failed_row, row_messages, run_row
from tubeless.errors import BATCH_ENGINE_UNAVAILABLE, CASSETTE_INVALID, RUN_CANCELLED
from tubeless.mcp import SharedConnections

__all__ = ["WireRow", "_Actor", "_Pending"]

WireRow = tuple[int, int, Any, "str | None", str, str, "dict[str, Any] | None", Any]
"""One row as sent to an actor: index, line, raw input, problem, text, key, plan on the wire,
and the identities of its cassette paths on the driver's host."""


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
        self._one_at_a_time: asyncio.Lock | None = None
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

    async def run_batch(self, rows: list[WireRow]) -> AsyncIterator[tuple[int, str, Any]]:
        """Run ``rows`` in order, one at a time; yield each one's messages, tagged with its
        place in the batch."""
        if self._one_at_a_time is None:
            self._one_at_a_time = asyncio.Lock()
        async with self._one_at_a_time:  # a batch sent while another runs waits for it
            for n, wire in enumerate(rows):
                async for kind, body in self._messages(*wire):
                    yield n, kind, body

    async def _messages(
        self,
        index: int,
        line: int,
        raw: Any,
        problem: str | None,
        text: str,
        key: str,
        plan: dict[str, Any] | None,
        files: dict[str, list[int] | None] | None,
    ) -> AsyncIterator[tuple[str, Any]]:
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


class _Pending:
    """A row handed to the engine, waiting for an actor or running on one."""

    __slots__ = ("future", "item", "key", "plan")

    def __init__(
        self, item: InputRow, key: str, plan: RowPlan, future: asyncio.Future[RowOutcome]
    ) -> None:
        self.item, self.key, self.plan, self.future = item, key, plan, future

    def settle(self, outcome: RowOutcome) -> None:
        if not self.future.done():
            self.future.set_result(outcome)

    def cancelled(self) -> None:
        outcome = failed_row(self.item, self.key, RUN_CANCELLED, "the row was cancelled")
        outcome.row["status"] = "cancelled"
        self.settle(outcome)

    def unplaced(self) -> None:
        self.settle(
            failed_row(
                self.item,
                self.key,
                BATCH_ENGINE_UNAVAILABLE,
                "no Ray actor is left to run the row: the cluster has no room for one",
            )
        )
