"""Following a run in a trace store: its records after a sequence number, for live streams.

:func:`read_since` serves followers (an HTTP event stream, a web page) that poll a store while
runs write to it. Each record comes with its sequence in the store (the SQLite row id, the
Postgres identity column, the 1-based NDJSON line); a follower passes the last sequence it saw
and gets exactly the records that follow, none twice and none skipped: rows are committed in
sequence order (SQLite writers take the store's write lock, Postgres writers a lock for each
commit), so no row can appear later below a sequence already read.

The records *of a run* are its tree: the run's own records and those of every run it started,
directly or through its children, found through ``parentRunId`` (a child's records all carry
it). ``correlationId`` ties separate root runs together (each with a tree of its own): asked
for by ``correlation_id``, the records of every run that carries it are returned instead, which
is how a served run that was resumed several times (one root run each time) is followed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from tubeless.tracing.reader import storage_kind

if TYPE_CHECKING:
    import sqlite3
    from pathlib import Path

__all__ = ["DEFAULT_LIMIT", "read_since"]

#: Records returned per call unless asked otherwise.
DEFAULT_LIMIT: Final = 1000

Sequenced = tuple[int, dict[str, Any]]


def read_since(
    source: str | os.PathLike[str],
    *,
    run_id: str | None = None,
    correlation_id: str | None = None,
    after: int = 0,
    limit: int = DEFAULT_LIMIT,
) -> list[Sequenced]:
    """The records of ``run_id``'s tree whose sequence is above ``after``, in order, at most
    ``limit``, each as ``(sequence, record)``.

    Args:
        source: A SQLite store (``.sqlite``, ``.sqlite3``, ``.db``), a Postgres URL
            (``postgresql://...``) or an NDJSON file (the sequence is the line number; a
            partial last line, which a writer may be in the middle of, is left for later).
        run_id: The run to follow (a root run, or any run of a tree: then its own subtree).
        correlation_id: Instead of ``run_id``: every record whose ``correlationId`` it is.
        after: The last sequence already seen (0 at first).
        limit: The most records returned; call again with the last sequence for more.

    An unknown run (not started yet, say) has no records: the answer is ``[]``.

    Raises:
        ValueError: ``after`` < 0, ``limit`` < 1, or not exactly one of ``run_id`` and
            ``correlation_id``.
        FileNotFoundError: The file does not exist.
        TraceReadError: The source is no trace store (or of an unsupported version).
    """
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValueError(f"after must be an integer >= 0, got {after!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
    if (run_id is None) == (correlation_id is None):
        raise ValueError("give exactly one of run_id and correlation_id")
    kind = storage_kind(source)
    if correlation_id is not None:
        return _correlated(source, kind, correlation_id, after, limit)
    assert run_id is not None
    if kind == "postgres":
        from tubeless.tracing._pg_follow import since

        return since(os.fspath(source), run_id=run_id, after=after, limit=limit)
    if kind == "sqlite":
        return _sqlite_since(source, run_id, after, limit)
    return _ndjson_since(source, run_id, after, limit)


def _correlated(
    source: str | os.PathLike[str], kind: str, correlation_id: str, after: int, limit: int
) -> list[Sequenced]:
    if kind == "postgres":
        from tubeless.tracing._pg_follow import since

        return since(
            os.fspath(source), run_id=correlation_id, after=after, limit=limit, correlated=True
        )
    if kind == "sqlite":
        from tubeless.tracing._rows import record_of
        from tubeless.tracing.sqlite import TABLE, columns, query

        def work(conn: sqlite3.Connection, file: Path, version: int) -> list[Sequenced]:
            rows = conn.execute(
                f"SELECT {columns(version)} FROM {TABLE} WHERE id > ? AND correlation_id = ?"
                " ORDER BY id LIMIT ?",
                (after, correlation_id, limit),
            )
            return [(row[0], _checked(record_of(row, file), row[0], file)) for row in rows]

        return query(source, work)
    from tubeless.tracing.ndjson import iter_ndjson

    found: list[Sequenced] = []
    for sequence, record in iter_ndjson(source, allow_partial_tail=True):
        if sequence > after and record.get("correlationId") == correlation_id:
            found.append((sequence, record))
            if len(found) == limit:
                break
    return found


def _checked(record: dict[str, Any], row: int, file: Path) -> dict[str, Any]:
    from tubeless.tracing._read_checks import TraceReadError, record_problem

    problem = record_problem(record)
    if problem is not None:
        raise TraceReadError(f"row {row}: not a trace record: {problem}", path=file)
    return record


def _tree_rows(rows: Iterable[Sequenced], run_id: str, after: int, limit: int) -> list[Sequenced]:
    """The rows of ``run_id``'s tree above ``after``, learning the tree from every row read."""
    members = {run_id}
    found: list[Sequenced] = []
    for sequence, record in rows:
        member = record["runId"] in members
        if not member and record.get("parentRunId") in members:
            members.add(record["runId"])
            member = True
        if member and sequence > after:
            found.append((sequence, record))
            if len(found) == limit:
                break
    return found


def _ndjson_since(
    source: str | os.PathLike[str], run_id: str, after: int, limit: int
) -> list[Sequenced]:
    from tubeless.tracing.ndjson import iter_ndjson

    # The generator, and with it the file, is closed as soon as the answer is made.
    return _tree_rows(iter_ndjson(source, allow_partial_tail=True), run_id, after, limit)


def _sqlite_since(
    source: str | os.PathLike[str], run_id: str, after: int, limit: int
) -> list[Sequenced]:
    from tubeless.tracing._rows import record_of
    from tubeless.tracing.reader import TraceReadError, record_problem
    from tubeless.tracing.sqlite import TABLE, columns, query

    def work(conn: sqlite3.Connection, file: Path, version: int) -> list[Sequenced]:
        first = conn.execute(f"SELECT min(id) FROM {TABLE} WHERE run_id = ?", (run_id,))
        start = first.fetchone()[0]
        if start is None:
            return []
        # The tree as far as ``after``: two columns of each row from the run's first one on.
        members = {run_id}
        earlier = conn.execute(
            f"SELECT run_id, parent_run_id FROM {TABLE} WHERE id >= ? AND id <= ?"
            " AND parent_run_id IS NOT NULL ORDER BY id",
            (start, after),
        )
        for run, parent in earlier:
            if parent in members:
                members.add(run)
        rows = conn.execute(
            f"SELECT {columns(version)} FROM {TABLE} WHERE id > ? ORDER BY id",
            (max(after, start - 1),),
        )
        found: list[Sequenced] = []
        for row in rows:
            run, parent = row[2], row[4]
            if run not in members:
                if parent not in members:
                    continue
                members.add(run)
            record = record_of(row, file)
            problem = record_problem(record)
            if problem is not None:
                raise TraceReadError(f"row {row[0]}: not a trace record: {problem}", path=file)
            found.append((row[0], record))
            if len(found) == limit:
                break
        return found

    return query(source, work)
