"""The batch's slots: ``concurrency`` tasks that each read the next row, run it on the engine
and record its outcome, and the rows handed back in input order (:class:`Batch`, driven by
:func:`tubeless.batch._runner.run_outcomes`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tubeless.batch._budget_broker import ROW_METER
from tubeless.batch._engine import Engine
from tubeless.batch._output import BatchOutput
from tubeless.batch._plans import NamedRow, PlanMaker
from tubeless.batch._row import NO_PLAN, RowOutcome
from tubeless.errors import BATCH_INPUT_INVALID, BUDGET_EXHAUSTED

if TYPE_CHECKING:
    from collections.abc import Callable

    from tubeless.agent._spi import Ledger as BudgetLedger
    from tubeless.pipeline import CancelToken

    OnRow = Callable[[RowOutcome, bool], None]

__all__ = ["Batch"]


class Batch:
    """One batch's rows in flight: the slots that run them and the rows done, not yet handed
    back (at most ``window`` rows read past the first one not yet handed back)."""

    def __init__(
        self,
        named: Iterator[NamedRow],
        planner: PlanMaker,
        engine: Engine,
        store: BatchOutput | None,
        fanout: Any,
        token: CancelToken,
        *,
        retry_failed: bool,
        fail_fast: bool,
        on_row: OnRow | None,
        window: int,
        budget: BudgetLedger | None = None,
    ) -> None:
        self.named, self.planner, self.engine, self.store = named, planner, engine, store
        self.fanout, self.token, self.window = fanout, token, window
        self.retry_failed, self.fail_fast, self.on_row = retry_failed, fail_fast, on_row
        self.budget = budget
        """The batch-wide budget, if any (every row's root agent charges it first)."""
        self.waiting: dict[int, NamedRow] = {}
        """Rows read and not yet yielded (at most ``window``)."""
        self.done: dict[int, RowOutcome] = {}
        """Rows finished and not yet yielded."""
        self.next_index = 0
        self.read = 0
        self.exhausted = False
        self.changed = asyncio.Event()
        self.room = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []
        self.started: asyncio.Future[None] | None = None
        self.ready = False
        self.listening = False
        """:meth:`changes` waits for :attr:`changed`."""
        self.short_of_room = 0
        """Slots waiting for :attr:`room`."""
        """The workers have started (:meth:`_start`)."""
        self.stopping = False
        self.closed = False
        self.halted = False
        """No more rows are to be read: the inputs are exhausted, the batch was cancelled, is
        stopping (fail-fast) or closed (one flag, read before every row)."""
        self._unwatch: Callable[[], None] | None = None

    def stop(self) -> None:
        """The batch is over (finished, or its consumer went away): rows still in flight are
        cancelled and will not be recorded."""
        self.closed = self.halted = True
        if self._unwatch is not None:
            self._unwatch()
        for task in self.tasks:
            task.cancel()

    def begin(self, concurrency: int) -> asyncio.Future[list[None]]:
        """Start ``concurrency`` slots; the future is done when they all are."""
        self._unwatch = self.token.add_callback(self._cancelled)
        scope = getattr(self.engine, "scope", None)  # the local engine's, for every row
        with scope() if scope is not None else contextlib.nullcontext():
            self.tasks = [asyncio.create_task(self._slot()) for _ in range(concurrency)]
        running = asyncio.gather(*self.tasks)
        running.add_done_callback(lambda _: self.changed.set())
        return running

    def _cancelled(self) -> None:
        """The batch's token was cancelled (maybe from another thread): no row starts after."""
        self.halted = True

    def take(self) -> RowOutcome:
        """The next row in input order, which has finished (``next_index in done``): it is
        written to the output and makes room for another row to be read."""
        index = self.next_index
        outcome = self.done.pop(index)
        if self.store is not None:
            self.waiting.pop(index, None)
            self.store.emit(outcome.row)
        self.next_index = index + 1
        if self.short_of_room:  # (a slot waits for room: rarely, so the event is not set)
            self.short_of_room = 0
            self.room.set()
        return outcome

    async def changes(self) -> None:
        """Until a row finishes or the slots end."""
        self.changed.clear()
        self.listening = True
        try:
            await self.changed.wait()
        finally:
            self.listening = False

    def _changed(self) -> None:
        """Wake :meth:`changes` (when it waits: most rows finish while it does not)."""
        if self.listening:
            self.listening = False
            self.changed.set()

    def left(self) -> list[RowOutcome]:
        """After a cancellation: the rows that did finish, not yet yielded, in input order."""
        return [self.done[index] for index in sorted(self.done)]

    async def _slot(self) -> None:
        named_rows = self.named
        while True:
            # The next row to run, read here rather than by a method of its own (it is read
            # once a row); rows completed in the previous output are settled as they are read.
            if self.halted:
                return
            if self.read - self.next_index >= self.window:
                self.room.clear()  # wait for the consumer to take a row
                self.short_of_room += 1
                await self.room.wait()
                continue
            named = next(named_rows, None)
            if named is None:
                self.exhausted = self.halted = True
                return
            index = named.row.index
            self.read = index + 1
            if self.store is not None:
                self.waiting[index] = named  # (only an output needs the rows not written)
                reused = self.store.completed(index, named.key, named.earlier_row)
                if reused is not None:
                    self._finished(RowOutcome(row=reused), reused=True)
                    continue
            if self.budget is not None:
                if self.budget.spent:
                    self._finished(_skipped(named))
                    continue
                from tubeless.agent._spi import OUTER_LEDGERS
                from tubeless.agent._spi import Ledger as BudgetLedger

                # This task's own context: the row charges the batch, and meters itself.
                OUTER_LEDGERS.set((self.budget, BudgetLedger(ROW_METER, {})))
            if not self.ready:
                await self._start()
            row, key = named.row, named.key
            plan = NO_PLAN if self.planner.none else self.planner.plan(named)
            try:
                outcome = await self.engine.run(row, key, plan=plan)
                if (
                    self.retry_failed
                    and outcome.row["status"] == "failed"
                    and outcome.row["error"]["code"] != BATCH_INPUT_INVALID
                    and not self.token.cancelled
                ):
                    # A run that ended failed saved its failure: the retry starts its checkpoint
                    # over. A row whose worker died left its checkpoint resumable: it resumes.
                    if plan.checkpoint_key is not None and outcome.row["run_id"] is not None:
                        plan = replace(plan, restart=True)
                    # The first run may have changed its options in place: the retry validates
                    # the input afresh.
                    if row.validated is not None:
                        row = replace(row, validated=None)
                    outcome = await self.engine.run(row, key, retry=True, plan=plan)
            except BaseException:
                self._changed()  # the batch learns of it (``_finished`` does otherwise)
                raise
            self._finished(outcome)

    async def _start(self) -> None:
        """The workers start with the first row that runs; every slot waits for them."""
        if self.started is None:
            self.started = asyncio.ensure_future(self.engine.start())
        if self.started.done():
            self.started.result()  # raises if the workers could not start
        else:
            await asyncio.shield(self.started)
        self.ready = True

    def _finished(self, outcome: RowOutcome, *, reused: bool = False) -> None:
        if self.closed:
            return
        if not reused:
            if outcome.records:
                for record in outcome.records:
                    self.fanout.export(record)
                outcome.records = []
            if self.store is not None:
                self.store.append(outcome.row)
        self.done[outcome.row["index"]] = outcome
        if self.on_row is not None:
            self.on_row(outcome, reused)
        if self.fail_fast and outcome.row["status"] == "failed" and not self.stopping:
            self.stopping = self.halted = True
            self.engine.cancel("fail-fast: a row failed")
        self._changed()

    def write_rest(self) -> None:
        """Give the output the rows not yielded, in input order: those that finished after a
        gap, and for the rows that did not run, the previous output's row when it is still
        theirs (their inputs are read on for their keys, as far as a row might be kept)."""
        assert self.store is not None
        last = max(self.store.ledger.last_previous(), max(self.done, default=-1))
        for index, named in self._rest():
            if index > last:
                break
            row = self.done[index].row if index in self.done else None
            if row is None and named is not None:
                row = self.store.kept(index, named.key, named.earlier_row)
            if row is not None:
                self.store.emit(row)

    def _rest(self) -> Iterator[tuple[int, NamedRow | None]]:
        for index in range(self.next_index, self.read):
            yield index, self.waiting.get(index)
        if not self.exhausted:
            for named in self.named:
                yield named.row.index, named


def _skipped(named: NamedRow) -> RowOutcome:
    """A row not started because the batch-wide budget was spent."""
    from tubeless.batch._row import failed_row

    outcome = failed_row(
        named.row,
        named.key,
        BUDGET_EXHAUSTED,
        "not started: the batch-wide budget was spent (rerun with a higher --max-cost-usd or "
        "--max-total-tokens and the same --output to run it)",
    )
    outcome.row["status"] = "skipped"
    return outcome
