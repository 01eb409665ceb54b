"""The SQLite sink's commits (issue 32, item 1, round 4): each run's columns are bound once per
commit, ``NULL`` and the record's name are written as literals, and a store tubeless creates has
one index, ``(run_id, id)``. Whatever the batches, the rows stored are exactly the records'
columns, and the readers' lookups by run and by sequence stay index searches."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tubeless import define_agent, define_tool
from tubeless.tracing import SqliteSink, read_since, read_trace
from tubeless.tracing._json import compact_json
from tubeless.tracing._rows import payload_json, row_of
from tubeless.tracing.records import TraceRecord

TABLE = "pipeline_run_events"


async def _upper(text: str, ctx: Any = None) -> str:
    return text.upper()


async def _broken(text: str, ctx: Any = None) -> str:
    raise RuntimeError("the tool broke")


def _decide(state: Any, ctx: Any) -> dict[str, Any]:
    if ctx.turn == 1:
        calls = [
            {"id": "c0", "tool": "upper", "input": "abc"},
            {"id": "c'1", "tool": "upper", "input": "x"},
        ]
    else:  # the call fails, and the run with it
        calls = [{"id": "c2", "tool": "broken", "input": "x"}]
    return {"kind": "continue", "calls": calls}


def _reduce(state: Any, outcomes: Sequence[Any]) -> dict[str, Any]:
    return {"history": state["history"] + outcomes}


class _Keep:
    """A sink keeping the records it is given (the very objects every sink of the run gets)."""

    def __init__(self) -> None:
        self.records: list[Any] = []

    def export(self, record: Any) -> None:
        self.records.append(record)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


@functools.cache
def _records() -> tuple[Any, ...]:
    """The records of an agent run with a correlation id, iterated turns, tool calls with item
    keys and, in its second turn, a failing call: every optional column set somewhere."""
    tools = {
        "upper": define_tool(
            description="Uppercase.", input_schema=str, output_schema=str, run=_upper
        ),
        "broken": define_tool(
            description="Fails.", input_schema=str, output_schema=str, run=_broken
        ),
    }
    agent = define_agent(
        id="rows",
        input_schema=dict,
        result_schema=int,
        initial_state=lambda _: {"history": ()},
        decide=_decide,
        reduce=_reduce,
        tools=tools,
        limits={"max_turns": 3, "max_decisions": 3, "max_calls": 4, "max_concurrency": 1},
    )
    keep = _Keep()
    run = asyncio.run(agent.run({}, trace=keep, correlation_id="corr-1"))
    assert run.status == "failed"
    return tuple(keep.records)


def _stored(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(f"SELECT * FROM {TABLE} ORDER BY id").fetchall()
    conn.close()
    return [row[1:] for row in rows]


def test_the_run_sets_every_optional_column_somewhere() -> None:
    """The fixture run is a fair test: each optional column is set in some rows, not in others."""
    rows = [row_of(record) for record in _records()]
    assert all(type(record) is TraceRecord for record in _records())
    for column in (2, 3, 5, 6, 7, 10, 12, 13):  # correlation ... error_json, iteration_json
        values = {row[column] is None for row in rows}
        if column == 2:  # every record of a correlated run carries the correlation id
            assert values == {False}
        else:
            assert values == {True, False}, column


def test_each_payload_text_is_the_encoders() -> None:
    """The payload text reused or written without the encoder (a shared payload's, a progress
    report's, a step end's, an attempt's) is byte for byte what the encoder writes."""
    for record in _records():
        assert payload_json(record) == compact_json(record["payload"]), record["name"]


@settings(max_examples=25, deadline=None)
@given(
    cuts=st.lists(st.booleans(), min_size=1, max_size=200),
    plain=st.lists(st.booleans(), min_size=1, max_size=200),
)
def test_the_stored_rows_are_the_records_columns_whatever_the_batches(
    cuts: list[bool], plain: list[bool]
) -> None:
    """Flushing after any record, and mixing in plain-dict copies (which bind every column),
    stores each record's columns exactly as ``row_of`` gives them, in order."""
    records = _records()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.sqlite"
        with SqliteSink(path) as sink:
            for i, record in enumerate(records):
                sink.export(dict(record) if plain[i % len(plain)] else record)
                if cuts[i % len(cuts)]:
                    sink.flush()
        assert _stored(path) == [row_of(record) for record in records]
        assert read_trace(path) == [dict(record) for record in records]


def test_a_record_name_with_a_quote_is_stored_as_it_is(tmp_path: Path) -> None:
    """The name is written into the statement as a literal: a quote in it stays a quote."""
    first = _records()[0]
    odd = TraceRecord(first)
    odd.envelope, odd.tail, odd.details = first.envelope, None, None
    odd["name"] = 'it\'s "odd"; DROP TABLE x; --'
    with SqliteSink(tmp_path / "t.sqlite") as sink:
        sink.export(odd)
        sink.export(first)
    assert _stored(tmp_path / "t.sqlite") == [row_of(odd), row_of(first)]


def test_a_new_store_has_only_the_run_index(tmp_path: Path) -> None:
    with SqliteSink(tmp_path / "t.sqlite") as sink:
        sink.export(_records()[0])
    with sqlite3.connect(tmp_path / "t.sqlite") as conn:
        indexes = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' ORDER BY name"
        ).fetchall()
    conn.close()
    assert indexes == [
        (
            f"{TABLE}_run_id_idx",
            f"CREATE INDEX {TABLE}_run_id_idx ON {TABLE} (run_id, id)",
        )
    ]


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement the readers run, with its values in place (SQLite's trace callback)."""
    seen: list[str] = []
    connect = sqlite3.connect

    def tracing(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(seen.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", tracing)
    return seen


def test_the_readers_lookups_stay_index_searches(tmp_path: Path, statements: list[str]) -> None:
    """Following a run, a correlation id or a sequence: every query with a condition searches
    the rowid or the ``(run_id, id)`` index; only reading the whole store scans it."""
    path = tmp_path / "t.sqlite"
    with SqliteSink(path) as sink:
        for record in _records():
            sink.export(record)
    records = _records()
    turn = next(r for r in records if "iteration" in r)
    assert read_since(path, run_id=records[0]["runId"], after=3)
    assert read_since(path, run_id=turn["runId"])
    assert read_since(path, correlation_id="corr-1", after=5)
    assert len(read_trace(path)) == len(records)
    reads = [s for s in statements if s.startswith("SELECT") and f"FROM {TABLE}" in s]
    assert any("WHERE" in s for s in reads) and any("WHERE" not in s for s in reads)
    with sqlite3.connect(path) as conn:
        for sql in reads:
            plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
            if "WHERE" in sql:
                assert plan and all(step.startswith("SEARCH") for step in plan), (sql, plan)
    conn.close()
