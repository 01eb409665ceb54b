"""Traces survive storage: NDJSON and SQLite hold the same records in the same order, across
processes, beside a failing sink and after an interrupted run (UPSTREAM §2.1, §2.6, §2.7)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from examples.agent_delegation import delegating_agent
from tubeless import define_pipeline, step
from tubeless.testing import capture_trace
from tubeless.tracing import NdjsonSink, SqliteSink, read_trace
from tubeless.tracing.ndjson import read_ndjson
from tubeless.tracing.reader import open_sink, write_trace
from tubeless.tracing.sqlite import read_sqlite

QUESTION = {"question": "red blue green"}


def agent_shape(records: list[dict[str, Any]]) -> tuple[int, int]:
    """(turns of the root agent, tool calls dispatched) as the trace attributes record them."""
    attributes = [r["payload"]["attributes"] for r in records if r["name"] == "step.attempted"]
    turns = {a["agent.turn"] for a in attributes if a.get("agent.runId", "").startswith("deleg")}
    calls = {(a["agent.runId"], a["agent.callId"]) for a in attributes if "agent.callId" in a}
    return len(turns), len(calls)


async def test_a_delegation_trace_goes_ndjson_to_sqlite_to_ndjson_unchanged(
    tmp_path: Path,
) -> None:
    """Multi-turn, multi-call agent records: NDJSON -> SQLite -> NDJSON is byte-identical."""
    first = tmp_path / "first.ndjson"
    with capture_trace() as trace, NdjsonSink(first) as sink:
        run = await delegating_agent.run(QUESTION, trace=[trace, sink])
    assert run.status == "completed", run.errors
    turns, calls = agent_shape(trace.records)
    assert turns == 3 and calls >= 4

    records = read_ndjson(first)
    assert records == trace.records
    assert write_trace(records, tmp_path / "store.sqlite") == len(records)
    stored = read_sqlite(tmp_path / "store.sqlite")
    assert stored == records
    write_trace(stored, tmp_path / "second.jsonl")

    assert read_trace(tmp_path / "second.jsonl") == records
    assert (tmp_path / "second.jsonl").read_bytes() == first.read_bytes()


async def test_one_run_into_both_storages_reads_back_identically(tmp_path: Path) -> None:
    """A run given an NDJSON and a SQLite sink at once stores the captured records in both."""
    with (
        capture_trace() as trace,
        NdjsonSink(tmp_path / "t.ndjson") as ndjson,
        SqliteSink(tmp_path / "t.sqlite") as store,
    ):
        await delegating_agent.run(QUESTION, trace=[ndjson, store, trace])
        await delegating_agent.run(QUESTION, dry_run=True, trace=[ndjson, store, trace])

    assert read_trace(tmp_path / "t.ndjson") == trace.records
    assert read_trace(tmp_path / "t.sqlite") == trace.records


def test_an_ndjson_trace_written_by_another_process_is_read(tmp_path: Path) -> None:
    """A subprocess runs the scripted agent into a file; this process reads the v3 records."""
    path = tmp_path / "trace.ndjson"
    script = textwrap.dedent(
        f"""
        import asyncio
        from examples.scripted_agent import scripted_agent
        from tubeless.tracing.reader import open_sink

        async def main():
            sink = open_sink({str(path)!r})
            try:
                run = await scripted_agent.run({{"question": "hi there"}}, trace=sink)
            finally:
                sink.close()
            assert run.status == "completed", run.errors

        asyncio.run(main())
        """
    )
    subprocess.run(
        [sys.executable, "-c", script], check=True, timeout=120, cwd=Path(__file__).parents[2]
    )

    records = read_trace(path)

    assert {r["version"] for r in records} == {3}
    assert records[0]["name"] == "pipeline.started"
    assert records[0]["pipelineId"] == "scripted-agent"
    assert records[-1]["name"] == "pipeline.completed"
    assert records[-1]["runId"] == records[0]["runId"]
    assert records[-1]["payload"]["status"] == "completed"


# -- failing sinks ----------------------------------------------------------------------------


def trace_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "tubeless.trace"]


async def test_a_closed_ndjson_sink_is_retired_and_the_healthy_sink_gets_everything(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One warning on `tubeless.trace`; the run completes; the other sink has the full trace."""
    broken = NdjsonSink(tmp_path / "broken.ndjson")
    broken.close()
    with capture_trace() as reference:
        await delegating_agent.run(QUESTION, trace=reference)

    with caplog.at_level(logging.WARNING), capture_trace() as healthy:
        run = await delegating_agent.run(QUESTION, trace=[broken, healthy])

    assert run.status == "completed"
    [warning] = trace_warnings(caplog)
    assert "NdjsonSink" in warning.getMessage()
    assert healthy.names == reference.names
    assert (tmp_path / "broken.ndjson").read_bytes() == b""


async def test_a_locked_sqlite_store_is_retired_and_the_ndjson_sink_gets_everything(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another connection holds BEGIN EXCLUSIVE: the store's first commit fails, once."""
    store = SqliteSink(tmp_path / "locked.sqlite", timeout=0.05)
    locker = sqlite3.connect(tmp_path / "locked.sqlite", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        with (
            caplog.at_level(logging.WARNING),
            capture_trace() as captured,
            NdjsonSink(tmp_path / "healthy.ndjson") as healthy,
        ):
            run = await delegating_agent.run(QUESTION, trace=[store, healthy, captured])
    finally:
        locker.execute("ROLLBACK")
        locker.close()
        store.close()

    assert run.status == "completed"
    assert len(captured.records) > 64  # the 64th record's commit was the one that failed
    [warning] = trace_warnings(caplog)
    assert "SqliteSink" in warning.getMessage() and "locked" in warning.getMessage()
    assert read_ndjson(tmp_path / "healthy.ndjson") == captured.records
    assert read_sqlite(tmp_path / "locked.sqlite") == []


# -- an interrupted run -----------------------------------------------------------------------


async def test_a_run_whose_task_is_cancelled_leaves_readable_traces(tmp_path: Path) -> None:
    """Cancelling the awaiting task still ends both stored traces with a cancelled run."""
    started = threading.Event()

    async def wait_forever(inputs: dict[str, Any], ctx: Any) -> None:
        started.set()
        await asyncio.sleep(3600)

    pipeline = define_pipeline(
        id="interrupted",
        steps=[
            step("first", lambda inputs, ctx: 1),
            step("wait", wait_forever, depends_on=["first"]),
            step("never", lambda inputs, ctx: 2, depends_on=["wait"]),
        ],
    )
    ndjson, store = open_sink(tmp_path / "t.ndjson"), open_sink(tmp_path / "t.sqlite")
    try:
        task = asyncio.create_task(pipeline.run(trace=[ndjson, store]))
        async with asyncio.timeout(10):
            while not started.is_set():
                await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        ndjson.close()
        store.close()

    from_ndjson = read_trace(tmp_path / "t.ndjson")
    assert read_trace(tmp_path / "t.sqlite") == from_ndjson
    last = from_ndjson[-1]
    assert last["name"] == "pipeline.completed"
    assert last["payload"]["status"] == "cancelled"
    terminal = {r["stepId"]: r["name"] for r in from_ndjson if r["name"].startswith("step.")}
    assert terminal == {
        "first": "step.complete",
        "wait": "step.cancelled",
        "never": "step.cancelled",
    }
