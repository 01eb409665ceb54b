"""Whole-batch throughput of the ``process`` engine, start-up included (issue 32, item 3).

``python -m benchmarks.batch_start [--repeats N] [--rows N] [TREE ...]``

Each sample is a fresh interpreter (as a user's ``tubeless batch`` is) that imports
``tubeless.batch`` and then times one batch of ``cpu-row`` rows (about 1.7 ms of CPU each) on
the ``process`` engine, from the call to ``run_batch`` to its last row: ``rows / elapsed``, and
when the first row arrived. With ``--warm`` the project is loaded before the timer starts (as
``tubeless batch`` loads it before its batch), else the timer includes importing what loading
a project needs. Concurrency 1 and 2 (and each TREE given, a checkout whose code is
put first on ``PYTHONPATH``; default: this one) are alternated, so a change in the machine's
load hits every cell alike. Prints one JSON line per sample, then the medians, the c=2 / c=1
ratio of the medians, each repeat's own ratio and their median, and the load average before
and after. Each repeat also times two bare CPU-bound processes against one
(``two_processes_over_one``): the most a c=2 / c=1 ratio can be with the cores the machine's
other programs leave in that minute.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

_SAMPLE = """\
import asyncio, json, sys, time
from tubeless.batch import run_batch

project, engine, concurrency, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if sys.argv[5] == "warm":  # as `tubeless batch` does: the CLI loads the entry before the batch
    from tubeless.batch import EntrySource

    EntrySource.of(project, "cpu-row").load()
seen = []


async def main():
    async for row in run_batch(project, [{"i": i} for i in range(rows)], entry_id="cpu-row",
                               engine=engine, concurrency=concurrency,
                               on_row=lambda outcome, reused: seen.append(time.perf_counter())):
        assert row["status"] == "completed", row


start = time.perf_counter()
asyncio.run(main())
end = time.perf_counter()
import os.path, tubeless
tree = os.path.dirname(tubeless.__file__)
print(json.dumps({"rows_per_s": rows / (end - start), "first_row_s": seen[0] - start,
                  "tree": tree}))
"""


def sample(tree: Path, engine: str, concurrency: int, rows: int, warm: bool) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{HERE}"}
    project = HERE / "benchmarks" / "batch_project.yaml"
    with tempfile.TemporaryDirectory() as elsewhere:  # ``-c`` puts the cwd first on the path
        done = subprocess.run(
            [
                *(sys.executable, "-c", _SAMPLE, str(project), engine),
                *(str(concurrency), str(rows), "warm" if warm else "cold"),
            ],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            cwd=elsewhere,
        )
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    assert result.pop("tree") == str(tree / "tubeless"), "the sample ran another checkout"
    return result


_BURN = "t = 0\nfor k in range(4_000_000):\n    t = (t * 31 + k) % 1_000_003\n"


def ceiling() -> float:
    """What two CPU-bound processes get over one on this machine now: ``2 * t(1) / t(2)``, the
    most any engine's c=2 / c=1 can be in the same minute (the cores other programs leave)."""

    def burn(count: int) -> float:
        start = time.perf_counter()
        burners = [subprocess.Popen([sys.executable, "-c", _BURN]) for _ in range(count)]
        for burner in burners:
            burner.wait()
        return time.perf_counter() - start

    return 2 * burn(1) / burn(2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trees", nargs="*", type=Path, default=[HERE])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--engine", default="process")
    parser.add_argument(
        "--warm",
        action="store_true",
        help="load the project before the timer starts, as the CLI does before its batch",
    )
    options = parser.parse_args()
    load_before = os.getloadavg()
    cells: dict[tuple[str, int], list[dict[str, float]]] = {}
    ceilings = []
    for _ in range(options.repeats):
        ceilings.append(ceiling())
        print(json.dumps({"two_processes_over_one": round(ceilings[-1], 2)}), flush=True)
        for tree in options.trees:
            for concurrency in (1, 2):
                got = sample(tree, options.engine, concurrency, options.rows, options.warm)
                cells.setdefault((str(tree), concurrency), []).append(got)
                print(json.dumps({"tree": str(tree), "c": concurrency, **got}), flush=True)
    for tree in options.trees:
        medians = {}
        for concurrency in (1, 2):
            samples = cells[str(tree), concurrency]
            medians[concurrency] = statistics.median(s["rows_per_s"] for s in samples)
            first = statistics.median(s["first_row_s"] for s in samples)
            print(
                json.dumps(
                    {
                        "tree": str(tree),
                        "c": concurrency,
                        "median_rows_per_s": round(medians[concurrency], 1),
                        "median_first_row_s": round(first, 3),
                    }
                )
            )
        ratio = medians[2] / medians[1]
        # Each repeat's own ratio (its two samples ran a few seconds apart): steadier than the
        # ratio of the medians when the machine's load changes from minute to minute.
        repeats = [
            two["rows_per_s"] / one["rows_per_s"]
            for one, two in zip(cells[str(tree), 1], cells[str(tree), 2], strict=True)
        ]
        print(
            json.dumps(
                {
                    "tree": str(tree),
                    "c2_over_c1": round(ratio, 2),
                    "per_repeat": [round(r, 2) for r in repeats],
                    "median_per_repeat": round(statistics.median(repeats), 2),
                }
            )
        )
    print(
        json.dumps(
            {
                "two_processes_over_one_median": round(statistics.median(ceilings), 2),
                "per_repeat": [round(c, 2) for c in ceilings],
            }
        )
    )
    print(json.dumps({"loadavg_before": load_before, "loadavg_after": os.getloadavg()}))


if __name__ == "__main__":
    main()
