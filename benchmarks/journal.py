"""The durable journal's own cost per turn, by the length of the run (issue 32, item 2).

``python -m benchmarks.journal [TURNS ...]`` runs W1 (one call a turn) at each length with
``MemoryCheckpoints()``, with ``SqliteCheckpoints`` on local disk (full sync) and without
checkpoints, alternately in one process, and prints per length: the checkpointed run's time
per turn, the journal's share (checkpointed minus plain, in µs a turn) and the commits (durable
writes) per turn. Its instruction counts come from ``python -m benchmarks.count W1-50|W1|W1-1000
memory`` (or ``checkpoints``) under callgrind; its fsyncs from ``strace -f -c``.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.workloads import agent


class Counting:
    """A checkpoint store that counts the durable writes made through it."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.writes = 0

    def acquire(self, key: str) -> Any:
        lease = self.store.acquire(key)
        outer = self

        class Counted:
            def read(self) -> str | None:
                return lease.read()  # type: ignore[no-any-return]

            def write(self, document: str) -> None:
                outer.writes += 1
                lease.write(document)

            def close(self) -> None:
                lease.close()

            def __getattr__(self, name: str) -> Any:
                return getattr(lease, name)

        return Counted()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def _median_per_turn(runs: list[float], turns: int) -> float:
    return statistics.median(runs) / turns * 1e6


def measure(turns: int, rounds: int, folder: Path) -> dict[str, float]:
    """µs per turn for plain, memory and sqlite, alternately; commits per turn."""
    from tubeless.durable import MemoryCheckpoints, SqliteCheckpoints

    pipeline = agent(turns)
    keys = itertools.count()
    memory = Counting(MemoryCheckpoints())
    sqlite = Counting(SqliteCheckpoints(folder / f"w1-{turns}.sqlite"))
    times: dict[str, list[float]] = {"plain": [], "memory": [], "sqlite": []}

    async def once(kind: str) -> float:
        store = {"plain": None, "memory": memory, "sqlite": sqlite}[kind]
        start = time.perf_counter()
        if store is None:
            await pipeline.run_or_raise({})
        else:
            run = await pipeline.run({}, checkpoints=store, checkpoint_key=f"k{next(keys)}")
            assert run.status == "completed", run
        return time.perf_counter() - start

    async def rounds_of() -> None:
        for kind in times:  # warm-up
            await once(kind)
        memory.writes = 0
        for _ in range(rounds):
            for kind in times:
                times[kind].append(await once(kind))

    asyncio.run(rounds_of())
    sqlite.store.close()
    plain = _median_per_turn(times["plain"], turns)
    return {
        "turns": turns,
        "plain_us": round(plain, 2),
        "memory_us": round(_median_per_turn(times["memory"], turns), 2),
        "memory_share_us": round(_median_per_turn(times["memory"], turns) - plain, 2),
        "sqlite_us": round(_median_per_turn(times["sqlite"], turns), 2),
        "commits_per_turn": round(memory.writes / rounds / turns, 3),
    }


def main(argv: list[str]) -> int:
    lengths = [int(a) for a in argv] or [50, 200, 1000]
    with tempfile.TemporaryDirectory() as folder:
        for turns in lengths:
            rounds = max(3, 4000 // turns)
            print(measure(turns, rounds, Path(folder)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
