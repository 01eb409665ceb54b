"""``run_batch``: run an entry over many inputs and yield one row per input, in input order.

The driver keeps ``concurrency`` rows in flight on the chosen engine. Each finished row is, in
this order: retried once if it failed and ``retry_failed`` is set; its trace records exported to
the batch's sinks (only the driver writes them, whatever the engine); appended to the output
file; reported to ``on_row``. Rows are yielded as soon as every row before them is done.

Each row has a key (:func:`row_keys`): the default checkpoint key of its validated input
(DESIGN.md §11), the second row with the same input ``<key>#2``, the third ``#3``, in input
order, so rows never share a lease and a rerun finds each row's own checkpoint. The key is the
row's ``key`` in the output and, with ``checkpoints``, its checkpoint key. Each row also gets a
:class:`~tubeless.batch._row.RowPlan`: its checkpoint key and the one an older release gave it
(still looked up), and with a record or replay folder its cassette ``<index>.cassette.jsonl``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tubeless.batch._engine import DEFAULT_ROW_RETRIES, Engine, EngineName, EntrySource, make_engine
from tubeless.batch._inputs import InputRow, read_inputs
from tubeless.batch._output import BatchOutput
from tubeless.batch._plans import RowKeys, row_keys, row_plans
from tubeless.batch._row import RowOutcome, RowPlan
from tubeless.errors import BATCH_INPUT_INVALID, RUN_CONCURRENCY_INVALID, TubelessError

if TYPE_CHECKING:
    from tubeless.durable import CheckpointStore
    from tubeless.pipeline import CancelToken, Pipeline
    from tubeless.tracing import TraceSink

__all__ = ["BatchSummary", "RowKeys", "row_keys", "run_batch", "run_outcomes", "summarize"]

OnRow = Callable[[RowOutcome, bool], None]
"""Called once per row as it finishes (in completion order); the flag says it was reused."""


async def run_batch(
    entry: Pipeline | EntrySource | str | os.PathLike[str],
    inputs: str | os.PathLike[str] | Iterable[Any],
    *,
    concurrency: int = 1,
    engine: EngineName = "local",
    entry_id: str | None = None,
    trace: TraceSink | Sequence[TraceSink] | None = None,
    output: str | os.PathLike[str] | None = None,
    retry_failed: bool = False,
    fail_fast: bool = False,
    ray_address: str | None = None,
    signal: CancelToken | None = None,
    on_row: OnRow | None = None,
    checkpoints: str | os.PathLike[str] | CheckpointStore | None = None,
    record_dir: str | os.PathLike[str] | None = None,
    replay_dir: str | os.PathLike[str] | None = None,
    row_retries: int = DEFAULT_ROW_RETRIES,
) -> AsyncIterator[dict[str, Any]]:
    """Run ``entry`` once per input and yield the rows in input order.

    Args:
        entry: A pipeline or agent (``local`` engine only), or a project file (``entry_id``
            picks the entry) or :class:`EntrySource`, which every engine's workers can load.
        inputs: A JSONL / JSON array / YAML list file, ``-`` for stdin, or raw inputs.
        concurrency: Rows in flight at once (for ``process`` and ``ray``: workers).
        engine: ``local`` (asyncio tasks here), ``process`` or ``ray``.
        trace: Sinks that receive every row's records; each row is a root run.
        output: A JSONL file of rows; rows it already holds as completed (same index and key)
            are yielded as they are and not run again.
        retry_failed: Run a failed row once more (on another worker), keeping the second row.
        fail_fast: After the first failed row, start no new row and cancel those in flight.
        ray_address: The Ray cluster (else ``RAY_ADDRESS``, else a local Ray for the batch).
        signal: Cancels the batch: no new row starts, rows in flight are cancelled.
        on_row: Told about each row as it finishes (progress).
        checkpoints: A checkpoint file (or, for the ``local`` engine, a store): each row runs
            durably under its own key (its row key; ``<key>#2``, ``#3``... for later rows with
            the same input), so a row interrupted mid-run resumes where it stopped.
        record_dir: Record each row's cassette into ``<record_dir>/<index>.cassette.jsonl``.
        replay_dir: Replay each row from ``<replay_dir>/<index>.cassette.jsonl``; a row that
            diverges fails alone with ``TUBELESS_REPLAY_DIVERGED``.
        row_retries: How many more times a row whose worker died (``process``, ``ray``) runs,
            each time on another worker, before it fails with ``TUBELESS_BATCH_WORKER_DIED``.

    Yields:
        ``{index, key, status, result | error: {code, message}, run_id, duration_ms, turns,
        calls}`` for each input.
    """
    async for outcome in run_outcomes(
        entry,
        inputs,
        concurrency=concurrency,
        engine=engine,
        entry_id=entry_id,
        trace=trace,
        output=output,
        retry_failed=retry_failed,
        fail_fast=fail_fast,
        ray_address=ray_address,
        signal=signal,
        on_row=on_row,
        checkpoints=checkpoints,
        record_dir=record_dir,
        replay_dir=replay_dir,
        row_retries=row_retries,
    ):
        yield outcome.row


async def run_outcomes(
    entry: Pipeline | EntrySource | str | os.PathLike[str],
    inputs: str | os.PathLike[str] | Iterable[Any],
    *,
    concurrency: int = 1,
    engine: EngineName = "local",
    entry_id: str | None = None,
    trace: TraceSink | Sequence[TraceSink] | None = None,
    output: str | os.PathLike[str] | None = None,
    retry_failed: bool = False,
    fail_fast: bool = False,
    ray_address: str | None = None,
    signal: CancelToken | None = None,
    on_row: OnRow | None = None,
    count_tools: bool = False,
    checkpoints: str | os.PathLike[str] | CheckpointStore | None = None,
    record_dir: str | os.PathLike[str] | None = None,
    replay_dir: str | os.PathLike[str] | None = None,
    replays: Mapping[int, str] | None = None,
    records: Mapping[int, str] | None = None,
    row_retries: int = DEFAULT_ROW_RETRIES,
) -> AsyncIterator[RowOutcome]:
    """:func:`run_batch`, yielding each row's :class:`RowOutcome`; with ``count_tools`` its
    calls per tool name too (what eval needs); ``replays`` and ``records`` give rows their own
    cassette to replay or record (by index; before ``replay_dir`` and ``record_dir``)."""
    from tubeless.pipeline import CancelToken
    from tubeless.tracing import TraceFanout

    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise TubelessError(
            RUN_CONCURRENCY_INVALID, f"concurrency must be an integer >= 1, got {concurrency!r}"
        )
    if isinstance(entry, str | os.PathLike):
        entry = EntrySource.of(entry, entry_id)
    pipeline = entry.load() if isinstance(entry, EntrySource) else entry
    rows = read_inputs(inputs)
    named = row_keys(pipeline, rows)
    keys = named.keys
    sinks = [] if trace is None else [trace] if not isinstance(trace, Sequence) else list(trace)
    fanout = TraceFanout(sinks)
    token = signal if signal is not None else CancelToken()
    plans = row_plans(
        rows,
        named,
        checkpoints=checkpoints is not None,
        record_dir=record_dir,
        replay_dir=replay_dir,
        replays=replays,
        records=records,
    )
    checkpoint_store, store_path, opened = _open_checkpoints(checkpoints)
    try:
        runner = make_engine(
            engine,
            pipeline if engine == "local" else entry,
            concurrency=concurrency,
            traced=bool(sinks),
            signal=token,
            tools=count_tools,
            ray_address=ray_address,
            store=checkpoint_store,
            store_path=store_path,
            row_retries=row_retries,
            on_records=fanout.export if sinks else None,  # workers ship records as made
        )
        store = BatchOutput(output, earlier=named.earlier_rows) if output is not None else None
        batch = _Batch(
            rows,
            keys,
            plans,
            runner,
            store,
            fanout,
            token,
            retry_failed=retry_failed,
            fail_fast=fail_fast,
            on_row=on_row,
        )
        try:
            async for outcome in batch.drive(concurrency):
                yield outcome
        finally:
            batch.stop()
            if store is not None:
                store.finish(keys, {i: o.row for i, o in batch.done.items()})
                store.close()
            fanout.flush()
    finally:
        if opened and checkpoint_store is not None:
            checkpoint_store.close()


def _open_checkpoints(
    checkpoints: str | os.PathLike[str] | CheckpointStore | None,
) -> tuple[CheckpointStore | None, str | None, bool]:
    """The batch's store, the file workers open (absolute), and whether it was opened here.

    The driver opens a file itself even when workers do the writing: so the file is created
    (mode 0600) and checked once, before any worker starts.
    """
    if checkpoints is None:
        return None, None, False
    if isinstance(checkpoints, str | os.PathLike):
        from tubeless.durable import SqliteCheckpoints

        path = str(Path(checkpoints).resolve())
        return SqliteCheckpoints(path), path, True
    return checkpoints, None, False


class _Batch:
    def __init__(
        self,
        rows: list[InputRow],
        keys: list[str],
        plans: list[RowPlan],
        engine: Engine,
        store: BatchOutput | None,
        fanout: Any,
        token: CancelToken,
        *,
        retry_failed: bool,
        fail_fast: bool,
        on_row: OnRow | None,
    ) -> None:
        self.rows, self.keys, self.engine, self.store = rows, keys, engine, store
        self.plans = plans
        self.fanout, self.token = fanout, token
        self.retry_failed, self.fail_fast, self.on_row = retry_failed, fail_fast, on_row
        self.done: dict[int, RowOutcome] = {}
        self.changed = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []
        self.stopping = False
        self.closed = False

    def stop(self) -> None:
        """The batch is over (finished, or its consumer went away): rows still in flight are
        cancelled and will not be recorded."""
        self.closed = True
        for task in self.tasks:
            task.cancel()

    async def drive(self, concurrency: int) -> AsyncIterator[RowOutcome]:
        pending: list[InputRow] = []
        for row in self.rows:
            reused = self.store.completed(row.index, self.keys[row.index]) if self.store else None
            if reused is not None:
                self.done[row.index] = RowOutcome(row=reused)
                if self.on_row is not None:
                    self.on_row(self.done[row.index], True)
            else:
                pending.append(row)
        queue = iter(pending)
        if pending:
            await self.engine.start()
        try:
            self.tasks = [
                asyncio.create_task(self._slot(queue))
                for _ in range(min(concurrency, len(pending)))
            ]
            running = asyncio.gather(*self.tasks)
            running.add_done_callback(lambda _: self.changed.set())
            next_index = 0
            while True:
                while next_index in self.done:
                    yield self.done[next_index]
                    next_index += 1
                if running.done():
                    running.result()
                    break
                self.changed.clear()
                await self.changed.wait()
            for index in sorted(i for i in self.done if i >= next_index):
                yield self.done[index]  # after a cancellation: the rows that did finish
        finally:
            await self.engine.close()

    async def _slot(self, queue: Any) -> None:
        for row in queue:
            if self.token.cancelled or self.stopping:
                return
            plan = self.plans[row.index]
            try:
                outcome = await self.engine.run(row, self.keys[row.index], plan=plan)
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
                    outcome = await self.engine.run(
                        row, self.keys[row.index], retry=True, plan=plan
                    )
            finally:
                self.changed.set()
            self._finished(outcome)

    def _finished(self, outcome: RowOutcome) -> None:
        if self.closed:
            return
        for record in outcome.records:
            self.fanout.export(record)
        outcome.records = []
        if self.store is not None:
            self.store.append(outcome.row)
        self.done[outcome.row["index"]] = outcome
        if self.on_row is not None:
            self.on_row(outcome, False)
        if self.fail_fast and outcome.row["status"] == "failed" and not self.stopping:
            self.stopping = True
            self.engine.cancel("fail-fast: a row failed")
        self.changed.set()


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchSummary:
    """What a batch did, from its rows."""

    rows: int
    completed: int
    failed: dict[str, int] = field(default_factory=dict)
    """Failed rows by error code, most frequent first."""
    cancelled: int = 0
    skipped: int = 0
    """Rows reused from the output file (completed earlier)."""
    p50_ms: float | None = None
    p95_ms: float | None = None
    turns: int = 0
    calls: int = 0

    def lines(self) -> list[str]:
        """The summary as the CLI prints it."""
        failed = sum(self.failed.values())
        head = f"{self.rows} rows: {self.completed} completed, {failed} failed"
        if self.failed:
            head += " (" + ", ".join(f"{code} {n}" for code, n in self.failed.items()) + ")"
        if self.cancelled:
            head += f", {self.cancelled} cancelled"
        not_run = self.rows - self.completed - failed - self.cancelled
        if not_run > 0:
            head += f", {not_run} not run"
        if self.skipped:
            head += f"; {self.skipped} already completed, not run again"
        lines = [head]
        if self.p50_ms is not None and self.p95_ms is not None:
            lines.append(
                f"duration p50 {self.p50_ms:.1f} ms, p95 {self.p95_ms:.1f} ms; "
                f"turns {self.turns}, calls {self.calls}"
            )
        return lines


def summarize(
    rows: Iterable[Mapping[str, Any]], *, total: int | None = None, skipped: int = 0
) -> BatchSummary:
    """Count ``rows`` by status and failure code, with duration percentiles of rows that ran."""
    listed = list(rows)
    failed: dict[str, int] = {}
    durations = []
    for row in listed:
        if row.get("status") == "failed":
            code = str(row.get("error", {}).get("code"))
            failed[code] = failed.get(code, 0) + 1
        if row.get("run_id") is not None:
            durations.append(float(row.get("duration_ms") or 0.0))
    p50 = p95 = None
    if durations:
        p50 = statistics.median(durations)
        p95 = (
            statistics.quantiles(durations, n=20, method="inclusive")[-1]
            if len(durations) > 1
            else durations[0]
        )
    return BatchSummary(
        rows=len(listed) if total is None else total,
        completed=sum(1 for row in listed if row.get("status") == "completed"),
        failed=dict(sorted(failed.items(), key=lambda item: (-item[1], item[0]))),
        cancelled=sum(1 for row in listed if row.get("status") == "cancelled"),
        skipped=skipped,
        p50_ms=p50,
        p95_ms=p95,
        turns=sum(int(row.get("turns") or 0) for row in listed),
        calls=sum(int(row.get("calls") or 0) for row in listed),
    )
