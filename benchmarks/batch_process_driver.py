"""The ``process`` engine's driver: its own CPU per row, and where it goes (issue 32, item 3).

``python -m benchmarks.batch_process_driver [--repeats N] [--rows N] [-c N] [TREE ...]``

Each sample is a fresh interpreter that loads ``noop-row`` (benchmarks/batch_project.yaml: a
W3-shaped agent whose tool does nothing, so the workers' rows cost little and the driver's
share shows), then runs one batch on the ``process`` engine and prints the driver's CPU
(``time.process_time``, which does not count the workers) per row and the rows per second.
The trees (checkouts whose code is put first on ``PYTHONPATH``; default: this one) are
alternated, then the medians printed with the load average.

With ``--entry cpu-row`` the rows are CPU-bound (``W``, the workers' CPU per row, is printed
too: on two free cores, c=2 / c=1 can be at most ``2 W / (W + D)`` with ``D`` the driver's CPU
per row, whatever the load of the minute).

``--profile FILE`` runs one sample of the first tree under cProfile instead (the driver only)
and writes its statistics to FILE (read with ``python -m pstats FILE``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

_SAMPLE = """\
import asyncio, json, sys, time
from tubeless.batch import EntrySource, run_batch

project, concurrency, rows, profile = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
entry = sys.argv[5]
EntrySource.of(project, entry).load()


async def main():
    async for row in run_batch(project, [{"i": i} for i in range(rows)], entry_id=entry,
                               engine="process", concurrency=concurrency):
        assert row["status"] == "completed", row


if profile:
    import cProfile

    profiler = cProfile.Profile(time.process_time)  # CPU, not the wall: waits cost nothing
    profiler.runcall(asyncio.run, main())
    profiler.dump_stats(profile)
    print(json.dumps({}))
else:
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu, wall = time.process_time(), time.perf_counter()
    asyncio.run(main())
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers, reaped by the batch
    worked = reaped.ru_utime + reaped.ru_stime - workers.ru_utime - workers.ru_stime
    print(json.dumps({"driver_cpu_us_per_row": 1e6 * cpu / rows, "rows_per_s": rows / wall,
                      "user_us": 1e6 * (after.ru_utime - before.ru_utime) / rows,
                      "sys_us": 1e6 * (after.ru_stime - before.ru_stime) / rows,
                      "switches": (after.ru_nvcsw - before.ru_nvcsw) / rows,
                      "workers_cpu_us_per_row": 1e6 * worked / rows}))
"""


def sample(
    tree: Path, concurrency: int, rows: int, profile: str = "", entry: str = "noop-row"
) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{HERE}"}
    project = HERE / "benchmarks" / "batch_project.yaml"
    with tempfile.TemporaryDirectory() as elsewhere:  # ``-c`` puts the cwd first on the path
        done = subprocess.run(
            [
                *(sys.executable, "-c", _SAMPLE, str(project), str(concurrency), str(rows)),
                *(profile, entry),
            ],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            cwd=elsewhere,
        )
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trees", nargs="*", type=Path, default=[HERE])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("-c", "--concurrency", type=int, default=2)
    parser.add_argument("--profile", default="")
    parser.add_argument("--entry", default="noop-row", help="noop-row, or cpu-row for W")
    options = parser.parse_args()
    if options.profile:
        sample(
            options.trees[0],
            options.concurrency,
            options.rows,
            str(Path(options.profile)),
            options.entry,
        )
        return
    load_before = os.getloadavg()
    cells: dict[str, list[dict[str, float]]] = {}
    for _ in range(options.repeats):
        for tree in options.trees:
            got = sample(tree, options.concurrency, options.rows, entry=options.entry)
            cells.setdefault(str(tree), []).append(got)
            print(json.dumps({"tree": str(tree), **got}), flush=True)
    for tree, samples in cells.items():
        print(
            json.dumps(
                {
                    "tree": tree,
                    "median_driver_cpu_us_per_row": round(
                        statistics.median(s["driver_cpu_us_per_row"] for s in samples), 1
                    ),
                    "median_rows_per_s": round(
                        statistics.median(s["rows_per_s"] for s in samples), 1
                    ),
                    "median_workers_cpu_us_per_row": round(
                        statistics.median(s["workers_cpu_us_per_row"] for s in samples), 1
                    ),
                }
            )
        )
    print(json.dumps({"loadavg_before": load_before, "loadavg_after": os.getloadavg()}))


if __name__ == "__main__":
    main()
