"""Traces in Postgres (issue 34): ``PostgresSink`` writes the SQLite store's records into one
append-only table, many processes write one database at once, a ``kill -9`` keeps every
finished turn, and the readers take the URL. The password of a DSN is never shown.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.fixtures.postgres import postgres_dsn, postgres_server  # noqa: F401 (fixtures)
from tests.tracing.test_flushing import _assert_finished, _killed_mid_turn_2, _turn_tree
from tubeless.agent import define_agent, define_tool
from tubeless.errors import TRACE_INVALID
from tubeless.tracing import PostgresSink, SqliteSink, read_trace
from tubeless.tracing.postgres import SCHEMA_TABLE, STORE_VERSION, TABLE, redact_dsn
from tubeless.tracing.reader import open_sink

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD = 60.0  # seconds; a hang guard, never a timing assertion


def _agent() -> Any:
    """Three turns, two calling one tool: a run with child and grandchild runs."""
    return define_agent(
        id="echo",
        input_schema=dict,
        result_schema=str,
        initial_state=lambda validated: {"turn": 0},
        decide=lambda state, ctx: (
            {"kind": "continue", "calls": [{"id": f"c{ctx.turn}", "tool": "up", "input": "x"}]}
            if ctx.turn <= 2
            else {"kind": "finish", "result": "done"}
        ),
        reduce=lambda state, outcomes: {"turn": state["turn"] + 1},
        tools={
            "up": define_tool(
                description="Upper case.",
                input_schema=str,
                output_schema=str,
                run=lambda value, ctx: value.upper(),
            )
        },
    )


def test_postgres_holds_the_records_a_sqlite_store_holds(
    postgres_dsn: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    store = tmp_path / "run.sqlite"
    with PostgresSink(postgres_dsn) as pg, SqliteSink(store) as lite:
        run = asyncio.run(_agent().run({}, trace=[pg, lite]))
    assert run.status == "completed"

    records = read_trace(postgres_dsn)
    assert records == read_trace(store)
    assert len({r["runId"] for r in records}) == 6  # the agent, three turns, two calls


def test_the_tables_are_made_on_first_use_versioned_indexed_and_append_only(
    postgres_dsn: str,  # noqa: F811
) -> None:
    PostgresSink(postgres_dsn).close()
    PostgresSink(postgres_dsn).close()  # a second open finds them and changes nothing
    with open_sink(postgres_dsn) as sink:
        asyncio.run(_agent().run({}, trace=sink))
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        assert conn.execute(f"SELECT version FROM {SCHEMA_TABLE}").fetchall() == [(STORE_VERSION,)]
        indexes = {
            name
            for (name,) in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = %s", (TABLE,)
            )
        }
        assert {f"{TABLE}_run_idx", f"{TABLE}_parent_idx", f"{TABLE}_pipeline_idx"} <= indexes
        for statement in (f"UPDATE {TABLE} SET run_id = 'x'", f"DELETE FROM {TABLE}"):
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                conn.execute(statement)
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            conn.execute(f"TRUNCATE {TABLE}")
        count = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
    assert count is not None and count[0] == len(read_trace(postgres_dsn)) > 0


def test_a_store_of_another_version_is_refused_by_writers_and_readers(
    postgres_dsn: str,  # noqa: F811
) -> None:
    PostgresSink(postgres_dsn).close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE {SCHEMA_TABLE} SET version = 99")
    for attempt in (PostgresSink, read_trace):
        with pytest.raises(Exception, match="unsupported trace store version 99") as caught:
            attempt(postgres_dsn)
        assert getattr(caught.value, "code", None) == TRACE_INVALID


def test_a_database_without_traces_is_no_trace_store(postgres_dsn: str) -> None:  # noqa: F811
    with pytest.raises(Exception, match="not a tubeless trace store") as caught:
        read_trace(postgres_dsn)
    assert getattr(caught.value, "code", None) == TRACE_INVALID


def test_kill_9_mid_turn_2_leaves_every_record_of_turn_1(
    postgres_dsn: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    _killed_mid_turn_2(tmp_path, postgres_dsn)  # type: ignore[arg-type]

    records = read_trace(postgres_dsn)
    turn_1 = _turn_tree(records, 1)
    assert len({r["runId"] for r in turn_1}) == 3  # the turn and its two calls
    _assert_finished(turn_1)
    assert records[0]["name"] == "pipeline.started" and "parentRunId" not in records[0]


WRITER = """\
import sys
from tubeless.tracing import PostgresSink

dsn, name, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
with PostgresSink(dsn) as sink:
    for n in range(runs):
        run = f"{name}:{n}"
        base = {"version": 3, "runId": run, "pipelineId": name}
        sink.export({**base, "name": "pipeline.started", "timestampMs": n, "payload": {}})
        for step in range(5):
            sink.export({**base, "name": "step.running", "stepId": f"s{step}",
                         "timestampMs": n, "payload": {}})
        sink.export({**base, "name": "pipeline.completed", "timestampMs": n,
                     "durationMs": 1.0, "payload": {"status": "completed"}})
"""


def test_many_processes_write_one_trace_database_at_once(
    postgres_dsn: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Four writers start together on a fresh database: the first use makes the tables once,
    and every record of every writer is stored, each writer's in its own order."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER, encoding="utf-8")
    writers, runs = 4, 30
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), postgres_dsn, f"w{i}", str(runs)],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(writers)
    ]
    for process in processes:
        _, err = process.communicate(timeout=HANG_GUARD)
        assert process.returncode == 0, err

    records = read_trace(postgres_dsn)
    assert len(records) == writers * runs * 7
    for i in range(writers):
        mine = [r for r in records if r["pipelineId"] == f"w{i}"]
        assert [(r["runId"], r["name"]) for r in mine] == [
            (f"w{i}:{n}", name)
            for n in range(runs)
            for name in ("pipeline.started", *["step.running"] * 5, "pipeline.completed")
        ]


def test_the_password_of_a_dsn_is_never_shown(postgres_server: Any) -> None:  # noqa: F811
    secret = "s3cret-Pa55"
    dsn = postgres_server.dsn("no_such_database", password=secret)
    port = postgres_server.port
    assert redact_dsn(dsn) == f"postgresql://tubeless:***@127.0.0.1:{port}/no_such_database"
    with pytest.raises(ConnectionError) as caught:
        PostgresSink(dsn)
    assert secret not in str(caught.value) and "tubeless:***@" in str(caught.value)
    in_query = f"postgresql://tubeless@127.0.0.1:{postgres_server.port}/x?password={secret}"
    assert secret not in redact_dsn(in_query)
    with pytest.raises(ConnectionError) as caught:
        read_trace(in_query)
    assert secret not in str(caught.value)
    sink = PostgresSink(postgres_server.dsn(postgres_server.create_database(), password=secret))
    try:
        assert secret not in repr(sink) and secret not in sink.location
    finally:
        sink.close()


def test_without_psycopg_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ImportError, match=r"pip install 'tubeless\[postgres\]'"):
        PostgresSink("postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(ImportError, match=r"pip install 'tubeless\[postgres\]'"):
        read_trace("postgres://nobody@127.0.0.1:1/none")


def test_a_connection_lost_mid_run_retires_the_sink_and_the_run_goes_on(
    postgres_dsn: str,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = PostgresSink(postgres_dsn)
    try:
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with caplog.at_level("WARNING", logger="tubeless.trace"):
            run = asyncio.run(_agent().run({}, trace=sink))
        assert run.status == "completed"
        (warning,) = [r.getMessage() for r in caplog.records if r.name == "tubeless.trace"]
        assert "failed and was retired" in warning and "cannot write the trace store" in warning
        with pytest.raises(ValueError, match="refuses records after a failed write"):
            sink.flush()
    finally:
        sink.close()


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://app:pw@db/traces", "postgresql://app:***@db/traces"),
        (
            "postgres://app@db/traces?password=pw&sslmode=require",
            "postgres://app@db/traces?password=***&sslmode=require",
        ),
        ("host=db password=pw user=app", "host=db password=*** user=app"),
        ("host=db password = 'p w\\'x' user=app", "host=db password = *** user=app"),
        ("postgresql://app@db/traces", "postgresql://app@db/traces"),
    ],
)
def test_redact_dsn_masks_every_form_of_password(dsn: str, shown: str) -> None:
    assert redact_dsn(dsn) == shown
