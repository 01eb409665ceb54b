"""W12: a checkpointed W1 turn on PostgreSQL, against LangGraph's ``AsyncPostgresSaver``.

The benchmark starts a throwaway PostgreSQL server of its own (``initdb`` in a temporary folder,
as the tests do) but keeps the server's default durability (``fsync`` and synchronous commit
on) and connects over its local Unix socket. Measured alternately in one event loop, per turn:

- tubeless: W1 (one ``upper`` call a turn) with ``checkpoints=PostgresCheckpoints(dsn)``;
  every commit returns after the database's durable commit, before the work it guards;
- LangGraph (when ``langgraph`` and ``langgraph-checkpoint-postgres`` are installed, else the
  row says it was skipped): the same loop as a two-node graph (decide, then the tool node),
  checkpointed by ``AsyncPostgresSaver`` with LangGraph's default durability (``async``: a
  step's checkpoint is written while the next step runs) and with ``durability="sync"``.

Also measured: one lease renewal (what the background renewal costs each ``lease_ttl_s / 3``),
and W1 untraced with no store (it starts no renewal task: its per-turn time is the reference).

``python -m benchmarks --only W12`` (``--quick`` for fewer repetitions).
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.workloads import agent, upper

Emit = Callable[[list[dict[str, Any]], dict[str, Any]], None]

TURNS = 50


def _binaries() -> Path | None:
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


def _user() -> str | None:
    """The user that runs the server when this process is root (``initdb`` refuses root)."""
    if os.geteuid() != 0:
        return None
    import pwd

    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise RuntimeError("running as root, and neither a postgres nor a nobody user exists")


@contextmanager
def server() -> Iterator[str | None]:
    """The DSN of a fresh server on a local socket (default durability), or ``None``."""
    bin_dir = _binaries()
    if bin_dir is None:
        yield None
        return
    user = _user()
    folder = Path(tempfile.mkdtemp(prefix="tb-pg-bench-"))
    folder.chmod(0o755)
    if user is not None:
        shutil.chown(folder, user=user)
    data = folder / "data"
    port = 5432 + os.getpid() % 1000 + 10000

    def call(*args: str) -> None:
        subprocess.run(
            [str(bin_dir / args[0]), *args[1:]],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            user=user,
            cwd=folder,
            timeout=120,
        )

    try:
        call("initdb", "-D", str(data), "-U", "tubeless", "-A", "trust")
        options = f"-p {port} -k {folder} -c listen_addresses=''"
        call("pg_ctl", "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "start")
        yield f"postgresql://tubeless@/postgres?host={folder}&port={port}"
    finally:
        if data.exists():
            subprocess.run(
                [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                user=user,
                timeout=60,
                check=False,
            )
        shutil.rmtree(folder, ignore_errors=True)


def _langgraph(turns: int) -> tuple[Any, Any] | None:
    """The W1 loop as a LangGraph graph (uncompiled) and the saver class; ``None`` if absent."""
    try:
        import operator
        from typing import Annotated, TypedDict

        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return None

    # The functional form: the annotations are objects, not strings LangGraph cannot resolve.
    State = TypedDict(  # noqa: UP013
        "State",
        {"history": Annotated[list[Any], operator.add], "pending": list[Any], "turn": int},
    )

    def decide(state: Any) -> dict[str, Any]:
        if state["turn"] >= turns:
            return {"pending": []}
        return {"pending": [{"id": "c0", "tool": "upper", "input": "abc"}]}

    async def tools(state: Any) -> dict[str, Any]:
        outcomes = [
            {"id": c["id"], "tool": c["tool"], "ok": True, "value": await upper(c["input"])}
            for c in state["pending"]
        ]
        return {"history": outcomes, "pending": [], "turn": state["turn"] + 1}

    graph = StateGraph(State)
    graph.add_node("decide", decide)
    graph.add_node("tools", tools)
    graph.add_edge(START, "decide")
    graph.add_conditional_edges("decide", lambda s: "tools" if s["pending"] else END)
    graph.add_edge("tools", "decide")
    return graph, AsyncPostgresSaver


async def _alternate(makes: list[Callable[[], Awaitable[Any]]], repeats: int) -> list[float]:
    for make in makes:  # warm-up
        await make()
    timings: list[list[float]] = [[] for _ in makes]
    for _ in range(repeats):
        for make, times in zip(makes, timings, strict=True):
            start = time.perf_counter()
            await make()
            times.append(time.perf_counter() - start)
    return [statistics.median(times) for times in timings]


async def _measure(dsn: str, repeats: int) -> dict[str, Any]:
    from tubeless.durable import PostgresCheckpoints

    pipeline = agent(TURNS, 1)
    store = PostgresCheckpoints(dsn)
    keys = iter(range(10**7))

    async def ours() -> None:
        run = await pipeline.run({}, checkpoints=store, checkpoint_key=f"k{next(keys)}")
        assert run.status == "completed", run.errors

    async def untraced() -> None:
        await pipeline.run_or_raise({})

    makes: list[Callable[[], Awaitable[Any]]] = [ours, untraced]
    names = ["tubeless", "untraced"]
    found = _langgraph(TURNS)
    saver_context = None
    if found is not None:
        graph, saver_class = found
        saver_context = saver_class.from_conn_string(dsn)
        saver = await saver_context.__aenter__()
        await saver.setup()
        compiled = graph.compile(checkpointer=saver)
        threads = iter(range(10**7))

        def theirs(durability: str) -> Callable[[], Awaitable[Any]]:
            async def go() -> None:
                config = {
                    "configurable": {"thread_id": f"t{next(threads)}"},
                    "recursion_limit": 2 * TURNS + 10,
                }
                out = await compiled.ainvoke(
                    {"history": [], "pending": [], "turn": 0}, config, durability=durability
                )
                assert len(out["history"]) == TURNS

            return go

        makes += [theirs("async"), theirs("sync")]
        names += ["langgraph async", "langgraph sync"]
    try:
        medians: dict[str, Any] = dict(zip(names, await _alternate(makes, repeats), strict=True))
        for name, make in zip(names, makes, strict=True):
            if name != "untraced":
                medians[f"{name} commits"], medians[f"{name} wal"] = await _cost(dsn, make)
        lease = store.acquire("renewal")
        renewals = []
        for _ in range(max(20, repeats * 4)):
            start = time.perf_counter()
            lease.renew()  # type: ignore[attr-defined]
            renewals.append(time.perf_counter() - start)
        lease.close()
    finally:
        store.close()
        if saver_context is not None:
            await saver_context.__aexit__(None, None, None)
    medians["renewal"] = statistics.median(renewals)
    medians["lease_ttl_s"] = store.lease_ttl_s
    return medians


async def _cost(dsn: str, make: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """Write transactions committed (transaction ids handed out: every commit that writes
    takes one; the counters of ``pg_stat_database`` lag idle connections by seconds) and WAL
    bytes written, per turn, by one run of ``make``."""
    import psycopg

    query = (
        "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, "
        "pg_current_wal_lsn() - '0/0'::pg_lsn"
    )

    async def read() -> tuple[int, int]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            row = await (await conn.execute(query)).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    xid, wal = await read()
    await make()
    after_xid, after_wal = await read()
    return (after_xid - xid) / TURNS, (after_wal - wal) / TURNS


def run(rows: list[dict[str, Any]], repeats: int, *, emit: Emit) -> None:
    """Emit the W12 rows (skipped rows say why)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        emit(rows, {"workload": "W12 W1 checkpoints postgres", "skipped": "psycopg missing"})
        return
    with server() as dsn:
        if dsn is None:
            emit(
                rows,
                {"workload": "W12 W1 checkpoints postgres", "skipped": "no PostgreSQL binaries"},
            )
            return
        found = asyncio.run(_measure(dsn, repeats))
    untraced = found["untraced"] / TURNS
    emit(
        rows,
        {
            "workload": "W12 W1 checkpoints postgres",
            "turns": TURNS,
            "ms_per_turn": round(found["tubeless"] / TURNS * 1e3, 3),
            "commits_per_turn": round(found["tubeless commits"], 2),
            "wal_bytes_per_turn": round(found["tubeless wal"]),
            "untraced_us_per_turn": round(untraced * 1e6, 2),
        },
    )
    for durability in ("async", "sync"):
        name = f"langgraph {durability}"
        row: dict[str, Any] = {"workload": f"W12 LangGraph AsyncPostgresSaver {durability}"}
        if name in found:
            row["ms_per_turn"] = round(found[name] / TURNS * 1e3, 3)
            row["tubeless_ratio"] = round(found["tubeless"] / found[name], 3)
            row["commits_per_turn"] = round(found[f"{name} commits"], 2)
            row["wal_bytes_per_turn"] = round(found[f"{name} wal"])
        else:
            row["skipped"] = "langgraph or langgraph-checkpoint-postgres is not installed"
        emit(rows, row)
    renewal = found["renewal"]
    emit(
        rows,
        {
            "workload": "W12 one lease renewal postgres",
            "ms": round(renewal * 1e3, 3),
            "every_s": round(found["lease_ttl_s"] / 3, 2),
            "share_of_a_turn_per_renewal": round(renewal / (found["tubeless"] / TURNS), 3),
        },
    )
