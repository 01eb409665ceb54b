"""W11 batch driver: what ``run_batch`` costs per row beyond the runs themselves.

1,000 I/O-bound rows (one async tool call waiting 10 ms, benchmarks/batch_project.yaml's
``io-row``) at concurrency 100 on the ``local`` engine, against a bare asyncio loop running the
same entry's ``run()`` on the same inputs, 100 at a time, keeping each run's value in a list:
what a caller would write without a batch. The two run alternately in one event loop; the
ratio is the batch's rows per second over the bare loop's (the target is at least 0.9).

``python -m benchmarks.count W11 batch`` and ``W11 bare`` count one of each under callgrind.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks.batch import PROJECT

ROWS = 1000
CONCURRENCY = 100


def inputs(rows: int = ROWS) -> list[dict[str, int]]:
    return [{"i": i} for i in range(rows)]


async def bare(pipeline: Any, raws: list[Any], concurrency: int = CONCURRENCY) -> list[Any]:
    """The same runs by hand: ``concurrency`` tasks taking the next input, in input order."""
    values: list[Any] = [None] * len(raws)
    pending = iter(enumerate(raws))

    async def worker() -> None:
        for index, raw in pending:
            run = await pipeline.run(raw)
            assert run.status == "completed", run.errors
            values[index] = run.value

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return values


async def batched(pipeline: Any, raws: list[Any], concurrency: int = CONCURRENCY) -> list[Any]:
    """The runs as a batch (``run_batch``, local engine, no output file, no trace), given the
    loaded entry as the bare loop is (loading the project is once per batch, not per row)."""
    from tubeless.batch import run_batch

    values: list[Any] = []
    async for row in run_batch(pipeline, raws, concurrency=concurrency):
        assert row["status"] == "completed", row
        values.append(row["result"])
    return values


def run(rows_out: list[dict[str, Any]], repeats: int, *, emit: Any) -> None:
    from tubeless.batch import EntrySource

    pipeline = EntrySource.of(PROJECT, "io-row").load()
    raws = inputs()
    sides: list[Callable[[], Awaitable[Any]]] = [
        lambda: batched(pipeline, raws),
        lambda: bare(pipeline, raws),
    ]

    async def measure() -> list[list[float]]:
        for side in sides:  # warm-up
            await side()
        timings: list[list[float]] = [[] for _ in sides]
        for _ in range(repeats):
            for side, times in zip(sides, timings, strict=True):  # alternately
                start = time.perf_counter()
                await side()
                times.append(time.perf_counter() - start)
        return timings

    batch_s, bare_s = (statistics.median(t) for t in asyncio.run(measure()))
    emit(
        rows_out,
        {
            "workload": f"W11 batch driver c={CONCURRENCY}",
            "rows_per_s": round(ROWS / batch_s, 1),
            "baseline_rows_per_s": round(ROWS / bare_s, 1),
            "ratio": round(bare_s / batch_s, 3),
            "us_per_row_over_bare": round((batch_s - bare_s) / ROWS * 1e6, 1),
        },
    )
