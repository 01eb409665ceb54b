"""W7 batch throughput (rows/s): ``python -m benchmarks --only W7`` (about two minutes).

- CPU-bound: 1,000 W3-shaped rows whose one sync tool call burns about 2 ms of CPU, on each
  engine (local, process, ray) at concurrency 1, 2 and 8. Per concurrency the engines are
  measured alternately, ``repeats`` times each, and the median kept.
- I/O-bound: rows whose one async tool call waits 10 ms, on ``local`` at concurrency 1, 10 and
  100 (200 rows at concurrency 1, 1,000 otherwise: the rate does not depend on the count).

Throughput is counted between the first and the last row to finish, so worker start-up (a
process spawn, a Ray actor) is left out: ``(rows - 1) / (last - first)``. Ray is a local Ray
started once for the run (2 CPUs on the reference machine), its actors loading the project by
path. Ray's per-row overhead over ``process`` is ``1/rate(ray) - 1/rate(process)`` at the same
concurrency.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).with_name("batch_project.yaml")


def _rate(entry: str, engine: str, concurrency: int, rows: int) -> float:
    from tubeless.batch import run_batch

    finished: list[float] = []

    async def go() -> None:
        async for row in run_batch(
            PROJECT,
            [{"i": i} for i in range(rows)],
            entry_id=entry,
            engine=engine,
            concurrency=concurrency,  # type: ignore[arg-type]
            on_row=lambda outcome, reused: finished.append(time.perf_counter()),
        ):
            assert row["status"] == "completed", row

    asyncio.run(go())
    return (len(finished) - 1) / (finished[-1] - finished[0])


def run(
    rows_out: list[dict[str, Any]],
    repeats: int,
    *,
    emit: Any,
    with_ray: bool = True,
    rows: int = 1000,
) -> None:
    engines = ["local", "process"] + (["ray"] if with_ray else [])
    if with_ray:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False)
    try:
        cpu: dict[tuple[str, int], float] = {}
        for concurrency in (1, 2, 8):
            samples: dict[str, list[float]] = {engine: [] for engine in engines}
            for _ in range(repeats):
                for engine in engines:  # alternately, so load changes hit every engine alike
                    samples[engine].append(_rate("cpu-row", engine, concurrency, rows))
            for engine in engines:
                cpu[engine, concurrency] = statistics.median(samples[engine])
                emit(
                    rows_out,
                    {
                        "workload": f"W7 cpu {engine} c={concurrency}",
                        "rows_per_s": round(cpu[engine, concurrency], 1),
                    },
                )
        emit(
            rows_out,
            {
                "workload": "W7 process c=2 / c=1",
                "ratio": round(cpu["process", 2] / cpu["process", 1], 2),
            },
        )
        if with_ray:
            for concurrency in (1, 2, 8):
                overhead = 1 / cpu["ray", concurrency] - 1 / cpu["process", concurrency]
                emit(
                    rows_out,
                    {
                        "workload": f"W7 ray overhead c={concurrency}",
                        "us_per_row": round(overhead * 1e6, 1),
                    },
                )
        io: dict[int, float] = {}
        for concurrency in (1, 10, 100):
            count = 200 if concurrency == 1 else rows
            io[concurrency] = statistics.median(
                _rate("io-row", "local", concurrency, count) for _ in range(repeats)
            )
            emit(
                rows_out,
                {
                    "workload": f"W7 io local c={concurrency}",
                    "rows_per_s": round(io[concurrency], 1),
                },
            )
        emit(rows_out, {"workload": "W7 io local c=100 / c=1", "ratio": round(io[100] / io[1], 1)})
    finally:
        if with_ray:
            import ray

            ray.shutdown()


if __name__ == "__main__":
    results: list[dict[str, Any]] = []
    run(results, 3, emit=lambda rows, row: (rows.append(row), print(json.dumps(row), flush=True)))
