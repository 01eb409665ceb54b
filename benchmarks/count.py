"""Run one workload once, for an instruction count that the machine's load does not change.

``valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no
--toggle-collect=starmap_next python -m benchmarks.count W1 ndjson`` counts the instructions of
the run alone (it runs inside one ``itertools.starmap`` call; imports and setup are not counted).

Workloads: ``W1`` (200 turns), ``W2`` (20 turns of 5 calls), ``W3`` (200 one-turn runs),
``W4-250``/``W4-4000`` and ``W4T-250``/``W4T-4000`` (the ``+ tuple(outcomes)`` reducer).
Kinds: ``untraced``, ``bare`` (the hand-written loop), ``executor`` (untraced, lean path off),
``null`` (a sink that keeps nothing), ``ndjson``, ``sqlite``; ``memory`` and ``checkpoints``:
untraced with ``MemoryCheckpoints()`` or a ``SqliteCheckpoints`` file (a new key each run), for
the durable journal's share (``W1-50`` and ``W1-1000`` are W1 at 50 and 1,000 turns).

``W11 batch`` and ``W11 bare``: 1,000 I/O-bound rows at concurrency 100 through ``run_batch``
and through a bare loop of the same runs (benchmarks/batch_driver.py); their difference is the
batch driver's own share.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.workloads import agent, baseline

_SHAPES = {
    "W1": (200, 1, 1, 1, False),
    "W1-50": (50, 1, 1, 1, False),
    "W1-1000": (1000, 1, 1, 1, False),
    "W2": (20, 5, 3, 1, False),
    "W3": (1, 1, 1, 200, False),
    "W4-250": (250, 1, 1, 1, False),
    "W4-4000": (4000, 1, 1, 1, False),
    "W4T-250": (250, 1, 1, 1, True),
    "W4T-4000": (4000, 1, 1, 1, True),
}


class _NullSink:
    def export(self, record: Any) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def _sink(kind: str, folder: Path) -> Any:
    from tubeless.tracing import NdjsonSink, SqliteSink
    from tubeless.tracing import sinks as sink_module

    # Valgrind slows the run some fifty-fold: no quarter-second timer thread in the count.
    sink_module.flush_later.__defaults__ = (3600.0,)
    if kind == "ndjson":
        return NdjsonSink(folder / "trace.ndjson")
    if kind == "sqlite":
        return SqliteSink(folder / "trace.sqlite")
    return _NullSink()


def _store(kind: str, folder: Path) -> Any:
    from tubeless.durable import MemoryCheckpoints, SqliteCheckpoints

    if kind == "memory":
        return MemoryCheckpoints()
    if kind == "checkpoints":
        return SqliteCheckpoints(folder / "runs.sqlite")
    return None


def _driver(kind: str) -> int:
    from benchmarks import batch_driver
    from tubeless.batch import EntrySource

    pipeline = EntrySource.of(batch_driver.PROJECT, "io-row").load()
    raws = batch_driver.inputs()

    async def once() -> None:
        if kind == "bare":
            await batch_driver.bare(pipeline, raws)
        else:
            await batch_driver.batched(pipeline, raws)

    asyncio.run(once())  # warm-up
    list(itertools.starmap(lambda: asyncio.run(once()), [()]))
    return 0


def main() -> int:
    name, kind = sys.argv[1], sys.argv[2]
    if name == "W11":
        return _driver(kind)
    turns, width, concurrency, runs, plain_tuple = _SHAPES[name]
    pipeline = agent(turns, width, concurrency=concurrency, plain_tuple=plain_tuple)
    folder = Path(tempfile.mkdtemp())
    sink = _sink(kind, folder) if kind in ("null", "ndjson", "sqlite") else None
    store = _store(kind, folder)
    keys = itertools.count()

    async def once() -> None:
        from tubeless.pipeline import lean_path

        for _ in range(runs):
            if kind == "bare":
                await baseline(turns, width)
            elif store is not None:
                run = await pipeline.run({}, checkpoints=store, checkpoint_key=f"k{next(keys)}")
                assert run.status == "completed"
            elif sink is not None:
                run = await pipeline.run({}, trace=sink)
                assert run.status == "completed"
            else:
                with lean_path(kind != "executor"):
                    await pipeline.run_or_raise({})

    asyncio.run(once())  # warm-up: caches and lazy imports, outside the count
    list(itertools.starmap(lambda: asyncio.run(once()), [()]))
    if sink is not None:
        sink.close()
    if store is not None:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
