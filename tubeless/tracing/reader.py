"""Reading stored traces back, and choosing a storage by file extension or URL.

``read_trace(path)`` returns the wire dicts of an NDJSON file (``.ndjson``, ``.jsonl``), a
SQLite store (``.sqlite``, ``.sqlite3``, ``.db``) or a Postgres store (a ``postgresql://`` or
``postgres://`` URL) in the order they were written;
``open_sink(path)`` opens a sink of the matching kind (``-`` is NDJSON on stdout) and
``write_trace(records, path)`` copies records into one. Every problem with a stored trace is a
:class:`TraceReadError` naming the file and, for NDJSON, the 1-based line.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from tubeless.errors import TRACE_INVALID
from tubeless.tracing._read_checks import (
    MAX_LINE_BYTES,
    MAX_RECORDS,
    MAX_TRACE_BYTES,
    TraceReadError,
    json_problem,
    record_problem,
)

if TYPE_CHECKING:
    from tubeless.tracing.sinks import TraceSink

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_RECORDS",
    "MAX_TRACE_BYTES",
    "NDJSON_SUFFIXES",
    "SQLITE_SUFFIXES",
    "TRACE_INVALID",
    "TraceReadError",
    "json_problem",
    "open_sink",
    "read_trace",
    "record_problem",
    "storage_kind",
    "write_trace",
]

NDJSON_SUFFIXES: Final = (".ndjson", ".jsonl")
SQLITE_SUFFIXES: Final = (".sqlite", ".sqlite3", ".db")
#: Repeats ``tubeless.tracing.postgres.URL_SCHEMES`` (that module loads the row codec).
_URL_SCHEMES: Final = ("postgresql://", "postgres://")


def storage_kind(path: str | os.PathLike[str]) -> Literal["ndjson", "sqlite", "postgres"]:
    """``"postgres"`` for a ``postgresql://``/``postgres://`` URL, else ``"ndjson"`` or
    ``"sqlite"`` by the file extension (``TraceReadError`` for others)."""
    if isinstance(path, str) and path[:13].lower().startswith(_URL_SCHEMES):
        return "postgres"
    suffix = Path(path).suffix.lower()
    if suffix in NDJSON_SUFFIXES:
        return "ndjson"
    if suffix in SQLITE_SUFFIXES:
        return "sqlite"
    accepted = ", ".join(NDJSON_SUFFIXES + SQLITE_SUFFIXES)
    raise TraceReadError(
        f"unknown trace file extension {suffix or '(none)'!r}: use {accepted}", path=path
    )


# The storages are imported when first used: a reader of NDJSON never loads sqlite3.
def read_trace(
    path: str | os.PathLike[str],
    *,
    max_bytes: int | None = MAX_TRACE_BYTES,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_records: int | None = MAX_RECORDS,
    allow_partial_tail: bool = False,
) -> list[dict[str, Any]]:
    """Every record of a stored trace, in the order written (NDJSON file, SQLite or Postgres
    store).

    Args:
        path: The trace file, or a ``postgresql://`` URL.
        max_bytes: Refuse a larger NDJSON file (``None``: no bound; lines are streamed).
        max_line_bytes: Refuse a longer NDJSON line.
        max_records: Refuse a trace with more records (``None``: no bound).
        allow_partial_tail: Skip an unterminated, unparsable last NDJSON line (a crash's).

    Raises:
        FileNotFoundError: The file does not exist.
        ConnectionError: The Postgres server cannot be reached.
        ImportError: A URL was given and psycopg is not installed.
        TraceReadError: Unknown extension, a bound exceeded, or the file is not a readable
            trace (naming the file, and the 1-based line of an NDJSON trace).
    """
    if storage_kind(path) == "postgres":
        from tubeless.tracing.postgres import read_postgres

        return read_postgres(os.fspath(path), max_records=max_records)
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.fspath(path))
    if storage_kind(path) == "ndjson":
        from tubeless.tracing.ndjson import read_ndjson

        return read_ndjson(
            path,
            max_bytes=max_bytes,
            max_line_bytes=max_line_bytes,
            max_records=max_records,
            allow_partial_tail=allow_partial_tail,
        )
    from tubeless.tracing.sqlite import read_sqlite

    return read_sqlite(path, max_records=max_records)


def open_sink(target: str | os.PathLike[str]) -> TraceSink:
    """A new sink for ``target``: NDJSON (``.ndjson``/``.jsonl``, or ``-`` for stdout), SQLite,
    or Postgres (a ``postgresql://`` or ``postgres://`` URL).

    The caller owns the sink and closes it.
    """
    from tubeless.tracing.ndjson import NdjsonSink

    if isinstance(target, str) and target == "-":
        return NdjsonSink("-")
    kind = storage_kind(target)
    if kind == "ndjson":
        return NdjsonSink(target)
    if kind == "postgres":
        from tubeless.tracing.postgres import PostgresSink

        return PostgresSink(os.fspath(target))
    from tubeless.tracing.sqlite import SqliteSink

    return SqliteSink(target)


def write_trace(records: Iterable[Mapping[str, Any]], target: str | os.PathLike[str]) -> int:
    """Export ``records`` to a new sink for ``target`` and close it; the number written.

    NDJSON files are appended to and SQLite and Postgres stores added to, like any sink would.
    """
    sink = open_sink(target)
    count = 0
    try:
        for record in records:
            sink.export(record)
            count += 1
    finally:
        sink.close()
    return count
