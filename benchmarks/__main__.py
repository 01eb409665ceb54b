"""Run every workload and print one JSON line each, then a summary table.

``python -m benchmarks`` (or ``make bench``); ``--quick`` runs fewer repetitions. Ratios compare
with the baseline measured in the same process, so a busy machine moves both sides together.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks.workloads import agent, baseline

ROOT = Path(__file__).resolve().parents[1]


def _median_seconds(make: Callable[[], Awaitable[Any]], repeats: int) -> float:
    return _alternating_medians([make], repeats)[0]


def _paired_medians(
    ours: Callable[[], Awaitable[Any]],
    theirs: Callable[[], Awaitable[Any]],
    repeats: int,
) -> tuple[float, float]:
    """Median seconds of ``ours`` and ``theirs``, measured alternately in one event loop."""
    mine, base = _alternating_medians([ours, theirs], repeats)
    return mine, base


def _alternating_medians(makes: list[Callable[[], Awaitable[Any]]], repeats: int) -> list[float]:
    """Median seconds of each of ``makes``, measured in turn (one of each per round).

    Alternating keeps a machine that slows down or speeds up during the measurement from
    landing on one side only, so the ratios of the medians stay meaningful.
    """

    async def measure() -> list[list[float]]:
        for make in makes:  # warm-up
            await make()
        timings: list[list[float]] = [[] for _ in makes]
        for _ in range(repeats):
            for make, times in zip(makes, timings, strict=True):
                start = time.perf_counter()
                await make()
                times.append(time.perf_counter() - start)
        return timings

    return [statistics.median(times) for times in asyncio.run(measure())]


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _emit(rows: list[dict[str, Any]], row: dict[str, Any]) -> None:
    rows.append(row)
    print(json.dumps(row), flush=True)


def _agent_workload(
    name: str,
    turns: int,
    width: int,
    repeats: int,
    rows: list[dict[str, Any]],
    *,
    concurrency: int = 1,
    sync_tool: bool = False,
    plain_tuple: bool = False,
) -> float:
    pipeline = agent(
        turns, width, concurrency=concurrency, sync_tool=sync_tool, plain_tuple=plain_tuple
    )
    ours, base = _paired_medians(
        lambda: pipeline.run_or_raise({}),
        lambda: baseline(turns, width, sync_tool=sync_tool),
        repeats,
    )
    calls = turns * width
    per_call = ours / calls * 1e6
    _emit(
        rows,
        {
            "workload": name,
            "turns": turns,
            "calls": calls,
            "us_per_call": round(per_call, 2),
            "us_per_turn": round(ours / turns * 1e6, 2),
            "baseline_us_per_call": round(base / calls * 1e6, 2),
            "ratio": round(ours / base, 2),
            "peak_rss_mib": round(_rss_mib(), 1),
        },
    )
    return ours / turns


def _runs_workload(rows: list[dict[str, Any]], repeats: int) -> None:
    pipeline = agent(1, 1)
    runs = 200

    async def ours() -> None:
        for _ in range(runs):
            await pipeline.run_or_raise({})

    async def base() -> None:
        for _ in range(runs):
            await baseline(1, 1)

    mine, theirs = _paired_medians(ours, base, repeats)
    _emit(
        rows,
        {
            "workload": "W3 single",
            "runs": runs,
            "us_per_run": round(mine / runs * 1e6, 2),
            "baseline_us_per_run": round(theirs / runs * 1e6, 2),
            "ratio": round(mine / theirs, 2),
            "peak_rss_mib": round(_rss_mib(), 1),
        },
    )


def _sink(kind: str, path: Path) -> Any:
    from tubeless.tracing import NdjsonSink, SqliteSink

    return NdjsonSink(path) if kind == "ndjson" else SqliteSink(path)


def _records_per_run(pipeline: Any, kind: str, runs: int = 1) -> int:
    """How many records ``runs`` runs of ``pipeline`` write (one run into a fresh file)."""
    from tubeless.tracing import read_trace

    async def once(sink: Any) -> None:
        for _ in range(runs):
            await pipeline.run({}, trace=sink)

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"count.{kind}"
        sink = _sink(kind, path)
        try:
            asyncio.run(once(sink))
        finally:
            sink.close()
        return len(read_trace(path))


def _traced_workload(
    rows: list[dict[str, Any]],
    repeats: int,
    name: str,
    turns: int,
    width: int,
    concurrency: int,
    runs: int = 1,
) -> None:
    """Traced against untraced against the bare loop, alternately, per turn (W1, W2) or run (W3).

    One sink per kind stays open for every repetition (a process appending its runs to one
    trace); the sinks write through at the end of every turn and root run, as always.
    """
    pipeline = agent(turns, width, concurrency=concurrency)
    with tempfile.TemporaryDirectory() as folder:
        sinks = {kind: _sink(kind, Path(folder) / f"trace.{kind}") for kind in ("ndjson", "sqlite")}
        try:

            def traced(kind: str) -> Callable[[], Awaitable[Any]]:
                async def go() -> None:
                    for _ in range(runs):
                        run = await pipeline.run({}, trace=sinks[kind])
                        assert run.status == "completed"

                return go

            async def untraced() -> None:
                for _ in range(runs):
                    await pipeline.run_or_raise({})

            async def base() -> None:
                for _ in range(runs):
                    await baseline(turns, width)

            ndjson, sqlite, plain, bare = _alternating_medians(
                [traced("ndjson"), traced("sqlite"), untraced, base], repeats
            )
        finally:
            for sink in sinks.values():
                sink.close()
    records = _records_per_run(pipeline, "ndjson", runs)
    unit, count = ("run", runs) if runs > 1 else ("turn", turns)
    for kind, seconds in (("ndjson", ndjson), ("sqlite", sqlite)):
        _emit(
            rows,
            {
                "workload": f"{name} traced {kind}",
                f"us_per_{unit}": round(seconds / count * 1e6, 2),
                f"untraced_us_per_{unit}": round(plain / count * 1e6, 2),
                f"baseline_us_per_{unit}": round(bare / count * 1e6, 2),
                "ratio": round(seconds / bare, 2),
                "ratio_to_untraced": round(seconds / plain, 2),
                "records": records,
                "extra_us_per_record": round((seconds - plain) / records * 1e6, 2),
            },
        )


def _tracing_workload(rows: list[dict[str, Any]], repeats: int) -> None:
    from tubeless.tracing import NdjsonSink, SqliteSink

    for name, turns, width, concurrency in (("W1", 200, 1, 1), ("W2", 20, 5, 3)):
        pipeline = agent(turns, width, concurrency=concurrency)
        untraced = _median_seconds(lambda p=pipeline: p.run_or_raise({}), repeats)  # type: ignore[misc]
        for kind in ("ndjson", "sqlite"):
            with tempfile.TemporaryDirectory() as folder:
                paths = iter(Path(folder) / f"t{n}.{kind}" for n in range(1000))
                last: list[Path] = []

                async def traced(
                    p: Any = pipeline, kind: str = kind, paths: Any = paths, last: list[Path] = last
                ) -> None:
                    path = next(paths)
                    last[:] = [path]
                    sink = NdjsonSink(path) if kind == "ndjson" else SqliteSink(path)
                    try:
                        run = await p.run({}, trace=sink)
                    finally:
                        sink.close()
                    assert run.status == "completed"

                seconds = _median_seconds(traced, repeats)
                from tubeless.tracing import read_trace

                records = len(read_trace(last[0]))
            _emit(
                rows,
                {
                    "workload": f"W5 {name} {kind}",
                    "records": records,
                    "us_per_record": round((seconds - untraced) / records * 1e6, 2),
                    "total_ms": round(seconds * 1e3, 2),
                    "untraced_ms": round(untraced * 1e3, 2),
                },
            )


class _CountingStore:
    """A checkpoint store that counts the durable writes of the runs using it."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.writes = 0

    def acquire(self, key: str) -> Any:
        lease = self.store.acquire(key)
        outer = self

        class Counted:
            key = lease.key

            def read(self) -> str | None:
                return lease.read()  # type: ignore[no-any-return]

            def write(self, document: str) -> None:
                outer.writes += 1
                lease.write(document)

            def close(self) -> None:
                lease.close()

            def __enter__(self) -> Any:
                return self

            def __exit__(self, *exc: object) -> None:
                self.close()

        return Counted()

    def list(self) -> Any:
        return self.store.list()

    def delete(self, key: str) -> bool:
        return self.store.delete(key)  # type: ignore[no-any-return]

    def close(self) -> None:
        self.store.close()


def _checkpoint_workload(rows: list[dict[str, Any]], repeats: int) -> None:
    """W8: W1 with checkpoints (SQLite on local disk, full sync; and in memory), per turn."""
    from tubeless.durable import MemoryCheckpoints, SqliteCheckpoints

    turns = 50
    pipeline = agent(turns, 1)
    untraced = _median_seconds(lambda: pipeline.run_or_raise({}), repeats)
    with tempfile.TemporaryDirectory(dir=ROOT) as folder:  # local disk, not a tmpfs
        sqlite = _CountingStore(SqliteCheckpoints(Path(folder) / "runs.sqlite"))
        memory = _CountingStore(MemoryCheckpoints())
        for kind, store in (("sqlite", sqlite), ("memory", memory)):
            keys = iter(range(10**6))

            async def checkpointed(store: Any = store, keys: Any = keys) -> None:
                run = await pipeline.run({}, checkpoints=store, checkpoint_key=f"k{next(keys)}")
                assert run.status == "completed", run.errors

            seconds = _median_seconds(checkpointed, repeats)
            runs = next(keys)
            _emit(
                rows,
                {
                    "workload": f"W8 W1 checkpoints {kind}",
                    "turns": turns,
                    "ms_per_turn": round(seconds / turns * 1e3, 3),
                    "extra_ms_per_turn": round((seconds - untraced) / turns * 1e3, 3),
                    "writes_per_turn": round(store.writes / runs / turns, 2),
                    "untraced_us_per_turn": round(untraced / turns * 1e6, 2),
                },
            )
        with SqliteCheckpoints(Path(folder) / "floor.sqlite").acquire("k") as lease:
            start = time.perf_counter()
            for n in range(50):
                lease.write(f'{{"n": {n}}}')
            floor = (time.perf_counter() - start) / 50
        _emit(rows, {"workload": "W8 one durable SQLite write", "ms": round(floor * 1e3, 3)})
    try:
        import langgraph  # noqa: F401
    except ImportError:
        _emit(
            rows,
            {
                "workload": "W8 LangGraph SQLite checkpointer",
                "skipped": "langgraph is not installed",
            },
        )
    else:  # pragma: no cover - only where LangGraph is installed
        _emit(
            rows,
            {
                "workload": "W8 LangGraph SQLite checkpointer",
                "skipped": "not measured by this release",
            },
        )


def _import_workload(rows: list[dict[str, Any]], repeats: int) -> None:
    """Wall time of ``from tubeless import define_agent, define_tool, Limits`` in a fresh
    interpreter, and net of a bare ``python -c pass`` measured alternately."""
    code = "from tubeless import define_agent, define_tool, Limits"
    full: list[float] = []
    bare: list[float] = []
    for _ in range(repeats + 1):
        for args, timings in (
            ([sys.executable, "-c", code], full),
            ([sys.executable, "-c", "pass"], bare),
        ):
            start = time.perf_counter()
            subprocess.run(args, check=True, capture_output=True, cwd=ROOT)
            timings.append(time.perf_counter() - start)
    wall, empty = statistics.median(full[1:]), statistics.median(bare[1:])
    _emit(
        rows,
        {
            "workload": "W9 import",
            "ms": round(wall * 1e3, 1),
            "net_ms": round((wall - empty) * 1e3, 1),
            "target_ms": 120,
        },
    )


def _startup_workload(rows: list[dict[str, Any]], repeats: int) -> None:
    tubeless = [sys.executable, "-m", "tubeless"]
    project = str(ROOT / "projects" / "scripted-agent.yaml")
    for name, args, bound in (
        ("W6 --help", ["--help"], 250),
        ("W6 validate", ["validate", project], 400),
        ("W6 run", ["run", project, "--quiet"], None),
    ):
        timings = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            subprocess.run([*tubeless, *args], check=True, capture_output=True, cwd=ROOT)
            timings.append(time.perf_counter() - start)
        median = statistics.median(timings[1:])
        row: dict[str, Any] = {"workload": name, "ms": round(median * 1e3, 1)}
        if bound is not None:
            row["target_ms"] = bound
        _emit(rows, row)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--only", help="run only workloads whose name starts with this")
    args = parser.parse_args()
    repeats = 5 if args.quick else 25
    rows: list[dict[str, Any]] = []
    only = args.only or ""

    def wanted(name: str) -> bool:
        # "W1" is wanted by --only "W1 long" but not by --only W10.
        rest = only[len(name) : len(name) + 1]
        return name.startswith(only) or (only.startswith(name) and not rest.isdigit())

    if wanted("W1"):
        _agent_workload("W1 long", 200, 1, repeats, rows)
        _agent_workload("W1 long (sync tool)", 200, 1, repeats, rows, sync_tool=True)
        _traced_workload(rows, repeats, "W1", 200, 1, 1)
    if wanted("W2"):
        _agent_workload("W2 wide", 20, 5, repeats, rows, concurrency=3)
        _traced_workload(rows, repeats, "W2", 20, 5, 3)
    if wanted("W3"):
        _runs_workload(rows, repeats)
        _traced_workload(rows, max(3, repeats // 3), "W3", 1, 1, 1, runs=200)
    if wanted("W4"):
        per_turn = {}
        for turns in (250, 500, 1000, 2000, 4000):
            per_turn[turns] = _agent_workload(
                f"W4 scaling {turns}", turns, 1, max(1, repeats // 2), rows
            )
        _emit(
            rows,
            {
                "workload": "W4 flatness",
                "ratio_4000_to_250": round(per_turn[4000] / per_turn[250], 2),
            },
        )
        tupled = {}
        for turns in (250, 4000):
            tupled[turns] = _agent_workload(
                f"W4 + tuple(outcomes) {turns}",
                turns,
                1,
                max(1, repeats // 2),
                rows,
                plain_tuple=True,
            )
        _emit(
            rows,
            {
                "workload": "W4 + tuple(outcomes) flatness",
                "ratio_4000_to_250": round(tupled[4000] / tupled[250], 2),
            },
        )
    if wanted("W5"):
        _tracing_workload(rows, repeats)
    if wanted("W6"):
        _startup_workload(rows, max(3, repeats // 3))
    if only.startswith("W7"):  # minutes long (worker processes, Ray): only when asked for
        from benchmarks.batch import run as batch_workload

        batch_workload(rows, 1 if args.quick else 3, emit=_emit)
    if wanted("W8"):
        _checkpoint_workload(rows, max(3, repeats // 5))
    if wanted("W9"):
        _import_workload(rows, max(5, repeats // 2))
    if wanted("W10"):
        from benchmarks.providers import run as provider_workload

        provider_workload(rows, max(5, repeats // 2), emit=_emit)
    if wanted("W11"):
        from benchmarks.batch_driver import run as driver_workload

        driver_workload(rows, max(5, repeats // 3), emit=_emit)
    if wanted("W12"):
        from benchmarks.postgres import run as postgres_workload

        postgres_workload(rows, max(3, repeats // 5), emit=_emit)
    print()
    print(f"{'workload':28} {'measure':>14} {'baseline':>12} {'ratio':>7}")
    for row in rows:
        measure = next(
            (
                f"{row[k]} {k}"
                for k in (
                    "us_per_call",
                    "us_per_turn",
                    "us_per_run",
                    "us_per_record",
                    "ms_per_turn",
                    "ms",
                    "ratio_4000_to_250",
                    "rows_per_s",
                    "us_per_row",
                    "skipped",
                )
                if k in row
            ),
            "",
        )
        base = next(
            (
                str(row[k])
                for k in ("baseline_us_per_call", "baseline_us_per_turn", "baseline_us_per_run")
                if k in row
            ),
            "",
        )
        print(f"{row['workload']:28} {measure:>28} {base:>10} {row.get('ratio', ''):>7}")
    print(f"\nmachine: {os.cpu_count()} cpus, python {sys.version.split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
