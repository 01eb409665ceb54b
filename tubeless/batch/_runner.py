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

Nothing is held per row beyond a bounded window: inputs are read as rows are started, at most
:func:`window` rows past the first one not yet yielded (a slow row holds the others back rather
than letting finished rows pile up), and the numbering of repeated keys and the previous
output's index live in a temporary file (:class:`~tubeless.batch._ledger.Ledger`).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tubeless.batch._budget_broker import BATCH_SCOPE
from tubeless.batch._engine import DEFAULT_ROW_RETRIES, EngineName, EntrySource, make_engine
from tubeless.batch._inputs import InputSource, iter_inputs
from tubeless.batch._ledger import Ledger
from tubeless.batch._output import BatchOutput
from tubeless.batch._plans import PlanMaker, RowKeys, RowNamer, row_keys
from tubeless.batch._row import RowOutcome
from tubeless.batch._slots import Batch
from tubeless.batch._summary import BatchSummary, summarize
from tubeless.errors import (
    RUN_CONCURRENCY_INVALID,
    TubelessError,
)

if TYPE_CHECKING:
    from decimal import Decimal

    from tubeless.agent._spi import Ledger as BudgetLedger
    from tubeless.durable import CheckpointStore
    from tubeless.pipeline import CancelToken, Pipeline
    from tubeless.tracing import TraceSink

__all__ = [
    "BatchSummary",
    "RowKeys",
    "row_keys",
    "run_batch",
    "run_outcomes",
    "summarize",
    "window",
]

OnRow = Callable[[RowOutcome, bool], None]
"""Called once per row as it finishes (in completion order); the flag says it was reused."""


def run_batch(
    entry: Pipeline | EntrySource | str | os.PathLike[str],
    inputs: str | os.PathLike[str] | InputSource | Iterable[Any],
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
    max_cost_usd: Decimal | int | str | None = None,
    max_total_tokens: int | None = None,
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
        max_cost_usd: A cost budget for the whole batch (every engine): every row's model
            requests reserve against it too, granted by this process (atomically across
            workers) before they are sent; rows not started once it is spent are
            ``{status: "skipped", error: {code: TUBELESS_BUDGET_EXHAUSTED}}``. Rows in flight
            are bounded by their own reservations, so the batch never exceeds it.
        max_total_tokens: Likewise, input plus output tokens for the whole batch.

    Returns:
        An async iterator (an async generator: close it with ``aclose``) of ``{index, key,
        status, result | error: {code, message}, run_id, duration_ms, turns, calls}``, one
        per input.
    """
    # The driver's own generator, yielding the rows themselves: no second generator per row.
    return _outcomes(
        entry,
        inputs,
        as_rows=True,
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
        max_cost_usd=max_cost_usd,
        max_total_tokens=max_total_tokens,
    )


def run_outcomes(
    entry: Pipeline | EntrySource | str | os.PathLike[str],
    inputs: str | os.PathLike[str] | InputSource | Iterable[Any],
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
    max_cost_usd: Decimal | int | str | None = None,
    max_total_tokens: int | None = None,
) -> AsyncIterator[RowOutcome]:
    """:func:`run_batch`, yielding each row's :class:`RowOutcome`; with ``count_tools`` its
    calls per tool name too (what eval needs); ``replays`` and ``records`` give rows their own
    cassette to replay or record (by index; before ``replay_dir`` and ``record_dir``)."""
    return _outcomes(
        entry,
        inputs,
        as_rows=False,
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
        count_tools=count_tools,
        checkpoints=checkpoints,
        record_dir=record_dir,
        replay_dir=replay_dir,
        replays=replays,
        records=records,
        row_retries=row_retries,
        max_cost_usd=max_cost_usd,
        max_total_tokens=max_total_tokens,
    )


async def _outcomes(
    entry: Pipeline | EntrySource | str | os.PathLike[str],
    inputs: str | os.PathLike[str] | InputSource | Iterable[Any],
    *,
    as_rows: bool,
    concurrency: int,
    engine: EngineName,
    entry_id: str | None,
    trace: TraceSink | Sequence[TraceSink] | None,
    output: str | os.PathLike[str] | None,
    retry_failed: bool,
    fail_fast: bool,
    ray_address: str | None,
    signal: CancelToken | None,
    on_row: OnRow | None,
    checkpoints: str | os.PathLike[str] | CheckpointStore | None,
    record_dir: str | os.PathLike[str] | None,
    replay_dir: str | os.PathLike[str] | None,
    row_retries: int,
    max_cost_usd: Decimal | int | str | None,
    max_total_tokens: int | None,
    count_tools: bool = False,
    replays: Mapping[int, str] | None = None,
    records: Mapping[int, str] | None = None,
) -> AsyncIterator[Any]:
    """The batch (:func:`run_outcomes`); ``as_rows``: yield each outcome's output row."""
    from tubeless.pipeline import CancelToken
    from tubeless.tracing.sinks import TraceFanout

    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise TubelessError(
            RUN_CONCURRENCY_INVALID, f"concurrency must be an integer >= 1, got {concurrency!r}"
        )
    budget = _batch_budget(max_cost_usd, max_total_tokens)
    if isinstance(entry, str | os.PathLike):
        entry = EntrySource.of(entry, entry_id)
    # The local engine runs the entry loaded here; other engines' workers load it themselves,
    # and start doing so (below) before this process loads it for the rows' keys.
    pipeline = entry.load() if engine == "local" and isinstance(entry, EntrySource) else None
    # A file is opened (and a JSON array or YAML list checked) now; inputs given in memory are
    # made rows as they are named.
    given = None if isinstance(inputs, InputSource | str | os.PathLike) else inputs
    rows = iter_inputs(inputs) if given is None else iter(())
    ledger = Ledger()
    try:
        planner = PlanMaker(
            checkpoints=checkpoints is not None,
            record_dir=record_dir,
            replay_dir=replay_dir,
            replays=replays,
            records=records,
        )
        sinks = [] if trace is None else [trace] if not isinstance(trace, Sequence) else list(trace)
        fanout = TraceFanout(sinks)
        token = signal if signal is not None else CancelToken()
        checkpoint_store, store_path, opened = _open_checkpoints(checkpoints)
        try:
            runner = make_engine(
                engine,
                entry if pipeline is None else pipeline,
                concurrency=concurrency,
                traced=bool(sinks),
                signal=token,
                tools=count_tools,
                ray_address=ray_address,
                store=checkpoint_store,
                store_path=store_path,
                row_retries=row_retries,
                on_records=fanout.export if sinks else None,  # workers ship records as made
                budget=budget,  # process and ray workers reserve against it (_budget_broker)
            )
            launch = getattr(runner, "launch", None)
            slots: int = getattr(runner, "slots", concurrency)  # ray: rows for its batches
            driving = False
            try:
                if launch is not None:
                    # Workers start now, ahead of need; forked ones after the engine loaded
                    # the project, which it hands over (spawned ones load it themselves).
                    pipeline = launch() or pipeline
                if pipeline is None:
                    pipeline = entry.load() if isinstance(entry, EntrySource) else entry
                namer = RowNamer(
                    pipeline, ledger, earlier=checkpoints is not None or output is not None
                )
                store = BatchOutput(output, ledger) if output is not None else None
                batch = Batch(
                    map(namer.name, rows)
                    if given is None
                    # (``map`` over two iterables, not ``itertools.starmap``: benchmarks/count.py
                    # switches callgrind's counting on and off at ``starmap_next``.)
                    else map(namer.name_given, itertools.count(), given),
                    planner,
                    runner,
                    store,
                    fanout,
                    token,
                    retry_failed=retry_failed,
                    fail_fast=fail_fast,
                    on_row=on_row,
                    window=window(slots),
                    budget=budget,
                )
                driving = True
            finally:
                if not driving:
                    await runner.close()
            try:
                # The slots' loop, here rather than in a generator of its own: every row passes
                # through each generator layer it is yielded by.
                running = batch.begin(slots)
                done = batch.done
                while True:
                    while batch.next_index in done:
                        outcome = batch.take()
                        yield outcome.row if as_rows else outcome
                    if running.done():
                        running.result()
                        break
                    await batch.changes()
                for outcome in batch.left():
                    yield outcome.row if as_rows else outcome
            finally:
                batch.stop()
                try:
                    await runner.close()
                finally:
                    if store is not None:
                        try:
                            batch.write_rest()
                            store.finish()
                        finally:
                            store.close()
                    fanout.flush()
        finally:
            if opened and checkpoint_store is not None:
                checkpoint_store.close()
    finally:
        ledger.close()


def _batch_budget(
    max_cost_usd: Decimal | int | str | None, max_total_tokens: int | None
) -> BudgetLedger | None:
    """The ledger every row of the batch charges first, when the batch has a budget."""
    if max_cost_usd is None and max_total_tokens is None:
        return None
    from tubeless.agent import Limits
    from tubeless.agent._spi import Ledger as BudgetLedger

    limits = Limits(max_cost_usd=max_cost_usd, max_total_tokens=max_total_tokens)  # type: ignore[arg-type]
    return BudgetLedger(BATCH_SCOPE, limits.budgets())


def window(concurrency: int) -> int:
    """How many rows past the first one not yet yielded may be read (in flight or finished)."""
    return max(64, 8 * concurrency)


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
        from tubeless.durable import is_database_url, open_checkpoints

        # A database URL goes to the workers as it is; a path, made absolute.
        where = str(checkpoints)
        if not is_database_url(where):
            where = str(Path(checkpoints).resolve())
        return open_checkpoints(where), where, True
    return checkpoints, None, False
