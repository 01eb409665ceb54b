"""The ``ray`` engine's own cost per row and its first row (issue 32, item 3).

``python -m benchmarks.batch_ray [--repeats N] [--rows N] [TREE ...]``

One fresh interpreter per TREE and repeat (the trees alternated; default: this checkout),
each with a local Ray started in-process (``ray.init``, 2 CPUs) and the benchmark project
copied to a temporary folder (so that the folder Ray ships holds no ``tubeless`` of its own:
the actors import the TREE's). In each, batches of ``noop-row`` rows (a W3-shaped agent whose
tool does nothing) on ``ray`` and on ``process``, at concurrency 1 and 2, alternately:

- steady rows/s, counted between the first and the last row to finish;
- Ray's steady cost per row over ``process`` at the same concurrency:
  ``1/rate(ray) - 1/rate(process)``;
- the first row's latency, from the call to ``run_batch`` (Ray already running; its actors
  are made and load the project within it).

Prints one JSON line per sample, then the medians and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

_SAMPLE = """\
import asyncio, json, sys, time
import ray
from tubeless.batch import run_batch

project, rows = sys.argv[1], int(sys.argv[2])
ray.init(num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False)


def one(engine, concurrency):
    seen = []

    async def main():
        async for row in run_batch(project, [{"i": i} for i in range(rows)], entry_id="noop-row",
                                   engine=engine, concurrency=concurrency,
                                   on_row=lambda o, r: seen.append(time.perf_counter())):
            assert row["status"] == "completed", row

    start = time.perf_counter()
    asyncio.run(main())
    return {"engine": engine, "c": concurrency, "first_row_s": seen[0] - start,
            "steady_rows_per_s": (len(seen) - 1) / (seen[-1] - seen[0])}


one("ray", 1)  # warm-up: Ray's first actors, the shipped package
for concurrency in (1, 2):
    for engine in ("ray", "process"):
        print(json.dumps(one(engine, concurrency)), flush=True)
ray.shutdown()
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trees", nargs="*", type=Path, default=[HERE])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", type=int, default=1000)
    options = parser.parse_args()
    load_before = os.getloadavg()
    samples: dict[tuple[str, str, int], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        bench = Path(folder) / "benchmarks"
        bench.mkdir()
        for name in ("__init__.py", "batch_rows.py", "batch_project.yaml"):
            shutil.copy(HERE / "benchmarks" / name, bench / name)
        project = bench / "batch_project.yaml"
        for _ in range(options.repeats):
            for tree in options.trees:
                env = {**os.environ, "PYTHONPATH": str(tree), "RAY_AUTH_MODE": "disabled"}
                done = subprocess.run(
                    [sys.executable, "-c", _SAMPLE, str(project), str(options.rows)],
                    capture_output=True,
                    text=True,
                    env=env,
                    check=True,
                    cwd=folder,
                )
                for line in done.stdout.splitlines():
                    got = json.loads(line)
                    key = (str(tree), got.pop("engine"), got.pop("c"))
                    samples.setdefault(key, []).append(got)
                    print(json.dumps({"tree": key[0], "engine": key[1], "c": key[2], **got}))
    for tree in options.trees:
        for concurrency in (1, 2):
            ray = samples[str(tree), "ray", concurrency]
            process = samples[str(tree), "process", concurrency]
            ray_rate = statistics.median(s["steady_rows_per_s"] for s in ray)
            process_rate = statistics.median(s["steady_rows_per_s"] for s in process)
            print(
                json.dumps(
                    {
                        "tree": str(tree),
                        "c": concurrency,
                        "ray_rows_per_s": round(ray_rate, 1),
                        "process_rows_per_s": round(process_rate, 1),
                        "ray_overhead_ms_per_row": round(1e3 / ray_rate - 1e3 / process_rate, 2),
                        "ray_first_row_s": round(
                            statistics.median(s["first_row_s"] for s in ray), 2
                        ),
                    }
                ),
                flush=True,
            )
    print(json.dumps({"loadavg_before": load_before, "loadavg_after": os.getloadavg()}))


if __name__ == "__main__":
    main()
