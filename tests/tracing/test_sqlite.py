"""SQLite trace stores: the upstream version-4 layout, append-only, batched writes, read-only
reads that accept a writer's `-wal` (UPSTREAM §2.7)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tubeless.tracing import SqliteSink, TraceReadError, read_trace
from tubeless.tracing.reader import TRACE_INVALID
from tubeless.tracing.sqlite import read_sqlite

COLUMNS = [
    # name, declared type, NOT NULL, primary key
    ("id", "INTEGER", 0, 1),
    ("version", "INTEGER", 1, 0),
    ("run_id", "TEXT", 1, 0),
    ("correlation_id", "TEXT", 0, 0),
    ("parent_run_id", "TEXT", 0, 0),
    ("pipeline_id", "TEXT", 1, 0),
    ("step_id", "TEXT", 0, 0),
    ("attempt_id", "TEXT", 0, 0),
    ("item_key", "TEXT", 0, 0),
    ("event_name", "TEXT", 1, 0),
    ("timestamp_ms", "INTEGER", 1, 0),
    ("duration_ms", "REAL", 0, 0),
    ("payload_json", "TEXT", 1, 0),
    ("error_json", "TEXT", 0, 0),
    ("iteration_json", "TEXT", 0, 0),
]


def record(index: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "version": 3,
        "name": "step.complete",
        "runId": "p:1",
        "pipelineId": "p",
        "timestampMs": 1_700_000_000_000 + index,
        "stepId": f"s{index}",
        "payload": {"status": "completed"},
        **extra,
    }


FULL = {
    "version": 3,
    "name": "step.failed",
    "runId": "child:2",
    "pipelineId": "child",
    "parentRunId": "p:1",
    "correlationId": "corr",
    "itemKey": "iteration-2",
    "iteration": {"runId": "p:1", "stepId": "loop", "attemptId": "p:1:attempt:1", "index": 2},
    "timestampMs": 1_700_000_000_123,
    "stepId": "work",
    "attemptId": "child:2:attempt:1",
    "durationMs": 12.5,
    "error": {
        "code": "TUBELESS_STEP_FAILED",
        "kind": "step",
        "phase": "execution",
        "message": "naïve failure ✗",
        "cause": {"message": "inner", "name": "ValueError"},
    },
    "payload": {"status": "failed"},
}


def count_committed(path: Path) -> int:
    """Rows visible to another, read-only connection."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM pipeline_run_events").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    """A store holding FULL and one minimal record, closed."""
    path = tmp_path / "runs.sqlite"
    with SqliteSink(path) as sink:
        sink.export(FULL)
        sink.export(record())
    yield path


# -- layout -----------------------------------------------------------------------------------


def test_a_new_store_has_the_upstream_table_columns(store: Path) -> None:
    """`pipeline_run_events` with exactly the version-4 columns, in order."""
    conn = sqlite3.connect(store)
    info = conn.execute("PRAGMA table_info(pipeline_run_events)").fetchall()
    assert [(name, kind, notnull, pk) for _, name, kind, notnull, _, pk in info] == COLUMNS
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'pipeline_run_events'")
    assert "AUTOINCREMENT" in sql.fetchone()[0]
    conn.close()


def test_a_new_store_has_the_run_index_only(store: Path) -> None:
    """(run_id, id), the one index tubeless's readers search; the original's (pipeline_id, id
    DESC) and (timestamp_ms DESC) cost every record two inserts and no reader queries them."""
    conn = sqlite3.connect(store)
    found = set()
    for _, name, *_ in conn.execute("PRAGMA index_list(pipeline_run_events)"):
        if name.startswith("sqlite_autoindex"):
            continue
        keys = conn.execute(f"PRAGMA index_xinfo({name})").fetchall()
        # index_xinfo rows: seqno, cid, name, desc, coll, key; key columns only.
        found.add(
            tuple((col, "DESC" if desc else "ASC") for _, _, col, desc, _, key in keys if key)
        )
    conn.close()
    assert found == {(("run_id", "ASC"), ("id", "ASC"))}


def test_a_new_store_has_the_triggers_version_and_pragmas(store: Path) -> None:
    """No-update/no-delete triggers, user_version 4, WAL; the writer uses NORMAL sync and FKs."""
    conn = sqlite3.connect(store)
    triggers = conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
    assert [t for (t,) in triggers] == [
        "pipeline_run_events_no_delete",
        "pipeline_run_events_no_update",
    ]
    assert conn.execute("PRAGMA user_version").fetchone() == (4,)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    conn.close()
    sink = SqliteSink(store)
    # synchronous and foreign_keys are per connection: ask the sink's own.
    assert sink._conn is not None
    assert sink._conn.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
    assert sink._conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
    sink.close()


@pytest.mark.parametrize(
    "statement",
    [
        pytest.param("UPDATE pipeline_run_events SET run_id = 'x'", id="update"),
        pytest.param("DELETE FROM pipeline_run_events WHERE id = 1", id="delete"),
        pytest.param("DELETE FROM pipeline_run_events", id="delete-all"),
    ],
)
def test_rows_cannot_be_updated_or_deleted(store: Path, statement: str) -> None:
    """The triggers abort UPDATE and DELETE with an append-only message."""
    conn = sqlite3.connect(store)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute(statement)
    conn.rollback()
    conn.close()
    assert len(read_sqlite(store)) == 2


def test_the_trigger_error_is_an_integrity_error(store: Path) -> None:
    """RAISE(ABORT, ...) surfaces as sqlite3.IntegrityError."""
    conn = sqlite3.connect(store)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("DELETE FROM pipeline_run_events")
    conn.close()


# -- writing ----------------------------------------------------------------------------------


def test_rows_are_committed_in_batches_of_64(tmp_path: Path) -> None:
    """63 exports: nothing visible elsewhere; the 64th commits all; flush/close commit tails."""
    path = tmp_path / "runs.sqlite"
    sink = SqliteSink(path)
    for index in range(63):
        sink.export(record(index))
    assert count_committed(path) == 0
    sink.export(record(63))
    assert count_committed(path) == 64
    for index in range(64, 74):
        sink.export(record(index))
    assert count_committed(path) == 64
    sink.flush()
    assert count_committed(path) == 74
    for index in range(74, 79):
        sink.export(record(index))
    sink.close()
    assert count_committed(path) == 79
    assert [r["stepId"] for r in read_sqlite(path)] == [f"s{i}" for i in range(79)]


def test_records_come_back_as_the_exact_wire_dicts(store: Path) -> None:
    """Every column maps back; absent optional fields stay absent; key order is the writers'."""
    records = read_sqlite(store)
    assert records == [FULL, record()]
    assert list(records[0]) == list(FULL)
    assert list(records[1]) == list(record())


def test_the_columns_hold_the_envelope_and_json_text(store: Path) -> None:
    """Relations in columns, payload/error/iteration as compact JSON, NULL when absent."""
    conn = sqlite3.connect(store)
    conn.row_factory = sqlite3.Row
    full, minimal = (dict(row) for row in conn.execute("SELECT * FROM pipeline_run_events"))
    conn.close()
    assert full["event_name"] == "step.failed"
    assert full["parent_run_id"] == "p:1"
    assert full["item_key"] == "iteration-2"
    assert full["payload_json"] == '{"status":"failed"}'
    assert full["iteration_json"].startswith('{"runId":"p:1",')
    assert "naïve failure ✗" in full["error_json"]
    absent = (
        "correlation_id",
        "parent_run_id",
        "item_key",
        "attempt_id",
        "duration_ms",
        "error_json",
        "iteration_json",
    )
    assert all(minimal[column] is None for column in absent)


def test_an_integral_duration_is_read_as_a_float(tmp_path: Path) -> None:
    """durationMs is REAL: an int written comes back as a float."""
    path = tmp_path / "runs.sqlite"
    with SqliteSink(path) as sink:
        sink.export(record(durationMs=5))
    [back] = read_sqlite(path)
    assert type(back["durationMs"]) is float and back["durationMs"] == 5.0


def test_parent_folders_are_created_and_an_existing_store_is_added_to(tmp_path: Path) -> None:
    """A second sink on the same store appends after the first one's rows."""
    path = tmp_path / "a" / "b" / "runs.db"
    for index in range(2):
        with SqliteSink(path) as sink:
            sink.export(record(index))
    assert [r["stepId"] for r in read_trace(path)] == ["s0", "s1"]


def test_a_failed_write_makes_the_sink_refuse_further_records(tmp_path: Path) -> None:
    """A commit blocked by another writer fails; later exports raise; close does not."""
    path = tmp_path / "runs.sqlite"
    sink = SqliteSink(path, timeout=0.05)
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    sink.export(record())
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        sink.flush()
    with pytest.raises(ValueError, match="refuses records after a failed write"):
        sink.export(record(1))
    locker.execute("ROLLBACK")
    locker.close()
    sink.close()
    assert read_sqlite(path) == []


def test_exporting_after_close_raises(tmp_path: Path) -> None:
    """A closed sink refuses records; close is idempotent."""
    sink = SqliteSink(tmp_path / "runs.sqlite")
    sink.close()
    sink.close()
    with pytest.raises(ValueError, match="closed"):
        sink.export(record())


def test_exports_from_another_thread_are_accepted(tmp_path: Path) -> None:
    """check_same_thread is off: handlers in worker threads report through the sink."""
    path = tmp_path / "runs.sqlite"
    sink = SqliteSink(path)

    def work() -> None:
        for index in range(70):
            sink.export(record(index))

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    sink.close()
    assert len(read_sqlite(path)) == 70


# -- versions ---------------------------------------------------------------------------------

V3_TABLE = """CREATE TABLE pipeline_run_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, version INTEGER NOT NULL, run_id TEXT NOT NULL,
    correlation_id TEXT, parent_run_id TEXT, pipeline_id TEXT NOT NULL, step_id TEXT,
    attempt_id TEXT, item_key TEXT, event_name TEXT NOT NULL, timestamp_ms INTEGER NOT NULL,
    duration_ms REAL, payload_json TEXT NOT NULL, error_json TEXT)"""


def make_v3_store(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(V3_TABLE)
    conn.execute(
        "INSERT INTO pipeline_run_events (version, run_id, pipeline_id, event_name, timestamp_ms,"
        " payload_json) VALUES (2, 'old:1', 'old', 'pipeline.finalize.started', 7, '{}')"
    )
    conn.execute("PRAGMA user_version = 3")
    conn.close()


def test_a_version_3_store_is_read_as_is(tmp_path: Path) -> None:
    """Readers accept version 3 (no iteration_json column) without changing it."""
    path = tmp_path / "old.sqlite"
    make_v3_store(path)
    assert read_sqlite(path) == [
        {
            "version": 2,
            "name": "pipeline.finalize.started",
            "runId": "old:1",
            "pipelineId": "old",
            "timestampMs": 7,
            "payload": {},
        }
    ]
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (3,)
    conn.close()


def test_a_version_3_store_is_migrated_to_4_when_opened_for_writing(tmp_path: Path) -> None:
    """The writer adds iteration_json and sets user_version 4; old rows stay readable."""
    path = tmp_path / "old.sqlite"
    make_v3_store(path)
    with SqliteSink(path) as sink:
        sink.export(FULL)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (4,)
    columns = [row[1] for row in conn.execute("PRAGMA table_info(pipeline_run_events)")]
    conn.close()
    assert columns[-1] == "iteration_json"
    old, new = read_sqlite(path)
    assert old["runId"] == "old:1" and "iteration" not in old
    assert new == FULL


@pytest.mark.parametrize("version", [1, 2, 5, 99])
def test_an_unsupported_store_version_is_refused(tmp_path: Path, version: int) -> None:
    """Neither the writer nor the reader touches another layout."""
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE pipeline_run_events (id INTEGER)")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.commit()
    conn.close()
    for opener in (SqliteSink, read_sqlite):
        with pytest.raises(TraceReadError, match=f"unsupported trace store version {version}"):
            opener(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone() == (version,)
    conn.close()


def test_a_database_with_other_tables_is_not_taken_over(tmp_path: Path) -> None:
    """user_version 0 with tables in it is someone else's database, not a new store."""
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(TraceReadError, match="not a tubeless trace store") as caught:
        SqliteSink(path)
    assert caught.value.code == TRACE_INVALID
    with pytest.raises(TraceReadError, match="not a tubeless trace store"):
        read_sqlite(path)


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    """Text in a .sqlite file: a TraceReadError naming the file, for readers and writers."""
    path = tmp_path / "notes.sqlite"
    path.write_text("hello, this is not SQLite " * 100)
    for opener in (SqliteSink, read_sqlite):
        with pytest.raises(TraceReadError, match="not a tubeless trace store") as caught:
            opener(path)
        assert caught.value.path == str(path)


def test_reading_a_missing_store_is_file_not_found_and_creates_nothing(tmp_path: Path) -> None:
    """The reader never creates the file."""
    path = tmp_path / "missing.sqlite"
    with pytest.raises(FileNotFoundError):
        read_sqlite(path)
    assert not path.exists()


# -- read-only reads and the WAL --------------------------------------------------------------


def test_a_store_with_an_open_writer_is_read_including_its_wal(tmp_path: Path) -> None:
    """Committed rows still in the `-wal` of a writer that is open are read, not refused."""
    path = tmp_path / "runs.sqlite"
    sink = SqliteSink(path)
    for index in range(3):
        sink.export(record(index))
    sink.flush()
    assert Path(f"{path}-wal").stat().st_size > 0
    assert [r["stepId"] for r in read_sqlite(path)] == ["s0", "s1", "s2"]
    sink.export(record(3))
    sink.close()
    assert len(read_sqlite(path)) == 4


def test_a_store_left_by_a_crashed_writer_is_read(tmp_path: Path) -> None:
    """A process that flushed and then died without closing leaves a `-wal`; it is read."""
    path = tmp_path / "runs.sqlite"
    script = textwrap.dedent(
        f"""
        import os
        from tubeless.tracing import SqliteSink
        sink = SqliteSink({str(path)!r})
        for i in range(3):
            sink.export({{"version": 3, "name": "pipeline.log", "runId": "r", "pipelineId": "p",
                         "timestampMs": i, "payload": {{"level": "log", "message": str(i)}}}})
        sink.flush()
        sink.export({{"version": 3, "name": "pipeline.log", "runId": "r", "pipelineId": "p",
                     "timestampMs": 9, "payload": {{"level": "log", "message": "lost"}}}})
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert Path(f"{path}-wal").exists()

    records = read_sqlite(path)

    assert [r["payload"]["message"] for r in records] == ["0", "1", "2"]
    assert Path(f"{path}-wal").exists()  # a read-only reader does not checkpoint


def test_read_trace_reads_sqlite_by_extension(store: Path, tmp_path: Path) -> None:
    """`.sqlite`, `.sqlite3` and `.db` are SQLite stores."""
    for suffix in (".sqlite3", ".db"):
        copy = tmp_path / f"copy{suffix}"
        copy.write_bytes(store.read_bytes())
        assert read_trace(copy) == read_trace(store)
