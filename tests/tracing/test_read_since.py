"""``read_since``: a follower of one run gets each record of the run's tree once, in order,
while another process appends to the store (NDJSON, SQLite and Postgres alike)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.postgres import postgres_dsn, postgres_server  # noqa: F401 (fixtures)
from tubeless.tracing import read_since, read_trace
from tubeless.tracing.reader import open_sink, write_trace

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD = 60.0  # seconds; a hang guard, never a timing assertion

#: Four runs: root R, its child C, C's child G; another root O with its child X.
PARENTS: dict[str, str | None] = {"R": None, "C": "R", "G": "C", "O": None, "X": "O"}


def _records(rounds: int) -> list[dict[str, Any]]:
    """Interleaved records of both trees: each run starts, runs steps, and completes."""
    out: list[dict[str, Any]] = []

    def record(run: str, name: str, **extra: Any) -> dict[str, Any]:
        base: dict[str, Any] = {"version": 3, "name": name, "runId": run, "pipelineId": "p"}
        parent = PARENTS[run]
        if parent is not None:
            base["parentRunId"] = parent
        payload = extra.pop("payload", {})
        return {**base, "timestampMs": len(out), **extra, "payload": payload}

    for run in ("R", "O", "C", "X", "G"):
        out.append(record(run, "pipeline.started"))
    for n in range(rounds):
        for run in PARENTS:
            out.append(record(run, "step.running", stepId=f"s{n}"))
    for run in ("G", "X", "C", "O", "R"):
        out.append(
            record(run, "pipeline.completed", durationMs=1.0, payload={"status": "completed"})
        )
    return out


def _tree(records: list[dict[str, Any]], root: str) -> list[dict[str, Any]]:
    members = {root} | {run for run, parent in PARENTS.items() if parent == root}
    members |= {run for run, parent in PARENTS.items() if parent in members}
    return [r for r in records if r["runId"] in members]


WRITER = """\
import json, sys, time
from pathlib import Path
from tubeless.tracing.reader import open_sink

target, records, go = sys.argv[1], json.loads(Path(sys.argv[2]).read_text()), Path(sys.argv[3])
with open_sink(target) as sink:
    for n, record in enumerate(records):
        sink.export(record)
        if n % 3 == 2:
            sink.flush()
            if n == 8:
                go.write_text("some records are in")
            time.sleep(0.002)
"""


@pytest.fixture(params=["ndjson", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_dsn"))
    return str(tmp_path / f"trace.{request.param}")


def test_a_follower_gets_every_record_of_the_tree_once_in_order_while_a_writer_appends(
    store: str, tmp_path: Path
) -> None:
    records = _records(rounds=40)
    data = tmp_path / "records.json"
    data.write_text(json.dumps(records), encoding="utf-8")
    go = tmp_path / "GO"
    (tmp_path / "writer.py").write_text(WRITER, encoding="utf-8")
    writer = subprocess.Popen(
        [sys.executable, str(tmp_path / "writer.py"), store, str(data), str(go)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[tuple[int, dict[str, Any]]] = []
    polls_while_writing = 0
    try:
        deadline = time.monotonic() + HANG_GUARD
        while not go.exists():
            assert writer.poll() is None, writer.communicate()
            assert time.monotonic() < deadline, "the writer never started"
            time.sleep(0.005)
        while True:
            writing = writer.poll() is None
            after = seen[-1][0] if seen else 0
            batch = read_since(store, run_id="R", after=after, limit=7)
            assert len(batch) <= 7
            seen += batch
            polls_while_writing += writing
            if not writing and not batch:
                break
            assert time.monotonic() < deadline, "the follower never caught up"
            time.sleep(0.001)
    finally:
        _, err = writer.communicate(timeout=HANG_GUARD)
    assert writer.returncode == 0, err
    assert polls_while_writing > 1

    sequences = [sequence for sequence, _ in seen]
    assert sequences == sorted(set(sequences))
    assert [record for _, record in seen] == _tree(read_trace(store), "R")
    assert [record for _, record in seen] == _tree(records, "R")


def test_after_the_last_seen_sequence_returns_exactly_what_follows(store: str) -> None:
    records = _records(rounds=3)
    write_trace(records, store)
    every = read_since(store, run_id="R", limit=1000)
    assert [record for _, record in every] == _tree(records, "R")
    for cut in range(len(every)):
        assert read_since(store, run_id="R", after=every[cut][0]) == every[cut + 1 :]
        assert (
            read_since(store, run_id="R", after=every[cut][0], limit=2) == every[cut + 1 : cut + 3]
        )
    # A child run is followed with its own subtree; the other root with its child only.
    assert [r for _, r in read_since(store, run_id="C")] == _tree(records, "C")
    assert [r for _, r in read_since(store, run_id="O")] == _tree(records, "O")
    assert read_since(store, run_id="unknown") == []
    assert read_since(store, run_id="R", after=every[-1][0]) == []


def test_a_sequence_is_the_store_s_own(store: str, tmp_path: Path) -> None:
    """SQLite row ids and Postgres ids count every row; NDJSON sequences are line numbers."""
    records = _records(rounds=1)
    with open_sink(store) as sink:
        for record in records:
            sink.export(record)
    sequences = [sequence for sequence, _ in read_since(store, run_id="O")]
    assert sequences == [n + 1 for n, record in enumerate(records) if record["runId"] in ("O", "X")]


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"after": -1}, "after must be an integer >= 0"),
        ({"limit": 0}, "limit must be an integer >= 1"),
        ({"after": True}, "after must be an integer >= 0"),
    ],
)
def test_bad_arguments_are_refused(tmp_path: Path, arguments: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        read_since(tmp_path / "t.sqlite", run_id="R", **arguments)


def test_a_missing_file_is_not_found(tmp_path: Path) -> None:
    for name in ("t.sqlite", "t.ndjson"):
        with pytest.raises(FileNotFoundError):
            read_since(tmp_path / name, run_id="R")


def test_postgres_followers_reuse_connections_and_survive_their_loss(
    postgres_dsn: str,  # noqa: F811
) -> None:
    import psycopg

    records = _records(rounds=2)
    write_trace(records, postgres_dsn)
    expected = read_since(postgres_dsn, run_id="R")

    def backends() -> int:
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
            assert row is not None
            return int(row[0])

    for _ in range(20):
        assert read_since(postgres_dsn, run_id="R") == expected
    assert backends() == 1  # one kept for the next call, not one per call

    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    assert read_since(postgres_dsn, run_id="R") == expected
