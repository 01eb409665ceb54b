"""Traced W1 with this tree's SQLite sink against another version of it, alternately in one process.

``python -m benchmarks.sqlite_sink OLD_SQLITE_PY`` loads ``OLD_SQLITE_PY`` (a copy of
``tubeless/tracing/sqlite.py`` from another commit, e.g. ``git show HEAD~1:tubeless/tracing/
sqlite.py > /tmp/old.py``) beside this tree's module, opens one store with each, and runs the
200-turn W1 agent into them in turn with the untraced run and a run into a sink that keeps
nothing (``null``: the records are built, so ``new`` - ``null`` is the sink's own share), each
store staying open as a process appending its runs. Printed per turn: wall, user and system
seconds of the running thread, and the median of the per-round ratios new/old. Python's
``sqlite3`` adapters are process-wide, so an adapter the new module registers speeds the old one
up too: the ratio understates the change (``python -m benchmarks.count W1 sqlite`` under
callgrind, run in each tree, does not).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.workloads import agent


def _old_sink(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("tubeless.tracing._sqlite_old", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SqliteSink


class _NullSink:
    def export(self, record: Any) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sqlite_sink")
    parser.add_argument("old", help="another version of tubeless/tracing/sqlite.py")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    from tubeless.tracing.sqlite import SqliteSink

    pipeline = agent(args.turns, 1)
    folder = Path(tempfile.mkdtemp())
    old = _old_sink(args.old)
    sinks = {
        "old": old(folder / "old.sqlite"),
        "new": SqliteSink(folder / "new.sqlite"),
        "null": _NullSink(),
    }
    kinds = ("old", "new", "null", "untraced")

    async def measure() -> dict[str, list[tuple[float, float, float]]]:
        timings: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in kinds}
        for _ in range(args.repeats + 1):  # the first round warms up
            for kind in kinds:
                before = resource.getrusage(resource.RUSAGE_THREAD)
                start = time.perf_counter()
                if kind == "untraced":
                    await pipeline.run_or_raise({})
                else:
                    run = await pipeline.run({}, trace=sinks[kind])
                    assert run.status == "completed"
                wall = time.perf_counter() - start
                after = resource.getrusage(resource.RUSAGE_THREAD)
                timings[kind].append(
                    (wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime)
                )
        return {kind: rows[1:] for kind, rows in timings.items()}

    try:
        timings = asyncio.run(measure())
    finally:
        for sink in sinks.values():
            sink.close()
    for kind in kinds:
        wall, user, system = (
            statistics.median(row[i] for row in timings[kind]) / args.turns * 1e6 for i in range(3)
        )
        print(f"{kind:9} wall {wall:8.1f}  user {user:7.1f}  sys {system:6.1f}  µs per turn")
    for i, name in enumerate(("wall", "user", "sys")):
        pairs = zip(timings["new"], timings["old"], strict=True)
        print(f"new/old {name}: {statistics.median(n[i] / max(o[i], 1e-9) for n, o in pairs):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
